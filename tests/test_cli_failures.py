"""A failed ``binrelay sync`` / ``binrelay recover`` prints one line, whatever failed where.

End to end: a real upstream and downstream, the relay, and the commands as subprocesses on
Spark ``local[2]``, so that errors raised in Spark tasks travel through the JVM as they do in
production.  The tracebacks (Python and Java) and Spark's own output go to the log file at
debug level, never to the terminal.
"""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from binrelay.cli.main import main
from binrelay.logfmt import setup_logging
from binrelay.testing.sandbox import MariaDBServer
from relay_helpers import relay_until_caught_up, run_binrelay, write_config

#: Spark's banner, warnings and tracebacks: none of it may reach stderr.
NOISE = ("Traceback", "py4j", "java", "Java", "WARN", "Using", "log4j", "NativeCodeLoader",
         "SparkException", "Setting default log level")
def checksum(server: MariaDBServer) -> int:
    return server.execute("CHECKSUM TABLE d.t")[0][1]


LOGFMT = re.compile(r"ts=\S+ level=(debug|info|warn|error) logger=binrelay[\w.]* msg=")


class Env:
    """An upstream, a downstream, a relay dir, and configs for both sides."""

    def __init__(self, tmp_path: Path, upstream: MariaDBServer,
                 downstream: MariaDBServer) -> None:
        self.tmp_path = tmp_path
        self.upstream = upstream
        self.downstream = downstream
        self.relay_dir = tmp_path / "relay"
        self.log_file = tmp_path / "sync.log"

    def config(self, name: str, **keys: Any) -> Path:
        # driver-apply off: these tests follow errors out of Spark's executors.
        keys.setdefault("sync", {"master": "local[2]", "tasks": 3, "batch-bytes": 4 << 20,
                                 "partition-bytes": 64 * 1024, "driver-apply": False})
        return write_config(
            self.tmp_path / f"{name}.toml", self.upstream, self.relay_dir,
            to={"host": self.downstream.host, "port": self.downstream.port, "user": "root",
                "password": ""}, **keys)

    def sync_config(self) -> Path:
        """Logs at debug level into ``log_file``: stderr holds only what the user sees."""
        return self.config("sync", log_level="debug", log_file=str(self.log_file))

    def relay(self) -> None:
        relay_until_caught_up(self.config("relay"), self.upstream, self.relay_dir,
                              self.tmp_path / "relay.log")


@pytest.fixture
def env(mariadb_factory, tmp_path: Path) -> Env:
    upstream = mariadb_factory(server_id=1, max_binlog_size=512 * 1024)
    downstream = mariadb_factory(server_id=2)
    return Env(tmp_path, upstream, downstream)


