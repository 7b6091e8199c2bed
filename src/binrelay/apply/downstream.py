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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
T = TypeVar("T")


#: The largest packet the protocol allows; the server's own max_allowed_packet is the
#: limit that counts (PyMySQL's default of 16 MiB would refuse bigger rows client-side).
_CLIENT_MAX_PACKET = 1 << 30

_CONNECTION_ERRORS = frozenset({0, 1040, 1053, 1927, 2002, 2003, 2005, 2006, 2013, 2055})
_AUTH_ERRORS = frozenset({1044, 1045, 1142, 1143, 1227, 1370, 1698})
ROW_ERRORS = frozenset({1048, 1062, 1153, 1263, 1264, 1265, 1292, 1364, 1366, 1406, 1451,
                         1452, 1526, 1586, 1690, 3819, 4025})
PACKET_TOO_LARGE = 1153
_SCHEMA_ERRORS = frozenset({1049, 1054, 1109, 1146})
RETRY_ERRORS = frozenset({1205, 1213})
#: A downstream that refuses LOAD DATA LOCAL (MariaDB, MySQL 8.0, MariaDB 11).
LOCAL_REFUSED = frozenset({1148, 3948, 4166})
#: The hint for them when retries did not get past them.
_LOCKED = ("a downstream session holds locks the sync needs (see"
           " information_schema.INNODB_TRX); the batch is replayed on retry")


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
    #: Connections may send several statements in one round trip (:func:`run_script`):
    #: the driver's, which runs DDL and reads the catalog, and a driver's batch of keyed
    #: rows with its checkpoint (``applier._in_one_trip``), where each statement is quick
    #: and the round trips were most of the cost.  Never the Spark tasks'.
    scripts: bool = False

    def connect(self) -> Any:
        """A PyMySQL connection set up as a replica's applier session.

        ``autocommit=0``; ``foreign_key_checks=0`` (the upstream checked them, and survivors
        run in any order); ``unique_checks`` left on (REPLACE needs them); ``time_zone =
        '+00:00'`` (TIMESTAMP values arrive as UTC text); sql_mode :data:`REPLICA_SQL_MODE`;
        on MariaDB ``system_versioning_alter_history = KEEP`` (a replica's SQL thread
        alters system-versioned tables whatever the variable says) and
        ``check_constraint_checks = 0`` (a replica stores the rows a session with checks off
        logged; the others met the same constraints upstream).  Matched rather than
        changed rows are counted, so an UPDATE that finds its row reports it even when
        nothing changes.
        """
        try:
            conn = sqlclient.connect(
                host=self.host, port=self.port, user=self.user, password=self.password,
                charset="utf8mb4", autocommit=False, connect_timeout=self.connect_timeout,
                read_timeout=self.read_timeout, write_timeout=self.read_timeout,
                client_flag=CLIENT.FOUND_ROWS | (CLIENT.MULTI_STATEMENTS if self.scripts
                                                 else 0),
                max_allowed_packet=_CLIENT_MAX_PACKET,
                # (A replayed LOAD DATA's file is sent from memory: sqlclient.Connection.)
                local_infile=True,
            )
        except pymysql.MySQLError as exc:
            raise map_error(exc, f"connecting to {self.user}@{self.host}:{self.port}") from None
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SET SESSION foreign_key_checks = 0, time_zone = '+00:00', sql_mode = %s,"
                    # (Every warning of a statement listed: applier._changed_values.)
                    " max_error_count = 65535,"
                    # (A load's result line is read: applier._check_load.)
                    " lc_messages = 'en_US'"
                    + (", check_constraint_checks = 0"
                       if mariadb_at_least(conn.server_version, (10, 2, 1)) else "")
                    + (", system_versioning_alter_history = 'KEEP'"
                       if mariadb_at_least(conn.server_version, (10, 3, 4)) else ""),
                    (REPLICA_SQL_MODE,))
            conn.commit()
        except pymysql.MySQLError as exc:
            conn.close()
            raise map_error(exc, "setting up the apply session") from None
        return conn

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


class ScriptError(Exception):
    """Statement ``index`` of a script failed with ``error`` (the server ran none after it;
    those before it stand)."""

    def __init__(self, index: int, error: pymysql.MySQLError) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


def runs_scripts(conn: Any) -> bool:
    """Whether ``conn`` was opened for :func:`run_script` (``Downstream.scripts``)."""
    return bool(getattr(conn, "client_flag", 0) & CLIENT.MULTI_STATEMENTS)


def run_script(cur: Any, statements: Sequence[str | bytes]) -> list[tuple[Any, ...]]:
    """Run ``statements`` in order in one round trip (a connection that :func:`runs_scripts`)
    and return each one's rows (``()`` for a statement without a result set).

    The server runs them exactly as if each were sent alone: each is parsed in the session
    state the ones before it left (a ``SET character_set_client`` applies to the next), and
    the first that fails ends the script: :class:`ScriptError` says which.  Only the last
    may be text that binrelay did not write (an upstream statement): its end is the
    packet's, so a trailing comment or semicolon of its own cannot swallow another.
    Statements given as ``str`` are sent in the connection's character set, ``bytes`` as
    they are.
    """
    return _script(cur, statements, lambda c: tuple(c.fetchall()))


