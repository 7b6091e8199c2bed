"""The claim of DESIGN.md ("why concurrent apply is safe") as a property test.

A random upstream history over tables with a primary key and a secondary unique key (with
key changes and unique-value swaps through intermediate states) and over a keyless table
with duplicate rows is simulated; the planner's survivors are applied to a downstream that
holds the batch-start state, in random task orders with random repeats (retries, crash
replays). The downstream must equal the simulated upstream at the batch end every time.

Checked twice: against a pure model of REPLACE/DELETE semantics (many examples, fast) and
against a real MariaDB (fewer examples, real SQL).
"""

from __future__ import annotations

import contextlib
import itertools
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binrelay.apply import (
    ABSENT,
    DELETE,
    INSERT,
    UPDATE,
    Change,
    Downstream,
    TableRef,
    TaskLedger,
    apply_plan_part,
    create_checkpoint_table,
    plan_batch,
)
from binrelay.apply.plan import Delete, PlanPart, Upsert, _canonical
from binrelay.apply.sql import quote_table
from binrelay.testing.sandbox import MariaDBServer, ServerFactory

# ---- the tables --------------------------------------------------------------------------


@dataclass(frozen=True)
class TableDef:
    ref: TableRef
    columns: tuple[str, ...]
    key: tuple[int, ...]
    unique: tuple[tuple[int, ...], ...]
    values: tuple[st.SearchStrategy[Any], ...]
    ddl: str
    #: A key value no generated row uses, for swaps through an intermediate state.
    spare_key: tuple[Any, ...] = ()
    spare_unique: Any = None


SCHEMA = "prop"
T1 = TableDef(
    TableRef(SCHEMA, "t1"), ("id", "u", "v"), (0,), ((1,),),
    (st.integers(1, 8), st.none() | st.integers(1, 6),
     st.sampled_from([None, "", "a", "b'c", "ü", "x\\y", "%s"])),
    "id INT NOT NULL PRIMARY KEY, u INT NULL UNIQUE, v VARCHAR(20) NULL",
    spare_key=(99,), spare_unique=99,
)
T2 = TableDef(
    TableRef(SCHEMA, "t2"), ("a", "b", "u", "w"), (0, 1), ((2,),),
    (st.integers(1, 3), st.sampled_from(["x", "y", "X", "é", "e"]),
     st.sampled_from(["u1", "u2", "u3", "u4", "u5"]),
     st.none() | st.binary(max_size=4)),
    "a INT NOT NULL, b VARCHAR(10) COLLATE utf8mb4_bin NOT NULL,"
    " u VARCHAR(10) NOT NULL UNIQUE, w VARBINARY(10) NULL, PRIMARY KEY (a, b)",
    spare_key=(9, "tmp"), spare_unique="tmp",
)
T3 = TableDef(
    TableRef(SCHEMA, "t3"), ("x", "y"), (), (),
    (st.none() | st.integers(1, 3), st.sampled_from([None, "p", "q"])),
    "x INT NULL, y VARCHAR(10) NULL",
)
TABLES = (T1, T2, T3)
BY_REF = {t.ref: t for t in TABLES}

# ---- the upstream simulation --------------------------------------------------------------

State = dict[TableRef, list[tuple[Any, ...]]]


def _conflicts(t: TableDef, rows: list[tuple[Any, ...]], row: tuple[Any, ...],
               skip: int | None = None) -> bool:
    for i, other in enumerate(rows):
        if i == skip:
            continue
        if t.key and all(row[k] == other[k] for k in t.key):
            return True
        for cols in t.unique:
            if all(row[c] is not None and row[c] == other[c] for c in cols):
                return True
    return False


