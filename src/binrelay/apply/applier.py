"""Writing rows to the downstream: statements run with their packet limits, plan parts of
the keyed path, tables applied in order, and strict-mode transactions.

Spark tasks call these with a connection from
:func:`~binrelay.apply.downstream.pooled_connection`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

import pymysql

from binrelay.apply.catalog import TableRules
from binrelay.apply.changes import Change, TableRef
from binrelay.apply.checkpoint import (
    CheckpointUpdate,
    TaskLedger,
    advance_in_transaction,
    advance_statement,
)
from binrelay.apply.downstream import (
    LOCAL_REFUSED,
    PACKET_TOO_LARGE,
    RETRY_ERRORS,
    ROW_ERRORS,
    ScriptError,
    errno_of,
    map_error,
    rollback_quietly,
    runs_scripts,
    script_counts,
    script_packet,
)
from binrelay.apply.plan import FK_LINKED, Delete, KeyedOp, PlanPart, Survivors, Upsert
from binrelay.apply.sql import (
    LOAD_NAME,
    MAX_STATEMENT_BYTES,
    MAX_STATEMENT_ROWS,
    Statement,
    delete_keys,
    load_rows,
    replace_rows,
    value_size,
)
from binrelay.apply.versioning import HistoryReplay
from binrelay.errors import (
    ApplyError,
    DownstreamRowError,
    UnfaithfulApplyError,
)

log = logging.getLogger(__name__)


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
    if max_packet is None or len(st.positions) > 1 or (st.params is None
                                                       and not st.positions):
        return  # multi-row statements are sized to fit; only one row can be too big
    if st.params is None:  # rendered: the text is what is sent
        if 4 * len(st.sql) < max_packet - _PACKET_SLACK:
            return
        size = len(st.sql.encode("utf-8", "surrogateescape"))
    elif sum(map(value_size, st.params)) + len(st.sql) < max_packet - _PACKET_SLACK:
        return
    else:
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
    _check_packet(cur, st, max_packet)
    try:
        if st.data is None:
            matched = _execute(cur, st)
        else:
            with cur.connection.offering(LOAD_NAME, st.data):
                matched = int(cur.execute(st.sql))
    except pymysql.MySQLError as exc:
        code = errno_of(exc)
        if code in RETRY_ERRORS:
            raise
        if st.data is not None:
            # REPLACE runs the rows again: it stops on what stops them, as it would have.
            raise _LoadRefused(f"error {code} ({exc})", st.table,
                               server=code in LOCAL_REFUSED) from None
        if code in ROW_ERRORS and singles is not None and len(st.positions) > 1 and \
                not (code == PACKET_TOO_LARGE and max_packet is not None):
            for single in singles():
                run_statement(cur, single, None, action, max_packet)
            action += f" (one of {len(st.positions)} rows from this position on)"
        raise statement_error(st, exc, action, max_packet) from None
    if st.data is not None:
        _check_load(cur, st)
        check_answer(cur, st, matched, 0, ())
        return
    warnings = getattr(getattr(cur, "_result", None), "warning_count", 0)
    check_answer(cur, st, matched, warnings, _listed(cur) if warnings else ())


def statement_error(st: Statement, exc: BaseException, action: str,
                    max_packet: int | None) -> BaseException:
    """What ``st`` failing with ``exc`` raises (:func:`run_statement`): a retryable error as
    it is, one the packet could not hold said so, the rest mapped with the statement's
    table and first row's position."""
    code = errno_of(exc)
    if code in RETRY_ERRORS:
        return exc
    if code == PACKET_TOO_LARGE and max_packet is not None:
        return _packet_error(st, len(st.sql), max_packet)
    return map_error(exc, action, table=st.table,
                     position=st.positions[0] if st.positions else None)


def _listed(cur: Any) -> tuple[tuple[Any, ...], ...]:
    cur.execute("SHOW WARNINGS")
    return tuple(cur.fetchall())


