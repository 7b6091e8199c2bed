"""Soak: the whole pipeline under a workload while a fault injector breaks it every few seconds.

    .venv/bin/python -m bench.soak [--minutes 30] [--interval 5] [--seed 1]
        [--kinds relay-kill sync-kill ...] [--rate 50] [--no-report] [--keep]

Two sandbox MariaDB servers on 127.0.0.1, an upstream (``sync_binlog = 1``,
``innodb_flush_log_at_trx_commit = 1``, 4 MiB binlog files) and a downstream (binlog off),
from the same initial datadir.  ``binrelay relay`` reads the upstream and ``binrelay sync``
(streaming, ``local[2]``, 2 tasks) writes the downstream, each through a TCP proxy on
loopback (``binrelay/testing/proxy.py``) whose live connections the injector can reset mid-stream.
One config file serves both (automatic purge off, so every relay file is still there to be
compared at the end).

The workload runs against the upstream directly the whole time: sysbench
``oltp_write_only`` (``--rate`` transactions per second, 2 threads; started again whenever
it exits, as it does when the upstream restarts) and, every ``--ddl-every`` seconds, one
step of a DDL cycle on tables of its own (CREATE, INSERT, ALTER ADD COLUMN, UPDATE, RENAME,
ALTER DROP COLUMN, DROP; each step first checks on the upstream whether it already ran, so
an upstream killed in the middle does not derail it).

Every ``--interval`` seconds the injector draws the next fault (``--kinds``, each kind once
per round, rounds shuffled with ``--seed``):

* ``relay-kill``: SIGKILL the relay, start it again at once;
* ``sync-kill``: SIGKILL the sync's driver (its JVM follows: it exits when the driver's pipe
  closes), start it again at once; every second time ``binrelay recover`` runs first
  (docs/operations.md: a plain ``sync`` replays the batch in flight itself, ``recover`` is
  the other way back; both are exercised);
* ``downstream-kill``: SIGKILL the downstream's mariadbd, start it again on the same datadir
  and port (the sync waits and reconnects on its own);
* ``upstream-restart`` / ``upstream-kill``: restart the upstream cleanly / SIGKILL it and
  start it again (crash recovery; nothing committed is lost with the durability above);
* ``relay-cut`` / ``sync-cut``: reset every live connection of the relay's / the sync's
  proxy, inside bytes being forwarded when some pass within 2 s.

After each fault the injector commits a marker row on the upstream (``soak.marker``, one
id per fault) and notes the upstream's binlog position after it.  Time to recover: from
the fault until the relay's ``relay.meta`` passes that position (the relay has
recovered) and until the marker row is visible in the downstream (the whole pipeline has).
A fault that comes before the previous one has recovered overlaps it; both are counted.

The relay's and the sync's RSS (``VmRSS``; the sync's Python driver and its JVM separately)
are sampled every ``--rss-every`` seconds, every incarnation noted.  RSS is judged flat when
the largest sample of the run's last fifth is at most 10 % + 8 MB above the largest of
its first fifth.

At the end: the faults stop, then the workload; once the relay has the upstream's last
position and the sync's checkpoint is consistent there, both get SIGTERM (exit 0 wanted),
and the soak verifies

* every upstream binlog file is in the relay dir's only subdir, byte for byte (the active
  file's in-use flag aside) and readable by ``mariadb-binlog``;
* the relayed transactions' GTIDs run 0-1-1, 0-1-2, ... up to the upstream's
  ``@@gtid_binlog_pos`` without a gap or a repeat (no event lost or duplicated);
* the same tables on both sides and ``CHECKSUM TABLE`` equal for each (rows compared one by
  one where not, to count the rows that differ);
* the checkpoint: consistent, at the upstream's end position, its GTID set the upstream's;
* no process exited by itself, no JVM outlived its killed driver.

Exits 1 when any of it fails (the work dir is then kept); writes its section of
BENCHMARKS.md unless ``--no-report``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import tomli_w

from bench.common import (
    MIB,
    REPO_ROOT,
    BenchError,
    binrelay_cmd,
    facts_table,
    loadavg,
    log,
    machine_facts,
    make_workdir,
    md_table,
    proc_status_kib,
    settled_master_status,
    tail,
    update_section,
)
from bench.sync_lag import stop_process
from binrelay.apply.checkpoint import read_checkpoint
from binrelay.position import binlog_sort_key
from binrelay.relay.layout import list_binlogs, read_index, read_meta
from binrelay.relay.txnscan import transaction_ends
from binrelay.relay.verify import compare_subdir
from binrelay.testing.proxy import CutProxy
from binrelay.testing.sandbox import (
    MariaDBServer,
    SysbenchWorkload,
    default_template,
    sysbench_prepare,
    sysbench_run_background,
)

SECTION = "soak"
KINDS = ("relay-kill", "sync-kill", "downstream-kill", "upstream-restart", "upstream-kill",
         "relay-cut", "sync-cut")
PIPELINE = "sync"
MASTER = "local[2]"
TASKS = 2
TABLES = 4
TABLE_SIZE = 2000
THREADS = 2
BINLOG_SIZE = 4 * MIB
UPSTREAM_ARGS = ("--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1")
DOWNSTREAM_ARGS = ("--skip-log-bin",)
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys", "binrelay")
#: A process that exits by itself this often in a row is not coming back: stop the soak.
MAX_RESPAWNS = 5
RSS_SLACK = (1.10, 8 * 1024)  # factor, KiB


# --------------------------------------------------------------------------- small helpers


def now() -> float:
    return time.monotonic()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB; 0 when it is gone."""
    return proc_status_kib(pid, "VmRSS")


