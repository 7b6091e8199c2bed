"""Self-tests for the MariaDB server fixtures every integration test builds on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

import binrelay.testing.sandbox as mariadb_server
from binrelay.testing.sandbox import (
    REPL_PASSWORD,
    REPL_USER,
    MariaDBServer,
    ServerFactory,
    live_server_pids,
    run_sysbench,
    sysbench_run_background,
)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _process_alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _wait_dead(pid: int, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while _process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_two_servers_are_independent(mariadb_factory: ServerFactory) -> None:
    a = mariadb_factory(server_id=1)
    b = mariadb_factory(server_id=2)
    assert a.port != b.port
    assert a.datadir != b.datadir
    assert (a.scalar("SELECT @@server_id"), b.scalar("SELECT @@server_id")) == (1, 2)

    empty = a.binlog_files()
    for server, n in ((a, 3), (b, 5)):
        server.execute("CREATE DATABASE app")
        server.execute("CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))")
        server.execute("INSERT INTO app.t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(n)))
    assert a.scalar("SELECT COUNT(*) FROM app.t") == 3
    assert b.scalar("SELECT COUNT(*) FROM app.t") == 5

    files = a.binlog_files()
    assert [name for name, _ in files] == ["mysql-bin.000001"]
    name, size = files[0]
    # The writes must be in the binlog, and SHOW BINARY LOGS must agree with the disk.
    assert size > empty[0][1]
    assert a.binlog_path(name).stat().st_size == size
    assert a.master_status() == (name, size)


def test_binlog_settings(mariadb_factory: ServerFactory) -> None:
    server = mariadb_factory(server_id=7, gtid_domain_id=3, binlog_checksum="NONE")
    row = server.query_one(
        "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata,"
        " @@binlog_checksum, @@gtid_domain_id, @@server_id, @@log_bin_basename"
    )
    assert row == (
        1,
        "ROW",
        "FULL",
        "FULL",
        "NONE",
        3,
        7,
        str(server.datadir / "mysql-bin"),
    )
    server.execute("CREATE DATABASE d")
    assert str(server.scalar("SELECT @@gtid_binlog_pos")).startswith("3-7-")


def test_default_server_and_unix_socket(mariadb: MariaDBServer) -> None:
    assert mariadb.scalar("SELECT @@binlog_format") == "ROW"
    assert mariadb.scalar("SELECT @@binlog_row_metadata") == "FULL"
    assert mariadb.scalar("SELECT @@binlog_checksum") == "CRC32"
    assert mariadb.scalar("SELECT @@max_binlog_size") == 1024 * 1024 * 1024
    assert len(str(mariadb.socket)) <= 107
    conn = pymysql.connect(unix_socket=str(mariadb.socket), user="root", password="")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone() == ("root@localhost",)
    finally:
        conn.close()


def test_repl_user(mariadb: MariaDBServer) -> None:
    conn = mariadb.connect(user=REPL_USER, password=REPL_PASSWORD)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            assert cur.fetchall()
            cur.execute("SHOW BINLOG EVENTS LIMIT 2")
            assert len(cur.fetchall()) == 2
            cur.execute("SELECT COUNT(*) FROM mysql.db")
            cur.execute("FLUSH BINARY LOGS")  # RELOAD
            with pytest.raises(pymysql.err.OperationalError) as denied:
                cur.execute("CREATE DATABASE nope")
            assert denied.value.args[0] == 1044
    finally:
        conn.close()

    with pytest.raises(pymysql.err.OperationalError) as refused:
        mariadb.connect(user=REPL_USER, password="wrong")
    assert refused.value.args[0] == 1045


def test_small_max_binlog_size_rotates(mariadb_factory: ServerFactory) -> None:
    server = mariadb_factory(server_id=1, max_binlog_size=4096)
    assert server.scalar("SELECT @@max_binlog_size") == 4096
    result = run_sysbench(server, tables=1, table_size=100, threads=1, events=50)
    assert "total number of events:              50" in result.stdout

    files = server.binlog_files()
    assert len(files) > 5
    assert [name for name, _ in files] == [f"mysql-bin.{i:06d}" for i in range(1, len(files) + 1)]
    # Rotation happens only after the transaction that crosses the limit (the
    # prepare's bulk INSERT makes one file much larger), never before it.
    for name, size in files[:-1]:
        assert size >= 4096
        assert server.binlog_path(name).stat().st_size == size

    # A second call reuses the prepared tables and just adds traffic.
    run_sysbench(server, tables=1, table_size=100, threads=1, events=10)
    assert len(server.binlog_files()) > len(files)


def test_binlog_is_readable_by_mariadb_binlog(mariadb: MariaDBServer) -> None:
    mariadb.execute("CREATE DATABASE app")
    mariadb.execute("CREATE TABLE app.colours (id INT PRIMARY KEY, name VARCHAR(10))")
    mariadb.execute("INSERT INTO app.colours VALUES (1, 'teal')")
    name, _ = mariadb.master_status()
    out = subprocess.run(
        ["mariadb-binlog", "--base64-output=decode-rows", "-vv", str(mariadb.binlog_path(name))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Write_rows" in out
    # Column names in the decoded rows are only present with binlog_row_metadata=FULL.
    assert "@2='teal'" in out


def test_restart_keeps_data_and_adds_binlog(mariadb: MariaDBServer) -> None:
    mariadb.execute("CREATE DATABASE app")
    mariadb.execute("CREATE TABLE app.t (id INT PRIMARY KEY)")
    mariadb.execute("INSERT INTO app.t VALUES (1), (2)")
    port, pid, before = mariadb.port, mariadb.pid, mariadb.binlog_files()

    mariadb.restart()

    assert mariadb.is_running
    assert mariadb.port == port
    assert mariadb.pid != pid
    assert pid is not None and not _process_exists(pid)
    assert mariadb.scalar("SELECT COUNT(*) FROM app.t") == 2
    after = mariadb.binlog_files()
    assert len(after) == len(before) + 1
    # The old file only grew by the Stop/Rotate event written on the way down.
    assert [name for name, _ in after[: len(before)]] == [name for name, _ in before]
    assert after[len(before) - 1][1] > before[-1][1]

    mariadb.flush_logs()
    assert len(mariadb.binlog_files()) == len(after) + 1


def test_stop_is_idempotent_and_kill_leaves_no_process(mariadb: MariaDBServer) -> None:
    mariadb.execute("CREATE DATABASE app")
    mariadb.execute("CREATE TABLE app.t (id INT PRIMARY KEY)")
    mariadb.execute("INSERT INTO app.t VALUES (1)")
    pid = mariadb.pid
    assert pid is not None and pid in live_server_pids()

    mariadb.kill()
    assert not mariadb.is_running
    assert mariadb.pid is None
    assert not _process_exists(pid)
    assert pid not in live_server_pids()
    mariadb.kill()
    mariadb.stop()

    # Crash recovery on the same datadir; the committed row survives SIGKILL.
    mariadb.start()
    assert mariadb.scalar("SELECT COUNT(*) FROM app.t") == 1
    mariadb.stop()
    mariadb.stop()
    assert not mariadb.is_running


def test_background_workload_ends_when_server_is_killed(mariadb: MariaDBServer) -> None:
    with sysbench_run_background(mariadb, tables=1, table_size=100, threads=2) as workload:
        start = mariadb.master_status()
        deadline = time.monotonic() + 20
        while mariadb.master_status() == start:
            assert workload.is_running, workload.output()
            assert time.monotonic() < deadline, "workload produced no binlog events"
            time.sleep(0.05)
        mariadb.kill()
        rc = workload.wait(timeout=20)
    assert rc != 0
    assert "Lost connection" in workload.output() or "2013" in workload.output()


def test_factory_close_stops_everything(mariadb_template: Path, tmp_path: Path) -> None:
    factory = ServerFactory(tmp_path / "f", template=mariadb_template)
    server = factory(server_id=9)
    workload = sysbench_run_background(server, tables=1, table_size=10, threads=1)
    pid = server.pid
    assert pid is not None
    factory.close()
    assert not _process_exists(pid)
    assert not workload.is_running
    assert not server.base_dir.exists()
    assert pid not in live_server_pids()


@pytest.mark.parametrize("size", [0, 1024, 5000, 2 * 1024 * 1024 * 1024])
def test_rejects_max_binlog_size_the_server_would_adjust(tmp_path: Path, size: int) -> None:
    with pytest.raises(ValueError, match="max_binlog_size"):
        MariaDBServer(tmp_path, max_binlog_size=size)


def test_port_clash_is_retried(
    mariadb_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = mariadb_factory(server_id=1)
    real = mariadb_server.find_free_port
    offered: list[int] = []

    def clashing() -> int:
        # First hand out a port another *MariaDB* listens on: the readiness probe
        # then reaches the wrong server before the new one fails to bind.
        port = taken.port if not offered else real()
        offered.append(port)
        return port

    monkeypatch.setattr(mariadb_server, "find_free_port", clashing)
    server = mariadb_factory(server_id=2)
    assert offered[0] == taken.port
    assert server.port == offered[-1] != taken.port
    assert server.scalar("SELECT @@server_id") == 2
    assert taken.scalar("SELECT @@server_id") == 1


_ORPHAN_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[1])
    import binrelay.testing.sandbox as mariadb_server
    server = mariadb_server.MariaDBServer(sys.argv[3], template=sys.argv[2])
    server.start()
    print(server.pid, flush=True)
    if sys.argv[4] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.fixture
def orphan_runner(mariadb_template: Path, tmp_path: Path) -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    for pid in pids:  # if the safety net failed, do not let the leak outlive the test
        if _process_alive(pid):
            os.kill(pid, 9)


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_forgotten_server_does_not_outlive_its_creator(
    orphan_runner: list[int], mariadb_template: Path, tmp_path: Path, how: str
) -> None:
    # "exit" is covered by the atexit hook, "sigkill" by the parent-death signal.
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _ORPHAN_SCRIPT,
            str(Path(__file__).parent),
            str(mariadb_template),
            str(tmp_path / "orphan"),
            how,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    pid = int(proc.stdout.split()[0])
    orphan_runner.append(pid)
    assert _wait_dead(pid), f"mariadbd {pid} survived its creator ({how}): {proc.stderr}"
