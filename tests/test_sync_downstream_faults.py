"""A sync rides out a downstream that dies and comes back: it waits, reconnects, replays
the batch in flight and goes on; ``--until-caught-up`` gives up after its deadline with one
line.  Real servers, the real CLI."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from relay_helpers import binrelay_cmd, relay_until_caught_up, run_binrelay, write_config


def relay(tmp_path: Path, upstream) -> None:
    cfg = write_config(tmp_path / "relay.toml", upstream, tmp_path / "relay")
    relay_until_caught_up(cfg, upstream, tmp_path / "relay", tmp_path / "relay.log")


def config(tmp_path: Path, upstream, downstream, **sync) -> Path:
    settings = {"master": "local[2]", "tasks": 2, "batch-bytes": 64 * 1024,
                "partition-bytes": 64 * 1024, "driver-batch-bytes": 0, **sync}
    return write_config(
        tmp_path / "binrelay.toml", upstream, tmp_path / "relay", log_level="info",
        log_file=str(tmp_path / "sync.log"), metrics={"sync-addr": "127.0.0.1:0"},
        to={"host": downstream.host, "port": downstream.port, "user": "root", "password": ""},
        sync=settings)


def outages_counted(log_file: Path) -> float:
    """binrelay_sync_downstream_outages_total, scraped from the sync's /metrics."""
    addr = re.search(r'msg="serving metrics" addr=(\S+)', log_file.read_text()).group(1)
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return float(re.search(r"^binrelay_sync_downstream_outages_total (\S+)$", text,
                           re.M).group(1))


def insert_rows(upstream, first: int, count: int) -> None:
    values = ", ".join(f"({i}, REPEAT('v', 200))" for i in range(first, first + count))
    upstream.execute(f"INSERT INTO d.t VALUES {values}")


def wait_for(predicate, timeout: float, what: str) -> None:
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        with contextlib.suppress(Exception):  # the server may be on its way back
            if predicate():
                return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def servers(mariadb_factory, rows: int) -> tuple[object, object]:
    """An upstream holding ``rows`` rows of d.t, and an empty downstream."""
    upstream, downstream = mariadb_factory(server_id=1), mariadb_factory(server_id=2)
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(255))")
    insert_rows(upstream, 0, rows)
    return upstream, downstream


def checksum(server) -> int:
    return server.execute("CHECKSUM TABLE d.t")[0][1]


def test_a_streaming_sync_rides_out_a_downstream_killed_and_restarted(
        mariadb_factory, tmp_path: Path) -> None:
    upstream, downstream = servers(mariadb_factory, 500)
    cfg = config(tmp_path, upstream, downstream)
    relay(tmp_path, upstream)
    stderr = open(tmp_path / "sync.stderr", "wb")  # noqa: SIM115 - closed below
    sync = subprocess.Popen(binrelay_cmd("sync", "--config", str(cfg)),
                            stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: downstream.scalar("SELECT COUNT(*) FROM d.t") == 500, 120,
                 "the first rows downstream")
        for round_ in range(2):
            downstream.kill()
            for k in range(4):  # the relay goes on; the sync has work and no downstream
                insert_rows(upstream, 1000 * (round_ + 1) + 100 * k, 100)
            relay(tmp_path, upstream)
            time.sleep(4)
            downstream.start()
            want = 500 + 400 * (round_ + 1)
            wait_for(lambda n=want: downstream.scalar("SELECT COUNT(*) FROM d.t") == n, 180,
                     "the rows written while the downstream was down")
        wait_for(lambda: checksum(downstream) == checksum(upstream), 60, "equal checksums")
        assert sync.poll() is None, "the sync exited"
        assert outages_counted(tmp_path / "sync.log") == 2
        status = run_binrelay("status", "--config", str(cfg))
        assert re.search(r"Sync_Last_Error: \[BR5102\] ", status.stdout), status.stdout
    finally:
        sync.send_signal(signal.SIGTERM)
        code = sync.wait(60)
        stderr.close()
    assert code == 0
    assert (tmp_path / "sync.stderr").read_text() == ""
    log = (tmp_path / "sync.log").read_text()
    # Logged once per outage, not once per attempt.
    assert log.count('msg="downstream lost; retrying"') == 2, log[-3000:]
    assert log.count('msg="downstream back"') == 2, log[-3000:]
    assert not [line for line in log.splitlines()
                if "Traceback" in line and "level=debug" not in line], log[-3000:]


def test_until_caught_up_gives_up_after_its_deadline_with_one_line(
        mariadb_factory, tmp_path: Path) -> None:
    upstream, downstream = servers(mariadb_factory, 50)
    cfg = config(tmp_path, upstream, downstream, **{"reconnect-deadline": 3})
    relay(tmp_path, upstream)
    downstream.kill()
    started = time.monotonic()
    proc = run_binrelay("sync", "--config", str(cfg), "--until-caught-up", timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("binrelay: error: [BR5102] "), proc.stderr
    assert "stayed unreachable" in lines[0] and "reconnect-deadline" in lines[0]
    assert time.monotonic() - started < 120
    # Back up, the same command finishes the job.
    downstream.start()
    proc = run_binrelay("sync", "--config", str(cfg), "--until-caught-up", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert checksum(downstream) == checksum(upstream)


def test_rows_locked_downstream_are_waited_for_and_said_so(mariadb_factory,
                                                           tmp_path: Path) -> None:
    """A downstream session holding row locks the sync needs (past the downstream's lock
    wait timeout and the apply's own retries): the sync says the downstream is busy (not
    lost), waits, and goes on once the locks are released, the upstream sessions'
    temporary tables still there (the failed batch, rows applied by Spark tasks, ran no
    statement in the session that holds them)."""
    upstream = mariadb_factory(server_id=1)
    downstream = mariadb_factory(server_id=2, extra_args=["--innodb-lock-wait-timeout=1"])
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(255))")
    insert_rows(upstream, 0, 10)
    cfg = config(tmp_path, upstream, downstream, **{"driver-apply": False})  # rows: Spark's
    relay(tmp_path, upstream)
    assert run_binrelay("sync", "--config", str(cfg), "--until-caught-up",
                        timeout=300).returncode == 0
    holder = downstream.connect()
    session = upstream.connect()
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("UPDATE d.t SET v = v WHERE id = 3")  # keeps its row locked
        with session.cursor() as cur:
            cur.execute("SET SESSION binlog_format = 'MIXED'")
            cur.execute("CREATE TEMPORARY TABLE d.tmp (id INT)")
            cur.execute("INSERT INTO d.tmp VALUES (100), (101)")
        upstream.execute("UPDATE d.t SET v = 'changed' WHERE id = 3")
        with session.cursor() as cur:
            cur.execute("INSERT INTO d.t SELECT id, 'from tmp' FROM d.tmp")
        relay(tmp_path, upstream)
        sync = subprocess.Popen(binrelay_cmd("sync", "--config", str(cfg), "--until-caught-up"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(lambda: 'msg="downstream busy' in (tmp_path / "sync.log").read_text(), 180,
                 "the sync to say the downstream is busy")
    finally:
        holder.rollback()
        holder.close()
        session.close()
    _out, err = sync.communicate(timeout=300)
    assert sync.returncode == 0 and err == b"", err[-3000:]
    assert checksum(downstream) == checksum(upstream)
    log = (tmp_path / "sync.log").read_text()
    assert "Lock wait timeout exceeded" in log and "INNODB_TRX" in log, log[-3000:]
    assert 'msg="downstream lost' not in log
