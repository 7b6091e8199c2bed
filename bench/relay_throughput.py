"""Relay throughput: a sysbench binlog relayed by binrelay vs. by ``mariadb-binlog --raw``.

    .venv/bin/python -m bench.relay_throughput [--mib 458] [--rounds 3]

Starts a sandbox MariaDB, fills its binlog with sysbench ``oltp_write_only`` until it holds
at least ``--mib`` MiB, then alternates, ``--rounds`` times each:

* the anchor, ``mariadb-binlog --read-from-remote-server --raw --to-last-log``, timed as a
  whole command;
* ``binrelay relay --config`` into an empty relay dir, timed from spawn until the last
  subdir's ``relay.meta`` equals ``SHOW MASTER STATUS`` (polled every 10 ms), then SIGTERM
  (must exit 0); the relay files are then checked byte for byte against the upstream's.

Writes its section of BENCHMARKS.md (unless ``--no-report``).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    MB,
    MIB,
    BenchError,
    anchor_cmd,
    drop_workdir,
    facts_table,
    fresh_dir,
    loadavg,
    log,
    machine_facts,
    make_workdir,
    md_table,
    median,
    run_relay,
    settled_master_status,
    speedups_importable,
    update_section,
    verify_anchor_sizes,
    verify_relay,
    write_config,
)
from binrelay.testing.sandbox import MariaDBServer, default_template, sysbench_prepare, sysbench_run

SECTION = "relay_throughput"
TABLES = 4
TABLE_SIZE = 10_000
THREADS = 4
#: oltp_write_only, per transaction: one index update, one non-index update, one delete and
#: one insert.
ROWS_PER_TXN = 4
POLL = 0.01
GOAL = 1.0


@dataclass
class Workload:
    seconds: float  #: sysbench run time (prepare excluded)
    transactions: int
    row_changes: int


@dataclass
class Round:
    anchor_s: float
    ours_s: float
    speedups: bool | None

    @property
    def ratio(self) -> float:
        return self.anchor_s / self.ours_s


def binlog_total(server: MariaDBServer) -> int:
    return sum(size for _name, size in server.binlog_files())


def generate(server: MariaDBServer, target: int) -> Workload:
    """sysbench prepare, then runs until the binlog totals ``target`` bytes.

    A first timed run measures the binlog bytes per transaction; the next runs are bounded by
    ``--events``, sized to land just past ``target``.
    """
    log(f"sysbench prepare: {TABLES} tables x {TABLE_SIZE} rows")
    sysbench_prepare(server, tables=TABLES, table_size=TABLE_SIZE, threads=THREADS)
    size = binlog_total(server)
    transactions = 0
    run_seconds = 0.0
    events: int | None = None
    while size < target:
        start = time.monotonic()
        result = sysbench_run(server, tables=TABLES, table_size=TABLE_SIZE, threads=THREADS,
                              time=None if events else 10, events=events)
        elapsed = time.monotonic() - start
        run_seconds += elapsed
        m = re.search(r"transactions:\s+(\d+)", result.stdout)
        if not m or not int(m[1]):
            raise BenchError(f"no transactions in sysbench's output:\n{result.stdout[-2000:]}")
        done = int(m[1])
        transactions += done
        new = binlog_total(server)
        per_txn = (new - size) / done
        log(f"sysbench: {done} transactions in {elapsed:.0f} s, binlog {new / MIB:.1f} of"
            f" {target / MIB:.0f} MiB ({(new - size) / elapsed / MB:.1f} MB/s,"
            f" {per_txn:.0f} bytes per transaction)")
        size = new
        events = max(THREADS, math.ceil((target - size) / per_txn * 1.005))
    return Workload(run_seconds, transactions, TABLES * TABLE_SIZE + ROWS_PER_TXN * transactions)


def run_anchor(server: MariaDBServer, out_dir: Path, first: str) -> float:
    cmd = anchor_cmd(server, out_dir, first)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise BenchError(f"anchor exited with {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds


def report(args: argparse.Namespace, facts: dict[str, str], work: Workload, files: int,
           total: int, rounds: list[Round]) -> str:
    def rate(seconds: float) -> str:
        return f"{total / seconds / MB:.1f}"

    rows: list[list[object]] = [
        [i, f"{r.anchor_s:.2f}", rate(r.anchor_s), f"{r.ours_s:.2f}", rate(r.ours_s),
         f"{r.ratio:.2f}"]
        for i, r in enumerate(rounds, 1)
    ]
    med_a = median(r.anchor_s for r in rounds)
    med_o = median(r.ours_s for r in rounds)
    med_ratio = median(r.ratio for r in rounds)
    rows.append(["**median**", f"{med_a:.2f}", rate(med_a), f"{med_o:.2f}", rate(med_o),
                 f"**{med_ratio:.2f}**"])
    verdict = "met" if med_ratio >= GOAL else "NOT met"
    loaded = {r.speedups for r in rounds}
    speedups = "yes" if loaded == {True} else "no" if loaded == {False} else "in some rounds"
    facts = {**facts,
             "binrelay._speedups importable / loaded in the relay":
             f"{'yes' if speedups_importable() else 'no'} / {speedups}",
             "load average at end": loadavg()}
    rotating = f" with {args.max_binlog_mib} MiB rotations" if args.max_binlog_mib else ""
    option = f" --max-binlog-mib {args.max_binlog_mib}" if args.max_binlog_mib else ""
    return f"""\