def the_error_line(stderr: str) -> str:
    """stderr is one ``binrelay: error:`` line, free of Spark's noise; returns it."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("binrelay: error: ["), lines[0]
    assert not [word for word in NOISE if word in stderr], stderr
    return lines[0]


def failing(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """``binrelay *args``, which must exit 1 with one error line; the process and the line."""
    proc = run_binrelay(*args, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    return proc, the_error_line(proc.stderr)


@pytest.mark.parametrize("driver_apply", [False, True], ids=["executor", "driver"])
def test_a_table_missing_downstream_is_one_line(env: Env, driver_apply: bool) -> None:
    """The same line whether a Spark executor or the driver (while Spark starts) met it."""
    up = env.upstream
    up.execute("CREATE DATABASE d")
    conn = up.connect()
    try:
        with conn.cursor() as cur:
            # Created without a binlog entry: the relay log writes rows into a table that
            # the sync never creates downstream.
            cur.execute("SET sql_log_bin = 0")
            cur.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20))")
            cur.execute("SET sql_log_bin = 1")
            # Over the 64 KiB of rows a run of DDL takes along: a batch of rows of its own.
            cur.execute("INSERT INTO d.t VALUES " + ", ".join(
                f"({i}, '{'x' * 20}')" for i in range(4000)))
    finally:
        conn.close()
    env.relay()

    config = env.config("sync", log_level="debug", log_file=str(env.log_file),
                        sync={"master": "local[2]", "tasks": 3, "driver-apply": driver_apply})
    proc, line = failing("sync", "--config", str(config), "--until-caught-up")
    assert line.startswith("binrelay: error: [BR5105] "), line
    assert re.search(r"\(table d\.t, position \S+\)", line), line
    assert proc.stdout == ""

    log = env.log_file.read_text()
    assert all(LOGFMT.match(rec) for rec in log.splitlines()), log[-3000:]
    # The traceback behind the line (and the JVM's output, when it ran) are in the log at
    # debug level.
    failed = [rec for rec in log.splitlines()
              if "level=debug" in rec and "Traceback (most recent call last)" in rec
              and "DownstreamSchemaError" in rec]
    assert failed, log[-3000:]
    if not driver_apply:
        assert "level=debug logger=binrelay.spark.jvm " in log
    else:
        assert "apply_with_checkpoint" in failed[0], failed[0][-2000:]


def test_a_row_larger_than_the_downstreams_packet_is_one_line(mariadb_factory,
                                                               tmp_path: Path) -> None:
    env = Env(tmp_path, mariadb_factory(server_id=1, extra_args=["--max-allowed-packet=64M"]),
              mariadb_factory(server_id=2, extra_args=["--max-allowed-packet=1M"]))
    env.upstream.execute("CREATE DATABASE d")
    env.upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v LONGTEXT)")
    env.upstream.execute("INSERT INTO d.t VALUES (1, REPEAT('x', 3000000))")
    env.relay()
    _proc, line = failing("sync", "--config", str(env.sync_config()), "--until-caught-up")
    assert line.startswith("binrelay: error: [BR5104] "), line
    assert "max_allowed_packet" in line and "table d.t" in line, line
    assert re.search(r"position \S+", line), line


def test_a_row_rejected_in_an_executor_then_recover_then_a_clean_sync(env: Env) -> None:
    up, down = env.upstream, env.downstream
    up.execute("CREATE DATABASE d")
    up.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v INT, pad VARCHAR(200))")
    # Enough transactions for several read partitions and apply tasks in one batch; one row
    # (in the middle) has no place in the downstream's partitions (a CHECK would not do: an
    # applier, as a replica, stores rows that break one).
    pad = "x" * 150
    for txn in range(60):
        rows = ", ".join(f"({txn * 40 + i}, {5000 if (txn, i) == (30, 7) else 20}, '{pad}')"
                         for i in range(40))
        up.execute(f"INSERT INTO d.t VALUES {rows}")
    down.execute("CREATE DATABASE d")
    down.execute("CREATE TABLE d.t (id INT, v INT, pad VARCHAR(200), PRIMARY KEY (id, v))"
                 " PARTITION BY RANGE (v) (PARTITION small VALUES LESS THAN (1000))")
    env.relay()
    config = env.sync_config()

    proc, line = failing("sync", "--config", str(config), "--until-caught-up")
    assert line.startswith("binrelay: error: [BR5104] "), line
    assert re.search(r"\(table d\.t, position \S+\)", line), line
    log = env.log_file.read_text()
    # Raised in a Spark task, rebuilt on the driver: the failed job is logged.
    assert "logger=binrelay.spark.failures msg=\"a Spark job failed\"" in log, log[-3000:]
    assert "DownstreamRowError" in log

    # The batch stays in flight; recover replays it and meets the same row.
    _proc, again = failing("recover", "--config", str(config))
    assert again.startswith("binrelay: error: [BR5104] ") and "table d.t" in again, again

    # Fixed downstream, a sync logging to stderr at info level: what it printed before
    # Spark's noise was kept out, the sync's own lines and nothing else.
    down.execute("ALTER TABLE d.t REMOVE PARTITIONING")
    down.execute("ALTER TABLE d.t DROP PRIMARY KEY, ADD PRIMARY KEY (id), MODIFY v INT NULL")
    proc = run_binrelay("sync", "--config", str(env.config("info", log_level="info")),
                        "--until-caught-up", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("applied "), proc.stdout
    lines = proc.stderr.splitlines()
    assert lines and all(LOGFMT.match(rec) for rec in lines), proc.stderr[-3000:]
    assert not [rec for rec in lines if " level=debug " in rec or " level=error " in rec]
    assert any('msg="batch applied"' in rec for rec in lines), proc.stderr[-3000:]
    assert not [word for word in NOISE if word in proc.stderr], proc.stderr
    assert checksum(down) == checksum(up)


def test_an_unexpected_exception_on_the_driver_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """A bug on the driver (here: in the pipeline's loop) prints one line naming the exception,
    and the log (debug, log-file) holds its traceback."""

    class Broken:
        def __init__(self, *_args: Any, **_kwargs: Any) -> None:
            pass

        def run(self, **_kwargs: Any) -> None:
            raise RuntimeError("the loop broke\non two lines")

        def close(self) -> None:
            pass

    fake = types.ModuleType("binrelay.spark.sync")
    fake.SyncPipeline = Broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "binrelay.spark.sync", fake)
    log_file = tmp_path / "sync.log"
    config = tmp_path / "c.toml"
    config.write_text(f'relay-dir = "{tmp_path / "relay"}"\nlog-level = "debug"\n'
                      f'log-file = "{log_file.name}"\n')
    try:
        result = CliRunner().invoke(main, ["sync", "--config", str(config),
                                           "--until-caught-up"])
    finally:
        setup_logging("info")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr == (
        "binrelay: error: [BR0001] internal error: RuntimeError: the loop broke; this is a "
        'bug: the traceback is in the log (log-level = "debug"); report it with that '
        "traceback\n")
    log = log_file.read_text()
    assert 'level=debug logger=binrelay.spark.failures msg="unexpected error"' in log
    assert "Traceback (most recent call last)" in log and "in run" in log


def test_an_unexpected_exception_in_the_relay_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """As for the sync: a bug in the relay's loop is one line, its traceback in the log."""
    from binrelay.relay.service import RelayService

    def broken(_self: Any) -> None:
        raise IndexError("index out of range\nsomewhere")

    monkeypatch.setattr(RelayService, "run", broken)
    log_file = tmp_path / "relay.log"
    config = tmp_path / "c.toml"
    config.write_text(f'relay-dir = "{tmp_path / "relay"}"\nlog-level = "debug"\n'
                      f'log-file = "{log_file.name}"\n'
                      '[from]\nhost = "127.0.0.1"\nport = 1\nuser = "root"\n')
    try:
        result = CliRunner().invoke(main, ["relay", "--config", str(config)])
    finally:
        setup_logging("info")
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(
        "binrelay: error: [BR0001] internal error: IndexError: index out of range; this is a"
        " bug"), result.stderr
    assert result.stderr.count("\n") == 1
    log = log_file.read_text()
    assert "Traceback (most recent call last)" in log and "in broken" in log


def test_a_bug_where_no_log_records_it_leaves_its_traceback_in_a_file(
        tmp_path: Path, monkeypatch) -> None:
    """``dump`` has no log: the line names a private file holding the traceback."""
    import binrelay.cli.dump as dump_module

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyError("a decoder bug")

    monkeypatch.setattr(dump_module, "decode_files", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    target = tmp_path / "mysql-bin.000001"
    target.write_bytes(b"\xfebin")
    result = CliRunner().invoke(main, ["dump", str(target)])
    assert result.exit_code == 1, result.output
    m = re.fullmatch(r"binrelay: error: \[BR0001\] internal error: KeyError: 'a decoder bug';"
                     r" this is a bug: its traceback is in (\S+); report it with that"
                     r" traceback\n", result.stderr)
    assert m, result.stderr
    saved = Path(m[1])
    assert saved.parent == tmp_path and saved.stat().st_mode & 0o777 == 0o600
    assert "Traceback (most recent call last)" in saved.read_text()
    assert "in broken" in saved.read_text()


def test_a_saved_traceback_holds_the_spark_jobs_and_masks_secrets(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """A task's bug reaches the driver as an InternalError raised from None over the job's
    exception: the file holds both; a password the log masks is masked there too."""
    from binrelay.cli.failing import _traceback_saved
    from binrelay.errors import InternalError

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    try:
        try:
            raise RuntimeError("job failed: connect(password='s3cr3t-pw') -> boom")
        except RuntimeError:
            raise InternalError("internal error: ValueError: boom") from None
    except InternalError as err:
        setup_logging("info", secrets=("s3cr3t-pw",))
        saved = _traceback_saved(err, err)
    text = saved.hint.split("its traceback is in ", 1)[1].split(";", 1)[0]
    content = Path(text).read_text()
    assert "The Spark job's exception:" in content and "job failed" in content
    assert "s3cr3t-pw" not in content and "***" in content
    assert str(saved).startswith("[BR0001] internal error: ValueError: boom; this is a bug:")


def test_a_log_file_that_cannot_be_opened_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'relay-dir = "{tmp_path / "relay"}"\n'
                      f'log-file = "{tmp_path / "missing" / "x.log"}"\n')
    try:
        result = CliRunner().invoke(main, ["consumers", "--config", str(config)])
    finally:
        setup_logging("info")
    assert result.exit_code == 2
    assert result.stderr.startswith("binrelay: error: [BR1001] config ")
    assert "log-file: cannot open" in result.stderr and result.stderr.count("\n") == 1
