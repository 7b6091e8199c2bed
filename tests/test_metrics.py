"""Prometheus metrics scraped over HTTP from a real relay process and a real sync."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from binrelay.config import load_config
from binrelay.metrics import SyncMetrics, serve_metrics
from binrelay.relay.livestatus import read_status
from binrelay.spark.sync import SyncPipeline
from binrelay.testing.procs import find_free_port
from relay_helpers import (
    RelayProcess,
    run_binrelay,
    wait_caught_up,
    write_config,
)


def scrape(addr: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample at http://addr/metrics."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return out


def metrics_addr(relay_dir: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = read_status(relay_dir)
        if live is not None and live.metrics_addr:
            return live.metrics_addr
        time.sleep(0.1)
    raise AssertionError("the relay never wrote its metrics address to relay.status")


def test_relay_metrics_move_as_events_flow(mariadb, tmp_path: Path) -> None:
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "r.toml", mariadb, relay_dir,
                          metrics={"relay-addr": "127.0.0.1:0"})
    mariadb.execute("CREATE DATABASE d")
    mariadb.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(100))")
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, mariadb, process=relay)
        addr = metrics_addr(relay_dir)
        assert addr.startswith("127.0.0.1:")
        first = scrape(addr)
        for name in ("binrelay_relay_events_total", "binrelay_relay_bytes_total",
                     "binrelay_relay_fsyncs_total", "binrelay_relay_reconnects_total",
                     "binrelay_purge_runs_total", "binrelay_purge_freed_bytes_total"):
            assert name in first, sorted(first)
        for i in range(50):
            mariadb.execute("INSERT INTO d.t VALUES (%s, REPEAT('x', 100))", (i,))
        wait_caught_up(relay_dir, mariadb, process=relay)
        # The probe runs every second: wait until it has seen the caught-up position.
        deadline = time.monotonic() + 30
        second = scrape(addr)
        while second.get("binrelay_relay_lag_bytes") != 0 and time.monotonic() < deadline:
            time.sleep(0.3)
            second = scrape(addr)
        assert second["binrelay_relay_events_total"] >= first["binrelay_relay_events_total"] + 50
        assert second["binrelay_relay_bytes_total"] >= first["binrelay_relay_bytes_total"] + 5000
        assert second["binrelay_relay_fsyncs_total"] > first["binrelay_relay_fsyncs_total"]
        assert second["binrelay_relay_lag_bytes"] == 0
        assert second["binrelay_relay_lag_seconds"] == 0
        assert second["binrelay_relay_upstream_up"] == 1
        assert second["binrelay_relay_reconnects_total"] == 0
    finally:
        assert relay.stop() == 0


def test_relay_metrics_address_in_use_names_key_and_file(mariadb, tmp_path: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        config = write_config(tmp_path / "r.toml", mariadb, tmp_path / "relay",
                              metrics={"relay-addr": f"127.0.0.1:{port}"})
        proc = run_binrelay("relay", "--config", str(config), timeout=60)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("binrelay: error: [BR1001]"), last
    assert str(config) in last and "[metrics] relay-addr" in last, last


def test_sync_metrics_count_batches_rows_and_latency(spark, mariadb_factory,
                                                    tmp_path: Path) -> None:
    upstream = mariadb_factory(server_id=1)
    downstream = mariadb_factory(server_id=2)
    relay_dir = tmp_path / "relay"
    port = find_free_port()
    config_path = write_config(
        tmp_path / "s.toml", upstream, relay_dir,
        to={"host": downstream.host, "port": downstream.port, "user": "root", "password": ""},
        sync={"master": "local[1]", "tasks": 2},
        metrics={"sync-addr": f"127.0.0.1:{port}"})
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v INT)")
    config = load_config(config_path)
    registry = CollectorRegistry()
    server = serve_metrics(config, "sync-addr", registry)
    assert server is not None and server.addr == f"127.0.0.1:{port}"
    relay = RelayProcess(config_path, tmp_path / "relay.log")
    try:
        listener = SyncMetrics(registry)
        wait_caught_up(relay_dir, upstream, process=relay)
        SyncPipeline(config, spark=spark, listeners=[listener]).run(until_caught_up=True)
        first = scrape(server.addr)
        upstream.execute("INSERT INTO d.t VALUES (1, 1), (2, 2), (3, 3)")
        upstream.execute("UPDATE d.t SET v = 5 WHERE id = 1")
        upstream.execute("DELETE FROM d.t WHERE id = 2")
        wait_caught_up(relay_dir, upstream, process=relay)
        SyncPipeline(config, spark=spark, listeners=[listener]).run(until_caught_up=True)
        second = scrape(server.addr)
    finally:
        assert relay.stop() == 0
        server.close()
    # CREATE DATABASE and CREATE TABLE: one batch (a run of DDL), two statements.
    assert first["binrelay_sync_batches_total{kind=ddl}"] == 1
    assert first["binrelay_sync_ddl_total"] == 2
    assert second["binrelay_sync_rows_total{op=insert}"] == \
        first["binrelay_sync_rows_total{op=insert}"] + 3
    assert second["binrelay_sync_rows_total{op=update}"] == \
        first["binrelay_sync_rows_total{op=update}"] + 1
    assert second["binrelay_sync_rows_total{op=delete}"] == \
        first["binrelay_sync_rows_total{op=delete}"] + 1
    assert second["binrelay_sync_batches_total{kind=dml}"] > \
        first["binrelay_sync_batches_total{kind=dml}"]
    assert second["binrelay_sync_batch_seconds_count"] > first["binrelay_sync_batch_seconds_count"]
    assert second["binrelay_sync_relay_bytes_total"] > first["binrelay_sync_relay_bytes_total"]
    # The driver thread's time in the batches: some CPU; its wait for one counted (Linux).
    assert second["binrelay_sync_driver_cpu_seconds_total"] > \
        first["binrelay_sync_driver_cpu_seconds_total"] > 0
    assert second["binrelay_sync_driver_cpu_wait_seconds_total"] >= \
        first["binrelay_sync_driver_cpu_wait_seconds_total"] >= 0
    assert downstream.scalar("SELECT COUNT(*) FROM d.t") == 2
