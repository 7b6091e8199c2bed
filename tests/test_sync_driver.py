"""Which batches of rows the sync's driver applies itself, and when a catch-up starts Spark
(no server: the decision only)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from binrelay.config import load_config
from binrelay.position import Position, SubdirName
from binrelay.relay.relaydir import RelayView
from binrelay.spark.planning import Segment
from binrelay.spark.sync import SyncPipeline
from relay_helpers import write_config
from relaydir_builder import make_relay_dir

KIB, MIB = 1024, 1 << 20


class Pipeline(SyncPipeline):
    """A pipeline whose Spark 'starts' by being noted, and is up when the test says."""

    up = False
    starts = 0

    def start_spark(self) -> None:
        self.starts += 1

    @property
    def spark_ready(self) -> bool:
        return self.up


def pipeline(tmp_path: Path, **sync: object) -> Pipeline:
    path = write_config(tmp_path / "c.toml", ("127.0.0.1", 1), tmp_path / "relay",
                        to={"host": "127.0.0.1", "port": 1, "user": "root"}, sync=sync)
    return Pipeline(load_config(path))


def one_file_relay(tmp_path: Path) -> tuple[int, RelayView, Position]:
    """A relay of one file: its bytes after the header, a view of it, where it starts."""
    files = make_relay_dir(tmp_path / "relay", [("0-1.000001", [40])])
    return (len(next(iter(files.values()))) - 4, RelayView(tmp_path / "relay"),
            Position(SubdirName.parse("0-1.000001"), "mysql-bin.000001", 4))


def test_defaults_keep_one_partition_on_the_driver(tmp_path: Path) -> None:
    p = pipeline(tmp_path)
    p.up = True
    # A streaming sync's batch, and one as big as a partition: one Spark task would do all
    # of it, so the driver does it.
    assert p._on_driver(1 * MIB) and p._on_driver(16 * MIB)
    # A catch-up's batch spans partitions: Spark's tasks share it.
    assert not p._on_driver(16 * MIB + 1)
    assert p.starts == 0


def test_a_catch_up_starts_spark_for_its_first_real_batch(tmp_path: Path) -> None:
    p = pipeline(tmp_path)
    # The rows between DDL: applied here, Spark never started for them.
    assert p._on_driver(10 * KIB) and p.starts == 0
    # A backlog (batches are kept to a partition until Spark is up): applied here while
    # Spark starts.
    assert p._on_driver(16 * MIB) and p.starts == 1
    assert p._on_driver(32 * MIB)
    assert not p._on_driver(32 * MIB + 1)


def test_a_sync_a_little_behind_keeps_its_batches_on_the_driver(tmp_path: Path) -> None:
    """With Spark up, the driver's batches go on while the backlog is a few of them
    (``_DRIVER_BACKLOG``); a bigger backlog goes to Spark in batches of ``batch-bytes``."""
    backlog, view, start = one_file_relay(tmp_path)
    behind_a_little = pipeline(tmp_path, **{"driver-batch-bytes": backlog // 4 + 1})
    behind_a_little.up = True
    assert behind_a_little._batch_limit(view, start, view.end) == backlog // 4 + 1
    behind = pipeline(tmp_path, **{"driver-batch-bytes": backlog // 4 - 1})
    behind.up = True
    assert behind._batch_limit(view, start, view.end) == behind.sync.batch_bytes
    # While Spark starts: a partition at a time, whatever the backlog.
    behind.up = False
    assert behind._batch_limit(view, start, view.end) == behind.sync.partition_bytes
    for off in ({"driver-apply": False}, {"driver-batch-bytes": 0}):
        p = pipeline(tmp_path, **off)
        p.up = True
        assert p._batch_limit(view, start, view.end) == p.sync.batch_bytes
    # A catch-up gives Spark its tail as one batch.
    behind_a_little._catching_up = True
    assert behind_a_little._batch_limit(view, start, view.end) == \
        behind_a_little.sync.batch_bytes


def test_the_tail_of_a_backlog_goes_to_spark_as_one_batch(tmp_path: Path) -> None:
    """A streaming sync a backlog reached: once a batch of rows bigger than the driver's
    backlog rule went to Spark, the rest of it does too, as one batch; a small batch of
    rows after it brings the driver's batches back, a DDL between leaves things as
    they were."""
    backlog, view, start = one_file_relay(tmp_path)
    p = pipeline(tmp_path, **{"driver-batch-bytes": backlog // 4 + 1})
    p.up = True
    small = p._batch_limit(view, start, view.end)
    assert small == backlog // 4 + 1
    rows = [Segment("0-1.000001", "mysql-bin.000001", 4, 4 + 5 * small, "dml")]
    ddl = [Segment("0-1.000001", "mysql-bin.000001", 4, 100, "ddl")]
    # Up to the rule's size, a Spark batch changes nothing (the driver's limit is what
    # a little behind gets: its batches are driver batches).
    p._note_size(p.sync.batch_bytes, [replace(rows[0], stop=4 + 4 * small)])
    assert p._batch_limit(view, start, view.end) == small
    p._note_size(p.sync.batch_bytes, rows)
    assert p._batch_limit(view, start, view.end) == p.sync.batch_bytes
    p._note_size(small, ddl)
    assert p._batch_limit(view, start, view.end) == p.sync.batch_bytes
    p._note_size(p.sync.batch_bytes, [replace(rows[0], stop=4 + small)])
    assert p._batch_limit(view, start, view.end) == small
    # A driver batch as big (the rule off while Spark starts) is no backlog's sign.
    p._note_size(small, rows)
    assert p._batch_limit(view, start, view.end) == small


@pytest.mark.parametrize("sync", [{"driver-apply": False},
                                  {"driver-batch-bytes": 0, "partition-bytes": MIB}])
def test_what_turns_it_off(tmp_path: Path, sync: dict[str, object]) -> None:
    p = pipeline(tmp_path, **sync)
    p.up = True
    assert not p._on_driver(10 * KIB)
    if sync.get("driver-apply") is False:
        p.up = False
        assert not p._on_driver(10 * KIB)


def test_which_ddl_make_the_rules_be_read_again_and_how(tmp_path: Path) -> None:
    """After a DDL the rules are kept, read for the tables it names, or read whole (see
    ``catalog``); the reading itself is tested against a server in test_catalog_rules."""
    p = pipeline(tmp_path)
    p._rules_after("CREATE INDEX i ON t (a)", "d")
    p._rules_after("DROP TABLE t", "d")
    assert not p.rules_stale and p.stale_ddl == []
    p._rules_after("ALTER TABLE t ADD COLUMN g INT AS (a) STORED", "d")
    p._rules_after("RENAME TABLE a TO b", None)
    assert p.rules_stale
    assert p.stale_ddl == [("ALTER TABLE t ADD COLUMN g INT AS (a) STORED", "d"),
                           ("RENAME TABLE a TO b", None)]
    # A kind the narrow read does not cover: the next read is whole.
    p._rules_after("CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @x = 1", "d")
    assert p.rules_stale and p.stale_ddl is None
    p._rules_after("ALTER TABLE t ADD COLUMN h INT", "d")
    assert p.stale_ddl is None
    # A migration's long run of narrow DDL: one whole read costs less than many narrow.
    q = pipeline(tmp_path)
    for i in range(40):
        q._rules_after(f"CREATE TABLE t{i} (id INT PRIMARY KEY, g INT AS (id) VIRTUAL)", "d")
    assert q.rules_stale and q.stale_ddl is None
    # Plain ones leave the rules as a read would give them (catalog.leaves_rules).
    r = pipeline(tmp_path)
    r._rules_after("CREATE TABLE n (id INT PRIMARY KEY, v DECIMAL(9, 2), d DATETIME)", "d")
    r._rules_after("ALTER TABLE n ADD COLUMN w VARCHAR(9)", "d")
    assert not r.rules_stale and r.stale_ddl == []
    # ... but one with text or floating-point columns, whose key a collation may compare
    # loosely (key_collation), has its columns read before rows are written by key (not
    # before rows replayed in relay order: the rules are not stale), a RENAME of it too;
    # and a column made the key is read as any DDL is.
    for ddl in ("CREATE TABLE m (k VARCHAR(9) PRIMARY KEY)", "CREATE TABLE m (f DOUBLE)",
                "CREATE TABLE m (id INT, e ENUM('a', 'b'))", "CREATE TABLE m (u UUID KEY)",
                "CREATE TABLE m (b BINARY(16) PRIMARY KEY)"):
        m = pipeline(tmp_path)
        m._rules_after(ddl, "d")
        m._rules_after("RENAME TABLE m TO m2", "d")
        assert not m.rules_stale and m.keys_unread == [(ddl, "d"), ("RENAME TABLE m TO m2",
                                                                    "d")], ddl
    # A migration's long run of them: one whole read before rows go by key, none before
    # rows replayed in relay order.
    m = pipeline(tmp_path)
    for i in range(40):
        m._rules_after(f"CREATE TABLE t{i} (id INT PRIMARY KEY, b VARCHAR(32))", "d")
        m._rules_after(f"CREATE INDEX a_idx ON t{i} (b)", "d")
        m._rules_after(f"RENAME TABLE t{i} TO r{i}", "d")
    assert not m.rules_stale and m.keys_unread is None
    for ddl in ("ALTER TABLE n ADD COLUMN z INT PRIMARY KEY",
                "ALTER TABLE n ADD COLUMN z INT NOT NULL KEY"):
        m = pipeline(tmp_path)
        m._rules_after(ddl, "d")
        assert m.rules_stale and m.stale_ddl == [(ddl, "d")] and m.keys_unread == [], ddl
    # ... as read: after a DDL still to be read, a plain one is read with it (the rules
    # know nothing of a table that DDL made, which the RENAME then moves).
    r._rules_after("CREATE TABLE a (x INT, g INT AS (x) VIRTUAL)", "d")
    r._rules_after("RENAME TABLE a TO b", "d")
    assert r.stale_ddl == [("CREATE TABLE a (x INT, g INT AS (x) VIRTUAL)", "d"),
                           ("RENAME TABLE a TO b", "d")]


def test_a_batch_planned_while_spark_starts_is_planned_again_if_spark_comes_up_first(
        tmp_path: Path) -> None:
    """The batch after a barrier (a DDL) is planned while the barrier is applied; planned
    while Spark started, it is driver-sized.  Should Spark come up before the barrier is
    over, it is planned again with a ready Spark's limit (and the main thread told, by the
    plan's key), so its read stage can run alongside the barrier."""
    files = make_relay_dir(tmp_path / "relay", [("0-1.000001", [800])])
    backlog = len(next(iter(files.values()))) - 4
    view = RelayView(tmp_path / "relay")
    start = Position(SubdirName.parse("0-1.000001"), "mysql-bin.000001", 4)
    p = pipeline(tmp_path, **{"driver-batch-bytes": backlog // 8, "partition-bytes": 1 << 16})
    small = p._batch_limit(view, start, view.end)
    assert small == p.sync.partition_bytes < backlog
    planned = p._plan(view, start, view.end, small)
    # The barrier ends first: the plan stands.
    over = threading.Event()
    over.set()
    key = [start, small]
    assert p._plan_for_spark(view, start, view.end, planned, small, over, key) == \
        (planned, small)
    assert key == [start, small]
    # Spark comes up while the barrier runs.
    over = threading.Event()
    threading.Timer(0.2, lambda: setattr(p, "up", True)).start()
    (end, _segments, gtids), limit = p._plan_for_spark(view, start, view.end, planned, small,
                                                       over, key)
    assert limit == p.sync.batch_bytes and key == [start, limit]
    assert end == view.end and len(gtids) == 800 and end != planned[0]
