"""A full relay dir while streaming, on a real small file system (a tmpfs mounted here):
the relay stops at a transaction boundary, says so once (log, ``status``, metrics), keeps
its files valid, and resumes by itself when space is freed, by hand or by automatic purge."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from binrelay.relay.layout import list_binlogs, read_meta
from binrelay.relay.scan import scan_file
from binrelay.relay.space import RESERVE_FILENAME
from binrelay.relay.verify import IN_USE_FLAG_OFFSET, mariadb_binlog_check
from binrelay.testing.sandbox import MariaDBServer
from relay_helpers import (
    RelayProcess,
    assert_identical,
    current_subdir,
    run_binrelay,
    wait_caught_up,
    write_config,
)
from test_metrics import metrics_addr, scrape

ROW = 100_000  # bytes of blob per transaction
FULL_LINE = 'msg="relay dir full; waiting for space"'
RESUMED_LINE = 'msg="space freed; resuming"'


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``small_fs("16m")`` mounts a tmpfs of that size and returns its directory; every
    mount is undone at teardown.  Mounting needs root: without it the test fails (no skips)."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        path = tmp_path / f"fs{len(mounted)}"
        path.mkdir(mode=0o700)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                               str(path)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            pytest.fail(f"cannot mount a {size} tmpfs at {path} for the relay dir (this test "
                        f"needs root): {proc.stderr.strip() or proc.returncode}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path, *, leave: int = 0) -> int:
    """Write ``path`` until the file system is full, then give back ``leave`` bytes;
    returns its size."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (1 << 20, 1 << 12):
            block = b"\0" * chunk
            while True:
                try:
                    written += os.write(fd, block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    if leave:
        written -= leave
        os.truncate(path, written)
    return written


def insert_blobs(server: MariaDBServer, count: int, start: int) -> None:
    """``count`` transactions of one ~100 KB row each (one row event: the relay writes it in
    one piece, so a full disk is met inside a transaction)."""
    for i in range(start, start + count):
        server.execute("INSERT INTO d.t VALUES (%s, REPEAT(%s, %s))", (i, chr(97 + i % 26), ROW))


def wait_for(what: str, check: Callable[[], bool], relay: RelayProcess,
             timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert relay.running, f"the relay exited ({relay.proc.returncode}) waiting for {what}"
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"no {what} in {timeout} s")


def status_json(config: Path) -> dict:
    proc = run_binrelay("status", "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_valid_prefixes(subdir: Path, server: MariaDBServer) -> None:
    """Every relay file is the start of the upstream's file and the last one ends where
    relay.meta says, at a transaction boundary, and mariadb-binlog reads every one."""
    names = list_binlogs(subdir)
    assert names, f"no relay files in {subdir}"
    for name in names:
        got = (subdir / name).read_bytes()
        want = bytearray(server.binlog_path(name).read_bytes()[:len(got)])
        want[IN_USE_FLAG_OFFSET] = got[IN_USE_FLAG_OFFSET]  # the one allowed difference
        assert got == bytes(want), f"{name} is not a prefix of the upstream's file"
        assert mariadb_binlog_check(subdir / name) is None, mariadb_binlog_check(subdir / name)
    meta = read_meta(subdir)
    assert meta is not None and meta.binlog_name in (names[-1], _next(names[-1])), meta
    if meta.binlog_name == names[-1]:
        last = subdir / names[-1]
        scan = scan_file(last, flavor="mariadb")
        assert (scan.stop_reason, scan.safe_pos) == ("", last.stat().st_size), scan
        assert meta.binlog_pos == last.stat().st_size, (meta, last.stat().st_size)


def _next(name: str) -> str:
    base, num = name.rsplit(".", 1)
    return f"{base}.{int(num) + 1:0{len(num)}d}"


def start_relay(tmp_path: Path, server: MariaDBServer, relay_dir: Path,
                **keys: object) -> tuple[Path, RelayProcess]:
    config = write_config(tmp_path / "relay.toml", server, relay_dir,
                          metrics={"relay-addr": "127.0.0.1:0"}, **keys)
    return config, RelayProcess(config, tmp_path / "relay.log")


def test_disk_full_waits_at_a_boundary_and_resumes_when_space_is_freed(
        mariadb_factory, small_fs, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=512 * 1024)
    fs = small_fs("16m")
    relay_dir = fs / "relay"
    log_path = tmp_path / "relay.log"
    # interval 0: no automatic purge, so only the operator can free space here.
    config, relay = start_relay(tmp_path, server, relay_dir, purge={"interval": 0})
    try:
        server.execute("CREATE DATABASE d")
        server.execute("CREATE TABLE d.t (id INT PRIMARY KEY, b LONGBLOB)")
        insert_blobs(server, 20, 0)
        wait_caught_up(relay_dir, server, process=relay)
        assert (relay_dir / RESERVE_FILENAME).exists()
        filler = fs / "filler"
        fill(filler)

        insert_blobs(server, 30, 100)
        wait_for("disk-full log line", lambda: FULL_LINE in log_path.read_text(), relay)
        wait_for("disk-full state in status", lambda: status_json(config)["relay"]["process"]
                 ["state"] == "disk-full", relay)
        proc = status_json(config)["relay"]["process"]
        assert proc["alive"] and proc["disk_full_since"], proc
        assert "[BR3004]" in proc["last_error"] and "is full" in proc["last_error"], proc
        text = run_binrelay("status", "--config", str(config)).stdout
        assert "Relay_State: disk-full" in text and "Relay_Disk_Full_Since: 20" in text, text
        figures = scrape(metrics_addr(relay_dir))
        assert figures["binrelay_relay_disk_full_total"] == 1, figures

        # While it waits: more traffic upstream, still one log line; files valid.
        insert_blobs(server, 5, 200)
        time.sleep(3)
        assert relay.running
        assert log_path.read_text().count(FULL_LINE) == 1, log_path.read_text()
        subdir = current_subdir(relay_dir)
        assert_valid_prefixes(subdir, server)
        assert (read_meta(subdir).binlog_name, read_meta(subdir).binlog_pos) \
            != server.master_status(), "the relay should be behind while the disk is full"

        filler.unlink()
        wait_for("resume log line", lambda: RESUMED_LINE in log_path.read_text(), relay)
        insert_blobs(server, 5, 300)
        wait_caught_up(relay_dir, server, process=relay)
        assert status_json(config)["relay"]["process"]["state"] == "relaying"
        assert status_json(config)["relay"]["process"]["disk_full_since"] is None
        assert scrape(metrics_addr(relay_dir))["binrelay_relay_disk_full_total"] == 1
    finally:
        assert relay.stop() == 0
    log = log_path.read_text()
    assert "Traceback" not in log and "level=error" not in log, log
    assert log.count(FULL_LINE) == 1 and log.count(RESUMED_LINE) == 1, log
    assert not (relay_dir / RESERVE_FILENAME).exists(), "the reserve outlived the relay"
    assert_identical(current_subdir(relay_dir), server)


def test_automatic_purge_frees_the_space_by_itself(mariadb_factory, small_fs,
                                                   tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=1024 * 1024)
    fs = small_fs("24m")
    relay_dir = fs / "relay"
    log_path = tmp_path / "relay.log"
    # remain-space 1 GB is never met on 24 MiB, but a check runs only every hour: the
    # purge that frees space here is the one the full disk asks for.
    _config, relay = start_relay(tmp_path, server, relay_dir,
                                 purge={"interval": 3600, "remain-space": 1})
    try:
        server.execute("CREATE DATABASE d")
        server.execute("CREATE TABLE d.t (id INT PRIMARY KEY, b LONGBLOB)")
        insert_blobs(server, 80, 0)  # ~8 MiB: 8 relay files
        wait_caught_up(relay_dir, server, process=relay)
        subdir = current_subdir(relay_dir)
        before = list_binlogs(subdir)
        assert len(before) >= 6, before
        fill(fs / "filler")

        insert_blobs(server, 30, 100)
        wait_for("disk-full log line", lambda: FULL_LINE in log_path.read_text(), relay)
        wait_for("resume log line", lambda: RESUMED_LINE in log_path.read_text(), relay)
        wait_caught_up(relay_dir, server, process=relay)
        figures = scrape(metrics_addr(relay_dir))
        assert figures["binrelay_relay_disk_full_total"] == 1, figures
        assert figures["binrelay_purge_runs_total"] >= 1, figures
        assert figures["binrelay_purge_freed_bytes_total"] > 4 << 20, figures
    finally:
        assert relay.stop() == 0
    log = log_path.read_text()
    assert "Traceback" not in log and "level=error" not in log, log
    assert "automatic purge removed" in log, log
    assert (fs / "filler").exists()
    after = list_binlogs(subdir)
    assert before[0] not in after, "purge should have removed the oldest files"
    assert after[-1] == server.master_status()[0]
    # What is left is byte-identical, from the first file kept to the upstream's last.
    names = [name for name, _size in server.binlog_files()]
    assert after == names[names.index(after[0]):], (after, names)
    assert_identical(subdir, server, files=after)


def test_full_at_start_up_waits_too(mariadb, small_fs, tmp_path: Path) -> None:
    """A relay started on a full file system waits (status says so) instead of exiting."""
    fs = small_fs("8m")
    relay_dir = fs / "relay"
    log_path = tmp_path / "relay.log"
    mariadb.execute("CREATE DATABASE d")
    # Nearly full (a completely full one leaves no room even for relay.status).
    fill(fs / "filler", leave=256 << 10)
    config, relay = start_relay(tmp_path, mariadb, relay_dir, purge={"interval": 0})
    try:
        wait_for("disk-full log line", lambda: FULL_LINE in log_path.read_text(), relay)
        wait_for("disk-full state in status", lambda: status_json(config)["relay"]["process"]
                 ["state"] == "disk-full", relay)
        time.sleep(2)
        assert relay.running
        (fs / "filler").unlink()
        wait_caught_up(relay_dir, mariadb, process=relay)
    finally:
        assert relay.stop() == 0
    log = log_path.read_text()
    assert "Traceback" not in log and log.count(FULL_LINE) == 1, log
    assert_identical(current_subdir(relay_dir), mariadb)



def test_a_transaction_larger_than_the_free_space_is_one_outage(mariadb_factory, small_fs,
                                                                tmp_path: Path) -> None:
    """Space freed, but not enough for the transaction being fetched: the relay fills up
    again before relay.meta moves on, which is the same outage (no second warning, counted
    once); it then waits for more space than before, and goes on when there is enough."""
    server = mariadb_factory(server_id=1)
    fs = small_fs("32m")
    relay_dir = fs / "relay"
    log_path = tmp_path / "relay.log"
    config, relay = start_relay(tmp_path, server, relay_dir, purge={"interval": 0})
    again = 'msg="relay dir full again before relay.meta moved on'
    try:
        server.execute("CREATE DATABASE d")
        server.execute("CREATE TABLE d.t (id INT PRIMARY KEY, b LONGBLOB)")
        wait_caught_up(relay_dir, server, process=relay)
        filler = fs / "filler"
        size = fill(filler, leave=6 << 20)
        # One transaction of ~15 MB, on a file system with 6 MiB free.
        server.execute("INSERT INTO d.t VALUES " + ", ".join(
            f"({i}, REPEAT('x', 3000000))" for i in range(5)))
        wait_for("disk-full log line", lambda: FULL_LINE in log_path.read_text(), relay)
        time.sleep(3)
        # Freeing less than the transaction needs: it is tried again and fills up again.
        os.truncate(filler, size - (5 << 20))
        wait_for("a second fill-up", lambda: again in log_path.read_text(), relay)
        wait_for("disk-full state in status", lambda: status_json(config)["relay"]["process"]
                 ["state"] == "disk-full", relay)
        time.sleep(3)
        log = log_path.read_text()
        assert log.count(FULL_LINE) == 1 and log.count(again) == 1, log
        assert log.count(RESUMED_LINE) == 1, log
        assert scrape(metrics_addr(relay_dir))["binrelay_relay_disk_full_total"] == 1
        assert_valid_prefixes(current_subdir(relay_dir), server)
        filler.unlink()
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
    log = log_path.read_text()
    assert "Traceback" not in log and log.count(FULL_LINE) == 1, log
    assert log.count(RESUMED_LINE) == 2, log
    assert_identical(current_subdir(relay_dir), server)
