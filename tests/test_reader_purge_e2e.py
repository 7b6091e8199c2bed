"""Reader and purge against real relays of real MariaDB servers."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from binrelay.position import Position
from binrelay.relay import consumers as reg
from binrelay.relay.layout import list_binlogs, read_index
from binrelay.relay.reader import RelayReader
from binrelay.testing.sandbox import sysbench_prepare, sysbench_run_background
from relay_helpers import (
    RelayProcess,
    binrelay_cmd,
    current_subdir,
    relay_once,
    run_binrelay,
    wait_caught_up,
    write_config,
)


def _writes(server, n: int) -> None:
    server.execute("CREATE DATABASE IF NOT EXISTS d")
    server.execute("CREATE TABLE IF NOT EXISTS d.t (id INT PRIMARY KEY AUTO_INCREMENT, "
                   "v VARCHAR(64))")
    for _ in range(n):
        server.execute("INSERT INTO d.t (v) VALUES ('x')")


def _by_file(events) -> dict[tuple[str, str], bytes]:
    out: dict[tuple[str, str], bytearray] = {}
    for e in events:
        buf = out.setdefault((str(e.subdir), e.file), bytearray(b"\xfebin"))
        assert len(buf) == e.pos, f"{e.subdir}/{e.file}: event at {e.pos} after {len(buf)}"
        buf += e.raw
    return {k: bytes(v) for k, v in out.items()}


def test_seed_purge_example_end_to_end(mariadb_factory, tmp_path: Path) -> None:
    a = mariadb_factory(server_id=1)
    b = mariadb_factory(server_id=2)
    relay_dir = tmp_path / "relay"
    for server, tag in ((a, "a1"), (b, "b"), (a, "a2")):
        _writes(server, 5)
        server.flush_logs()
        _writes(server, 5)
        config = relay_once(tmp_path, server, relay_dir, tag)
    assert [str(s) for s in read_index(relay_dir) or []] == [
        "0-1.000001", "0-2.000002", "0-1.000003"]
    copy = tmp_path / "copy"
    shutil.copytree(relay_dir, copy)

    # A consumer in the middle of the oldest subdir holds it: refused past it, clearly.
    index = read_index(relay_dir)
    assert index is not None
    held = Position(index[0], "mysql-bin.000002", 4)
    reg.register(relay_dir, "spark", held)
    proc = run_binrelay("purge-relay", "--config", str(config), "--filename",
                        "mysql-bin.000001")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "consumer 'spark'" in last and "0-1.000001" in last, last
    before = {p: p.stat().st_mtime_ns for p in relay_dir.rglob("mysql-bin.*")}
    for args, message in (
            (["--filename", "mysql-bin.000001", "--sub-dir", "0-9.000009"],
             "not in server-uuid.index"),
            (["--filename", "mysql-bin.000099", "--sub-dir", "0-2.000002"],
             "is not a relay file"),
            (["--filename", "mysql-bin.000099"], "comes after the file the relay is writing")):
        proc = run_binrelay("purge-relay", "--config", str(config), *args)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert {p: p.stat().st_mtime_ns for p in relay_dir.rglob("mysql-bin.*")} == before
    proc = run_binrelay("purge-relay", "--config", str(config), "--filename",
                        "mysql-bin.000002", "--sub-dir", "0-1.000001")
    assert proc.returncode == 0, proc.stderr
    got = _by_file(RelayReader(relay_dir, held))
    assert next(iter(got)) == ("0-1.000001", "mysql-bin.000002")
    assert all(data == (relay_dir / s / n).read_bytes() for (s, n), data in got.items())
    assert len(got) == sum(len(list_binlogs(relay_dir / str(x))) for x in index)
    reg.unregister(relay_dir, "spark")

    proc = run_binrelay("purge-relay", "--config", str(config), "--filename",
                        "mysql-bin.000001", "--sub-dir", "0-2.000002")
    assert proc.returncode == 0, proc.stderr
    assert "removed subdir(s) 0-1.000001" in proc.stdout
    assert [str(s) for s in read_index(relay_dir) or []] == ["0-2.000002", "0-1.000003"]
    assert list_binlogs(relay_dir / "0-2.000002") == ["mysql-bin.000001", "mysql-bin.000002"]

    copy_config = write_config(tmp_path / "copy.toml", a, copy)
    proc = run_binrelay("purge-relay", "--config", str(copy_config), "--filename",
                        "mysql-bin.000001")
    assert proc.returncode == 0, proc.stderr
    assert [str(s) for s in read_index(copy) or []] == ["0-1.000003"]

    # The relay carries on after both purges.
    _writes(a, 5)
    relay_once(tmp_path, a, relay_dir, "a3")
    relay_once(tmp_path, a, copy, "a4")


def test_reader_follows_a_live_relay_across_rotations_and_a_switch(mariadb_factory,
                                                                   tmp_path: Path) -> None:
    primary = mariadb_factory(server_id=1, max_binlog_size=64 * 1024)
    replica = mariadb_factory(server_id=2, max_binlog_size=64 * 1024,
                              extra_args=["--log-slave-updates=ON"])
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
        "MASTER_USER='repl', MASTER_PASSWORD='replpass', MASTER_USE_GTID=slave_pos")
    replica.execute("START SLAVE")
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "a.toml", primary, relay_dir, enable_gtid=True)
    sysbench_prepare(primary, tables=2, table_size=1000)
    relay = RelayProcess(config, tmp_path / "a.log")
    stop = threading.Event()
    seen: list = []
    errors: list = []

    def follow() -> None:
        try:
            seen.extend(RelayReader(relay_dir, follow=True, wait_timeout=0.5,
                                    should_stop=stop.is_set))
        except Exception as exc:
            errors.append(exc)

    deadline = time.monotonic() + 30
    while not (relay_dir / "server-uuid.index").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        with sysbench_run_background(primary, tables=2, table_size=1000, time=4) as work:
            work.wait(timeout=60)
        wait_caught_up(relay_dir, primary, process=relay)
    finally:
        assert relay.stop() == 0
    # Failover: the replica takes over and the relay follows it into a new subdir.
    deadline = time.monotonic() + 60
    while replica.scalar("SELECT @@gtid_slave_pos") != primary.scalar(
            "SELECT @@gtid_binlog_pos") and time.monotonic() < deadline:
        time.sleep(0.05)
    primary.stop()
    replica.execute("STOP SLAVE")
    config_b = write_config(tmp_path / "b.toml", replica, relay_dir, enable_gtid=True)
    relay = RelayProcess(config_b, tmp_path / "b.log")
    try:
        with sysbench_run_background(replica, tables=2, table_size=1000, time=3) as work:
            work.wait(timeout=60)
        wait_caught_up(relay_dir, replica, process=relay)
    finally:
        assert relay.stop() == 0
    time.sleep(1)
    stop.set()
    reader.join(timeout=30)
    assert not errors, errors
    got = _by_file(seen)
    subdirs = [str(s) for s in read_index(relay_dir) or []]
    assert subdirs == ["0-1.000001", "0-2.000002"]
    expected = {(s, n): (relay_dir / s / n).read_bytes()
                for s in subdirs for n in list_binlogs(relay_dir / s)}
    assert list(got) == list(expected)  # every file, in order
    assert got == expected  # every event once, in order, nothing past the end
    assert len(expected) > 6


def test_automatic_purge_keeps_what_a_consumer_needs(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=16 * 1024)
    relay_dir = tmp_path / "relay"
    with sysbench_run_background(server, tables=1, table_size=500, time=2) as work:
        work.wait(timeout=60)
    relay_once(tmp_path, server, relay_dir, "first")
    sub = current_subdir(relay_dir)
    files = list_binlogs(sub)
    assert len(files) > 6
    index = read_index(relay_dir)
    assert index is not None
    hold = Position(index[0], files[3], 4)
    reg.register(relay_dir, "spark", hold)
    # remain-space far above the disk's free space: every file that may go, goes.
    config = write_config(tmp_path / "purge.toml", server, relay_dir,
                          purge={"interval": 1, "remain-space": 10**6})
    relay = RelayProcess(config, tmp_path / "purge.log")
    try:
        deadline = time.monotonic() + 30
        while list_binlogs(sub)[0] != files[3] and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # another check passes: it must not go further
    finally:
        assert relay.stop() == 0
    assert list_binlogs(sub)[0] == files[3]
    got = _by_file(RelayReader(relay_dir, hold))
    assert all(data == (sub / name).read_bytes() for (_s, name), data in got.items())

    # By age: files untouched for longer than `expires` go, stopping at the first newer one.
    reg.unregister(relay_dir, "spark")
    old = time.time() - 5 * 3600
    for name in (files[3], files[4], files[6]):
        os.utime(sub / name, (old, old))
    config = write_config(tmp_path / "expires.toml", server, relay_dir,
                          purge={"interval": 1, "expires": 2, "remain-space": 0})
    relay = RelayProcess(config, tmp_path / "expires.log")
    try:
        deadline = time.monotonic() + 30
        while list_binlogs(sub)[0] != files[5] and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)
    finally:
        assert relay.stop() == 0
    assert list_binlogs(sub)[0] == files[5]  # files[5] is newer: files[6] stays too
    got = _by_file(RelayReader(relay_dir))
    assert next(iter(got)) == (str(hold.subdir), files[5])
    assert all(data == (sub / name).read_bytes() for (_s, name), data in got.items())


def test_kill_9_during_purge(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=4096)
    relay_dir = tmp_path / "relay"
    with sysbench_run_background(server, tables=1, table_size=200, time=3) as work:
        work.wait(timeout=60)
    config = relay_once(tmp_path, server, relay_dir, "first")
    sub = current_subdir(relay_dir)
    files = list_binlogs(sub)
    assert len(files) > 40
    rng = random.Random(5)
    for i in range(8):
        target = files[min(len(files) - 1, (i + 1) * len(files) // 9)]
        proc = subprocess.Popen(binrelay_cmd("purge-relay", "--config", str(config),
                                             "--filename", target),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.25, 0.6))  # interpreter start-up is about 0.3 s
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # Relay and reader accept what is left, and the relay carries on.
    with sysbench_run_background(server, tables=1, table_size=200, time=1) as work:
        work.wait(timeout=60)
    relay_once(tmp_path, server, relay_dir, "after")
    left = list_binlogs(sub)
    got = _by_file(RelayReader(relay_dir))
    assert [name for (_s, name) in got] == left
    assert all(data == (sub / name).read_bytes() for (_s, name), data in got.items())
    assert left[-1] == server.binlog_files()[-1][0]
