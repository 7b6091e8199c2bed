"""Replaying upstream transactions as they are: statements with their session context and
row changes, one by one, in relay order, on one connection.

This is the path for what the concurrent apply cannot reorder (DDL, statement-format DML,
``CREATE TABLE ... SELECT``, XA, strict mode).  A statement runs after the SET statements
that restore the upstream session's context (``apply.statement_sql``), from its exact
bytes, and the applier's own session settings are restored right after it.  Row changes
run with the upstream's foreign key checks, as a replica applies them.

The caller commits (with the checkpoint, so that the replay happens once); a statement
that commits implicitly (DDL) runs with the replay tolerance of :func:`apply_ddl`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import pymysql

from binrelay.apply.applier import ordered_statements, run_statement
from binrelay.apply.changes import Change, TableRef
from binrelay.apply.ddl import LeftContext, apply_ddl
from binrelay.apply.ddl_journal import DdlJournal
from binrelay.apply.downstream import (
    LOCAL_REFUSED,
    Downstream,
    errno_of,
    map_error,
    rollback_quietly,
    still_open,
)
from binrelay.apply.sql import (
    TRIGGER_EVENTS,
    TablesGone,
    creates_by_select,
    event_ddl,
    events_fired,
    name_spelled,
    quote_table,
    snippet,
    tables_gone,
    trigger_ddl,
)
from binrelay.apply.statement_sql import reset_statements, sets_pseudo_thread
from binrelay.binlog.txn import is_savepoint_statement
from binrelay.errors import UnfaithfulApplyError

__all__ = ["Action", "ReplaySession", "SessionStatement", "SkippedTriggers", "replay_actions"]

log = logging.getLogger(__name__)

#: ER_SPECIFIC_ACCESS_DENIED_ERROR: "you need (at least one of) the ... privilege(s)".
_NEEDS_PRIVILEGE = 1227
#: A statement's table is missing downstream (1146): the usual hint, and the case of a
#: statement-format upstream's temporary tables, which live only as long as the session.
_LOST_TEMPORARY = (
    "create the table downstream as the upstream has it and run again; if it is an upstream"
    " session's temporary table, it was lost with the sync's downstream session (a restart):"
    " resynchronise the tables that session wrote, and keep temporary tables out of the"
    " binlog upstream (binlog_format=ROW)")
#: The largest wait_timeout (seconds) MariaDB and MySQL take.
_LONGEST_WAIT = 31_536_000


class ReplaySession:
    """The one downstream session that transactions replayed in relay order run on (barrier
    batches, strict mode), kept for the pipeline's life as a replica keeps its SQL thread's:
    the upstream sessions' temporary tables, made by their statements, live in it from one
    batch to the next.  The server must not close it for being idle between them
    (``wait_timeout``).  A use that raises while it replays transactions (``replaying``)
    closes it: what upstream statements did to temporary tables is not undone by a
    rollback, so the batch's replay could not run them again as they ran, and its pipeline
    lock, and DDL sent ahead, end with it; the temporary tables are gone then, as a
    replica's are when its server restarts.  A use that only marked a batch of rows
    applied by Spark tasks, which failed, rolls back and keeps it."""

    def __init__(self, downstream: Downstream) -> None:
        self.downstream = downstream
        #: Whether the session may take each upstream session's thread id
        #: (``pseudo_thread_id``), known once it is open.
        self.pseudo_thread = False
        #: A statement made a temporary table in it (its loss is worth a line in the log).
        self.temporary = False
        self._conn: Any = None
        self._idle_since = 0.0
        self._replaying = False

    @contextlib.contextmanager
    def use(self) -> Iterator[Any]:
        conn = self._conn
        if conn is not None and not still_open(conn, self._idle_since):
            self.close()  # (the downstream restarted, or closed it)
            conn = None
        if conn is None:
            conn = self.downstream.connect()
            try:
                self.pseudo_thread = _prepare(conn)
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.close()
                raise
            self._conn = conn
        self._replaying = False
        try:
            yield conn
        except BaseException:
            if self._replaying or not rollback_quietly(conn):
                self.close()
            raise
        finally:
            self._idle_since = time.monotonic()

    def replaying(self) -> None:
        """This use replays transactions in the session (see the class)."""
        self._replaying = True

    def close(self, *, lost: bool = True) -> None:
        """Close the session; ``lost``: its temporary tables were still wanted (worth a
        warning), not dropped on purpose."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            conn.close()
        if self.temporary and lost:
            log.warning("the downstream session holding the upstream sessions' temporary"
                        " tables was closed: statements that still use them will fail")
        self.temporary = False


