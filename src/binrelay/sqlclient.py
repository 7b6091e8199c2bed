"""Opening a client connection to a MySQL-family server: the one place that calls PyMySQL's
``connect``.

PyMySQL 1.2 negotiates TLS when the server offers it ("preferred", as the ``mysql`` client
does), and to be ready for that it builds a new ``ssl.SSLContext`` for every connection,
loading the system's whole CA bundle: about 18 ms and ~1 MB of short-lived C allocations per
connection.  A relay that reconnects after each upstream restart fragmented glibc's heap
that way (RSS 33 -> 41 MiB over 200 restarts, all of it free memory), and every apply
connection paid the 18 ms.  The preferred mode verifies no certificate, so one context
serves every connection of the process; it is built on first use.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import pymysql
import pymysql.connections

_lock = threading.Lock()
_preferred: ssl.SSLContext | None = None


def _preferred_context() -> ssl.SSLContext:
    """The context PyMySQL builds for "TLS if offered": no CA, no hostname check."""
    global _preferred
    with _lock:
        if _preferred is None:
            ctx = ssl.create_default_context()
            ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            _preferred = ctx
        return _preferred


class Connection(pymysql.connections.Connection):
    """PyMySQL's connection, sharing the process's "TLS if offered" context."""

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, dict) and not sslp:
            return _preferred_context()
        return super()._create_ssl_ctx(sslp)  # type: ignore[no-any-return]


def connect(**kwargs: Any) -> Connection:
    """``pymysql.connect`` with the shared TLS context; same arguments, same errors."""
    return Connection(**kwargs)
