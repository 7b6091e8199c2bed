"""Helpers for end-to-end relay tests: configs, a relay subprocess, checks we did not write."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tomli_w

from binlog_builder import walk
from binrelay.binlog import constants as c
from binrelay.relay.layout import read_index, read_meta
from binrelay.relay.livestatus import RELAYING, read_status
from binrelay.relay.verify import compare_subdir
from binrelay.testing.sandbox import MariaDBServer


def write_config(path: Path, server: MariaDBServer | tuple[str, int], relay_dir: Path,
                 **keys: Any) -> Path:
    host, port = (server.host, server.port) if isinstance(server, MariaDBServer) else server
    data: dict[str, Any] = {"relay-dir": str(relay_dir), "relay-sync-interval": 0.05}
    from_ = {"host": host, "port": port, "user": "root", "password": ""}
    from_.update(keys.pop("from_", {}))
    data.update({k.replace("_", "-"): v for k, v in keys.items()})
    data["from"] = from_
    path.write_text(tomli_w.dumps(data))
    return path


def binrelay_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "binrelay.cli.main", *args]


def run_binrelay(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(binrelay_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          check=False)


class RelayProcess:
    """``binrelay relay --config`` in a subprocess."""

    def __init__(self, config: Path, log: Path) -> None:
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(binrelay_cmd("relay", "--config", str(config)),
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout)
        self._log.close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def exit_report(self) -> str:
        """How it ended, with its log's last warnings and errors (a CI run keeps no files)."""
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        worst = [line for line in lines
                 if " level=info " not in line and " level=debug " not in line]
        return f"relay exited with {self.proc.returncode}; its log ends:\n" + "\n".join(worst[-12:])


def relay_until_caught_up(config: Path, server: MariaDBServer, relay_dir: Path,
                          log: Path) -> None:
    """Run the relay until it has everything the upstream has, then stop it (exit 0)."""
    relay = RelayProcess(config, log)
    try:
        wait_caught_up(relay_dir, server, process=relay)
    finally:
        assert relay.stop() == 0


def relay_once(tmp_path: Path, server: MariaDBServer, relay_dir: Path, tag: str,
               **keys: Any) -> Path:
    """Write ``<tag>.toml`` for ``server`` and relay until caught up; returns the config."""
    config = write_config(tmp_path / f"{tag}.toml", server, relay_dir, **keys)
    relay_until_caught_up(config, server, relay_dir, tmp_path / f"{tag}.log")
    return config


def current_subdir(relay_dir: Path) -> Path:
    index = read_index(relay_dir)
    assert index, f"no server-uuid.index in {relay_dir}"
    return relay_dir / str(index[-1])


def wait_caught_up(relay_dir: Path, server: MariaDBServer, *, timeout: float = 120,
                   process: RelayProcess | None = None) -> None:
    """Wait until relay.meta of the last subdir equals the upstream's current position.

    MariaDB appends a Binlog_checkpoint event on its own a little after a rotation (once
    InnoDB has flushed the older file's transactions, about a second here): until the
    current file's last checkpoint names that file itself, the position must hold still for
    a while to count.  With ``process``, only once that relay has said (relay.status) it
    relays: a relay.meta left by an earlier run may equal the position before this one has
    recovered its files.
    """
    deadline = time.monotonic() + timeout
    matched_since: float | None = None
    want = server.master_status()
    while time.monotonic() < deadline:
        if process is not None and not process.running:
            raise AssertionError(process.exit_report())
        want = server.master_status()
        meta = None
        with contextlib.suppress(Exception):
            meta = read_meta(current_subdir(relay_dir))
        if meta is not None and (meta.binlog_name, meta.binlog_pos) == want:
            if process is not None and _relaying(relay_dir, process) and \
                    _checkpoint_settled(current_subdir(relay_dir) / want[0], want[1]):
                return
            if matched_since is None:
                matched_since = time.monotonic()
            elif time.monotonic() - matched_since >= 1.5:
                return
        else:
            matched_since = None
        time.sleep(0.05)
    meta = None
    with contextlib.suppress(Exception):
        meta = read_meta(current_subdir(relay_dir))
    raise AssertionError(f"relay did not catch up with {want} in {timeout}s: meta={meta}")


def _relaying(relay_dir: Path, process: RelayProcess) -> bool:
    status = read_status(relay_dir)
    return status is not None and status.pid == process.proc.pid and status.state == RELAYING


def _checkpoint_settled(path: Path, end: int) -> bool:
    """Whether the last Binlog_checkpoint event before ``end`` in binlog ``path`` names the
    file itself: then the server writes no other until it rotates again.  False where that
    cannot be read (an encrypted binlog hides its events' headers)."""
    last = None
    for _at, event in walk(path.read_bytes()[:end]):
        if event[4] == c.START_ENCRYPTION_EVENT:
            return False
        if event[4] == c.BINLOG_CHECKPOINT_EVENT:
            body = c.EVENT_HEADER_LEN
            last = event[body + 4:body + 4 + int.from_bytes(event[body:body + 4], "little")]
    return last is not None and last.decode() == path.name


def assert_identical(subdir: Path, server: MariaDBServer, *, files: list[str] | None = None
                     ) -> list[str]:
    """Every upstream binlog file (or ``files``) equals its relay copy byte for byte, and
    ``mariadb-binlog`` reads the copy.  Returns the names compared."""
    names = files if files is not None else [name for name, _size in server.binlog_files()]
    problems = compare_subdir(subdir, server.datadir, names)
    assert not problems, problems
    return names


def file_digest(path: Path) -> bytes:
    import hashlib

    return hashlib.sha256(path.read_bytes()).digest()


def tree_digest(root: Path) -> dict[str, bytes]:
    """Digest of every file under ``root``, but for the (empty) lock file purge creates."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name == ".binrelay.lock":
                continue
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = file_digest(p)
    return out
