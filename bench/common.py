"""Shared pieces of the benchmarks: relay subprocess, checks, machine facts, BENCHMARKS.md.

Nothing here imports from ``tests/``: the few helpers the benchmarks share with the test
suite (config writing, the command line, the byte-identity rule) are copied on purpose, so
that the benchmarks keep working whatever the tests do with theirs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

import binrelay
from binrelay.relay.layout import list_binlogs, read_index, read_meta
from binrelay.relay.verify import compare_file
from binrelay.testing.sandbox import MariaDBServer

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = REPO_ROOT / "BENCHMARKS.md"

ANCHOR = shutil.which("mariadb-binlog") or "/usr/bin/mariadb-binlog"

MB = 1_000_000
MIB = 1024 * 1024

SECTIONS = ("relay_throughput", "relay_memory", "reader_latency", "decode_throughput",
            "sync_catchup", "sync_lag")

INTRO = """\
# Benchmarks

Each benchmark runs binrelay against a throwaway MariaDB server on this machine (see
`src/binrelay/testing/sandbox.py`) and compares it with an anchor that does the same job:
`mariadb-binlog --read-from-remote-server --raw`, MariaDB's own C client, which connects as a
replica and writes the binlog it receives to local files, just as `binrelay relay` does (but
without fsync, relay.meta or crash safety).

- **relay_throughput** (`.venv/bin/python -m bench.relay_throughput [--mib 458] [--rounds 3]`):
  the time to relay a sysbench `oltp_write_only` binlog of `--mib` MiB into an empty relay
  dir. binrelay is timed from spawning `binrelay relay` until `relay.meta` reaches
  `SHOW MASTER STATUS`, the anchor (`--to-last-log`) as a whole command; the two alternate,
  `--rounds` times each. Goal: median of anchor time / binrelay time ≥ 1.0.
- **relay_memory** (`.venv/bin/python -m bench.relay_memory [--gib 1.0]`): the peak RSS
  (`VmHWM` from `/proc/<pid>/status`, sampled every 50 ms) of each side while
  it relays a binlog holding one transaction of `--gib` GiB. Goal: binrelay's peak RSS
  < 100 MB.

After every binrelay run the relay files are checked byte for byte against the upstream's
binlog files (the active file may differ only in the FDE's in-use flag, byte 21); a run that
relays wrong bytes fails the benchmark instead of reporting a figure.

Each script rewrites only its own section below (between its `<!-- bench:NAME -->` markers),
so reruns update in place. The figures come from one machine, often shared with other work
(see the load average in each section); absolute MB/s and seconds move with the machine, the
ratio to the anchor measured in the same run is what matters.
"""


class BenchError(RuntimeError):
    """The benchmark could not produce a trustworthy figure."""


# --------------------------------------------------------------------------- command lines


def binrelay_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "binrelay.cli.main", *args]


def write_config(path: Path, server: MariaDBServer, relay_dir: Path, **keys: Any) -> Path:
    """A ``binrelay relay`` config reading from ``server`` as root into ``relay_dir``."""
    data: dict[str, Any] = {"relay-dir": str(relay_dir), "relay-sync-interval": 0.05}
    data.update({k.replace("_", "-"): v for k, v in keys.items()})
    data["from"] = {"host": server.host, "port": server.port, "user": "root", "password": ""}
    path.write_text(tomli_w.dumps(data))
    return path


def anchor_cmd(server: MariaDBServer, out_dir: Path, first_binlog: str) -> list[str]:
    """mariadb-binlog copying every binlog from ``first_binlog`` on into ``out_dir``."""
    return [ANCHOR, "--read-from-remote-server", "--raw", "--to-last-log",
            f"-h{server.host}", f"-P{server.port}", "-uroot", f"--result-file={out_dir}/",
            first_binlog]


def make_workdir(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"binrelay-bench-{name}-", dir="/tmp"))


def drop_workdir(workdir: Path, keep: bool) -> None:
    """At a benchmark's end: remove its work dir, or say where it was kept (``--keep``)."""
    if keep:
        log(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- processes


def proc_status_kib(pid: int, key: str) -> int:
    """A ``kB`` line of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``...); 0 once the process
    is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m[1]) if m else 0


def vm_hwm_kib(pid: int) -> int:
    """The process's peak RSS so far (KiB)."""
    return proc_status_kib(pid, "VmHWM")


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds used so far) for every live process."""
    out: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name (field 2) may hold spaces: split after its closing parenthesis.
        fields = text[text.rindex(")") + 2:].split()
        out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK)
    return out


def tree_cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each named process and its live
    descendants (a Spark driver's JVM and Python workers count for the driver)."""
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, float] = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                total += stats[pid][1]
                todo += children.get(pid, [])
        out[name] = total
    return out


