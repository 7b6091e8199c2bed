"""``binrelay demo``: the relay on local sandbox servers, end to end, with a short report.

Starts a private MariaDB upstream (127.0.0.1, a free port, a throwaway datadir), runs a
sysbench workload with DDL mixed in while ``binrelay relay`` mirrors the binlog, kills the
relay with SIGKILL mid-stream and restarts it, then checks every relay file against the
upstream's byte for byte and with ``mariadb-binlog``.  Everything is removed at the end
unless ``keep`` is set.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tomli_w

from binrelay.errors import BinrelayError
from binrelay.relay.layout import list_binlogs, read_index, read_meta
from binrelay.relay.verify import compare_subdir
from binrelay.sandbox import (
    MariaDBServer,
    default_template,
    sysbench_prepare,
    sysbench_run_background,
)

DEMO_BINLOG_SIZE = 1 << 20


class DemoFailed(BinrelayError):
    code = "BR9001"


def _relay_process(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "binrelay.cli.main", "relay", "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT)


def _wait_caught_up(relay_dir: Path, server: MariaDBServer, relay: subprocess.Popen[bytes],
                    timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    steady_since = None
    while time.monotonic() < deadline:
        if relay.poll() is not None:
            raise DemoFailed(f"the relay exited with status {relay.returncode}")
        index = read_index(relay_dir) or []
        meta = read_meta(relay_dir / str(index[-1])) if index else None
        if meta is not None and (meta.binlog_name, meta.binlog_pos) == server.master_status():
            steady_since = steady_since or time.monotonic()
            # MariaDB appends a Binlog_checkpoint event on its own shortly after a rotation.
            if time.monotonic() - steady_since > 1.5:
                return
        else:
            steady_since = None
        time.sleep(0.05)
    raise DemoFailed(f"the relay did not catch up with the upstream within {timeout:.0f} s")


def run_demo(*, seconds: float = 8.0, keep: bool = False,
             echo: Callable[[str], None] = print) -> None:
    base = Path(tempfile.mkdtemp(prefix="binrelay-demo-"))
    server = MariaDBServer(base / "upstream", server_id=1, max_binlog_size=DEMO_BINLOG_SIZE,
                           template=default_template())
    relay: subprocess.Popen[bytes] | None = None
    try:
        server.start()
        version = server.scalar("SELECT VERSION()")
        echo(f"upstream   MariaDB {version} on 127.0.0.1:{server.port} "
             f"(server_id 1, binlog_format ROW, max_binlog_size 1 MiB)")
        relay_dir = base / "relay"
        config = base / "relay.toml"
        config.write_text(tomli_w.dumps({
            "relay-dir": str(relay_dir),
            "from": {"host": server.host, "port": server.port, "user": "repl",
                     "password": "replpass"},
        }))
        config.chmod(0o600)
        log = base / "relay.log"
        echo(f"relay dir  {relay_dir}")

        sysbench_prepare(server, tables=2, table_size=5000)
        relay = _relay_process(config, log)
        echo(f"[1/4] sysbench oltp_write_only, 2 threads, {seconds:.0f} s, with DDL; "
             "relaying live")
        started = time.monotonic()
        with sysbench_run_background(server, tables=2, table_size=5000, time=seconds) as work:
            server.execute("CREATE TABLE sbtest.demo_ddl (id INT PRIMARY KEY, note MEDIUMTEXT)")
            time.sleep(seconds / 2)
            server.execute("ALTER TABLE sbtest.demo_ddl ADD COLUMN extra INT")
            echo("[2/4] kill -9 of the relay mid-stream, then a restart")
            relay.send_signal(signal.SIGKILL)
            relay.wait()
            relay = _relay_process(config, log)
            server.execute("INSERT INTO sbtest.demo_ddl VALUES (1, REPEAT('n', 100000), 7)")
            work.wait(timeout=seconds + 60)
        server.execute("RENAME TABLE sbtest.demo_ddl TO sbtest.demo_renamed")
        _wait_caught_up(relay_dir, server, relay)
        elapsed = time.monotonic() - started
        relay.send_signal(signal.SIGTERM)
        if relay.wait(timeout=60) != 0:
            raise DemoFailed(f"the relay exited with status {relay.returncode} on SIGTERM")
        relay = None

        index = read_index(relay_dir) or []
        subdir = relay_dir / str(index[-1])
        names = list_binlogs(subdir)
        meta = read_meta(subdir)
        total = sum((subdir / n).stat().st_size for n in names)
        echo(f"[3/4] caught up after {elapsed:.1f} s: subdir {subdir.name}, {len(names)} files, "
             f"{total / (1 << 20):.1f} MiB")
        if meta is not None:
            echo(f"      relay.meta: binlog-name = {meta.binlog_name!r}, "
                 f"binlog-pos = {meta.binlog_pos}, binlog-gtid = {meta.binlog_gtid!r}")
        upstream = [name for name, _size in server.binlog_files()]
        problems = compare_subdir(subdir, server.datadir, upstream)
        if problems:
            raise DemoFailed("relay files differ from the upstream: " + "; ".join(problems[:3]))
        echo(f"[4/4] all {len(upstream)} relay files are byte-identical to the upstream's, "
             "and mariadb-binlog reads every one")
        echo("result: OK")
    finally:
        if relay is not None and relay.poll() is None:
            relay.kill()
            relay.wait()
        server.stop()
        if keep:
            echo(f"kept: {base}")
        else:
            server.cleanup()
            shutil.rmtree(base, ignore_errors=True)
