"""Beside the relay loop: every second, work out the lag and rewrite ``relay.status``.

Seconds behind (as MySQL's Seconds_Behind_Master, from event timestamps): 0 when the
upstream says the relay has everything (a heartbeat or a probe at the relay's position),
else the age of the newest event relayed; unknown while not connected.

Asking the upstream (``probe``: SHOW MASTER STATUS and SHOW BINARY LOGS on a second
connection) is needed only for bytes behind while the stream is busy; it is done when metrics
or a progress bar want it, so that a plain relay keeps one connection to the upstream.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from binrelay.errors import BinrelayError
from binrelay.relay.lag import UpstreamPosition, bytes_behind, probe_upstream
from binrelay.relay.livestatus import RELAYING, RelayLiveStatus, write_status
from binrelay.relay.relaydir import RelayDir
from binrelay.relay.writer import RelayWriter
from binrelay.upstream.client import Endpoint, UpstreamSession

log = logging.getLogger(__name__)


class Monitored(Protocol):
    """What the monitor reads of the relay service (kept apart so that neither module
    imports the other's)."""

    relay_dir: RelayDir
    endpoint: Endpoint
    writer: RelayWriter | None
    connected_identity: str
    state: str
    pid: int
    started_at: float
    last_error: str
    last_error_at: float | None
    metrics_addr: str

    @property
    def disk_full_since(self) -> float | None: ...

    def stopping(self) -> bool: ...


class RelayMonitor(threading.Thread):
    def __init__(self, service: Monitored, *, interval: float = 1.0, probe: bool = False,
                 on_tick: Callable[[RelayLiveStatus], None] | None = None) -> None:
        super().__init__(name="binrelay-monitor", daemon=True)
        self.service = service
        self.interval = interval
        self.probe = probe
        self.on_tick = on_tick
        self._session: UpstreamSession | None = None
        self._lock = threading.Lock()
        #: The last probe's answer (None: no probe, or it failed).
        self.upstream: UpstreamPosition | None = None
        self.upstream_up: bool | None = None
        self.latest: RelayLiveStatus | None = None
        #: The last write of relay.status failed (said once, not every second).
        self._write_failed = False
        self._wake = threading.Event()

    def run(self) -> None:
        while not self.service.stopping():
            self.tick()
            deadline = time.monotonic() + self.interval
            while not self.service.stopping() and time.monotonic() < deadline:
                if self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                    self._wake.clear()
                    break
        self._close_session()

    def poke(self) -> None:
        """Tick now rather than at the end of the interval (the service's state changed)."""
        self._wake.set()

    def tick(self) -> RelayLiveStatus:
        """Recompute and write relay.status now (also called once more at stop)."""
        with self._lock:
            if self.probe and not self.service.stopping():
                self._probe()
            status = self._status(time.time())
            self._write(status)
            self.latest = status
        if self.on_tick is not None:
            self.on_tick(status)
        return status

    def _write(self, status: RelayLiveStatus) -> None:
        try:
            write_status(self.service.relay_dir.root, status)
        except OSError as exc:
            if not self._write_failed:
                log.warning("cannot write relay.status: %s", exc.strerror)
            self._write_failed = True
        else:
            self._write_failed = False

    def _probe(self) -> None:
        try:
            if self._session is None:
                self._session = UpstreamSession(self.service.endpoint, connect_timeout=3.0)
            self.upstream = probe_upstream(self._session)
            self.upstream_up = True
        except BinrelayError as exc:
            log.debug("probe of the upstream failed: %s", exc)
            self._close_session()
            self.upstream, self.upstream_up = None, False

    def _close_session(self) -> None:
        if self._session is not None:
            with contextlib.suppress(Exception):
                self._session.close()
            self._session = None

    def _status(self, now: float) -> RelayLiveStatus:
        svc = self.service
        writer = svc.writer
        subdir, file, pos = "", "", 0
        up_file, up_pos = "", 0
        lag_bytes: int | None = None
        seconds: float | None = None
        if writer is not None:
            subdir, file, pos = writer.subdir.name, writer.file_name, writer.offset
            if writer.upstream_pos is not None:
                up_file, up_pos = writer.upstream_pos
            up = self.upstream
            if up is not None and up.identity == svc.connected_identity:
                up_file, up_pos = up.binlog_file, up.binlog_pos
                lag_bytes = bytes_behind(up.binlogs, (up_file, up_pos), (file, pos))
            elif up_file == file:
                lag_bytes = max(0, up_pos - pos)
            if svc.state == RELAYING:
                if (up_file, up_pos) == (file, pos) or lag_bytes == 0:
                    seconds = 0.0
                elif writer.last_event_ts:
                    seconds = max(0.0, now - writer.last_event_ts)
        return RelayLiveStatus(
            pid=svc.pid, state=svc.state, started_at=svc.started_at, updated_at=now,
            subdir=subdir, binlog_file=file, binlog_pos=pos, upstream_file=up_file,
            upstream_pos=up_pos, seconds_behind=seconds, bytes_behind=lag_bytes,
            last_error=svc.last_error, last_error_at=svc.last_error_at,
            metrics_addr=svc.metrics_addr, disk_full_since=svc.disk_full_since)
