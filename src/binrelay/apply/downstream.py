"""The downstream: where to apply (:class:`Downstream`, picklable: ship it, connect on the
executor), one pooled connection per process, and the map from server errors to ours (one
line, naming the table and the relay position of the row when there is one).  The password
is never part of a message or a repr.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysql.constants import CLIENT, SERVER_STATUS

from binrelay import sqlclient
from binrelay.apply.changes import TableRef
from binrelay.apply.sql import (
    REPLICA_SQL_MODE,
)
from binrelay.errors import (
    DownstreamAuthError,
    DownstreamConnectionError,
    DownstreamError,
    DownstreamRowError,
    DownstreamSchemaError,
)

log = logging.getLogger(__name__)


#: The largest packet the protocol allows; the server's own max_allowed_packet is the
#: limit that counts (PyMySQL's default of 16 MiB would refuse bigger rows client-side).
_CLIENT_MAX_PACKET = 1 << 30

_CONNECTION_ERRORS = frozenset({0, 1040, 1053, 1927, 2002, 2003, 2005, 2006, 2013, 2055})
_AUTH_ERRORS = frozenset({1044, 1045, 1142, 1143, 1227, 1370, 1698})
ROW_ERRORS = frozenset({1048, 1062, 1153, 1263, 1264, 1265, 1292, 1364, 1366, 1406, 1451,
                         1452, 1586, 1690, 3819, 4025})
PACKET_TOO_LARGE = 1153
_SCHEMA_ERRORS = frozenset({1049, 1054, 1109, 1146})
RETRY_ERRORS = frozenset({1205, 1213})


@dataclass(frozen=True)
class Downstream:
    """Where to apply: connection parameters only (picklable; the password is not shown)."""

    host: str
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    connect_timeout: float = 10.0
    #: Seconds a statement may take before the connection is deemed lost (None: no limit).
    read_timeout: float | None = None

    def connect(self) -> Any:
        """A PyMySQL connection set up as a replica's applier session.

        ``autocommit=0``; ``foreign_key_checks=0`` (the upstream checked them, and survivors
        run in any order); ``unique_checks`` left on (REPLACE needs them); ``time_zone =
        '+00:00'`` (TIMESTAMP values arrive as UTC text); sql_mode :data:`REPLICA_SQL_MODE`;
        on MariaDB ``system_versioning_alter_history = KEEP`` (a replica's SQL thread
        alters system-versioned tables whatever the variable says).  Matched rather than
        changed rows are counted, so an UPDATE that finds its row reports it even when
        nothing changes.
        """
        try:
            conn = sqlclient.connect(
                host=self.host, port=self.port, user=self.user, password=self.password,
                charset="utf8mb4", autocommit=False, connect_timeout=self.connect_timeout,
                read_timeout=self.read_timeout, write_timeout=self.read_timeout,
                client_flag=CLIENT.FOUND_ROWS, max_allowed_packet=_CLIENT_MAX_PACKET,
            )
        except pymysql.MySQLError as exc:
            raise map_error(exc, f"connecting to {self.user}@{self.host}:{self.port}") from None
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SET SESSION foreign_key_checks = 0, time_zone = '+00:00', sql_mode = %s"
                    + (", system_versioning_alter_history = 'KEEP'"
                       if _has_versioning(conn.server_version) else ""),
                    (REPLICA_SQL_MODE,))
            conn.commit()
        except pymysql.MySQLError as exc:
            conn.close()
            raise map_error(exc, "setting up the apply session") from None
        return conn

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def _has_versioning(server_version: str) -> bool:
    """MariaDB 10.3.4+ has system-versioned tables (and their session variables)."""
    # The handshake says "5.5.5-10.11.19-MariaDB-…" (the prefix kept old clients working).
    digits = re.search(r"(\d+)\.(\d+)\.(\d+)-MariaDB", server_version, re.IGNORECASE)
    return digits is not None and tuple(map(int, digits.groups())) >= (10, 3, 4)


#: Idle apply connections of this process, per downstream (most recently returned last).
#: Spark reuses its Python workers, so a task of the next batch finds the connections of
#: the last: a new one costs a TCP and (PyMySQL's default) TLS handshake and loading the
#: system's CA certificates, tens of milliseconds of CPU per batch when following a live
#: upstream.  A worker applying several apply tasks at once (``spark.tasks.apply_lanes``)
#: keeps one per task, up to ``_KEEP_IDLE``.
_IDLE: dict[Downstream, list[tuple[Any, float]]] = {}
_KEEP_IDLE = 8
#: A connection idle longer than this (seconds) is pinged before it is lent again (the
#: server may have closed it: wait_timeout, a restart).  One returned sooner is lent as it
#: is: a round trip per batch saved, and if the server went away meanwhile, the first
#: statement fails as a lost connection, which the sync retries from its checkpoint.
_PING_AFTER = 1.0


def _take_idle(downstream: Downstream) -> Any:
    idle = _IDLE.get(downstream)
    while idle:
        try:
            conn, returned = idle.pop()
        except IndexError:  # another thread took the last one
            break
        if time.monotonic() - returned <= _PING_AFTER:
            return conn
        try:
            conn.ping(reconnect=False)
        except pymysql.MySQLError:
            with contextlib.suppress(Exception):
                conn.close()
            continue
        return conn
    return None


@contextlib.contextmanager
def pooled_connection(downstream: Downstream) -> Iterator[Any]:
    """A connection from :meth:`Downstream.connect`, kept for the next caller of this
    process when the block ends normally (no transaction is left open by the appliers),
    closed when it raises.  Safe to use from several threads (list operations are atomic
    under the GIL)."""
    conn = _take_idle(downstream)
    if conn is None:
        conn = downstream.connect()
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(Exception):
            conn.close()
        raise
    idle = _IDLE.setdefault(downstream, [])
    idle.append((conn, time.monotonic()))
    while len(idle) > _KEEP_IDLE:
        try:
            old, _ = idle.pop(0)
        except IndexError:
            break
        with contextlib.suppress(Exception):
            old.close()



# ---- errors -----------------------------------------------------------------------------


def errno_of(exc: BaseException) -> int:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0


def server_message(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    text = str(args[1]) if len(args) > 1 else str(exc)
    return " ".join(text.split()) or type(exc).__name__


def map_error(
    exc: BaseException, action: str, *, table: TableRef | None = None,
    position: tuple[int, ...] | None = None,
) -> DownstreamError:
    code = errno_of(exc)
    cls: type[DownstreamError] = DownstreamError
    if code in _CONNECTION_ERRORS or isinstance(exc, pymysql.err.InterfaceError):
        cls = DownstreamConnectionError
    elif code in _AUTH_ERRORS:
        cls = DownstreamAuthError
    elif code in ROW_ERRORS:
        cls = DownstreamRowError
    elif code in _SCHEMA_ERRORS:
        cls = DownstreamSchemaError
    elif code in RETRY_ERRORS:
        cls = DownstreamConnectionError
    message = f"downstream error while {action}: {server_message(exc)} (error {code})"
    return cls(message, table=None if table is None else str(table), position=position,
               errno=code)


def downstream_lost(exc: BaseException) -> DownstreamConnectionError | None:
    """``exc`` as a lost or refused downstream connection (worth waiting for and running
    the batch again), or None when it is anything else (schema, constraint, bug)."""
    if isinstance(exc, DownstreamConnectionError):
        return exc
    if isinstance(exc, pymysql.MySQLError):
        mapped = map_error(exc, "talking to the downstream")
        if isinstance(mapped, DownstreamConnectionError):
            return mapped
    return None


def in_transaction(conn: Any) -> bool:
    """Whether the server said, in its last reply, that a transaction is open (True when
    there is no such reply to go by)."""
    status = getattr(conn, "server_status", None)
    return status is None or bool(status & SERVER_STATUS.SERVER_STATUS_IN_TRANS)


def rollback_quietly(conn: Any) -> None:
    # If the connection is gone, the server rolls back on its own.
    with contextlib.suppress(pymysql.MySQLError):
        conn.rollback()