def check_answer(cur: Any, st: Statement, matched: int, warnings: int,
                 listed: Sequence[tuple[Any, ...]]) -> None:
    """Stop unless ``st``, run, did what it must: ``matched`` the rows it expects, and
    stored the values sent (``warnings``, its warning count, and ``listed``, SHOW
    WARNINGS right after it, say so); ``cur`` is free for look-ups."""
    first = st.positions[0] if st.positions else None
    if warnings:
        _changed_values(cur, st, first, warnings, listed)
    if st.expect_rows is not None and matched != st.expect_rows:
        raise DownstreamRowError(
            f"downstream diverged: the row to {st.sql.split(None, 1)[0].lower()} matched"
            f" {matched} rows, not {st.expect_rows}",
            table=None if st.table is None else str(st.table), position=first)


class _LoadRefused(Exception):
    """A load (``sql.load_rows``) whose rows are to be written by REPLACE instead: its
    transaction is rolled back and run again without loads, and on this connection no
    load of ``table`` is tried again (``server``: no load at all)."""

    def __init__(self, why: str, table: TableRef | None, *, server: bool = False) -> None:
        super().__init__(why)
        self.table = table
        self.server = server


#: A load's result: "Records: 1000  Deleted: 0  Skipped: 0  Warnings: 0".
_LOAD_RESULT = re.compile(r"Records: (\d+)\s+Deleted: \d+\s+Skipped: (\d+)\s+Warnings: (\d+)")


def _check_load(cur: Any, st: Statement) -> None:
    """A load's result is taken only when it stored every row without a warning or a note
    (the session's messages are in English: ``downstream.Downstream.connect``): a value it
    stored otherwise than sent, a row it skipped, has the rows written by REPLACE, which
    stops where a replica stops or takes what a replica takes."""
    result = cur._result
    message = result.message or b""
    found = _LOAD_RESULT.search(message.decode("utf-8", "replace")
                                if isinstance(message, bytes) else str(message))
    if found is None or int(found[1]) != len(st.positions) or int(found[2]) or \
            int(found[3]) or result.warning_count:
        raise _LoadRefused(f"the load's result: {found[0] if found else message!r}",
                           st.table)


#: Warnings a row write gets when the downstream stored another value than the one sent:
#: NULL into NOT NULL, out of range, truncated, not convertible (a datetime, a string in the
#: column's character set), too long.  A replica stores the logged value as it is; the
#: applier's session is lenient (``sql.REPLICA_SQL_MODE``), where they are not errors.
_CHANGED_VALUE = frozenset({1048, 1263, 1264, 1265, 1292, 1366, 1406})
#: "Data truncated for column 'c' at row 1" and the like: the column named (as it is: the
#: server does not escape a quote in it).
_WARNED_COLUMN = re.compile(r"column '(.+)' at row \d+$")


def _changed_values(cur: Any, st: Statement, first: tuple[int, ...] | None, count: int,
                    listed: Sequence[tuple[Any, ...]]) -> None:
    """Stop if the statement made the downstream store a value other than the one sent
    (its ``count`` warnings, ``listed``, say so), so that its transaction is rolled back,
    not committed."""
    enums: dict[str, bool] = {}
    for level, code, message in listed:
        if level == "Note" or code not in _CHANGED_VALUE:
            continue
        if code == 1265 and st.table is not None and _enum(cur, st.table, message, enums):
            continue  # an ENUM's error value, written back as it was stored upstream
        raise _changed(f"{message} (warning {code})", st, first)
    if count > len(listed):  # (beyond the session's max_error_count: unseen)
        raise _changed(f"{count} warnings, of which {count - len(listed)} not listed", st,
                       first)


def _changed(what: str, st: Statement, first: tuple[int, ...] | None) -> UnfaithfulApplyError:
    return UnfaithfulApplyError(
        f"the downstream changed a value as it stored it: {what}",
        table=None if st.table is None else str(st.table), position=first,
        hint="give the downstream's column the upstream's type, then resynchronise this"
             " table from the upstream")


