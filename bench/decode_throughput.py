"""Decode throughput: a sysbench binlog's row changes, binrelay vs. python-mysql-replication.

    .venv/bin/python -m bench.decode_throughput [--mib 458] [--rounds 2] [--ours-rounds 3]

Starts a sandbox MariaDB (``max_binlog_size`` at its default, so one file), fills its binlog
with sysbench ``oltp_write_only`` until it holds at least ``--mib`` MiB (as
``bench.relay_throughput`` does), counts the row changes ``mariadb-binlog -v`` prints, then
alternates, each side in a child process of its own:

* the anchor, python-mysql-replication's ``BinLogStreamReader`` (PyPI ``mysql-replication``,
  the ``bench`` extra) connected to the server as a replica, non-blocking, from the first
  binlog file at position 4, only WRITE/UPDATE/DELETE rows events, ``--rounds`` times;
* ours, ``binrelay.rows.reader.iter_file_changes`` over the server's binlog file(s) in its
  datadir (the bytes a relay file holds), ``--ours-rounds`` times.

Both touch every decoded value of every before/after image.  Each child times itself (from
creating the reader to the last row change) and reports its CPU time, its row changes per
operation, the number of values touched, a few sample rows and its ``VmHWM`` (peak RSS)
before and after decoding.  The row-change counts of both sides and of ``mariadb-binlog -v``
must be equal and the sample rows must agree, or the benchmark fails instead of reporting.

Writes its section of BENCHMARKS.md (unless ``--no-report``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    ANCHOR,
    MB,
    MIB,
    REPO_ROOT,
    BenchError,
    drop_workdir,
    facts_table,
    loadavg,
    log,
    machine_facts,
    make_workdir,
    md_table,
    median,
    pmr_version,
    settled_master_status,
    update_section,
    vm_hwm_kib,
)
from bench.relay_throughput import ROWS_PER_TXN, TABLE_SIZE, TABLES, THREADS, Workload, generate
from binrelay.testing.sandbox import MariaDBServer, default_template

SECTION = "decode_throughput"
GOAL = 10.0
ANCHOR_SERVER_ID = 4242
SAMPLES = 5  #: row changes compared between the two sides, at the start and at the end
OPS = ("insert", "update", "delete")
CHILD_TIMEOUT = 3600.0
_VERBOSE_ROW = re.compile(rb"^### (INSERT INTO|UPDATE|DELETE FROM) ", re.MULTILINE)
_VERBOSE_OPS = {b"INSERT INTO": "insert", b"UPDATE": "update", b"DELETE FROM": "delete"}


# --------------------------------------------------------------------------- children


class _Tally:
    """Row changes per op, values touched, and the first and last few row changes."""

    def __init__(self) -> None:
        self.ops = dict.fromkeys(OPS, 0)
        self.values = 0
        self.first: list[tuple[str, Any, Any]] = []
        self.last: deque[tuple[str, Any, Any]] = deque(maxlen=SAMPLES)


def _reprs(rows: Iterable[tuple[str, Any, Any]]) -> list[list[Any]]:
    """Sample row changes as ``[op, before, after]``, each image a list of value reprs."""
    return [[op, None if b is None else [repr(v) for v in b],
             None if a is None else [repr(v) for v in a]] for op, b, a in rows]


def _vals(image: dict[str, Any] | None) -> list[Any] | None:
    return None if image is None else list(image.values())


def _finish(tally: _Tally, seconds: float, cpu: float, hwm_before: int) -> dict[str, Any]:
    return {"rows": sum(tally.ops.values()), "ops": tally.ops, "values": tally.values,
            "seconds": seconds, "cpu": cpu, "hwm_before_kib": hwm_before,
            "hwm_kib": vm_hwm_kib(os.getpid()),
            "first": _reprs(tally.first), "last": _reprs(tally.last)}


def child_ours(paths: list[Path]) -> dict[str, Any]:
    """Every row change of ``paths`` through ``iter_file_changes``, every value touched."""
    from binrelay.rows.reader import iter_file_changes

    tally = _Tally()
    ops = tally.ops
    values = 0
    first, keep = tally.first, tally.last.append
    hwm_before = vm_hwm_kib(os.getpid())
    cpu0 = time.process_time()
    start = time.perf_counter()
    for path in paths:
        for ch in iter_file_changes(path):
            ops[ch.op] += 1
            before, after = ch.before, ch.after
            if before is not None:
                for _v in before:
                    values += 1
            if after is not None:
                for _v in after:
                    values += 1
            keep((ch.op, before, after))
            if len(first) < SAMPLES:
                first.append((ch.op, before, after))
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    tally.values = values
    return _finish(tally, seconds, cpu, hwm_before)


def child_anchor(port: int, first_file: str) -> dict[str, Any]:
    """Every row of every rows event python-mysql-replication streams, every value touched."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    op_of = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
    tally = _Tally()
    ops = tally.ops
    values = 0
    first, keep = tally.first, tally.last.append
    hwm_before = vm_hwm_kib(os.getpid())
    cpu0 = time.process_time()
    start = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": port, "user": "root",
                             "password": ""},
        server_id=ANCHOR_SERVER_ID, blocking=False, resume_stream=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        log_file=first_file, log_pos=4)
    try:
        for ev in stream:
            op = op_of[type(ev)]
            for row in ev.rows:
                ops[op] += 1
                image = row.get("values")
                if image is not None:
                    before, after = (None, image) if op == "insert" else (image, None)
                else:
                    before, after = row["before_values"], row["after_values"]
                if before is not None:
                    for _v in before.values():
                        values += 1
                if after is not None:
                    for _v in after.values():
                        values += 1
                keep((op, before, after))
                if len(first) < SAMPLES:
                    first.append((op, before, after))
    finally:
        stream.close()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    tally.values = values
    # The anchor's images are dicts, column name -> value, in column order.
    tally.first = [(op, _vals(b), _vals(a)) for op, b, a in tally.first]
    tally.last = deque((op, _vals(b), _vals(a)) for op, b, a in tally.last)
    return _finish(tally, seconds, cpu, hwm_before)


