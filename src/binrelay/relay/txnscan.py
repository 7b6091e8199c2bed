"""Where transactions end in a relay file, and which of them are DDL, found fast.

Planning work over the relay log (Spark partitions, batch limits, DDL barriers) needs the
transaction ends in a byte range, not the events.  This scanner hops from header to header
(reading the type and size only; the events inside a transaction need no look), feeds the
others to the transaction tracker, and reports each end with its kind.  It trusts the bytes:
they are durable relay data, and the readers that decode them verify checksums.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.binlog.events import query_text_prefix
from binrelay.binlog.txn import (
    IN_GROUP_TYPES,
    TxnTracker,
    is_transaction_control,
    needs_query_prefix,
)
from binrelay.errors import BinlogFormatError, RelayDirError
from binrelay.relay.scan import read_fde

_TYPE_SIZE = struct.Struct("<BxxxxI")
_CHUNK = 4 << 20

DML, DDL, OTHER = "dml", "ddl", "other"


@dataclass(frozen=True, slots=True)
class TxnEnd:
    start: int  # where the transaction (or standalone event) begins
    end: int  # where it ends: a position safe to cut at
    kind: str  # DML (row changes), DDL (a statement that commits by itself), OTHER


def transaction_ends(path: Path, start: int, stop: int, *,
                     enough_at: int | None = None) -> list[TxnEnd]:
    """Transaction ends in ``path`` after ``start`` (a transaction boundary >= 4) up to
    ``stop`` (a durable end: relay.meta's position or the end of a finished file).

    With ``enough_at``, scanning stops at the first end at or past that offset.
    """
    fde = read_fde(path)
    if fde is None:
        raise RelayDirError(f"relay file {path} has no valid binlog header")
    checksum_len = fde.checksum_len
    tracker = TxnTracker()
    ends: list[TxnEnd] = []
    pos = start
    txn_start = start
    saw_rows = False
    with open(path, "rb") as f:
        f.seek(start)
        buf = b""
        base = start
        while pos < stop:
            off = pos - base
            if off > len(buf):
                # Hopping over an event body went past what was read: skip the rest unread.
                f.seek(pos)
                buf, base, off = b"", pos, 0
            if len(buf) - off < c.EVENT_HEADER_LEN:
                more = f.read(min(_CHUNK, stop - base - len(buf)))
                if not more:
                    if stop - pos < c.EVENT_HEADER_LEN:
                        break  # a torn header at the end of a finished file
                    raise RelayDirError(f"relay file {path} ends at {base + len(buf)}, before "
                                        f"{stop}", hint="restart the relay to recover it")
                buf = buf[off:] + more
                base = pos
                continue
            etype, size = _TYPE_SIZE.unpack_from(buf, off + 4)
            if size < c.EVENT_HEADER_LEN:
                raise BinlogFormatError(f"event size {size} is smaller than its header",
                                        path=str(path), offset=pos)
            if pos + size > stop:
                # Only a finished file's torn tail (the upstream crashed mid-event) gets here:
                # stops inside files being written are transaction ends.
                break
            if not tracker.in_transaction:
                txn_start = pos
                saw_rows = False
            if etype in IN_GROUP_TYPES:
                if etype != c.TABLE_MAP_EVENT and etype not in _NOT_ROWS:
                    saw_rows = True
                tracker.feed(etype)
                pos += size
                continue
            if len(buf) - off < size:
                # The events that decide where transactions end are read whole.
                buf = buf[off:] + f.read(max(_CHUNK, size - (len(buf) - off)))
                base = pos
                off = 0
            prefix = b""
            if needs_query_prefix(etype):
                prefix = query_text_prefix(buf[off : off + size], checksum_len)
            flags = 0
            if etype == c.GTID_EVENT and len(buf) - off >= c.EVENT_HEADER_LEN + 13:
                flags = buf[off + c.EVENT_HEADER_LEN + 12]
            if tracker.feed(etype, maria_flags=flags, query_prefix=prefix):
                if saw_rows or etype == c.TRANSACTION_PAYLOAD_EVENT:
                    kind = DML
                elif needs_query_prefix(etype) and not is_transaction_control(prefix):
                    kind = DDL
                else:
                    kind = OTHER
                ends.append(TxnEnd(txn_start, pos + size, kind))
                if enough_at is not None and pos + size >= enough_at:
                    break
            pos += size
    return ends


#: Events inside a group that are not row changes.
_NOT_ROWS = frozenset({
    c.ANNOTATE_ROWS_EVENT, c.ROWS_QUERY_LOG_EVENT, c.INTVAR_EVENT, c.RAND_EVENT,
    c.USER_VAR_EVENT, c.BEGIN_LOAD_QUERY_EVENT, c.APPEND_BLOCK_EVENT,
    c.TRANSACTION_CONTEXT_EVENT, c.IGNORABLE_LOG_EVENT,
})
