"""How far behind the upstream a relay position is: the upstream asked now, bytes counted.

``probe_upstream`` is the I/O (a few queries on one session); ``bytes_behind`` is pure;
``relay_bytes_between`` counts relay bytes between two relay positions (file sizes only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from binrelay.errors import BinrelayError
from binrelay.position import Position, binlog_sort_key
from binrelay.relay.relaydir import RelayView
from binrelay.upstream.client import UpstreamSession


@dataclass(frozen=True)
class UpstreamPosition:
    """The upstream's binlog end as SHOW MASTER STATUS says, and its binlog files."""

    identity: str
    flavor: str
    binlog_file: str
    binlog_pos: int
    gtid: str
    #: (name, size) of every binlog file, as SHOW BINARY LOGS lists them.
    binlogs: tuple[tuple[str, int], ...]


def probe_upstream(session: UpstreamSession) -> UpstreamPosition:
    """Ask the upstream where its binlog ends (needs REPLICATION CLIENT / BINLOG MONITOR)."""
    info = session.server_info()
    rows = session.query("SHOW MASTER STATUS")
    name, pos = (str(rows[0][0]), int(rows[0][1])) if rows else ("", 0)
    files = tuple((f.name, f.size) for f in session.binlog_files())
    return UpstreamPosition(info.identity, info.flavor, name, pos,
                            session.gtid_executed(info.flavor), files)


def _key(name: str) -> tuple[str, int] | None:
    try:
        return binlog_sort_key(name)
    except BinrelayError:
        return None


def bytes_behind(binlogs: Sequence[tuple[str, int]], upstream: tuple[str, int],
                 relayed: tuple[str, int]) -> int | None:
    """Binlog bytes from ``relayed`` (file, offset) to ``upstream`` (file, offset).

    None when it cannot be counted: the relayed file is not among ``binlogs`` (purged, or
    another server's).  0 when the relay is at or past the upstream's position.
    """
    rel_key, up_key = _key(relayed[0]), _key(upstream[0])
    if rel_key is None or up_key is None:
        return None
    if rel_key >= up_key:
        return max(0, upstream[1] - relayed[1]) if rel_key == up_key else 0
    names = {name for name, _size in binlogs}
    if relayed[0] not in names:
        return None
    total = 0
    for name, size in binlogs:
        key = _key(name)
        if key is None or key < rel_key or key > up_key:
            continue
        end = upstream[1] if key == up_key else size
        start = relayed[1] if key == rel_key else 0
        total += max(0, end - start)
    return total


def relay_bytes_between(relay: RelayView | Path, start: Position, end: Position) -> int:
    """Relay bytes from ``start`` to ``end`` (0 when ``end`` is not after ``start``): how far
    a consumer at ``start`` is behind a relay that has got to ``end``."""
    if end.sort_key <= start.sort_key:
        return 0
    view = RelayView.of(relay)
    total = 0
    for subdir in view.index:
        if not start.subdir.seq <= subdir.seq <= end.subdir.seq:
            continue
        for name in view.files(subdir):
            here = (subdir.seq, binlog_sort_key(name))
            if here < start.file_key() or here > end.file_key():
                continue
            if here == end.file_key():
                stop = end.binlog_pos
            else:
                try:
                    stop = view.path(subdir, name).stat().st_size
                except FileNotFoundError:  # purged meanwhile
                    continue
            first = start.binlog_pos if here == start.file_key() else 4
            total += max(0, stop - max(first, 4))
    return total
