"""The pure parts of the apply side: changes, planning, partitioning, statements."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from binrelay.apply import (
    ABSENT,
    DELETE,
    INSERT,
    UPDATE,
    Change,
    Downstream,
    PlanPart,
    TableRef,
    TaskLedger,
    partition_of,
    plan_batch,
)
from binrelay.apply.catalog import keeps_rules
from binrelay.apply.plan import (
    FOLDED_KEYS,
    NO_KEY,
    PARTIAL_IMAGE,
    Delete,
    Upsert,
    batch_ordered_tables,
    fold_key,
    key_ops,
    keyed_task_id,
    partitioner,
)
from binrelay.apply.sql import (
    TRIGGER_EVENTS,
    TablesGone,
    change_statement,
    creates_by_select,
    ddl_kind,
    delete_keys,
    events_fired,
    name_spelled,
    quote_ident,
    quote_table,
    rename_targets,
    replace_rows,
    sql_literal,
    tables_gone,
    trigger_ddl,
)
from binrelay.errors import ChangeError

T = TableRef("db", "t")
COLS = ("id", "u", "v")
KEY = (0,)


def ins(row: tuple[Any, ...], pos: int, table: TableRef = T, key: tuple[int, ...] = KEY
        ) -> Change:
    return Change(table, INSERT, COLS, key, None, row, (pos,))


def upd(before: tuple[Any, ...], after: tuple[Any, ...], pos: int, table: TableRef = T,
        key: tuple[int, ...] = KEY) -> Change:
    return Change(table, UPDATE, COLS, key, before, after, (pos,))


def dele(before: tuple[Any, ...], pos: int, table: TableRef = T, key: tuple[int, ...] = KEY
         ) -> Change:
    return Change(table, DELETE, COLS, key, before, None, (pos,))


# ---- changes --------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"op": "upsert"}, "unknown op"),
    ({"before": (1, 2, 3)}, "insert must not have a before image"),
    ({"after": None}, "insert must have an after image"),
    ({"after": (1, 2)}, "after image has 2 values for 3 columns"),
    ({"key": (3,)}, "does not index"),
    ({"key": (0, 0)}, "does not index"),
    ({"position": ()}, "empty position"),
    ({"after": (None, 2, 3)}, "NULL or missing"),
    ({"after": (ABSENT, 2, 3)}, "NULL or missing"),
])
def test_malformed_changes_are_refused(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"table": T, "op": INSERT, "columns": COLS, "key": KEY,
                              "before": None, "after": (1, 2, 3), "position": (7,)}
    fields.update(kwargs)
    with pytest.raises(ChangeError, match=message) as info:
        Change(**fields)
    assert "db.t" in str(info.value) and "\n" not in str(info.value)


def test_minimal_update_may_omit_unchanged_key() -> None:
    change = upd((5, ABSENT, ABSENT), (ABSENT, 2, ABSENT), 1)
    assert change.after_key == (5,) and change.partial
    with pytest.raises(ChangeError, match="sets a key column to NULL"):
        upd((5, 1, 1), (None, 1, 1), 1)


def test_values_and_plans_pickle() -> None:
    change = upd((1, ABSENT, b"\x00"), (1, ABSENT, "x"), 3)
    assert pickle.loads(pickle.dumps(change)) == change
    assert pickle.loads(pickle.dumps(change)).before[1] is ABSENT
    plan = plan_batch([ins((1, 2, "a"), 1), ins((1, None, None), 2, TableRef("db", "k"), ())])
    for part in plan.parts(3):
        assert pickle.loads(pickle.dumps(part)) == part
    ledger = TaskLedger("p", 4)
    assert pickle.loads(pickle.dumps(ledger)) == ledger


def test_downstream_repr_hides_password() -> None:
    target = Downstream("db.example", 3307, "app", "s3cret-pw")
    assert "s3cret-pw" not in repr(target) and "s3cret-pw" not in str(target)
    assert pickle.loads(pickle.dumps(target)).password == "s3cret-pw"


# ---- net effect -------------------------------------------------------------------------------


def _net(changes: list[Change]) -> set[tuple[str, tuple[Any, ...], tuple[Any, ...] | None]]:
    plan = plan_batch(changes)
    assert not plan.ordered
    return {("upsert", op.key_values, op.row) if isinstance(op, Upsert)
            else ("delete", op.key_values, None) for op in plan.keyed}


def test_last_change_per_key_wins() -> None:
    assert _net([ins((1, 1, "a"), 1), upd((1, 1, "a"), (1, 1, "b"), 2),
                 upd((1, 1, "b"), (1, 2, "c"), 3)]) == {("upsert", (1,), (1, 2, "c"))}


def test_insert_then_delete_is_a_delete() -> None:
    assert _net([ins((1, 1, "a"), 1), dele((1, 1, "a"), 2)]) == {("delete", (1,), None)}


def test_delete_then_insert_is_an_upsert() -> None:
    assert _net([dele((1, 1, "a"), 1), ins((1, 5, "z"), 2)]) == {
        ("upsert", (1,), (1, 5, "z"))}


def test_key_change_is_delete_plus_upsert() -> None:
    assert _net([upd((1, 1, "a"), (2, 1, "a"), 1)]) == {
        ("delete", (1,), None), ("upsert", (2,), (2, 1, "a"))}
    # ... and the old key can come back later in the batch.
    assert _net([upd((1, 1, "a"), (2, 1, "a"), 1), ins((1, 3, "n"), 2)]) == {
        ("upsert", (1,), (1, 3, "n")), ("upsert", (2,), (2, 1, "a"))}


def test_changes_in_any_input_order_plan_the_same() -> None:
    changes = [ins((1, 1, "a"), 1), upd((1, 1, "a"), (2, 1, "a"), 2), dele((2, 1, "a"), 3),
               ins((2, 7, "q"), 4)]
    assert plan_batch(changes).keyed == plan_batch(changes[::-1]).keyed


def test_key_ops_and_composite_keys() -> None:
    change = Change(T, UPDATE, COLS, (0, 2), (1, 2, "a"), (1, 3, "b"), (9,))
    delete, upsert = key_ops(change)
    assert delete == Delete(T, ("id", "v"), (1, "a"), (9,))
    assert isinstance(upsert, Upsert) and upsert.key_values == (1, "b")


def test_duplicate_changes_are_read_once_conflicting_ones_refused() -> None:
    change = ins((1, 1, "a"), 1)
    assert len(plan_batch([change, change]).keyed) == 1
    keyless = ins((1, 1, "a"), 1, key=())
    assert len(plan_batch([keyless, keyless]).ordered[0].changes) == 1
    with pytest.raises(ChangeError, match="same position"):
        plan_batch([ins((1, 1, "a"), 1), ins((1, 2, "a"), 1)])
    with pytest.raises(ChangeError, match="same position"):
        plan_batch([ins((1, 1, "a"), 1, key=()), ins((1, 2, "a"), 1, key=())])


@pytest.mark.parametrize(("changes", "reason"), [
    ([ins((1, 1, "a"), 1, key=())], NO_KEY),
    ([ins((1, 1, "a"), 1), upd((1, ABSENT, ABSENT), (ABSENT, 2, ABSENT), 2)], PARTIAL_IMAGE),
    ([Change(T, INSERT, COLS, (2,), None, (1, 1, "Ä "), (1,)),
      Change(T, INSERT, COLS, (2,), None, (2, 2, "a"), (2,))], FOLDED_KEYS),
])
def test_tables_that_cannot_be_compacted_are_replayed_in_order(
    changes: list[Change], reason: str,
) -> None:
    other = ins((1, 1, "x"), 10, TableRef("db", "other"))
    plan = plan_batch([*changes[::-1], other])
    assert [op.table for op in plan.keyed] == [other.table]
    (ordered,) = plan.ordered
    assert ordered.reason == reason and ordered.changes == tuple(changes)
    part = plan.parts(4)[-1]
    assert part.ordered == ordered and part.task_id == 'ordered:["db", "t"]'


def test_caller_can_force_the_ordered_path() -> None:
    plan = plan_batch([ins((1, 1, "a"), 1)], ordered_tables=[T])
    assert not plan.keyed and plan.ordered[0].changes == (ins((1, 1, "a"), 1),)


def test_a_batch_must_not_span_a_ddl() -> None:
    wider = Change(T, INSERT, (*COLS, "w"), KEY, None, (2, 2, "b", 0), (2,))
    with pytest.raises(ChangeError, match="must not span a DDL"):
        plan_batch([ins((1, 1, "a"), 1), wider])


# ---- partitioning ---------------------------------------------------------------------------


def test_partitions_are_stable_across_processes() -> None:
    keys = [(1,), ("é",), (b"\x00\xff",), (1, "a"), ("1",), (None,)]
    here = [partition_of(T, k, 7) for k in keys]
    script = ("from binrelay.apply import partition_of, TableRef; "
              f"print([partition_of(TableRef('db', 't'), k, 7) for k in {keys!r}])")
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                             capture_output=True, text=True).stdout
        assert out.strip() == repr(here)
    # Pinned: a change here reshuffles keys between tasks of a batch being replayed, and
    # must come with a new keyed_task_id (test_a_batch_begun_with_another_key_routing).
    assert here == [partition_of(T, k, 7) for k in keys] == [5, 4, 4, 6, 1, 6]
    assert keyed_task_id(2, 7) == "keyed-2-of-7-blocks1024"
    ints = [(0,), (-5,), (10**20,), (123456,), (True,), (1023,), (1024,)]
    assert [partition_of(T, k, 4) for k in ints] == [partitioner(T, 4)(k) for k in ints] \
        == [2, 1, 3, 2, 2, 2, 0]
    # One partitioner remembers each block's task: the same answers the second time.
    route = partitioner(T, 4)
    assert [route(k) for k in ints * 2] == [2, 1, 3, 2, 2, 2, 0] * 2
    # fold=True routes what fold_key makes of a key (how keyed survivors travel).
    folded = partitioner(T, 7, fold=True)
    texts = [("Ab ",), ("é",), (1, "A"), (5,), (b"A",)]
    assert [folded(k) for k in texts] == [partition_of(T, fold_key(k), 7) for k in texts]
    assert folded(("AB",)) == folded(("ab  ",))


def test_integer_keys_route_by_block() -> None:
    """Neighbouring integer keys go to one task (it writes runs of rows, not every n-th),
    and the blocks spread evenly."""
    route = partitioner(T, 4)
    assert len({route((k,)) for k in range(2048, 3072)}) == 1
    counts = [0] * 4
    for k in range(1, 250_001):
        counts[route((k,))] += 1
    assert max(counts) < 1.1 * 250_000 / 4


@given(st.lists(st.one_of(st.integers(), st.text(), st.binary(), st.none()), min_size=1,
                max_size=3), st.integers(1, 64))
def test_partition_in_range(key: list[Any], n: int) -> None:
    assert 0 <= partition_of(T, tuple(key), n) < n


def test_int_and_text_keys_do_not_collide_by_encoding() -> None:
    # "1" and 1, ("ab",) and ("a", "b") must be different inputs to the hash.
    values = {partition_of(T, k, 2**31) for k in [(1,), ("1",), ("ab",), ("a", "b")]}
    assert len(values) == 4


def test_parts_cover_every_survivor_once() -> None:
    changes = [ins((i, i, "v"), i) for i in range(50)]
    plan = plan_batch(changes)
    parts = plan.parts(4)
    assert sorted(op.position for p in parts for op in p.ops) == [(i,) for i in range(50)]
    assert len({p.task_id for p in parts}) == len(parts)
    with pytest.raises(ValueError):
        plan.parts(0)


# ---- statements -----------------------------------------------------------------------------


def test_quoting() -> None:
    assert quote_ident("a`b") == "`a``b`"
    assert quote_ident("") == "``"
    assert quote_table(TableRef("s`", "t.x")) == "`s```.`t.x`"


def test_replace_rows_bounded_by_rows_and_bytes() -> None:
    rows = [(i, "x" * 100) for i in range(10)]
    positions = [(i,) for i in range(10)]
    by_rows = replace_rows(T, ("id", "v"), rows, positions, max_rows=4)
    assert [len(s.positions) for s in by_rows] == [4, 4, 2]
    x = "x" * 100
    assert by_rows[0].sql.startswith(f"REPLACE INTO `db`.`t` (`id`, `v`) VALUES (0, '{x}'), ")
    assert by_rows[2].params is None
    assert by_rows[2].sql.endswith(f"VALUES (8, '{x}'), (9, '{x}')")
    by_bytes = replace_rows(T, ("id", "v"), rows, positions, max_bytes=300)
    assert all(len(s.positions) == 2 for s in by_bytes)
    assert all(len(s.sql.encode()) <= 300 for s in by_bytes)
    # Bytes, not characters: three-byte characters fill a statement three times as fast.
    wide = replace_rows(T, ("id", "v"), [(i, "漢" * 30) for i in range(10)], positions,
                        max_bytes=300)
    assert all(len(s.sql.encode()) <= 300 for s in wide) and len(wide) == 5
    huge = replace_rows(T, ("id", "v"), [(1, "y" * 10000)], [(1,)], max_bytes=500)
    assert len(huge) == 1
    with pytest.raises(ValueError, match="partial"):
        replace_rows(T, ("id", "v"), [(1, ABSENT)], [(1,)])


def test_keyed_rows_are_written_in_key_order() -> None:
    """Each multi-row statement writes neighbouring rows (a table larger than the buffer
    pool then reads each page once per statement, not once per row); keys whose values do
    not compare keep relay order."""
    import random

    from binrelay.apply.applier import part_statements

    keys = list(range(40))
    random.Random(7).shuffle(keys)
    ops = [Upsert(T, ("id", "v"), (0,), (k, f"v{k}"), (pos,)) for pos, k in enumerate(keys)]
    ops += [Delete(T, ("id",), (k,), (100 + pos,)) for pos, k in enumerate([71, 50, 64])]
    sts = part_statements(PlanPart("keyed-0-of-1", tuple(ops)), max_rows=16)
    assert sts[0].sql == "DELETE FROM `db`.`t` WHERE `id` IN (50, 64, 71)"
    written = [int(v) for s in sts[1:] for v in re.findall(r"\((\d+), 'v", s.sql)]
    assert written == sorted(keys) and len(sts) == 4
    # Each statement names the relay positions of its own rows.
    assert sts[1].positions == tuple((keys.index(k),) for k in range(16))
    odd = [Upsert(T, ("id", "v"), (0,), (k, "x"), (pos,))
           for pos, k in enumerate([3, "b", 1, "a"])]
    (st_,) = part_statements(PlanPart("keyed-0-of-1", tuple(odd)))
    assert st_.sql.endswith("VALUES (3, 'x'), ('b', 'x'), (1, 'x'), ('a', 'x')")


def test_delete_keys_forms_and_percent_in_names() -> None:
    (one,) = delete_keys(TableRef("d%", "t"), ("k%s",), [(1,), (2,)], [(1,), (2,)])
    assert one.sql == "DELETE FROM `d%`.`t` WHERE `k%s` IN (1, 2)" and one.params is None
    (two,) = delete_keys(T, ("a", "b"), [(1, "x")], [(1,)])
    assert two.sql == "DELETE FROM `db`.`t` WHERE (`a`, `b`) IN ((1, 'x'))"


_DECIMALS = st.decimals(min_value=-10**30, max_value=10**30, places=18, allow_nan=False,
                       allow_infinity=False)


@given(st.lists(st.one_of(st.integers(), st.text(), st.binary(), st.none(), st.booleans(),
                          _DECIMALS), min_size=1, max_size=4))
def test_rendered_values_are_what_pymysql_sends(values: list[Any]) -> None:
    """The keyed path renders its values itself: exactly as PyMySQL escapes parameters on
    the applier's session (backslash escapes on), checked against PyMySQL's own code."""
    import pymysql

    conn = pymysql.connections.Connection(defer_connect=True, charset="utf8mb4")
    conn.server_status = 0  # as the server answers a session without NO_BACKSLASH_ESCAPES
    assert [sql_literal(v) for v in values] == [conn.escape(v) for v in values]
    (st_,) = replace_rows(T, [f"c{i}" for i in range(len(values))], [tuple(values)], [(1,)])
    sql = "REPLACE INTO `db`.`t` (" + ", ".join(f"`c{i}`" for i in range(len(values))) + \
        ") VALUES (" + ", ".join(["%s"] * len(values)) + ")"
    assert st_.sql == sql % tuple(conn.escape(v) for v in values)


_ROW_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
    st.binary(max_size=6), st.binary(max_size=3).map(bytearray),
    st.text(alphabet=st.sampled_from("ab'\"\\\n\r\x00\x1a%é漢\U0001f600\udc80\udcff"),
            max_size=6),
    st.text(max_size=8), _DECIMALS)


@given(st.lists(st.lists(_ROW_VALUES, min_size=1, max_size=4).map(tuple), min_size=1,
                max_size=8),
       st.data(), st.integers(1, 5), st.integers(-5, 160), st.booleans())
def test_rows_rendered_in_c_as_the_specification_does(
        rows: list[tuple[Any, ...]], data: Any, max_rows: int, max_bytes: int,
        bare: bool) -> None:
    """``_speedups.render_rows`` (C) against ``render_rows_python``: the same rows taken,
    the same bytes on the wire (text with escaped surrogates may differ as ``str`` only
    where its UTF-8 bytes do not)."""
    from binrelay.apply import sql

    assert sql.render_rows_c is not None, "binrelay._speedups was not built"
    start = data.draw(st.integers(0, len(rows) - 1))
    end, text = sql.render_rows_python(rows, start, max_rows, max_bytes, bare)
    c_end, c_text = sql.render_rows_c(rows, start, max_rows, max_bytes, bare)
    assert (c_end, c_text.encode("utf-8", "surrogateescape")) == \
        (end, text.encode("utf-8", "surrogateescape"))
    assert start < end <= min(len(rows), start + max_rows)


def _outcome(render: Any, *args: Any) -> Any:
    try:
        return render(*args)
    except Exception as exc:  # (both must fail alike)
        return type(exc)


@given(st.lists(st.lists(_ROW_VALUES, min_size=1, max_size=4).map(tuple), min_size=1,
                max_size=8),
       st.data(), st.integers(1, 5), st.integers(-5, 160))
def test_load_lines_rendered_in_c_as_the_specification_does(
        rows: list[tuple[Any, ...]], data: Any, max_rows: int, max_bytes: int) -> None:
    """``_speedups.render_tsv`` (C) against ``render_tsv_python``: the same rows taken and
    bytes made, the same refusals (None: a value not of its column's kind, a row of another
    width, a first row over the bound) and errors."""
    from binrelay.apply import sql

    assert sql.render_tsv_c is not None, "binrelay._speedups was not built"
    start = data.draw(st.integers(0, len(rows) - 1))
    width = data.draw(st.sampled_from([len(rows[start]), len(rows[start]) + 1]))
    kinds = "".join(data.draw(st.lists(st.sampled_from("insb"), min_size=width,
                                       max_size=width)))
    args = (rows, start, max_rows, max_bytes, kinds)
    expected = _outcome(sql.render_tsv_python, *args)
    assert _outcome(sql.render_tsv_c, *args) == expected
    if isinstance(expected, tuple):
        end, lines = expected
        assert start < end <= min(len(rows), start + max_rows)
        assert lines.count(b"\n") == end - start


def test_load_lines_are_what_load_data_reads() -> None:
    """Fields escaped as LOAD DATA's default ESCAPED BY reads them: NULL as \\N, the
    escape, tab, newline, NUL and CR escaped, every other byte as it is."""
    from binrelay.apply import sql

    assert sql.render_tsv_c is not None, "binrelay._speedups was not built"
    rows = [(7, "a\tb\\N\n\x00\r'\"é", b"\xff\t", Decimal("-1.50"), None, True),
            (2**70, "\\N", "x", 0, "NULL", False)]
    want = (b"7\ta\\tb\\\\N\\n\\0\\r'\"\xc3\xa9\t\xff\\t\t-1.50\t\\N\t1\n"
            b"1180591620717411303424\t\\\\N\tx\t0\tNULL\t0\n")
    for render in (sql.render_tsv_python, sql.render_tsv_c):
        assert render(rows, 0, 10, 1000, "isbnsi") == (2, want)
        assert render(rows, 0, 1, 1000, "isbnsi") == (1, want[:want.index(b"\n") + 1])
        assert render(rows, 0, 10, 60, "isbnsi") == (1, want[:want.index(b"\n") + 1])
        assert render(rows, 0, 10, 10, "isbnsi") is None  # the first row alone is over
        assert render(rows, 0, 10, 1000, "ssbnsi") is None  # an int for a text column
        assert render(rows, 0, 10, 1000, "iibnsi") is None  # text for an integer column
        assert render(rows, 0, 10, 1000, "isbisi") is None  # a DECIMAL for an integer one
        assert render([(Decimal("NaN"),)], 0, 10, 100, "n") is None
        assert render([(1, 2)], 0, 10, 100, "i") is None  # another width


def test_rows_rendered_in_c_refuse_what_the_specification_refuses() -> None:
    from binrelay.apply import sql

    assert sql.render_rows_c is not None, "binrelay._speedups was not built"
    for render in (sql.render_rows_python, sql.render_rows_c):
        with pytest.raises(TypeError, match=r"not a row value.*float"):
            render([(1, 1.5)], 0, 10, 100, False)
        with pytest.raises(TypeError, match="not a row value"):
            render([(1, ABSENT)], 0, 10, 100, False)
        with pytest.raises(TypeError):  # no DECIMAL column holds it
            render([(Decimal("NaN"),)], 0, 10, 100, False)
        with pytest.raises(UnicodeEncodeError):  # a lone surrogate: no UTF-8 for it
            render([("\ud800",)], 0, 10, 100, False)


def test_change_statements() -> None:
    st_ins = change_statement(ins((1, ABSENT, "a"), 1))
    assert st_ins is not None and st_ins.sql == "INSERT INTO `db`.`t` (`id`, `v`) VALUES (%s, %s)"
    st_upd = change_statement(upd((1, ABSENT, ABSENT), (ABSENT, 5, ABSENT), 2))
    assert st_upd is not None
    assert st_upd.sql == "UPDATE `db`.`t` SET `u` = %s WHERE `id` = %s"
    assert st_upd.params == (5, 1) and st_upd.expect_rows == 1
    st_del = change_statement(dele((1, None, "a"), 3, key=()))
    assert st_del is not None
    assert st_del.sql == ("DELETE FROM `db`.`t` WHERE `id` <=> %s AND `u` <=> %s"
                          " AND `v` <=> %s LIMIT 1")
    # A text column's value also by its characters (a collation takes 'a' and 'A' for one);
    # not a str of another column (the text of a FLOAT or a time: the server's own text of
    # the stored value may be spelled otherwise).
    st_text = change_statement(replace(dele((1, "1.5", "a"), 3, key=()), text=(2,)))
    assert st_text is not None
    assert st_text.sql == ("DELETE FROM `db`.`t` WHERE `id` <=> %s AND `u` <=> %s"
                           " AND `v` <=> %s AND CAST(CONVERT(`v` USING utf8mb4) AS BINARY)"
                           " <=> CAST(%s AS BINARY) LIMIT 1")
    assert st_text.params == (1, "1.5", "a", "a")
    assert change_statement(upd((1, 2, 3), (ABSENT, ABSENT, ABSENT), 4, key=())) is None


@pytest.mark.parametrize("definer", ["", "DEFINER=app@% ", "DEFINER=`app user`@`%` ",
                                     "DEFINER='a b'@'localhost' ", "DEFINER = CURRENT_USER() ",
                                     "DEFINER=CURRENT_USER ", 'DEFINER="u\\"@"%" '])
def test_trigger_ddl_with_any_definer(definer: str) -> None:
    """A trigger is known whatever its definer's spelling (a name with a space, quoted,
    stopped the pattern: the trigger was created downstream, and rows fired it)."""
    statement = f"CREATE {definer}TRIGGER tg.ai AFTER INSERT ON tg.t FOR EACH ROW SET @a = 1"
    assert trigger_ddl(statement, "d") == ("create", TableRef("tg", "ai"), TableRef("tg", "t"),
                                           frozenset({"INSERT"}))
    assert ddl_kind(f"CREATE ALGORITHM=MERGE {definer}SQL SECURITY INVOKER VIEW v AS SELECT 1"
                    ).name == "create view"


@pytest.mark.parametrize(("statement", "table"), [
    ("CREATE TRIGGER ai BEFORE UPDATE ON t FOR EACH ROW SET @a = 1", TableRef("d", "t")),
    ("CREATE TRIGGER tg.ai AFTER delete ON `t x` FOR EACH ROW SET @a = 1",
     TableRef("tg", "t x")),
    ("create trigger if not exists `tg`.ai before insert on tg . t for each row"
     " set @a = 1", TableRef("tg", "t")),
    # Not read (the trigger then stops statements until it is dropped by name).
    ("CREATE TRIGGER ai BEFORE INSERT /* c */ ON t FOR EACH ROW SET @a = 1", None),
    ("CREATE TRIGGER ai BEFORE INSERT ON t/*x*/ FOR EACH ROW SET @a = 1", None),
    ('CREATE TRIGGER ai BEFORE INSERT ON "t" FOR EACH ROW SET @a = 1', None),
    ("CREATE TRIGGER ai BEFORE INSERT ON t-- c\n FOR EACH ROW SET @a = 1", None),
    ("CREATE OR REPLACE TRIGGER ai BEFORE INSERT OR UPDATE ON t FOR EACH ROW SET @a = 1",
     TableRef("d", "t")),
    ("CREATE TRIGGER ai ON t", None),
])
def test_a_triggers_table(statement: str, table: TableRef | None) -> None:
    """The table a trigger is on, in the trigger's schema (a statement names none other)."""
    found = trigger_ddl(statement, "d")
    assert found is not None and found[2] == table
    assert trigger_ddl("DROP TRIGGER IF EXISTS tg.ai", "d") == \
        ("drop", TableRef("tg", "ai"), None, TRIGGER_EVENTS)


