"""Throwaway real MariaDB servers (and sysbench workloads): the demo's sandbox and the tests'.

Every server is a private ``mariadbd`` started with ``--no-defaults`` on a free
127.0.0.1 port, with its datadir copied from a template that
``mariadb-install-db`` builds once per process/session (the installer costs far
more than a copy). The template already contains the accounts tests rely on:

* ``root`` with an empty password, usable over TCP from 127.0.0.1;
* ``repl`` / ``replpass`` with the privileges a binlog relay needs.

Servers are started in their own session with a parent-death signal and are
tracked in a registry that an ``atexit`` hook drains, so a crashed or
interrupted test run does not leave ``mariadbd`` processes behind.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import pymysql

from binrelay import sqlclient
from binrelay.testing.procs import LOOPBACK, die_with_parent, find_free_port

__all__ = [
    "BINLOG_BASENAME",
    "DEFAULT_RUN_EVENTS",
    "HOST",
    "INSTALL_DB",
    "MARIADBD",
    "MIN_BINLOG_SIZE",
    "REPL_PASSWORD",
    "REPL_USER",
    "ROOT_USER",
    "SYSBENCH",
    "MariaDBServer",
    "ServerFactory",
    "ServerStartError",
    "SysbenchError",
    "SysbenchWorkload",
    "build_template",
    "default_template",
    "find_free_port",
    "live_server_pids",
    "run_sysbench",
    "stop_all",
    "sysbench_prepare",
    "sysbench_run",
    "sysbench_run_background",
]

HOST = LOOPBACK
ROOT_USER = "root"
REPL_USER = "repl"
REPL_PASSWORD = "replpass"
BINLOG_BASENAME = "mysql-bin"

MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
INSTALL_DB = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"
SYSBENCH = shutil.which("sysbench") or "/usr/bin/sysbench"

# The redo log is created by the installer; servers must run with the same size
# or every start would first rebuild it. 32M keeps a per-server copy cheap while
# sysbench bursts do not stall on checkpoints.
_INNODB_SHAPE_ARGS = ("--innodb-log-file-size=32M",)

# Small footprint so that several servers fit on a CI box, and speed over
# durability where only an OS crash (never a test's SIGKILL) could lose data:
# with flush_log_at_trx_commit=2 a committed transaction is in the page cache,
# which survives the death of mariadbd.
_FOOTPRINT_ARGS = (
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-buffer-size=4M",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
    "--innodb-read-io-threads=1",
    "--innodb-write-io-threads=2",
    "--innodb-buffer-pool-dump-at-shutdown=0",
    "--innodb-buffer-pool-load-at-startup=0",
    "--aria-pagecache-buffer-size=8M",
    "--key-buffer-size=1M",
    "--performance-schema=OFF",
    # The default of 2000 asks for more file descriptors than containers usually
    # allow, and the resulting warning on every start is just noise.
    "--table-open-cache=400",
)

MIN_BINLOG_SIZE = 4096
MAX_BINLOG_SIZE = 1024 * 1024 * 1024
# Unix socket paths are limited to 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107

_START_ATTEMPTS = 5
_POLL_INTERVAL = 0.03

Rows = tuple[tuple[Any, ...], ...]


def _is_root() -> bool:
    return os.geteuid() == 0


# --------------------------------------------------------------------------------------
# Process hygiene
# --------------------------------------------------------------------------------------

_registry_lock = threading.Lock()
_live_servers: set[MariaDBServer] = set()
_live_workloads: set[SysbenchWorkload] = set()

def _spawn(args: Sequence[str], out: IO[Any] | int) -> subprocess.Popen[bytes]:
    # A new session keeps the terminal's Ctrl-C away from children: pytest turns
    # it into KeyboardInterrupt and then tears the servers down in order.
    return subprocess.Popen(
        list(args),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )


def stop_all() -> list[int]:
    """Stop every workload and server this process still runs; returns their PIDs."""
    with _registry_lock:
        workloads = list(_live_workloads)
        servers = list(_live_servers)
    pids = [w.process.pid for w in workloads] + [p for p in (s.pid for s in servers) if p]
    for workload in workloads:
        with contextlib.suppress(Exception):
            workload.stop(timeout=5)
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop(timeout=10)
    return pids


atexit.register(stop_all)


# --------------------------------------------------------------------------------------
# Template datadir
# --------------------------------------------------------------------------------------

# Runs inside the installer's bootstrap, where grant tables are not loaded until
# FLUSH PRIVILEGES. With --skip-name-resolve TCP clients are matched by IP, so
# root@localhost (socket only) is not enough. The installer also creates
# root@<hostname>, which --skip-name-resolve would warn about on every start.
_TEMPLATE_SQL = f"""\
FLUSH PRIVILEGES;
DELETE FROM mysql.global_priv
    WHERE User = 'root' AND Host NOT IN ('localhost', '127.0.0.1', '::1');
DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1');
FLUSH PRIVILEGES;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE USER '{REPL_USER}'@'%' IDENTIFIED BY '{REPL_PASSWORD}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD, BINLOG MONITOR
    ON *.* TO '{REPL_USER}'@'%';
"""


def build_template(datadir: Path | str) -> Path:
    """Run ``mariadb-install-db`` into ``datadir`` (must not exist) and return it."""
    datadir = Path(datadir)
    if datadir.exists():
        raise FileExistsError(datadir)
    datadir.parent.mkdir(parents=True, exist_ok=True)
    init_sql = datadir.parent / f"{datadir.name}-init.sql"
    init_sql.write_text(_TEMPLATE_SQL)
    args = [
        INSTALL_DB,
        "--no-defaults",
        f"--datadir={datadir}",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
        f"--extra-file={init_sql}",
        *_INNODB_SHAPE_ARGS,
    ]
    if _is_root():
        args.append("--user=root")
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(datadir, ignore_errors=True)
        raise RuntimeError(
            f"mariadb-install-db failed with exit code {proc.returncode}:\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return datadir


_default_template: Path | None = None
_default_template_lock = threading.Lock()


def default_template() -> Path:
    """A template built lazily once per process, for use outside pytest fixtures."""
    global _default_template
    with _default_template_lock:
        if _default_template is None:
            root = Path(tempfile.mkdtemp(prefix="binrelay-template-"))
            atexit.register(shutil.rmtree, root, True)
            _default_template = build_template(root / "data")
        return _default_template


# --------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------


class ServerStartError(RuntimeError):
    """mariadbd exited or did not accept connections in time."""


class _PortClash(Exception):
    pass


_name_counter = itertools.count(1)


def _short_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="br", dir="/tmp"))


class MariaDBServer:
    """One private mariadbd process with binary logging enabled.

    ``base_dir`` holds the datadir (``data/``), the error log and the pid file.
    The server keeps its port across :meth:`restart` so that clients (and a relay
    under test) can reconnect to the same address.
    """

    def __init__(
        self,
        base_dir: Path | str,
        *,
        server_id: int = 1,
        max_binlog_size: int | None = None,
        gtid_domain_id: int = 0,
        binlog_checksum: str = "CRC32",
        binlog_format: str = "ROW",
        extra_args: Sequence[str] = (),
        template: Path | str | None = None,
        socket_dir: Path | str | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        if max_binlog_size is not None and (
            not MIN_BINLOG_SIZE <= max_binlog_size <= MAX_BINLOG_SIZE
            or max_binlog_size % MIN_BINLOG_SIZE
        ):
            # mariadbd silently clamps and rounds down to a 4 KiB multiple, and a
            # rotation test would then assert on a size the server never used.
            raise ValueError(
                f"max_binlog_size must be a multiple of {MIN_BINLOG_SIZE} within"
                f" [{MIN_BINLOG_SIZE}, {MAX_BINLOG_SIZE}], got {max_binlog_size}"
            )
        self.base_dir = Path(base_dir).absolute()
        self.server_id = server_id
        self.max_binlog_size = max_binlog_size
        self.gtid_domain_id = gtid_domain_id
        self.binlog_checksum = binlog_checksum
        self.binlog_format = binlog_format
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.name = f"m{next(_name_counter)}-s{server_id}"
        self._template = Path(template) if template is not None else None

        self._owns_socket_dir = False
        if socket_dir is None:
            socket_dir = self.base_dir
            if len(str(socket_dir / f"{self.name}.sock")) > _MAX_SOCKET_PATH:
                socket_dir = _short_dir()
                self._owns_socket_dir = True
        self.socket = Path(socket_dir) / f"{self.name}.sock"
        if len(str(self.socket)) > _MAX_SOCKET_PATH:
            raise ValueError(f"socket path too long ({len(str(self.socket))}): {self.socket}")

        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()

    # ---- paths and addresses ---------------------------------------------------------

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.name} has not been started yet")
        return self._port

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def error_log(self) -> Path:
        return self.base_dir / "error.log"

    @property
    def pid_file(self) -> Path:
        return self.base_dir / "mariadbd.pid"

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def dsn(self) -> dict[str, Any]:
        """Root connection parameters, in PyMySQL keyword form."""
        return {"host": self.host, "port": self.port, "user": ROOT_USER, "password": ""}

    def binlog_path(self, name: str) -> Path:
        return self.datadir / name

    @property
    def binlog_index_path(self) -> Path:
        return self.datadir / f"{BINLOG_BASENAME}.index"

    def error_log_tail(self, max_chars: int = 4000, since: int = 0) -> str:
        try:
            with self.error_log.open("rb") as fh:
                fh.seek(since)
                data = fh.read()
        except FileNotFoundError:
            return "<no error log>"
        return data.decode(errors="replace")[-max_chars:]

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.is_running else "stopped"
        return f"<MariaDBServer {self.name} port={self._port} {state} {self.base_dir}>"

    # ---- lifecycle -------------------------------------------------------------------

    def _command(self, port: int) -> list[str]:
        args = [
            MARIADBD,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            f"--port={port}",
            f"--bind-address={HOST}",
            "--skip-name-resolve",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            f"--log-bin={BINLOG_BASENAME}",
            f"--binlog-format={self.binlog_format}",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            f"--server-id={self.server_id}",
            f"--gtid-domain-id={self.gtid_domain_id}",
            f"--binlog-checksum={self.binlog_checksum}",
            *_INNODB_SHAPE_ARGS,
            *_FOOTPRINT_ARGS,
        ]
        if self.max_binlog_size is not None:
            args.append(f"--max-binlog-size={self.max_binlog_size}")
        if _is_root():
            # mariadbd refuses to run as root unless told so explicitly.
            args.append("--user=root")
        # Last, so that callers can override any of the defaults above.
        args.extend(self.extra_args)
        return args

    def start(self) -> MariaDBServer:
        """Start the server (copying the template on first start) and wait until ready."""
        with self._lock:
            if self.is_running:
                raise RuntimeError(f"{self.name} is already running")
            if not self.datadir.exists():
                template = self._template or default_template()
                self.base_dir.mkdir(parents=True, exist_ok=True)
                shutil.copytree(template, self.datadir, symlinks=True)
            if self._port is not None:
                # Restart: clients expect the same address, so no port hunting.
                try:
                    self._launch(self._port)
                except _PortClash as exc:
                    raise ServerStartError(f"{self.name}: cannot restart: {exc}") from exc
                return self
            last: _PortClash | None = None
            for _ in range(_START_ATTEMPTS):
                port = find_free_port()
                try:
                    self._launch(port)
                except _PortClash as exc:
                    last = exc
                    continue
                self._port = port
                return self
            raise ServerStartError(
                f"{self.name}: no free port after {_START_ATTEMPTS} attempts: {last}"
            )

    def _launch(self, port: int) -> None:
        log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0
        with (self.base_dir / "stdout.log").open("ab") as out:
            proc = _spawn(self._command(port), out)
        self._proc = proc
        with _registry_lock:
            _live_servers.add(self)
        try:
            self._wait_ready(proc, port, log_offset)
        except BaseException:
            self._terminate(signal.SIGKILL, timeout=30)
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int, log_offset: int) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.poll() is not None:
                tail = self.error_log_tail(since=log_offset)
                if "Address already in use" in tail or "Bind on TCP/IP port" in tail:
                    raise _PortClash(f"port {port} taken")
                raise ServerStartError(
                    f"{self.name}: mariadbd exited with {proc.returncode} during start;"
                    f" error log:\n{tail}"
                )
            try:
                conn = sqlclient.connect(
                    host=HOST, port=port, user=ROOT_USER, password="", connect_timeout=2
                )
            except pymysql.err.OperationalError:
                pass
            else:
                # Someone else may own the port (e.g. a parallel test run) and
                # answer before our mariadbd fails to bind; make sure it is ours.
                with contextlib.closing(conn), conn.cursor() as cur:
                    cur.execute("SELECT @@pid_file")
                    row = cur.fetchone()
                if row is not None and Path(row[0]) == self.pid_file:
                    return
                proc.wait(timeout=self.start_timeout)
                raise _PortClash(f"port {port} answered by another server")
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.name}: not accepting connections on port {port} after"
                    f" {self.start_timeout:.0f}s; error log:\n"
                    f"{self.error_log_tail(since=log_offset)}"
                )
            time.sleep(_POLL_INTERVAL)

    def _terminate(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        with _registry_lock:
            _live_servers.discard(self)

    def stop(self, timeout: float = 60.0) -> None:
        """Clean shutdown (SIGTERM), escalating to SIGKILL after ``timeout``. Idempotent."""
        with self._lock:
            if self.is_running:
                self._nudge_checkpoint()
            self._terminate(signal.SIGTERM, timeout)

    def _nudge_checkpoint(self) -> None:
        # After a binlog rotation, shutdown waits for InnoDB to acknowledge the
        # binlog checkpoint, which its once-a-second background flush does; a
        # checkpoint on demand turns a ~0.9 s stop into ~0.02 s. Best effort: the
        # server may be hung or refusing connections on purpose.
        with contextlib.suppress(Exception):
            conn = sqlclient.connect(
                host=HOST,
                port=self.port,
                user=ROOT_USER,
                password="",
                connect_timeout=1,
                read_timeout=5,
                write_timeout=5,
            )
            with contextlib.closing(conn), conn.cursor() as cur:
                cur.execute("SET GLOBAL innodb_log_checkpoint_now = ON")

    def kill(self) -> None:
        """Crash the server (SIGKILL) and reap it; the next start does crash recovery."""
        with self._lock:
            self._terminate(signal.SIGKILL, timeout=30)

    def restart(self, timeout: float = 60.0) -> MariaDBServer:
        """Clean stop and start on the same datadir and port."""
        with self._lock:
            self.stop(timeout)
            return self.start()

    def cleanup(self, keep_files: bool = False) -> None:
        """Stop the server and remove its files (unless ``keep_files``)."""
        if keep_files:
            # Someone will look at these files: leave them in a consistent state.
            self.stop()
        else:
            # The files are about to go, so a clean shutdown would only cost time.
            self.kill()
            shutil.rmtree(self.base_dir, ignore_errors=True)
        if self._owns_socket_dir:
            shutil.rmtree(self.socket.parent, ignore_errors=True)

    def __enter__(self) -> MariaDBServer:
        if not self.is_running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- SQL helpers -----------------------------------------------------------------

    def connect(
        self,
        user: str = ROOT_USER,
        password: str = "",
        database: str | None = None,
        **kw: Any,
    ) -> pymysql.connections.Connection:
        params: dict[str, Any] = {"autocommit": True, "connect_timeout": 10}
        params.update(kw)
        return sqlclient.connect(
            host=self.host,
            port=self.port,
            user=user,
            password=password,
            database=database,
            **params,
        )

    def execute(self, sql: str, args: Any = None) -> Rows:
        """Run one statement on a fresh root connection and return all rows."""
        # A fresh connection per call survives restart()/kill() without any
        # reconnect logic; session state therefore does not carry over.
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return tuple(cur.fetchall())

    def query_one(self, sql: str, args: Any = None) -> tuple[Any, ...] | None:
        rows = self.execute(sql, args)
        return rows[0] if rows else None

    def scalar(self, sql: str, args: Any = None) -> Any:
        """First column of the first row (``None`` if there are no rows)."""
        row = self.query_one(sql, args)
        return row[0] if row else None

    def binlog_files(self) -> list[tuple[str, int]]:
        return [(str(row[0]), int(row[1])) for row in self.execute("SHOW BINARY LOGS")]

    def master_status(self) -> tuple[str, int]:
        """Current binlog file and the position of its end."""
        row = self.query_one("SHOW MASTER STATUS")
        if row is None:
            raise RuntimeError(f"{self.name}: binary logging is off")
        return str(row[0]), int(row[1])

    def flush_logs(self) -> None:
        """Rotate to a new binlog file."""
        self.execute("FLUSH BINARY LOGS")

    def purge_logs_to(self, name: str, timeout: float = 30.0) -> None:
        """``PURGE BINARY LOGS TO name``, repeated until the files before ``name`` are gone.

        MariaDB purges nothing, silently, while its binlog checkpoint has not left a file
        (InnoDB has not yet made that file's transactions durable: a second or so after a
        rotation with innodb_flush_log_at_trx_commit=2)."""
        deadline = time.monotonic() + timeout
        while True:
            self.execute(f"PURGE BINARY LOGS TO '{name}'")
            first = self.execute("SHOW BINARY LOGS")[0][0]
            if first == name:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"PURGE BINARY LOGS TO {name!r}: {first} is still there "
                                     f"after {timeout:g} s")
            time.sleep(0.1)


# --------------------------------------------------------------------------------------
# Factory used by the pytest fixtures (and usable from scripts)
# --------------------------------------------------------------------------------------


class ServerFactory:
    """Creates started servers under ``base_dir`` and stops them all on :meth:`close`."""

    def __init__(
        self,
        base_dir: Path | str,
        *,
        template: Path | str | None = None,
        socket_dir: Path | str | None = None,
        keep_files: bool = False,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.template = Path(template) if template is not None else None
        self.socket_dir = Path(socket_dir) if socket_dir is not None else None
        self.keep_files = keep_files
        self.servers: list[MariaDBServer] = []

    def __call__(
        self,
        *,
        server_id: int = 1,
        max_binlog_size: int | None = None,
        gtid_domain_id: int = 0,
        binlog_checksum: str = "CRC32",
        binlog_format: str = "ROW",
        extra_args: Sequence[str] = (),
        start: bool = True,
    ) -> MariaDBServer:
        server = MariaDBServer(
            self.base_dir / f"s{server_id}-{len(self.servers) + 1}",
            server_id=server_id,
            max_binlog_size=max_binlog_size,
            gtid_domain_id=gtid_domain_id,
            binlog_checksum=binlog_checksum,
            binlog_format=binlog_format,
            extra_args=extra_args,
            template=self.template,
            socket_dir=self.socket_dir,
        )
        # Registered before start so a failed start is still cleaned up.
        self.servers.append(server)
        if start:
            server.start()
        return server

    def close(self) -> None:
        servers = set(self.servers)
        with _registry_lock:
            workloads = [w for w in _live_workloads if w.server in servers]
        for workload in workloads:
            workload.stop()
        errors: list[BaseException] = []
        for server in reversed(self.servers):
            try:
                server.cleanup(keep_files=self.keep_files)
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        if self.keep_files and self.servers:
            print(
                "binrelay: kept server files:\n"
                + "\n".join(f"  {s.name}: {s.base_dir}" for s in self.servers),
                file=sys.stderr,
            )
        self.servers.clear()
        if errors:
            raise errors[0]


# --------------------------------------------------------------------------------------
# sysbench
# --------------------------------------------------------------------------------------

# A fixed number of events keeps tests deterministic and short; sysbench's own
# default is a 10 s run.
DEFAULT_RUN_EVENTS = 500


class SysbenchError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        out = self.stdout or ""
        err = self.stderr or ""
        return f"{super().__str__()}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"


def _limit_args(time_s: float | None, events: int | None, *, unbounded: bool) -> list[str]:
    if time_s is None and events is None and not unbounded:
        events = DEFAULT_RUN_EVENTS
    # sysbench stops at whichever limit comes first; 0 disables a limit.
    return [f"--time={0 if time_s is None else int(time_s)}", f"--events={events or 0}"]


def _run_checked(args: list[str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SysbenchError(proc.returncode, args, proc.stdout, proc.stderr)
    return proc


class SysbenchWorkload:
    """A ``sysbench run`` in the background; stop it with :meth:`stop` or ``with``."""

    def __init__(self, server: MariaDBServer, args: list[str]) -> None:
        self.server = server
        self.args = args
        # An unread pipe would block sysbench once its buffer fills; a file never does.
        self._out = tempfile.TemporaryFile(prefix="sysbench-")  # noqa: SIM115 - outlives __init__
        self.process = _spawn(args, self._out)
        with _registry_lock:
            _live_workloads.add(self)

    @property
    def is_running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        self._out.flush()
        self._out.seek(0)
        return self._out.read().decode(errors="replace")

    def _finish(self) -> int:
        with _registry_lock:
            _live_workloads.discard(self)
        return int(self.process.returncode)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for a bounded run to end; returns the exit code."""
        self.process.wait(timeout=timeout)
        return self._finish()

    def stop(self, timeout: float = 10.0) -> int:
        """Terminate the workload (it is expected to be cut short); returns the exit code."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self._finish()

    def check(self) -> subprocess.CompletedProcess[str]:
        """After the run ended: raise :class:`SysbenchError` unless it exited with 0."""
        if self.is_running:
            raise RuntimeError("sysbench is still running")
        rc = self._finish()
        out = self.output()
        if rc != 0:
            raise SysbenchError(rc, self.args, out, "")
        return subprocess.CompletedProcess(self.args, rc, out, "")

    def __enter__(self) -> SysbenchWorkload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass(frozen=True)
class Sysbench:
    """The shape of a sysbench workload: which test, how many tables of how many rows, how
    many threads, which database, extra options."""

    tables: int = 2
    table_size: int = 1000
    threads: int = 2
    test: str = "oltp_write_only"
    db: str = "sbtest"
    extra: Sequence[str] = ()

    def args(self, server: MariaDBServer) -> list[str]:
        return [
            SYSBENCH,
            self.test,
            "--db-driver=mysql",
            f"--mysql-host={server.host}",
            f"--mysql-port={server.port}",
            f"--mysql-user={ROOT_USER}",
            "--mysql-password=",
            f"--mysql-db={self.db}",
            f"--tables={self.tables}",
            f"--table-size={self.table_size}",
            f"--threads={self.threads}",
            *self.extra,
        ]

    def prepare(self, server: MariaDBServer) -> subprocess.CompletedProcess[str]:
        """Create the database if missing and run ``prepare`` (fails if tables exist)."""
        server.execute(f"CREATE DATABASE IF NOT EXISTS `{self.db}`")
        return _run_checked([*self.args(server), "prepare"])

    def ensure_prepared(self, server: MariaDBServer) -> None:
        """``prepare`` unless the tables are there already."""
        server.execute(f"CREATE DATABASE IF NOT EXISTS `{self.db}`")
        count = server.scalar(
            "SELECT COUNT(*) FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME LIKE 'sbtest%%'", (self.db,))
        if int(count or 0) < self.tables:
            self.prepare(server)

    def run(self, server: MariaDBServer, *, time: float | None = None,
            events: int | None = None) -> subprocess.CompletedProcess[str]:
        """``run``; without ``time``/``events`` runs DEFAULT_RUN_EVENTS events."""
        return _run_checked([*self.args(server), *_limit_args(time, events, unbounded=False),
                             "run"])

    def background(self, server: MariaDBServer, *, time: float | None = None,
                   events: int | None = None) -> SysbenchWorkload:
        """``run`` without waiting; unbounded unless ``time``/``events`` given."""
        return SysbenchWorkload(server, [*self.args(server),
                                         *_limit_args(time, events, unbounded=True), "run"])


def sysbench_prepare(server: MariaDBServer, **shape: Any) -> subprocess.CompletedProcess[str]:
    """:meth:`Sysbench.prepare` of ``Sysbench(**shape)``."""
    return Sysbench(**shape).prepare(server)


def sysbench_run(server: MariaDBServer, *, time: float | None = None, events: int | None = None,
                 **shape: Any) -> subprocess.CompletedProcess[str]:
    """:meth:`Sysbench.run` of ``Sysbench(**shape)``."""
    return Sysbench(**shape).run(server, time=time, events=events)


def run_sysbench(server: MariaDBServer, *, time: float | None = None, events: int | None = None,
                 **shape: Any) -> subprocess.CompletedProcess[str]:
    """Prepare (only if the tables are not there yet) and run; returns the run's result.

    Skipping an existing prepare lets a test call this repeatedly to generate
    more binlog traffic, e.g. before and after a restart.
    """
    workload = Sysbench(**shape)
    workload.ensure_prepared(server)
    return workload.run(server, time=time, events=events)


def sysbench_run_background(server: MariaDBServer, *, time: float | None = None,
                            events: int | None = None, prepare: bool = True,
                            **shape: Any) -> SysbenchWorkload:
    """Start ``sysbench run`` without waiting; unbounded unless ``time``/``events`` given.

    sysbench 1.0 cannot ride out a server kill or restart (it exits on error 2013
    and crashes with ``--mysql-ignore-errors=all``), so expect a non-zero exit
    code after killing the server and start a new workload once it is back.
    """
    workload = Sysbench(**shape)
    if prepare:
        workload.ensure_prepared(server)
    return workload.background(server, time=time, events=events)


def live_server_pids() -> list[int]:
    """PIDs of servers this process started and has not stopped (for leak checks)."""
    with _registry_lock:
        servers = list(_live_servers)
    return [pid for pid in (s.pid for s in servers) if pid is not None]
