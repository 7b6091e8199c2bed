"""The relay unit: connect, choose where to start, relay until stopped, reconnect on trouble.

Start rules (SPEC §1, DM's):
1. A valid relay log for this upstream: resume at the last subdir's relay.meta.
2. None, nothing configured: position mode from the upstream's oldest binlog; GTID mode from
   the upstream's initial (empty) GTID state, failing clearly when that was purged.
3. None, a start configured: ``relay-binlog-name`` (position mode) or ``relay-binlog-gtid``.

A GTID start is widened to the beginning of the binlog file holding it, so every relay file
starts at offset 4 like the upstream's.  A different upstream identity on (re)connect opens a
new subdir and carries the GTID set over; resuming on the same upstream always uses the exact
file/position, which needs no GTID skipping and keeps files byte-identical.

A full relay dir (``space.py``) is waited out, at start-up as while streaming: the relay says
so once, runs a purge check when ``[purge]`` is on, and resumes from relay.meta when space is
back, as after a reconnect.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.binlog.parse import parse_format_description, parse_rotate_lenient
from binrelay.config import Config, PurgeConfig
from binrelay.errors import (
    BinlogPurgedError,
    BinrelayError,
    ConfigError,
    RelayDirError,
    UpstreamConfigError,
    UpstreamConnectionError,
    UpstreamDivergedError,
    UpstreamError,
    UpstreamTornBinlogError,
)
from binrelay.gtid import MariaGtidSet, MysqlGtidSet, parse_gtid_set
from binrelay.metrics import RelayFigures
from binrelay.position import Position, binlog_sort_key
from binrelay.relay import consumers
from binrelay.relay.layout import INDEX_FILENAME, RelayMeta, list_binlogs, write_meta
from binrelay.relay.livestatus import (
    CONNECTING,
    DISK_FULL,
    RECONNECTING,
    RELAYING,
    STOPPED,
    RelayLiveStatus,
)
from binrelay.relay.monitor import RelayMonitor
from binrelay.relay.purge import purge_auto
from binrelay.relay.recovery import recover_subdir
from binrelay.relay.relaydir import RelayDir
from binrelay.relay.salvage import find_damage, first_needed_file, move_aside
from binrelay.relay.space import (
    RESERVE_FILENAME,
    DiskFull,
    RelayDiskFullError,
    SpaceReserve,
    disk_full_errno,
    disk_full_raised,
    free_bytes,
)
from binrelay.relay.writer import RelayWriter
from binrelay.upstream.client import Endpoint, ServerInfo, UpstreamSession
from binrelay.upstream.packets import StopRequested

log = logging.getLogger(__name__)

#: A session that streamed this long before it broke ends an outage: the next reconnect
#: backs off from the first step again (a server that drops every session at once does
#: not: its reconnects keep backing off).
HEALTHY_SESSION_S = 1.0


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff between reconnects."""

    first: float = 0.1
    cap: float = 5.0

    def delay(self, attempt: int) -> float:
        return min(self.cap, self.first * (2 ** max(0, attempt - 1)))


class AutoPurger(threading.Thread):
    """``[purge]`` checks every ``interval`` seconds, beside the relay (SPEC §1, DM's rules).

    Only files before the active file and before every registered consumer go; errors are
    logged and retried at the next check, never fatal to the relay.
    """

    def __init__(self, relay_dir: Path, config: PurgeConfig, *,
                 stopping: Callable[[], bool]) -> None:
        super().__init__(name="binrelay-purge", daemon=True)
        self.relay_dir = relay_dir
        self.config = config
        self.stopping = stopping
        self.runs = 0
        self.bytes_freed = 0
        # The relay also calls check() while its dir is full: one check at a time.
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        c = self.config
        return c.interval > 0 and (c.expires > 0 or c.remain_space > 0 or c.gc_applied)

    def run(self) -> None:
        if not self.enabled:
            return
        next_run = time.monotonic() + self.config.interval
        while not self.stopping():
            if time.monotonic() < next_run:
                time.sleep(min(0.2, next_run - time.monotonic()))
                continue
            next_run = time.monotonic() + self.config.interval
            self.check()

    def check(self) -> None:
        with self._lock:
            self._check()

    def _check(self) -> None:
        try:
            plan, freed = purge_auto(self.relay_dir, now=time.time(),
                                     expires_hours=self.config.expires,
                                     remain_gb=self.config.remain_space,
                                     gc_applied=self.config.gc_applied)
        except (BinrelayError, OSError) as exc:  # OSError: rewriting the index on a full disk
            log.warning("automatic purge failed: %s", exc)
            return
        self.runs += 1
        self.bytes_freed += freed
        if not plan.empty:
            log.info("automatic purge removed %d file(s), %d bytes", len(plan.files), freed)