def _enum(cur: Any, table: TableRef, message: str, known: dict[str, bool]) -> bool:
    """Whether the column the warning names is an ENUM (``known``: the answers so far)."""
    found = _WARNED_COLUMN.search(message)
    if found is None:
        return False
    column = found.group(1)
    if column not in known:
        cur.execute("SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s"
                    " AND TABLE_NAME = %s AND COLUMN_NAME = %s",
                    (table.schema, table.table, column))
        row = cur.fetchone()
        known[column] = row is not None and str(row[0]).lower() == "enum"
    return known[column]


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
        except (ApplyError, _LoadRefused):
            rollback_quietly(conn)
            raise
        except pymysql.MySQLError as exc:
            rollback_quietly(conn)
            if errno_of(exc) in RETRY_ERRORS and attempt < retries:
                attempt += 1
                log.debug("%s: %s; rolled back, running it again (attempt %d of %d)",
                          action, exc, attempt, retries)
                time.sleep(min(0.05 * 2 ** attempt, 2.0))
                continue
            raise map_error(exc, action) from None


# ---- the keyed path and ordered tables --------------------------------------------------


#: Downstream column types a load reads as an SQL statement reads the value the applier
#: would send (``sql.render_tsv_python``'s kinds): integers, DECIMAL, text of a character
#: set, binary strings, and the types whose values travel as the server's text (floats,
#: dates and times).  Not BIT, YEAR (a load reads '0' as 2000), ENUM, SET, JSON,
#: spatial or the other types, whose rows go by REPLACE.
_LOAD_KINDS = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "bigint"), "i"),
    "decimal": "n",
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext"), "t"),
    **dict.fromkeys(("float", "double", "date", "datetime", "timestamp", "time"), "s"),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"),
                    "b"),
}


class LoadKinds:
    """Per table and written columns, the kinds a load of its rows renders them by (a
    letter per column, ``sql.render_tsv_python``), or None: a table in ``refused`` (a load
    of it was not taken: :func:`_check_load`), or one :func:`_kinds` says no to."""

    def __init__(self, rules: TableRules, refused: Collection[TableRef] = ()) -> None:
        self.rules = rules
        self.refused = refused
        self._known: dict[tuple[TableRef, tuple[str, ...]], str | None] = {}

    def __call__(self, table: TableRef, columns: tuple[str, ...], *,
                 spread: bool = False) -> str | None:
        """``spread``: this task writes ``table`` while the batch's other tasks write other
        tables (:func:`_turns`), so a load holding its AUTO-INC lock does not hold them up."""
        found = self._known.get((table, columns), False)
        if found is False:
            found = self._known[(table, columns)] = None if table in self.refused else \
                _kinds(self.rules, table, columns)
        if found is not None and not spread and self.one_at_a_time(table):
            # With innodb_autoinc_lock_mode 0 or 1 (MariaDB's default) a LOAD DATA holds the
            # table's AUTO-INC lock to its end, where at 1 a REPLACE takes a mutex for a
            # moment (unless a load holds or waits for the lock): the apply tasks' loads of
            # one table would run one at a time (measured: slower than REPLACE from two
            # threads).
            return None
        return found  # type: ignore[return-value]

    def one_at_a_time(self, table: TableRef) -> bool:
        """Whether the loads of ``table`` run one at a time however many tasks send them:
        it has an AUTO_INCREMENT column and the server does not interleave (lock mode 2)."""
        if self.rules.autoinc_interleaved:
            return False
        info = self.rules.columns_of(table)
        return info is not None and any(c.auto_increment for c in info.columns)


def _kinds(rules: TableRules, table: TableRef, columns: tuple[str, ...]) -> str | None:
    """None unless every written column is in the catalog with a type of
    :data:`_LOAD_KINDS`, the table is InnoDB (a load rolled back leaves nothing), neither
    versioned (REPLACE makes its history) nor a sequence, and its AUTO_INCREMENT column, if
    any, is written (a load reserves generated values in blocks, a REPLACE as many as its
    rows).  Whether its AUTO-INC lock allows a load: :meth:`LoadKinds.one_at_a_time`."""
    info = rules.columns_of(table)
    if info is None or not info.innodb or table in rules.versioned or \
            table in rules.sequences:
        return None
    by_name = {c.name.casefold(): c for c in info.columns}
    written = {name.casefold() for name in columns}
    if any(c.auto_increment and c.name.casefold() not in written for c in info.columns):
        return None
    out = []
    for name in columns:
        col = by_name.get(name.casefold())
        kind = None if col is None else _LOAD_KINDS.get(col.data_type)
        if kind == "t":
            # Text of a character set ("binary": a binary string's; none: not text).
            kind = None if col.charset is None else "b" if col.charset == "binary" else "s"
        if kind is None or col is None:
            return None
        # NULL into a NOT NULL column: a load stores the default (a TIMESTAMP's: now)
        # without a warning where a statement warns.
        out.append(kind if col.nullable and not col.auto_increment else kind.upper())
    return "".join(out)


