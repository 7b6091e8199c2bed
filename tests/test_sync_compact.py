"""Map-side compaction for sync (binrelay.spark.compact): the pure merge, and the rare paths
end to end (a table must be replayed in relay order although some partitions compacted it)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest

from binrelay.apply.changes import Change, TableRef
from binrelay.apply.plan import FOLDED_KEYS, NO_KEY, Delete, Survivors, Upsert
from binrelay.config import load_config
from binrelay.errors import ChangeError
from binrelay.spark.compact import FLAGS, KEYED, RAW, STATS, merge, ordered_tables, simple
from binrelay.spark.sync import BatchReport, SyncPipeline
from relay_helpers import relay_until_caught_up, write_config
from test_sync import checksums

T = TableRef("db", "t")
SHAPE = (T, ("id", "v"), (0,))


def _keyed(key: tuple, pos: tuple, row: tuple | None) -> tuple:
    return (KEYED, SHAPE, key, pos, row)


def test_merge_keeps_the_latest_record_per_key_across_partitions() -> None:
    records = [
        _keyed((1,), (1, 1, 500, 0), (1, "late")),
        _keyed((1,), (1, 1, 100, 0), (1, "early")),
        _keyed((2,), (1, 1, 200, 0), None),
        _keyed((3,), (1, 1, 300, 0), (3, "x")),
        _keyed((2,), (1, 1, 150, 0), (2, "gone")),
        (STATS, {"insert": 3, "update": 1, "delete": 1}, ()),
        (STATS, {"insert": 1, "update": 0, "delete": 2}, ()),
    ]
    keyed, raw, ops = merge(records)
    assert raw == []
    assert ops == {"insert": 4, "update": 1, "delete": 3}
    # One Survivors per table, each side in key order.
    assert keyed == [Survivors(T, ("id", "v"), (0,), ((2,),), ((1, 1, 200, 0),),
                               ((1, "late"), (3, "x")), ((1, 1, 500, 0), (1, 1, 300, 0)))]
    assert sorted(keyed[0].ops(), key=lambda op: op.position) == [
        Delete(T, ("id",), (2,), (1, 1, 200, 0)),
        Upsert(T, ("id", "v"), (0,), (3, "x"), (1, 1, 300, 0)),
        Upsert(T, ("id", "v"), (0,), (1, "late"), (1, 1, 500, 0)),
    ]


def test_merge_keeps_relay_order_of_keys_that_do_not_compare() -> None:
    keyed, _raw, _ops = merge([_keyed((b"x",), (1, 1, 9, 0), (b"x", "a")),
                               _keyed((1,), (1, 1, 5, 0), (1, "b"))])
    assert keyed[0].rows == ((1, "b"), (b"x", "a"))


def test_survivors_give_the_statements_their_ops_give() -> None:
    """The applier's bulk path (``Survivors``) renders what the same ops one by one do."""
    from binrelay.apply.applier import part_statements
    from binrelay.apply.plan import PlanPart

    records = [_keyed((i,), (1, 1, 100 + i, 0), None if i % 3 == 0 else (i, f"v{i}"))
               for i in (5, 1, 9, 3, 7, 2, 6)]
    (survivors,) = merge(records)[0]
    bulk = part_statements(PlanPart("keyed-0-of-1", (survivors,)), max_rows=2)
    loose = part_statements(PlanPart("keyed-0-of-1", survivors.ops()), max_rows=2)
    assert [(st.sql, st.positions) for st in bulk] == [(st.sql, st.positions) for st in loose]
    assert [st.sql.split(" VALUES ")[0].split(" WHERE ")[0] for st in bulk] == [
        "DELETE FROM `db`.`t`", "DELETE FROM `db`.`t`",
        "REPLACE INTO `db`.`t` (`id`, `v`)", "REPLACE INTO `db`.`t` (`id`, `v`)"]


def test_flags_say_whether_a_batch_is_simple() -> None:
    plain = [_keyed((1,), (1, 1, 5, 0), (1, "a")), (FLAGS, False, ()), (FLAGS, False, ())]
    assert simple(plain)
    assert not simple([*plain, (FLAGS, True, ())])
    keyed, raw, ops = merge([*plain, (FLAGS, True, ())])  # flags are not changes
    assert len(keyed) == 1 and raw == [] and ops == {}