def _prepare(conn: Any) -> bool:
    """Sets the session's idle timeout; returns whether it may set ``pseudo_thread_id``."""
    with conn.cursor() as cur:
        try:
            cur.execute(f"SET SESSION wait_timeout = {_LONGEST_WAIT}")
            try:
                cur.execute("SET @@session.pseudo_thread_id = @@session.pseudo_thread_id")
            except pymysql.MySQLError as exc:
                if errno_of(exc) == _NEEDS_PRIVILEGE:
                    return False
                raise
        except pymysql.MySQLError as exc:
            raise map_error(exc, "setting up the replay session") from None
    return True


_EVENTS_COLUMN = "events VARCHAR(32) CHARACTER SET ascii NULL"
#: Their views and routines write no table a user's trigger is on.
_SYSTEM_SCHEMAS = ("mysql", "sys", "information_schema", "performance_schema")


def _storable(name: TableRef) -> TableRef:
    """``name`` as UTF-8 text can hold it: a statement of a session in another character
    set was read as UTF-8, its other bytes kept as escapes, which a column cannot take
    (they are written as ``\\xNN``, the same for a CREATE and a DROP)."""
    def text(part: str) -> str:
        return part.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return TableRef(text(name.schema), text(name.table))


@dataclass(frozen=True, slots=True)
class SkippedTriggers:
    """Trigger DDL is not replayed: a trigger's effects on rows are in the binlog already,
    and a downstream trigger would fire again for every row binrelay writes (a replica does
    not run triggers for row events; binrelay writes with SQL, which does).  The triggers
    skipped are kept in ``<schema>.skipped_trigger``, in the data's transaction, so that a
    statement-format DML (which upstream fired them, and which a replica re-runs with its
    own copies of them) is refused rather than applied without them.  Each is kept with its
    table, where its CREATE names it plainly: a DROP TABLE of it, a DROP DATABASE of its
    schema (which drop the trigger) forget it; a statement that may rename a table (one
    with the word RENAME) makes every trigger's table unknown, and such a trigger is then
    forgotten only by a DROP TRIGGER.  Never forgotten while it may still exist: a
    statement replayed without its trigger would write other rows than the replica's."""

    schema: str
    pipeline: str
    #: Whether the pipeline may hold a record: False once :meth:`create` read none, True
    #: again from the first trigger recorded.  While False, neither what a DDL does to
    #: triggers' tables nor a statement's check needs a round trip.
    _held: list[bool] = field(default_factory=lambda: [True], compare=False, repr=False)
    #: The downstream's views and stored routines (name: kind), read for the first
    #: statement checked after a DDL (which may make or drop one).
    _reachers: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def table(self) -> TableRef:
        return TableRef(self.schema, "skipped_trigger")

    def _t(self) -> str:
        return quote_table(self.table).replace("%", "%%")

    def create(self, cur: Any) -> None:
        """Once, outside any batch: a CREATE commits implicitly.  A table made by an
        earlier release gains the trigger's table (NULL for the triggers it holds: those
        stop statements until they are dropped by name).  Names compare as bytes: two
        tables whose names differ in case only are two tables."""
        name = "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {quote_table(self.table)} ("
            f" pipeline VARCHAR(64) NOT NULL, trigger_schema {name} NOT NULL,"
            f" trigger_name {name} NOT NULL, table_schema {name} NULL, table_name {name} NULL,"
            f" {_EVENTS_COLUMN}, PRIMARY KEY (pipeline, trigger_schema, trigger_name))"
            " ENGINE=InnoDB")
        cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s"
                    " AND TABLE_NAME = %s AND COLUMN_NAME IN ('table_name', 'events')",
                    (self.table.schema, self.table.table))
        has = {row[0].lower() for row in cur.fetchall()}
        if "table_name" not in has:
            # (Trigger names compared as bytes too: two that differ in case are two.)
            cur.execute(f"ALTER TABLE {quote_table(self.table)} MODIFY trigger_schema {name}"
                        f" NOT NULL, MODIFY trigger_name {name} NOT NULL, ADD COLUMN"
                        f" table_schema {name} NULL, ADD COLUMN table_name {name} NULL")
        if "events" not in has:  # (NULL for the triggers it holds: every event)
            cur.execute(f"ALTER TABLE {quote_table(self.table)} ADD COLUMN {_EVENTS_COLUMN}")
        self._held[0] = self._first(cur) is not None

    def record(self, cur: Any, what: str, name: TableRef | None,
               table: TableRef | None = None,
               events: frozenset[str] = TRIGGER_EVENTS) -> None:
        if name is None:
            return
        t = self._t()
        if what.startswith("create"):
            self._held[0] = True
            if table is not None and _storable(table) != table:
                table = None  # (its name is bytes of another character set: unknown)
            key = (self.pipeline, *_storable(name).parts())
            row = (None, None, None) if table is None else \
                (table.schema, table.table, ",".join(sorted(events)))
            if what == "create if absent":
                cur.execute(f"SELECT table_schema, table_name, events FROM {t} WHERE"
                            " pipeline = %s AND trigger_schema = %s AND trigger_name = %s",
                            key)
                was = cur.fetchone()
                if was is not None:
                    # It changed nothing if the trigger was there, which a record that
                    # outlived its trigger cannot tell: unknown where they differ.
                    if tuple(was) != row:
                        cur.execute(f"UPDATE {t} SET table_schema = NULL, table_name = NULL,"
                                    " events = NULL WHERE pipeline = %s AND trigger_schema"
                                    " = %s AND trigger_name = %s", key)
                    return
            cur.execute(f"REPLACE INTO {t} (pipeline, trigger_schema, trigger_name,"
                        " table_schema, table_name, events) VALUES (%s, %s, %s, %s, %s, %s)",
                        (*key, *row))
        else:
            cur.execute(f"DELETE FROM {t} WHERE pipeline = %s AND trigger_schema = %s"
                        " AND trigger_name = %s", (self.pipeline, *_storable(name).parts()))

    def after_ddl(self, left: LeftContext, statement: str, schema: str | None) -> None:
        """What a DDL the downstream ran does to the triggers' tables, noted once the
        connection is settled (in order with the triggers recorded, before any statement
        is checked, and before the batch's checkpoint)."""
        self._reachers.clear()
        gone = tables_gone(statement, schema) if self._held[0] else None
        if gone is not None:
            left.followups.append(lambda cur: self._follow(cur, gone))

    def _follow(self, cur: Any, gone: TablesGone) -> None:
        t = self._t()
        if gone.renames:
            cur.execute(f"UPDATE {t} SET table_schema = NULL, table_name = NULL WHERE"
                        " pipeline = %s", (self.pipeline,))
        for table in gone.tables:
            cur.execute(f"DELETE FROM {t} WHERE pipeline = %s AND table_schema = %s AND"
                        " table_name = %s", (self.pipeline, *_storable(table).parts()))
        if gone.schema is not None:
            # (A trigger is in its table's schema, whatever became of its table's name.)
            cur.execute(f"DELETE FROM {t} WHERE pipeline = %s AND trigger_schema = %s",
                        (self.pipeline, _storable(TableRef(gone.schema, "")).schema))

    def any(self, cur: Any) -> str | None:
        """A trigger skipped that may still exist (``schema.name``), or None."""
        return self._first(cur) if self._held[0] else None

    def may_hold(self) -> bool:
        """Whether a trigger may be recorded (else :meth:`fired_by` sends nothing)."""
        return self._held[0]

    def fired_by(self, cur: Any, statement: str, *, tables: bool = True) -> str | None:
        """A trigger skipped that ``statement`` (a statement-format DML) may fire upstream,
        as ``schema.name`` (and what reaches it), or None.  One whose table is unknown; one
        on a table the statement names, for an event of its kind (an UPDATE fires no INSERT
        trigger); any, when the statement names a view or a stored routine (which may write
        any table).  Names are found in the statement's text however spelled
        (:func:`name_spelled`): a table it only seems to name costs a refusal, never a
        trigger missed.  ``tables=False`` (a CREATE TABLE ... SELECT, which writes only the
        table it makes): only what a view or a routine reaches."""
        if not self._held[0]:
            return None
        cur.execute(f"SELECT trigger_schema, trigger_name, table_name, events FROM {self._t()}"
                    " WHERE pipeline = %s ORDER BY 1, 2", (self.pipeline,))
        rows = cur.fetchall()
        if not rows:
            return None
        fired = events_fired(statement)
        on: dict[str, str] = {}
        for schema, name, table, events in rows:
            if table is None and tables:
                return f"{schema}.{name}"
            if events is None or fired & set(events.split(",")):
                on.setdefault(table, f"{schema}.{name}")
        hit = name_spelled(statement, on) if tables else None
        if hit is not None:
            return on[hit]
        reachers = self._read_reachers(cur)
        hit = name_spelled(statement, reachers)
        if hit is not None:
            return f"{rows[0][0]}.{rows[0][1]}, reachable through the {reachers[hit]} {hit}"
        return None

    def _read_reachers(self, cur: Any) -> dict[str, str]:
        if not self._reachers:
            marks = ", ".join(["%s"] * len(_SYSTEM_SCHEMAS))
            cur.execute("SELECT ROUTINE_NAME, LOWER(ROUTINE_TYPE) FROM information_schema.ROUTINES"
                        f" WHERE ROUTINE_SCHEMA NOT IN ({marks}) UNION ALL SELECT TABLE_NAME,"
                        " 'view' FROM information_schema.VIEWS WHERE TABLE_SCHEMA NOT IN"
                        f" ({marks})", _SYSTEM_SCHEMAS * 2)
            self._reachers.update((name, kind) for name, kind in cur.fetchall())
            self._reachers.setdefault("", "")  # (read: none is not "not read yet")
        return {k: v for k, v in self._reachers.items() if k}

    def _first(self, cur: Any) -> str | None:
        t = self._t()
        cur.execute(f"SELECT trigger_schema, trigger_name FROM {t} WHERE pipeline = %s"
                    " LIMIT 1", (self.pipeline,))
        row = cur.fetchone()
        return None if row is None else f"{row[0]}.{row[1]}"