def children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(x) for x in (task / "children").read_text().split()]
    return out


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot); None when gone or a zombie.  With the
    pid it names one process: a pid may be reused, a (pid, start) pair is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def alive(proc: tuple[int, int]) -> bool:
    """The process ``(pid, start)`` still runs."""
    return start_ticks(proc[0]) == proc[1]


def jvm_of(pid: int) -> tuple[int, int] | None:
    """The driver's JVM as ``(pid, start)``."""
    for child in children(pid):
        if comm(child) == "java" and (start := start_ticks(child)) is not None:
            return child, start
    return None


def position_key(pos: tuple[str, int]) -> tuple[tuple[str, int], int]:
    return binlog_sort_key(pos[0]), pos[1]


def relay_position(relay_dir: Path) -> tuple[str, int] | None:
    with contextlib.suppress(Exception):
        index = read_index(relay_dir)
        if index:
            meta = read_meta(relay_dir / str(index[-1]))
            if meta is not None:
                return meta.binlog_name, meta.binlog_pos
    return None


def last_error_line(path: Path) -> str:
    lines = [ln for ln in tail(path, 20000).splitlines() if ln.startswith("binrelay: error:")]
    return lines[-1] if lines else tail(path, 600).strip().replace("\n", " | ")[-600:]


def wait_until(what: str, predicate: Callable[[], Any], timeout: float,
               check: Callable[[], None] | None = None) -> None:
    """Poll ``predicate`` (exceptions count as not yet) until it holds."""
    deadline = now() + timeout
    while True:
        if check is not None:
            check()
        with contextlib.suppress(Exception):
            if predicate():
                return
        if now() > deadline:
            raise BenchError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


def retry(what: str, fn: Callable[[], Any], timeout: float = 120.0) -> Any:
    """``fn()`` until it does not raise (the server may be on its way back)."""
    deadline = now() + timeout
    while True:
        try:
            return fn()
        except Exception as exc:
            if now() > deadline:
                raise BenchError(f"{what}: still failing after {timeout:.0f} s: {exc}") from None
            time.sleep(0.2)


# --------------------------------------------------------------------------- services


@dataclass
class Incarnation:
    pid: int
    role: str  # relay, sync or recover
    started: float
    ended: float | None = None
    rc: int | None = None
    killed: bool = False  # by the injector
    jvm: tuple[int, int] | None = None  # the sync driver's JVM (pid, start), when seen


