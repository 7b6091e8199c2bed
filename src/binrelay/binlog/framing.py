"""Split a binlog file's bytes into events, in bounded memory.

``iter_events`` reads a byte range of an open file and yields ``(offset, event bytes)``.  It
stops with a typed error when the bytes do not frame: ``IncompleteEventError`` when the range
ends inside an event (a torn tail, or data not written yet), ``BinlogFormatError`` when a
header does not match its position, ``ChecksumMismatchError`` when a CRC32 fails.  Each error
carries the file and the offset of the event, so callers decide what a torn tail means.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO
from zlib import crc32

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import U32 as _U32
from binrelay.binlog.parse import verify_checksum
from binrelay.errors import BinlogFormatError, IncompleteEventError

CHUNK = 1 << 20


def iter_events(f: BinaryIO, start: int, end: int, *, checksum_alg: int, path: str = "",
                chunk: int = CHUNK) -> Iterator[tuple[int, bytes]]:
    """Events of ``f`` from offset ``start`` (an event boundary) up to ``end``."""
    f.seek(start)
    crc = checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32
    buf = b""
    base = start  # file offset of buf[0]
    pos = start
    while pos < end:
        off = pos - base
        have = len(buf) - off
        need = c.EVENT_HEADER_LEN if have < c.EVENT_HEADER_LEN else \
            _HEADER.unpack_from(buf, off)[3]
        if have < need:
            want = min(max(chunk, need - have), end - base - len(buf))
            more = f.read(want) if want > 0 else b""
            if not more:
                raise IncompleteEventError("the file ends inside an event", path=path or None,
                                           offset=pos)
            buf = buf[off:] + more
            base = pos
            continue
        _ts, etype, _sid, size, log_pos, _flags = _HEADER.unpack_from(buf, off)
        if size < c.EVENT_HEADER_LEN:
            raise BinlogFormatError(f"event size {size} is smaller than its header",
                                    path=path or None, offset=pos)
        if log_pos and log_pos != (pos + size) & 0xFFFFFFFF:
            raise BinlogFormatError(
                f"{c.event_type_name(etype)} event header does not match its position (it "
                f"says it ends at {log_pos}, it ends at {pos + size})", path=path or None,
                offset=pos)
        event = buf[off : off + size]
        if crc and (etype == c.FORMAT_DESCRIPTION_EVENT or size < c.EVENT_HEADER_LEN + 4 or
                    crc32(event[:-4]) != _U32.unpack_from(event, size - 4)[0]):
            # The slow, general check: FDEs ignore their in-use flag; the rest raise.
            verify_checksum(event, checksum_alg, offset=pos, path=path or None)
        yield pos, event
        pos += size