@pytest.mark.parametrize(("statement", "what"), [
    ("CREATE TRIGGER tg.ai AFTER INSERT ON t FOR EACH ROW SET @a = 1", "create"),
    ("CREATE OR REPLACE TRIGGER tg.ai AFTER INSERT ON t FOR EACH ROW SET @a = 1", "create"),
    # Logged even where the trigger was there: then it changed nothing.
    ("CREATE TRIGGER IF NOT EXISTS tg.ai AFTER INSERT ON t FOR EACH ROW SET @a = 1",
     "create if absent"),
    ("CREATE DEFINER=`a`@`%` TRIGGER if  not exists `a b` AFTER INSERT ON t FOR EACH ROW"
     " SET @a = 1", "create if absent"),
])
def test_a_trigger_created_if_absent(statement: str, what: str) -> None:
    found = trigger_ddl(statement, "d")
    assert found is not None and found[0] == what


@pytest.mark.parametrize(("statement", "is_it"), [
    ("CREATE TABLE t SELECT f() AS n", True),
    ("create or replace table t (a int) ignore select a from u", True),
    ("CREATE TEMPORARY TABLE t AS (SELECT 1)", True),
    ("SET STATEMENT max_statement_time = 0 FOR CREATE TABLE t SELECT 1", True),
    ("CREATE TABLE t TABLE v", True),  # (MySQL 8.0.19)
    ("CREATE TABLE t AS VALUES ROW(1)", True),
    ("CREATE TABLE t (a INT)", False),
    ("CREATE VIEW v AS SELECT f()", False),
    ("CREATE TABLE selected (a INT)", False),
])
def test_a_create_table_select(statement: str, is_it: bool) -> None:
    assert creates_by_select(statement) is is_it


