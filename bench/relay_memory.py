"""Relay memory: peak RSS while relaying one huge transaction, binrelay vs. the anchor.

    .venv/bin/python -m bench.relay_memory [--gib 1.0]

Starts a sandbox MariaDB (``max_binlog_size`` at its default, which is its maximum, 1 GiB),
writes ONE InnoDB transaction of about ``--gib`` GiB of binlog (``INSERT ... SELECT`` from
MariaDB's sequence engine, in one BEGIN/COMMIT), then relays the binlog with
``mariadb-binlog --read-from-remote-server --raw`` and with ``binrelay relay``, sampling each
process's ``VmHWM`` every 50 ms (the last sample just before SIGTERM).  binrelay's relay
files are checked byte for byte against the upstream's.

Writes its section of BENCHMARKS.md (unless ``--no-report``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import time
from dataclasses import dataclass

from bench.common import (
    MB,
    MIB,
    BenchError,
    ProcRun,
    anchor_cmd,
    drop_workdir,
    facts_table,
    fresh_dir,
    loadavg,
    log,
    machine_facts,
    make_workdir,
    md_table,
    run_relay,
    run_sampled,
    settled_master_status,
    speedups_importable,
    update_section,
    verify_anchor_sizes,
    verify_relay,
    write_config,
)
from binrelay.testing.sandbox import MariaDBServer, default_template

SECTION = "relay_memory"
GIB = 1024 * MIB
POLL = 0.05
GOAL_BYTES = 100 * MB
ROW_BYTES = 1000
PROBE_ROWS = 2000
ROWS_PER_STATEMENT = 100_000
DB = "bench"


@dataclass
class Txn:
    rows: int
    statements: int
    bytes: int  #: binlog bytes the transaction added
    seconds: float  #: BEGIN to COMMIT done
    source: str


def binlog_total(server: MariaDBServer) -> int:
    return sum(size for _name, size in server.binlog_files())


def _rows_sql(n: int, has_sequence: bool) -> str:
    if has_sequence:
        return f"SELECT REPEAT('x', {ROW_BYTES}) FROM seq_1_to_{n}"
    return (f"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {n})"
            f" SELECT REPEAT('x', {ROW_BYTES}) FROM s")


def write_big_transaction(server: MariaDBServer, target: int) -> Txn:
    server.execute(f"CREATE DATABASE {DB}")
    for table in ("t", "probe"):
        server.execute(f"CREATE TABLE {DB}.{table} (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
                       f" b VARBINARY({ROW_BYTES}) NOT NULL) ENGINE=InnoDB")
    has_sequence = bool(server.scalar(
        "SELECT COUNT(*) FROM information_schema.ENGINES"
        " WHERE ENGINE = 'SEQUENCE' AND SUPPORT IN ('YES', 'DEFAULT')"))

    conn = server.connect(database=DB, autocommit=False)
    with contextlib.closing(conn), conn.cursor() as cur:
        # A small transaction first, to learn the binlog bytes per row.
        before = binlog_total(server)
        cur.execute(f"INSERT INTO probe (b) {_rows_sql(PROBE_ROWS, has_sequence)}")
        conn.commit()
        per_row = (binlog_total(server) - before) / PROBE_ROWS
        rows = math.ceil(target / per_row)
        log(f"{per_row:.1f} binlog bytes per row: {rows} rows for {target / GIB:.2f} GiB")

        before = binlog_total(server)
        start = time.monotonic()
        cur.execute("BEGIN")
        done = statements = 0
        while done < rows:
            n = min(ROWS_PER_STATEMENT, rows - done)
            cur.execute(f"INSERT INTO t (b) {_rows_sql(n, has_sequence)}")
            done += n
            statements += 1
            if statements % 2 == 0 or done == rows:
                log(f"  {done} of {rows} rows inserted (not committed yet)")
        cur.execute("COMMIT")
        seconds = time.monotonic() - start
    size = binlog_total(server) - before
    log(f"one transaction: {rows} rows, {size / GIB:.3f} GiB of binlog in {seconds:.0f} s")
    if size < 0.9 * target:
        raise BenchError(f"the transaction wrote only {size} bytes of binlog, wanted {target}")
    source = "sequence engine" if has_sequence else "recursive CTE"
    return Txn(rows, statements, size, seconds, source)


def mb(kib: int) -> str:
    return f"{kib * 1024 / MB:.1f}"


def report(args: argparse.Namespace, facts: dict[str, str], txn: Txn, files: int, total: int,
           baseline: ProcRun, anchor: ProcRun, ours: ProcRun) -> str:
    peak_bytes = ours.peak_rss_kib * 1024
    verdict = "met" if peak_bytes < GOAL_BYTES else "NOT met"
    loaded = "yes" if ours.speedups_loaded else "no"
    facts = {**facts,
             "binrelay._speedups importable / loaded in the relay":
             f"{'yes' if speedups_importable() else 'no'} / {loaded}",
             "load average at end": loadavg()}

    def row(name: str, run: ProcRun) -> list[object]:
        return [name, mb(run.peak_rss_kib), f"{run.seconds:.2f}",
                f"{total / run.seconds / MB:.1f}"]

    table = md_table(
        ["relaying the binlog", "peak RSS = VmHWM (MB)", "time (s)", "MB/s"],
        [row("mariadb-binlog --raw", anchor), row("**binrelay relay**", ours)],
    )
    return f"""\