#: How many times its share of the rows whose loads run one at a time
#: (:meth:`LoadKinds.one_at_a_time`) the biggest such table may hold for a task to load them
#: anyway (:func:`_turns`).
_TURN_SLACK = 1.5

Groups = dict[tuple[TableRef, tuple[str, ...]], tuple[list[Any], list[Any]]]
Group = tuple[tuple[TableRef, tuple[str, ...]], tuple[list[Any], list[Any]]]
Lane = tuple[int, int]


def _in_order(groups: Groups) -> list[Group]:
    """The groups by (table, columns): every task writes its tables in the same order."""
    return sorted(groups.items(), key=lambda kv: kv[0])


def _turns(groups: Groups, kinds_of: LoadKinds | None, lane: Lane,
           deleting: Collection[TableRef] = ()
           ) -> tuple[list[Group], frozenset[TableRef]]:
    """The upsert groups in the order apply task ``lane[0]`` of ``lane[1]`` writes them,
    and the tables among them it may load although their loads run one at a time.

    Each task starts on another of those tables (the tasks' keys are spread over every
    table alike), so their loads hold different tables' AUTO-INC locks at once, and loads
    take a quarter less of the server's CPU than REPLACE (measured, four tables on four
    connections: 4.1-4.4 s against 5.2-5.6 s; in one order for all, 6.2-6.7 s).  The
    biggest table's loads still run one at a time: with ``tasks`` times its rows at most
    :data:`_TURN_SLACK` times all of them, that costs a server with a core per task at
    most an eighth more than REPLACE, and one with fewer cores (which the tasks keep busy
    anyway) nothing; a bigger table, and the rows go by REPLACE.

    Not a table the part also deletes from (``deleting``): a delete of a key the
    downstream lacks holds a gap lock to the commit (REPEATABLE READ), and a load waiting
    on another task's gap lock while holding the AUTO-INC lock that task then waits for is
    a deadlock (retried, but a whole task's transaction each time).
    """
    order = _in_order(groups)
    if kinds_of is None:
        return order, frozenset()
    index, tasks = lane
    sizes: dict[TableRef, int] = {}
    for (table, cols), (values, _at) in order:
        if table not in deleting and kinds_of.one_at_a_time(table) and \
                kinds_of(table, cols, spread=True) is not None:
            sizes[table] = sizes.get(table, 0) + len(values)
    if not sizes or max(sizes.values()) * tasks > _TURN_SLACK * sum(sizes.values()):
        return order, frozenset()
    tables = sorted(sizes)
    start = index * len(tables) // tasks
    turn = {table: (at - start) % len(tables) for at, table in enumerate(tables)}
    order.sort(key=lambda kv: (turn.get(kv[0][0], -1), kv[0]))
    return order, frozenset(sizes)