def script_counts(cur: Any, statements: Sequence[str | bytes]) -> list[tuple[int, int]]:
    """:func:`run_script` for statements that return no rows: each one's matched rows (the
    connection counts found rows) and warnings."""
    return _script(cur, statements, lambda c: (int(c.rowcount), c._result.warning_count))


def _script(cur: Any, statements: Sequence[str | bytes], take: Callable[[Any], T]) -> list[T]:
    packet = script_packet(statements, cur.connection.encoding)
    results: list[T] = []
    index = 0
    try:
        cur.execute(packet)
        results.append(take(cur))
        for index in range(1, len(statements)):
            if not cur.nextset():
                raise DownstreamError(f"the downstream answered {index} of a script's"
                                      f" {len(statements)} statements")
            results.append(take(cur))
        index = len(statements)
        if cur.nextset():
            while cur.nextset():
                pass
            raise DownstreamError(
                f"the downstream answered more than a script's {len(statements)} statements"
                " (an upstream statement held several)",
                hint="report it: a binlog statement is one statement")
    except pymysql.MySQLError as exc:
        raise ScriptError(index, exc) from exc
    return results


def script_packet(statements: Sequence[str | bytes], encoding: str) -> bytes:
    """The statements as one script's bytes: ``str`` in the connection's ``encoding``,
    ``bytes`` as they are."""
    return b";\n".join(s if isinstance(s, bytes) else s.encode(encoding) for s in statements)


Query = tuple[str, Sequence[Any] | None] | str | bytes


def run_queries(cur: Any, queries: Sequence[Query]) -> list[tuple[Any, ...]]:
    """Each query's rows (``(sql, params)`` pairs are formatted client-side): in one round
    trip on a connection that :func:`runs_scripts`, else one statement at a time.  Either
    way the first failure raises :class:`ScriptError` and the queries after it do not run.
    """
    texts = [q if isinstance(q, (str, bytes)) else cur.mogrify(q[0], q[1]) for q in queries]
    if not texts:
        return []
    if runs_scripts(cur.connection) and len(texts) > 1:
        return run_script(cur, texts)
    results = []
    for index, text in enumerate(texts):
        try:
            cur.execute(text)
        except pymysql.MySQLError as exc:
            raise ScriptError(index, exc) from exc
        results.append(tuple(cur.fetchall()))
    return results


def query_rows(cur: Any, queries: Sequence[Query]) -> list[tuple[Any, ...]]:
    """:func:`run_queries` for a caller that needs no index: the server's error as is."""
    try:
        return run_queries(cur, queries)
    except ScriptError as exc:
        raise exc.error from None


def mariadb_at_least(server_version: str, version: tuple[int, int, int]) -> bool:
    """Whether the server is MariaDB ``version`` or later: 10.2.1 has CHECK constraints
    (``check_constraint_checks``), 10.3.4 system-versioned tables (and their session
    variables)."""
    # The handshake says "5.5.5-10.11.19-MariaDB-…" (the prefix kept old clients working).
    digits = re.search(r"(\d+)\.(\d+)\.(\d+)-MariaDB", server_version, re.IGNORECASE)
    return digits is not None and tuple(map(int, digits.groups())) >= version


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


def still_open(conn: Any, idle_since: float) -> bool:
    """Whether ``conn``, unused since ``idle_since`` (monotonic), is still open: asked
    of the server after ``_PING_AFTER`` seconds (it may have restarted meanwhile); closed
    here when it is not."""
    if time.monotonic() - idle_since <= _PING_AFTER:
        return True
    try:
        conn.ping(reconnect=False)
    except pymysql.MySQLError:
        with contextlib.suppress(Exception):
            conn.close()
        return False
    return True


def _take_idle(downstream: Downstream) -> Any:
    idle = _IDLE.get(downstream)
    while idle:
        try:
            conn, returned = idle.pop()
        except IndexError:  # another thread took the last one
            break
        if still_open(conn, returned):
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
    position: tuple[int, ...] | None = None, hint: str | None = None,
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
        hint = hint or _LOCKED
    message = f"downstream error while {action}: {server_message(exc)} (error {code})"
    return cls(message, table=None if table is None else str(table), position=position,
               errno=code, hint=hint)


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


@contextlib.contextmanager
def escaping_for_applier(conn: Any) -> Iterator[None]:
    """PyMySQL escapes strings for the sql_mode of the server's last reply (with
    NO_BACKSLASH_ESCAPES or not: an upstream session's context may have set it): within
    this, for the applier's own session (``REPLICA_SQL_MODE``: backslashes escape), where
    statements rendered now run once the owed reset has run."""
    status = getattr(conn, "server_status", None)
    if status is None:
        yield
        return
    conn.server_status = status & ~SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES
    try:
        yield
    finally:
        conn.server_status = status


def rollback_quietly(conn: Any) -> bool:
    """Roll back; False when the server could not be told (if the connection is gone, the
    server rolls back on its own)."""
    try:
        conn.rollback()
    except pymysql.MySQLError:
        return False
    return True