@dataclass(frozen=True, slots=True)
class Load:
    """The file a replayed LOAD DATA LOCAL reads: the name its statement gives, its bytes
    (in memory or a temporary file: ``serial.load_file``), and the warnings that mean the
    upstream's load (not LOCAL) stopped there."""

    name: str
    data: bytes | bytearray | IO[bytes] = field(repr=False)
    stops: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class SessionStatement:
    """An upstream statement and the SET statements that give it the upstream's context."""

    position: tuple[int, ...]
    schema: str
    raw: bytes  # the statement's exact bytes, in the upstream session's client charset
    text: str
    setup: tuple[str, ...]
    #: A statement that commits by itself (DDL); the others run in the caller's transaction.
    ddl: bool
    #: User variables the setup sets (cleared after the statement).
    user_vars: tuple[str, ...] = ()
    #: The error the statement ended with upstream, logged with it (0: none): a statement on
    #: a non-transactional table that failed part way is logged for what it did.
    expected_error: int = 0
    #: A statement-format LOAD DATA's file.
    load: Load | None = field(default=None, repr=False)


Action = Change | SessionStatement


def _refuse_trigger(action: SessionStatement, skipped: str | None) -> None:
    if skipped is not None:
        raise UnfaithfulApplyError(
            f"statement {snippet(action.text, 60)!r}, logged as a statement (not rows), may"
            f" fire upstream triggers, which binrelay does not replay (trigger {skipped})",
            position=action.position,
            hint="log row events upstream (binlog_format=ROW in every session), then"
                 " resynchronise this downstream")


