"""Reader latency: from the relay's fsync to delivery by a following RelayReader.

    .venv/bin/python -m bench.reader_latency [--seconds 20]

A sandbox MariaDB (1 MiB binlog files, so rotations happen) runs sysbench oltp_write_only with
2 threads while ``binrelay relay`` (default ``relay-sync-interval``) relays it.  Two readers
take turns, each following the relay dir from its current end in a process of its own during
a workload of its own: ours, woken by inotify when the relay replaces ``relay.meta``, and the
anchor, the same reader made to poll every 20 ms as a reader without change notification
must (DM's cross-process reader polls too).  Every transaction
end a reader delivers is a sample: its delivery time minus the time of the first
``relay.meta`` that covered it (the relay writes relay.meta right after the data's fsync; a
thread here records each one as it is written).  Goal: p99 of ours <= 50 ms.  Every
delivered byte is checked against the relay files at the end.

Writes its section of BENCHMARKS.md (unless ``--no-report``).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    BenchError,
    binrelay_cmd,
    drop_workdir,
    facts_table,
    log,
    machine_facts,
    make_workdir,
    md_table,
    settled_master_status,
    update_section,
)
from binrelay.binlog import constants as c
from binrelay.config.schema import SCHEMA
from binrelay.errors import RelayDirError
from binrelay.position import Position, binlog_sort_key
from binrelay.relay.layout import META_FILENAME, list_binlogs, read_index, read_meta
from binrelay.relay.reader import RelayReader
from binrelay.relay.watch import ChangeWaiter
from binrelay.testing.sandbox import (
    MariaDBServer,
    default_template,
    sysbench_prepare,
    sysbench_run_background,
)

SECTION = "reader_latency"
#: A durable batch ends at a transaction end: XID, a DDL Query, or a real Rotate.
_BATCH_ENDS = frozenset({c.XID_EVENT, c.QUERY_EVENT, c.ROTATE_EVENT})


@dataclass
class Follower:
    name: str
    use_inotify: bool
    samples: list[float] = field(default_factory=list)
    ends: list[tuple[int, str, int]] = field(default_factory=list)
    events: int = 0
    files: dict[tuple[str, str], bytearray] = field(default_factory=dict)
    error: str | None = None


def follow_in_process(relay_dir: Path, who: Follower, start: Position, stop: Any,
                      results: Any) -> None:
    """Entry point of a follower process: the reader must not share a GIL with the rest."""
    # The bytes before the start are durable already; the reader must deliver the rest.
    prefix = (relay_dir / str(start.subdir) / start.binlog_name).read_bytes()[: start.binlog_pos]
    who.files[(str(start.subdir), start.binlog_name)] = bytearray(prefix)
    follow(relay_dir, who, start, stop)
    digests = {k: hashlib.sha256(v).hexdigest() for k, v in who.files.items()}
    results.put((who.name, who.events, who.ends, digests, who.error))


def follow(relay_dir: Path, who: Follower, start: Position, stop: Any) -> None:
    """Read from ``start`` on; record (delivery time, file, end) of every transaction end."""
    try:
        reader = RelayReader(relay_dir, start, follow=True, wait_timeout=0.5,
                             should_stop=stop.is_set, use_inotify=who.use_inotify)
        for event in reader:
            if event.pos < start.binlog_pos and event.file == start.binlog_name:
                continue  # the FDE, delivered again because reading starts mid-file
            who.events += 1
            buf = who.files.setdefault((str(event.subdir), event.file), bytearray(b"\xfebin"))
            if len(buf) != event.pos:
                raise BenchError(f"{who.name}: {event.file} event at {event.pos} after "
                                 f"{len(buf)} bytes")
            buf += event.raw
            if event.event_type in _BATCH_ENDS:
                who.ends.append((time.time_ns(), event.file, event.end))
    except BaseException as exc:
        who.error = repr(exc)


def log_meta(relay_dir: Path, stop: threading.Event, out: list[tuple[int, str, int]]) -> None:
    """Every relay.meta the relay writes: (written at, binlog-name, binlog-pos).

    Woken by inotify on each replacement; two replacements closer together than this thread
    wakes up fold into the later one, which can only make latencies look smaller by the gap
    (a few ms), never larger.
    """
    waiter = ChangeWaiter(relay_dir)
    last = None
    try:
        while not stop.is_set():
            index = read_index(relay_dir) or []
            if index:
                sub = relay_dir / str(index[-1])
                waiter.watch(sub)
                try:
                    st = os.stat(sub / META_FILENAME)
                    meta = read_meta(sub)
                except (FileNotFoundError, RelayDirError):
                    meta = None
                if meta is not None and (st.st_mtime_ns, meta.binlog_pos) != last:
                    last = (st.st_mtime_ns, meta.binlog_pos)
                    out.append((st.st_mtime_ns, meta.binlog_name, meta.binlog_pos))
            waiter.wait(0.5)
    finally:
        waiter.close()


def latencies(ends: list[tuple[int, str, int]], metas: list[tuple[int, str, int]]
              ) -> list[float]:
    """For each transaction end, delivery time minus the first meta write that covered it."""
    out = []
    j = 0
    for delivered, name, end in ends:  # both lists are in relay order
        key = (binlog_sort_key(name), end)
        while j < len(metas) and (binlog_sort_key(metas[j][1]), metas[j][2]) < key:
            j += 1
        if j < len(metas):
            out.append((delivered - metas[j][0]) / 1e6)
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def phase(relay_dir: Path, server: MariaDBServer, who: Follower, seconds: float,
          rate: int) -> None:
    """One workload with one reader following from the relay dir's start."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    results = ctx.Queue()
    index = read_index(relay_dir) or []
    meta = read_meta(relay_dir / str(index[-1]))
    assert meta is not None
    start = Position(index[-1], meta.binlog_name, meta.binlog_pos)
    proc = ctx.Process(target=follow_in_process, args=(relay_dir, who, start, stop, results))
    proc.start()
    metas: list[tuple[int, str, int]] = []
    meta_stop = threading.Event()
    meta_thread = threading.Thread(target=log_meta, args=(relay_dir, meta_stop, metas),
                                   daemon=True)
    meta_thread.start()
    log(f"{who.name}: sysbench oltp_write_only, 2 threads, {seconds:.0f} s"
        + (f", {rate} tps" if rate else ""))
    with sysbench_run_background(server, tables=2, table_size=10000, time=seconds,
                                 extra=[f"--rate={rate}"] if rate else []) as work:
        work.wait(timeout=seconds + 120)
    want = settled_master_status(server)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        index = read_index(relay_dir) or []
        meta = read_meta(relay_dir / str(index[-1]))
        if meta is not None and (meta.binlog_name, meta.binlog_pos) == want:
            break
        time.sleep(0.05)
    time.sleep(1.0)
    stop.set()
    meta_stop.set()
    meta_thread.join(timeout=10)
    _name, events, ends, digests, error = results.get(timeout=120)
    proc.join(timeout=30)
    expected = {(str(s), n): hashlib.sha256((relay_dir / str(s) / n).read_bytes()).hexdigest()
                for s in read_index(relay_dir) or [] for n in list_binlogs(relay_dir / str(s))
                if (binlog_sort_key(n), s.seq) >= (binlog_sort_key(start.binlog_name),
                                                   start.subdir.seq)}
    if error is None and digests != expected:
        error = "it did not deliver exactly the relay files"
    who.events, who.ends, who.error, who.files = events, ends, error, digests
    who.samples = latencies(ends, metas)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="workload duration")
    parser.add_argument("--rates", type=int, nargs="+", default=[0, 1000],
                        help="sysbench transactions per second, one run each (0: unthrottled)")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)

    workdir = make_workdir(SECTION)
    server = MariaDBServer(workdir / "srv", server_id=1, max_binlog_size=1 << 20,
                           template=default_template())
    relay = None
    try:
        server.start()
        facts = machine_facts(server)
        relay_dir = workdir / "relay"
        config = workdir / "relay.toml"
        config.write_text(
            f'relay-dir = "{relay_dir}"\n[from]\nhost = "127.0.0.1"\nport = {server.port}\n'
            'user = "root"\npassword = ""\n')
        sysbench_prepare(server, tables=2, table_size=10000)
        with open(workdir / "relay.log", "wb") as out:
            relay = subprocess.Popen(binrelay_cmd("relay", "--config", str(config)),
                                     stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (relay_dir / "server-uuid.index").exists():
            if time.monotonic() > deadline:
                raise BenchError("the relay did not start")
            time.sleep(0.05)
        results: list[tuple[int, Follower, Follower]] = []
        for rate in args.rates:
            ours = Follower("inotify (binrelay)", True)
            anchor = Follower("polling 20 ms", False)
            for who in (ours, anchor):
                phase(relay_dir, server, who, args.seconds, rate)
                if who.error is not None:
                    raise BenchError(f"{who.name} failed: {who.error}")
            results.append((rate, ours, anchor))
        relay.send_signal(signal.SIGTERM)
        if relay.wait(timeout=60) != 0:
            raise BenchError("the relay did not exit 0 on SIGTERM")
        relay = None
        files = len(list_binlogs(relay_dir / str((read_index(relay_dir) or [])[-1])))
        rows = []
        verdicts = []
        for rate, ours, anchor in results:
            load = f"{rate} tps" if rate else "unthrottled"
            for f in (ours, anchor):
                rows.append([load, f.name, f.events, len(f.samples),
                             f"{pct(f.samples, 50):.1f}", f"{pct(f.samples, 90):.1f}",
                             f"{pct(f.samples, 99):.1f}", f"{max(f.samples):.1f}"])
            p99 = pct(ours.samples, 99)
            verdicts.append(f"{load}: p99 {p99:.1f} ms, "
                            f"{'met' if p99 <= 50 else 'not met'}")
        body = "\n".join([
            "## Reader latency: relay fsync to delivery, inotify vs. polling",
            "",
            f"`python -m bench.reader_latency --seconds {args.seconds:.0f} --rates "
            f"{' '.join(map(str, args.rates))}` · goal: p99 of the inotify reader ≤ 50 ms · "
            f"**verdict: {'; '.join(verdicts)}**",
            "",
            facts_table(facts),
            "",
            f"Workload per reader and load: sysbench oltp_write_only, 2 tables × 10000 rows, "
            f"2 threads, {args.seconds:.0f} s, unthrottled (both cores saturated) or at a fixed "
            f"rate; 1 MiB binlog files ({files} relayed in all); relay with the default "
            f"`relay-sync-interval` ({SCHEMA['']['relay-sync-interval'].default:g} s). A sample"
            " is one transaction end: the time from the "
            "first `relay.meta` covering it being written (right after the data's fsync) to "
            "the reader handing it out. The readers took turns, each in a process of its own "
            "during a workload of its own, starting at the relay's end, and each delivered "
            "every byte from there, in order. The machine's two cores also run the server, "
            "sysbench (2 threads) and the relay: unthrottled, the tail is scheduling delay "
            "(the reader itself reads about 380 k events/s, ten times what the workload "
            "writes).",
            "",
            md_table(["load", "reader", "events", "samples", "p50 ms", "p90 ms", "p99 ms",
                      "max ms"], rows),
        ])
        print(body)
        if not args.no_report:
            update_section(SECTION, body)
            log("BENCHMARKS.md updated")
    finally:
        if relay is not None and relay.poll() is None:
            relay.kill()
            relay.wait()
        server.cleanup()
        drop_workdir(workdir, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