class RelayService:
    """Runs in the caller's thread until ``request_stop`` (e.g. from a signal handler).

    ``probe``: ask the upstream for its position every second (for lag while busy; see
    ``monitor``); ``on_status`` gets every ``relay.status`` written (progress bars).
    """

    #: Between looks at a full relay dir: purge check, free space, another try.
    SPACE_BACKOFF = Backoff(first=0.5, cap=5.0)

    def __init__(self, config: Config, *, backoff: Backoff | None = None,
                 probe: bool = False,
                 on_status: Callable[[RelayLiveStatus], None] | None = None) -> None:
        self.config = config
        self.endpoint = Endpoint(config.from_.host, config.from_.port, config.from_.user,
                                 config.from_.password)
        self.relay_dir = RelayDir(config.resolve_relay_dir())
        self.backoff = backoff or Backoff()
        self._stop = False
        self.writer: RelayWriter | None = None
        self.reconnects = 0
        self._connected_once = False
        #: The upstreams whose binlog_row_metadata was looked at (said once each).
        self._metadata_checked: set[str] = set()
        #: When the current session's binlog stream began (None: not yet).
        self._streaming_since: float | None = None
        # Live state for relay.status and metrics (read from other threads: plain values).
        self.pid = os.getpid()
        self.started_at = time.time()
        self._state = CONNECTING
        self.last_error = ""
        self.last_error_at: float | None = None
        self.metrics_addr = ""
        self.connected_identity = ""
        self._closed_counts = (0, 0, 0)
        self._counts_lock = threading.Lock()
        self.purger = AutoPurger(self.relay_dir.root, config.purge, stopping=self.stopping)
        self.monitor = RelayMonitor(self, probe=probe, on_tick=on_status)
        self.reserve = SpaceReserve(self.relay_dir.root / RESERVE_FILENAME)
        #: The last full-disk outage (kept after resuming: filling up again before relay.meta
        #: moved on is the same outage), and how many outages there were.
        self.disk_full: DiskFull | None = None
        self.disk_full_count = 0

    @property
    def state(self) -> str:
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        """A new state is written to relay.status at once, not at the next tick: ``status``
        and scripts waiting for the relay see it connected (or reconnecting) when it is."""
        self._state = value
        self.monitor.poke()

    def request_stop(self) -> None:
        self._stop = True

    def stopping(self) -> bool:
        return self._stop

    def _error(self, exc: BaseException) -> None:
        self.last_error = str(exc)
        self.last_error_at = time.time()

    @property
    def disk_full_since(self) -> float | None:
        """When the relay dir filled up, while the relay waits for space."""
        outage = self.disk_full
        return outage.since if outage is not None and self.state == DISK_FULL else None

    def figures(self) -> RelayFigures:
        """Counters since the process started (every session's writer) and the last lag."""
        with self._counts_lock:
            events, nbytes, fsyncs = self._closed_counts
            writer = self.writer
            if writer is not None:
                events += writer.events_written
                nbytes += writer.bytes_written
                fsyncs += writer.fsyncs
        latest = self.monitor.latest
        return RelayFigures(
            events=events, bytes=nbytes, fsyncs=fsyncs, reconnects=self.reconnects,
            purge_runs=self.purger.runs, purge_freed_bytes=self.purger.bytes_freed,
            disk_full=self.disk_full_count,
            lag_bytes=latest.bytes_behind if latest else None,
            lag_seconds=latest.seconds_behind if latest else None,
            upstream_up=self.monitor.upstream_up)

    # --- main loop ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            if self._with_space(self._start_up):
                self.purger.start()
                self._start_monitor()
                self._loop()
        except BinrelayError as exc:
            self._error(exc)
            raise
        finally:
            self._stop = True
            for thread in (self.purger, self.monitor):
                if thread.ident is not None:
                    thread.join()
            self.reserve.release()
            self.state = STOPPED
            # The last word on the process: stopped, and why if it failed.  Not when the
            # relay refused to start (recovery found damage): that writes nothing at all.
            if self.monitor.ident is not None:
                self.monitor.tick()

    def _start_up(self) -> None:
        try:
            self.relay_dir.open()
        except RelayDirError as exc:
            if disk_full_errno(exc) is not None:
                raise
            # Most often relay-dir itself is wrong: say which key of which file to fix.
            raise RelayDirError(f"{exc.message} (relay-dir in config {self.config.source_path})",
                                hint=exc.hint) from exc
        if self.config.relay_log_recovery:
            self._salvage()
        self._recover(verify=True)

    def _salvage(self) -> None:
        """``relay-log-recovery``: damage where a reader still needs the relay is moved
        aside and fetched again from the upstream (``relay/salvage.py``)."""
        current = self.relay_dir.current
        if current is None:
            return
        path = self.relay_dir.path(current)
        start = first_needed_file(self.relay_dir.root, current, list_binlogs(path))
        damage = find_damage(path, self.relay_dir.meta(current), start,
                             flavor=self.config.flavor)
        if damage is None:
            return
        with UpstreamSession(self.endpoint) as probe:
            info = probe.server_info()
            if info.identity != current.identity:
                raise UpstreamDivergedError(
                    f"relay-log-recovery: {damage.what}, but the upstream is {info.identity},"
                    f" not the server subdir {current} was relayed from; nothing was changed",
                    hint="point [from] at that server to fetch the damaged part again, or "
                         "restore the relay files from a backup")
            sizes = {f.name: f.size for f in probe.binlog_files()}
        move_aside(self.relay_dir.root, current, damage, sizes)

    def _start_monitor(self) -> None:
        if self.monitor.ident is None:
            self.monitor.start()

    def _loop(self) -> None:
        attempt = 0
        while not self._stop:
            try:
                with disk_full_raised(self.relay_dir.root):
                    self.reserve.take()
                    if self._session():
                        attempt = 0
            except StopRequested:
                break
            except RelayDiskFullError as exc:
                self._wait_for_space(exc)
            except UpstreamTornBinlogError as exc:
                if not self._past_torn_tail(exc):
                    raise
            except UpstreamConnectionError as exc:
                if not self._connected_once:
                    raise
                if self._streaming_since is not None and \
                        time.monotonic() - self._streaming_since >= HEALTHY_SESSION_S:
                    attempt = 0  # a new outage: the backoff starts again from its first step
                attempt += 1
                self.reconnects += 1
                self.state = RECONNECTING
                self._error(exc)
                delay = self.backoff.delay(attempt)
                log.warning("upstream connection lost (%s); reconnecting in %.1f s", exc, delay)
                self._sleep(delay)
                self._with_space(lambda: self._recover(verify=False))
        log.info("relay stopped")

    def _past_torn_tail(self, exc: UpstreamTornBinlogError) -> bool:
        """Go on at the upstream's next binlog file when the one being relayed ends in a
        torn event (``exc``): what a server that crashed while writing leaves.  Its restart
        rolled back the transaction that event belonged to (its XID never reached the
        binlog); every whole event before it has been relayed, since the server reads the
        file in order from relay.meta and sends them before it meets the torn bytes, and the
        partial transaction was cut off with the session.  A native replica stops here, and
        its operator moves it to the next file.  The relay does so only when relay.meta
        stands in the torn file (cut back to it), the upstream is the one relayed, and its
        next file is the first of a server start (its FDE has a creation time: a rotation's
        has none), so the torn file was the one open at the crash.  False otherwise (the
        error stands); True also when it could not tell for a lost connection or a full disk
        (the next session meets the same error and looks again)."""
        current = self.relay_dir.current
        meta = self.relay_dir.meta(current) if current is not None else None
        if current is None or meta is None or meta.binlog_name != exc.file:
            return False
        copy = self.relay_dir.path(current) / exc.file
        if copy.exists() and copy.stat().st_size != meta.binlog_pos:
            return False  # not cut back to relay.meta (a failed close): leave it to recovery
        try:
            with UpstreamSession(self.endpoint) as probe:
                info = probe.server_info()
                names = [f.name for f in probe.binlog_files()]
                if info.identity != current.identity or exc.file not in names \
                        or names[-1] == exc.file:
                    return False
                following = names[names.index(exc.file) + 1]
                if not self._opened_at_start(probe, info, following):
                    return False
        except UpstreamConnectionError as lost:
            log.warning("upstream connection lost (%s) while looking past a torn binlog;"
                        " reconnecting", lost)
            self._sleep(self.backoff.delay(1))
            return True
        log.warning("the upstream's %s ends in a torn event at %d (the server crashed while"
                    " writing it; the transaction it began was rolled back): relayed up to"
                    " %d, going on at %s", exc.file, exc.pos, meta.binlog_pos, following)
        try:
            with disk_full_raised(self.relay_dir.root):
                write_meta(self.relay_dir.path(current),
                           RelayMeta(following, 4, meta.binlog_gtid))
        except RelayDiskFullError as full:
            self._wait_for_space(full)
        return True

    def _opened_at_start(self, probe: UpstreamSession, info: ServerInfo, name: str) -> bool:
        """Whether the upstream's binlog ``name`` was opened by a server start (its FDE's
        creation time is set; a rotation leaves it 0).  The dump it asks for leaves
        ``probe`` good for nothing but closing."""
        stream = probe.dump_by_position(info, server_id=self._server_id(info), file=name,
                                        pos=4, non_blocking=True)
        for event in stream:
            if event[4] == c.FORMAT_DESCRIPTION_EVENT:
                return parse_format_description(event).create_timestamp != 0
            if event[4] != c.ROTATE_EVENT:
                break
        return False

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop and time.monotonic() < deadline:
            time.sleep(min(0.1, deadline - time.monotonic()))

    # --- a full relay dir --------------------------------------------------------------------

    def _with_space(self, step: Callable[[], object]) -> bool:
        """Run ``step``; while the relay dir is full, wait for space and run it again.
        False when a stop was asked before it succeeded."""
        while not self._stop:
            try:
                with disk_full_raised(self.relay_dir.root):
                    step()
                return True
            except RelayDiskFullError as exc:
                self._wait_for_space(exc)
        return False

    def _wait_for_space(self, exc: RelayDiskFullError) -> None:
        """Wait until there is room to write again (or a stop is asked).

        The writer has already cut the file back to relay.meta; writing resumes from there,
        after a reconnect, as after any lost connection.  Before each look at the free space,
        a purge check when ``[purge]`` is on (it keeps what consumers need).
        """
        self.reserve.release()  # room for relay.status and relay.meta while full
        outage = self._outage(exc)
        self.state = DISK_FULL
        self._start_monitor()
        root = self.relay_dir.root
        retry_at = time.monotonic() + outage.retry_after
        attempt = 0
        while not self._stop:
            if self.purger.enabled and (root / INDEX_FILENAME).exists():
                self.purger.check()
            free = free_bytes(root) or 0
            if free >= outage.want_free or time.monotonic() >= retry_at:
                try:
                    with disk_full_raised(root):
                        self._recover(verify=False)
                except RelayDiskFullError:
                    pass
                else:
                    self._resuming(outage, free)
                    return
            attempt += 1
            self._sleep(self.SPACE_BACKOFF.delay(attempt))

    def _outage(self, exc: RelayDiskFullError) -> DiskFull:
        """A new outage (said once: warning, last error, metrics), or the last one again when
        the disk filled up before relay.meta moved on (said at info: it then waits for more
        free space than before, so this happens a few times at most)."""
        at = self._durable_at()
        free = free_bytes(self.relay_dir.root) or 0
        last = self.disk_full
        where = {"relay_dir": str(self.relay_dir.root), "free_bytes": free}
        if last is not None and at <= last.at:
            outage = last.refilled(free)
            log.info("relay dir full again before relay.meta moved on; waiting for more space",
                     extra={**where, "wanted_free_bytes": outage.want_free})
        else:
            self._error(exc)
            self.disk_full_count += 1
            outage = DiskFull.begin(self.last_error_at or time.time(), at, free, self.reserve)
            log.warning("relay dir full; waiting for space", extra={
                **where, "wanted_free_bytes": outage.want_free, "error": exc.message})
        self.disk_full = outage
        return outage

    def _resuming(self, outage: DiskFull, free: int) -> None:
        extra = {"relay_dir": str(self.relay_dir.root), "free_bytes": free,
                 "waited_seconds": round(time.time() - outage.since, 1)}
        if free >= outage.want_free:
            log.info("space freed; resuming", extra=extra)
        else:
            log.info("trying the relay dir again (free space did not grow)", extra=extra)
        self.state = CONNECTING

    def _durable_at(self) -> tuple:
        """relay.meta's position in the current subdir, as a sort key (() when none)."""
        current = self.relay_dir.current
        try:
            meta = self.relay_dir.meta(current) if current is not None else None
        except RelayDirError:
            meta = None
        if current is None or meta is None or not meta.binlog_name:
            return ()
        return Position(current, meta.binlog_name, meta.binlog_pos).sort_key

    # --- recovery ------------------------------------------------------------------------------

    def _recover(self, *, verify: bool) -> None:
        current = self.relay_dir.current
        if current is None:
            return
        path = self.relay_dir.path(current)
        meta = self.relay_dir.meta(current)
        if not verify and meta is not None:
            binlog = path / meta.binlog_name
            if not binlog.exists() and meta.binlog_pos <= 4:
                return
            # A file of only the magic (its header's write failed) goes through recovery,
            # which removes it.
            if binlog.exists() and binlog.stat().st_size == meta.binlog_pos > 4:
                return
        recovery = recover_subdir(path, meta, flavor=self.config.flavor)
        if recovery.truncated_bytes or recovery.removed_file or recovery.meta_rewound:
            log.info("recovered %s: resume at %s:%d", current, recovery.meta.binlog_name,
                     recovery.meta.binlog_pos)

    @staticmethod
    def _say_row_metadata(metadata: str | None) -> None:
        """The relay mirrors whatever the upstream logs; ``binrelay sync`` applies rows
        logged without column names by position, as a replica does, which holds only while
        the downstream's tables have the upstream's columns in its order."""
        if metadata is None:
            log.warning("the upstream logs no column names (it has no binlog_row_metadata):"
                        " binrelay sync applies its rows by position, as a replica does, so"
                        " the downstream's tables must have the upstream's columns in its"
                        " order; MariaDB 10.5+ or MySQL 8.0.1+ with binlog_row_metadata ="
                        " FULL logs the names")
        elif metadata != "FULL":
            log.warning("the upstream logs no column names (binlog_row_metadata = %s):"
                        " binrelay sync applies its rows by position, as a replica does, so"
                        " the downstream's tables must have the upstream's columns in its"
                        " order; SET GLOBAL binlog_row_metadata = FULL on the upstream (and in"
                        " its config file) to have them applied by name", metadata)

    def _session(self) -> bool:
        """One replication session; returns whether any event arrived."""
        session = UpstreamSession(self.endpoint)
        got_events = False
        self._streaming_since = None
        try:
            info = session.server_info()
            self._connected_once = True
            session.check_replicable(info)
            self._check_flavor(info)
            if info.identity not in self._metadata_checked:
                self._say_row_metadata(session.row_metadata())
                self._metadata_checked.add(info.identity)
            server_id = self._server_id(info)
            subdir, meta = self._choose_start(session, info, server_id)
            writer = RelayWriter(self.relay_dir.path(subdir), meta, flavor=info.flavor,
                                 sync_interval=self.config.relay_sync_interval)
            with self._counts_lock:
                # The writer of the last session stays readable until now, so that counters
                # and positions never step back between sessions.
                old = self.writer
                if old is not None:
                    events, nbytes, fsyncs = self._closed_counts
                    self._closed_counts = (events + old.events_written,
                                           nbytes + old.bytes_written, fsyncs + old.fsyncs)
                self.writer = writer
            self.connected_identity = info.identity
            self.state = RELAYING
            log.info("relaying %s from %s:%d into %s", self.endpoint, meta.binlog_name,
                     meta.binlog_pos, subdir)
            stream = session.dump_by_position(
                info, server_id=server_id, file=meta.binlog_name, pos=meta.binlog_pos,
                on_idle=writer.on_idle, should_stop=self.stopping,
            )
            try:
                self._streaming_since = time.monotonic()
                for event in stream.events(writer.consume_packets):
                    writer.handle(event)
                    got_events = True
                    if self._stop:
                        break
            finally:
                try:
                    writer.close()
                except BinrelayError as exc:
                    log.error("could not persist the relay position on close: %s", exc)

        finally:
            session.close()
        return got_events

    # --- where to start --------------------------------------------------------------------

    def _check_flavor(self, info: ServerInfo) -> None:
        if self.config.flavor and self.config.flavor != info.flavor:
            raise ConfigError(
                f"config {self.config.source_path}: flavor is {self.config.flavor!r} but the "
                f"upstream is {info.flavor} ({info.version})",
                hint="fix flavor or leave it out to detect it",
            )

    def _server_id(self, info: ServerInfo) -> int:
        if self.config.server_id:
            if self.config.server_id == info.server_id:
                raise ConfigError(
                    f"config {self.config.source_path}: server-id {self.config.server_id} is "
                    f"the upstream's own server_id", hint="choose another server-id")
            return self.config.server_id
        while True:
            candidate = random.randint(1 << 30, (1 << 32) - 1)
            if candidate != info.server_id:
                return candidate

    def _choose_start(self, session: UpstreamSession, info: ServerInfo,
                      server_id: int) -> tuple:
        current = self.relay_dir.current
        if current is not None and current.identity == info.identity:
            meta = self.relay_dir.meta(current)
            if meta is not None and meta.binlog_name:
                self._check_not_behind(session, info, meta)
                return current, meta
        if current is None:
            name, gtids = self._fresh_start(session, info, server_id)
        else:
            carried = self.relay_dir.meta(current)
            carried_gtids = carried.binlog_gtid if carried else ""
            log.warning("upstream identity changed from %s to %s: starting a new subdir",
                        current.identity, info.identity)
            if self.config.enable_gtid:
                self._check_gtids_held(session, info, carried_gtids,
                                       f"the new upstream {info.identity}")
                name = self._gtid_start_file(info, server_id, carried_gtids)
            else:
                log.warning("position mode cannot map positions across servers: relaying the "
                            "new upstream from its oldest binlog (enable-gtid avoids this)")
                name = session.binlog_files()[0].name
            gtids = carried_gtids
        subdir = self.relay_dir.add_subdir(info.identity, RelayMeta(name, 4, gtids))
        if current is None and self.config.sync_configured:
            self._hold_for_sync(Position(subdir, name, 4))
        meta = self.relay_dir.meta(subdir)
        assert meta is not None
        return subdir, meta

    def _check_not_behind(self, session: UpstreamSession, info: ServerInfo,
                          meta: RelayMeta) -> None:
        """Before resuming: the upstream still holds everything relayed (pingcap/dm#1449 is
        this check missing in DM).  Its binlog file must reach the relayed position, and its
        GTID set contain the relayed one; a relay never writes another history into the
        same subdir."""
        sizes = {f.name: f.size for f in session.binlog_files()}
        size = sizes.get(meta.binlog_name)
        if size is not None and size < meta.binlog_pos:
            raise UpstreamDivergedError(
                f"the upstream's {meta.binlog_name} ends at {size}, before the relayed position"
                f" {meta.binlog_pos}: it lost transactions the relay holds (a crash with "
                "sync_binlog=0, or a restore from a backup)")
        self._check_gtids_held(session, info, meta.binlog_gtid, "the upstream")

    def _check_gtids_held(self, session: UpstreamSession, info: ServerInfo, relayed: str,
                          who: str) -> None:
        if not relayed:
            return
        executed = session.gtid_executed(info.flavor)
        have = parse_gtid_set(executed, info.flavor)
        want = parse_gtid_set(relayed, info.flavor)
        if type(have) is type(want) and have.issuperset(want):  # type: ignore[arg-type]
            return
        raise UpstreamDivergedError(
            f"{who}'s GTID set {executed or '(empty)'} does not contain the relayed {relayed}:"
            " it lacks transactions the relay holds")

    def _hold_for_sync(self, first: Position) -> None:
        """A new relay dir whose config names a sync pipeline: register that pipeline as a
        consumer at the very first position, so that no purge (a low ``remain-space`` in
        particular) removes what the sync will need before it first runs and registers
        itself.  Only here, once: a consumer unregistered later stays unregistered."""
        name = self.config.sync.pipeline
        if not any(c.name == name for c in consumers.list_consumers(self.relay_dir.root)):
            consumers.register(self.relay_dir.root, name, first)
            log.info("registered the sync pipeline as a relay consumer until it runs",
                     extra={"consumer": name, "position": str(first)})

    def _fresh_start(self, session: UpstreamSession, info: ServerInfo,
                     server_id: int) -> tuple[str, str]:
        files = session.binlog_files()
        if not files:
            raise UpstreamConfigError("the upstream lists no binary logs (SHOW BINARY LOGS)")
        if self.config.enable_gtid:
            text = self.config.relay_binlog_gtid
            return self._gtid_start_file(info, server_id, text), text
        wanted = self.config.relay_binlog_name
        if not wanted:
            return files[0].name, ""
        names = [f.name for f in files]
        if wanted in names:
            return wanted, ""
        try:
            older = binlog_sort_key(wanted) < binlog_sort_key(names[0])
        except BinrelayError:
            older = False
        if older:
            raise BinlogPurgedError(
                f"relay-binlog-name {wanted} was purged from the upstream; its oldest binlog "
                f"is {names[0]}",
                hint="set relay-binlog-name to a file the upstream still has (SHOW BINARY LOGS)")
        raise ConfigError(
            f"config {self.config.source_path}: relay-binlog-name {wanted} is not on the "
            f"upstream, which has {names[0]} .. {names[-1]}",
            hint="set relay-binlog-name to one of the upstream's files (SHOW BINARY LOGS)")

    def _gtid_start_file(self, info: ServerInfo, server_id: int, text: str) -> str:
        """The binlog file holding the start of ``text``, asked of the upstream itself."""
        try:
            gtids = parse_gtid_set(text, info.flavor)
        except BinrelayError as exc:
            raise ConfigError(f"config {self.config.source_path}: relay-binlog-gtid: {exc.message}"
                              ) from exc
        with UpstreamSession(self.endpoint) as probe:
            try:
                if isinstance(gtids, MariaGtidSet):
                    stream = probe.dump_by_maria_gtid(info, server_id=server_id, gtids=gtids)
                else:
                    assert isinstance(gtids, MysqlGtidSet)
                    stream = probe.dump_by_mysql_gtid(info, server_id=server_id, gtids=gtids)
                for event in stream:
                    if event[4] == c.ROTATE_EVENT:
                        return parse_rotate_lenient(event).next_file
                    break
            except BinlogPurgedError as exc:
                shown = text or "(the upstream's initial GTID state)"
                raise BinlogPurgedError(
                    f"the upstream no longer has the binlog holding GTID {shown}: {exc.message}",
                    hint="set relay-binlog-gtid to a GTID set the upstream still has "
                         "(e.g. SELECT @@gtid_binlog_pos / @@gtid_purged)",
                ) from exc
        raise UpstreamError("the upstream did not say where GTID " + (text or "''") + " is")
