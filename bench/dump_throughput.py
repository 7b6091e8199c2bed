"""``binrelay dump --json`` vs. python-mysql-replication and ``mariadb-binlog -v``.

    .venv/bin/python -m bench.dump_throughput [--mib 128] [--rounds 3]

Starts a sandbox MariaDB (``max_binlog_size`` at its default, so one file), fills its binlog
with sysbench ``oltp_write_only`` until it holds at least ``--mib`` MiB (as
``bench.relay_throughput`` does), then runs three commands on the same binlog, ``--rounds``
times each, alternating (each round starts with the next side):

* ``binrelay dump --json FILE`` (``python -m binrelay.cli.main``, one command per binlog file);
* python-mysql-replication (PyPI ``mysql-replication``, the ``bench`` extra) as a user would
  dump rows as JSON: ``bench.pmr_json``, a replica of the server reading from the first binlog
  file at position 4 and printing ``json.dumps`` of every row;
* ``mariadb-binlog -v --base64-output=decode-rows FILE...``.

Each is timed as a whole command, from spawning it until it has exited and its stdout, a pipe
this process reads, has reached end of file (not /dev/null, which some tools special-case).
The reading counts the lines and the row changes per operation (``"op": "insert"`` ... in the
JSON sides, ``### INSERT INTO`` / ``### UPDATE`` / ``### DELETE FROM`` in mariadb-binlog's);
the counts of every run must be equal, and binrelay's first and last row changes must equal
python-mysql-replication's, or the benchmark fails instead of reporting.

Writes its section of BENCHMARKS.md (unless ``--no-report``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    ANCHOR,
    MB,
    MIB,
    REPO_ROOT,
    BenchError,
    binrelay_cmd,
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
)
from bench.relay_throughput import TABLE_SIZE, TABLES, THREADS, Workload, generate
from binrelay.testing.sandbox import MariaDBServer, default_template

SECTION = "dump_throughput"
GOAL_PMR = 10.0
GOAL_MARIADB = 1.0
PMR_SERVER_ID = 4243
OPS = ("insert", "update", "delete")
SIDES = ("binrelay", "pmr", "mariadb-binlog")
NAMES = {"binrelay": "**binrelay dump --json**", "pmr": "python-mysql-replication + json",
         "mariadb-binlog": "mariadb-binlog -v"}
CHUNK = 1 << 20
TIMEOUT = 3600.0
#: How each side's stdout shows a row change.  In the JSON lines the key after "op" is
#: "before" on both sides; a string value cannot hold an unescaped quote, so only a column
#: named "op" followed by one named "before" could match these inside an image.
JSON_OPS = {op: f'"op": "{op}", "before": '.encode() for op in OPS}
VERBOSE_OPS = {"insert": b"### INSERT INTO ", "update": b"### UPDATE ",
               "delete": b"### DELETE FROM "}


@dataclass
class Output:
    """What a command printed: bytes, lines, row changes per op, first and last line."""

    patterns: dict[str, bytes]
    #: The patterns start a line (mariadb-binlog's), rather than stand anywhere in one.
    line_start: bool = False
    nbytes: int = 0
    lines: int = 0
    ops: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPS, 0))
    first: bytes = b""
    last: bytes = b""

    def feed(self, block: bytes) -> None:
        """Count whole lines: ``block`` starts a line and ends with a newline."""
        self.lines += block.count(b"\n")
        for op, pat in self.patterns.items():
            if self.line_start:
                self.ops[op] += block.count(b"\n" + pat) + block.startswith(pat)
            else:
                self.ops[op] += block.count(pat)
        if not self.first:
            self.first = block[:block.index(b"\n")]
        self.last = block[block.rfind(b"\n", 0, len(block) - 1) + 1:-1]


@dataclass
class Run:
    side: str
    seconds: float  #: spawn .. exit and end of stdout, summed over the side's commands
    cpu: float  #: the commands' own user + system time (rusage)
    out: Output

    @property
    def rows(self) -> int:
        return sum(self.out.ops.values())

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def run_counted(cmds: list[list[str]], out: Output, log_path: Path) -> tuple[float, float]:
    """Run ``cmds`` one after another, each timed from spawn to exit and end of stdout."""
    seconds = cpu = 0.0
    for cmd in cmds:
        with log_path.open("ab") as err:
            err.write(f"$ {' '.join(cmd)}\n".encode())
            err.flush()
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, cwd=REPO_ROOT)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        with contextlib.suppress(OSError):  # a 1 MiB pipe: fewer switches between the two
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, CHUNK)
        # Read as fast as the command writes; counted once it is done, so that counting
        # never holds a fast writer back.
        chunks: list[bytes] = []
        try:
            while True:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
                if time.perf_counter() - start > TIMEOUT:
                    raise BenchError(f"{cmd[0]} ran for more than {TIMEOUT:.0f} s")
            _pid, status, usage = os.wait4(proc.pid, 0)
            seconds += time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
        finally:
            proc.stdout.close()
            if proc.returncode is None:
                proc.kill()
                proc.wait()
        text = b"".join(chunks)
        del chunks
        out.nbytes += len(text)
        if text:
            out.feed(text if text.endswith(b"\n") else text + b"\n")
        if proc.returncode != 0:
            raise BenchError(f"{' '.join(cmd)} exited with {proc.returncode}; see {log_path}")
        cpu += usage.ru_utime + usage.ru_stime
    return seconds, cpu


def side_run(side: str, server: MariaDBServer, paths: list[Path], first_file: str,
             log_path: Path) -> Run:
    if side == "binrelay":
        cmds = [binrelay_cmd("dump", "--json", str(p)) for p in paths]
    elif side == "pmr":
        cmds = [[sys.executable, "-m", "bench.pmr_json", "--port", str(server.port),
                 "--file", first_file, "--server-id", str(PMR_SERVER_ID)]]
    else:
        cmds = [[ANCHOR, "-v", "--base64-output=decode-rows", *map(str, paths)]]
    out = Output(VERBOSE_OPS, line_start=True) if side == "mariadb-binlog" else Output(JSON_OPS)
    seconds, cpu = run_counted(cmds, out, log_path)
    run = Run(side, seconds, cpu, out)
    if side != "mariadb-binlog" and out.lines != run.rows:
        raise BenchError(f"{side} printed {out.lines} lines but {run.rows} row changes")
    return run


def _row(line: bytes) -> dict[str, Any]:
    obj = json.loads(line)
    return {k: obj[k] for k in ("schema", "table", "op", "before", "after")}


def check(runs: list[Run], *, compare_rows: bool = True) -> None:
    """Every run printed the same row changes per op; binrelay's first and last equal
    python-mysql-replication's (``compare_rows``: where its JSON of the values is the same)."""
    ref = runs[0]
    for run in runs:
        if run.out.ops != ref.out.ops:
            raise BenchError(f"{run.side} printed {run.out.ops} row changes, {ref.side}"
                             f" {ref.out.ops}")
    ours = next((r for r in runs if r.side == "binrelay"), None)
    pmr = next((r for r in runs if r.side == "pmr"), None)
    if ours and pmr and compare_rows:
        for which in ("first", "last"):
            a, b = _row(getattr(ours.out, which)), _row(getattr(pmr.out, which))
            if a != b:
                raise BenchError(f"the {which} row changes differ:\nbinrelay: {a}\n"
                                 f"python-mysql-replication: {b}")


