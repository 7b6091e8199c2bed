"""Writing to the downstream: sessions, plan parts, DDL, strict-mode transactions.

Spark tasks call these with a connection from :meth:`Downstream.connect` (a ``Downstream``
is a picklable description: ship it, connect on the executor).

Errors are ours (``binrelay.errors.DownstreamError`` and subclasses), one line, naming the
table and the relay position of the row when there is one. The password is never part of a
message or a repr.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pymysql
from pymysql.constants import CLIENT

from binrelay import failpoints, sqlclient
from binrelay.apply.changes import Change, TableRef
from binrelay.apply.checkpoint import CheckpointUpdate, TaskLedger, advance_in_transaction
from binrelay.apply.ddl_journal import SKIP, DdlJournal, catalog_print, decide
from binrelay.apply.plan import FK_LINKED, Delete, KeyedOp, PlanPart, Upsert
from binrelay.apply.sql import (
    MAX_STATEMENT_BYTES,
    MAX_STATEMENT_ROWS,
    REPLICA_SQL_MODE,
    Statement,
    ddl_kind,
    delete_keys,
    quote_ident,
    rename_targets,
    replace_rows,
    snippet,
    value_size,
)
from binrelay.apply.statement_sql import reset_statements
from binrelay.apply.versioning import HistoryReplay
from binrelay.errors import (
    ApplyError,
    DownstreamAuthError,
    DownstreamConnectionError,
    DownstreamDdlError,
    DownstreamError,
    DownstreamRowError,
    DownstreamSchemaError,
)

log = logging.getLogger(__name__)

__all__ = [
    "REPLICA_SQL_MODE",
    "DdlResult",
    "Downstream",
    "apply_ddl",
    "apply_plan_part",
    "apply_transaction",
    "part_statements",
]

#: The largest packet the protocol allows; the server's own max_allowed_packet is the
#: limit that counts (PyMySQL's default of 16 MiB would refuse bigger rows client-side).
_CLIENT_MAX_PACKET = 1 << 30

_CONNECTION_ERRORS = frozenset({0, 1040, 1053, 1927, 2002, 2003, 2005, 2006, 2013, 2055})
_AUTH_ERRORS = frozenset({1044, 1045, 1142, 1143, 1227, 1370, 1698})
_ROW_ERRORS = frozenset({1048, 1062, 1153, 1263, 1264, 1265, 1292, 1364, 1366, 1406, 1451,
                         1452, 1586, 1690, 3819, 4025})
_PACKET_TOO_LARGE = 1153
_SCHEMA_ERRORS = frozenset({1049, 1054, 1109, 1146})
_RETRY_ERRORS = frozenset({1205, 1213})


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


#: Idle apply connections of this process, one per downstream.  Spark reuses its Python
#: workers, so a task of the next batch finds the connection of the last: a new one costs
#: a TCP and (PyMySQL's default) TLS handshake and loading the system's CA certificates,
#: tens of milliseconds of CPU per batch when following a live upstream.
_IDLE: dict[Downstream, Any] = {}


@contextlib.contextmanager
def pooled_connection(downstream: Downstream) -> Iterator[Any]:
    """A connection from :meth:`Downstream.connect`, kept for the next caller of this
    process when the block ends normally (no transaction is left open by the appliers),
    closed when it raises."""
    conn = _IDLE.pop(downstream, None)
    if conn is not None:
        try:
            conn.ping(reconnect=False)
        except pymysql.MySQLError:
            with contextlib.suppress(Exception):
                conn.close()
            conn = None
    if conn is None:
        conn = downstream.connect()
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(Exception):
            conn.close()
        raise
    old = _IDLE.pop(downstream, None)
    if old is not None:
        with contextlib.suppress(Exception):
            old.close()
    _IDLE[downstream] = conn


# ---- errors -----------------------------------------------------------------------------


def _errno(exc: BaseException) -> int:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0


def _server_message(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    text = str(args[1]) if len(args) > 1 else str(exc)
    return " ".join(text.split()) or type(exc).__name__


def map_error(
    exc: BaseException, action: str, *, table: TableRef | None = None,
    position: tuple[int, ...] | None = None,
) -> DownstreamError:
    code = _errno(exc)
    cls: type[DownstreamError] = DownstreamError
    if code in _CONNECTION_ERRORS or isinstance(exc, pymysql.err.InterfaceError):
        cls = DownstreamConnectionError
    elif code in _AUTH_ERRORS:
        cls = DownstreamAuthError
    elif code in _ROW_ERRORS:
        cls = DownstreamRowError
    elif code in _SCHEMA_ERRORS:
        cls = DownstreamSchemaError
    elif code in _RETRY_ERRORS:
        cls = DownstreamConnectionError
    message = f"downstream error while {action}: {_server_message(exc)} (error {code})"
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


def _rollback_quietly(conn: Any) -> None:
    # If the connection is gone, the server rolls back on its own.
    with contextlib.suppress(pymysql.MySQLError):
        conn.rollback()


# ---- running statements -----------------------------------------------------------------


def _execute(cur: Any, st: Statement) -> int:
    if st.params is None:
        return int(cur.execute(st.sql))
    return int(cur.execute(st.sql, st.params))


def _packet_error(st: Statement, size: int, max_packet: int) -> DownstreamRowError:
    return DownstreamRowError(
        f"a row of {size} bytes does not fit the downstream's max_allowed_packet"
        f" ({max_packet} bytes)", table=None if st.table is None else str(st.table),
        position=st.positions[0] if st.positions else None,
        hint="raise max_allowed_packet on the downstream (SET GLOBAL max_allowed_packet = …,"
             " and in its configuration) to at least the upstream's, then run the sync again")


def _check_packet(cur: Any, st: Statement, max_packet: int | None) -> None:
    """Refuse, with a clear message, a statement the server would cut off (it answers
    with a lost connection, which looks like an outage)."""
    if max_packet is None or st.params is None or len(st.positions) > 1:
        return  # multi-row statements are sized to fit; only one row can be too big
    if sum(map(value_size, st.params)) + len(st.sql) < max_packet - _PACKET_SLACK:
        return
    size = len(cur.mogrify(st.sql, st.params).encode("utf-8", "surrogateescape"))
    if size > max_packet - _PACKET_SLACK:
        raise _packet_error(st, size, max_packet)


#: Room for the packet's own header and the command byte.
_PACKET_SLACK = 1024


def run_statement(cur: Any, st: Statement, singles: Callable[[], Iterable[Statement]] | None = None,
         action: str = "applying rows", max_packet: int | None = None) -> None:
    """Execute ``st``; on a rejected row, find which one (``singles`` re-states the rows one
    per statement; the failed statement was rolled back, the transaction is still open and
    is rolled back by the caller). Retryable errors (deadlock, lock wait) pass through raw."""
    first = st.positions[0] if st.positions else None
    _check_packet(cur, st, max_packet)
    try:
        matched = _execute(cur, st)
    except pymysql.MySQLError as exc:
        code = _errno(exc)
        if code in _RETRY_ERRORS:
            raise
        if code == _PACKET_TOO_LARGE and max_packet is not None:
            raise _packet_error(st, len(st.sql), max_packet) from None
        if code in _ROW_ERRORS and singles is not None and len(st.positions) > 1:
            for single in singles():
                run_statement(cur, single, None, action, max_packet)
            action += f" (one of {len(st.positions)} rows from this position on)"
        raise map_error(exc, action, table=st.table, position=first) from None
    if st.expect_rows is not None and matched != st.expect_rows:
        raise DownstreamRowError(
            f"downstream diverged: the row to {st.sql.split(None, 1)[0].lower()} matched"
            f" {matched} rows, not {st.expect_rows}",
            table=None if st.table is None else str(st.table), position=first)


T = TypeVar("T")


def _transaction(conn: Any, body: Callable[[Any], T | None], *, action: str,
                 retries: int) -> T | None:
    """Run ``body(cursor)`` in one downstream transaction and commit it; deadlocks and lock
    wait timeouts are retried (the body must be safe to run again after a rollback). A body
    that returns None is rolled back instead of committed."""
    attempt = 0
    while True:
        try:
            with conn.cursor() as cur:
                result = body(cur)
            if result is None:
                conn.rollback()
            else:
                conn.commit()
            return result
        except ApplyError:
            _rollback_quietly(conn)
            raise
        except pymysql.MySQLError as exc:
            _rollback_quietly(conn)
            if _errno(exc) in _RETRY_ERRORS and attempt < retries:
                attempt += 1
                time.sleep(min(0.05 * 2 ** attempt, 2.0))
                continue
            raise map_error(exc, action) from None


# ---- the keyed path and ordered tables --------------------------------------------------


def _keyed_statements(
    ops: Sequence[KeyedOp], max_rows: int, max_bytes: int,
) -> list[tuple[Statement, Callable[[], list[Statement]]]]:
    deletes: dict[tuple[TableRef, tuple[str, ...]], list[Delete]] = {}
    upserts: dict[tuple[TableRef, tuple[str, ...]], list[Upsert]] = {}
    for op in ops:
        if isinstance(op, Delete):
            deletes.setdefault((op.table, op.key_columns), []).append(op)
        else:
            upserts.setdefault((op.table, op.columns), []).append(op)
    out: list[tuple[Statement, Callable[[], list[Statement]]]] = []

    def deleting(table: TableRef, cols: tuple[str, ...], group: Sequence[Delete],
                 rows: int) -> list[Statement]:
        return delete_keys(table, cols, [d.key_values for d in group],
                           [d.position for d in group], max_rows=rows, max_bytes=max_bytes)

    def replacing(table: TableRef, cols: tuple[str, ...], group: Sequence[Upsert],
                  rows: int) -> list[Statement]:
        return replace_rows(table, cols, [u.row for u in group], [u.position for u in group],
                            max_rows=rows, max_bytes=max_bytes)

    # Any order is correct (docs/apply.md); deletes first only makes REPLACE conflicts rarer.
    for build, groups in ((deleting, deletes), (replacing, upserts)):
        for (table, cols), group in sorted(groups.items(), key=lambda kv: kv[0]):
            group.sort(key=lambda op: op.position)
            start = 0
            for st in build(table, cols, group, max_rows):  # type: ignore[arg-type]
                chunk = group[start:start + len(st.positions)]
                start += len(st.positions)
                out.append((st, lambda t=table, c=cols, g=chunk, b=build: b(t, c, g, 1)))
    return out


def part_statements(
    part: PlanPart, *, max_rows: int = MAX_STATEMENT_ROWS,
    max_bytes: int = MAX_STATEMENT_BYTES,
) -> list[Statement]:
    """What :func:`apply_plan_part` sends, in order (for inspection and tests)."""
    statements = [st for st, _ in _keyed_statements(part.ops, max_rows, max_bytes)]
    if part.ordered is not None:
        statements += ordered_statements(part.ordered.changes,
                                         fk=part.ordered.reason == FK_LINKED)
    return statements


def statement_bytes(max_packet: int | None) -> int:
    """How big a multi-row statement may get for a server with this max_allowed_packet."""
    if max_packet is None:
        return MAX_STATEMENT_BYTES
    return max(4096, min(MAX_STATEMENT_BYTES, max_packet - 64 * 1024))


def ordered_statements(changes: Iterable[Change], *, fk: bool = False) -> list[Statement]:
    """One table's (or one foreign key group's) changes as statements in relay order.

    With ``fk`` (a group linked by foreign keys) the session's foreign key checks follow
    each change's upstream flag, as a replica applies it, so that cascades happen here as
    they did upstream; they are off again at the end.
    """
    out: list[Statement] = []
    checks: bool | None = None  # unknown: a retried attempt may have left them on
    history = HistoryReplay()
    for change in changes:
        if fk and change.fk_checks != checks:
            checks = change.fk_checks
            out.append(_FK_ON if checks else _FK_OFF)
        out.extend(history.statements(change))
    if checks:
        out.append(_FK_OFF)
    return out + history.finish()


_FK_ON = Statement("SET SESSION foreign_key_checks = 1")
_FK_OFF = Statement("SET SESSION foreign_key_checks = 0")


def apply_plan_part(
    conn: Any, part: PlanPart, *, ledger: TaskLedger | None = None,
    max_rows: int = MAX_STATEMENT_ROWS, max_bytes: int | None = None,
    retries: int = 5, max_packet: int | None = None,
) -> bool:
    """Apply one task's work in one downstream transaction. Returns False if ``ledger``
    shows the task already committed (nothing done), True otherwise.

    Keyed survivors are idempotent: running the part again, before or after other parts,
    gives the same result, with or without a ledger. An ordered table is not, so its part
    needs a ledger: the claim and the data commit together, so it runs exactly once.
    """
    if part.ordered is not None and ledger is None:
        raise ApplyError("an ordered task needs a task ledger to run exactly once",
                         table=str(part.ordered.table),
                         hint="pass ledger=TaskLedger(pipeline, batch_id)")
    if max_bytes is None:
        max_bytes = statement_bytes(max_packet)
    keyed = _keyed_statements(part.ops, max_rows, max_bytes)
    ordered = [] if part.ordered is None else ordered_statements(
        part.ordered.changes, fk=part.ordered.reason == FK_LINKED)

    def body(cur: Any) -> bool | None:
        if ledger is not None and not _claim(cur, ledger, part.task_id):
            return None
        for st, singles in keyed:
            run_statement(cur, st, singles, action, max_packet)
        for st in ordered:
            run_statement(cur, st, None, action, max_packet)
        return True

    action = f"applying task {part.task_id}"
    try:
        done = _transaction(conn, body, action=action, retries=retries)
    finally:
        if part.ordered is not None and part.ordered.reason == FK_LINKED:
            _restore_fk_checks(conn)
    return done is not None


def _restore_fk_checks(conn: Any) -> None:
    # A failed group replay may stop with checks on; the pooled session must not keep them.
    with contextlib.suppress(pymysql.MySQLError), conn.cursor() as cur:
        cur.execute(_FK_OFF.sql)


def _claim(cur: Any, ledger: TaskLedger, task_id: str) -> bool:
    try:
        cur.execute(ledger.claim_sql(), (ledger.pipeline, ledger.batch_id, task_id))
    except pymysql.err.IntegrityError as exc:
        if _errno(exc) == 1062:
            return False
        raise
    return True


# ---- strict mode ------------------------------------------------------------------------


def apply_transaction(
    conn: Any, changes: Sequence[Change], checkpoint_update: CheckpointUpdate, *,
    retries: int = 5,
) -> bool:
    """Strict mode: one upstream transaction and its checkpoint row in one downstream
    transaction. The checkpoint must be at ``checkpoint_update.before``; if it is already
    at ``.after`` the transaction was applied before and is skipped (returns False).

    Changes are replayed one by one in relay order (INSERT, UPDATE/DELETE of the row the
    before image names, which must exist), so partial row images are fine here. On any
    error nothing of it stays, neither data nor checkpoint.
    """
    statements = ordered_statements(sorted(changes, key=lambda c: c.position), fk=True)

    def body(cur: Any) -> bool | None:
        if not advance_in_transaction(cur, checkpoint_update):
            return None
        for st in statements:
            run_statement(cur, st)
        return True

    done = _transaction(conn, body, action=f"applying the transaction ending at "
                        f"{checkpoint_update.after}", retries=retries)
    return done is not None


# ---- DDL --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DdlResult:
    """``applied`` False: the server said the DDL had already happened (``errno``)."""

    applied: bool
    errno: int | None = None
    message: str = ""


def apply_ddl(
    conn: Any, schema: str | None, statement: str, *, replay: bool = True,
    position: tuple[int, ...] | None = None, setup: Sequence[str] = (),
    raw: bytes | None = None, journal: DdlJournal | None = None,
) -> DdlResult:
    """Run an upstream DDL statement as is, with ``schema`` as the default database.

    ``setup``: SET statements giving the upstream session's context (sql_mode, time zone,
    character sets, timestamp: ``apply.statement_sql``), run first and undone after;
    ``raw``: the statement's exact bytes in that context's client character set.

    With ``replay`` (the DDL may have run before a crash, which a DDL's implicit commit
    allows), an error that says it already happened counts as done: per statement kind,
    "exists" for CREATE, "unknown"/"doesn't exist"/"can't drop" for DROP, duplicate or
    unknown column/key for ALTER, and a missing source table for RENAME only if every
    renamed-to table exists. Any other error is a DownstreamDdlError.

    ``journal`` (with ``position``): the DDL is journaled before it runs, and a DDL the
    journal shows ran before a crash is not run again (``apply.ddl_journal``).
    """
    _rollback_quietly(conn)  # nothing of a batch may ride on the DDL's implicit commit
    if journal is not None and position is not None:
        if _ran_before(conn, journal, schema, statement, position):
            return DdlResult(False, None, "it ran before the crash (DDL journal)")
        key = ".".join(map(str, position))
        failpoints.hit("ddl-journaled", key)
        try:
            done = _run_ddl(conn, schema, statement, replay=replay, position=position,
                            setup=setup, raw=raw)
        except DownstreamError:
            # The server refused the DDL and undid it: a later run decides afresh.  On a
            # lost connection this fails too, the row stays, and the catalog decides then.
            with contextlib.suppress(pymysql.MySQLError), conn.cursor() as cur:
                journal.forget(cur, position)
                conn.commit()
            raise
        failpoints.hit("ddl-applied", key)
        return done
    return _run_ddl(conn, schema, statement, replay=replay, position=position, setup=setup,
                    raw=raw)


def _ran_before(conn: Any, journal: DdlJournal, schema: str | None, statement: str,
                position: tuple[int, ...]) -> bool:
    """True when the journal and the catalog show the DDL ran before a crash; otherwise
    journal it (committed) and return False."""
    try:
        with conn.cursor() as cur:
            now = catalog_print(cur, statement, schema)
            recorded, verdict = journal.recorded(cur, position)
            if decide(statement, recorded, verdict, now, position=position,
                      journal=journal) == SKIP:
                conn.commit()
                log.info("DDL ran before the crash: not run again", extra={
                    "position": ".".join(map(str, position)), "statement": snippet(statement)})
                return True
            journal.begin(cur, position, now.digest, statement)
        conn.commit()
    except pymysql.MySQLError as exc:
        _rollback_quietly(conn)
        raise map_error(exc, f"journaling DDL {snippet(statement)!r}",
                        position=position) from None
    return False


def _run_ddl(conn: Any, schema: str | None, statement: str, *, replay: bool,
             position: tuple[int, ...] | None, setup: Sequence[str],
             raw: bytes | None) -> DdlResult:
    kind = ddl_kind(statement)
    with conn.cursor() as cur:
        if schema:
            try:
                cur.execute("USE " + quote_ident(schema))
            except pymysql.MySQLError as exc:
                # A database-level DDL may run where its database is gone (or not yet made).
                if _errno(exc) != 1049 or kind.name not in ("create database",
                                                           "drop database"):
                    raise _ddl_error(exc, schema, statement, position) from None
        try:
            for sql in setup:
                if not sql.upper().startswith("USE "):  # done above, tolerantly
                    cur.execute(sql)
            cur.execute(statement if raw is None else raw)
        except pymysql.MySQLError as exc:
            code = _errno(exc)
            if replay and code in kind.done_errors and (
                    code != 1146 or _renamed_already(cur, statement, schema)):
                return DdlResult(False, code, _server_message(exc))
            raise _ddl_error(exc, schema, statement, position) from None
        finally:
            if setup:
                with contextlib.suppress(pymysql.MySQLError):
                    for sql in reset_statements():
                        cur.execute(sql)
    conn.commit()
    return DdlResult(True)


def _renamed_already(cur: Any, statement: str, schema: str | None) -> bool:
    targets = rename_targets(statement, schema)
    if not targets:
        return False
    for target in targets:
        cur.execute("SELECT 1 FROM information_schema.TABLES"
                    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (target.schema, target.table))
        if cur.fetchone() is None:
            return False
    return True


def _ddl_error(exc: BaseException, schema: str | None, statement: str,
               position: tuple[int, ...] | None) -> DownstreamError:
    mapped = map_error(exc, f"running DDL {snippet(statement)!r} in schema {schema!r}",
                        position=position)
    if type(mapped) in (DownstreamError, DownstreamSchemaError, DownstreamRowError):
        return DownstreamDdlError(mapped.reason, position=position, errno=mapped.errno)
    return mapped