def _keyed_statements(
    ops: Sequence[KeyedOp | Survivors], max_rows: int, max_bytes: int,
    kinds_of: LoadKinds | None = None, lane: Lane = (0, 1),
) -> list[tuple[Statement, Callable[[], list[Statement]]]]:
    # Per (table, key columns) the keys to delete and per (table, columns) the rows to
    # write, each with their positions, in key order.
    deletes: Groups = {}
    upserts: Groups = {}
    loose_deletes: dict[tuple[TableRef, tuple[str, ...]], list[Delete]] = {}
    loose_upserts: dict[tuple[TableRef, tuple[str, ...]], list[Upsert]] = {}
    inserts: Groups = {}
    for op in ops:
        if type(op) is Survivors:
            if op.deleted:
                _extend(deletes, (op.table, op.key_columns), op.deleted, op.deleted_at)
            if op.rows and op.by_insert:
                # Every key of the table deleted first (its survivors are all here), then
                # the rows inserted: a conflict is on a key the upstream does not have.
                key = op.key
                _extend(deletes, (op.table, op.key_columns),
                        [tuple([row[i] for i in key]) for row in op.rows], op.rows_at)
                _extend(inserts, (op.table, op.columns), op.rows, op.rows_at)
            elif op.rows:
                _extend(upserts, (op.table, op.columns), op.rows, op.rows_at)
        elif isinstance(op, Delete):
            loose_deletes.setdefault((op.table, op.key_columns), []).append(op)
        else:
            loose_upserts.setdefault((op.table, op.columns), []).append(op)
    for group, loose in loose_deletes.items():
        _key_order(loose)
        _extend(deletes, group, [d.key_values for d in loose], [d.position for d in loose])
    for group, loose in loose_upserts.items():
        _key_order(loose)
        _extend(upserts, group, [u.row for u in loose], [u.position for u in loose])
    out: list[tuple[Statement, Callable[[], list[Statement]]]] = []
    upsert_order, spread = _turns(upserts, kinds_of, lane, {t for t, _k in deletes})

    def deleting(table: TableRef, cols: tuple[str, ...], keys: Sequence[tuple[Any, ...]],
                 positions: Sequence[tuple[int, ...]], rows: int) -> list[Statement]:
        return delete_keys(table, cols, keys, positions, max_rows=rows, max_bytes=max_bytes)

    def replacing(table: TableRef, cols: tuple[str, ...], images: Sequence[tuple[Any, ...]],
                  positions: Sequence[tuple[int, ...]], rows: int) -> list[Statement]:
        # One row (finding the row a statement failed on) is the server's error for it.
        kinds = None if kinds_of is None or rows == 1 else kinds_of(
            table, cols, spread=table in spread)
        loads = None if kinds is None else load_rows(
            table, cols, kinds, images, positions, max_rows=rows, max_bytes=max_bytes)
        return loads if loads is not None else replace_rows(
            table, cols, images, positions, max_rows=rows, max_bytes=max_bytes)

    def inserting(table: TableRef, cols: tuple[str, ...], images: Sequence[tuple[Any, ...]],
                  positions: Sequence[tuple[int, ...]], rows: int) -> list[Statement]:
        return replace_rows(table, cols, images, positions, max_rows=rows,
                            max_bytes=max_bytes, verb="INSERT")

    # Any order is correct for REPLACE (docs/apply.md), deletes first only make its
    # conflicts rarer; the inserts must follow their deletes.
    for build, groups in ((deleting, _in_order(deletes)), (replacing, upsert_order),
                          (inserting, _in_order(inserts))):
        for (table, cols), (values, positions) in groups:
            start = 0
            for st in build(table, cols, values, positions, max_rows):
                end = start + len(st.positions)
                out.append((st, lambda t=table, c=cols, v=values[start:end],
                            p=positions[start:end], b=build: b(t, c, v, p, 1)))
                start = end
    return out


def _extend(groups: dict[Any, tuple[list[Any], list[Any]]], group: Any,
            values: Sequence[Any], positions: Sequence[Any]) -> None:
    found = groups.get(group)
    if found is None:
        groups[group] = (list(values), list(positions))
    else:  # (one table in two shapes: any order is correct, this one is only slower)
        found[0].extend(values)
        found[1].extend(positions)


def _key_order(group: list[Any]) -> None:
    """Sort one table's deletes or upserts by key: each multi-row statement then writes a
    run of neighbouring rows (pages read and dirtied once, not once per row, when the
    table is larger than the downstream's buffer pool).  Python's order of the key values
    is the index's for integers and binary strings and close to it for text; keys whose
    values do not compare (mixed types) keep relay order."""
    try:
        group.sort(key=lambda op: op.key_values)
    except TypeError:
        group.sort(key=lambda op: op.position)


