"""``binrelay status``: where the relay and the pipeline are, and where each figure comes from.

SPEC §3: the persisted state (files, tables) and the live state (a running process, a server
asked now) can differ, so every group of figures carries its ``source``:

* ``persisted``: relay.meta (what the relay has made durable), the downstream checkpoint
  table (what the sync has committed); they are what a restart resumes from;
* ``live``: asked of the upstream now (SHOW MASTER STATUS, @@gtid_binlog_pos), or read from
  ``relay.status``, which a running relay rewrites every second (true only while its pid
  lives), or a consumer file's pid (is the sync running).

``gather`` does the I/O at the edges (``read_*``); ``assemble`` derives the figures that
combine sources (bytes behind, lag, caught up) without I/O; ``to_dict`` and ``render`` only
format.  Nothing here writes anything.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import time
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from binrelay.config import Config
from binrelay.errors import BinrelayError
from binrelay.position import Position, SubdirName
from binrelay.relay.lag import (
    UpstreamPosition,
    bytes_behind,
    probe_upstream,
    relay_bytes_between,
)
from binrelay.relay.layout import read_index, read_meta
from binrelay.relay.livestatus import (
    STATUS_FILENAME,
    STOPPED,
    RelayLiveStatus,
    pid_alive,
    read_status,
)
from binrelay.relay.relaydir import durable_end
from binrelay.upstream.client import Endpoint, UpstreamSession

PERSISTED, LIVE = "persisted", "live"

# --------------------------------------------------------------------------- views


@dataclass(frozen=True)
class Upstream:
    source: str
    host: str
    port: int
    reachable: bool
    error: str = ""
    identity: str = ""
    binlog_file: str = ""
    binlog_pos: int | None = None
    gtid: str = ""


@dataclass(frozen=True)
class Relayed:
    source: str
    file: str
    subdir: str = ""
    binlog_file: str = ""
    binlog_pos: int | None = None
    gtid: str = ""


@dataclass(frozen=True)
class RelayProcess:
    source: str
    file: str
    found: bool
    pid: int | None = None
    alive: bool = False
    state: str = ""
    updated_at: str | None = None
    seconds_behind: float | None = None
    upstream_file: str = ""
    upstream_pos: int | None = None
    last_error: str = ""
    last_error_at: str | None = None
    metrics_addr: str = ""
    #: While the relay waits for space on a full relay dir: since when.
    disk_full_since: str | None = None


@dataclass(frozen=True)
class RelayDirUsage:
    path: str
    size_bytes: int
    free_bytes: int | None


@dataclass(frozen=True)
class RelaySide:
    upstream: Upstream
    relayed: Relayed
    #: live upstream position minus persisted relay.meta position (None: not comparable).
    bytes_behind: int | None
    #: from relay.status while its relay runs (None when stopped: nothing is being fetched).
    seconds_behind: float | None
    #: relay.meta's subdir is of the upstream asked now (False: it switched, or unknown).
    same_upstream: bool | None
    process: RelayProcess
    relay_dir: RelayDirUsage


@dataclass(frozen=True)
class Checkpoint:
    source: str
    table: str
    reachable: bool
    error: str = ""
    found: bool = False
    position: Position | None = None
    gtid_set: str | None = None
    consistent: bool | None = None
    batch_id: int | None = None
    in_flight_target: Position | None = None
    updated_at: str | None = None


@dataclass(frozen=True)
class SyncProcess:
    source: str
    file: str
    found: bool
    pid: int | None = None
    alive: bool = False
    updated_at: str | None = None
    last_error: str = ""
    last_error_at: str | None = None


@dataclass(frozen=True)
class PipelineSide:
    name: str
    checkpoint: Checkpoint
    #: relay.meta of the last subdir: the end the sync applies up to (persisted).
    relay_end: Position | None
    #: relay bytes from the checkpoint to relay_end (None: no checkpoint or no relay).
    lag_bytes: int | None
    caught_up: bool | None
    process: SyncProcess


@dataclass(frozen=True)
class Status:
    generated_at: str
    config: str
    relay: RelaySide
    pipeline: PipelineSide


# --------------------------------------------------------------------------- I/O edges


def _iso(ts: float | dt.datetime | None) -> str | None:
    if ts is None:
        return None
    if isinstance(ts, dt.datetime):
        return ts.astimezone(dt.UTC).isoformat(timespec="milliseconds")
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")


def read_upstream(config: Config, *,
                  timeout: float = 3.0) -> tuple[Upstream, UpstreamPosition | None]:
    f = config.from_
    try:
        with UpstreamSession(Endpoint(f.host, f.port, f.user, f.password),
                             connect_timeout=timeout) as session:
            pos = probe_upstream(session)
    except BinrelayError as exc:
        return Upstream(LIVE, f.host, f.port, reachable=False, error=exc.message), None
    return Upstream(LIVE, f.host, f.port, reachable=True, identity=pos.identity,
                    binlog_file=pos.binlog_file, binlog_pos=pos.binlog_pos, gtid=pos.gtid), pos


def read_relayed(relay_dir: Path) -> Relayed:
    index = read_index(relay_dir)
    if not index:
        return Relayed(PERSISTED, str(relay_dir / "server-uuid.index"))
    path = relay_dir / str(index[-1])
    meta = read_meta(path)
    if meta is None:
        return Relayed(PERSISTED, str(path / "relay.meta"), subdir=str(index[-1]))
    return Relayed(PERSISTED, str(path / "relay.meta"), str(index[-1]), meta.binlog_name,
                   meta.binlog_pos, meta.binlog_gtid)


def read_relay_process(relay_dir: Path) -> RelayProcess:
    path = str(relay_dir / STATUS_FILENAME)
    live: RelayLiveStatus | None = read_status(relay_dir)
    if live is None:
        return RelayProcess(LIVE, path, found=False)
    alive = live.state != STOPPED and pid_alive(live.pid)
    return RelayProcess(
        LIVE, path, found=True, pid=live.pid, alive=alive,
        state=live.state if alive or live.state == STOPPED else "gone (died without a word)",
        updated_at=_iso(live.updated_at),
        seconds_behind=live.seconds_behind if alive else None,
        upstream_file=live.upstream_file, upstream_pos=live.upstream_pos or None,
        last_error=live.last_error, last_error_at=_iso(live.last_error_at),
        metrics_addr=live.metrics_addr if alive else "",
        disk_full_since=_iso(live.disk_full_since) if alive else None)


def read_usage(relay_dir: Path) -> RelayDirUsage:
    size = 0
    for dirpath, _dirs, files in os.walk(relay_dir):
        for name in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(dirpath, name)).st_size
    free = None
    with contextlib.suppress(OSError):
        free = shutil.disk_usage(relay_dir).free
    return RelayDirUsage(str(relay_dir), size, free)


def read_checkpoint_view(config: Config, *, timeout: float = 3.0) -> Checkpoint:
    # Imported here: the apply side pulls in more than `status` needs when it has no [to].
    import pymysql

    from binrelay.apply.checkpoint import CheckpointStore, read_checkpoint
    from binrelay.apply.downstream import Downstream
    from binrelay.apply.sql import quote_table

    store = CheckpointStore(schema=config.sync.checkpoint_schema)
    table = quote_table(store.ref)
    t = config.to
    try:
        conn = Downstream(t.host, t.port, t.user, t.password, connect_timeout=timeout,
                          read_timeout=10.0).connect()
    except BinrelayError as exc:
        return Checkpoint(PERSISTED, table, reachable=False, error=exc.message)
    try:
        found = read_checkpoint(conn, config.sync.pipeline, store)
    except pymysql.MySQLError as exc:
        if exc.args and exc.args[0] in (1146, 1049):  # no table / no schema: never synced
            return Checkpoint(PERSISTED, table, reachable=True)
        return Checkpoint(PERSISTED, table, reachable=True, error=str(exc.args[-1]))
    except BinrelayError as exc:  # a row that does not name a position: shown, not fatal
        return Checkpoint(PERSISTED, table, reachable=True, error=exc.message)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    if found is None:
        return Checkpoint(PERSISTED, table, reachable=True)
    return Checkpoint(
        PERSISTED, table, reachable=True, found=True, position=found.position,
        gtid_set=found.gtid_set, consistent=found.consistent, batch_id=found.batch_id,
        in_flight_target=found.target, updated_at=_iso(found.updated_at))


def read_sync_process(relay_dir: Path, pipeline: str) -> SyncProcess:
    from binrelay.relay.consumers import CONSUMERS_DIRNAME, list_consumers

    path = str(relay_dir / CONSUMERS_DIRNAME / f"{pipeline}.toml")
    try:
        found = [c for c in list_consumers(relay_dir) if c.name == pipeline]
    except BinrelayError:
        found = []
    if not found:
        return SyncProcess(LIVE, path, found=False)
    consumer = found[0]
    return SyncProcess(LIVE, path, found=True, pid=consumer.pid, alive=pid_alive(consumer.pid),
                       updated_at=_iso(consumer.updated), last_error=consumer.last_error,
                       last_error_at=_iso(consumer.last_error_at))


def _lag_bytes(relay_dir: Path, checkpoint: Checkpoint, end: Position | None) -> int | None:
    if checkpoint.position is None or end is None:
        return None
    try:
        return relay_bytes_between(relay_dir, checkpoint.position, end)
    except (BinrelayError, OSError):
        return None


def gather(config: Config, *, now: float | None = None) -> Status:
    """Everything ``binrelay status`` shows; never raises for an unreachable server."""
    relay_dir = config.resolve_relay_dir()
    upstream, probe = read_upstream(config)
    relayed = read_relayed(relay_dir)
    checkpoint = read_checkpoint_view(config)
    relay_end = None
    with contextlib.suppress(BinrelayError):  # shown as relayed's own fields say
        relay_end = durable_end(relay_dir)
    return assemble(
        now=time.time() if now is None else now, config=config.source_path,
        upstream=upstream, probe=probe, relayed=relayed,
        process=read_relay_process(relay_dir), usage=read_usage(relay_dir),
        pipeline=config.sync.pipeline, checkpoint=checkpoint, relay_end=relay_end,
        lag_bytes=_lag_bytes(relay_dir, checkpoint, relay_end),
        sync_process=read_sync_process(relay_dir, config.sync.pipeline))


# --------------------------------------------------------------------------- pure parts


def _identity_of(subdir: str) -> str | None:
    try:
        return SubdirName.parse(subdir).identity
    except BinrelayError:
        return None


def assemble(*, now: float, config: str, upstream: Upstream, probe: UpstreamPosition | None,
             relayed: Relayed, process: RelayProcess, usage: RelayDirUsage, pipeline: str,
             checkpoint: Checkpoint, relay_end: Position | None, lag_bytes: int | None,
             sync_process: SyncProcess) -> Status:
    same = None
    behind = None
    if probe is not None and relayed.subdir:
        same = _identity_of(relayed.subdir) == probe.identity
        if same and relayed.binlog_pos is not None:
            behind = bytes_behind(probe.binlogs, (probe.binlog_file, probe.binlog_pos),
                                  (relayed.binlog_file, relayed.binlog_pos))
    caught_up = None
    if checkpoint.found and lag_bytes is not None:
        caught_up = lag_bytes == 0 and bool(checkpoint.consistent)
    return Status(
        generated_at=_iso(now) or "", config=config,
        relay=RelaySide(upstream, relayed, behind, process.seconds_behind, same, process, usage),
        pipeline=PipelineSide(pipeline, checkpoint, relay_end, lag_bytes, caught_up,
                              sync_process))


def to_dict(status: Status) -> dict[str, Any]:
    """The ``--json`` document (field names are stable; see docs/relay.md); positions in
    their one dict form."""
    return _plain(status)


def _plain(value: Any) -> Any:
    if isinstance(value, Position):
        return value.to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    return value


def _v(value: Any) -> str:
    if value is None or value == "":
        return "NULL"
    if isinstance(value, bool):
        return "Yes" if value else "No"
    return str(value)


def _pos(p: Position | None) -> str:
    return "NULL" if p is None else str(p)


def render(status: Status) -> str:
    """``Key: value`` lines as SHOW SLAVE STATUS, grouped by where the figures come from."""
    r, p = status.relay, status.pipeline
    up, rel, proc, cp, sp = r.upstream, r.relayed, r.process, p.checkpoint, p.process
    groups: list[tuple[str, list[tuple[str, Any]]]] = [
        (f"relay: upstream (live: asked of {up.host}:{up.port} now)", [
            ("Upstream_Host", f"{up.host}:{up.port}"),
            ("Upstream_Reachable", "Yes" if up.reachable else f"No (unreachable: {up.error})"),
            ("Upstream_Identity", up.identity),
            ("Master_Log_File", up.binlog_file),
            ("Read_Master_Log_Pos", up.binlog_pos),
            ("Master_Gtid_Pos", up.gtid),
        ]),
        (f"relay: relayed (persisted: {rel.file})", [
            ("Relay_Subdir", rel.subdir),
            ("Relay_Master_Log_File", rel.binlog_file),
            ("Relay_Log_Pos", rel.binlog_pos),
            ("Relay_Gtid_Pos", rel.gtid),
            ("Same_Upstream", r.same_upstream),
            ("Bytes_Behind_Master", r.bytes_behind),
        ]),
        (f"relay: process (live: {proc.file}, while its pid runs)", [
            ("Relay_Running", "Yes" if proc.alive else "No"),
            ("Relay_Pid", proc.pid),
            ("Relay_State", proc.state),
            ("Relay_Disk_Full_Since", proc.disk_full_since),
            ("Relay_Status_Updated", proc.updated_at),
            ("Seconds_Behind_Master", r.seconds_behind),
            ("Last_Seen_Master_Log", f"{proc.upstream_file}:{proc.upstream_pos}"
             if proc.upstream_file else None),
            ("Last_Error", proc.last_error),
            ("Last_Error_Timestamp", proc.last_error_at),
            ("Metrics_Addr", proc.metrics_addr),
        ]),
        ("relay dir (live: the file system now)", [
            ("Relay_Dir", r.relay_dir.path),
            ("Relay_Dir_Bytes", r.relay_dir.size_bytes),
            ("Relay_Dir_Free_Bytes", r.relay_dir.free_bytes),
        ]),
        (f"pipeline {p.name!r}: checkpoint (persisted: downstream {cp.table})", [
            ("Downstream_Reachable", "Yes" if cp.reachable else f"No (unreachable: {cp.error})"),
            ("Checkpoint_Found", cp.found),
            ("Checkpoint_Position", _pos(cp.position) if cp.found else None),
            ("Checkpoint_Gtid", cp.gtid_set),
            ("Consistent", cp.consistent),
            ("Batch_Id", cp.batch_id),
            ("In_Flight_Target", _pos(cp.in_flight_target) if cp.found else None),
            ("Checkpoint_Updated", cp.updated_at),
            ("Checkpoint_Error", cp.error),
        ]),
        ("pipeline: lag (persisted checkpoint vs persisted relay.meta)", [
            ("Relay_End", _pos(p.relay_end)),
            ("Lag_Bytes", p.lag_bytes),
            ("Caught_Up", p.caught_up),
        ]),
        (f"pipeline: process (live: {sp.file} pid)", [
            ("Sync_Running", "Yes" if sp.alive else "No"),
            ("Sync_Pid", sp.pid),
            ("Sync_Consumer_Updated", sp.updated_at),
            ("Sync_Last_Error", sp.last_error),
            ("Sync_Last_Error_Timestamp", sp.last_error_at),
        ]),
    ]
    width = max(len(key) for _title, rows in groups for key, _v in rows)
    lines = [f"binrelay status at {status.generated_at} ({status.config})"]
    for title, rows in groups:
        lines.append(f"*** {title}")
        lines += [f"{key.rjust(width)}: {_v(value)}" for key, value in rows]
    return "\n".join(lines)
