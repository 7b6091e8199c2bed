"""The apply pipeline on Spark, end to end: real upstream, relay, Spark, real downstream."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from binrelay.apply.checkpoint import CheckpointStore, read_checkpoint
from binrelay.config import load_config
from binrelay.spark.sync import SyncPipeline
from binrelay.testing.sandbox import sysbench_prepare, sysbench_run_background
from relay_helpers import (
    RelayProcess,
    binrelay_cmd,
    relay_until_caught_up,
    run_binrelay,
    wait_caught_up,
    write_config,
)

SYSTEM = ("mysql", "information_schema", "performance_schema", "sys", "binrelay")


def checksums(server) -> dict[str, int]:
    tables = server.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = "
        "'BASE TABLE' AND TABLE_SCHEMA NOT IN (%s, %s, %s, %s, %s)", SYSTEM)
    out = {}
    for schema, table in tables:
        name = f"`{schema}`.`{table}`"
        out[f"{schema}.{table}"] = server.execute(f"CHECKSUM TABLE {name}")[0][1]
    return out


def _ddl_workload(upstream) -> None:
    """sysbench with DDL mixed in, as the issue asks: CREATE, ALTER ADD COLUMN, DROP,
    TRUNCATE, RENAME while the workload runs."""
    sysbench_prepare(upstream, tables=3, table_size=2000)
    with sysbench_run_background(upstream, tables=3, table_size=2000, time=6):
        time.sleep(1)
        upstream.execute("CREATE TABLE sbtest.extra (id INT PRIMARY KEY, v VARCHAR(20))")
        upstream.execute("INSERT INTO sbtest.extra VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        upstream.execute("CREATE TABLE sbtest.nokey (a INT, b VARCHAR(10))")
        upstream.execute("INSERT INTO sbtest.nokey VALUES (1, 'x'), (1, 'x'), (2, 'y')")
        upstream.execute("DELETE FROM sbtest.nokey WHERE a = 1 LIMIT 1")
        time.sleep(1)
        upstream.execute("ALTER TABLE sbtest.extra ADD COLUMN w INT DEFAULT 7")
        upstream.execute("UPDATE sbtest.extra SET id = id + 10, w = id WHERE id < 3")
        upstream.execute("CREATE TABLE sbtest.gone (id INT PRIMARY KEY)")
        upstream.execute("INSERT INTO sbtest.gone VALUES (1)")
        upstream.execute("DROP TABLE sbtest.gone")
        time.sleep(1)
        upstream.execute("TRUNCATE TABLE sbtest.sbtest3")
        upstream.execute("RENAME TABLE sbtest.extra TO sbtest.extra2")
        upstream.execute("INSERT INTO sbtest.extra2 (id, v) VALUES (100, 'z')")


def assert_ddl_workload_converged(upstream, downstream) -> None:
    """After ``_ddl_workload`` and a sync to the end: every table equal, and the checkpoint
    consistent at the upstream's end."""
    want = checksums(upstream)
    assert "sbtest.extra2" in want and "sbtest.gone" not in want
    assert checksums(downstream) == want
    conn = downstream.connect()
    try:
        cp = read_checkpoint(conn, "sync", CheckpointStore())
    finally:
        conn.close()
    assert cp is not None and cp.consistent
    assert (cp.position.binlog_name, cp.position.binlog_pos) == upstream.master_status()


@pytest.fixture
def pipeline_env(mariadb_factory, tmp_path: Path):
    return make_pipeline_env(mariadb_factory, tmp_path)


def make_pipeline_env(mariadb_factory, tmp_path: Path, *upstream_args: str):
    upstream = mariadb_factory(server_id=1, max_binlog_size=512 * 1024,
                               extra_args=list(upstream_args))
    downstream = mariadb_factory(server_id=2)
    relay_dir = tmp_path / "relay"
    config_path = pipeline_config(tmp_path / "binrelay.toml", upstream, relay_dir, downstream)
    return upstream, downstream, relay_dir, config_path


