"""A throwaway Spark standalone cluster (1 master, N workers) on loopback.

Started with pyspark's own launcher (``<pyspark>/bin/spark-class``), so it needs nothing
but the pip-installed pyspark and a JDK: this is what the cluster tests and the README's
recipe use.  Every process binds to 127.0.0.1, like every other server binrelay starts.

    with StandaloneCluster(workers=2) as cluster:
        build_session(cluster.master_url)

Each daemon runs in its own process group: a worker's executors (JVMs) and their Python
workers are its descendants, so stopping the group stops them too and nothing outlives
the ``with`` block, also when a test fails inside it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from binrelay.testing.procs import LOOPBACK, die_with_parent, find_free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI_PORT = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")


class ClusterStartError(RuntimeError):
    """A daemon exited, or the workers did not register in time (with the logs' tails)."""


def pyspark_home() -> Path:
    """The pip-installed pyspark package dir: a complete SPARK_HOME (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


# --- process hygiene ------------------------------------------------------------------------

_live: set[StandaloneCluster] = set()
_live_lock = threading.Lock()

def _stop_live() -> None:
    with _live_lock:
        clusters = list(_live)
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.stop(timeout=10)


atexit.register(_stop_live)


# --- the cluster ----------------------------------------------------------------------------


class StandaloneCluster:
    """A standalone master and ``workers`` workers (``cores`` cores, ``memory`` each).

    ``base_dir`` holds the daemons' logs (``master.log``, ``worker-N.log``) and the
    workers' work dirs (``worker-N/``, where executor stdout/stderr land); without it a
    temp dir is made and removed on stop.
    """

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "1g",
                 base_dir: Path | None = None, startup_timeout: float = 90.0,
                 daemon_memory: str = "256m") -> None:
        if workers < 1:
            raise ValueError("a cluster needs at least one worker")
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.startup_timeout = startup_timeout
        self.daemon_memory = daemon_memory
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(
            tempfile.mkdtemp(prefix="binrelay-spark-"))
        self._procs: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []
        self._master_url: str | None = None
        self._ui_port: int | None = None

    # --- what callers use ----------------------------------------------------------------

    @property
    def master_url(self) -> str:
        if self._master_url is None:
            raise RuntimeError("the cluster is not started")
        return self._master_url

    @property
    def web_url(self) -> str:
        if self._ui_port is None:
            raise RuntimeError("the cluster is not started")
        return f"http://{LOOPBACK}:{self._ui_port}"

    def state(self) -> dict[str, Any]:
        """The master's JSON status: workers, alive workers, active and completed apps."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as resp:
            return json.loads(resp.read())

    def log_path(self, name: str) -> Path:
        return self.base_dir / f"{name}.log"

    def pids(self) -> list[int]:
        return [proc.pid for _name, proc, _log in self._procs if not _exited(proc)]

    # --- start / stop --------------------------------------------------------------------

    def _env(self, home: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": LOOPBACK,
            # Executors inherit the worker's environment: the venv's Python (which has
            # binrelay and pyspark) rather than whatever ``python3`` is on PATH.
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            # The master's REST submission server listens on a fixed port (6066) that
            # would collide between two clusters; nothing here submits through it.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        })
        # A stray configuration dir would change where daemons bind or log.
        env.pop("SPARK_CONF_DIR", None)
        return env

    def _spawn(self, name: str, home: Path, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.log_path(name), "ab")  # noqa: SIM115 - closed in stop()
        try:
            # spark-class execs the JVM, so the pid is the daemon's own; a new session
            # makes it a process group with its executors, stopped as one in stop().
            proc = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self._env(home), cwd=self.base_dir, start_new_session=True,
                preexec_fn=die_with_parent())
        except BaseException:
            log.close()
            raise
        self._procs.append((name, proc, log))
        return proc

    def start(self) -> StandaloneCluster:
        if self._procs:
            raise RuntimeError("the cluster is already started")
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise ClusterStartError("no java on PATH and JAVA_HOME is not set")
        home = pyspark_home()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with _live_lock:
            _live.add(self)
        try:
            deadline = time.monotonic() + self.startup_timeout
            self._spawn("master", home, MASTER_CLASS, "--host", LOOPBACK,
                        "--port", str(find_free_port()), "--webui-port", str(find_free_port()))
            self._wait_master(deadline)
            for n in range(1, self.workers + 1):
                work_dir = self.base_dir / f"worker-{n}"
                work_dir.mkdir(exist_ok=True)
                self._spawn(f"worker-{n}", home, WORKER_CLASS, self.master_url,
                            "--host", LOOPBACK, "--cores", str(self.cores),
                            "--memory", self.memory, "--webui-port", str(find_free_port()),
                            "--work-dir", str(work_dir))
            self._wait_workers(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_running(self) -> None:
        for name, proc, _log in self._procs:
            if _exited(proc):
                proc.wait()  # its group is empty or orphaned: nothing left to signal
                raise ClusterStartError(
                    f"spark {name} exited with {proc.returncode}\n{self._tails()}")

    def _wait_master(self, deadline: float) -> None:
        # The ports actually bound come from the log: Spark moves to the next port when
        # the one asked for was taken meanwhile (spark.port.maxRetries).
        while time.monotonic() < deadline:
            self._check_running()
            text = self.log_path("master").read_text(errors="replace")
            url, ui = _MASTER_URL.search(text), _MASTER_UI_PORT.search(text)
            if url and ui:
                self._master_url, self._ui_port = url.group(1), int(ui.group(1))
                return
            time.sleep(0.2)
        raise ClusterStartError(
            f"the spark master did not start in {self.startup_timeout:.0f} s\n{self._tails()}")

    def _wait_workers(self, deadline: float) -> None:
        alive = 0
        while time.monotonic() < deadline:
            self._check_running()
            with contextlib.suppress(OSError, ValueError):
                state = self.state()
                alive = int(state.get("aliveworkers", 0))
                if state.get("status") == "ALIVE" and alive >= self.workers:
                    return
            time.sleep(0.3)
        raise ClusterStartError(
            f"{alive} of {self.workers} spark workers registered with {self.master_url} in "
            f"{self.startup_timeout:.0f} s\n{self._tails()}")

    def _tails(self, max_chars: int = 3000) -> str:
        parts = []
        for name, _proc, _log in self._procs:
            path = self.log_path(name)
            with contextlib.suppress(OSError):
                parts.append(f"--- {path} (tail) ---\n"
                             f"{path.read_text(errors='replace')[-max_chars:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every daemon's process group (workers first, so they stop their
        executors), SIGKILL what is still there after ``timeout``, then whatever still runs
        in a worker's work dir (executors' Python daemons make process groups of their own).
        """
        procs = list(reversed(self._procs))
        live = [proc for _name, proc, _log in procs if proc.returncode is None]
        for proc in live:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(_exited(proc) for proc in live):
            time.sleep(0.1)
        for proc in live:
            # Before reaping: an unreaped leader keeps its pid, and so the group id, ours.
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        for _name, _proc, log in procs:
            log.close()
        self._reap_stragglers()
        self._procs.clear()
        with _live_lock:
            _live.discard(self)
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def leftover_pids(self) -> list[int]:
        """Processes still running inside a worker's work dir (executors and their Python
        workers run there); empty once the cluster is stopped."""
        work_dirs = [self.base_dir / f"worker-{n}" for n in range(1, self.workers + 1)]
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cwd = Path(os.readlink(entry / "cwd"))
            except OSError:
                continue
            if any(cwd.is_relative_to(d) for d in work_dirs):
                found.append(int(entry.name))
        return found

    def _reap_stragglers(self, grace: float = 5.0) -> None:
        # A Python daemon exits by itself once its executor's pipe closes; give it that
        # chance, then kill by pid what is still left in the work dirs.
        deadline = time.monotonic() + grace
        while self.leftover_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.leftover_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the daemon exited, without reaping it (a zombie still holds its pid)."""
    if proc.returncode is not None:
        return True
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return proc.poll() is not None
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The group id is the daemon's pid (start_new_session), signalled only while the daemon
    # is unreaped, so the id cannot have been reused by anything else.
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