TYPED_DDL = ("CREATE TABLE bench_types.t (id INT PRIMARY KEY, dt DATETIME(6), ts TIMESTAMP(3)"
             " NULL, d DATE, price DECIMAL(12,2), state ENUM('new','paid','shipped'),"
             " tags SET('a','b','c'), note VARCHAR(100), flag BIT(8))")
TYPED_FILL = ("INSERT INTO bench_types.t SELECT seq, '2024-06-15 12:00:00' - INTERVAL seq SECOND,"
              " '2024-06-15 12:00:00' - INTERVAL seq MINUTE, '2024-06-15' - INTERVAL seq % 1000"
              " DAY, seq * 1.25, 1 + seq % 3, seq % 8, CONCAT('note ', seq), seq % 256"
              " FROM bench_types.seq_1_to_{rows}")
TYPED_UPDATE = "UPDATE bench_types.t SET price = price + 1, state = 'paid' WHERE id % 2 = 0"


def typed_workload(server: MariaDBServer, rows: int) -> list[tuple[str, int]]:
    """A new binlog file holding a table of other column types: ``rows`` inserted by one
    INSERT ... SELECT, then every other row updated by one UPDATE (large rows events)."""
    before = {name for name, _size in server.binlog_files()}
    server.flush_logs()
    server.execute("CREATE DATABASE bench_types")
    server.execute(TYPED_DDL)
    server.execute(TYPED_FILL.format(rows=rows))
    server.execute(TYPED_UPDATE)
    want = settled_master_status(server)
    log(f"typed table: binlog settled at {want}")
    return [(name, size) for name, size in server.binlog_files() if name not in before]