@pytest.mark.parametrize(("statement", "events"), [
    ("CREATE TRIGGER ai BEFORE UPDATE ON t FOR EACH ROW SET @a = 1", {"UPDATE"}),
    ("create trigger ai after delete on t for each row set @a = 1", {"DELETE"}),
    ("CREATE TRIGGER ai BEFORE INSERT OR UPDATE ON t FOR EACH ROW SET @a = 1",
     {"INSERT", "UPDATE"}),
    # Its table not read: every event.
    ("CREATE TRIGGER ai BEFORE INSERT /* c */ ON t FOR EACH ROW SET @a = 1", TRIGGER_EVENTS),
])
def test_a_triggers_events(statement: str, events: set[str]) -> None:
    found = trigger_ddl(statement, "d")
    assert found is not None and found[3] == events


@pytest.mark.parametrize(("statement", "events"), [
    ("UPDATE t SET a = 1", {"UPDATE"}),
    ("/* app */ delete from t", {"DELETE"}),
    ("INSERT IGNORE INTO t VALUES (1)", {"INSERT"}),
    ("INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE a = 2", {"INSERT", "UPDATE"}),
    ("SET STATEMENT max_statement_time = 1 FOR UPDATE t SET a = 1", {"UPDATE"}),
    # The server may skip or run what an executable comment holds.
    ("/*!40000 UPDATE t SET a = 1 */", TRIGGER_EVENTS),
    ("/*!90000 UPDATE */ DELETE FROM t", TRIGGER_EVENTS),
    # Rows split by a period: the parts outside it are inserted.
    ("UPDATE t FOR PORTION OF p FROM '2020-03-01' TO '2020-06-01' SET x = 1", TRIGGER_EVENTS),
    ("DELETE FROM t FOR portion OF p FROM '2020-03-01' TO '2020-06-01'", TRIGGER_EVENTS),
    ("REPLACE INTO t VALUES (1)", TRIGGER_EVENTS),
    ("LOAD DATA INFILE 'f' INTO TABLE t", TRIGGER_EVENTS),
    ("SELECT f()", TRIGGER_EVENTS),
    ("(UPDATE t SET a = 1)", TRIGGER_EVENTS),
])
def test_the_trigger_events_a_statement_may_fire(statement: str, events: set[str]) -> None:
    assert events_fired(statement) == events


