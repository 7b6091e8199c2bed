"""The scanner's event walk: which whole events of a buffer it must look at.

A sysbench-like transaction is about eleven events, of which the row scanner needs the table
maps, rows events and the GTID; the rest (annotations, XID, BEGIN) only need their CRC32
checked.  ``walk_events`` does that walk and returns the events to look at, so the
per-event Python work is spent only on those.

``walk_events_python`` is the specification; ``binrelay._speedups.walk_events`` (C, built
when a compiler is there) does exactly the same, faster.  A test runs both on the same bytes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import TYPE_SIZE as _TYPE_SIZE

#: ``keep`` values: skip the event (CRC checked), return it, or return it and stop after it
#: (an event that may change how the following ones are read, e.g. a new FDE; its CRC is
#: left to the decoder).
SKIP, KEEP, STOP_AFTER = 0, 1, 2
#: Statuses: the walk stopped at a short tail or after a STOP_AFTER event; an event claims
#: fewer bytes than a header; an event's CRC32 does not match.
OK, BAD_SIZE, BAD_CRC = 0, 1, 2

_CRC32_RESIDUE = 0x2144DF1C
_HEADER_LEN = c.EVENT_HEADER_LEN

Walked = tuple[list[tuple[int, int, int]], int, int]


def keep_table(keep: Iterable[int], stop_after: Iterable[int]) -> bytes:
    """The 256-entry ``keep`` argument for the given event types."""
    table = bytearray(256)
    for t in keep:
        table[t] = KEEP
    for t in stop_after:
        table[t] = STOP_AFTER
    return bytes(table)


def walk_events_python(buf: bytes, pos: int, end: int, crc: bool, keep: bytes) -> Walked:
    """Walk the whole events of ``buf[pos:end]``: ``(events, stopped_at, status)``.

    ``events`` are ``(type, start, end)`` of the events ``keep`` flags, in order; every
    other event is skipped after (with ``crc``) checking its CRC32.  The walk stops before an
    incomplete event, after a STOP_AFTER event, or at a bad event (``status`` says which,
    ``stopped_at`` is its start).
    """
    events: list[tuple[int, int, int]] = []
    view = memoryview(buf)
    try:
        while end - pos >= _HEADER_LEN:
            etype, size = _TYPE_SIZE.unpack_from(buf, pos + 4)
            if size < _HEADER_LEN:
                return events, pos, BAD_SIZE
            ev_end = pos + size
            if ev_end > end:
                break
            how = keep[etype]
            if how == STOP_AFTER:
                events.append((etype, pos, ev_end))
                return events, ev_end, OK
            if crc and zlib.crc32(view[pos:ev_end]) != _CRC32_RESIDUE:
                return events, pos, BAD_CRC
            if how:
                events.append((etype, pos, ev_end))
            pos = ev_end
    finally:
        view.release()
    return events, pos, OK


try:
    from binrelay._speedups import walk_events as walk_events_c
except ImportError:  # pragma: no cover - depends on the build
    walk_events_c = None

walk_events = walk_events_c or walk_events_python
