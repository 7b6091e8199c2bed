"""A DDL-rich range: ``binrelay sync --until-caught-up`` vs. the DDL themselves and a replica.

    .venv/bin/python -m bench.sync_ddl [--ddl 1000] [--rows-every 0] [--rounds 3]

A sandbox MariaDB upstream runs ``--ddl`` DDL statements one after the other from one
client, the way a migration does: per table ``CREATE TABLE``, ``ALTER TABLE ... ADD
COLUMN``, ``CREATE INDEX``, ``RENAME TABLE`` and, for every other table, ``TRUNCATE`` or
``DROP``; with ``--rows-every K`` an ``INSERT`` of a few rows follows every K-th DDL, so
DML batches sit between the barriers.  The client's own time for the DDL statements
(their round trips, the INSERTs left out) is "the DDL themselves".

Then, ``--rounds`` times, alternating, each into a fresh empty sandbox downstream with the
same options (binlog off, MariaDB's default durability):

* the same statements from one client, the DDL timed as on the upstream: "the DDL
  themselves" on a server like the downstreams, each round (the anchor of the ratio; the
  upstream's one run, with its binlog, is shown too);
* a native MariaDB replica (``slave_parallel_threads = 0``): its IO thread fetches the
  range first (not timed), then it is timed from ``START SLAVE SQL_THREAD`` to the range's
  end;
* ``binrelay sync --until-caught-up`` (``local[2]``, 4 tasks) from a relay dir filled
  beforehand (not timed), timed as a whole command.

After every run each table's ``SHOW CREATE TABLE`` and ``CHECKSUM TABLE`` must equal the
upstream's, or the benchmark fails.  Goal (issue 14): the sync applies the range in about
the time of the DDL themselves (planning cost proportional to the batch: a barrier does not
re-scan the look-ahead window).

Writes its section of BENCHMARKS.md (unless ``--no-report``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    MIB,
    REPO_ROOT,
    BenchError,
    binrelay_cmd,
    facts_table,
    log,
    machine_facts,
    make_workdir,
    md_table,
    median,
    run_relay,
    settled_master_status,
    tail,
    update_section,
    verify_relay,
    write_config,
)
from bench.sync_catchup import (
    RUN_TIMEOUT,
    change_master,
    downstream_server,
    executed,
    fetched,
    init_sync_checkpoint,
    sync_config,
    wait_replica,
)
from binrelay.position import Position
from binrelay.relay.layout import read_index
from binrelay.testing.sandbox import MariaDBServer, default_template

SECTION = "sync_ddl"
SCHEMA = "ddlbench"
_APPLIED = re.compile(r"applied (\d+) batch\(es\): (\d+) row change\(s\), (\d+) DDL"
                      r" statement\(s\) in ([\d.]+) s")


def statements(ddl: int, rows_every: int) -> list[tuple[bool, str]]:
    """(is DDL, statement) in upstream order: ``ddl`` DDL statements, with an INSERT after
    every ``rows_every``-th (0: none)."""
    out: list[tuple[bool, str]] = [(True, f"CREATE DATABASE `{SCHEMA}`")]
    i = 0
    while sum(d for d, _ in out) < ddl:
        t, r = f"`{SCHEMA}`.`t{i}`", f"`{SCHEMA}`.`r{i}`"
        per_table = [
            f"CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(32))",
            f"ALTER TABLE {t} ADD COLUMN c INT NOT NULL DEFAULT 7",
            f"CREATE INDEX a_idx ON {t} (a)",
            f"RENAME TABLE {t} TO {r}",
        ]
        if i % 2:
            per_table.append(f"TRUNCATE TABLE {r}" if i % 4 == 1 else f"DROP TABLE {r}")
        for sql in per_table:
            out.append((True, sql))
            if rows_every and sum(d for d, _ in out) % rows_every == 0:
                target = r if sql.startswith(("RENAME", "TRUNCATE")) else t
                if "DROP" not in sql:
                    out.append((False, f"INSERT INTO {target} (id, a, b) VALUES"
                                       f" ({len(out)}, {i}, 'x'), ({len(out) + 1}, {i}, 'y')"))
            if sum(d for d, _ in out) >= ddl:
                break
        i += 1
    return out


def run_statements(server: MariaDBServer, todo: list[tuple[bool, str]]) -> float:
    """Run them in order on one connection; the seconds the DDL took (round trips)."""
    ddl_seconds = 0.0
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            for is_ddl, sql in todo:
                t0 = time.perf_counter()
                cur.execute(sql)
                if is_ddl:
                    ddl_seconds += time.perf_counter() - t0
    finally:
        conn.close()
    return ddl_seconds


def snapshot(server: MariaDBServer) -> dict[str, tuple[str, int]]:
    """Every table of the schema: its CREATE statement and CHECKSUM."""
    out: dict[str, tuple[str, int]] = {}
    for (name,) in server.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
            (SCHEMA,)):
        create = server.execute(f"SHOW CREATE TABLE `{SCHEMA}`.`{name}`")[0][1]
        checksum = server.execute(f"CHECKSUM TABLE `{SCHEMA}`.`{name}`")[0][1]
        out[name] = (create, int(checksum))
    return out


@dataclass
class Run:
    side: str
    seconds: float
    apply_seconds: float | None = None
    batches: int = 0


def run_direct(workdir: Path, todo: list[tuple[bool, str]], want: dict,
               server_id: int) -> Run:
    """The statements from one client on a server like the downstreams; the DDL's time."""
    server = downstream_server(workdir, f"direct-{server_id}", server_id, "default")
    try:
        seconds = run_statements(server, todo)
        if snapshot(server) != want:
            raise BenchError("the tables the statements left differ from the upstream's")
    finally:
        server.cleanup()
    log(f"the DDL themselves on a downstream: {seconds:.2f} s")
    return Run("direct", seconds)