@pytest.mark.parametrize(("statement", "names", "found"), [
    ("UPDATE app.t SET a = 1", ["t"], "t"),
    ("UPDATE app.T SET a = 1", ["t"], "t"),  # (any case: a server may fold names)
    ("UPDATE app.tt SET a = 1", ["t"], None),
    ("UPDATE app.t_log SET t_x = 1", ["t"], None),
    ("UPDATE `app`.`t x` SET a = 1", ["t x"], "t x"),
    ("UPDATE `a``b` SET a = 1", ["a`b"], "a`b"),
    ('UPDATE "a""b" SET a = 1', ['a"b'], 'a"b'),
    ("UPDATE app.café SET a = 1", ["cafe"], "cafe"),  # (as utf8_general_ci compares)
    ("UPDATE app.CAFE SET a = 1", ["café"], "café"),
    ("UPDATE app.cafex SET a = 1", ["cafe"], None),
    ("UPDATE app.€t SET a = 1", ["t"], None),  # (€ is part of an unquoted name)
    ("UPDATE app.u SET a = 't'", ["t"], "t"),  # a string: counted all the same
    ("UPDATE app.u /* t */ SET a = 1", ["t"], "t"),
    ("UPDATE app.u SET a = f(1)", ["t", "f"], "f"),
    ("UPDATE app.u SET a = 1", [], None),
    ("UPDATE /*!40101t2*/ SET a = 1", ["t2"], "t2"),  # (run as UPDATE t2)
    ("UPDATE /*M!100101t2*/ SET a = 1", ["t2"], "t2"),
    ("UPDATE /*!500002t*/ SET a = 1", ["2t"], "2t"),  # (a five-digit version: MySQL's)
    ("UPDATE /*M!1001002t*/ SET a = 1", ["t"], "t"),  # (six: MariaDB's)
    ("UPDATE /*!40101t2*/ SET a = 1", ["t3"], None),
    ("UPDATE u SET a = strase()", ["straße"], "straße"),  # (utf8_general_ci: ß = s)
    ("UPDATE u SET a = LIWER(x)", ["lıwer"], "lıwer"),
    # The text read as UTF-8 may be another character set's: a name beyond ASCII counts.
    ("UPDATE caf\udce9 SET a = 1", ["café"], "café"),
    ("UPDATE u SET a = 'é'", ["ü"], "ü"),
    ("UPDATE x SET a = 'e'", ["ü"], None),
])
def test_names_a_statement_may_spell(statement: str, names: list[str], found: str | None
                                     ) -> None:
    assert name_spelled(statement, names) == found


