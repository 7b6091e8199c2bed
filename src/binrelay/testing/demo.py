"""``binrelay demo``: relay and apply on local sandbox servers, end to end, with a short report.

1. Starts two private MariaDB servers (127.0.0.1, free ports, throwaway datadirs copied from
   one template, so both begin in the same state): an upstream and a downstream.
2. Runs a sysbench workload with DDL mixed in while ``binrelay relay`` mirrors the
   upstream's binlog, kills the relay with SIGKILL mid-stream and restarts it.
3. Checks every relay file against the upstream's byte for byte and with ``mariadb-binlog``.
4. Applies the relay log to the downstream with the Spark pipeline in local mode
   (``binrelay sync --until-caught-up``).  The relay starts at the upstream's oldest binlog
   (no start is configured), so the apply replays everything, ``sysbench prepare`` included,
   and the downstream needs no dump.
5. Shows where the pipeline stands, then compares ``CHECKSUM TABLE`` of every table on both
   sides and prints a report.

Everything is removed at the end unless ``keep`` is set.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from binrelay.errors import BinrelayError
from binrelay.relay.layout import list_binlogs, read_index, read_meta
from binrelay.relay.relaydir import durable_end
from binrelay.relay.verify import compare_subdir
from binrelay.testing.sandbox import (
    REPL_PASSWORD,
    REPL_USER,
    MariaDBServer,
    default_template,
    sysbench_prepare,
    sysbench_run_background,
)

DEMO_BINLOG_SIZE = 1 << 20
SYSBENCH_TABLES = 2
SYSBENCH_ROWS = 5000
#: Schemas that are not user data: the servers' own, and the downstream's checkpoint schema.
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys", "binrelay")
#: Two cores is the machine the demo must run on; more Spark threads would only contend.
SPARK_MASTER = "local[2]"


class DemoFailed(BinrelayError):
    code = "BR9001"


@dataclass
class DemoReport:
    """What the demo measured; printed at the end and returned for tests."""

    transactions: int | None = None
    ddl_statements: int = 0
    relay_files: int = 0
    relay_bytes: int = 0
    relay_seconds: float = 0.0
    spark_start_seconds: float = 0.0
    sync_seconds: float = 0.0
    batches: dict[str, int] = field(default_factory=dict)
    rows_by_op: dict[str, int] = field(default_factory=dict)
    ddl_applied: int = 0
    checksums: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        rows = sum(self.rows_by_op.values())
        ops = ", ".join(f"{n} {op}" for op, n in sorted(self.rows_by_op.items()))
        batches = ", ".join(f"{n} {kind}" for kind, n in sorted(self.batches.items()))
        txns = "" if self.transactions is None else f", {self.transactions} transactions"
        return [
            "report",
            f"  workload   sysbench oltp_write_only, {SYSBENCH_TABLES} tables x "
            f"{SYSBENCH_ROWS} rows{txns}, {self.ddl_statements} DDL statements",
            f"  relay      {self.relay_files} files, {self.relay_bytes / (1 << 20):.1f} MiB, "
            f"caught up {self.relay_seconds:.1f} s after the workload started "
            "(kill -9 and restart included), byte-identical",
            f"  sync       {sum(self.batches.values())} batches ({batches}), {rows} row changes "
            f"({ops}), {self.ddl_applied} DDL statements in {self.sync_seconds:.1f} s "
            f"(Spark {SPARK_MASTER}, started in {self.spark_start_seconds:.1f} s)",
            f"  checksums  {len(self.checksums)} tables, CHECKSUM TABLE equal on both sides: OK",
        ]


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
        end = None
        with contextlib.suppress(BinrelayError):  # not yet begun
            end = durable_end(relay_dir)
        if end is not None and (end.binlog_name, end.binlog_pos) == server.master_status():
            steady_since = steady_since or time.monotonic()
            # MariaDB appends a Binlog_checkpoint event on its own shortly after a rotation.
            if time.monotonic() - steady_since > 1.5:
                return
        else:
            steady_since = None
        time.sleep(0.05)
    raise DemoFailed(f"the relay did not catch up with the upstream within {timeout:.0f} s")


def checksums(server: MariaDBServer) -> dict[str, int]:
    """``CHECKSUM TABLE`` of every user table, by ``schema.table``."""
    marks = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
    tables = server.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = "
        f"'BASE TABLE' AND TABLE_SCHEMA NOT IN ({marks}) ORDER BY 1, 2", SYSTEM_SCHEMAS)
    out = {}
    for schema, table in tables:
        row = server.query_one(f"CHECKSUM TABLE `{schema}`.`{table}`")
        out[f"{schema}.{table}"] = int(row[1]) if row is not None and row[1] is not None else -1
    return out


def _workload(server: MariaDBServer, seconds: float, kill_relay: Callable[[], None]
              ) -> tuple[int | None, int]:
    """sysbench with DDL mixed in; ``kill_relay`` runs half-way.  Returns the number of
    sysbench transactions (None if its output has none) and of DDL statements run."""
    ddl = [
        "CREATE TABLE sbtest.demo_ddl (id INT PRIMARY KEY, note MEDIUMTEXT)",
        "ALTER TABLE sbtest.demo_ddl ADD COLUMN extra INT",
        "CREATE TABLE sbtest.demo_gone (id INT PRIMARY KEY)",
        "DROP TABLE sbtest.demo_gone",
        "RENAME TABLE sbtest.demo_ddl TO sbtest.demo_renamed",
    ]
    with sysbench_run_background(server, tables=SYSBENCH_TABLES, table_size=SYSBENCH_ROWS,
                                 time=seconds) as work:
        server.execute(ddl[0])
        server.execute("INSERT INTO sbtest.demo_ddl VALUES (1, 'before the ALTER')")
        time.sleep(seconds / 2)
        server.execute(ddl[1])
        kill_relay()
        # A 100 kB row: the relay does not keep a transaction in memory whole.
        server.execute("INSERT INTO sbtest.demo_ddl VALUES (2, REPEAT('n', 100000), 7)")
        server.execute(ddl[2])
        server.execute("INSERT INTO sbtest.demo_gone VALUES (1)")
        server.execute(ddl[3])
        if work.wait(timeout=seconds + 60) != 0:
            raise DemoFailed("sysbench failed:\n" + work.output()[-2000:])
        found = re.search(r"transactions:\s+(\d+)", work.output())
    server.execute(ddl[4])
    server.execute("UPDATE sbtest.demo_renamed SET extra = extra + 1")
    return (int(found.group(1)) if found else None), len(ddl)


def _show_status(config: Any, echo: Callable[[str], None]) -> None:
    """What ``binrelay status --config <config>`` prints, and the checkpoint must be
    consistent after the sync."""
    from binrelay.status import gather, render

    status = gather(config)
    for line in render(status).splitlines():
        echo(f"      {line}")
    cp = status.pipeline.checkpoint
    if cp.position is None:
        raise DemoFailed("the downstream has no checkpoint after the sync")
    if not cp.consistent:
        raise DemoFailed("the checkpoint is not consistent after the sync")


def _sync(config: Any, report: DemoReport, echo: Callable[[str], None]) -> None:
    """``binrelay sync --until-caught-up`` through the library, to collect each batch."""
    from binrelay.spark.session import build_session
    from binrelay.spark.sync import BatchReport, SyncPipeline

    started = time.monotonic()
    # No progress bars: they would interleave with the demo's own lines on the terminal.
    spark = build_session(config.sync.master, app_name="binrelay-demo",
                          conf={"spark.ui.showConsoleProgress": "false"},
                          driver_host=config.sync.driver_host)
    try:
        report.spark_start_seconds = time.monotonic() - started

        def collect(batch: BatchReport) -> None:
            report.batches[batch.kind] = report.batches.get(batch.kind, 0) + 1
            for op, n in batch.rows_by_op.items():
                report.rows_by_op[op] = report.rows_by_op.get(op, 0) + n

        stats = SyncPipeline(config, spark=spark, listeners=[collect]).run(
            until_caught_up=True)
    finally:
        spark.stop()
    report.sync_seconds = stats.seconds
    report.ddl_applied = stats.ddl
    echo(f"      applied {stats.batches} batch(es): {stats.changes} row change(s), "
         f"{stats.ddl} DDL statement(s) in {stats.seconds:.1f} s")


def run_demo(*, seconds: float = 8.0, keep: bool = False,
             echo: Callable[[str], None] = print) -> DemoReport:
    from binrelay.config import load_config

    base = Path(tempfile.mkdtemp(prefix="binrelay-demo-"))
    template = default_template()
    upstream = MariaDBServer(base / "upstream", server_id=1, max_binlog_size=DEMO_BINLOG_SIZE,
                             template=template)
    downstream = MariaDBServer(base / "downstream", server_id=2, template=template)
    relay: subprocess.Popen[bytes] | None = None
    report = DemoReport()
    try:
        upstream.start()
        downstream.start()
        version = upstream.scalar("SELECT VERSION()")
        echo(f"upstream   MariaDB {version} on 127.0.0.1:{upstream.port} "
             "(server_id 1, binlog_format ROW, max_binlog_size 1 MiB)")
        echo(f"downstream MariaDB {version} on 127.0.0.1:{downstream.port} "
             "(server_id 2, same initial datadir as the upstream)")
        relay_dir = base / "relay"
        config_path = base / "binrelay.toml"
        # No relay-binlog-name: the relay starts at the upstream's oldest binlog, so the
        # sync replays the whole history, sysbench prepare included.
        config_path.write_text(tomli_w.dumps({
            "relay-dir": str(relay_dir),
            "log-level": "warn",
            "from": {"host": upstream.host, "port": upstream.port, "user": REPL_USER,
                     "password": REPL_PASSWORD},
            "to": {"host": downstream.host, "port": downstream.port, "user": "root",
                   "password": ""},
            "sync": {"master": SPARK_MASTER, "tasks": 2},
        }))
        # It holds passwords.
        config_path.chmod(0o600)
        log = base / "relay.log"
        echo(f"relay dir  {relay_dir}")
        echo(f"config     {config_path}")

        started = time.monotonic()
        relay = _relay_process(config_path, log)
        echo(f"[1/5] sysbench prepare, then oltp_write_only, 2 threads, {seconds:.0f} s, "
             "with DDL; relaying live")
        sysbench_prepare(upstream, tables=SYSBENCH_TABLES, table_size=SYSBENCH_ROWS)

        def kill_and_restart() -> None:
            nonlocal relay
            echo("      kill -9 of the relay mid-stream, then a restart")
            assert relay is not None
            relay.send_signal(signal.SIGKILL)
            relay.wait()
            relay = _relay_process(config_path, log)

        report.transactions, report.ddl_statements = _workload(upstream, seconds,
                                                               kill_and_restart)
        assert relay is not None
        _wait_caught_up(relay_dir, upstream, relay)
        report.relay_seconds = time.monotonic() - started
        relay.send_signal(signal.SIGTERM)
        if relay.wait(timeout=60) != 0:
            raise DemoFailed(f"the relay exited with status {relay.returncode} on SIGTERM")
        relay = None

        index = read_index(relay_dir) or []
        subdir = relay_dir / str(index[-1])
        names = list_binlogs(subdir)
        meta = read_meta(subdir)
        report.relay_files = len(names)
        report.relay_bytes = sum((subdir / n).stat().st_size for n in names)
        echo(f"[2/5] caught up after {report.relay_seconds:.1f} s: subdir {subdir.name}, "
             f"{len(names)} files, {report.relay_bytes / (1 << 20):.1f} MiB")
        if meta is not None:
            echo(f"      relay.meta: binlog-name = {meta.binlog_name!r}, "
                 f"binlog-pos = {meta.binlog_pos}, binlog-gtid = {meta.binlog_gtid!r}")
        files = [name for name, _size in upstream.binlog_files()]
        problems = compare_subdir(subdir, upstream.datadir, files)
        if problems:
            raise DemoFailed("relay files differ from the upstream: " + "; ".join(problems[:3]))
        echo(f"      all {len(files)} relay files are byte-identical to the upstream's, "
             "and mariadb-binlog reads every one")

        config = load_config(config_path)
        echo(f"[3/5] binrelay sync --until-caught-up on Spark {SPARK_MASTER} "
             f"({config.sync.tasks} apply tasks)")
        _sync(config, report, echo)

        echo("[4/5] status")
        _show_status(config, echo)

        want = checksums(upstream)
        got = checksums(downstream)
        report.checksums = want
        if got != want:
            differ = sorted(t for t in want.keys() | got.keys() if want.get(t) != got.get(t))
            raise DemoFailed("CHECKSUM TABLE differs for " + ", ".join(differ))
        echo(f"[5/5] CHECKSUM TABLE of all {len(want)} tables equal on both sides: "
             + ", ".join(want))
        for line in report.lines():
            echo(line)
        echo("result: OK")
        return report
    finally:
        if relay is not None and relay.poll() is None:
            relay.kill()
            relay.wait()
        if keep:
            upstream.stop()
            downstream.stop()
            echo(f"kept: {base}")
        else:
            upstream.cleanup()
            downstream.cleanup()
            shutil.rmtree(base, ignore_errors=True)
