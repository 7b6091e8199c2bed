"""Where the relay starts (SPEC §1's three cases), against real MariaDB servers."""

from __future__ import annotations

from pathlib import Path

from binrelay.relay.layout import list_binlogs, read_meta
from relay_helpers import (
    assert_identical,
    current_subdir,
    relay_once,
    run_binrelay,
    write_config,
)


def _three_files(server) -> list[str]:
    """Transactions spread over three binlog files; returns the GTID ending each file."""
    server.execute("CREATE DATABASE d")
    server.execute("CREATE TABLE d.t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(64))")
    ends = []
    for _file in range(3):
        for _ in range(20):
            server.execute("INSERT INTO d.t (v) VALUES ('x')")
        ends.append(server.scalar("SELECT @@gtid_binlog_pos"))
        server.flush_logs()
    return ends


def _relay_until_caught_up(tmp_path: Path, server, **keys) -> Path:
    relay_once(tmp_path, server, tmp_path / "relay", "relay", **keys)
    return current_subdir(tmp_path / "relay")


def test_default_start_is_the_oldest_binlog(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1)
    _three_files(server)
    subdir = _relay_until_caught_up(tmp_path, server)
    upstream = [name for name, _ in server.binlog_files()]
    assert list_binlogs(subdir) == upstream
    assert_identical(subdir, server)


def test_relay_binlog_name(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1)
    _three_files(server)
    subdir = _relay_until_caught_up(tmp_path, server, relay_binlog_name="mysql-bin.000002")
    upstream = [name for name, _ in server.binlog_files()]
    assert list_binlogs(subdir) == upstream[1:]
    assert_identical(subdir, server, files=upstream[1:])


def test_relay_binlog_gtid_widens_to_the_file_start(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1)
    ends = _three_files(server)
    # A GTID in the middle of the second file: the relay takes that whole file from offset 4.
    first_of_file2 = ends[0]
    seq = int(first_of_file2.split("-")[2]) + 5
    subdir = _relay_until_caught_up(tmp_path, server, enable_gtid=True,
                                    relay_binlog_gtid=f"0-1-{seq}")
    upstream = [name for name, _ in server.binlog_files()]
    assert list_binlogs(subdir) == upstream[1:]
    assert_identical(subdir, server, files=upstream[1:])
    meta = read_meta(subdir)
    assert meta is not None and meta.binlog_gtid == server.scalar("SELECT @@gtid_binlog_pos")


def test_initial_gtid_start(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1)
    _three_files(server)
    subdir = _relay_until_caught_up(tmp_path, server, enable_gtid=True)
    assert list_binlogs(subdir)[0] == "mysql-bin.000001"
    assert_identical(subdir, server)


def test_purged_upstream_is_a_clear_error(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1)
    _three_files(server)
    server.purge_logs_to("mysql-bin.000003")

    config = write_config(tmp_path / "gtid.toml", server, tmp_path / "r1", enable_gtid=True)
    proc = run_binrelay("relay", "--config", str(config))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("binrelay: error:") and "relay-binlog-gtid" in last, proc.stderr
    assert "Traceback" not in proc.stderr

    config = write_config(tmp_path / "pos.toml", server, tmp_path / "r2",
                          relay_binlog_name="mysql-bin.000001")
    proc = run_binrelay("relay", "--config", str(config))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "purged" in last and "relay-binlog-name" in last, proc.stderr


def test_a_configured_sync_is_registered_before_it_first_runs(mariadb_factory,
                                                             tmp_path: Path) -> None:
    """A new relay dir whose config has a [sync] pipeline starts with that pipeline as a
    consumer at its first position: a purge for space (remain-space above what the disk
    has) removes nothing the sync will need.  Without [sync]/[to], nobody is registered."""
    import time

    from binrelay.relay.consumers import list_consumers, unregister
    from binrelay.relay.purge import purge_auto

    server = mariadb_factory(server_id=1)
    _three_files(server)
    first = server.binlog_files()[0][0]
    relay_once(tmp_path, server, tmp_path / "relay", "relay", sync={"pipeline": "p1"})
    [held] = list_consumers(tmp_path / "relay")
    assert (held.name, held.position.binlog_name, held.position.binlog_pos) == ("p1", first, 4)
    relayed = list_binlogs(current_subdir(tmp_path / "relay"))
    plan, freed = purge_auto(tmp_path / "relay", now=time.time(), expires_hours=1,
                             remain_gb=10**6, gc_applied=True)
    assert plan.empty and freed == 0
    assert list_binlogs(current_subdir(tmp_path / "relay")) == relayed
    # Once only, for a new relay dir: unregistered, it stays so across relay restarts.
    assert unregister(tmp_path / "relay", "p1")
    server.execute("INSERT INTO d.t (v) VALUES ('y')")
    relay_once(tmp_path, server, tmp_path / "relay", "relay2", sync={"pipeline": "p1"})
    assert list_consumers(tmp_path / "relay") == []

    relay_once(tmp_path, server, tmp_path / "plain", "plain")
    assert list_consumers(tmp_path / "plain") == []