@pytest.mark.parametrize(("statement", "gone"), [
    ("DROP TABLE t", TablesGone((TableRef("d", "t"),))),
    ("DROP TABLE IF EXISTS `a`.`b`, c /* generated by server */",
     TablesGone((TableRef("a", "b"), TableRef("d", "c")))),
    ("drop tables x.y cascade;", TablesGone((TableRef("x", "y"),))),
    ("DROP DATABASE IF EXISTS `app`", TablesGone(schema="app")),
    ("DROP SCHEMA s", TablesGone(schema="s")),
    ("RENAME TABLE a TO b", TablesGone(renames=True)),
    ("ALTER TABLE a RENAME b", TablesGone(renames=True)),
    ("/*!50000RENAME TABLE t TO u */", TablesGone(renames=True)),
    # A column or an index renamed: no table.
    ("ALTER TABLE a RENAME COLUMN x TO y", None),
    ("alter table a rename index i to j, rename key k to l", None),
    ("ALTER TABLE a RENAME COLUMN x TO y, RENAME TO b", TablesGone(renames=True)),
    ("ALTER TABLE a RENAME COLUMN$x", TablesGone(renames=True)),  # (the table's new name)
    ("ALTER TABLE a RENAME key2", TablesGone(renames=True)),
    ("ALTER TABLE a RENAME /* c */ COLUMN x TO y", TablesGone(renames=True)),
    # The server's keywords and blanks are ASCII: these rename the table.
    ("ALTER TABLE a RENAME \u212aEY", TablesGone(renames=True)),  # (a Kelvin sign)
    ("ALTER TABLE a RENAME \u0131NDEX", TablesGone(renames=True)),
    ("ALTER TABLE a RENAME \u00a0KEY", TablesGone(renames=True)),
    ("alter table a rename\n\tindex i to j", None),
    ("/*M!100100RENAME TABLE t TO u */", TablesGone(renames=True)),
    ("CREATE OR REPLACE TABLE t (id INT)", TablesGone((TableRef("d", "t"),))),
    ("create or replace table `x`.`y` AS SELECT 1", TablesGone((TableRef("x", "y"),))),
    ("CREATE OR REPLACE TABLE x.y(id INT)", TablesGone((TableRef("x", "y"),))),
    # Not read for certain: nothing forgotten.
    ("CREATE OR REPLACE TEMPORARY TABLE t (id INT)", None),
    ("CREATE OR REPLACE TABLE t/*x*/(id INT)", None),
    ("DROP TEMPORARY TABLE t", None),
    ("DROP TABLE t WAIT 5", None),
    ('DROP TABLE "t"', None),
    ("DROP TABLE t/*x*/, u", None),
    ("CREATE TABLE t (id INT)", None),
    ("ALTER TABLE t ADD COLUMN c INT", None),
])
def test_what_a_ddl_does_to_triggers_tables(statement: str, gone: TablesGone | None) -> None:
    assert tables_gone(statement, "d") == gone