class Service:
    """``binrelay relay`` or ``binrelay sync`` kept running: :meth:`kill9` kills it and
    starts it again at once; an exit the soak did not cause is recorded (a failure) and the
    process started again after a second."""

    def __init__(self, name: str, config: Path, workdir: Path) -> None:
        self.name = name
        self.config = config
        self.log_path = workdir / f"{name}.log"
        self.lock = threading.RLock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.current: Incarnation | None = None
        self.incarnations: list[Incarnation] = []
        self.unexpected: list[str] = []
        self.kills = 0
        self.recovers = 0
        self._respawns_in_a_row = 0
        self._stopping = False
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name=f"watch-{name}", daemon=True)

    def _spawn(self, role: str) -> None:
        with self.log_path.open("ab") as out:
            out.write(f"\n===== soak: {role} starting at {time.strftime('%H:%M:%S')}\n"
                      .encode())
            out.flush()
            self.proc = subprocess.Popen(
                binrelay_cmd(role, "--config", str(self.config)), cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.current = Incarnation(self.proc.pid, role, now())
        self.incarnations.append(self.current)

    def start(self) -> None:
        with self.lock:
            self._spawn(self.name)
        self._monitor.start()

    @property
    def pid(self) -> int | None:
        with self.lock:
            proc = self.proc
            return proc.pid if proc is not None and proc.poll() is None else None

    def _ended(self, rc: int) -> Incarnation:
        inc = self.current
        assert inc is not None
        inc.ended, inc.rc = now(), rc
        return inc

    def kill9(self, *, recover_first: bool = False) -> None:
        with self.lock:
            proc = self.proc
            if proc is not None and proc.poll() is None:
                if self.current is not None and self.current.role != "relay":
                    self.current.jvm = self.current.jvm or jvm_of(proc.pid)
                self.current.killed = True  # type: ignore[union-attr]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                self._ended(proc.returncode)
            self.kills += 1
            self._respawns_in_a_row = 0
            if recover_first:
                self.recovers += 1
            self._spawn("recover" if recover_first else self.name)

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            with self.lock:
                proc, inc = self.proc, self.current
                if proc is None or inc is None or proc.poll() is None or self._stopping:
                    if inc is not None and inc.role != "relay" and inc.jvm is None and proc:
                        inc.jvm = jvm_of(proc.pid)
                    continue
                self._ended(proc.returncode)
                if inc.role == "recover" and proc.returncode == 0:
                    self._spawn(self.name)
                    continue
                what = (f"{inc.role} (pid {inc.pid}) exited by itself with {proc.returncode}"
                        f" at {time.strftime('%H:%M:%S')}: {last_error_line(self.log_path)}")
                log(f"UNEXPECTED: {what}")
                self.unexpected.append(what)
                self._respawns_in_a_row += 1
                if self._respawns_in_a_row > MAX_RESPAWNS:
                    self.proc = None
                    continue
            time.sleep(1.0)
            with self.lock:
                if not self._stopping and self.proc is proc:  # kill9 did not meanwhile
                    self._spawn(self.name)

    @property
    def gave_up(self) -> bool:
        return self._respawns_in_a_row > MAX_RESPAWNS

    def settled(self) -> bool:
        """Running in its own role (not ``recover``)."""
        with self.lock:
            return (self.proc is not None and self.proc.poll() is None
                    and self.current is not None and self.current.role == self.name)

    def stop(self, timeout: float = 120.0) -> int | None:
        """SIGTERM; the exit code (None if it was not running)."""
        with self.lock:
            self._stopping = True
            proc = self.proc
        self._stop.set()
        if self._monitor.is_alive():
            self._monitor.join(timeout=5)
        if proc is None:
            return None
        try:
            return stop_process(proc, self.name, self.log_path, timeout)
        finally:
            if self.current is not None and self.current.ended is None:
                self._ended(proc.returncode)

    def kill_quietly(self) -> None:
        with self.lock:
            self._stopping = True
            proc = self.proc
        self._stop.set()
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- workload


class Workload(threading.Thread):
    """sysbench against the upstream, started again whenever it exits (upstream restarts),
    and one DDL step every ``ddl_every`` seconds."""

    def __init__(self, upstream: MariaDBServer, rate: int, ddl_every: float) -> None:
        super().__init__(name="workload", daemon=True)
        self.upstream = upstream
        self.rate = rate
        self.ddl_every = ddl_every
        self.stop_event = threading.Event()
        self.sysbench_starts = 0
        self.ddl_steps = 0
        self.ddl_cycle = 1
        self.ddl_step = 0
        self.error: BaseException | None = None
        self._work: SysbenchWorkload | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        next_ddl = now() + self.ddl_every
        try:
            while not self.stop_event.is_set():
                with self._lock:
                    if not self.stop_event.is_set() and (
                            self._work is None or not self._work.is_running):
                        if self._work is not None:
                            self._work.stop()
                        self._work = self._start_sysbench()
                if self.ddl_every and now() >= next_ddl:
                    with contextlib.suppress(pymysql.MySQLError, OSError):
                        self._ddl()
                    next_ddl = now() + self.ddl_every
                self.stop_event.wait(0.2)
        except BaseException as exc:
            self.error = exc

    def _start_sysbench(self) -> SysbenchWorkload | None:
        try:
            self.upstream.execute("SELECT 1")
        except (pymysql.MySQLError, OSError):
            return None  # down: next round
        self.sysbench_starts += 1
        return sysbench_run_background(
            self.upstream, tables=TABLES, table_size=TABLE_SIZE, threads=THREADS,
            prepare=False, extra=[f"--rate={self.rate}"] if self.rate else [])

    def _exists(self, table: str, column: str | None = None) -> bool:
        if column is None:
            sql = ("SELECT COUNT(*) FROM information_schema.TABLES"
                   " WHERE TABLE_SCHEMA = 'soak' AND TABLE_NAME = %s")
            return bool(self.upstream.scalar(sql, (table,)))
        sql = ("SELECT COUNT(*) FROM information_schema.COLUMNS"
               " WHERE TABLE_SCHEMA = 'soak' AND TABLE_NAME = %s AND COLUMN_NAME = %s")
        return bool(self.upstream.scalar(sql, (table, column)))

    def _ddl(self) -> None:
        """The next step of the cycle, unless the upstream shows it already ran."""
        n = self.ddl_cycle
        t, r, old = f"t{n}", f"r{n}", f"r{n - 2}"
        values = ", ".join(f"({i}, {i * 7 % 101}, 'row {i}')" for i in range(1, 41))
        steps: list[tuple[Callable[[], bool], str]] = [
            (lambda: self._exists(t),
             f"CREATE TABLE soak.{t} (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32))"),
            (lambda: bool(self.upstream.scalar(f"SELECT COUNT(*) FROM soak.{t}")),
             f"INSERT INTO soak.{t} VALUES {values}"),
            (lambda: self._exists(t, "c"),
             f"ALTER TABLE soak.{t} ADD COLUMN c INT NOT NULL DEFAULT 7"),
            (lambda: False, f"UPDATE soak.{t} SET c = id + a WHERE id % 3 = 0"),
            (lambda: self._exists(r), f"RENAME TABLE soak.{t} TO soak.{r}"),
            (lambda: not self._exists(r, "b"), f"ALTER TABLE soak.{r} DROP COLUMN b"),
            (lambda: n < 3 or not self._exists(old), f"DROP TABLE soak.{old}"),
        ]
        done, sql = steps[self.ddl_step]
        if not done():
            self.upstream.execute(sql)
            self.ddl_steps += 1
        self.ddl_step += 1
        if self.ddl_step == len(steps):
            self.ddl_cycle, self.ddl_step = n + 1, 0

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
        with self._lock:
            if self._work is not None:
                self._work.stop()


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    id: int
    kind: str
    at: float  # monotonic, when it was injected
    detail: str = ""
    action_s: float = 0.0  # how long the injection itself took (a restart)
    marker_pos: tuple[str, int] | None = None
    relay_at: float | None = None
    applied_at: float | None = None
    overlapped: bool = False  # the next fault came before this one had recovered

    @property
    def relay_s(self) -> float | None:
        return None if self.relay_at is None else self.relay_at - self.at

    @property
    def applied_s(self) -> float | None:
        return None if self.applied_at is None else self.applied_at - self.at


class Tracker(threading.Thread):
    """Notes when each fault's marker reached the relay and the downstream."""

    def __init__(self, relay_dir: Path, downstream: MariaDBServer) -> None:
        super().__init__(name="tracker", daemon=True)
        self.relay_dir = relay_dir
        self.downstream = downstream
        self.faults: list[Fault] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.applied_max = 0

    def add(self, fault: Fault) -> None:
        with self.lock:
            self.faults.append(fault)

    def pending(self) -> list[Fault]:
        with self.lock:
            return [f for f in self.faults if f.applied_at is None or f.relay_at is None]

    def run(self) -> None:
        conn = None
        while not self.stop_event.wait(0.05):
            todo = self.pending()
            if not todo:
                continue
            t = now()
            at = relay_position(self.relay_dir)
            for f in todo:
                if (f.relay_at is None and f.marker_pos is not None and at is not None
                        and position_key(at) >= position_key(f.marker_pos)):
                    f.relay_at = t
            try:
                if conn is None:
                    conn = self.downstream.connect(connect_timeout=2, read_timeout=5)
                with conn.cursor() as cur:
                    cur.execute("SELECT COALESCE(MAX(id), 0) FROM soak.marker")
                    self.applied_max = int(cur.fetchone()[0])
            except Exception:
                with contextlib.suppress(Exception):
                    if conn is not None:
                        conn.close()
                conn = None
                continue
            t = now()
            for f in todo:
                if f.applied_at is None and f.marker_pos is not None and \
                        f.id <= self.applied_max:
                    f.applied_at = t
        with contextlib.suppress(Exception):
            if conn is not None:
                conn.close()


@dataclass
class RssSample:
    t: float
    role: str  # relay, sync (the driver), jvm
    pid: int
    kib: int


class RssSampler(threading.Thread):
    def __init__(self, relay: Service, sync: Service, every: float) -> None:
        super().__init__(name="rss", daemon=True)
        self.relay, self.sync, self.every = relay, sync, every
        self.samples: list[RssSample] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.every):
            t = now()
            for role, service in (("relay", self.relay), ("sync", self.sync)):
                with service.lock:
                    inc = service.current
                    pid = service.pid
                if pid is None or inc is None or inc.role != role:
                    continue  # between incarnations, or recover running
                kib = rss_kib(pid)
                if kib:
                    self.samples.append(RssSample(t, role, pid, kib))
                if role == "sync":
                    jvm = jvm_of(pid)
                    if jvm is not None and (kib := rss_kib(jvm[0])):
                        self.samples.append(RssSample(t, "jvm", jvm[0], kib))