def maps_mention(pid: int, needle: str) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _reap(proc: subprocess.Popen[bytes], *, block: bool) -> int | None:
    """Reap the child: its exit code, or None while it runs (``block=False``).

    Not ``wait4``'s ``ru_maxrss``: Linux carries the forking parent's peak RSS over into an
    exec'd child's, so for a small C client it reports this Python process's size.
    """
    pid, status = os.waitpid(proc.pid, 0 if block else os.WNOHANG)
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM, then wait up to ``timeout`` (then SIGKILL); returns the exit code."""
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = _reap(proc, block=False)
        if done is not None:
            return done
        time.sleep(0.01)
    proc.kill()
    _reap(proc, block=True)
    raise BenchError(f"process {proc.pid} ignored SIGTERM for {timeout:.0f}s (killed)")


def _kill_quietly(proc: subprocess.Popen[bytes]) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(ChildProcessError):
            _reap(proc, block=True)


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "<no log>"


@dataclass
class ProcRun:
    seconds: float  #: spawn until done (anchor: exit; relay: caught up)
    returncode: int
    peak_rss_kib: int  #: largest VmHWM sampled while it ran (0 when not sampled)
    speedups_loaded: bool | None = None  #: binrelay._speedups mapped into the relay process


def caught_up(relay_dir: Path, want: tuple[str, int]) -> bool:
    """relay.meta of the relay dir's last subdir says ``want`` (binlog name, position)."""
    try:
        index = read_index(relay_dir)
        if not index:
            return False
        meta = read_meta(relay_dir / str(index[-1]))
    except Exception:
        return False
    return meta is not None and (meta.binlog_name, meta.binlog_pos) == want