def test_merge_of_records_freed_as_it_goes() -> None:
    """A table is found by its shape object's id: records merged from a generator free the
    shapes of those that lose, and a later table's shape must not take such an id over."""
    other = TableRef("db", "u")

    def records():  # type: ignore[no-untyped-def]
        yield (KEYED, (T, ("id", "v"), (0,)), (1,), (1, 1, 900, 0), (1, "kept"))
        for i in range(50):  # each loses, and its shape (a fresh tuple) is freed
            yield (KEYED, (T, ("id", "v"), (0,)), (1,), (1, 1, i, 0), (1, "old"))
            for k in (i, i + 1000):
                yield (KEYED, (other, ("id", "w"), (0,)), (k,), (1, 1, k, 0), (k, "u"))

    keyed, _raw, _ops = merge(records())
    by_table = {s.table: s for s in keyed}
    assert by_table[T].rows == ((1, "kept"),)
    assert len(by_table[other].rows) == 100 and by_table[other].columns == ("id", "w")


def test_merge_refuses_two_shapes_of_one_table() -> None:
    other = (T, ("id", "v", "w"), (0,))
    with pytest.raises(ChangeError, match="columns or key change"):
        merge([_keyed((1,), (1, 1, 1, 0), (1, "a")), (KEYED, other, (1,), (1, 1, 9, 0),
                                                      (1, "a", 2))])


def test_a_spark_task_applies_its_apply_tasks_at_once() -> None:
    """``apply_lanes``: the apply tasks one Spark task carries run at the same time, each
    with only its own records; one failing fails the Spark task, after the others stop."""
    import threading

    from binrelay.spark.tasks import apply_lanes, lanes, packed

    assert [lanes(4, s) for s in (1, 2, 4, 8)] == [1, 2, 4, 4] and lanes(1, 8) == 1
    barrier = threading.Barrier(3, timeout=10)  # only passes if all three run at once
    seen: dict[int, list] = {}
    finished: list[int] = []

    def step(ctx: object, index: int, records):
        seen[index] = list(records)
        barrier.wait()
        if index == 7 and fail:
            raise ChangeError("lane 7 broke")
        finished.append(index)
        yield {"index": index, "records": len(seen[index])}

    items = [(7, ("a",)), (3, ("b",)), (7, ("c",)), (5, ("d",))]
    fail = False
    out = list(apply_lanes(step, None, packed(items, per=1)))
    assert out == [{"index": 3, "records": 1}, {"index": 5, "records": 1},
                   {"index": 7, "records": 2}]
    assert seen == {7: [("a",), ("c",)], 3: [("b",)], 5: [("d",)]}
    fail, finished[:] = True, []
    barrier.reset()
    with pytest.raises(ChangeError, match="lane 7 broke"):
        list(apply_lanes(step, None, packed(items)))
    assert sorted(finished) == [3, 5]
    # One apply task: run in the calling thread, no pool.
    barrier = threading.Barrier(1)
    assert list(apply_lanes(step, None, packed([(2, ("x",))]))) == [{"index": 2, "records": 1}]


def test_the_shuffle_carries_records_packed_per_apply_task() -> None:
    """``packed``: per apply task, lists of at most ``per`` records pickled together, in
    their order; ``unpacked`` gives the pairs back; ``kept`` drops tables."""
    import pickle

    from binrelay.spark.tasks import kept, packed, unpacked

    other = (TableRef("db", "u"), ("id",), (0,))
    pairs = [(i % 3, _keyed((i,), (1, 1, i, 0), (i, "v"))) for i in range(10)]
    pairs.append((1, (KEYED, other, (5,), (1, 1, 50, 0), (5,))))
    out = list(packed(pairs, per=2))
    assert all(len(pickle.loads(blob)) <= 2 for _t, blob in out)
    assert sorted(unpacked(out), key=lambda p: p[1][3]) == sorted(pairs, key=lambda p: p[1][3])
    for target in range(3):
        mine = [r for t, r in unpacked(out) if t == target]
        assert mine == [r for t, r in pairs if t == target]
    left = list(unpacked(kept(iter(out), {TableRef("db", "u")})))
    assert sorted(left, key=lambda p: p[1][3]) == sorted(pairs[:10], key=lambda p: p[1][3])


