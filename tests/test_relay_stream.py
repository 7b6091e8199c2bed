"""The relay against real MariaDB servers under sysbench: byte-identical files, crash safety."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

from binrelay.config import load_config
from binrelay.relay.chain import check_handover
from binrelay.relay.layout import read_index, read_meta
from binrelay.relay.service import RelayService
from binrelay.testing.proxy import CutProxy
from binrelay.testing.sandbox import sysbench_prepare, sysbench_run_background
from binrelay.upstream.client import UpstreamSession
from relay_helpers import (
    RelayProcess,
    assert_identical,
    current_subdir,
    run_binrelay,
    wait_caught_up,
    write_config,
)

ROTATE_EVERY = 256 * 1024


def test_sysbench_with_rotations_is_byte_identical(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=ROTATE_EVERY)
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", server, relay_dir)
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        sysbench_prepare(server, tables=2, table_size=2000)
        with sysbench_run_background(server, tables=2, table_size=2000, time=6) as work:
            work.wait(timeout=60)
        server.execute("CREATE TABLE sbtest.t_ddl (id INT PRIMARY KEY, b LONGBLOB)")
        server.execute("INSERT INTO sbtest.t_ddl VALUES (1, REPEAT('x', 300000))")
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
    # The upstream logs column names (binlog_row_metadata = FULL): nothing to warn about.
    assert " level=warn " not in (tmp_path / "relay.log").read_text()
    files = server.binlog_files()
    assert len(files) >= 4, "the workload should have rotated the binlog several times"
    subdir = current_subdir(relay_dir)
    assert subdir.name == "0-1.000001"
    assert_identical(subdir, server)
    meta = read_meta(subdir)
    assert meta is not None
    assert (meta.binlog_name, meta.binlog_pos) == server.master_status()
    assert meta.binlog_gtid == server.scalar("SELECT @@gtid_binlog_pos")
    # Files 0600, dirs 0700.
    assert (subdir.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in subdir.iterdir())


def test_kill_9_at_random_moments(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=ROTATE_EVERY)
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", server, relay_dir)
    rng = random.Random(20261122)
    sysbench_prepare(server, tables=2, table_size=2000)
    kills = 0
    with sysbench_run_background(server, tables=2, table_size=2000, time=60):
        for _ in range(22):
            relay = RelayProcess(config, tmp_path / "relay.log")
            time.sleep(rng.uniform(0.15, 1.2))
            relay.kill()
            kills += 1
            # Whatever the moment, what meta says was relayed is on disk.
            if (relay_dir / "server-uuid.index").exists():
                subdir = current_subdir(relay_dir)
                meta = read_meta(subdir)
                if meta is not None and meta.binlog_pos > 4:
                    assert (subdir / meta.binlog_name).stat().st_size >= meta.binlog_pos
    assert kills >= 20
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
    assert read_index(relay_dir) is not None and len(read_index(relay_dir) or []) == 1
    assert_identical(current_subdir(relay_dir), server)


def test_upstream_restart_and_cut_connections(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=ROTATE_EVERY)
    proxy = CutProxy((server.host, server.port))
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", ("127.0.0.1", proxy.port), relay_dir)
    rng = random.Random(7)
    sysbench_prepare(server, tables=2, table_size=2000)
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        for _round in range(2):
            with sysbench_run_background(server, tables=2, table_size=2000, time=30):
                for _ in range(4):
                    time.sleep(rng.uniform(0.3, 0.8))
                    # Cut after an odd number of bytes: almost surely inside an event.
                    proxy.cut_after(rng.randrange(1, 200_000) | 1)
                time.sleep(0.5)
                server.kill()  # sysbench exits with the server; that is fine
            server.start()
        with sysbench_run_background(server, tables=2, table_size=2000, time=3) as work:
            work.wait(timeout=60)
        wait_caught_up(relay_dir, server, process=relay, timeout=180)
    finally:
        assert relay.stop() == 0
        proxy.close()
    assert len(proxy.cuts) >= 4
    assert_identical(current_subdir(relay_dir), server)


def test_an_upstream_binlog_left_torn_by_a_crash(mariadb_factory, tmp_path: Path) -> None:
    """A server killed while writing its binlog can leave the file's last event torn (CI saw
    it under load: error 1236 "binlog truncated in the middle of event" stopped the relay).
    Its transaction was rolled back at the restart; the relay keeps what was committed and
    goes on at the server's next file, as an operator moves a native replica there."""
    server = mariadb_factory(server_id=1)
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", server, relay_dir)
    server.execute("CREATE DATABASE d")
    server.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20))")
    server.execute("INSERT INTO d.t VALUES (1, 'before')")
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, server, process=relay)
        torn_file, torn_at = server.master_status()
        server.kill()
        # What a kill inside the write of the next event leaves: its header, a little of
        # its body (the header says 900 bytes).
        with open(server.binlog_path(torn_file), "ab") as f:
            f.write(bytes(4) + bytes([162]) + (1).to_bytes(4, "little")
                    + (900).to_bytes(4, "little") + (torn_at + 900).to_bytes(4, "little")
                    + bytes(2) + b"partial body")
        server.start()
        server.execute("INSERT INTO d.t VALUES (2, 'after the restart')")
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
    log = (tmp_path / "relay.log").read_text()
    assert f"the upstream's {torn_file} ends in a torn event at {torn_at}" in log, log[-3000:]
    subdir = current_subdir(relay_dir)
    assert (subdir / torn_file).stat().st_size == torn_at
    assert server.binlog_path(torn_file).stat().st_size > torn_at
    assert_identical(subdir, server)  # the torn tail is the one difference allowed
    # Readers cross from the torn file (no Rotate at its end) to the next only on the
    # proof the relay required: the next file was opened by the upstream's restart.
    successor = sorted(p.name for p in subdir.glob("mysql-bin.[0-9]*"))
    check_handover(subdir, torn_file, successor[successor.index(torn_file) + 1])


