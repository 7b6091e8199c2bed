"""Sync lag: upstream commit to downstream visibility, ``binrelay sync`` vs. a native replica.

    .venv/bin/python -m bench.sync_lag [--seconds 30] [--rates 0 1000]

Three sandbox MariaDB servers: the upstream, binrelay's downstream and a native replica
(``slave_parallel_threads = 0``, MariaDB's default), the two downstreams with their binlog
off.  ``binrelay relay`` (default ``relay-sync-interval``) and ``binrelay sync`` (streaming,
no ``--until-caught-up``; ``local[2]``, 4 tasks, default batch limits) run as processes,
the replica replicates the same upstream from its first binlog; both start from empty and
first catch up with ``sysbench prepare`` (4 tables × 10000 rows) and a heartbeat table
``bench.hb``.

Then, once per ``--rates`` value and per arrangement (``--arrangements``: binrelay alone,
the replica alone, both at once), sysbench ``oltp_write_only`` runs with 2 threads for
``--seconds`` (``--rate``, 0 = unthrottled) while a probe commits
``REPLACE INTO bench.hb VALUES (1, <counter>, NOW(6))`` on the upstream every 100 ms (its
commit time: when the autocommit statement returned) and one thread per downstream reads
``bench.hb`` every 10 ms; a counter's visibility time is the return of the first read that
shows it or a later one.  Lag = visibility time − commit time, on one clock.  "Alone" means
the other side is paused for the phase (the replica: ``STOP SLAVE``; binrelay: its relay
and sync stopped with SIGTERM) and catches up afterwards: on a 2-core machine each side's
CPU is otherwise the other's lag.  After each phase the measured sides must show the last
counter, and at the end ``CHECKSUM TABLE`` of every table must be equal on all three
servers, or the benchmark fails instead of reporting.  A DDL on a side table runs every
5 s during each phase.  Goal (issue 14): binrelay's p99 ≤ 0.2 s, unthrottled, with the
native replica applying at the same time.

Writes its section of BENCHMARKS.md (unless ``--no-report``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench import sync_catchup
from bench.common import (
    MIB,
    REPO_ROOT,
    BenchError,
    binrelay_cmd,
    caught_up,
    drop_workdir,
    facts_table,
    loadavg,
    log,
    machine_facts,
    make_workdir,
    md_table,
    tail,
    tree_cpu_seconds,
    update_section,
    write_config,
)
from bench.relay_throughput import TABLE_SIZE, TABLES
from bench.sync_catchup import (
    DOWNSTREAM_ARGS,
    MASTER,
    PIPELINE,
    TASKS,
    BatchLine,
    batch_lines,
    change_master,
    check_slave_errors,
    slave_status,
    sync_config,
    wait_for_quiet,
)
from binrelay.apply.checkpoint import read_checkpoint
from binrelay.config.schema import SCHEMA
from binrelay.testing.sandbox import (
    MariaDBServer,
    default_template,
    sysbench_prepare,
    sysbench_run_background,
)

SECTION = "sync_lag"
RELAY_SYNC_INTERVAL = SCHEMA[""]["relay-sync-interval"].default
GOAL = 0.2
THREADS = 2
BEAT = 0.1
#: A DDL on a side table every this many seconds while the workload runs (issue 14).
DDL_EVERY = 5.0
POLL = 0.01
CATCH_UP_TIMEOUT = 900.0
HB_DDL = ("CREATE TABLE bench.hb (id INT PRIMARY KEY, seq BIGINT NOT NULL,"
          " at DATETIME(6) NOT NULL) ENGINE=InnoDB")
TICK_DDL = "CREATE TABLE bench.tick (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"


# --------------------------------------------------------------------------- probe


class Watcher(threading.Thread):
    """Reads ``bench.hb`` on one downstream every ``POLL`` s; records when each counter
    value is first visible (a jump over several values makes them all visible then)."""

    def __init__(self, name: str, server: MariaDBServer) -> None:
        super().__init__(name=f"watch-{name}", daemon=True)
        self.label = name
        self.server = server
        self.visible: dict[int, float] = {}
        self.last = -1
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with contextlib.closing(self.server.connect()) as conn, conn.cursor() as cur:
                while not self.stop.is_set():
                    try:
                        cur.execute("SELECT seq FROM bench.hb WHERE id = 1")
                        row = cur.fetchone()
                    except Exception as exc:
                        if "doesn't exist" not in str(exc):  # not replicated yet
                            raise
                        row = None
                    now = time.perf_counter()
                    if row is not None and int(row[0]) > self.last:
                        for seq in range(self.last + 1, int(row[0]) + 1):
                            self.visible[seq] = now
                        self.last = int(row[0])
                    time.sleep(POLL)
        except BaseException as exc:
            self.error = exc


class Probe(threading.Thread):
    """Commits an increasing counter on the upstream every ``BEAT`` s (fixed cadence)."""

    def __init__(self, server: MariaDBServer, first: int) -> None:
        super().__init__(name="probe", daemon=True)
        self.server = server
        self.seq = first - 1
        self.commits: dict[int, float] = {}
        self.round_trips: list[float] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with contextlib.closing(self.server.connect()) as conn, conn.cursor() as cur:
                start = time.perf_counter()
                n = 0
                while not self.stop.is_set():
                    self.seq += 1
                    sent = time.perf_counter()
                    cur.execute("REPLACE INTO bench.hb VALUES (1, %s, NOW(6))", (self.seq,))
                    acked = time.perf_counter()
                    self.commits[self.seq] = acked
                    self.round_trips.append(acked - sent)
                    n += 1
                    time.sleep(max(0.0, start + n * BEAT - time.perf_counter()))
        except BaseException as exc:
            self.error = exc


class DdlTicker(threading.Thread):
    """A DDL on ``bench.tick`` every ``DDL_EVERY`` s: a column added, then dropped."""

    def __init__(self, server: MariaDBServer) -> None:
        super().__init__(name="ddl-ticker", daemon=True)
        self.server = server
        self.count = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with contextlib.closing(self.server.connect()) as conn, conn.cursor() as cur:
                while not self.stop.wait(DDL_EVERY):
                    cur.execute("ALTER TABLE bench.tick DROP COLUMN w" if self.count % 2 else
                                "ALTER TABLE bench.tick ADD COLUMN w INT")
                    self.count += 1
                if self.count % 2:
                    cur.execute("ALTER TABLE bench.tick DROP COLUMN w")
                    self.count += 1
        except BaseException as exc:
            self.error = exc


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass
class Phase:
    rate: int
    arrangement: str  # "binrelay", "replica" or "both": who applies during the phase
    seconds: float
    transactions: int
    lags: dict[str, list[float]] = field(default_factory=dict)
    #: how long after the workload ended each side reached the upstream's end position
    drain: dict[str, float] = field(default_factory=dict)
    batches: list[BatchLine] = field(default_factory=list)  #: sync batches in the phase
    probe_rtt_ms: float = 0.0
    note: str = ""
    #: CPU seconds each process (with its descendants) used while sysbench ran.
    cpu: dict[str, float] = field(default_factory=dict)
    round: int = 1  #: which of ``--rounds`` (1 when there is one)
    rounds: int = 1


# --------------------------------------------------------------------------- processes


def spawn(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """A binrelay service, in a session of its own as a deployed one runs (a systemd unit,
    an operator's shell), as each sandbox server does: with the kernel's autogroup on, a
    session's processes share one CPU weight, and in this benchmark's session sysbench and
    the probe are the application."""
    with log_path.open("ab") as out:
        return subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(proc: subprocess.Popen[bytes], name: str, log_path: Path,
                 timeout: float = 120.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise BenchError(f"{name} ignored SIGTERM for {timeout:.0f} s (killed); log:\n"
                             f"{tail(log_path)}") from None
    return int(proc.returncode)


def check_alive(procs: dict[str, tuple[subprocess.Popen[bytes], Path]]) -> None:
    for name, (proc, log_path) in procs.items():
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with {proc.returncode}; log:\n{tail(log_path)}")


def all_checksums(server: MariaDBServer) -> dict[str, int]:
    names = [f"sbtest.sbtest{i}" for i in range(1, TABLES + 1)] + ["bench.hb", "bench.tick"]
    return {n: int(server.execute(f"CHECKSUM TABLE {n}")[0][1]) for n in names}


def wait_converged(upstream: MariaDBServer, downstreams: dict[str, MariaDBServer],
                   procs: dict[str, tuple[subprocess.Popen[bytes], Path]],
                   replica: MariaDBServer, timeout: float) -> dict[str, int]:
    want = all_checksums(upstream)
    deadline = time.monotonic() + timeout
    while True:
        check_alive(procs)
        check_slave_errors(slave_status(replica))
        got = {}
        for name, server in downstreams.items():
            try:
                got[name] = all_checksums(server)
            except Exception:  # tables not there yet
                got[name] = {}
        if all(g == want for g in got.values()):
            return want
        if time.monotonic() > deadline:
            raise BenchError(f"the downstreams did not converge in {timeout:.0f} s:"
                             f" upstream {want}, downstreams {got}")
        time.sleep(0.5)


# --------------------------------------------------------------------------- who runs


ARRANGEMENTS = {"binrelay": ("binrelay",), "replica": ("replica",),
                "both": ("binrelay", "replica")}


class Sides:
    """Starts and pauses the two sides: binrelay (its relay and sync processes) and the
    native replica (its slave threads)."""

    def __init__(self, workdir: Path, relay_cfg: Path, sync_cfg: Path, relay_dir: Path,
                 upstream: MariaDBServer, replica: MariaDBServer) -> None:
        self.relay_cfg, self.sync_cfg, self.replica = relay_cfg, sync_cfg, replica
        self.relay_dir, self.upstream = relay_dir, upstream
        self.relay_log, self.sync_log = workdir / "relay.log", workdir / "sync.log"
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self.replica_running = False

    def run(self, names: tuple[str, ...]) -> None:
        if "binrelay" in names and "binrelay sync" not in self.procs:
            self.procs["binrelay relay"] = (
                spawn(binrelay_cmd("relay", "--config", str(self.relay_cfg)),
                      self.relay_log), self.relay_log)
            # The sync needs a relay dir to start on: let the relay catch up first.
            want = self.upstream.master_status()
            deadline = time.monotonic() + CATCH_UP_TIMEOUT
            while not caught_up(self.relay_dir, want):
                check_alive(self.procs)
                if time.monotonic() > deadline:
                    raise BenchError(f"the relay did not reach {want}; log:\n"
                                     f"{tail(self.relay_log)}")
                time.sleep(0.1)
            # The log is appended to: only this process's lines count.
            logged = self.sync_log.stat().st_size if self.sync_log.exists() else 0
            self.procs["binrelay sync"] = (
                spawn(binrelay_cmd("sync", "--config", str(self.sync_cfg)), self.sync_log),
                self.sync_log)
            # A deployed sync runs for days: measure it warm (Spark up, Python workers
            # started), not its start-up, which burns both cores for seconds.
            deadline = time.monotonic() + CATCH_UP_TIMEOUT
            while b'msg="spark ready"' not in self.sync_log.read_bytes()[logged:]:
                check_alive(self.procs)
                if time.monotonic() > deadline:
                    raise BenchError(f"the sync's Spark was not up in {CATCH_UP_TIMEOUT:.0f} s;"
                                     f" log:\n{tail(self.sync_log)}")
                time.sleep(0.2)
        if "binrelay" not in names:
            self.stop_binrelay()
        if ("replica" in names) != self.replica_running:
            self.replica.execute("START SLAVE" if "replica" in names else "STOP SLAVE")
            self.replica_running = "replica" in names

    def stop_binrelay(self) -> None:
        for name in ("binrelay sync", "binrelay relay"):
            if name in self.procs:
                proc, path = self.procs.pop(name)
                rc = stop_process(proc, name, path)
                if rc != 0:
                    raise BenchError(f"{name} exited with {rc} on SIGTERM; log:\n{tail(path)}")


def applied_positions(replica: MariaDBServer, conn: object, names: tuple[str, ...]
                      ) -> dict[str, tuple[str, int] | None]:
    """Upstream binlog position each side has applied up to: the replica's
    ``Exec_Master_Log_Pos``, binrelay's checkpoint (read on ``conn``, only when it runs)."""
    status = slave_status(replica)
    check_slave_errors(status)
    cp = read_checkpoint(conn, PIPELINE) if "binrelay" in names else None
    return {"replica": (status["Relay_Master_Log_File"], int(status["Exec_Master_Log_Pos"] or 0)),
            "binrelay": (cp.position.binlog_name, cp.position.binlog_pos) if cp else None}


def wait_caught_up(upstream: MariaDBServer, downstream: MariaDBServer, sides: Sides,
                   names: tuple[str, ...]) -> None:
    """Until the running sides have applied everything the upstream has (a paused side
    catches up before it is measured again)."""
    end = upstream.master_status()
    deadline = time.monotonic() + CATCH_UP_TIMEOUT
    with contextlib.closing(downstream.connect(autocommit=False)) as conn:
        while True:
            check_alive(sides.procs)
            at = applied_positions(sides.replica, conn, names)
            if all(at[n] == end for n in names):
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{names} did not reach {end} in {CATCH_UP_TIMEOUT:.0f} s")
            time.sleep(0.1)


# --------------------------------------------------------------------------- one phase


def run_phase(upstream: MariaDBServer, downstream: MariaDBServer, all_watchers: dict[str, Watcher],
              rate: int, arrangement: str, seconds: float, sides: Sides,
              trace: Path | None = None) -> Phase:
    names = ARRANGEMENTS[arrangement]
    sides.run(names)
    wait_caught_up(upstream, downstream, sides, names)
    procs, replica, sync_log = sides.procs, sides.replica, sides.sync_log
    watchers = {n: all_watchers[n] for n in names}
    note = wait_for_quiet(f"the {rate or 'unthrottled'} tps phase")
    first = max(w.last for w in watchers.values()) + 1
    probe = Probe(upstream, first)
    ticker = DdlTicker(upstream)
    epoch0 = time.time()
    probe.start()
    ticker.start()
    log(f"phase: sysbench oltp_write_only, {THREADS} threads, {seconds:.0f} s,"
        f" {'unthrottled' if not rate else f'{rate} tps'}, applying: {' and '.join(names)}")
    roots = {"upstream": upstream.pid}
    if "binrelay" in names:
        roots["binrelay's downstream"] = downstream.pid
        roots["binrelay sync (driver, JVM, Python workers)"] = procs["binrelay sync"][0].pid
        roots["binrelay relay"] = procs["binrelay relay"][0].pid
    if "replica" in names:
        roots["native replica"] = replica.pid
    roots = {k: v for k, v in roots.items() if v}
    cpu0 = tree_cpu_seconds(roots)
    t0 = time.perf_counter()
    with sysbench_run_background(upstream, tables=TABLES, table_size=TABLE_SIZE,
                                 threads=THREADS, time=seconds, prepare=False,
                                 extra=[f"--rate={rate}"] if rate else []) as work:
        while work.is_running:
            check_alive(procs)
            if probe.error or ticker.error:
                raise BenchError(f"probe or DDL failed: {probe.error or ticker.error!r}")
            time.sleep(0.2)
        # The relay and sync run on (check_alive), so their trees are still there to read.
        cpu1 = tree_cpu_seconds(roots)
        out = work.check().stdout
    probe.stop.set()
    ticker.stop.set()
    probe.join(timeout=10)
    ticker.join(timeout=30)
    if ticker.error:
        raise BenchError(f"DDL failed: {ticker.error!r}")
    ended = time.perf_counter()
    elapsed = ended - t0
    m = re.search(r"transactions:\s+(\d+)", out)
    transactions = int(m[1]) if m else 0
    last = probe.seq
    end = upstream.master_status()  # nothing writes any more
    log(f"sysbench: {transactions} transactions in {elapsed:.0f} s; probe wrote"
        f" {first}..{last}; upstream at {end}")
    drain: dict[str, float] = {}
    deadline = time.monotonic() + CATCH_UP_TIMEOUT
    with contextlib.closing(downstream.connect(autocommit=False)) as conn:
        while len(drain) < len(watchers) or any(w.last < last for w in watchers.values()):
            check_alive(procs)
            now = time.perf_counter()
            at = applied_positions(replica, conn, names)
            for name, w in watchers.items():
                if w.error:
                    raise BenchError(f"watcher {name} failed: {w.error!r}")
                if name not in drain and at[name] == end:
                    drain[name] = now - ended
                    log(f"{name}: at the upstream's end {drain[name]:.1f} s after the"
                        f" workload ended")
            if time.monotonic() > deadline:
                raise BenchError(f"not every downstream reached {end} / counter {last} within"
                                 f" {CATCH_UP_TIMEOUT:.0f} s: {drain}")
            time.sleep(0.05)
    lags = {name: [w.visible[s] - probe.commits[s] for s in range(first, last + 1)]
            for name, w in watchers.items()}
    epoch1 = time.time()
    if trace is not None:
        write_trace(trace, arrangement, rate, probe.commits, watchers, first, last)
    batches = [b for b in batch_lines(sync_log.read_text(errors="replace"))
               if epoch0 <= b.at <= epoch1] if "binrelay" in names else []
    for name, values in lags.items():
        log(f"{name}: p50 {pct(values, 50):.2f} s, p99 {pct(values, 99):.2f} s, max"
            f" {max(values):.2f} s over {len(values)} heartbeats")
    cpu = {name: cpu1[name] - cpu0[name] for name in cpu1 if name in cpu0}
    return Phase(rate, arrangement, elapsed, transactions, lags, drain, batches,
                 1000 * sorted(probe.round_trips)[len(probe.round_trips) // 2], note, cpu)


def write_trace(path: Path, arrangement: str, rate: int, commits: dict[int, float],
                watchers: dict[str, Watcher], first: int, last: int) -> None:
    """Appends one line per heartbeat: phase, counter, commit time and each side's
    visibility time, in epoch seconds (the sync's log lines are in UTC epoch)."""
    to_epoch = time.time() - time.perf_counter()
    names = sorted(watchers)
    with path.open("a") as out:
        if out.tell() == 0:
            out.write("\t".join(["phase", "seq", "committed", *names]) + "\n")
        for seq in range(first, last + 1):
            cells = [f"{arrangement}@{rate}", str(seq), f"{commits[seq] + to_epoch:.6f}",
                     *(f"{watchers[n].visible[seq] + to_epoch:.6f}" for n in names)]
            out.write("\t".join(cells) + "\n")


# --------------------------------------------------------------------------- report


def _kind_label(ph: Phase) -> str:
    return f"{'unthrottled' if not ph.rate else f'--rate={ph.rate}'}, {_ALONE[ph.arrangement]}"


def _phase_label(ph: Phase) -> str:
    return _kind_label(ph) + (f", round {ph.round}" if ph.rounds > 1 else "")


_ALONE = {"binrelay": "binrelay alone", "replica": "replica alone", "both": "both at once"}


def _judged(phases: list[Phase]) -> list[Phase]:
    """The phases (one a round) the goal is judged on: the first rate, binrelay with the
    native replica applying at the same time (issue 14), else binrelay alone."""
    first_rate = [ph for ph in phases if ph.rate == phases[0].rate]
    arrangement = "both" if any(ph.arrangement == "both" for ph in first_rate) else "binrelay"
    return [ph for ph in first_rate if ph.arrangement == arrangement]


def _median_p99(phases: list[Phase], side: str) -> tuple[float, str]:
    """The median over rounds of ``side``'s p99, and the rounds' values when there are
    several."""
    values = [pct(ph.lags[side], 99) for ph in phases]
    each = f" (median of {len(values)} rounds: {', '.join(f'{v:.2f}' for v in values)})" \
        if len(values) > 1 else ""
    return statistics.median(values), each


#: A batch this slow holds the heartbeats behind it past the goal's half.
SLOW_BATCH = 0.1


def _slow_batches(batches: list[BatchLine]) -> str:
    """What the batches of at least SLOW_BATCH seconds spent: the sync's driver thread on a
    CPU, and runnable but waiting for one (the kernel's run-queue wait; both from the log
    lines).  Mostly waiting: the host had no CPU for it; mostly running: its own work."""
    slow = [b for b in batches if b.seconds >= SLOW_BATCH and b.cpu is not None
            and b.cpu_wait is not None]
    if not slow:
        return ""
    wall = sum(b.seconds for b in slow)
    cpu = sum(b.cpu for b in slow if b.cpu is not None)
    waited = sum(b.cpu_wait for b in slow if b.cpu_wait is not None)
    return (f"; {len(slow)} batches took ≥ {SLOW_BATCH} s ({wall:.1f} s in all), in which the"
            f" driver thread ran {cpu:.1f} s and waited {waited:.1f} s for a CPU")


def report(args: argparse.Namespace, facts: dict[str, str], phases: list[Phase]) -> str:
    judged = _judged(phases)
    main_phase = judged[0]
    ours_p99, ours_rounds = _median_p99(judged, "binrelay")
    verdict = "met" if ours_p99 <= GOAL else "NOT met"
    same_rate = [ph for ph in phases if ph.rate == main_phase.rate]
    others = []
    for side, name in (("replica", "the native replica"), ("binrelay", "binrelay")):
        for arrangement in ARRANGEMENTS:
            of = [ph for ph in same_rate if ph.arrangement == arrangement and side in ph.lags]
            if of and not (side == "binrelay" and arrangement == main_phase.arrangement):
                p99, each = _median_p99(of, side)
                others.append(f"{name} ({_ALONE[arrangement]}): {p99:.2f} s{each}")
    anchor_text = "; ".join(others) or "no other phase at this rate"
    rows: list[list[object]] = []
    for ph in phases:
        tps = ph.transactions / ph.seconds
        for name in ("binrelay", "replica"):
            if name not in ph.lags:
                continue
            v = ph.lags[name]
            label = "**binrelay sync**" if name == "binrelay" else "native replica"
            rows.append([_phase_label(ph), f"{tps:,.0f}", label, len(v), f"{pct(v, 50):.2f}",
                         f"{pct(v, 90):.2f}", f"{pct(v, 99):.2f}", f"{max(v):.2f}",
                         f"{ph.drain[name]:.1f}"])
    table = md_table(["phase (sysbench, 2 threads)", "tps", "downstream", "heartbeats",
                      "p50 s", "p90 s", "p99 s", "max s",
                      "at the upstream's end after the workload, s"], rows)
    batch_notes = []
    for ph in phases:
        gaps = [b.at - a.at for a, b in zip(ph.batches, ph.batches[1:], strict=False)]
        sizes = [b.end - b.start for b in ph.batches if b.end > b.start]
        if gaps and sizes:
            batch_notes.append(
                f"  - {_phase_label(ph)}:"
                f" {len(ph.batches)} batches committed, one every {pct(gaps, 50):.2f} s"
                f" (median; max {max(gaps):.2f} s), {pct(sizes, 50) / MIB:.2f} MiB of relay"
                f" each (median; max {max(sizes) / MIB:.2f} MiB); probe round trip (median)"
                f" {ph.probe_rtt_ms:.1f} ms{_slow_batches(ph.batches)}")
    cpu_notes = []
    for ph in phases:
        if ph.cpu:
            cpu_notes.append(
                f"  - {_phase_label(ph)}"
                f" ({2 * ph.seconds:.0f} CPU-seconds on 2 cores): "
                + ", ".join(f"{name} {sec:.1f}" for name, sec in
                            sorted(ph.cpu.items(), key=lambda kv: -kv[1])))
    notes = list(dict.fromkeys(ph.note for ph in phases if ph.note))
    cmd = (f"python -m bench.sync_lag --seconds {args.seconds:g} --rates"
           f" {' '.join(str(r) for r in args.rates)}"
           + (f" --rounds {args.rounds}" if args.rounds > 1 else "")
           + (f" --arrangements {' '.join(args.arrangements)}"
              if args.arrangements != list(ARRANGEMENTS) else "")
           + (f" --partition-mib {args.partition_mib:g}" if args.partition_mib else "")
           + (f" --driver-batch-mib {args.driver_batch_mib:g}"
              if args.driver_batch_mib is not None else "")
           + (f" --relay-sync-interval {args.relay_sync_interval:g}"
              if args.relay_sync_interval != RELAY_SYNC_INTERVAL else ""))
    rounds_text = (f" The phases ran in turn {args.rounds} times (rounds); the verdict is"
                   " the median of the rounds' p99, as this host's p99 moves by half from"
                   " run to run." if args.rounds > 1 else "")
    default_interval = ", the default" if args.relay_sync_interval == RELAY_SYNC_INTERVAL else ""
    facts = {**facts, "Spark master / tasks": f"`{MASTER}` / {TASKS}",
             "load average at end": loadavg()}
    return f"""\
## Sync lag: upstream commit → downstream visibility, `binrelay sync` vs. a native replica

`{cmd}` ·
goal (issue 14): binrelay's p99 ≤ {GOAL:.1f} s under a running 2-thread sysbench with a
DDL every {DDL_EVERY:.0f} s ({_kind_label(main_phase)}) ·
**verdict: {verdict}** (p99 {ours_p99:.2f} s{ours_rounds}. Same rate, p99: {anchor_text})

{facts_table(facts)}

{table}

- Setup: upstream, binrelay's downstream and a native replica (`slave_parallel_threads =
  0`, MariaDB's default; `CHANGE MASTER TO` the upstream's first binlog), three sandbox
  servers on this machine; the downstreams with binlog off. `binrelay relay`
  (`relay-sync-interval = {args.relay_sync_interval:g}`{default_interval}) and
  `binrelay sync --config F` (streaming:
  `[sync] master = "{MASTER}"`, `tasks = {TASKS}`, default batch limits) run as processes,
  each in a session of its own, as a deployed service runs and as each server runs (with
  the kernel's autogroup on, a session's processes share one CPU weight: in the
  benchmark's own session sysbench and the probe are the application), the sync measured
  warm, as a deployed one runs (a phase starts after its `spark ready`
  line: Spark up, Python workers started); both downstreams first caught up with
  `sysbench prepare` ({TABLES} tables ×
  {TABLE_SIZE} rows) from empty. Per rate, three phases of the same workload: binrelay
  alone (the replica's slave threads stopped), the replica alone (binrelay's relay and
  sync stopped with SIGTERM), both at once; before each, the sides that run caught up
  with the upstream, a paused side catches up later. On this 2-core machine the upstream,
  sysbench and the probe take most of the CPU (see below), and with both sides at once
  each one's CPU is the other's lag: "alone" is a pipeline as it would be deployed.{rounds_text}
- DDL: every {DDL_EVERY:.0f} s during each phase, `ALTER TABLE bench.tick ADD COLUMN w
  INT`, then `... DROP COLUMN w` the next time (a small side table, from its own
  connection).
- Heartbeats: every {BEAT * 1000:.0f} ms the probe commits `REPLACE INTO bench.hb VALUES
  (1, <counter>, NOW(6))` on the upstream (autocommit; commit time = when the statement
  returned) while sysbench runs; a thread per downstream reads `bench.hb` every
  {POLL * 1000:.0f} ms (a read taking longer delays the next); a counter is visible at the
  return of the first read showing it or a later counter. Lag = visible − committed, on one
  monotonic clock; the poll interval bounds the error ({POLL * 1000:.0f} ms plus a read).
- After each phase the measured downstreams showed the last counter and reached the
  upstream's end position (the last column: the replica's `Exec_Master_Log_Pos`,
  binrelay's checkpoint, polled every 50 ms from the moment sysbench and the probe had
  stopped), and at the end
  `CHECKSUM TABLE` of the {TABLES} sbtest tables, `bench.hb` and `bench.tick` was equal on
  all three
  servers.
- binrelay's batches during each phase (from its `batch applied` log lines):
{chr(10).join(batch_notes) or "  - (none)"}
- CPU seconds each process used while sysbench ran (user + system, from /proc, a
  process with its descendants; sysbench and the probe are the rest):
{chr(10).join(cpu_notes) or "  - (not measured)"}
{"".join(f"- Note: {n}{chr(10)}" for n in notes)}"""


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="sysbench duration per phase (default 30)")
    parser.add_argument("--rates", type=int, nargs="+", default=[0, 1000],
                        help="sysbench --rate per phase, 0 = unthrottled (default 0 1000);"
                             " the goal is judged on the first")
    parser.add_argument("--arrangements", nargs="+", choices=list(ARRANGEMENTS),
                        default=list(ARRANGEMENTS),
                        help="who applies during each rate's phases: binrelay alone, the"
                             " replica alone, both at once (default: all three, in that"
                             " order); the goal is judged on binrelay alone")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every phase this many times, in turn (default 1); the"
                             " goal is judged on the median of the rounds' p99")
    parser.add_argument("--driver-batch-mib", type=float, default=None,
                        help="[sync] driver-batch-bytes in MiB (default: the sync's default)")
    parser.add_argument("--relay-sync-interval", type=float, default=RELAY_SYNC_INTERVAL,
                        help="the relay's relay-sync-interval, seconds (default: the relay's"
                             f" default, {RELAY_SYNC_INTERVAL:g})")
    parser.add_argument("--partition-mib", type=float, default=0.0,
                        help="[sync] partition-bytes in MiB (default: binrelay's default)")
    parser.add_argument("--no-report", action="store_true",
                        help="print the section but leave BENCHMARKS.md alone")
    parser.add_argument("--no-idle-wait", action="store_true",
                        help="do not wait for running pytest sessions to end (trial runs)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    parser.add_argument("--trace", type=Path, default=None,
                        help="write each heartbeat's commit and visibility times (epoch"
                             " seconds, per side) to this TSV, to line up with the sync's"
                             " log")
    args = parser.parse_args(argv)
    sync_catchup.IDLE_WAIT = not args.no_idle_wait

    workdir = make_workdir(SECTION)
    log(f"work dir {workdir}")
    template = default_template()
    upstream = MariaDBServer(workdir / "upstream", server_id=1, template=template)
    downstream = MariaDBServer(workdir / "downstream", server_id=2, template=template,
                               extra_args=DOWNSTREAM_ARGS)
    replica = MariaDBServer(workdir / "replica", server_id=3, template=template,
                            extra_args=DOWNSTREAM_ARGS)
    sides: Sides | None = None
    watchers: dict[str, Watcher] = {}
    try:
        for server in (upstream, downstream, replica):
            server.start()
        facts = machine_facts(upstream)
        first_binlog = upstream.binlog_files()[0][0]
        upstream.execute("CREATE DATABASE bench")
        upstream.execute(HB_DDL)
        upstream.execute(TICK_DDL)
        upstream.execute("INSERT INTO bench.hb VALUES (1, 0, NOW(6))")
        log(f"sysbench prepare: {TABLES} tables x {TABLE_SIZE} rows")
        sysbench_prepare(upstream, tables=TABLES, table_size=TABLE_SIZE, threads=THREADS)

        relay_dir = workdir / "relay"
        relay_cfg = write_config(workdir / "relay.toml", upstream, relay_dir,
                                 relay_sync_interval=args.relay_sync_interval)
        extra = {"partition-bytes": int(args.partition_mib * MIB)} if args.partition_mib else {}
        if args.driver_batch_mib is not None:
            extra["driver-batch-bytes"] = int(args.driver_batch_mib * MIB)
        sync_cfg = sync_config(workdir / "sync.toml", upstream, relay_dir, downstream, **extra)
        sides = Sides(workdir, relay_cfg, sync_cfg, relay_dir, upstream, replica)
        change_master(replica, upstream, (first_binlog, 4), 0)
        log("waiting for both downstreams to catch up with the prepare")
        t0 = time.monotonic()
        sides.run(("binrelay", "replica"))
        wait_converged(upstream, {"binrelay": downstream, "replica": replica}, sides.procs,
                       replica, CATCH_UP_TIMEOUT)
        log(f"both caught up ({time.monotonic() - t0:.0f} s)")

        watchers = {"binrelay": Watcher("binrelay", downstream),
                    "replica": Watcher("replica", replica)}
        for w in watchers.values():
            w.start()
        deadline = time.monotonic() + 60
        while any(w.last < 0 for w in watchers.values()):
            if time.monotonic() > deadline:
                raise BenchError("the watchers see no heartbeat row")
            time.sleep(0.1)

        phases = [replace(run_phase(upstream, downstream, watchers, rate, arrangement,
                                    args.seconds, sides, args.trace),
                          round=n, rounds=args.rounds)
                  for n in range(1, args.rounds + 1)
                  for rate in args.rates for arrangement in args.arrangements]

        sides.run(("binrelay", "replica"))
        final = wait_converged(upstream, {"binrelay": downstream, "replica": replica},
                               sides.procs, replica, CATCH_UP_TIMEOUT)
        log(f"converged: {final}")
        for w in watchers.values():
            w.stop.set()
        sides.stop_binrelay()

        body = report(args, facts, phases)
        print(body)
        if not args.no_report:
            update_section(SECTION, body)
            log("BENCHMARKS.md updated")
    finally:
        for w in watchers.values():
            w.stop.set()
        for name, (proc, path) in (sides.procs.items() if sides else ()):
            with contextlib.suppress(Exception):
                stop_process(proc, name, path, timeout=30)
        for server in (replica, downstream, upstream):
            server.cleanup()
        drop_workdir(workdir, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