def test_tasks_run_with_the_collector_paused() -> None:
    """``paused_gc``: off inside (an apply task's lanes see it off), on again only when the
    last concurrent pause ends, and left off if it was off before."""
    import gc
    import threading

    from binrelay.spark.tasks import apply_lanes, packed, paused_gc

    assert gc.isenabled()
    seen = []
    inside = threading.Barrier(2, timeout=10)

    def step(ctx: object, index: int, records):
        list(records)
        with paused_gc():
            inside.wait()
            seen.append(gc.isenabled())
        inside.wait()  # one lane has left its pause, the other has too: still inside
        seen.append(gc.isenabled())
        yield index

    assert list(apply_lanes(step, None, packed([(0, "a"), (1, "b")]))) == [0, 1]
    assert seen == [False] * 4 and gc.isenabled()
    with paused_gc():
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_ordered_tables_sees_raw_tables_and_keys_that_fold_together() -> None:
    ci = TableRef("db", "ci")
    nokey = TableRef("db", "nk")
    change = Change(nokey, "insert", ("a",), (), None, (1,), (1, 1, 5, 0, 0))
    records = [
        (RAW, change, NO_KEY),
        (KEYED, (ci, ("k",), (0,)), ("abc",), (1, 1, 10, 0), None),
        (KEYED, (ci, ("k",), (0,)), ("ABC",), (1, 1, 20, 0), ("ABC",)),
        (KEYED, (ci, ("k",), (0,)), ("abc",), (1, 1, 30, 0), ("abc",)),  # same key again
        _keyed((1,), (1, 1, 40, 0), (1, "v")),
    ]
    [(reasons, keyed)] = list(ordered_tables(records))
    assert reasons == {nokey: NO_KEY, ci: FOLDED_KEYS}
    assert keyed == {ci, T}