def replay_actions(conn: Any, actions: Iterable[Action], *, triggers: SkippedTriggers,
                   max_packet: int | None = None, replay: bool = True,
                   journal: DdlJournal | None = None, left: LeftContext | None = None) -> int:
    """Run ``actions`` in order on ``conn`` without committing the rows and statements (a
    DDL commits by itself).  Returns how many row changes were applied.  ``replay``: a DDL
    may have run before a crash (see :func:`apply_ddl`); ``journal``: the batch's DDL
    journal, which decides that from evidence; ``left``: the reset the connection owes
    after a DDL, settled here before anything but a DDL (the caller settles the last)."""
    rows = 0
    pending: list[Change] = []
    given = left is not None
    left = left if left is not None else LeftContext()

    def flush() -> None:
        nonlocal rows
        if not pending:
            return
        statements = ordered_statements(pending, fk=True)
        # Sent ahead only where a journal row after them can say they were committed.
        if left.ahead is None or journal is None or journal.replayed or \
                not left.ahead.add_rows(conn, left, statements):
            left.settle(conn)
            with conn.cursor() as cur:
                for st in statements:
                    run_statement(cur, st, None, "replaying a transaction in order",
                                  max_packet)
        rows += len(pending)
        pending.clear()

    try:
        for action in actions:
            if isinstance(action, Change):
                pending.append(action)
                continue
            flush()
            trigger = trigger_ddl(action.text, action.schema or None)
            if trigger is not None or not action.ddl:
                left.settle(conn)
            if trigger is not None:
                with conn.cursor() as cur:
                    triggers.record(cur, *trigger)
            elif action.ddl:
                if triggers.may_hold() and creates_by_select(action.text):
                    left.settle(conn)
                    with conn.cursor() as cur:
                        _refuse_trigger(action, triggers.fired_by(cur, action.text,
                                                                  tables=False))
                apply_ddl(conn, action.schema or None, action.text, replay=replay,
                          position=action.position, setup=action.setup, raw=action.raw,
                          journal=journal, left=left)
                triggers.after_ddl(left, action.text, action.schema or None)
                event = event_ddl(action.text, action.schema or None)
                if event is not None:
                    left.settle(conn)
                    _replica_side_disabled(conn, event, action.position)
            else:
                skipped = None
                if not is_savepoint_statement(action.raw[:32]):
                    # (A savepoint fires nothing.)
                    with conn.cursor() as cur:
                        skipped = triggers.fired_by(cur, action.text)
                _refuse_trigger(action, skipped)
                _statement(conn, action)
        flush()
    except BaseException:
        if not given:  # a connection the caller may go on using
            with contextlib.suppress(pymysql.MySQLError):
                left.settle(conn)
        raise
    if not given:
        left.settle(conn)
    return rows


