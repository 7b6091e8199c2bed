"""An upstream that no longer holds what the relay holds is refused at reconnect, with one
line: a binlog that lost its tail, a history reset.  Never another history in the same
subdir (DM's open pingcap/dm#1449)."""

from __future__ import annotations

import time
from pathlib import Path

from binrelay.relay.layout import list_binlogs
from binrelay.relay.txnscan import transaction_ends
from relay_helpers import current_subdir, relay_once, run_binrelay, write_config


def rows(upstream, first: int, count: int) -> None:
    for i in range(first, first + count):
        upstream.execute(f"INSERT INTO d.t VALUES ({i})")


def refused(config: Path) -> str:
    proc = run_binrelay("relay", "--config", str(config), timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert lines and lines[-1].startswith("binrelay: error: [BR4006] "), proc.stderr[-2000:]
    return lines[-1]


def test_an_upstream_binlog_that_lost_its_tail(mariadb_factory, tmp_path: Path) -> None:
    upstream = mariadb_factory(server_id=1)
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
    rows(upstream, 0, 10)
    relay_dir = tmp_path / "relay"
    config = relay_once(tmp_path, upstream, relay_dir, "relay")
    relayed = current_subdir(relay_dir) / list_binlogs(current_subdir(relay_dir))[-1]
    ends = [t.end for t in transaction_ends(relayed, 4, relayed.stat().st_size)]
    # What a crash with sync_binlog=0 leaves: the last transactions never reached the disk.
    upstream.kill()
    binlog = upstream.binlog_path(relayed.name)
    with open(binlog, "r+b") as f:
        f.truncate(ends[-4])
    upstream.start()
    line = refused(config)
    assert f"{relayed.name} ends at {ends[-4]}, before the relayed position" in line
    # Nothing was written into the relay dir.
    assert relayed.stat().st_size == ends[-1]


def test_an_upstream_whose_history_was_reset(mariadb_factory, tmp_path: Path) -> None:
    upstream = mariadb_factory(server_id=1)
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
    rows(upstream, 0, 3)
    upstream.execute("FLUSH BINARY LOGS")
    rows(upstream, 3, 3)
    relay_dir = tmp_path / "relay"
    config = relay_once(tmp_path, upstream, relay_dir, "relay")
    upstream.execute("RESET MASTER")  # mysql-bin.000001 again, GTIDs from the start
    rows(upstream, 100, 2)
    line = refused(config)
    assert "does not contain the relayed 0-1-" in line


def test_a_failover_target_behind_the_relay(mariadb_factory, tmp_path: Path) -> None:
    upstream = mariadb_factory(server_id=1)
    replica = mariadb_factory(server_id=2, extra_args=["--log-slave-updates"])
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
    rows(upstream, 0, 3)
    replica.execute(
        "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = 'root',"
        " MASTER_PASSWORD = '', MASTER_USE_GTID = no, MASTER_LOG_FILE = 'mysql-bin.000001',"
        " MASTER_LOG_POS = 4", (upstream.host, upstream.port))
    replica.execute("START SLAVE")
    want = upstream.scalar("SELECT @@gtid_binlog_pos")
    for _ in range(300):
        if replica.scalar("SELECT @@gtid_binlog_pos") == want:
            break
        time.sleep(0.1)
    replica.execute("STOP SLAVE")
    rows(upstream, 3, 3)  # the replica never gets these
    relay_dir = tmp_path / "relay"
    relay_once(tmp_path, upstream, relay_dir, "relay", enable_gtid=True)
    failover = write_config(tmp_path / "failover.toml", replica, relay_dir, enable_gtid=True)
    line = refused(failover)
    assert "the new upstream 0-2's GTID set 0-1-5 does not contain the relayed 0-1-8" in line
