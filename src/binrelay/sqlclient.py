"""Opening a client connection to a MySQL-family server: the one place that calls PyMySQL's
``connect``.

PyMySQL 1.2 negotiates TLS when the server offers it ("preferred", as the ``mysql`` client
does), and to be ready for that it builds a new ``ssl.SSLContext`` for every connection,
loading the system's whole CA bundle: about 18 ms and ~1 MB of short-lived C allocations per
connection.  A relay that reconnects after each upstream restart fragmented glibc's heap
that way (RSS 33 -> 41 MiB over 200 restarts, all of it free memory), and every apply
connection paid the 18 ms.  The preferred mode verifies no certificate, so one context
serves every connection of the process; it is built on first use.

``LOAD DATA LOCAL`` (a statement-format LOAD DATA replayed downstream) sends bytes held in
memory under the name the statement gives (:meth:`Connection.offering`), never a file:
PyMySQL's own handler would send any file of this machine the server names.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import pymysql
import pymysql.connections
from pymysql import err
from pymysql.constants import CR
from pymysql.protocol import LoadLocalPacketWrapper

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
    """PyMySQL's connection, sharing the process's "TLS if offered" context; the data a
    ``LOAD DATA LOCAL`` may read is only what :meth:`offering` holds (open with
    ``local_infile=True``)."""

    _offered: dict[bytes, bytes | bytearray | IO[bytes]] | None = None
    #: The server refused a LOAD DATA LOCAL: the applier writes rows by REPLACE on it;
    #: the tables whose loads it did not take (``applier._check_load``), the same.
    loads_refused = False
    refused_loads: frozenset[Any] = frozenset()

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, dict) and not sslp:
            return _preferred_context()
        return super()._create_ssl_ctx(sslp)  # type: ignore[no-any-return]

    @contextmanager
    def offering(self, name: str, data: bytes | bytearray | IO[bytes]) -> Iterator[None]:
        """While inside, a ``LOAD DATA LOCAL INFILE 'name'`` reads ``data`` (bytes, or a
        binary file read from its start)."""
        self._offered = {name.encode(): data}
        try:
            yield
        finally:
            self._offered = None

    def _read_query_result(self, unbuffered: bool = False) -> int:
        # PyMySQL's, with the result class that answers a LOAD DATA LOCAL from memory.
        self._result = None
        result = _Result(self)
        if unbuffered:
            result.init_unbuffered_query()
        else:
            result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows  # type: ignore[no-any-return]


#: Bytes a LOAD DATA LOCAL packet carries (PyMySQL's size).
_CHUNK = 16 * 1024


class _Result(pymysql.connections.MySQLResult):
    def _read_load_local_packet(self, first_packet: Any) -> None:
        conn = self.connection
        name = LoadLocalPacketWrapper(first_packet).filename
        offered = (getattr(conn, "_offered", None) or {}) if conn._local_infile else {}
        data = offered.get(name)
        try:
            if data is not None:
                for chunk in _chunks(data):
                    conn.write_packet(chunk)
        except BaseException:
            # A lost connection (PyMySQL closed it) stays the error raised; on a live one
            # the exchange is ended first.
            if conn._sock is not None:
                with contextlib.suppress(Exception):
                    conn.write_packet(b"")
                    conn._read_packet()
            raise
        conn.write_packet(b"")  # the end of the file (an empty one when not offered)
        ok_packet = conn._read_packet()  # the server's error, if any, raises here
        if data is None:
            raise err.OperationalError(
                CR.CR_UNKNOWN_ERROR,
                f"the server asked for file {name!r}, which this client did not offer")
        if not ok_packet.is_ok_packet():
            raise err.OperationalError(CR.CR_COMMANDS_OUT_OF_SYNC, "Commands Out of Sync")
        self._read_ok_packet(ok_packet)


def _chunks(data: bytes | bytearray | IO[bytes]) -> Iterator[bytes | bytearray]:
    if isinstance(data, bytes | bytearray):
        for start in range(0, len(data), _CHUNK):
            yield data[start:start + _CHUNK]
        return
    data.seek(0)  # (a statement retried sends it again)
    while chunk := data.read(_CHUNK):
        yield chunk


def connect(**kwargs: Any) -> Connection:
    """``pymysql.connect`` with the shared TLS context; same arguments, same errors."""
    return Connection(**kwargs)