@pytest.mark.parametrize(("statement", "kind"), [
    ("CREATE TABLE t (a int)", "create table"),
    ("/* hi */ create  temporary table t (a int)", "create table"),
    ("CREATE OR REPLACE TABLE t (a int)", "create or replace"),
    ("create unique index i on t (a)", "create index"),
    ("CREATE SCHEMA s", "create database"),
    ("CREATE ALGORITHM=MERGE VIEW v AS SELECT 1", "create view"),
    ("-- x\nDROP TABLE IF EXISTS t", "drop table"),
    ("drop index i on t", "drop index"),
    ("DROP DATABASE d", "drop database"),
    ("ALTER TABLE t ADD COLUMN c INT", "alter table"),
    ("ALTER ONLINE TABLE t ADD COLUMN c INT", "alter table"),
    ("RENAME TABLE a TO b", "rename table"),
    ("TRUNCATE t", "truncate"),
    ("/*!40000 ALTER TABLE t DISABLE KEYS */", "other"),
    ("GRANT ALL ON *.* TO x", "other"),
    ("SET STATEMENT lock_wait_timeout = 5 FOR ALTER TABLE t ADD c INT", "alter table"),
    ("SET STATEMENT a = (1), b = 'x' FOR /* c */ RENAME TABLE a TO b", "rename table"),
    ("SET STATEMENT a = 1 FOR INSERT INTO t VALUES (1)", "other"),
])
def test_ddl_kinds(statement: str, kind: str) -> None:
    assert ddl_kind(statement).name == kind