def relay_ddl_workload(pipeline_env, tmp_path: Path) -> None:
    """``_ddl_workload`` run upstream while a relay follows it to the end."""
    upstream, _downstream, relay_dir, config_path = pipeline_env
    relay = RelayProcess(config_path, tmp_path / "relay.log")
    try:
        _ddl_workload(upstream)
        wait_caught_up(relay_dir, upstream, process=relay)
    finally:
        assert relay.stop() == 0


def pipeline_config(path: Path, upstream, relay_dir: Path, downstream, **sync) -> Path:
    """Small batches and partitions, so that a short workload makes many of each."""
    return write_config(
        path, upstream, relay_dir,
        to={"host": downstream.host, "port": downstream.port, "user": "root", "password": ""},
        sync={"master": "local[2]", "batch-bytes": 256 * 1024, "tasks": 3,
              "partition-bytes": 128 * 1024, "driver-batch-bytes": 0, **sync})


def test_sysbench_with_ddl_converges(spark, pipeline_env, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    upstream, downstream, _relay_dir, config_path = pipeline_env
    relay_ddl_workload(pipeline_env, tmp_path)
    config = load_config(config_path)
    # Batches of rows that Spark applies have the next one planned meanwhile, in the
    # planner's thread; every start is planned once.
    planned: list[tuple[str, Any]] = []
    plan = SyncPipeline._plan

    def spy(self, view, start, end_limit, max_bytes):
        planned.append((threading.current_thread().name, start))
        return plan(self, view, start, end_limit, max_bytes)

    monkeypatch.setattr(SyncPipeline, "_plan", spy)
    stats = SyncPipeline(config, spark=spark).run(until_caught_up=True)
    assert stats.batches > 3 and stats.ddl >= 8
    assert_ddl_workload_converged(upstream, downstream)
    ahead = [start for name, start in planned if name.startswith("plan")]
    assert len(ahead) >= 2, planned
    assert len({start for _n, start in planned}) == len(planned) == stats.batches
    # Batches after a DDL had their read stage run while the DDL were replayed.
    assert stats.read_ahead >= 1


def test_sysbench_with_ddl_converges_by_position(spark, mariadb_factory,
                                                tmp_path: Path) -> None:
    """The same workload from an upstream at MariaDB's default binlog_row_metadata (NO_LOG:
    no column names, signedness or key logged): its rows are applied by position, read
    stages started ahead of a DDL that changed a table's columns not used."""
    env = make_pipeline_env(mariadb_factory, tmp_path, "--binlog-row-metadata=NO_LOG")
    upstream, downstream, _relay_dir, config_path = env
    relay_ddl_workload(env, tmp_path)
    pipeline = SyncPipeline(load_config(config_path), spark=spark)
    stats = pipeline.run(until_caught_up=True)
    assert pipeline.positional and stats.ddl >= 8
    assert_ddl_workload_converged(upstream, downstream)


def test_recover_after_a_crash_mid_batch_without_the_upstream(pipeline_env,
                                                              tmp_path: Path) -> None:
    upstream, downstream, relay_dir, config_path = pipeline_env
    sysbench_prepare(upstream, tables=2, table_size=3000)
    with sysbench_run_background(upstream, tables=2, table_size=3000, time=4) as work:
        work.wait(timeout=60)
    relay_until_caught_up(config_path, upstream, relay_dir, tmp_path / "relay.log")
    want = checksums(upstream)
    upstream.stop()  # from here on, nothing may need the upstream

    # kill -9 of the sync in the middle of its first batches, until one dies mid-batch.
    store = CheckpointStore()
    for _attempt in range(10):
        proc = subprocess.Popen(binrelay_cmd("sync", "--config", str(config_path)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        caught = False
        while time.monotonic() < deadline and proc.poll() is None:
            conn = downstream.connect()
            try:
                cp = read_checkpoint(conn, "sync", store)
            except Exception:
                cp = None
            finally:
                conn.close()
            if cp is not None and not cp.consistent:
                time.sleep(0.3)
                proc.kill()
                caught = True
                break
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        if caught:
            break
    conn = downstream.connect()
    try:
        cp = read_checkpoint(conn, "sync", store)
    finally:
        conn.close()
    assert cp is not None and not cp.consistent, "the sync never died mid-batch"

    result = run_binrelay("recover", "--config", str(config_path), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checkpoint consistent" in result.stdout
    conn = downstream.connect()
    try:
        cp = read_checkpoint(conn, "sync", store)
    finally:
        conn.close()
    assert cp is not None and cp.consistent
    assert checksums(downstream) == want
    again = run_binrelay("recover", "--config", str(config_path), timeout=300)
    assert again.returncode == 0 and "nothing to recover" in again.stdout


def test_bad_downstream_is_a_clear_error(pipeline_env, tmp_path: Path) -> None:
    upstream, downstream, relay_dir, config_path = pipeline_env
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v INT)")
    upstream.execute("INSERT INTO d.t VALUES (1, 5000)")
    relay_until_caught_up(config_path, upstream, relay_dir, tmp_path / "relay.log")
    bad = write_config(tmp_path / "bad.toml", upstream, relay_dir,
                       to={"host": downstream.host, "port": downstream.port, "user": "root",
                           "password": "wrong"},
                       sync={"master": "local[1]"})
    proc = run_binrelay("sync", "--config", str(bad), "--until-caught-up", timeout=300)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("binrelay: error:") and "wrong" not in last, last
    # A downstream partitioning the upstream did not have (no partition for the row): named
    # table and position, and the checkpoint does not move past it.
    downstream.execute("CREATE DATABASE d")
    downstream.execute("CREATE TABLE d.t (id INT, v INT, PRIMARY KEY (id, v))"
                       " PARTITION BY RANGE (v) (PARTITION small VALUES LESS THAN (1000))")
    proc = run_binrelay("sync", "--config", str(config_path), "--until-caught-up", timeout=300)
    assert proc.returncode != 0
    assert "d.t" in proc.stderr, proc.stderr[-2000:]
    conn = downstream.connect()
    try:
        cp = read_checkpoint(conn, "sync", CheckpointStore())
    finally:
        conn.close()
    assert cp is not None
    assert (cp.position.binlog_name, cp.position.binlog_pos) != upstream.master_status()


def test_streaming_sync_follows_a_running_workload(spark, pipeline_env, tmp_path) -> None:
    upstream, downstream, relay_dir, config_path = pipeline_env
    sysbench_prepare(upstream, tables=2, table_size=1000)
    relay = RelayProcess(config_path, tmp_path / "relay.log")
    stop = threading.Event()
    pipeline = SyncPipeline(load_config(config_path), spark=spark, should_stop=stop.is_set)
    runner = threading.Thread(target=pipeline.run, daemon=True)
    try:
        wait_caught_up(relay_dir, upstream, process=relay)
        runner.start()
        with sysbench_run_background(upstream, tables=2, table_size=1000, time=5) as work:
            work.wait(timeout=60)
        wait_caught_up(relay_dir, upstream, process=relay)
        want = checksums(upstream)
        deadline = time.monotonic() + 120
        while checksums(downstream) != want and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        stop.set()
        runner.join(timeout=120)
        assert relay.stop() == 0
    assert checksums(downstream) == want


@pytest.mark.parametrize("driver_apply", [False, True], ids=["spark", "driver"])
def test_kill_9_of_sync_at_random_moments(pipeline_env, tmp_path: Path,
                                          driver_apply: bool) -> None:
    """10 kills of `binrelay sync` during apply; each restart resumes, the flag tells the
    truth (in flight <=> a target is recorded), and the end state equals the upstream.
    ``spark``: every batch on Spark's tasks (marked in flight, a ledger row per task);
    ``driver``: the driver applies while Spark starts, each batch in one transaction with
    its checkpoint, which a kill never leaves in flight."""
    import random

    upstream, downstream, relay_dir, config_path = pipeline_env
    if not driver_apply:
        config_path = pipeline_config(tmp_path / "spark.toml", upstream, relay_dir, downstream,
                                      **{"driver-apply": False})
    sysbench_prepare(upstream, tables=2, table_size=2000)
    with sysbench_run_background(upstream, tables=2, table_size=2000,
                                 time=12 if not driver_apply else 30) as work:
        work.wait(timeout=60)
    upstream.execute("CREATE TABLE sbtest.late (id INT PRIMARY KEY)")
    upstream.execute("INSERT INTO sbtest.late VALUES (1), (2)")
    relay_until_caught_up(config_path, upstream, relay_dir, tmp_path / "relay.log")
    want = checksums(upstream)
    store = CheckpointStore()
    rng = random.Random(11)

    def checkpoint():
        conn = downstream.connect()
        try:
            return read_checkpoint(conn, "sync", store)
        except Exception:  # the checkpoint table may not exist yet
            return None
        finally:
            conn.close()

    kills = in_flight = 0
    while kills < 10:
        before = checkpoint()
        proc = subprocess.Popen(binrelay_cmd("sync", "--config", str(config_path),
                                             "--until-caught-up"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        # Kill once this run has made progress of its own, at a random moment after that.
        while time.monotonic() < deadline and proc.poll() is None:
            cp = checkpoint()
            if cp is not None and (before is None or cp.batch_id > before.batch_id):
                time.sleep(rng.uniform(0.0, 1.5))
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            break  # it finished everything before we could kill it
        proc.kill()
        proc.wait()
        kills += 1
        cp = checkpoint()
        assert cp is not None
        assert cp.consistent == (cp.target is None)
        in_flight += not cp.consistent
    assert kills >= 10, f"only {kills} kills: the workload is too small"
    if not driver_apply:
        assert in_flight >= 1, "no kill landed mid-batch"
    done = run_binrelay("sync", "--config", str(config_path), "--until-caught-up", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    cp = checkpoint()
    assert cp is not None and cp.consistent
    assert checksums(downstream) == want


def _listening(ip: str) -> bool:
    """Whether some socket of this network namespace listens on IPv4 ``ip``, or on its
    IPv4-mapped IPv6 form (Java's sockets are dual-stack), per /proc/net/tcp{,6}."""
    v4 = "".join(f"{int(part):02X}" for part in reversed(ip.split(".")))
    wanted = {v4, "0000000000000000FFFF0000" + v4}
    for table in ("tcp", "tcp6"):
        path = Path("/proc/net") / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and local.split(":")[0] in wanted:  # 0A: LISTEN
                return True
    return False


def test_driver_host_is_where_the_driver_listens(pipeline_env, tmp_path: Path) -> None:
    """[sync] driver-host: the driver binds that address (127.0.0.2, another loopback address,
    stands in for a LAN one) and the sync works as usual."""
    import signal

    upstream, downstream, relay_dir, _config = pipeline_env
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v INT)")
    upstream.execute("INSERT INTO d.t VALUES (1, 5), (2, 6)")
    config_path = write_config(
        tmp_path / "host.toml", upstream, relay_dir, log_level="info",
        to={"host": downstream.host, "port": downstream.port, "user": "root", "password": ""},
        sync={"master": "local[2]", "driver-host": "127.0.0.2"})
    relay_until_caught_up(config_path, upstream, relay_dir, tmp_path / "relay.log")
    assert not _listening("127.0.0.2")
    with (tmp_path / "sync.err").open("wb") as err:
        proc = subprocess.Popen(binrelay_cmd("sync", "--config", str(config_path)),
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        # The first rows may be applied by the driver itself while Spark starts: wait for
        # both, the data and the started driver.
        while (checksums(downstream) != checksums(upstream) or "driver=127.0.0.2:" not in
               (tmp_path / "sync.err").read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "sync.err").read_text()[-2000:]
            time.sleep(0.5)
        assert checksums(downstream) == checksums(upstream)
        assert _listening("127.0.0.2")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    assert "driver=127.0.0.2:" in (tmp_path / "sync.err").read_text()