def run_replica(workdir: Path, upstream: MariaDBServer, start: tuple[str, int],
                end: tuple[str, int], want: dict, server_id: int) -> Run:
    replica = downstream_server(workdir, f"replica-{server_id}", server_id, "default")
    try:
        change_master(replica, upstream, start, 0)
        replica.execute("START SLAVE IO_THREAD")
        wait_replica(replica, fetched(end), poll=0.2, timeout=RUN_TIMEOUT,
                     what="fetch the binlog")
        t0 = time.perf_counter()
        replica.execute("START SLAVE SQL_THREAD")
        seconds = wait_replica(replica, executed(end), poll=0.02, timeout=RUN_TIMEOUT,
                               what="apply the binlog") - t0
        if snapshot(replica) != want:
            raise BenchError("the replica's tables differ from the upstream's")
        replica.execute("STOP SLAVE")
    finally:
        replica.cleanup()
    log(f"native replica: {seconds:.2f} s")
    return Run("replica", seconds)


def run_sync(workdir: Path, upstream: MariaDBServer, relay_dir: Path, start: Position,
             want: dict, server_id: int, **sync_keys: object) -> Run:
    downstream = downstream_server(workdir, f"sync-{server_id}", server_id, "default")
    log_path = workdir / f"sync-{server_id}.log"
    try:
        init_sync_checkpoint(downstream, start)
        config = sync_config(workdir / f"sync-{server_id}.toml", upstream, relay_dir,
                             downstream, **sync_keys)
        with log_path.open("wb") as out:
            t0 = time.perf_counter()
            proc = subprocess.run(binrelay_cmd("sync", "--config", str(config),
                                               "--until-caught-up"),
                                  cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                  stderr=subprocess.STDOUT, check=False, timeout=RUN_TIMEOUT)
            seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise BenchError(f"binrelay sync exited with {proc.returncode}:\n{tail(log_path)}")
        m = _APPLIED.search(log_path.read_text(errors="replace"))
        if not m:
            raise BenchError(f"no 'applied' line in the sync's output:\n{tail(log_path)}")
        if snapshot(downstream) != want:
            raise BenchError("binrelay's downstream tables differ from the upstream's")
    finally:
        downstream.cleanup()
    log(f"binrelay sync: {seconds:.2f} s (its own apply {float(m[4]):.2f} s,"
        f" {m[1]} batches)")
    return Run("binrelay", seconds, float(m[4]), int(m[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddl", type=int, default=1000, help="DDL statements (default 1000)")
    parser.add_argument("--rows-every", type=int, default=0,
                        help="an INSERT after every K-th DDL (default 0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--driver-batch-mib", type=float, default=None,
                        help="[sync] driver-batch-bytes in MiB (default: the sync's default)")
    parser.add_argument("--no-report", action="store_true",
                        help="print the section but leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)

    workdir = make_workdir(SECTION)
    upstream = MariaDBServer(workdir / "upstream", server_id=1, template=default_template(),
                             extra_args=("--innodb-flush-log-at-trx-commit=1",
                                         "--innodb-doublewrite=1"))
    try:
        upstream.start()
        facts = machine_facts(upstream)
        start = settled_master_status(upstream)
        todo = statements(args.ddl, args.rows_every)
        ddl_count = sum(d for d, _ in todo)
        ddl_seconds = run_statements(upstream, todo)
        end = settled_master_status(upstream)
        want = snapshot(upstream)
        log(f"upstream: {ddl_count} DDL in {ddl_seconds:.2f} s ({len(todo) - ddl_count}"
            f" INSERTs besides), {len(want)} tables left")
        relay_dir = workdir / "relay"
        relay_cfg = write_config(workdir / "relay.toml", upstream, relay_dir)
        run_relay(relay_cfg, relay_dir, end, workdir / "relay.log", poll=0.05,
                  timeout=RUN_TIMEOUT)
        verify_relay(upstream, relay_dir)
        position = Position(read_index(relay_dir)[-1], start[0], start[1])
        ids = iter(range(2, 100))
        sync_keys: dict[str, object] = {}
        if args.driver_batch_mib is not None:
            sync_keys["driver-batch-bytes"] = int(args.driver_batch_mib * MIB)
        runs: list[Run] = []
        for _round in range(args.rounds):
            runs.append(run_direct(workdir, todo, want, next(ids)))
            runs.append(run_replica(workdir, upstream, start, end, want, next(ids)))
            runs.append(run_sync(workdir, upstream, relay_dir, position, want, next(ids),
                                 **sync_keys))
        body = report(args, facts, ddl_count, len(todo) - ddl_count, ddl_seconds, runs)
        print(body)
        if not args.no_report:
            update_section(SECTION if not args.rows_every else f"{SECTION}_rows", body)
            log("BENCHMARKS.md updated")
    finally:
        upstream.cleanup()
        with contextlib.suppress(OSError):
            shutil.rmtree(workdir)
    return 0


def report(args: argparse.Namespace, facts: dict[str, str], ddl: int, inserts: int,
           ddl_seconds: float, runs: list[Run]) -> str:
    direct = [r.seconds for r in runs if r.side == "direct"]
    replica = [r.seconds for r in runs if r.side == "replica"]
    sync = [r.seconds for r in runs if r.side == "binrelay"]
    applied = [r.apply_seconds or 0.0 for r in runs if r.side == "binrelay"]
    rows = [["the DDL themselves (upstream client, round trips; binlog on, one run)",
             f"{ddl_seconds:.2f}", "–", f"{ddl / ddl_seconds:.0f}"],
            ["**the DDL themselves on a downstream** (one client, round trips)",
             f"{median(direct):.2f}", " / ".join(f"{s:.2f}" for s in direct),
             f"{ddl / median(direct):.0f}"],
            ["native replica, serial (SQL thread)", f"{median(replica):.2f}",
             " / ".join(f"{s:.2f}" for s in replica), f"{ddl / median(replica):.0f}"],
            ["**binrelay sync --until-caught-up** (whole command)", f"{median(sync):.2f}",
             " / ".join(f"{s:.2f}" for s in sync), f"{ddl / median(sync):.0f}"],
            ["binrelay sync, its own apply loop", f"{median(applied):.2f}",
             " / ".join(f"{s:.2f}" for s in applied), f"{ddl / median(applied):.0f}"]]
    batches = sorted({r.batches for r in runs if r.side == "binrelay"})
    between = " with rows between" if args.rows_every else ""
    option = (f" --driver-batch-mib {args.driver_batch_mib:g}"
              if args.driver_batch_mib is not None else "")
    return f"""\
## A DDL-rich range{between}: `binrelay sync` vs. the DDL themselves

`python -m bench.sync_ddl --ddl {args.ddl} --rows-every {args.rows_every} --rounds \
{args.rounds}{option}` · goal (issue 14): the range applies in about the time of the DDL themselves.
Ratio binrelay (its own apply loop) / the DDL themselves on a downstream:
**{median(applied) / median(direct):.2f}**; native replica / the same:
**{median(replica) / median(direct):.2f}**; whole command / native replica:
**{median(sync) / median(replica):.2f}**. Over the DDL themselves, per DDL (what a ratio
hides when the machine's speed moves between runs): binrelay's apply loop
**{1000 * (median(applied) - median(direct)) / ddl:+.2f} ms**, the native replica
**{1000 * (median(replica) - median(direct)) / ddl:+.2f} ms**.

{facts_table(facts)}

{ddl} DDL statements ({inserts} INSERTs between them), one client, autocommit: per table
CREATE TABLE, ALTER TABLE ADD COLUMN, CREATE INDEX, RENAME TABLE, and for every other table
TRUNCATE or DROP. Every run into a fresh empty downstream (binlog off, MariaDB's default
durability); after each, every table's `SHOW CREATE TABLE` and `CHECKSUM TABLE` equalled
the upstream's. {args.rounds} rounds, the DDL themselves, replica, sync, medians.

{md_table(["run", "median s", "rounds s", "DDL/s"], rows)}

- binrelay's batches: {", ".join(map(str, batches))} (a run of DDL is one batch, up to 64
  statements and up to 64 KiB of the rows between them: one checkpoint commit;
  every DDL here is evident (the server's answer to running it again says whether it
  ran), so no journal row holds a catalog print, and they go up to 8 in one script while
  the driver decodes the next (rows between them end a script), each after the first
  retimed rather than given its whole context again; a journal row, committed in the
  DDL's own script before it runs, together with the rows before it, only for the run's
  first DDL and one that could take away what one since the last row made (here each
  RENAME, and the DROP or TRUNCATE of the table it made: ~350 rows for 1,000 DDL;
  `ddl_journal.evidence_kept`); the plain CREATE TABLE and ADD COLUMN leave the write
  rules as they were, the RENAME makes them be read again for the rows after it). The
  whole command includes the interpreter's start; a range of DDL and small rows never
  starts Spark.
- What the rest is: a journal row's durable commit (its fsync, before the DDL's own) costs
  ~0.4 ms; it lets a replay tell whether a DDL ran after a crash; the native replica's own
  bookkeeping of a DDL costs it no measurable time here.
- Not covered: DDL on large tables (the statement's own time dominates there, for every
  side alike), MySQL upstreams, a parallel replica, DDL whose text cannot go in a script
  (a line comment, a semicolon, a backslash: one round trip each, as before).
"""


if __name__ == "__main__":
    raise SystemExit(main())