## Relay memory: one {txn.bytes / GIB:.2f} GiB transaction

`python -m bench.relay_memory --gib {args.gib:g}` · goal: binrelay's peak RSS < 100 MB ·
**verdict: {verdict}** (peak {peak_bytes / MB:.1f} MB)

{facts_table(facts)}

Workload: ONE InnoDB transaction, `BEGIN`, {txn.statements} ×
`INSERT INTO t (b) SELECT REPEAT('x', {ROW_BYTES}) FROM ...` ({txn.source}), `COMMIT`:
{txn.rows:,} rows, {txn.bytes:,} bytes ({txn.bytes / GIB:.3f} GiB) of binlog, written in
{txn.seconds:.0f} s. Binlog in all: {files} file(s), {total:,} bytes ({total / MIB:.1f} MiB).
`max_binlog_size` is at its default and maximum, 1 GiB; a transaction is never split across
files, so a transaction of 1 GiB or more fills its file past the limit and the server
rotates right after it.

{table}

Time ratio anchor/binrelay on this binlog: {anchor.seconds / ours.seconds:.2f} (for the
record only: speed is `relay_throughput`'s goal, not this benchmark's).

- MB = 10⁶ bytes. VmHWM (the kernel's high-water mark of the process's RSS) read from
  `/proc/<pid>/status` every {POLL * 1000:.0f} ms (binrelay: once more just before SIGTERM;
  the anchor's last sample is at most {POLL * 1000:.0f} ms before it exits). `wait4`'s
  `ru_maxrss` is not used: Linux carries the forking Python parent's peak over into an
  exec'd child's, which swamps a small C client's figure.
- Baseline: binrelay relaying the same server's binlog before the big transaction
  ({baseline.seconds:.2f} s) peaked at {mb(baseline.peak_rss_kib)} MB: the interpreter, its
  modules and buffers.
- Times: anchor as a whole command; binrelay from spawn until `relay.meta` equals
  `SHOW MASTER STATUS` (polled every {POLL * 1000:.0f} ms), then SIGTERM (exit 0).
- binrelay's relay files were byte-identical to the upstream's (the active file differing
  only in the in-use flag at byte 21); the anchor's files had the upstream's lengths.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0,
                        help="binlog size of the one transaction, GiB (default 1.0)")
    parser.add_argument("--no-report", action="store_true",
                        help="print the section but leave BENCHMARKS.md alone")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args(argv)
    target = int(args.gib * GIB)

    workdir = make_workdir(SECTION)
    # Upstream binlog + InnoDB data + binlog cache spill + relay copy + anchor copy.
    need = 5 * target + GIB
    free = shutil.disk_usage(workdir).free
    if free < need:
        shutil.rmtree(workdir, ignore_errors=True)
        raise BenchError(f"{free / GIB:.1f} GiB free under {workdir}, want {need / GIB:.1f}")
    log(f"work dir {workdir} ({free / GIB:.0f} GiB free)")
    server = MariaDBServer(workdir / "srv", server_id=1, template=default_template())
    try:
        server.start()
        facts = machine_facts(server)
        relay_dir = workdir / "relay"
        config = write_config(workdir / "relay.toml", server, relay_dir)

        # Baseline: the relay's footprint on a binlog without the big transaction.
        fresh_dir(relay_dir)
        baseline = run_relay(config, relay_dir, settled_master_status(server),
                             workdir / "relay.log", poll=POLL, sample_rss=True)
        log(f"baseline: binrelay peak RSS {mb(baseline.peak_rss_kib)} MB")

        txn = write_big_transaction(server, target)
        files = server.binlog_files()
        total = sum(size for _name, size in files)
        want = settled_master_status(server)
        log(f"binlog: {len(files)} file(s), {total / MIB:.1f} MiB, end {want}")

        anchor_dir = fresh_dir(workdir / "anchor")
        os.sync()
        anchor = run_sampled(anchor_cmd(server, anchor_dir, files[0][0]),
                             workdir / "anchor.log", poll=POLL)
        verify_anchor_sizes(server, anchor_dir)
        shutil.rmtree(anchor_dir)
        log(f"anchor: {anchor.seconds:.2f} s, peak RSS {mb(anchor.peak_rss_kib)} MB")

        fresh_dir(relay_dir)
        os.sync()
        ours = run_relay(config, relay_dir, want, workdir / "relay.log", poll=POLL,
                         sample_rss=True)
        if server.master_status() != want:
            raise BenchError(f"the upstream moved during the run: {want} ->"
                             f" {server.master_status()}")
        verify_relay(server, relay_dir)
        shutil.rmtree(relay_dir)
        log(f"binrelay: {ours.seconds:.2f} s, peak RSS {mb(ours.peak_rss_kib)} MB,"
            " relay files identical")

        body = report(args, facts, txn, len(files), total, baseline, anchor, ours)
        print(body)
        if not args.no_report:
            update_section(SECTION, body)
            log("BENCHMARKS.md updated")
    finally:
        server.cleanup()
        drop_workdir(workdir, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