def part_statements(
    part: PlanPart, *, max_rows: int = MAX_STATEMENT_ROWS,
    max_bytes: int = MAX_STATEMENT_BYTES, rules: TableRules | None = None,
    lane: Lane = (0, 1),
) -> list[Statement]:
    """What :func:`apply_plan_part` sends, in order (for inspection and tests)."""
    statements = [st for st, _ in _keyed_statements(
        part.ops, max_rows, max_bytes, None if rules is None else LoadKinds(rules), lane)]
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
    retries: int = 5, max_packet: int | None = None, rules: TableRules | None = None,
    lane: Lane = (0, 1),
) -> bool:
    """Apply one task's work in one downstream transaction. Returns False if ``ledger``
    shows the task already committed (nothing done), True otherwise.  With ``rules`` (the
    downstream's catalog) survivors are loaded where their columns allow
    (:class:`LoadKinds`); ``lane``: this task's index and how many write the batch at once
    (:func:`_turns`).

    Keyed survivors are idempotent: running the part again, before or after other parts,
    gives the same result, with or without a ledger. An ordered table is not, so its part
    needs a ledger: the claim and the data commit together, so it runs exactly once.
    """
    if part.ordered is not None and ledger is None:
        raise ApplyError("an ordered task needs a task ledger to run exactly once",
                         table=str(part.ordered.table),
                         hint="pass ledger=TaskLedger(pipeline, batch_id)")
    return _guarded(conn, [part],
                    lambda kinds_of: _runnable(part, max_rows, max_bytes, max_packet, kinds_of,
                                               lane),
                    lambda cur: ledger is None or _claim(cur, ledger, part.task_id),
                    action=f"applying task {part.task_id}", retries=retries,
                    max_packet=max_packet, rules=rules)


def apply_parts_with_checkpoint(
    conn: Any, parts: Sequence[PlanPart], update: CheckpointUpdate, *,
    max_rows: int = MAX_STATEMENT_ROWS, retries: int = 5, max_packet: int | None = None,
    rules: TableRules | None = None,
) -> bool:
    """A whole batch (every part, ordered ones included) and its checkpoint move in one
    downstream transaction: no ledger and no batch in flight, since nothing of it can be
    half done.  The checkpoint must be at ``update.before``; at ``update.after`` the batch
    was applied before and nothing is done (False)."""
    if runs_scripts(conn) and _in_one_trip(conn, parts, update, max_rows, max_packet):
        return True
    return _guarded(conn, parts,
                    lambda kinds_of: [st for part in parts for st in _runnable(
                        part, max_rows, None, max_packet, kinds_of)],
                    lambda cur: advance_in_transaction(cur, update),
                    action=f"applying the batch ending at {update.after}", retries=retries,
                    max_packet=max_packet, rules=rules)


#: The biggest script :func:`_in_one_trip` sends: beyond it the rows a load would take
#: (about 3 µs of the server's CPU a row less than by REPLACE, BENCHMARKS.md "Session 31")
#: outweigh the round trips saved.
_ONE_TRIP_BYTES = 1 << 20


def _in_one_trip(conn: Any, parts: Sequence[PlanPart], update: CheckpointUpdate,
                 max_rows: int, max_packet: int | None) -> bool:
    """A batch of keyed rows and the checkpoint's move sent as one script, then committed:
    two round trips where one per statement took ten on a streaming sync's batches, each a
    wait for a CPU when the host is busy.  Committed (True) only when every statement did
    what :func:`apply_parts_with_checkpoint` requires of it (the checkpoint's move matched
    its row, no statement warned or matched other than it must); else rolled back (False),
    and the caller runs the batch again a statement at a time, where every error, warning
    and refusal is told as ever.  Rows go by REPLACE (a load is two round trips); batches
    replayed in relay order (upstream statements among them) and scripts bigger than
    ``_ONE_TRIP_BYTES`` or than one statement may be take the ordinary way."""
    if update.before == update.after or any(part.ordered is not None for part in parts):
        return False
    statements = [st for part in parts for st, _singles in _runnable(part, max_rows, None,
                                                                     max_packet)]
    try:
        with conn.cursor() as cur:
            move = cur.mogrify(*advance_statement(update))
            texts = [move, *(st.sql if st.params is None else cur.mogrify(st.sql, st.params)
                             for st in statements)]
            limit = min(_ONE_TRIP_BYTES, statement_bytes(max_packet))
            chars = sum(map(len, texts))
            if chars > limit or (4 * chars > limit and  # (a character is 1 to 4 bytes)
                                 len(script_packet(texts, conn.encoding)) > limit):
                return False
            counts = script_counts(cur, texts)
        taken = counts[0][0] == 1 and not any(warned for _matched, warned in counts) and all(
            st.expect_rows is None or matched == st.expect_rows
            for st, (matched, _warned) in zip(statements, counts[1:], strict=True))
        if taken:
            conn.commit()
            return True
    except (ScriptError, pymysql.MySQLError) as exc:
        error = exc.error if isinstance(exc, ScriptError) else exc
        rollback_quietly(conn)
        if not isinstance(exc, ScriptError) and errno_of(error) not in RETRY_ERRORS:
            # (The COMMIT: the ordinary way's _transaction says the same of it.)
            raise map_error(error, f"committing the batch ending at {update.after}") from None
        log.debug("the batch ending at %s as one script: %s; run again a statement at a"
                  " time", update.after, error)
        return False
    except BaseException:
        rollback_quietly(conn)
        raise
    rollback_quietly(conn)
    return False