class Injector:
    def __init__(self, args: argparse.Namespace, upstream: MariaDBServer,
                 downstream: MariaDBServer, relay: Service, sync: Service,
                 relay_proxy: CutProxy, sync_proxy: CutProxy, tracker: Tracker) -> None:
        self.args = args
        self.upstream, self.downstream = upstream, downstream
        self.relay, self.sync = relay, sync
        self.relay_proxy, self.sync_proxy = relay_proxy, sync_proxy
        self.tracker = tracker
        self.rng = random.Random(args.seed)
        self._round: list[str] = []
        self._last: str | None = None
        self.next_id = 1
        self.sync_kills = 0

    def next_kind(self) -> str:
        if not self._round:
            kinds = list(self.args.kinds)
            self.rng.shuffle(kinds)
            if len(kinds) > 1 and kinds[0] == self._last:
                kinds.append(kinds.pop(0))  # never the same kind twice in a row
            self._round = kinds
        self._last = self._round.pop(0)
        return self._last

    def marker(self, kind: str) -> tuple[int, tuple[str, int]]:
        """Commit the next marker row; its id and the upstream's position after it."""
        mid = self.next_id
        self.next_id += 1

        def write() -> tuple[str, int]:
            with contextlib.closing(self.upstream.connect(connect_timeout=2)) as conn, \
                    conn.cursor() as cur:
                cur.execute("INSERT IGNORE INTO soak.marker VALUES (%s, %s, NOW(6))",
                            (mid, kind))
                cur.execute("SHOW MASTER STATUS")
                row = cur.fetchone()
                return str(row[0]), int(row[1])

        return mid, retry(f"marker {mid} on the upstream", write, timeout=180)

    def inject(self, kind: str) -> Fault:
        t0 = now()
        detail = ""
        if kind == "relay-kill":
            self.relay.kill9()
        elif kind == "sync-kill":
            self.sync_kills += 1
            recover = self.sync_kills % 2 == 0
            self.sync.kill9(recover_first=recover)
            detail = "recover, then sync" if recover else "sync"
        elif kind == "downstream-kill":
            self.downstream.kill()
            self.downstream.start()
        elif kind == "upstream-restart":
            self.upstream.restart()
        elif kind == "upstream-kill":
            self.upstream.kill()
            self.upstream.start()
        elif kind in ("relay-cut", "sync-cut"):
            proxy = self.relay_proxy if kind == "relay-cut" else self.sync_proxy
            cut = proxy.cut(within=2.0)
            detail = f"{cut.connections} conn, {'mid-stream' if cut.mid_stream else 'idle'}"
        else:
            raise ValueError(kind)
        action = now() - t0
        # The fault's id is its marker's.
        mid, pos = self.marker(kind)
        fault = Fault(mid, kind, t0, detail, action, pos)
        for earlier in self.tracker.faults[-3:]:
            if earlier.applied_at is None:
                earlier.overlapped = True
        self.tracker.add(fault)
        return fault

    def run(self, seconds: float, check: Callable[[], None]) -> None:
        start = now()
        k = 0
        while now() - start < seconds:
            check()
            kind = self.next_kind()
            fault = self.inject(kind)
            log(f"fault {fault.id:4d} {kind:17s} {fault.detail}"
                f"{f' ({fault.action_s:.1f} s)' if fault.action_s >= 0.5 else ''}")
            k += 1
            # A fixed cadence; an injection that took longer than the interval delays the
            # next one instead of firing a burst.
            wait = start + k * self.args.interval - now()
            if wait < 0:
                k = int((now() - start) / self.args.interval)
                wait = 0.0
            time.sleep(wait)


