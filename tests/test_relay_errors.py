"""Bad input: one clear line, a non-zero exit, no file damaged."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest

from binlog_builder import BinlogBuilder
from binrelay.errors import (
    UpstreamAuthError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamTornBinlogError,
)
from binrelay.relay.layout import list_binlogs, read_meta
from binrelay.relay.verify import compare_file
from binrelay.testing.procs import find_free_port
from binrelay.upstream.client import Endpoint, _translate
from binrelay.upstream.packets import error_from_packet
from relay_helpers import (
    RelayProcess,
    assert_identical,
    current_subdir,
    run_binrelay,
    tree_digest,
    wait_caught_up,
    write_config,
)


def _fails_with(config: Path, *needles: str, code: int | None = None) -> str:
    proc = run_binrelay("relay", "--config", str(config))
    assert proc.returncode != 0, proc.stderr
    if code is not None:
        assert proc.returncode == code
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("binrelay: error:"), proc.stderr
    for needle in needles:
        assert needle in last, last
    return last


def test_wrong_password(mariadb, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", mariadb, tmp_path / "relay",
                          from_={"user": "repl", "password": "not-the-password"})
    line = _fails_with(config, "refused user 'repl'", "password")
    assert "not-the-password" not in line
    assert not list((tmp_path / "relay").glob("*/mysql-bin.*"))


def test_unreachable_host(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", ("127.0.0.1", find_free_port()), tmp_path / "relay")
    _fails_with(config, "cannot reach upstream", "[from] host and port")


def test_binlog_format_not_row(mariadb_factory, tmp_path: Path) -> None:
    server = mariadb_factory(server_id=1, binlog_format="STATEMENT")
    config = write_config(tmp_path / "c.toml", server, tmp_path / "relay")
    _fails_with(config, "binlog_format=STATEMENT", "ROW")


def test_malformed_gtid(mariadb, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", mariadb, tmp_path / "relay", enable_gtid=True,
                          relay_binlog_gtid="0-1-x")
    _fails_with(config, "relay-binlog-gtid", code=2)


def test_unknown_relay_binlog_name(mariadb, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", mariadb, tmp_path / "relay",
                          relay_binlog_name="mysql-bin.000099")
    _fails_with(config, "mysql-bin.000099", "not on the upstream")


def test_unwritable_relay_dir(mariadb, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = write_config(tmp_path / "c.toml", mariadb, blocker / "relay")
    _fails_with(config, "cannot create relay directory", str(blocker / "relay"))
    assert blocker.read_text() == "not a directory"


def _relayed(tmp_path: Path, server) -> tuple[Path, Path]:
    server.execute("CREATE DATABASE d")
    server.execute("CREATE TABLE d.t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(200))")
    for _ in range(200):
        server.execute("INSERT INTO d.t (v) VALUES (REPEAT('v', 150))")
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "c.toml", server, relay_dir)
    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0
    return config, relay_dir


def test_corrupted_last_relay_file(mariadb, tmp_path: Path) -> None:
    config, relay_dir = _relayed(tmp_path, mariadb)
    subdir = current_subdir(relay_dir)
    path = subdir / list_binlogs(subdir)[-1]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    before = tree_digest(relay_dir)
    _fails_with(config, "corrupt at offset", str(path))
    assert tree_digest(relay_dir) == before


def test_truncated_last_relay_file_is_fetched_again(mariadb, tmp_path: Path) -> None:
    config, relay_dir = _relayed(tmp_path, mariadb)
    subdir = current_subdir(relay_dir)
    path = subdir / list_binlogs(subdir)[-1]
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2 + 3)
    relay = RelayProcess(config, tmp_path / "relay2.log")
    try:
        wait_caught_up(relay_dir, mariadb, process=relay)
    finally:
        assert relay.stop() == 0
    assert_identical(subdir, mariadb)
    assert "rewinding" in (tmp_path / "relay2.log").read_text()
    meta = read_meta(subdir)
    assert meta is not None and (meta.binlog_name, meta.binlog_pos) == mariadb.master_status()


def test_disk_full_fails_cleanly_and_loses_nothing(mariadb, tmp_path: Path) -> None:
    """A file-size limit makes writes fail like a full disk (EFBIG instead of ENOSPC)."""
    import resource
    import signal
    import subprocess

    from relay_helpers import binrelay_cmd

    mariadb.execute("CREATE DATABASE d")
    mariadb.execute("CREATE TABLE d.t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(200))")
    for _ in range(2000):
        mariadb.execute("INSERT INTO d.t (v) VALUES (REPEAT('v', 150))")
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "c.toml", mariadb, relay_dir)

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    proc = subprocess.run(binrelay_cmd("relay", "--config", str(config)), preexec_fn=limit,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "cannot write relay file" in last and "loses nothing" in last, last
    subdir = current_subdir(relay_dir)
    meta = read_meta(subdir)
    assert meta is not None and meta.binlog_pos <= 200_000

    relay = RelayProcess(config, tmp_path / "relay.log")
    try:
        wait_caught_up(relay_dir, mariadb, process=relay)
    finally:
        assert relay.stop() == 0
    assert_identical(subdir, mariadb)


@pytest.mark.parametrize(("exc", "kind"), [
    # Lost bytes or a closed socket, as PyMySQL reports them: reconnect.
    (pymysql.err.InternalError("Packet sequence number wrong - got 3 expected 1"),
     UpstreamConnectionError),
    (pymysql.err.InterfaceError(0, ""), UpstreamConnectionError),
    (pymysql.err.OperationalError(2013, "Lost connection to server during query"),
     UpstreamConnectionError),
    (pymysql.err.OperationalError(1159, "Got timeout reading communication packets"),
     UpstreamConnectionError),
    (pymysql.err.OperationalError(1927, "Connection was killed"), UpstreamConnectionError),
    # The server's answer to the request: retrying would get the same.
    (pymysql.err.OperationalError(1045, "Access denied"), UpstreamAuthError),
    (pymysql.err.OperationalError(1236, "binlog truncated in the middle of event"),
     UpstreamError),
    (pymysql.err.InternalError(1105, "Unknown error"), UpstreamError),
    (pymysql.err.OperationalError(1184, "Aborted connection 5 to db: 'unconnected' user:"
                                        " 'repl' (init_connect command failed)"), UpstreamError),
    (pymysql.err.OperationalError("not a code", "text"), UpstreamError),
])
def test_which_upstream_errors_are_a_lost_connection(exc: Exception, kind: type) -> None:
    err = _translate(exc, Endpoint("127.0.0.1", 3306, "repl", "secret"))
    assert type(err) is kind
    assert "secret" not in str(err)


def test_a_torn_binlog_error_names_the_file_and_the_torn_event() -> None:
    message = (b"#HY000binlog truncated in the middle of event; consider out of disk space on"
               b" master; the first event 'mysql-bin.000021' at 53692, the last event read"
               b" from './mysql-bin.000038' at 176084, the last byte read from"
               b" './mysql-bin.000038' at 176103.")
    err = error_from_packet(b"\xff" + (1236).to_bytes(2, "little") + message)
    assert isinstance(err, UpstreamTornBinlogError)
    assert (err.file, err.pos) == ("mysql-bin.000038", 176084)
    other = error_from_packet(b"\xff" + (1236).to_bytes(2, "little")
                              + b"#HY000bogus data in log event; the first event ...")
    assert type(other) is UpstreamError


@pytest.mark.parametrize(("tail", "allowed"), [
    ("uncommitted", True),  # whole events of a transaction without its XID, then torn
    ("torn only", True),
    ("committed", False),  # a whole transaction the relay does not have
    ("ddl", False),
])
def test_what_a_relay_copy_may_lack_of_a_crashed_upstream_file(tmp_path: Path, tail: str,
                                                               allowed: bool) -> None:
    b = BinlogBuilder()
    b.trx([1])
    relayed = b.bytes()
    if tail in ("uncommitted", "committed"):
        b.trx([2])
    elif tail == "ddl":
        b.ddl()
    upstream = b.bytes()
    if tail == "uncommitted":
        upstream = upstream[:b.events[-1].pos]  # without its XID
    upstream += bytes(4) + bytes([162]) + (1).to_bytes(4, "little") + (900).to_bytes(4, "little")
    (tmp_path / "up").mkdir()
    (tmp_path / "relay").mkdir()
    (tmp_path / "up" / "mysql-bin.000001").write_bytes(upstream)
    (tmp_path / "relay" / "mysql-bin.000001").write_bytes(relayed)
    problem = compare_file(tmp_path / "relay" / "mysql-bin.000001",
                           tmp_path / "up" / "mysql-bin.000001")
    assert (problem is None) is allowed, problem
    # A relay copy that differs inside what it holds, or ends inside an event, never is.
    for wrong in (relayed[:-1] + b"x", relayed[:-3], relayed[:-30]):
        (tmp_path / "relay" / "mysql-bin.000001").write_bytes(wrong)
        assert compare_file(tmp_path / "relay" / "mysql-bin.000001",
                            tmp_path / "up" / "mysql-bin.000001") is not None