Runnable = list[tuple[Statement, Callable[[], list[Statement]] | None]]


def _guarded(conn: Any, parts: Sequence[PlanPart],
             statements: Callable[[LoadKinds | None], Runnable],
             guard: Callable[[Any], bool], *, action: str, retries: int,
             max_packet: int | None, rules: TableRules | None) -> bool:
    """``statements`` in one transaction, after ``guard(cursor)`` (a ledger claim, the
    checkpoint's move) said they are to run; False (rolled back) when it said no.  A load
    whose result is not taken (:func:`_check_load`) has the transaction run again with
    REPLACE for every row."""

    def body(runnable: Runnable) -> Callable[[Any], bool | None]:
        def run(cur: Any) -> bool | None:
            if not guard(cur):
                return None
            for st, singles in runnable:
                run_statement(cur, st, singles, action, max_packet)
            return True
        return run

    kinds_of = None if rules is None or getattr(conn, "loads_refused", False) else \
        LoadKinds(rules, getattr(conn, "refused_loads", ()))
    try:
        try:
            done = _transaction(conn, body(statements(kinds_of)), action=action,
                                retries=retries)
        except _LoadRefused as refused:
            log.debug("rows of %s written by REPLACE instead of a load: %s", refused.table,
                      refused)
            if refused.server:
                conn.loads_refused = True
            elif refused.table is not None and hasattr(conn, "refused_loads"):
                conn.refused_loads = conn.refused_loads | {refused.table}
            done = _transaction(conn, body(statements(None)), action=action, retries=retries)
    finally:
        if any(p.ordered is not None and p.ordered.reason == FK_LINKED for p in parts):
            _restore_fk_checks(conn)
    return done is not None


def _runnable(part: PlanPart, max_rows: int, max_bytes: int | None, max_packet: int | None,
              kinds_of: LoadKinds | None = None, lane: Lane = (0, 1)) -> Runnable:
    """A part's statements in order, each with how to split it into single rows (keyed
    statements) to find the row a failure is about."""
    if max_bytes is None:
        max_bytes = statement_bytes(max_packet)
    out: Runnable = list(_keyed_statements(part.ops, max_rows, max_bytes, kinds_of, lane))
    if part.ordered is not None:
        out += [(st, None) for st in ordered_statements(
            part.ordered.changes, fk=part.ordered.reason == FK_LINKED)]
    return out


def _restore_fk_checks(conn: Any) -> None:
    # A failed group replay may stop with checks on; the pooled session must not keep them.
    with contextlib.suppress(pymysql.MySQLError), conn.cursor() as cur:
        cur.execute(_FK_OFF.sql)


def _claim(cur: Any, ledger: TaskLedger, task_id: str) -> bool:
    try:
        cur.execute(ledger.claim_sql(), (ledger.pipeline, ledger.batch_id, task_id))
    except pymysql.err.IntegrityError as exc:
        if errno_of(exc) == 1062:
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