# --------------------------------------------------------------------------- setup


def write_soak_config(path: Path, relay_dir: Path, relay_proxy: CutProxy,
                      sync_proxy: CutProxy) -> Path:
    data = {
        "relay-dir": str(relay_dir),
        "log-level": "info",
        "from": {"host": "127.0.0.1", "port": relay_proxy.port, "user": "root",
                 "password": ""},
        "purge": {"interval": 0},
        "to": {"host": "127.0.0.1", "port": sync_proxy.port, "user": "root", "password": ""},
        "sync": {"master": MASTER, "tasks": TASKS, "pipeline": PIPELINE},
    }
    path.write_text(tomli_w.dumps(data))
    return path


def checkpoint(downstream: MariaDBServer) -> Any:
    with contextlib.closing(downstream.connect(autocommit=False, connect_timeout=2)) as conn:
        return read_checkpoint(conn, PIPELINE)


def wait_drained(upstream: MariaDBServer, downstream: MariaDBServer, relay_dir: Path,
                 services: list[Service], timeout: float) -> tuple[str, int]:
    """Until the relay holds the upstream's end and the checkpoint is consistent there."""
    end = settled_master_status(upstream)
    deadline = now() + timeout
    relay_ok = sync_ok = False
    while True:
        for s in services:
            if s.gave_up:
                raise BenchError(f"{s.name} keeps exiting: {s.unexpected[-1]}")
        relay_ok = relay_position(relay_dir) == end
        cp = None
        with contextlib.suppress(Exception):
            cp = checkpoint(downstream)
        sync_ok = bool(cp is not None and cp.consistent
                       and (cp.position.binlog_name, cp.position.binlog_pos) == end)
        if relay_ok and sync_ok:
            return end
        if now() > deadline:
            raise BenchError(f"not drained {timeout:.0f} s after the workload: upstream at"
                             f" {end}, relay at {relay_position(relay_dir)}, checkpoint"
                             f" {cp.position if cp else None}"
                             f" (consistent: {cp.consistent if cp else None})")
        time.sleep(0.2)


# --------------------------------------------------------------------------- verification


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)
    relay_files: int = 0
    relay_bytes: int = 0
    transactions: int = 0
    gtid_gaps: int = 0
    gtid_repeats: int = 0
    tables: int = 0
    rows_different: int = 0
    checkpoint: str = ""
    jvms_left: list[tuple[int, int]] = field(default_factory=list)


def user_tables(server: MariaDBServer) -> list[str]:
    rows = server.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES"
        " WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN"
        f" ({', '.join(['%s'] * len(SYSTEM_SCHEMAS))}) ORDER BY 1, 2", SYSTEM_SCHEMAS)
    return [f"`{s}`.`{t}`" for s, t in rows]


def rows_different(upstream: MariaDBServer, downstream: MariaDBServer, table: str) -> int:
    """Rows in one side and not (identically) in the other."""
    def rows(server: MariaDBServer) -> set[tuple[Any, ...]]:
        return set(server.execute(f"SELECT * FROM {table}"))

    return len(rows(upstream) ^ rows(downstream))


def verify(upstream: MariaDBServer, downstream: MariaDBServer, relay_dir: Path,
           end: tuple[str, int]) -> Verification:
    v = Verification()
    index = read_index(relay_dir) or []
    if len(index) != 1:
        v.problems.append(f"the relay dir has {len(index)} subdirs ({index}); one expected"
                          " (the upstream's identity never changed)")
    if index:
        subdir = relay_dir / str(index[-1])
        names = [name for name, _size in upstream.binlog_files()]
        relayed = list_binlogs(subdir)
        if relayed != names:
            v.problems.append(f"{subdir.name} holds {len(relayed)} files, the upstream"
                              f" {len(names)}: only relayed {sorted(set(relayed) - set(names))},"
                              f" only upstream {sorted(set(names) - set(relayed))}")
        common = [n for n in names if n in relayed]
        v.problems += compare_subdir(subdir, upstream.datadir, common)
        v.relay_files = len(common)
        v.relay_bytes = sum((subdir / n).stat().st_size for n in common)
        last = 0
        for n in common:
            path = subdir / n
            for txn in transaction_ends(path, 4, path.stat().st_size):
                if not txn.gtid:
                    continue
                seq = int(txn.gtid.rsplit("-", 1)[1])
                v.transactions += 1
                if seq <= last:
                    v.gtid_repeats += 1
                elif seq > last + 1:
                    v.gtid_gaps += seq - last - 1
                last = max(last, seq)
        want = str(upstream.scalar("SELECT @@gtid_binlog_pos"))
        if want != f"0-1-{last}":
            v.problems.append(f"the relay's last GTID is 0-1-{last}, the upstream's {want}")
        if v.gtid_gaps or v.gtid_repeats:
            v.problems.append(f"relayed GTIDs: {v.gtid_gaps} missing, {v.gtid_repeats}"
                              " repeated")

    up, down = user_tables(upstream), user_tables(downstream)
    if up != down:
        v.problems.append(f"tables only upstream: {sorted(set(up) - set(down))}, only"
                          f" downstream: {sorted(set(down) - set(up))}")
    v.tables = len(up)
    for table in up:
        if table not in down:
            continue
        a = upstream.execute(f"CHECKSUM TABLE {table}")[0][1]
        b = downstream.execute(f"CHECKSUM TABLE {table}")[0][1]
        if a != b:
            diff = rows_different(upstream, downstream, table)
            v.rows_different += diff
            v.problems.append(f"CHECKSUM TABLE {table}: upstream {a}, downstream {b}"
                              f" ({diff} rows differ)")

    cp = checkpoint(downstream)
    gtid = str(upstream.scalar("SELECT @@gtid_binlog_pos"))
    if cp is None:
        v.problems.append("the downstream has no checkpoint")
    else:
        v.checkpoint = (f"{cp.position} gtid {cp.gtid_set}"
                        f" consistent={int(cp.consistent)} batch {cp.batch_id}")
        if not cp.consistent or (cp.position.binlog_name, cp.position.binlog_pos) != end \
                or cp.gtid_set != gtid:
            v.problems.append(f"checkpoint {v.checkpoint}; want consistent at {end}, {gtid}")
    return v