def _replica_side_disabled(conn: Any, event: TableRef, position: tuple[int, ...]) -> None:
    """As on a replica, an event the upstream made or altered (enabled or disabled) does
    not run here: its upstream runs are in the binlog already, and it would write them a
    second time.  Its status is made SLAVESIDE_DISABLED (MySQL: REPLICA_SIDE_DISABLED),
    which a replica's SQL thread sets; promoted, the downstream enables it (``ALTER EVENT
    ... ENABLE``).  Run again on a replay: it changes nothing then."""
    if _storable(event) != event:
        # A name in another character set (its statement read as UTF-8) cannot be sent as
        # text; the statement itself was made DISABLE ON SLAVE (serial._replica_side).
        return
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT STATUS FROM information_schema.EVENTS"
                        " WHERE EVENT_SCHEMA = %s AND EVENT_NAME = %s",
                        (event.schema, event.table))
            row = cur.fetchone()
            if row is not None and row[0] in ("ENABLED", "DISABLED"):
                # (An ALTER EVENT commits by itself: the DDL before it did already.)
                cur.execute(f"ALTER EVENT {quote_table(event)} DISABLE ON SLAVE")
    except pymysql.MySQLError as exc:
        raise map_error(exc, f"disabling event {event} as a replica's are",
                        position=position) from None


