"""A batch's read stage started while the barrier batch before it is replayed on the driver
(``binrelay.spark.read_ahead``): used when the catalog's rules stayed the same, cancelled
and run again when a DDL of the barrier changed them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from binrelay.apply.changes import TableRef
from binrelay.config import load_config
from binrelay.spark.read_ahead import ReadAhead
from binrelay.spark.sync import SyncPipeline
from relay_helpers import relay_until_caught_up
from test_sync import pipeline_config

PAD = "x" * 180


def _rows(server, first: int, count: int, per: int = 50) -> None:
    """``count`` rows from ``first`` on, ``per`` to a transaction (whole transactions are
    partitions: a batch of one would have no read stage to start ahead)."""
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            for start in range(first, first + count, per):
                cur.execute(
                    "INSERT INTO app.t (id, a, pad) SELECT seq, seq MOD 97, %s FROM "
                    f"app.seq_{start}_to_{min(start + per, first + count) - 1}", (PAD,))
    finally:
        conn.close()


def _updates(server, count: int, per: int = 50) -> None:
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            for start in range(1, count + 1, per):
                cur.execute("UPDATE app.t SET a = a + 1, pad = REVERSE(pad) "
                            "WHERE id BETWEEN %s AND %s", (start, start + per - 1))
    finally:
        conn.close()


def _with_table(mariadb_factory, tmp_path: Path) -> tuple[Any, Any, Path]:
    """Upstream, downstream and the sync's config (relay dir ``tmp_path/relay``); app.t
    made upstream."""
    upstream = mariadb_factory(server_id=1)
    downstream = mariadb_factory(server_id=2)
    config_path = pipeline_config(tmp_path / "binrelay.toml", upstream, tmp_path / "relay",
                                  downstream)
    upstream.execute("CREATE DATABASE app")
    upstream.execute("CREATE TABLE app.t (id INT PRIMARY KEY, a INT, pad VARCHAR(200))")
    return upstream, downstream, config_path


def _indexed_between_rows(mariadb_factory, tmp_path: Path) -> tuple[Any, Any, Path]:
    """Upstream, downstream and the sync's config (relay dir ``tmp_path/relay``): the
    upstream holds app.t, 2000 rows, a CREATE INDEX (a barrier that leaves the catalog's
    rules as they are: the next batch's read stage is used) and 2000 more rows."""
    upstream, downstream, config_path = _with_table(mariadb_factory, tmp_path)
    _rows(upstream, 1, 2000)
    upstream.execute("CREATE INDEX a ON app.t (a)")
    _rows(upstream, 2001, 2000)
    return upstream, downstream, config_path


def _spy_read_stages(monkeypatch) -> tuple[list[ReadAhead], list[ReadAhead]]:
    """The read stages the pipeline starts ahead, and those it cancels, as it does so."""
    started: list[ReadAhead] = []
    cancelled: list[ReadAhead] = []
    start_read = SyncPipeline._read_next
    cancel = ReadAhead.cancel

    def spy_start(self, *args):
        ahead = start_read(self, *args)
        if ahead is not None:
            started.append(ahead)
        return ahead

    def spy_cancel(self) -> None:
        cancelled.append(self)
        cancel(self)

    monkeypatch.setattr(SyncPipeline, "_read_next", spy_start)
    monkeypatch.setattr(ReadAhead, "cancel", spy_cancel)
    return started, cancelled


def test_read_ahead_across_barriers(spark, mariadb_factory, tmp_path: Path,
                                    monkeypatch) -> None:
    upstream, downstream, config_path = _indexed_between_rows(mariadb_factory, tmp_path)
    # After a barrier that leaves the rules as they are (the CREATE INDEX), one that
    # changes them (a generated column, never assigned by the sync): the read
    # stage started with the old rules would write it; it is cancelled and run again.
    upstream.execute("ALTER TABLE app.t ADD COLUMN g INT AS (a * 2) PERSISTENT")
    _updates(upstream, 4000)
    relay_until_caught_up(config_path, upstream, tmp_path / "relay", tmp_path / "relay.log")

    started, cancelled = _spy_read_stages(monkeypatch)
    # Planned while the batch before the barrier applied, chained after the barrier's own
    # planning: their read stages start as soon as Spark's slots are free.
    chained: list[object] = []
    plan_then_read = SyncPipeline._plan_then_read

    def spy_plan(self, view, start, end_limit, max_bytes, read, chain=False, gate=None,
                 **kw):
        if gate is not None:
            chained.append(start)
        return plan_then_read(self, view, start, end_limit, max_bytes, read, chain, gate,
                              **kw)

    monkeypatch.setattr(SyncPipeline, "_plan_then_read", spy_plan)
    pipeline = SyncPipeline(load_config(config_path), spark=spark)
    stats = pipeline.run(until_caught_up=True)

    # Rows, not CHECKSUM TABLE: MariaDB 10.11's never reads a generated column and hashes
    # what its row buffer held in its place (MDEV-22943), so equal rows may differ.
    dump = "SELECT id, a, pad, g FROM app.t ORDER BY id"
    assert downstream.execute(dump) == upstream.execute(dump)
    # After the CREATE TABLE and the CREATE INDEX the rules are the same: used; after the
    # generated column: not.  (Batches of rows have the next one's read stage started too,
    # with the rules as they stand: used.)
    assert len(started) >= 3, started
    assert stats.read_ahead == len(started) - 1
    assert len(cancelled) == 1 and not cancelled[0].rules.generated
    assert all(stage.rules.generated for stage in started[started.index(cancelled[0]) + 1:])
    assert len(chained) >= 2, chained
    assert pipeline.rules.generated == {TableRef("app", "t"): frozenset({"g"})}


def test_a_read_stage_started_ahead_is_cancelled_when_the_run_stops(
        spark, mariadb_factory, tmp_path: Path, monkeypatch) -> None:
    """A run that ends while the batch after a barrier has its read stage running (here:
    an error after the barrier's replay) cancels that stage: no Spark job is left behind
    the run."""
    upstream, _downstream, config_path = _indexed_between_rows(mariadb_factory, tmp_path)
    relay_until_caught_up(config_path, upstream, tmp_path / "relay", tmp_path / "relay.log")

    started, cancelled = _spy_read_stages(monkeypatch)
    barriers: list[object] = []

    def stop_after_the_index(report) -> None:
        if report.kind == "ddl":
            barriers.append(report)
            if len(barriers) == 2:
                # Once the next batch's read stage is under way (the planner's thread
                # starts it as the barrier's replay begins).
                deadline = time.monotonic() + 30
                while not any(stage.segments[0].start >= report.end.binlog_pos
                              for stage in started) and time.monotonic() < deadline:
                    time.sleep(0.01)
                raise RuntimeError("stopped after the CREATE INDEX")

    pipeline = SyncPipeline(load_config(config_path), spark=spark,
                            listeners=[stop_after_the_index])
    with pytest.raises(RuntimeError, match="stopped after"):
        pipeline.run(until_caught_up=True)
    # The batches after the CREATE TABLE used their read stages; the one after the index
    # never ran.
    assert len(started) >= 2 and pipeline.stats.read_ahead == len(started) - 1, started
    assert cancelled == [started[-1]]
    # Cancelled (or done): nothing left running.  Spark cancels a job asynchronously.
    deadline = time.monotonic() + 30
    while not started[1].job.isCompleted() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started[1].job.isCompleted()
    assert pipeline._read_ahead is None and pipeline._planner is None


def test_a_batch_of_rows_has_the_next_ones_read_stage_started_behind_its_apply_job(
        spark, mariadb_factory, tmp_path: Path, monkeypatch) -> None:
    """Rows only, several Spark batches: each batch's read stage is started while the batch
    before is applied, once that batch's apply job was submitted (so Spark, first come,
    first served, never runs it ahead of that job), and used."""
    upstream, downstream, config_path = _with_table(mariadb_factory, tmp_path)
    _rows(upstream, 1, 6000)
    _updates(upstream, 6000)
    relay_until_caught_up(config_path, upstream, tmp_path / "relay", tmp_path / "relay.log")

    started, cancelled = _spy_read_stages(monkeypatch)
    behind: list[tuple[int, list[int], int]] = []  # (batch, its job ids, the read's job id)
    wait_for_job = SyncPipeline._wait_for_job

    def spy_wait(self, batch_id: int) -> bool:
        submitted = wait_for_job(self, batch_id)
        if submitted:
            tracker = self._spark.sparkContext.statusTracker()
            jobs = list(tracker.getJobIdsForGroup(self._job_group(batch_id)))
            count = len(started)
            behind.append((batch_id, jobs, count))
        return submitted

    monkeypatch.setattr(SyncPipeline, "_wait_for_job", spy_wait)
    pipeline = SyncPipeline(load_config(config_path), spark=spark)
    stats = pipeline.run(until_caught_up=True)

    dump = "SELECT id, a, pad FROM app.t ORDER BY id"
    assert downstream.execute(dump) == upstream.execute(dump)
    assert stats.batches > 3 and len(behind) >= 2, (stats.batches, behind)
    assert not cancelled and stats.read_ahead == len(started) >= len(behind) - 1
    for _batch, jobs, count in behind:
        if count < len(started):  # the read stage started after that wait
            assert jobs and max(jobs) < started[count].job.jobIds().head(), (jobs, behind)