def run_rounds(server: MariaDBServer, files: list[tuple[str, int]], rounds: int,
               log_path: Path, *, compare_rows: bool) -> list[Run]:
    """Every side ``rounds`` times on ``files`` (the last of the server's binlog files)."""
    paths = [server.binlog_path(name) for name, _size in files]
    runs: list[Run] = []
    for side in schedule(rounds):
        run = side_run(side, server, paths, files[0][0], log_path)
        runs.append(run)
        log(f"{side}: {run.rows:,} row changes in {run.seconds:.2f} s"
            f" ({run.rate / 1000:.1f} k rows/s, CPU {run.cpu:.2f} s,"
            f" {run.out.nbytes / MB:.0f} MB of output)")
        check(runs, compare_rows=compare_rows)
    if server.binlog_files()[-len(files):] != files:
        raise BenchError(f"the binlog changed during the runs: {files} ->"
                         f" {server.binlog_files()}")
    return runs


def schedule(rounds: int) -> list[str]:
    """Each round runs every side once, starting one side further on than the last."""
    order: list[str] = []
    for r in range(rounds):
        k = r % len(SIDES)
        order += [*SIDES[k:], *SIDES[:k]]
    return order


def runs_table(runs: list[Run], total: int) -> str:
    """Every run in order, then each side's medians (``total``: binlog bytes)."""
    counters = dict.fromkeys(SIDES, 0)
    rows: list[list[object]] = []
    for r in runs:
        counters[r.side] += 1
        rows.append([f"{NAMES[r.side]} #{counters[r.side]}", f"{r.seconds:.2f}",
                     f"{r.cpu:.2f}", f"{r.rate / 1000:.1f}", f"{total / r.seconds / MB:.1f}",
                     f"{r.out.nbytes / MB:.0f}"])
    for s in SIDES:
        side = [r for r in runs if r.side == s]
        seconds = median(r.seconds for r in side)
        rows.append([f"median {NAMES[s]}", f"{seconds:.2f}",
                     f"{median(r.cpu for r in side):.2f}",
                     f"{median(r.rate for r in side) / 1000:.1f}",
                     f"{total / seconds / MB:.1f}",
                     f"{median(r.out.nbytes for r in side) / MB:.0f}"])
    return md_table(["run (in order)", "s", "CPU s", "k rows/s", "binlog MB/s", "stdout MB"],
                    rows)