class Upstream:
    """Applies random valid operations to a state and records them as changes."""

    def __init__(self, data: st.DataObject, state: State) -> None:
        self.data = data
        self.state = state
        self.changes: list[Change] = []
        self._positions = itertools.count()
        self.txn = 0

    def _record(self, t: TableDef, op: str, before: Any, after: Any) -> None:
        self.changes.append(Change(t.ref, op, t.columns, t.key, before, after,
                                   (self.txn, next(self._positions))))

    def insert(self, t: TableDef, row: tuple[Any, ...]) -> bool:
        rows = self.state[t.ref]
        if _conflicts(t, rows, row):
            return False
        rows.append(row)
        self._record(t, INSERT, None, row)
        return True

    def update(self, t: TableDef, index: int, row: tuple[Any, ...]) -> bool:
        rows = self.state[t.ref]
        if _conflicts(t, rows, row, skip=index):
            return False
        before, rows[index] = rows[index], row
        self._record(t, UPDATE, before, row)
        return True

    def delete(self, t: TableDef, index: int) -> None:
        before = self.state[t.ref].pop(index)
        self._record(t, DELETE, before, None)

    def _draw_row(self, t: TableDef) -> tuple[Any, ...]:
        return tuple(self.data.draw(s) for s in t.values)

    def _pick(self, t: TableDef) -> int | None:
        rows = self.state[t.ref]
        return self.data.draw(st.integers(0, len(rows) - 1)) if rows else None

    def step(self) -> None:
        t = self.data.draw(st.sampled_from(TABLES))
        kinds = ["insert", "insert", "update", "update", "delete"]
        if t.key:
            kinds += ["swap_unique", "swap_key"]
        kind = self.data.draw(st.sampled_from(kinds))
        index = self._pick(t)
        if kind == "insert" or index is None:
            self.insert(t, self._draw_row(t))
        elif kind == "delete":
            self.delete(t, index)
        elif kind == "update":
            old = self.state[t.ref][index]
            new = self._draw_row(t)
            # Keep some columns (the key, often): change only what the mask says.
            mask = self.data.draw(st.lists(st.booleans(), min_size=len(old),
                                           max_size=len(old)))
            self.update(t, index, tuple(n if m else o for o, n, m in zip(old, new, mask,
                                                                          strict=True)))
        else:
            self._swap(t, index, kind)

    def _swap(self, t: TableDef, a: int, kind: str) -> None:
        """Two rows exchange their key (or unique value) through a spare value, as an
        application must: three updates in one transaction."""
        rows = self.state[t.ref]
        b = self._pick(t)
        assert b is not None
        if a == b:
            return
        cols = t.key if kind == "swap_key" else t.unique[0]
        spare = t.spare_key if kind == "swap_key" else (t.spare_unique,)

        def with_cols(row: tuple[Any, ...], values: tuple[Any, ...]) -> tuple[Any, ...]:
            out = list(row)
            for c, v in zip(cols, values, strict=True):
                out[c] = v
            return tuple(out)

        va = tuple(rows[a][c] for c in cols)
        vb = tuple(rows[b][c] for c in cols)
        if None in va or None in vb:
            return
        assert self.update(t, a, with_cols(rows[a], spare))
        assert self.update(t, b, with_cols(rows[b], va))
        assert self.update(t, a, with_cols(rows[a], vb))

    def run(self, transactions: int) -> None:
        for _ in range(transactions):
            self.txn += 1
            for _ in range(self.data.draw(st.integers(1, 4))):
                self.step()


def _copy(state: State) -> State:
    return {ref: list(rows) for ref, rows in state.items()}


def minimal_image(data: st.DataObject, change: Change) -> Change:
    """The change as binlog_row_image=MINIMAL would log it: the before image holds only the
    key (all columns for a keyless table), the after image of an update only the columns the
    statement set (at least those that changed)."""
    if change.op == INSERT:
        return change
    before = change.before
    assert before is not None
    if change.key:
        before = tuple(v if i in change.key else ABSENT for i, v in enumerate(before))
    after = change.after
    if after is not None:
        extra = data.draw(st.lists(st.booleans(), min_size=len(after), max_size=len(after)))
        after = tuple(new if new != old or keep else ABSENT
                      for old, new, keep in zip(change.before, after, extra, strict=True))
    return Change(change.table, change.op, change.columns, change.key, before, after,
                  change.position)