## Relay throughput{rotating}: binrelay vs. `mariadb-binlog --raw`

`python -m bench.relay_throughput --mib {args.mib:g} --rounds {args.rounds}{option}` ·
goal: median ratio (anchor time / binrelay time) ≥ {GOAL:.1f} ·
**verdict: {verdict}** (median ratio {med_ratio:.2f})

{facts_table(facts)}

Workload: sysbench `oltp_write_only`, {TABLES} tables × {TABLE_SIZE} rows, {THREADS} threads,
{work.seconds:.0f} s of runs: {work.transactions:,} transactions, ≈{work.row_changes:,} row
changes ({TABLES * TABLE_SIZE:,} inserted by prepare + {ROWS_PER_TXN} per transaction). Binlog:
{files} file(s), {total:,} bytes ({total / MIB:.1f} MiB), ROW format, FULL row image and
metadata, CRC32 checksums.

{md_table(["round", "mariadb-binlog s", "mariadb-binlog MB/s", "binrelay s",
           "binrelay MB/s", "ratio anchor/binrelay"], rows)}

- MB/s = 10⁶ bytes of binlog per second. Rounds alternate (anchor first); `sync` before each.
  The median ratio is the median of the per-round ratios (each round's pair ran back to back,
  under the same load), not the ratio of the median times.
- Anchor: `mariadb-binlog --read-from-remote-server --raw --to-last-log` as a whole command
  (writes without fsync). binrelay: from spawning `python -m binrelay.cli.main relay` (so
  interpreter start-up included) into an empty relay dir until the last subdir's
  `relay.meta` equals `SHOW MASTER STATUS` (polled every {POLL * 1000:.0f} ms), with
  `relay-sync-interval = 0.05` (grouped fsync); it then exits 0 on SIGTERM.
- After every binrelay round all {files} relay file(s) were byte-identical to the upstream's
  (the active file differing only in the in-use flag at byte 21); the anchor's files had the
  upstream's lengths.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=458.0,
                        help="binlog size to generate, MiB (default 458)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--max-binlog-mib", type=int, default=0,
                        help="the upstream's max_binlog_size in MiB: the binlog rotates"
                             " (default 0: the server's, one file; own BENCHMARKS.md section)")
    parser.add_argument("--no-report", action="store_true",
                        help="print the section but leave BENCHMARKS.md alone")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args(argv)

    workdir = make_workdir(SECTION)
    log(f"work dir {workdir}")
    server = MariaDBServer(workdir / "srv", server_id=1, template=default_template(),
                           max_binlog_size=args.max_binlog_mib * MIB or None)
    try:
        server.start()
        facts = machine_facts(server)
        work = generate(server, int(args.mib * MIB))
        files = server.binlog_files()
        total = sum(size for _name, size in files)
        want = settled_master_status(server)
        log(f"binlog: {len(files)} file(s), {total / MIB:.1f} MiB, end {want}")

        rounds: list[Round] = []
        for i in range(1, args.rounds + 1):
            anchor_dir = fresh_dir(workdir / "anchor")
            os.sync()
            anchor_s = run_anchor(server, anchor_dir, files[0][0])
            verify_anchor_sizes(server, anchor_dir)
            shutil.rmtree(anchor_dir)

            relay_dir = fresh_dir(workdir / "relay")
            config = write_config(workdir / "relay.toml", server, relay_dir)
            os.sync()
            run = run_relay(config, relay_dir, want, workdir / "relay.log", poll=POLL)
            if server.master_status() != want:
                raise BenchError(f"the upstream moved during the run: {want} ->"
                                 f" {server.master_status()}")
            verify_relay(server, relay_dir)
            shutil.rmtree(relay_dir)

            r = Round(anchor_s, run.seconds, run.speedups_loaded)
            rounds.append(r)
            log(f"round {i}: anchor {anchor_s:.2f} s ({total / anchor_s / MB:.1f} MB/s),"
                f" binrelay {run.seconds:.2f} s ({total / run.seconds / MB:.1f} MB/s),"
                f" ratio {r.ratio:.2f}, relay files identical")

        body = report(args, facts, work, len(files), total, rounds)
        print(body)
        if not args.no_report:
            update_section(f"{SECTION}_rotating" if args.max_binlog_mib else SECTION, body)
            log("BENCHMARKS.md updated")
    finally:
        server.cleanup()
        drop_workdir(workdir, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