@pytest.mark.parametrize(("statement", "kept"), [
    # Nothing the write rules track comes into being: no new read of the catalog.
    ("TRUNCATE t", True), ("create index i on t (a)", True),
    # A unique key may be a long one, with a hidden column, and a dropped index may have
    # been one (or the primary key): the rules are read again.
    ("create unique index i on t (a)", False), ("DROP INDEX i ON t", False),
    ("CREATE VIEW v AS SELECT 1", True), ("DROP VIEW v", True), ("CREATE DATABASE d", True),
    # Only taken away: the old rules are stricter, never looser.
    ("DROP TABLE a, b", True), ("DROP DATABASE d", True),
    # Tables, columns (generated ones), foreign keys, periods, sequences, triggers, names.
    ("CREATE TABLE t (a int, b int AS (a) STORED)", False),
    ("CREATE TABLE c (p int REFERENCES t (a))", False),
    ("CREATE OR REPLACE TABLE t (a int)", False),
    ("ALTER TABLE t ADD FOREIGN KEY (a) REFERENCES p (a)", False),
    ("ALTER TABLE t ADD SYSTEM VERSIONING", False), ("RENAME TABLE a TO b", False),
    ("CREATE SEQUENCE s", False), ("DROP SEQUENCE s", False),
    ("CREATE TRIGGER g BEFORE INSERT ON t FOR EACH ROW SET @a = 1", False),
    ("DROP TRIGGER g", False), ("GRANT ALL ON *.* TO x", False),
    ("SET STATEMENT a = 1 FOR TRUNCATE t", True),
    ("SET STATEMENT a = 1 FOR CREATE TABLE t (a int, b int AS (a) STORED)", False),
])
def test_which_ddl_keeps_the_write_rules(statement: str, kept: bool) -> None:
    assert keeps_rules(statement) is kept