def typed_report(files: list[tuple[str, int]], runs: list[Run], rows: int) -> str:
    total = sum(size for _n, size in files)
    rate = {s: median(r.rate for r in runs if r.side == s) for s in SIDES}
    ops = runs[0].out.ops
    return f"""\
### Other column types

One table, `{TYPED_DDL.removeprefix("CREATE TABLE ")}`: {rows:,} rows
inserted by one `INSERT ... SELECT` from a sequence, then every other row updated by one
`UPDATE` (a new binlog file, {total:,} bytes; large rows events, many rows each). Row changes:
**{runs[0].rows:,}** ({ops['insert']:,} inserts, {ops['update']:,} updates), the same in every
run; binrelay {rate['binrelay'] / 1000:.1f} k rows/s, ratio
{rate['binrelay'] / rate['pmr']:.1f} to python-mysql-replication
({rate['pmr'] / 1000:.1f} k) and {rate['binrelay'] / rate['mariadb-binlog']:.2f} to
mariadb-binlog ({rate['mariadb-binlog'] / 1000:.1f} k). Only the counts are compared here
(python-mysql-replication's JSON of a SET or a BIT is not binrelay's).

{runs_table(runs, total)}
"""


def report(args: argparse.Namespace, facts: dict[str, str], work: Workload,
           files: list[tuple[str, int]], runs: list[Run], pmr: str, typed: str) -> str:
    total = sum(size for _n, size in files)
    by = {s: [r for r in runs if r.side == s] for s in SIDES}
    rate = {s: median(r.rate for r in by[s]) for s in SIDES}
    cpu_rate = {s: median(r.rows / r.cpu for r in by[s]) for s in SIDES}
    vs_pmr = rate["binrelay"] / rate["pmr"]
    vs_maria = rate["binrelay"] / rate["mariadb-binlog"]
    rows_total = runs[0].rows
    ops = runs[0].out.ops
    verdict_pmr = "met" if vs_pmr >= GOAL_PMR else "NOT met"
    verdict_maria = "met" if vs_maria >= GOAL_MARIADB else "NOT met"
    cmd = (f"python -m bench.dump_throughput --mib {args.mib:g} --rounds {args.rounds}"
           f" --typed-rows {args.typed_rows}")
    facts = dict(facts)
    facts["mariadb-binlog"] = facts.pop("anchor")
    facts.update({"python-mysql-replication": pmr, "load average at end": loadavg()})

    table = runs_table(runs, total)
    counts = ", ".join(f"{ops[op]:,} {op}s" for op in OPS)
    return f"""\
## Dump throughput: `binrelay dump --json` vs. python-mysql-replication and `mariadb-binlog -v`

`{cmd}`

Goals: binrelay's median rows/s ≥ {GOAL_PMR:.0f} × python-mysql-replication's (printing each
row as JSON) and ≥ {GOAL_MARIADB:.1f} × `mariadb-binlog -v --base64-output=decode-rows`'s ·
**{verdict_pmr}** against python-mysql-replication (ratio {vs_pmr:.1f}:
{rate['binrelay'] / 1000:.1f} k vs. {rate['pmr'] / 1000:.1f} k rows/s) ·
**{verdict_maria}** against mariadb-binlog (ratio {vs_maria:.2f}:
{rate['mariadb-binlog'] / 1000:.1f} k rows/s)

{facts_table(facts)}

Workload: sysbench `oltp_write_only`, {TABLES} tables × {TABLE_SIZE} rows, {THREADS} threads,
{work.seconds:.0f} s of runs: {work.transactions:,} transactions. Binlog: {len(files)} file(s),
{total:,} bytes ({total / MIB:.1f} MiB), ROW format, FULL row image and metadata, CRC32
checksums. Row changes: **{rows_total:,}** ({counts}), the same per operation in every run of
every side; binrelay's first and last row change equal python-mysql-replication's (schema,
table, op, before and after images, parsed).

{table}

By CPU time of each command (user + system, from its rusage) instead of wall time:
binrelay {cpu_rate['binrelay'] / 1000:.1f} k, python-mysql-replication
{cpu_rate['pmr'] / 1000:.1f} k, mariadb-binlog {cpu_rate['mariadb-binlog'] / 1000:.1f} k rows
per CPU-second (ratios {cpu_rate['binrelay'] / cpu_rate['pmr']:.1f} and
{cpu_rate['binrelay'] / cpu_rate['mariadb-binlog']:.2f}).

- binrelay: `python -m binrelay.cli.main dump --json FILE` (what `binrelay dump --json FILE`
  runs), CRC32 of every event checked, over the server's binlog file(s) in its datadir.
- python-mysql-replication: `python -m bench.pmr_json` (`bench/pmr_json.py`), its
  `BinLogStreamReader` as a replica over TCP on 127.0.0.1 (`server_id={PMR_SERVER_ID}`,
  `blocking=False`, from `{files[0][0]}` position 4, only WRITE/UPDATE/DELETE rows events,
  its default `verify_checksum=False`), `json.dumps({{"schema", "table", "op", "before",
  "after"}}, default=str)` per row written to `sys.stdout`. Its wall time includes waiting on
  mariadbd, which reads the file and sends it on the other core; its CPU time does not
  include the server's.
- mariadb-binlog: `{ANCHOR} -v --base64-output=decode-rows FILE`, MariaDB's C client, reading
  the same file(s); prints every event and, per row, a `###` pseudo-SQL line per column.
- Times: each command from spawn until it has exited and its stdout (a pipe of 1 MiB, read
  by the benchmark in 1 MiB reads, kept, and counted once the command is done) is at its
  end; interpreter start-up and imports included for both Python sides. Rounds alternate,
  each starting one side further on; medians are over each side's {args.rounds} runs, ratios
  are of median rows/s.
- Not covered: binrelay prints integers, YEAR, FLOAT/DOUBLE, DECIMAL, BIT, ENUM, SET, DATE,
  DATETIME, TIMESTAMP, TIME, UTF-8 and ASCII text and binary strings in C
  (`_speedups.json_rows`); a table with any other column type in an image (JSON, VECTOR,
  pre-5.6 temporal forms, other multi-byte charsets) has its rows printed by the Python
  specification (`rows/jsondump.py`'s `json_line`), about 10 times slower, and that is not
  measured here (nor FLOAT/DOUBLE, TIME or BINARY columns). Nor are wide rows,
  MySQL servers, compressed or TRANSACTION_PAYLOAD events, a relay directory as the target,
  more than one binlog file (unless `--mib` passes `max_binlog_size`) and `binrelay dump`
  without `--json` (the event listing). The JSON of the two Python sides is not the same
  text (binrelay's adds file, positions and GTID per row); only the row changes are
  compared. sysbench's first run takes 10 seconds, so the binlog can be larger than `--mib`.

{typed}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=128.0,
                        help="binlog size to generate, MiB (default 128)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each side (default 3)")
    parser.add_argument("--typed-rows", type=int, default=200_000,
                        help="rows of the table of other column types (default 200000; 0: no"
                             " such table)")
    parser.add_argument("--no-report", action="store_true",
                        help="print the section but leave BENCHMARKS.md alone")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work dir and the server's datadir (with the binlog)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    pmr = pmr_version()

    workdir = make_workdir(SECTION)
    log(f"work dir {workdir}")
    server = MariaDBServer(workdir / "srv", server_id=1, template=default_template())
    try:
        server.start()
        facts = machine_facts(server)
        work = generate(server, int(args.mib * MIB))
        want = settled_master_status(server)
        log(f"binlog settled at {want}")
        files = server.binlog_files()
        total = sum(size for _n, size in files)
        log(f"binlog: {len(files)} file(s), {total / MIB:.1f} MiB")
        runs = run_rounds(server, files, args.rounds, workdir / "commands.log",
                          compare_rows=True)
        typed = ""
        if args.typed_rows:
            typed_files = typed_workload(server, args.typed_rows)
            typed_runs = run_rounds(server, typed_files, args.rounds, workdir / "commands.log",
                                    compare_rows=False)
            typed = typed_report(typed_files, typed_runs, args.typed_rows)

        body = report(args, facts, work, files, runs, pmr, typed)
        print(body)
        if not args.no_report:
            update_section(SECTION, body)
            log("BENCHMARKS.md updated")
    finally:
        server.cleanup(keep_files=args.keep)
        drop_workdir(workdir, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