# --------------------------------------------------------------------------- report


def fmt_s(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{pct(values, 50):.1f} / {pct(values, 90):.1f} / {max(values):.1f}"


def rss_summary(samples: list[RssSample], t0: float, t1: float, role: str
                ) -> tuple[list[str], bool]:
    mine = [s for s in samples if s.role == role]
    if not mine:
        return [role, "–", "–", "–", "–", "–", "no samples"], False
    span = max(t1 - t0, 1e-9)
    first = [s.kib for s in mine if s.t <= t0 + span / 5] or [mine[0].kib]
    last = [s.kib for s in mine if s.t >= t1 - span / 5] or [mine[-1].kib]
    pids = sorted({s.pid for s in mine})
    flat = max(last) <= max(first) * RSS_SLACK[0] + RSS_SLACK[1]
    by_pid: dict[int, list[RssSample]] = {}
    for s in mine:
        by_pid.setdefault(s.pid, []).append(s)
    longest = max(by_pid.values(), key=lambda ss: ss[-1].t - ss[0].t)
    grow = (f"{(longest[-1].t - longest[0].t):.0f} s: {longest[0].kib / 1024:.0f} →"
            f" {longest[-1].kib / 1024:.0f} MiB")
    return [role, str(len(pids)), f"{max(first) / 1024:.1f}", f"{max(last) / 1024:.1f}",
            f"{max(s.kib for s in mine) / 1024:.1f}", grow,
            "flat" if flat else "**grew**"], flat


def rss_over_time(samples: list[RssSample], t0: float, t1: float, buckets: int = 10
                  ) -> list[list[str]]:
    out = []
    width = max((t1 - t0) / buckets, 1e-9)
    for b in range(buckets):
        lo, hi = t0 + b * width, t0 + (b + 1) * width
        row = [f"{(lo - t0) / 60:.1f}–{(hi - t0) / 60:.1f}"]
        for role in ("relay", "sync", "jvm"):
            ks = [s.kib for s in samples if s.role == role and lo <= s.t < hi]
            row.append(f"{statistics.median(ks) / 1024:.0f} / {max(ks) / 1024:.0f}" if ks
                       else "–")
        out.append(row)
    return out


def log_counts(path: Path) -> dict[str, int]:
    text = path.read_text(errors="replace") if path.exists() else ""
    lines = [ln for ln in text.splitlines() if "level=debug" not in ln]
    return {
        "warnings": sum(1 for ln in lines if "level=warn" in ln),
        "errors": sum(1 for ln in lines if ln.startswith("binrelay: error:")),
        "tracebacks": sum(1 for ln in lines if ln.startswith("Traceback")),
        "downstream lost": text.count('msg="downstream lost; retrying"'),
    }


def report(args: argparse.Namespace, facts: dict[str, str], faults: list[Fault],
           samples: list[RssSample], t0: float, t1: float, v: Verification,
           services: list[Service], workload: Workload, baseline: list[float],
           drain_s: float, stop_codes: dict[str, int | None]) -> tuple[str, bool]:
    rows = []
    for kind in args.kinds:
        fs = [f for f in faults if f.kind == kind]
        relay_kinds = kind.startswith(("relay", "upstream"))
        rows.append([
            kind, str(len(fs)),
            fmt_s([f.relay_s for f in fs if f.relay_s is not None]) if relay_kinds else "–",
            fmt_s([f.applied_s for f in fs if f.applied_s is not None]),
            str(sum(f.overlapped for f in fs)),
            ", ".join(sorted({f.detail for f in fs if f.detail and "conn" not in f.detail}))
            or (f"{sum('mid-stream' in f.detail for f in fs)} mid-stream" if "cut" in kind
                else ""),
        ])
    applied = [f.applied_s for f in faults if f.applied_s is not None]
    rows.append(["**all**", f"**{len(faults)}**", "", f"**{fmt_s(applied)}**",
                 str(sum(f.overlapped for f in faults)), ""])
    fault_table = md_table(["fault", "count", "relay recovered, s (p50 / p90 / max)",
                            "marker downstream, s (p50 / p90 / max)", "overlapped", "notes"],
                           rows)
    rss_rows, flats = [], []
    for role in ("relay", "sync", "jvm"):
        row, flat = rss_summary(samples, t0, t1, role)
        rss_rows.append(row)
        flats.append(flat)
    rss_table = md_table(["process", "incarnations", "max RSS, first fifth (MiB)",
                          "max RSS, last fifth (MiB)", "max RSS (MiB)",
                          "longest incarnation", "verdict"], rss_rows)
    time_table = md_table(["minutes", "relay MiB (median / max)", "sync driver MiB",
                           "sync JVM MiB"], rss_over_time(samples, t0, t1))
    rss_line = ", ".join(f"{r} {'flat' if ok else 'GREW'}" for r, ok in
                         zip(("relay", "sync driver", "sync JVM"), flats, strict=True))
    unexpected = [u for s in services for u in s.unexpected]
    kinds_missing = [k for k in args.kinds if not any(f.kind == k for f in faults)]
    correct = not v.problems and not unexpected and not v.jvms_left and all(
        c == 0 for c in stop_codes.values())
    goal_faults = len(faults) >= 300 and not kinds_missing
    verdict = ("met" if correct and goal_faults and all(flats) else
               "verification passed, goal not met" if correct else "**FAILED**")
    minutes = (t1 - t0) / 60
    per_kind = ", ".join(f"{k} {sum(f.kind == k for f in faults)}" for k in args.kinds)
    logs = {s.name: log_counts(s.log_path) for s in services}
    cmd = (f"python -m bench.soak --minutes {args.minutes:g} --interval {args.interval:g}"
           f" --seed {args.seed} --rate {args.rate}"
           + (f" --ddl-every {args.ddl_every:g}" if args.ddl_every != 5 else "")
           + (f" --kinds {' '.join(args.kinds)}" if list(args.kinds) != list(KINDS) else ""))
    problems = "".join(f"  - {p}\n" for p in [*v.problems, *unexpected]
                       + [f"JVM {pid} outlived its driver" for pid, _start in v.jvms_left]
                       + [f"{n} exited with {c} on SIGTERM" for n, c in stop_codes.items()
                          if c != 0])
    body = f"""\
## Soak: faults every {args.interval:g} s for {minutes:.1f} min

`{cmd}` ·
goal: ≥ 300 faults of every kind in 30 min, 0 events lost or duplicated, 0 rows
different, relay and sync RSS flat · **verdict: {verdict}**

- faults: {len(faults)} ({per_kind})
- events lost or duplicated: {v.gtid_gaps + v.gtid_repeats}
- rows different: {v.rows_different}
- RSS: {rss_line}

{facts_table(facts)}

{fault_table}

- Times from the fault (for restarts: before the stop) until the relay's `relay.meta` passed
  the marker committed right after it, and until the marker row was visible in the
  downstream; "overlapped": the next fault came before the marker was downstream (its time
  then includes the later faults). Without faults a marker took {fmt_s(baseline)} s
  (p50 / p90 / max of {len(baseline)}) to reach the downstream.
- After the faults: the workload stopped, relay and sync at the upstream's end
  {drain_s:.1f} s later; SIGTERM: relay exited {stop_codes.get('relay')}, sync
  {stop_codes.get('sync')}.
- Workload: sysbench `oltp_write_only` ({TABLES} tables × {TABLE_SIZE} rows, {THREADS}
  threads, `--rate={args.rate}`), started {workload.sysbench_starts} times (it exits when
  the upstream restarts); {workload.ddl_steps} DDL statements
  ({workload.ddl_cycle - 1} full cycles). {v.transactions} transactions relayed in
  {v.relay_files} binlog files ({v.relay_bytes / MIB:.1f} MiB; 4 MiB files, a new one at
  every upstream restart).
- Verification: every relay file byte-identical to the upstream's and read by
  `mariadb-binlog`; GTIDs 0-1-1 … without gaps or repeats ({v.gtid_gaps} missing,
  {v.gtid_repeats} repeated); `CHECKSUM TABLE` of {v.tables} tables ({v.rows_different}
  rows different); checkpoint {v.checkpoint}.
- Processes: relay started {len(services[0].incarnations)} times, sync (driver)
  {sum(i.role == 'sync' for i in services[1].incarnations)} times and `binrelay recover`
  {services[1].recovers} times (every second sync kill); {len(unexpected)} exits the soak
  did not cause; JVMs outliving their driver: {len(v.jvms_left)}. Log lines (not debug):
  relay {logs['relay']['warnings']} warnings, {logs['relay']['tracebacks']} tracebacks;
  sync {logs['sync']['warnings']} warnings, {logs['sync']['downstream lost']} outages
  logged, {logs['sync']['tracebacks']} tracebacks.
{f"- Problems:{chr(10)}{problems}" if problems else ""}
RSS (`VmRSS` every {args.rss_every:g} s; "flat": the last fifth's largest sample at most
{(RSS_SLACK[0] - 1) * 100:.0f} % + {RSS_SLACK[1] / 1024:.0f} MB above the first fifth's):

{rss_table}

RSS over time (all incarnations; MiB, median / max per slice):

{time_table}
"""
    return body, correct


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="how long faults are injected (default 30)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="seconds between two faults (default 5: 360 in 30 min)")
    parser.add_argument("--seed", type=int, default=1, help="order of the faults (default 1)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                        help="fault kinds (default: all), each once per round")
    parser.add_argument("--rate", type=int, default=50,
                        help="sysbench --rate, transactions per second (default 50)")
    parser.add_argument("--ddl-every", type=float, default=5.0,
                        help="seconds between two DDL steps; 0: none (default 5)")
    parser.add_argument("--rss-every", type=float, default=2.0,
                        help="seconds between RSS samples (default 2)")
    parser.add_argument("--drain-timeout", type=float, default=900.0,
                        help="seconds allowed to catch up after the faults (default 900)")
    parser.add_argument("--no-report", action="store_true",
                        help="print the section but leave BENCHMARKS.md alone")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work dir (kept anyway when the soak fails)")
    return parser.parse_args(argv)


def soak(args: argparse.Namespace, workdir: Path) -> bool:
    template = default_template()
    upstream = MariaDBServer(workdir / "upstream", server_id=1, template=template,
                             max_binlog_size=BINLOG_SIZE, extra_args=UPSTREAM_ARGS)
    downstream = MariaDBServer(workdir / "downstream", server_id=2, template=template,
                               extra_args=DOWNSTREAM_ARGS)
    proxies: list[CutProxy] = []
    services: list[Service] = []
    threads: list[Any] = []
    workload: Workload | None = None
    try:
        upstream.start()
        downstream.start()
        facts = machine_facts(upstream)
        upstream.execute("CREATE DATABASE soak")
        upstream.execute("CREATE TABLE soak.marker (id INT PRIMARY KEY, kind VARCHAR(32),"
                         " at DATETIME(6) NOT NULL)")
        log(f"sysbench prepare: {TABLES} tables x {TABLE_SIZE} rows")
        sysbench_prepare(upstream, tables=TABLES, table_size=TABLE_SIZE, threads=THREADS)

        relay_proxy = CutProxy((upstream.host, upstream.port), name="relay-upstream")
        sync_proxy = CutProxy((downstream.host, downstream.port), name="sync-downstream")
        proxies += [relay_proxy, sync_proxy]
        relay_dir = workdir / "relay"
        config = write_soak_config(workdir / "binrelay.toml", relay_dir, relay_proxy,
                                   sync_proxy)
        relay = Service("relay", config, workdir)
        sync = Service("sync", config, workdir)
        services += [relay, sync]

        def check() -> None:
            for s in services:
                if s.gave_up:
                    raise BenchError(f"{s.name} keeps exiting: {s.unexpected[-1]}")
            if workload is not None and workload.error:
                raise BenchError(f"the workload failed: {workload.error!r}")

        relay.start()
        wait_until("the relay's first relay.meta", lambda: relay_position(relay_dir), 120,
                   check)
        sync.start()
        tracker = Tracker(relay_dir, downstream)
        tracker.start()
        threads.append(tracker)
        injector = Injector(args, upstream, downstream, relay, sync, relay_proxy,
                            sync_proxy, tracker)

        log("waiting for the sync to apply the prepare")
        first = wait_drained(upstream, downstream, relay_dir, services, args.drain_timeout)
        log(f"caught up at {first}")

        workload = Workload(upstream, args.rate, args.ddl_every)
        workload.start()
        sampler = RssSampler(relay, sync, args.rss_every)
        sampler.start()
        threads.append(sampler)

        # Baseline: markers without faults.
        baseline_faults = []
        for _ in range(5):
            mid, pos = injector.marker("baseline")
            f = Fault(mid, "baseline", now(), marker_pos=pos)
            tracker.add(f)
            baseline_faults.append(f)
            time.sleep(1.0)
        wait_until("the baseline markers downstream",
                   lambda: all(f.applied_at for f in baseline_faults), 300)
        baseline = [f.applied_s for f in baseline_faults if f.applied_s is not None]
        with tracker.lock:
            tracker.faults = [f for f in tracker.faults if f.kind != "baseline"]

        log(f"faults every {args.interval:g} s for {args.minutes:g} min: {' '.join(args.kinds)}")
        t0 = now()
        injector.run(args.minutes * 60, check)
        t1 = now()
        faults = list(tracker.faults)
        log(f"{len(faults)} faults injected; waiting for the processes to settle")
        wait_until("relay and sync running again",
                   lambda: relay.settled() and sync.settled(), 300, check)
        workload.stop()
        drain_start = now()
        mid, pos = injector.marker("end")
        end = wait_drained(upstream, downstream, relay_dir, services, args.drain_timeout)
        drain_s = now() - drain_start
        log(f"drained in {drain_s:.1f} s at {end}")
        wait_until("every fault's marker downstream", lambda: not tracker.pending(), 30)
        tracker.stop_event.set()
        sampler.stop_event.set()
        stop_codes = {"sync": sync.stop(), "relay": relay.stop()}

        log("verifying")
        v = verify(upstream, downstream, relay_dir, end)
        jvms = [i.jvm for i in sync.incarnations if i.jvm is not None]
        with contextlib.suppress(BenchError):  # a JVM exits once its driver's pipe closes
            wait_until("the JVMs gone", lambda: not any(alive(j) for j in jvms), 15)
        v.jvms_left = [j for j in jvms if alive(j)]
        for pid, _start in v.jvms_left:  # our own grandchildren: end them, named in the report
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        facts["load average at end"] = loadavg()
        body, correct = report(args, facts, faults, sampler.samples, t0, t1, v, services,
                               workload, baseline, drain_s, stop_codes)
        print(body, flush=True)
        if not args.no_report:
            update_section(SECTION, body)
            log("BENCHMARKS.md updated")
        return correct
    finally:
        if workload is not None:
            workload.stop()
        for t in threads:
            t.stop_event.set()
        for s in services:
            s.kill_quietly()
            for inc in s.incarnations:
                if inc.jvm is not None and alive(inc.jvm):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(inc.jvm[0], signal.SIGKILL)
        for p in proxies:
            p.close()
        for server in (downstream, upstream):
            with contextlib.suppress(Exception):
                server.stop(timeout=30)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = make_workdir(SECTION)
    log(f"work dir {workdir}")
    ok = False
    try:
        ok = soak(args, workdir)
        if not ok:
            log("soak: verification FAILED (see above)")
    except BenchError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log(f"soak: FAILED: {first}")
        (workdir / "soak-error.txt").write_text(f"{exc}\n")
    except Exception as exc:
        (workdir / "soak-traceback.txt").write_text(traceback.format_exc())
        log(f"soak: FAILED: {type(exc).__name__}: {exc} (traceback in"
            f" {workdir / 'soak-traceback.txt'})")
    except KeyboardInterrupt:
        log("soak: interrupted")
    if ok and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        log(f"kept {workdir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