def test_rename_targets() -> None:
    assert rename_targets("RENAME TABLE a TO b", "d") == (TableRef("d", "b"),)
    assert rename_targets("rename table `x`.`a``b` to `y` . `c d`, e to f", "d") == (
        TableRef("y", "c d"), TableRef("d", "f"))
    assert rename_targets("RENAME TABLE a TO b, b TO c", "d") == (TableRef("d", "c"),)
    assert rename_targets("ALTER TABLE a ADD x INT, RENAME TO `n`", "d") == (
        TableRef("d", "n"),)
    assert rename_targets("ALTER TABLE a RENAME COLUMN x TO y", "d") is None
    assert rename_targets("RENAME TABLE a TO b", None) is None
    assert rename_targets("RENAME TABLE a TO tmp, b TO a, tmp TO b", "d") == ()


def test_batch_ordered_tables_matches_plan() -> None:
    other = TableRef("db", "other")
    changes = [ins((1, 1, "a"), 1), ins((1, 1, "x"), 2, other, ())]
    assert batch_ordered_tables(changes) == {other: NO_KEY}
    assert [o.table for o in plan_batch(changes).ordered] == [other]
    # Key column v: "a" and "A" fold together, so T goes ordered as well.
    folded = [Change(T, INSERT, COLS, (2,), None, (1, 1, "a"), (1,)),
              Change(T, INSERT, COLS, (2,), None, (2, 2, "A"), (3,))]
    assert batch_ordered_tables(folded) == {T: FOLDED_KEYS}
    assert {o.table: o.reason for o in plan_batch(folded).ordered} == {T: FOLDED_KEYS}