@pytest.mark.parametrize("partition_bytes", [1 << 16, 64 << 20], ids=["partitions", "alone"])
def test_tables_found_ordered_late_are_replayed_in_relay_order(
        spark, mariadb_factory, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        partition_bytes: int) -> None:
    """One batch of many small partitions in which: ``d.p`` gets full images first and
    minimal images (binlog_row_image = MINIMAL) later; ``d.ci`` gets keys that differ only
    by case in different partitions; ``d.nk`` has no key.  Each must be replayed in relay
    order, whatever the partitions that compacted it first.  With one big partition the batch
    runs as one task (``apply_alone``), which must decide the same way."""
    upstream = mariadb_factory(server_id=1)
    downstream = mariadb_factory(server_id=2)
    relay_dir = tmp_path / "relay"
    up = upstream.execute
    up("FLUSH BINARY LOGS")  # the relay starts at this file: only the test's own changes
    start = upstream.master_status()
    up("CREATE DATABASE d")
    up("CREATE TABLE d.p (id INT PRIMARY KEY, a INT, b VARCHAR(200))")
    up("CREATE TABLE d.ci (k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT) "
       "CHARSET utf8mb4")
    up("CREATE TABLE d.nk (a INT, b INT)")
    up("CREATE TABLE d.fill (id INT PRIMARY KEY, pad VARCHAR(1000))")

    def fill(first: int) -> None:
        # ~200 KB of other rows: the next changes land in another 64 KiB partition.
        for i in range(first, first + 200):
            up("INSERT INTO d.fill VALUES (%s, REPEAT('x', 1000))", (i,))

    # One transaction over the 64 KiB of rows a run of DDL takes along: the rows from here
    # on are a batch of their own.
    up("INSERT INTO d.fill SELECT seq, REPEAT('y', 1000) FROM d.seq_5000_to_5099")
    for i in range(1, 51):
        up("INSERT INTO d.p VALUES (%s, %s, 'row')", (i, i))
    up("INSERT INTO d.ci VALUES ('abc', 1)")
    up("UPDATE d.p SET b = CONCAT(b, '-full')")
    fill(0)
    up("DELETE FROM d.ci WHERE k = 'abc'")
    up("INSERT INTO d.ci VALUES ('ABC', 2)")
    up("INSERT INTO d.nk VALUES (1, 1), (1, 1), (2, 2)")
    up("DELETE FROM d.nk WHERE a = 1 LIMIT 1")
    with contextlib.closing(upstream.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE d.p SET a = a + 100 WHERE id < 10")
        cur.execute("DELETE FROM d.p WHERE id = 20")
        conn.commit()
    fill(1000)

    config_path = write_config(
        tmp_path / "binrelay.toml", upstream, relay_dir,
        **{"relay-binlog-name": start[0]},
        to={"host": downstream.host, "port": downstream.port, "user": "root", "password": ""},
        sync={"master": "local[2]", "batch-bytes": 64 << 20, "tasks": 3,
              "partition-bytes": partition_bytes, "driver-batch-bytes": 0})
    relay_until_caught_up(config_path, upstream, relay_dir, tmp_path / "relay.log")
    reports: list[BatchReport] = []
    caplog.set_level(logging.INFO, logger="binrelay.spark.sync")
    SyncPipeline(load_config(config_path), spark=spark,
                 listeners=[reports.append]).run(until_caught_up=True)

    assert checksums(downstream) == checksums(upstream)
    dml = [r for r in reports if r.kind == "dml"]
    assert len(dml) == 1 and dml[0].relay_bytes > 4 * (1 << 16)
    assert dml[0].rows_by_op == {"insert": 100 + 50 + 200 + 2 + 3 + 200, "update": 50 + 9,
                                 "delete": 1 + 1 + 1}
    if partition_bytes == 1 << 16:
        replayed = " ".join(getattr(r, "tables", "") for r in caplog.records
                            if "relay order" in r.getMessage())
        assert "d.p" in replayed and "d.ci" in replayed


def test_a_table_the_rules_know_nothing_of_keyed_by_text_is_written_by_one_task(
        mariadb_factory, tmp_path: Path) -> None:
    """A table made since the rules were read (a plain CREATE TABLE once left them as they
    were): its key's collation is unknown, and ``fold_key`` does not know every collation's
    equivalences (under ``utf8mb4_general_ci`` every character beyond the BMP is one), so
    its survivors go to one task, whose deletes run before its writes; an integer key's
    spread as ever."""
    from binrelay.apply.catalog import TableRules
    from binrelay.position import Position, SubdirName
    from binrelay.spark.compact import compact_segment
    from binrelay.spark.planning import plan_partitions

    upstream = mariadb_factory(server_id=1)
    relay_dir = tmp_path / "relay"
    up = upstream.execute
    up("FLUSH BINARY LOGS")
    start = upstream.master_status()
    up("CREATE DATABASE d")
    up("CREATE TABLE d.ci (k VARCHAR(20) PRIMARY KEY, v INT) CHARSET utf8mb4"
       " COLLATE utf8mb4_general_ci")
    up("CREATE TABLE d.n (id INT PRIMARY KEY, v INT)")
    up("CREATE TABLE d.f (k DOUBLE PRIMARY KEY, v INT)")
    up("CREATE TABLE d.u (k UUID PRIMARY KEY, v INT)")
    up("INSERT INTO d.ci VALUES " + ", ".join(f"('k{i}', {i})" for i in range(300)))
    up("INSERT INTO d.n SELECT seq, seq FROM d.seq_1_to_5000")
    up("INSERT INTO d.f SELECT seq, seq FROM d.seq_1_to_300")
    up("INSERT INTO d.u SELECT UUID(), seq FROM d.seq_1_to_300")
    config_path = write_config(tmp_path / "binrelay.toml", upstream, relay_dir,
                               **{"relay-binlog-name": start[0]})
    relay_until_caught_up(config_path, upstream, relay_dir, tmp_path / "relay.log")
    sub = next(p.name for p in relay_dir.iterdir() if p.is_dir())
    first = Position(SubdirName.parse(sub), start[0], 4)
    last = Position(SubdirName.parse(sub), *upstream.master_status()[:2])
    targets: dict[str, set[int]] = {}
    for segment in plan_partitions(relay_dir, first, last):
        if segment.kind != "dml":
            continue
        for target, record in compact_segment(str(relay_dir), segment, 4, TableRules()):
            if record[0] == KEYED:
                targets.setdefault(record[1][0].table, set()).add(target)
    # (UUID: logged as text, compared as bytes; as the rules see it once read, so a read
    # stage made before they were is not used after: TableRules.reads_alike.)
    assert len(targets["ci"]) == 1 and len(targets["f"]) == 1 and len(targets["u"]) == 1
    assert len(targets["n"]) > 1
