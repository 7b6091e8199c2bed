"""Upstream switch: a different identity on (re)connect opens the next subdir (SPEC §1)."""

from __future__ import annotations

import time
from pathlib import Path

from binrelay.relay.layout import list_binlogs, read_index, read_meta
from relay_helpers import (
    assert_identical,
    current_subdir,
    relay_once,
)


def _writes(server, n: int, table: str = "t") -> None:
    server.execute("CREATE DATABASE IF NOT EXISTS d")
    server.execute(f"CREATE TABLE IF NOT EXISTS d.{table} "
                   "(id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(64))")
    for _ in range(n):
        server.execute(f"INSERT INTO d.{table} (v) VALUES ('x')")


def _wait_replicated(primary, replica, timeout: float = 60) -> None:
    want = primary.scalar("SELECT @@gtid_binlog_pos")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if replica.scalar("SELECT @@gtid_slave_pos") == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"replica did not reach {want}")


def test_failover_to_a_replica_in_gtid_mode(mariadb_factory, tmp_path: Path) -> None:
    primary = mariadb_factory(server_id=1)
    replica = mariadb_factory(server_id=2, extra_args=["--log-slave-updates=ON"])
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
        "MASTER_USER='repl', MASTER_PASSWORD='replpass', MASTER_USE_GTID=slave_pos")
    replica.execute("START SLAVE")
    _writes(primary, 30)
    _wait_replicated(primary, replica)

    relay_dir = tmp_path / "relay"
    relay_once(tmp_path, primary, relay_dir, "a", enable_gtid=True)
    carried = read_meta(relay_dir / "0-1.000001")
    assert carried is not None and carried.binlog_gtid == primary.scalar(
        "SELECT @@gtid_binlog_pos")

    # Failover: the replica becomes the primary and takes writes of its own.
    primary.stop()
    replica.execute("STOP SLAVE")
    _writes(replica, 10, table="t2")
    relay_once(tmp_path, replica, relay_dir, "b", enable_gtid=True)

    index = read_index(relay_dir)
    assert [str(n) for n in index or []] == ["0-1.000001", "0-2.000002"]
    new = current_subdir(relay_dir)
    # Positions restart in the new server's own files, from the start of the file that holds
    # the carried GTID set.
    assert list_binlogs(new)[0] == "mysql-bin.000001"
    assert_identical(new, replica)
    meta = read_meta(new)
    assert meta is not None
    assert meta.binlog_gtid == replica.scalar("SELECT @@gtid_binlog_pos")
    assert (meta.binlog_name, meta.binlog_pos) == replica.master_status()


def test_a_b_a_in_position_mode(mariadb_factory, tmp_path: Path) -> None:
    """The seed's purge example needs exactly this history: A.000001, B.000002, A.000003."""
    a = mariadb_factory(server_id=1)
    b = mariadb_factory(server_id=10)
    relay_dir = tmp_path / "relay"
    _writes(a, 5)
    relay_once(tmp_path, a, relay_dir, "a1")
    _writes(b, 5)
    relay_once(tmp_path, b, relay_dir, "b")
    _writes(a, 5)
    relay_once(tmp_path, a, relay_dir, "a2")
    # 0-1 and 0-10 are different servers even though one name is a prefix of the other.
    assert [str(n) for n in read_index(relay_dir) or []] == [
        "0-1.000001", "0-10.000002", "0-1.000003"]
    assert_identical(relay_dir / "0-10.000002", b)
    assert_identical(relay_dir / "0-1.000003", a)