@dataclass
class Scenario:
    start: State
    end: State
    changes: list[Change]


def scenario(data: st.DataObject, *, minimal: bool = False) -> Scenario:
    state: State = {t.ref: [] for t in TABLES}
    Upstream(data, state).run(data.draw(st.integers(0, 6)))
    start = _copy(state)
    upstream = Upstream(data, state)
    upstream.txn = 1000
    upstream.run(data.draw(st.integers(1, 10)))
    changes = upstream.changes
    if minimal:
        changes = [minimal_image(data, c) for c in changes]
    return Scenario(start, state, changes)


def schedule(data: st.DataObject, count: int) -> list[int]:
    """Every task at least once, in a random order, some of them again (retries, replays
    of a crashed batch, speculative copies)."""
    if count == 0:
        return []
    order = data.draw(st.permutations(range(count)))
    repeats = data.draw(st.lists(st.integers(0, count - 1), max_size=count * 2))
    crashed_prefix = data.draw(st.lists(st.integers(0, count - 1), max_size=count))
    return crashed_prefix + list(order) + repeats


def canonical(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


# ---- a pure model of the downstream ---------------------------------------------------------


def model_apply(state: State, part: PlanPart, ledger: set[str] | None) -> None:
    if ledger is not None:
        if part.task_id in ledger:
            return
        ledger.add(part.task_id)
    for op in part.ops:
        t = BY_REF[op.table]
        rows = state[op.table]
        if isinstance(op, Delete):
            rows[:] = [r for r in rows if tuple(r[k] for k in t.key) != op.key_values]
        else:
            assert isinstance(op, Upsert)
            # REPLACE: every row conflicting on the key or a unique key goes, then the row.
            rows[:] = [r for r in rows if not _conflicts(t, [r], op.row)]
            rows.append(op.row)
    if part.ordered is not None:
        for change in part.ordered.changes:
            _model_replay(state, change)


def _model_replay(state: State, change: Change) -> None:
    rows = state[change.table]
    if change.op == INSERT:
        assert change.after is not None
        rows.append(change.after)
        return
    assert change.before is not None
    where = change.key or tuple(i for i, v in enumerate(change.before) if v is not ABSENT)
    index = next(i for i, r in enumerate(rows) if all(r[c] == change.before[c] for c in where))
    if change.op == DELETE:
        rows.pop(index)
    else:
        assert change.after is not None
        rows[index] = tuple(o if n is ABSENT else n for o, n in zip(rows[index], change.after,
                                                                   strict=True))


def _forced(data: st.DataObject) -> set[TableRef]:
    return set(data.draw(st.lists(st.sampled_from([T1.ref, T2.ref]), max_size=2)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_model_any_order_any_repeats(data: st.DataObject) -> None:
    sc = scenario(data, minimal=data.draw(st.booleans()))
    plan = plan_batch(sc.changes, ordered_tables=_forced(data))
    parts = plan.parts(data.draw(st.integers(1, 4)))
    state = _copy(sc.start)
    ledger: set[str] = set()
    keyed_ledger = data.draw(st.booleans())
    for i in schedule(data, len(parts)):
        part = parts[i]
        model_apply(state, part, ledger if keyed_ledger or part.ordered else None)
    for t in TABLES:
        assert canonical(state[t.ref]) == canonical(sc.end[t.ref]), t.ref


# ---- against a real MariaDB ------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(mariadb_template: Path, mariadb_socket_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    factory = ServerFactory(tmp_path_factory.mktemp("apply-prop"), template=mariadb_template,
                            socket_dir=mariadb_socket_dir)
    try:
        yield factory(server_id=1, extra_args=["--skip-log-bin"])
    finally:
        factory.close()


@pytest.fixture(scope="module")
def downstream(server: MariaDBServer) -> Iterator[Any]:
    conn = Downstream(server.host, server.port).connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        for t in TABLES:
            cur.execute(f"CREATE TABLE {quote_table(t.ref)} ({t.ddl}) ENGINE=InnoDB")
    conn.commit()
    create_checkpoint_table(conn)
    try:
        yield conn
    finally:
        conn.close()


_batches = itertools.count(1)


def _load(conn: Any, state: State) -> None:
    with conn.cursor() as cur:
        for t in TABLES:
            cur.execute(f"DELETE FROM {quote_table(t.ref)}")
            rows = state[t.ref]
            if rows:
                marks = ", ".join(["%s"] * len(t.columns))
                cur.executemany(f"INSERT INTO {quote_table(t.ref)} VALUES ({marks})", rows)
    conn.commit()


def _dump(conn: Any) -> State:
    out: State = {}
    with conn.cursor() as cur:
        for t in TABLES:
            cur.execute(f"SELECT * FROM {quote_table(t.ref)}")
            out[t.ref] = [tuple(r) for r in cur.fetchall()]
    conn.commit()
    return out


def _check_downstream(conn: Any, data: st.DataObject, sc: Scenario) -> None:
    _load(conn, sc.start)
    plan = plan_batch(sc.changes, ordered_tables=_forced(data))
    parts = plan.parts(data.draw(st.integers(1, 4)))
    ledger = TaskLedger("prop", next(_batches))
    keyed_ledger = data.draw(st.booleans())
    for i in schedule(data, len(parts)):
        part = parts[i]
        apply_plan_part(conn, part, ledger=ledger if keyed_ledger or part.ordered else None,
                        max_rows=data.draw(st.sampled_from([1, 3, 1000])))
    got = _dump(conn)
    for t in TABLES:
        assert canonical(got[t.ref]) == canonical(sc.end[t.ref]), t.ref


_DB_SETTINGS = settings(max_examples=100, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow,
                                               HealthCheck.data_too_large])


@_DB_SETTINGS
@given(st.data())
def test_mariadb_equals_upstream_at_batch_end(downstream: Any, data: st.DataObject) -> None:
    _check_downstream(downstream, data, scenario(data))


@settings(_DB_SETTINGS, max_examples=50)
@given(st.data())
def test_mariadb_equals_upstream_minimal_images(downstream: Any, data: st.DataObject) -> None:
    _check_downstream(downstream, data, scenario(data, minimal=True))


def test_keyless_duplicates_replayed_exactly_once(downstream: Any) -> None:
    """Identical rows in a keyless table: one of two duplicates updated, one deleted, the
    ordered task run three times: exactly one application counts."""
    t = T3
    row = (1, "p")
    start: State = {T1.ref: [], T2.ref: [], T3.ref: [row, row, row]}
    changes = [
        Change(t.ref, UPDATE, t.columns, (), row, (2, "q"), (1, 0)),
        Change(t.ref, DELETE, t.columns, (), row, None, (1, 1)),
        Change(t.ref, INSERT, t.columns, (), None, (2, "q"), (2, 0)),
        Change(t.ref, INSERT, t.columns, (), None, (None, None), (2, 1)),
        Change(t.ref, DELETE, t.columns, (), (None, None), None, (2, 2)),
    ]
    _load(downstream, start)
    plan = plan_batch(changes)
    assert not plan.keyed and [o.table for o in plan.ordered] == [t.ref]
    ledger = TaskLedger("prop", next(_batches))
    (part,) = plan.parts(3)
    assert apply_plan_part(downstream, part, ledger=ledger) is True
    assert apply_plan_part(downstream, part, ledger=ledger) is False
    assert apply_plan_part(downstream, part, ledger=ledger) is False
    got = _dump(downstream)[t.ref]
    assert canonical(got) == canonical([(1, "p"), (2, "q"), (2, "q")])


def test_ordered_task_rolled_back_is_replayed(downstream: Any, server: MariaDBServer) -> None:
    """A task whose connection dies before commit leaves nothing, not even its ledger claim:
    the replay applies it."""
    t = T3
    _load(downstream, {T1.ref: [], T2.ref: [], T3.ref: []})
    changes = [Change(t.ref, INSERT, t.columns, (), None, (i, "p"), (1, i)) for i in range(5)]
    (part,) = plan_batch(changes).parts(1)
    ledger = TaskLedger("prop", next(_batches))
    doomed = Downstream(server.host, server.port).connect()
    with doomed.cursor() as cur:
        cur.execute(ledger.claim_sql(), (ledger.pipeline, ledger.batch_id, part.task_id))
        cur.execute(f"INSERT INTO {quote_table(t.ref)} VALUES (7, 'zz')")
    doomed.close()  # no commit: the crash
    assert apply_plan_part(downstream, part, ledger=ledger) is True
    with contextlib.closing(server.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT x FROM {quote_table(t.ref)} ORDER BY x")
        assert [r[0] for r in cur.fetchall()] == [0, 1, 2, 3, 4]


def test_a_batch_begun_with_another_key_routing(downstream: Any) -> None:
    """A batch in flight across an upgrade: the older release routed keys one by one (now
    by block) and its ledger names two of its three tasks committed.  The keyed tasks'
    ids name the routing, so none is skipped for a task that held other keys; running
    them all again (keyed survivors are idempotent) gives the batch's result."""
    t = T1
    _load(downstream, {T1.ref: [], T2.ref: [], T3.ref: []})
    want = [(i, None, "v") for i in range(1, 3001)]
    plan = plan_batch([Change(t.ref, INSERT, t.columns, (0,), None, row, (1, i))
                       for i, row in enumerate(want)])
    head = zlib.crc32(_canonical(t.ref.schema) + _canonical(t.ref.table))
    older: list[list[Any]] = [[], [], []]
    for op in plan.keyed:
        older[zlib.crc32(_canonical(op.key_values[0]), head) % 3].append(op)
    ledger = TaskLedger("prop", next(_batches))
    for i in (0, 1):
        assert apply_plan_part(downstream, PlanPart(f"keyed-{i}-of-3", tuple(older[i])),
                               ledger=ledger)
    parts = plan.parts(3)
    assert {p.ops for p in parts}.isdisjoint(tuple(ops) for ops in older)
    assert all(apply_plan_part(downstream, part, ledger=ledger) for part in parts)
    assert canonical(_dump(downstream)[t.ref]) == canonical(want)


@pytest.mark.parametrize("reverse", [False, True])
def test_key_change_the_collation_ignores(downstream: Any, reverse: bool) -> None:
    """Upstream (case-insensitive key) renames 'a' to 'A': the same row for the server, two
    keys for the planner. Compacted, delete('a') after REPLACE('A') would delete the row;
    the planner sees the keys fold together and replays the table in order instead."""
    ref = TableRef(SCHEMA, "ci")
    with downstream.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {quote_table(ref)} (k VARCHAR(10) COLLATE"
                    " utf8mb4_general_ci NOT NULL PRIMARY KEY, n INT NOT NULL)")
        cur.execute(f"DELETE FROM {quote_table(ref)}")
        cur.execute(f"INSERT INTO {quote_table(ref)} VALUES ('a', 1), ('b ', 2)")
    downstream.commit()
    cols = ("k", "n")
    changes = [Change(ref, UPDATE, cols, (0,), ("a", 1), ("A", 1), (1, 0)),
               Change(ref, UPDATE, cols, (0,), ("b ", 2), ("B", 3), (1, 1))]
    plan = plan_batch(changes)
    assert not plan.keyed and plan.ordered[0].reason.startswith("key values that")
    parts = plan.parts(2)
    ledger = TaskLedger("prop", next(_batches))
    for part in reversed(parts) if reverse else parts:
        apply_plan_part(downstream, part, ledger=ledger)
    with downstream.cursor() as cur:
        cur.execute(f"SELECT k, n FROM {quote_table(ref)} ORDER BY n")
        assert cur.fetchall() == (("A", 1), ("B", 3))
    downstream.commit()
