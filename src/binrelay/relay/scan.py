"""Scan a relay file: where its last complete transaction ends, and why the scan stopped.

Used by recovery at start.  Memory is bounded by the largest event, not the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.binlog.events import FormatDescription
from binrelay.binlog.framing import EventFramer, NeedData, iter_events
from binrelay.binlog.parse import parse_format_description, parse_rotate, verify_checksum
from binrelay.errors import BinlogFormatError, IncompleteEventError
from binrelay.relay.progress import Progress

_TORN = "partial event at the end"


@dataclass(frozen=True)
class ScanResult:
    size: int
    fde: FormatDescription | None
    #: End of the last complete transaction (4 when there is none, 0 for a file without magic).
    safe_pos: int
    safe_gtids: str
    #: Where scanning stopped and why ("" when the whole file is whole events).
    stop_pos: int
    stop_reason: str
    #: The scan stopped only because the file ends inside an event.
    torn_tail: bool
    #: The file ends with a real Rotate at ``safe_pos``: the upstream moved on to this file.
    rotated_to: str | None


def read_fde_event(path: Path) -> bytes | None:
    """The file's FORMAT_DESCRIPTION_EVENT as its bytes (its checksum unchecked); None when
    the file does not start with the magic and a whole one."""
    with open(path, "rb") as f:
        head = f.read(4 + c.EVENT_HEADER_LEN)
        if len(head) < 4 + c.EVENT_HEADER_LEN or head[:4] != c.BINLOG_MAGIC:
            return None
        framer = EventFramer(4, check_log_pos=False, path=str(path))
        framer.feed(head[4:])
        need = framer.need()
        if need:
            framer.feed(f.read(need))
        try:
            got = framer.next_event()
        except BinlogFormatError:
            return None
    if isinstance(got, NeedData) or got[1][4] != c.FORMAT_DESCRIPTION_EVENT:
        return None
    return got[1]


def read_fde(path: Path) -> FormatDescription | None:
    return parse_fde(read_fde_event(path))


def parse_fde(event: bytes | None) -> FormatDescription | None:
    if event is None:
        return None
    try:
        fde = parse_format_description(event)
        verify_checksum(event, fde.checksum_alg)
    except BinlogFormatError:
        return None
    return fde


def scan_file(path: Path, *, flavor: str | None, start: int = 0,
              start_gtids: str = "") -> ScanResult:
    """Scan ``path`` from ``start`` (0, or an event boundary after the FDE)."""
    size = os.path.getsize(path)
    fde_event = read_fde_event(path)
    fde = parse_fde(fde_event)
    if fde is None or fde_event is None:
        reason = "no binlog header" if size else "empty file"
        return ScanResult(size, None, 0, "", 0, reason, False, None)
    fde_end = 4 + len(fde_event)
    flavor = flavor or ("mariadb" if fde.is_mariadb else "mysql")
    pos = max(start, fde_end)
    progress = Progress(flavor=flavor, gtid_text=start_gtids, position=pos)
    checksum_len = fde.checksum_len
    rotated_to: str | None = None
    stop_reason = ""
    with open(path, "rb") as f:
        try:
            for at, event in iter_events(f, pos, size, checksum_alg=fde.checksum_alg,
                                         path=str(path)):
                pos = at
                progress.feed(event, at + len(event), checksum_len)
                if event[4] == c.ROTATE_EVENT:
                    rotated_to = parse_rotate(event, checksum_len).next_file
            pos = size
        except IncompleteEventError as exc:
            pos, stop_reason = exc.offset if exc.offset is not None else pos, _TORN
        except BinlogFormatError as exc:
            pos, stop_reason = exc.offset if exc.offset is not None else pos, exc.reason
    return ScanResult(
        size=size, fde=fde, safe_pos=progress.boundary_pos, safe_gtids=progress.gtid_text(),
        stop_pos=pos, stop_reason=stop_reason, torn_tail=stop_reason == _TORN,
        rotated_to=rotated_to if rotated_to and progress.boundary_pos == size else None,
    )
