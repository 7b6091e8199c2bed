"""``binrelay status``: real upstream, relay and sync processes, figures against known positions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binrelay.relay.livestatus import RELAYING, read_status
from binrelay.relay.monitor import RelayMonitor
from relay_helpers import RelayProcess, binrelay_cmd, run_binrelay, wait_caught_up, write_config


def status_json(config: Path) -> dict[str, Any]:
    proc = run_binrelay("status", "--config", str(config), "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def wait_for(config: Path, ok: Callable[[dict[str, Any]], bool], timeout: float = 120
             ) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        doc = status_json(config)
        if ok(doc):
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(json.dumps(doc, indent=1))
        time.sleep(0.5)


def upstream_now(server) -> tuple[str, int, str]:
    name, pos = server.master_status()
    return name, pos, server.scalar("SELECT @@GLOBAL.gtid_binlog_pos")


@pytest.fixture
def env(mariadb_factory, tmp_path: Path):
    upstream = mariadb_factory(server_id=1)
    downstream = mariadb_factory(server_id=2)
    relay_dir = tmp_path / "relay"
    config = write_config(
        tmp_path / "binrelay.toml", upstream, relay_dir,
        to={"host": downstream.host, "port": downstream.port, "user": "root", "password": ""},
        sync={"master": "local[1]", "tasks": 2},
        metrics={"relay-addr": "127.0.0.1:0"})
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20))")
    upstream.execute("INSERT INTO d.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    return upstream, downstream, relay_dir, config


def test_status_before_anything_ran(env) -> None:
    upstream, _downstream, relay_dir, config = env
    doc = status_json(config)
    relay, pipeline = doc["relay"], doc["pipeline"]
    name, pos, gtid = upstream_now(upstream)
    assert relay["upstream"] == {
        "source": "live", "host": upstream.host, "port": upstream.port, "reachable": True,
        "error": "", "identity": "0-1", "binlog_file": name, "binlog_pos": pos, "gtid": gtid}
    assert relay["relayed"]["source"] == "persisted" and relay["relayed"]["binlog_pos"] is None
    assert relay["process"]["found"] is False and relay["process"]["alive"] is False
    assert relay["bytes_behind"] is None and relay["seconds_behind"] is None
    assert pipeline["checkpoint"]["reachable"] is True
    assert pipeline["checkpoint"]["found"] is False
    assert pipeline["lag_bytes"] is None and pipeline["caught_up"] is None
    assert not relay_dir.exists()  # status only reads


def test_status_with_relay_and_sync_running_and_stopped(env, tmp_path: Path) -> None:
    upstream, downstream, relay_dir, config = env
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, upstream, process=relay)
        # Running relay, caught up: relayed (persisted) == upstream (live), 0 behind.
        doc = wait_for(config, lambda d: d["relay"]["seconds_behind"] == 0)
        name, pos, gtid = upstream_now(upstream)
        r = doc["relay"]
        assert (r["upstream"]["binlog_file"], r["upstream"]["binlog_pos"]) == (name, pos)
        assert r["upstream"]["gtid"] == gtid
        assert r["relayed"]["subdir"] == "0-1.000001"
        assert (r["relayed"]["binlog_file"], r["relayed"]["binlog_pos"]) == (name, pos)
        assert r["relayed"]["gtid"] == gtid
        assert r["relayed"]["file"] == str(relay_dir / "0-1.000001" / "relay.meta")
        assert r["bytes_behind"] == 0 and r["same_upstream"] is True
        p = r["process"]
        assert p["alive"] is True and p["pid"] == relay.proc.pid and p["state"] == "relaying"
        assert p["last_error"] == "" and p["metrics_addr"].startswith("127.0.0.1:")
        assert r["relay_dir"]["size_bytes"] >= pos and r["relay_dir"]["free_bytes"] > 0
        assert os.stat(relay_dir / "relay.status").st_mode & 0o777 == 0o600

        # sync --until-caught-up: the persisted checkpoint is the relay end, consistent.
        done = run_binrelay("sync", "--config", str(config), "--until-caught-up", timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        doc = status_json(config)
        pl = doc["pipeline"]
        cp = pl["checkpoint"]
        assert cp["source"] == "persisted" and cp["found"] is True
        assert cp["position"] == {"subdir": "0-1.000001", "file": name, "pos": pos}
        assert cp["gtid_set"] == upstream_now(upstream)[2]
        assert cp["consistent"] is True and cp["in_flight_target"] is None
        assert cp["batch_id"] >= 1
        assert pl["relay_end"] == cp["position"]
        assert pl["lag_bytes"] == 0 and pl["caught_up"] is True
        assert pl["process"]["found"] is True and pl["process"]["alive"] is False

        # More upstream writes, with a following sync running: the checkpoint follows.
        sync = subprocess.Popen(binrelay_cmd("sync", "--config", str(config)),
                                stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / "sync.log", "wb"))  # noqa: SIM115
        try:
            upstream.execute("INSERT INTO d.t VALUES (4, 'd'), (5, 'e')")
            wait_caught_up(relay_dir, upstream, process=relay)
            name, pos, gtid = upstream_now(upstream)
            doc = wait_for(config, lambda d: d["pipeline"]["caught_up"] is True
                           and d["pipeline"]["checkpoint"]["position"]["pos"] == pos,
                           timeout=300)
            assert doc["pipeline"]["process"]["alive"] is True
            assert doc["pipeline"]["process"]["pid"] == sync.pid
            assert doc["relay"]["relayed"]["binlog_pos"] == pos
            assert downstream.scalar("SELECT COUNT(*) FROM d.t") == 5
        finally:
            sync.send_signal(signal.SIGTERM)
            assert sync.wait(timeout=120) == 0
    finally:
        assert relay.stop() == 0

    # Both stopped: persisted figures stay, live ones say the processes are gone.
    doc = status_json(config)
    r, pl = doc["relay"], doc["pipeline"]
    assert r["process"]["found"] is True and r["process"]["alive"] is False
    assert r["process"]["state"] == "stopped" and r["seconds_behind"] is None
    assert (r["relayed"]["binlog_file"], r["relayed"]["binlog_pos"]) == (name, pos)
    assert r["bytes_behind"] == 0
    assert pl["checkpoint"]["position"]["pos"] == pos and pl["caught_up"] is True
    assert pl["process"]["alive"] is False
    live = read_status(relay_dir)
    assert live is not None and live.state == "stopped"

    # Upstream down: said, not an error; the rest still shows.
    upstream.stop()
    human = run_binrelay("status", "--config", str(config), timeout=60)
    assert human.returncode == 0, human.stderr
    lines = dict(line.split(": ", 1) for line in human.stdout.splitlines()
                 if ": " in line and not line.startswith(("***", "binrelay status")))
    lines = {k.strip(): v for k, v in lines.items()}
    assert lines["Upstream_Reachable"].startswith("No (unreachable")
    assert lines["Relay_Log_Pos"] == str(pos)
    assert lines["Relay_Running"] == "No"
    assert lines["Consistent"] == "Yes" and lines["Lag_Bytes"] == "0"
    assert "persisted" in human.stdout and "live" in human.stdout
    doc = status_json(config)
    assert doc["relay"]["upstream"]["reachable"] is False
    assert doc["relay"]["upstream"]["error"]
    assert doc["relay"]["bytes_behind"] is None


def test_status_shows_the_relays_last_error(env, tmp_path: Path) -> None:
    upstream, _downstream, relay_dir, config = env
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, upstream, process=relay)
        upstream.stop()
        # The relay keeps reconnecting; status says so, with the error.
        doc = wait_for(config, lambda d: d["relay"]["process"]["state"] == "reconnecting",
                       timeout=60)
        p = doc["relay"]["process"]
        assert p["alive"] is True and p["last_error"].startswith("[BR4002]")
        assert p["last_error_at"] is not None
        assert doc["relay"]["seconds_behind"] is None
    finally:
        assert relay.stop() == 0


def test_a_new_state_is_written_at_once(tmp_path: Path) -> None:
    """relay.status says the relay's new state when it changes, not at the next tick (an
    hour away here): ``status`` and scripts waiting for the relay see it relaying when it
    does."""
    stopping = threading.Event()
    service = types.SimpleNamespace(
        relay_dir=types.SimpleNamespace(root=tmp_path), endpoint=None, writer=None,
        connected_identity="", state="connecting", pid=os.getpid(), started_at=time.time(),
        last_error="", last_error_at=None, metrics_addr="", disk_full_since=None,
        stopping=stopping.is_set)
    monitor = RelayMonitor(service, interval=3600)  # type: ignore[arg-type]
    monitor.start()
    try:
        deadline = time.monotonic() + 30
        while read_status(tmp_path) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_status(tmp_path).state == "connecting"  # type: ignore[union-attr]
        service.state = RELAYING
        monitor.poke()
        deadline = time.monotonic() + 30
        while getattr(read_status(tmp_path), "state", "") != RELAYING and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_status(tmp_path).state == RELAYING  # type: ignore[union-attr]
    finally:
        stopping.set()
        monitor.join(timeout=5)