# --------------------------------------------------------------------------- parent side


@dataclass
class Run:
    side: str
    rows: int
    ops: dict[str, int]
    values: int
    seconds: float  #: the child's own timing: reader created .. last row change
    cpu: float  #: the child's CPU time over the same span (user + system)
    hwm_before_kib: int  #: VmHWM once imports were done, before decoding
    hwm_kib: int  #: VmHWM at the end
    process_seconds: float  #: the whole child, interpreter start-up included
    first: list[list[Any]]
    last: list[list[Any]]

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def run_child(side: str, args: list[str], log_path: Path) -> Run:
    cmd = [sys.executable, "-m", "bench.decode_throughput", "--child", side, *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=False,
                          timeout=CHILD_TIMEOUT)
    process_seconds = time.perf_counter() - start
    with log_path.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        raise BenchError(f"{side} child exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise BenchError(f"{side} child printed nothing:\n{proc.stderr[-3000:]}")
    return Run(side=side, process_seconds=process_seconds, **json.loads(lines[-1]))


def verbose_counts(path: Path) -> dict[str, int]:
    """Row changes ``mariadb-binlog -v`` prints for ``path``, per op (``### INSERT INTO`` ...)."""
    counts = dict.fromkeys(OPS, 0)
    dump = subprocess.Popen([ANCHOR, "-v", "--base64-output=decode-rows", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    grep = subprocess.Popen(["grep", "-a", "-o", "-E", "^### (INSERT INTO|UPDATE|DELETE FROM) "],
                            stdin=dump.stdout, stdout=subprocess.PIPE)
    assert dump.stdout is not None and grep.stdout is not None
    dump.stdout.close()  # grep holds it now
    try:
        for m in _VERBOSE_ROW.finditer(grep.stdout.read()):
            counts[_VERBOSE_OPS[m[1]]] += 1
    finally:
        grep.wait()
        err = dump.stderr.read() if dump.stderr else b""
        dump.wait()
    if dump.returncode != 0:
        raise BenchError(f"mariadb-binlog -v {path} exited with {dump.returncode}:"
                         f" {err.decode(errors='replace')[-2000:]}")
    return counts


def check(runs: list[Run], expected: dict[str, int]) -> None:
    """Every run decoded exactly the row changes ``mariadb-binlog -v`` lists, with the same
    number of values, and the same first and last rows as every other run."""
    ref = runs[0]
    for run in runs:
        if run.ops != expected:
            raise BenchError(f"{run.side} decoded {run.ops} row changes, mariadb-binlog -v"
                             f" lists {expected}")
        if run.values != ref.values:
            raise BenchError(f"{run.side} touched {run.values} values, {ref.side} {ref.values}")
        for which in ("first", "last"):
            a, b = getattr(ref, which), getattr(run, which)
            if a != b:
                raise BenchError(f"the {which} {SAMPLES} row changes differ:\n"
                                 f"{ref.side}: {a}\n{run.side}: {b}")


def schedule(anchor_rounds: int, ours_rounds: int) -> Iterator[str]:
    """Alternate the sides (anchor first) while both have rounds left, then the rest."""
    a = o = 0
    while a < anchor_rounds or o < ours_rounds:
        if a < anchor_rounds:
            a += 1
            yield "anchor"
        if o < ours_rounds:
            o += 1
            yield "ours"


def mb(kib: int) -> str:
    return f"{kib * 1024 / MB:.1f}"


def report(args: argparse.Namespace, facts: dict[str, str], work: Workload,
           files: list[tuple[str, int]], expected: dict[str, int], runs: list[Run],
           anchor_version: str) -> str:
    anchor = [r for r in runs if r.side == "anchor"]
    ours = [r for r in runs if r.side == "ours"]
    total = sum(size for _n, size in files)
    rows_total = sum(expected.values())
    med_a = median(r.rate for r in anchor)
    med_o = median(r.rate for r in ours)
    ratio = med_o / med_a
    verdict = "met" if ratio >= GOAL else "NOT met"
    cmd = (f"python -m bench.decode_throughput --mib {args.mib:g} --rounds {args.rounds}"
           f" --ours-rounds {args.ours_rounds}")
    cpu_a = rows_total / median(r.cpu for r in anchor)
    cpu_o = rows_total / median(r.cpu for r in ours)
    facts = {**facts, "anchor": f"python-mysql-replication (PyPI mysql-replication)"
                                f" {anchor_version}",
             "row-count reference": facts["anchor"], "load average at end": loadavg()}

    counters = {"anchor": 0, "ours": 0}
    table_rows: list[list[object]] = []
    for r in runs:
        counters[r.side] += 1
        name = "python-mysql-replication" if r.side == "anchor" else "**binrelay**"
        table_rows.append([f"{name} #{counters[r.side]}", f"{r.seconds:.2f}",
                           f"{r.cpu:.2f}", f"{r.rate / 1000:.1f}",
                           f"{total / r.seconds / MB:.1f}", mb(r.hwm_kib)])
    for name, side in (("python-mysql-replication", anchor), ("**binrelay**", ours)):
        s = median(r.seconds for r in side)
        table_rows.append([f"median {name}", f"{s:.2f}",
                           f"{median(r.cpu for r in side):.2f}",
                           f"{median(r.rate for r in side) / 1000:.1f}",
                           f"{total / s / MB:.1f}",
                           mb(max(r.hwm_kib for r in side))])
    table = md_table(["run (in order)", "decode s", "CPU s", "k rows/s", "MB/s",
                      "peak RSS = VmHWM (MB)"], table_rows)
    ours_hwm = max(r.hwm_kib for r in ours)
    ours_base = max(r.hwm_before_kib for r in ours)
    anchor_hwm = max(r.hwm_kib for r in anchor)
    anchor_base = max(r.hwm_before_kib for r in anchor)
    counts = ", ".join(f"{expected[op]:,} {op}s" for op in OPS)
    return f"""\
## Decode throughput: binrelay vs. python-mysql-replication

`{cmd}`

Goal: binrelay's median rows/s ≥ {GOAL:.0f} × python-mysql-replication's ·
**verdict: {verdict}** (ratio {ratio:.1f}: {med_o / 1000:.1f} k vs. {med_a / 1000:.1f} k rows/s) ·
binrelay's peak RSS decoding the whole binlog: {mb(ours_hwm)} MB

{facts_table(facts)}

Workload: sysbench `oltp_write_only`, {TABLES} tables × {TABLE_SIZE} rows, {THREADS} threads,
{work.seconds:.0f} s of runs: {work.transactions:,} transactions. Binlog: {len(files)} file(s),
{total:,} bytes ({total / MIB:.1f} MiB), ROW format, FULL row image and metadata, CRC32
checksums. Row changes: **{rows_total:,}** ({counts}), the same on both sides in every
run and in `mariadb-binlog -v` (its `### INSERT INTO` / `### UPDATE` / `### DELETE FROM`
lines); {runs[0].values:,} values decoded and touched per run on both sides, and the first
and last {SAMPLES} row changes equal value for value (`repr`).

{table}

By CPU time of the decoding process instead of wall time (less sensitive to the machine's
load and to the anchor's waits on the server): {cpu_o / 1000:.1f} k vs. {cpu_a / 1000:.1f} k
rows per CPU-second, ratio {cpu_o / cpu_a:.1f}.

- Anchor: python-mysql-replication's `BinLogStreamReader` connected to the server as a
  replica over TCP on 127.0.0.1 (user root, `server_id={ANCHOR_SERVER_ID}`, `blocking=False`,
  `resume_stream=False`, from `{files[0][0]}` position 4,
  `only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]`, its default
  `verify_checksum=False`); every row of every event's `.rows`, every value of
  `values` / `before_values` / `after_values`.
- binrelay: `binrelay.rows.reader.iter_file_changes(path)` (pure Python, CRC32 of every
  event checked) over the server's binlog file(s) in its datadir, which is the byte content
  a relay file holds; every value of each `RowChange.before` / `.after`.
- **Asymmetry**: the anchor reads over the network from mariadbd (which reads the file and
  sends it, on the other core), ours reads the file from disk (page cache: the binlog was
  just written, and the machine has the memory to keep it). "CPU s" is the decoding
  process's own user + system time; the anchor's wall time includes waiting on the server.
- Times: each side runs in a child process of its own and times itself, from creating the
  reader to its last row change (interpreter start-up and imports excluded; the anchor's
  includes connecting). Runs alternate, anchor first; medians are over each side's runs
  and the ratio is median rows/s over median rows/s. MB/s = 10⁶ bytes of binlog per second.
- Memory: VmHWM of the child from `/proc/self/status` at the end of its run (exact, no
  sampling). binrelay: {mb(ours_base)} MB once imports were done, {mb(ours_hwm)} MB after
  decoding the whole binlog, so decoding added {mb(ours_hwm - ours_base)} MB.
  python-mysql-replication: {mb(anchor_base)} → {mb(anchor_hwm)} MB. This binlog's
  transactions are small (the largest are `prepare`'s bulk inserts), so this shows the
  decoder's footprint staying flat over {total / MIB:.0f} MiB of binlog, not its bound for
  one huge transaction or row.
"""


def wait_settled(server: MariaDBServer) -> tuple[str, int]:
    want = settled_master_status(server)
    log(f"binlog settled at {want}")
    return want


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=458.0,
                        help="binlog size to generate, MiB (default 458)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="runs of the anchor, python-mysql-replication (default 2)")
    parser.add_argument("--ours-rounds", type=int, default=3,
                        help="runs of binrelay (default 3)")
    parser.add_argument("--no-report", action="store_true",
                        help="print the section but leave BENCHMARKS.md alone")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    parser.add_argument("--child", choices=("anchor", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child == "ours":
        print(json.dumps(child_ours([Path(p) for p in args.child_args])))
        return 0
    if args.child == "anchor":
        port, first = args.child_args
        print(json.dumps(child_anchor(int(port), first)))
        return 0
    if args.rounds < 1 or args.ours_rounds < 1:
        parser.error("--rounds and --ours-rounds must be at least 1")

    anchor_version = pmr_version()

    workdir = make_workdir(SECTION)
    log(f"work dir {workdir}")
    server = MariaDBServer(workdir / "srv", server_id=1, template=default_template())
    try:
        server.start()
        facts = machine_facts(server)
        work = generate(server, int(args.mib * MIB))
        wait_settled(server)
        files = server.binlog_files()
        paths = [server.binlog_path(name) for name, _size in files]
        total = sum(size for _n, size in files)
        log(f"binlog: {len(files)} file(s), {total / MIB:.1f} MiB")

        expected = dict.fromkeys(OPS, 0)
        start = time.monotonic()
        for path in paths:
            for op, n in verbose_counts(path).items():
                expected[op] += n
        log(f"mariadb-binlog -v lists {sum(expected.values()):,} row changes {expected}"
            f" ({time.monotonic() - start:.0f} s)")
        approx = TABLES * TABLE_SIZE + ROWS_PER_TXN * work.transactions
        if sum(expected.values()) != approx:
            log(f"note: sysbench's count suggests {approx:,} row changes")

        runs: list[Run] = []
        for side in schedule(args.rounds, args.ours_rounds):
            if side == "anchor":
                run = run_child(side, [str(server.port), files[0][0]], workdir / "children.log")
            else:
                run = run_child(side, [str(p) for p in paths], workdir / "children.log")
            runs.append(run)
            log(f"{side}: {run.rows:,} row changes in {run.seconds:.2f} s"
                f" ({run.rate / 1000:.1f} k rows/s, CPU {run.cpu:.2f} s,"
                f" VmHWM {mb(run.hwm_before_kib)} -> {mb(run.hwm_kib)} MB)")
            check(runs, expected)
        if server.binlog_files() != files:
            raise BenchError(f"the binlog changed during the runs: {files} ->"
                             f" {server.binlog_files()}")

        body = report(args, facts, work, files, expected, runs, anchor_version)
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