def test_a_torn_binlog_the_relay_cannot_explain_stops_it(mariadb_factory,
                                                         tmp_path: Path) -> None:
    """Torn bytes after a file's Rotate (damage, not a crash: a crash leaves no Rotate, and
    the next file was opened by a rotation): the relay stops with one line, the relay dir
    as it was."""
    server = mariadb_factory(server_id=1)
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", server, relay_dir)
    server.execute("CREATE DATABASE d")
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
    damaged, _pos = server.master_status()
    server.execute("FLUSH BINARY LOGS")
    with open(server.binlog_path(damaged), "ab") as f:
        f.write(bytes(4) + bytes([162]) + (1).to_bytes(4, "little") + (900).to_bytes(4, "little"))
    server.execute("CREATE TABLE d.t (id INT)")
    proc = run_binrelay("relay", "--config", str(config), timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("binrelay: error: [BR4001] upstream error 1236: binlog truncated")
    assert "could not confirm" in last and "torn event" not in proc.stderr
    # What tells a crash's next file from a rotation's: its FDE's creation time.
    service = RelayService(load_config(config))
    first, *_rest, rotated = [name for name, _size in server.binlog_files()]
    for name, at_start in ((first, True), (rotated, False)):
        with UpstreamSession(service.endpoint) as probe:  # a dump ends its session
            assert service._opened_at_start(probe, probe.server_info(), name) is at_start


def test_each_outage_backs_off_from_the_first_step(mariadb_factory, tmp_path: Path) -> None:
    """Separate outages, each after a healthy session, reconnect after 0.1 s each: the
    backoff grows within one outage, not over the relay's life (found by the soak)."""
    server = mariadb_factory(server_id=1)
    server.execute("CREATE DATABASE d")
    server.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
    proxy = CutProxy((server.host, server.port))
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", ("127.0.0.1", proxy.port), relay_dir)
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, server, process=relay)
        for i in range(5):
            time.sleep(1.5)  # a healthy session
            proxy.cut_after(1)
            server.execute(f"INSERT INTO d.t VALUES ({i})")
            deadline = time.monotonic() + 10
            while len(proxy.cuts) <= i and time.monotonic() < deadline:
                time.sleep(0.05)
            wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
        proxy.close()
    delays = re.findall(r"reconnecting in ([\d.]+) s", (tmp_path / "relay.log").read_text())
    assert len(delays) == 5 and set(delays) == {"0.1"}, delays
    assert_identical(current_subdir(relay_dir), server)


def test_checksum_none_upstream(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=3, binlog_checksum="NONE", max_binlog_size=ROTATE_EVERY)
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", server, relay_dir)
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        with sysbench_run_background(server, tables=2, table_size=1000, time=3) as work:
            work.wait(timeout=60)
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
    assert current_subdir(relay_dir).name == "0-3.000001"
    assert_identical(current_subdir(relay_dir), server)


def test_idle_upstream_keeps_the_session(mariadb, tmp_path: Path) -> None:
    """Heartbeats keep a quiet session alive past the read timeout: no reconnect."""
    from binrelay.upstream.client import READ_TIMEOUT

    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", mariadb, relay_dir, log_level="debug")
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        mariadb.execute("CREATE DATABASE d")
        wait_caught_up(relay_dir, mariadb, process=relay)
        time.sleep(READ_TIMEOUT + 2)
        mariadb.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
        wait_caught_up(relay_dir, mariadb, process=relay)
    finally:
        assert relay.stop() == 0
    log = (tmp_path / "relay.log").read_text()
    assert "reconnecting" not in log, log
    assert_identical(current_subdir(relay_dir), mariadb)