def run_relay(config: Path, relay_dir: Path, want: tuple[str, int], log_path: Path, *,
              poll: float, sample_rss: bool = False, timeout: float = 600.0) -> ProcRun:
    """``binrelay relay --config``: time from spawn until caught up with ``want``, then SIGTERM.

    Raises :class:`BenchError` when the relay exits on its own, does not catch up within
    ``timeout`` or does not exit 0 on SIGTERM.
    """
    peak = 0
    with log_path.open("ab") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(binrelay_cmd("relay", "--config", str(config)),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        while True:
            if sample_rss:
                peak = max(peak, vm_hwm_kib(proc.pid))
            if caught_up(relay_dir, want):
                seconds = time.perf_counter() - start
                break
            done = _reap(proc, block=False)
            if done is not None:
                raise BenchError(f"binrelay relay exited with {done} before catching up;"
                                 f" log:\n{tail(log_path)}")
            if time.perf_counter() - start > timeout:
                raise BenchError(f"binrelay relay did not reach {want} in {timeout:.0f}s;"
                                 f" log:\n{tail(log_path)}")
            time.sleep(poll)
        if sample_rss:
            peak = max(peak, vm_hwm_kib(proc.pid))
        speedups = maps_mention(proc.pid, "_speedups")
        rc = _stop(proc, timeout=60)
    finally:
        _kill_quietly(proc)
    if rc != 0:
        raise BenchError(f"binrelay relay exited with {rc} on SIGTERM (want 0); log:\n"
                         f"{tail(log_path)}")
    return ProcRun(seconds, rc, peak, speedups)


def run_sampled(cmd: Sequence[str], log_path: Path, *, poll: float,
                timeout: float = 600.0) -> ProcRun:
    """Run ``cmd`` to its end, sampling its VmHWM every ``poll`` seconds."""
    peak = 0
    with log_path.open("ab") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        while True:
            peak = max(peak, vm_hwm_kib(proc.pid))
            done = _reap(proc, block=False)
            if done is not None:
                seconds = time.perf_counter() - start
                rc = done
                break
            if time.perf_counter() - start > timeout:
                raise BenchError(f"{cmd[0]} did not finish in {timeout:.0f}s")
            time.sleep(poll)
    finally:
        _kill_quietly(proc)
    if rc != 0:
        raise BenchError(f"{' '.join(cmd)} exited with {rc}; output:\n{tail(log_path)}")
    return ProcRun(seconds, rc, peak)


def settled_master_status(server: MariaDBServer, *, quiet: float = 2.0,
                          timeout: float = 60.0) -> tuple[str, int]:
    """``SHOW MASTER STATUS`` once it has held still for ``quiet`` seconds.

    After a rotation MariaDB appends a Binlog_checkpoint event on its own a little later
    (once InnoDB has flushed), which would move the goal post during a timed run.
    """
    deadline = time.monotonic() + timeout
    last = server.master_status()
    since = time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise BenchError(f"the upstream's binlog position did not settle in {timeout:.0f}s")
        time.sleep(0.1)
        now = server.master_status()
        if now != last:
            last, since = now, time.monotonic()
    return last


# --------------------------------------------------------------------------- checks


def last_subdir(relay_dir: Path) -> Path:
    index = read_index(relay_dir)
    if not index:
        raise BenchError(f"no server-uuid.index in {relay_dir}")
    return relay_dir / str(index[-1])


def compare_binlog(upstream: Path, copy: Path) -> None:
    """``copy`` equals ``upstream`` byte for byte, but for a cleared in-use flag (byte 21)."""
    problem = compare_file(copy, upstream)
    if problem:
        raise BenchError(f"{copy}: {problem}")


def verify_relay(server: MariaDBServer, relay_dir: Path) -> list[str]:
    """Every upstream binlog file is in the last subdir, byte-identical; returns the names."""
    subdir = last_subdir(relay_dir)
    names = [name for name, _size in server.binlog_files()]
    relayed = list_binlogs(subdir)
    if relayed != names:
        raise BenchError(f"{subdir} holds {relayed}, upstream has {names}")
    for name in names:
        compare_binlog(server.binlog_path(name), subdir / name)
    return names


def verify_anchor_sizes(server: MariaDBServer, out_dir: Path) -> None:
    """The anchor wrote every upstream file at full length (a sanity check on its timing)."""
    for name, size in server.binlog_files():
        path = out_dir / name
        got = path.stat().st_size if path.exists() else None
        if got != size:
            raise BenchError(f"anchor wrote {got} bytes of {name}, upstream has {size}")


# --------------------------------------------------------------------------- facts, report


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def mem_total_gib() -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1024 * 1024)
    return 0.0


def speedups_importable() -> bool:
    from binrelay.relay import hotloop

    return hotloop.take_run_c is not None


def pmr_version() -> str:
    """python-mysql-replication's version (the anchor of decode_throughput and
    dump_throughput), or BenchError when it is not installed."""
    try:
        from importlib.metadata import version

        return version("mysql-replication")
    except Exception as exc:
        raise BenchError("python-mysql-replication is not installed: run"
                         " .venv/bin/pip install -e '.[bench]'") from exc


def loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_facts(server: MariaDBServer) -> dict[str, str]:
    anchor = subprocess.run([ANCHOR, "--version"], capture_output=True, text=True, check=False)
    return {
        "date (UTC)": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
        "CPU": cpu_model(),
        "cores (nproc)": str(len(os.sched_getaffinity(0))),
        "memory": f"{mem_total_gib():.1f} GiB",
        "kernel": platform.release(),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "binrelay": binrelay.__version__,
        "MariaDB server": str(server.scalar("SELECT VERSION()")),
        "anchor": anchor.stdout.strip().replace(ANCHOR, "mariadb-binlog") or ANCHOR,
        "load average at start (1/5/15 min)": loadavg(),
    }


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def facts_table(facts: dict[str, str]) -> str:
    return md_table(["machine", ""], facts.items())


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"


def _placeholder(name: str) -> str:
    begin, end = _markers(name)
    return f"{begin}\n## {name}\n\nNot run yet.\n{end}\n"


def update_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace the section ``name`` of BENCHMARKS.md with ``body`` (markers added here)."""
    begin, end = _markers(name)
    section = f"{begin}\n{body.strip()}\n{end}"
    if path.exists():
        text = path.read_text()
    else:
        text = INTRO + "".join(f"\n{_placeholder(s)}" for s in SECTIONS)
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text, count=1)
    else:
        text = text.rstrip("\n") + f"\n\n{section}\n"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