#: The most warnings a session keeps (max_error_count's ceiling).
_MAX_WARNINGS = 65535


def _load_data(conn: Any, cur: Any, st: SessionStatement) -> None:
    """A statement-format LOAD DATA, its file sent from the relay log's bytes; a warning a
    load from a file on the server would have stopped on stops it here too (LOCAL makes
    warnings of them)."""
    assert st.load is not None
    if st.load.stops:
        # Every warning listed, to find those among them (64 by default).
        cur.execute(f"SET SESSION max_error_count = {_MAX_WARNINGS}")
    with conn.offering(st.load.name, st.load.data):
        cur.execute(st.raw)
    warnings = cur.warning_count
    if not warnings or not st.load.stops:
        return
    cur.execute("SHOW WARNINGS")
    listed = cur.fetchall()
    stopped = [(int(code), message) for _level, code, message in listed
               if int(code) in st.load.stops]
    if not stopped and len(listed) < warnings:
        stopped = [(0, f"{warnings} warnings, more than could be read")]
    if stopped:
        code, message = stopped[0]
        raise UnfaithfulApplyError(
            f"statement-format LOAD DATA {snippet(st.text, 60)!r} met error {code} downstream"
            f" ({message}), where the upstream's load did not", position=st.position,
            hint="the downstream's rows differ from the upstream's; resynchronise this"
                 " table from the upstream")


def _statement(conn: Any, st: SessionStatement) -> None:
    """Run ``st`` in its context; as a replica's SQL thread, it must end as it did upstream:
    with no error, or with the error the upstream logged (it did the same part here)."""
    with conn.cursor() as cur:
        try:
            for sql in st.setup:
                cur.execute(sql)
            try:
                if st.load is None:
                    cur.execute(st.raw)
                else:
                    _load_data(conn, cur, st)
            except pymysql.MySQLError as exc:
                if not st.expected_error or errno_of(exc) != st.expected_error:
                    raise
            else:
                if st.expected_error:
                    raise UnfaithfulApplyError(
                        f"statement {snippet(st.text, 60)!r} failed upstream (error"
                        f" {st.expected_error}) but not downstream: the part it did differs",
                        position=st.position,
                        hint="the downstream's rows differ from the upstream's; resynchronise"
                             " this table from the upstream")
        except pymysql.MySQLError as exc:
            code = errno_of(exc)
            raise map_error(exc, f"replaying statement {snippet(st.text)!r}",
                            position=st.position,
                            hint=_LOST_TEMPORARY if code == 1146 else
                            "SET GLOBAL local_infile = ON downstream: a statement-format LOAD"
                            " DATA is replayed as LOAD DATA LOCAL of the file the relay log"
                            " carries" if st.load is not None and code in LOCAL_REFUSED
                            else None) from None
        finally:
            for sql in reset_statements(user_vars=st.user_vars,
                                        pseudo_thread=sets_pseudo_thread(st.setup)):
                cur.execute(sql)
