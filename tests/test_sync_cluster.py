"""The sync pipeline on a real Spark standalone cluster (1 master, 2 workers, loopback).

Issue 5, check 4: the same workload as test_sync.py's end-to-end test, applied by
``binrelay sync --until-caught-up`` whose ``[sync] master`` is the cluster, gives the same
result.  The relay dir is on local disk: every executor of this one-machine cluster reads it
at the same path, which is what a shared filesystem gives a multi-node cluster.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from binrelay.testing.cluster import ClusterStartError, StandaloneCluster
from relay_helpers import RelayProcess, run_binrelay, wait_caught_up, write_config
from test_sync import _ddl_workload, assert_ddl_workload_converged

pytestmark = [pytest.mark.timeout(420), pytest.mark.server, pytest.mark.spark]


def _executor_logs(cluster: StandaloneCluster, worker: int) -> list[str]:
    return [p.read_text(errors="replace")
            for p in sorted((cluster.base_dir / f"worker-{worker}").glob("app-*/*/stderr"))]


def test_sync_on_a_standalone_cluster(mariadb_factory, tmp_path: Path) -> None:
    upstream = mariadb_factory(server_id=1, max_binlog_size=512 * 1024)
    downstream = mariadb_factory(server_id=2)
    relay_dir = tmp_path / "relay"

    # The workload runs (mostly sleeping on sysbench's clock) while the cluster's JVMs
    # start: the two take about as long, and the test's budget is minutes.
    failed: list[BaseException] = []

    def workload() -> None:
        try:
            _ddl_workload(upstream)
        except BaseException as exc:
            failed.append(exc)

    config_path = write_config(tmp_path / "relay.toml", upstream, relay_dir)
    relay = RelayProcess(config_path, tmp_path / "relay.log")
    try:
        runner = threading.Thread(target=workload, daemon=True)
        runner.start()
        with StandaloneCluster(workers=2, cores=1, memory="1g",
                               base_dir=tmp_path / "spark") as cluster:
            runner.join(timeout=120)
            assert not runner.is_alive(), "the workload did not finish"
            assert not failed, failed
            wait_caught_up(relay_dir, upstream, process=relay)
            sync_config = write_config(
                tmp_path / "sync.toml", upstream, relay_dir,
                to={"host": downstream.host, "port": downstream.port, "user": "root",
                    "password": ""},
                sync={"master": cluster.master_url, "tasks": 2, "driver-batch-bytes": 0,
                      "batch-bytes": 4 << 20, "partition-bytes": 512 << 10})
            started = time.monotonic()
            result = run_binrelay("sync", "--config", str(sync_config), "--until-caught-up",
                                  timeout=300)
            elapsed = time.monotonic() - started
            assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
            assert re.search(r"applied \d+ batch", result.stdout), result.stdout
            print(f"sync on the cluster: {elapsed:.1f} s: {result.stdout.strip()}")

            # It really ran on the cluster: the app finished there, each worker ran an
            # executor, and the executors talked to a driver on loopback.
            apps = cluster.state()["completedapps"]
            assert [a["name"] for a in apps] == ["binrelay-sync"], apps
            logs = {n: _executor_logs(cluster, n) for n in (1, 2)}
            assert all(logs.values()), f"a worker ran no executor: {logs.keys()}"
            for text in (t for texts in logs.values() for t in texts):
                assert "Connecting to driver: spark://CoarseGrainedScheduler@127.0.0.1:" in text
            # Dozens of tasks over the run: each executor takes some.
            finished = {n: sum(t.count("Finished task") for t in texts)
                        for n, texts in logs.items()}
            assert all(finished.values()), finished
        assert cluster.leftover_pids() == []
        assert cluster.pids() == []
    finally:
        assert relay.stop() == 0

    assert_ddl_workload_converged(upstream, downstream)


def test_a_cluster_that_cannot_start_says_why(tmp_path: Path) -> None:
    cluster = StandaloneCluster(workers=1, memory="lots", base_dir=tmp_path / "spark")
    with pytest.raises(ClusterStartError) as info:
        cluster.start()
    message = str(info.value)
    assert "spark worker-1 exited" in message
    # The logs' tails say why: the worker's usage text, and the master that did start.
    assert "worker-1.log (tail)" in message and "Usage: Worker" in message
    assert "master.log (tail)" in message
    assert cluster.pids() == [] and cluster.leftover_pids() == []
