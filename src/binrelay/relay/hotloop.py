"""The relay's hot loop: take the run of ordinary events at the start of a receive buffer.

After ``COM_BINLOG_DUMP`` each packet is ``len(3) seq(1) 0x00 event``.  Most events (table
maps, row events, annotations) need no decision: they are checked and appended.  ``take_run``
takes such events until the first one that needs a decision (or a partial packet) and returns
where it stopped; the writer handles that one event and calls again.  Given a MariaDB
stream's transaction state (:class:`~binrelay.relay.progress.TxnRun`) it also takes the
GTID and XID events that open and close ordinary transactions, doing what
``Progress.feed`` does for them: two events per transaction that would otherwise each cost
a trip through the writer's Python.

``take_run_python`` is the specification; ``binrelay._speedups.take_run`` (C, built when a
compiler is there) does exactly the same, faster.  A test runs both on the same bytes.
"""

from __future__ import annotations

import zlib

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import MARIA_GTID as _MARIA_GTID
from binrelay.binlog.bytes import U32 as _U32
from binrelay.binlog.txn import AFTER_GTID, IDLE, IN_GROUP_TYPES, IN_TRX
from binrelay.relay.progress import TxnRun, merge_maria
from binrelay.upstream.packets import MAX_PACKET as _MAX_PACKET

#: One byte per event type, 1 for the types a run may contain.
BORING = bytes(1 if t in IN_GROUP_TYPES else 0 for t in range(256))


def take_run_python(data: bytes, pos: int, offset: int, check_crc: bool, boring: bytes,
                    out: bytearray, txn: TxnRun | None = None) -> tuple[int, int, int, bool]:
    """Append the run's events to ``out``; return (pos, offset, events taken, bad checksum).

    An event is taken when its packet is whole (a plain ``0x00 + event`` packet shorter than
    the maximum: :mod:`binrelay.upstream.packets`' framing of its commonest case, inlined),
    its type is flagged in ``boring``, it is not artificial, it starts at ``offset`` (where
    the file ends), its size matches the packet and, with ``check_crc``, its CRC32 matches.
    ``bad checksum`` says the run stopped at an event whose CRC32 did not match.

    With ``txn``, also a MariaDB GTID event that opens a transaction (not a standalone
    statement's: its Query needs a decision) and an XID event, updating ``txn`` as
    ``Progress.feed`` updates itself.
    """
    n = len(data)
    view = memoryview(data)
    unpack = _HEADER.unpack_from
    count = 0
    try:
        while n - pos >= 4 + c.EVENT_HEADER_LEN:
            length = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            end = pos + 4 + length
            if end > n or length >= _MAX_PACKET or data[pos + 4] != 0:
                break
            start = pos + 5
            ts, etype, server_id, size, log_pos, flags = unpack(data, start)
            if flags & c.LOG_EVENT_ARTIFICIAL_F or size != length - 1 or log_pos - size != offset:
                break
            gtid = None
            if not boring[etype]:
                if txn is None:
                    break
                if etype == c.GTID_EVENT:
                    # Progress.feed raises on a short one: leave it to the writer.
                    if size < c.EVENT_HEADER_LEN + 13:
                        break
                    seq, domain, gflags = _MARIA_GTID.unpack_from(data, start + c.EVENT_HEADER_LEN)
                    if gflags & c.FL_STANDALONE:
                        break
                    gtid = (domain, server_id, seq)
                elif etype != c.XID_EVENT:
                    break
            if check_crc and (size < c.EVENT_HEADER_LEN + 4 or
                              zlib.crc32(view[start : end - 4]) != _U32.unpack_from(data,
                                                                                     end - 4)[0]):
                return pos, offset, count, True
            out += view[start:end]
            offset = log_pos
            pos = end
            count += 1
            if txn is not None:
                if gtid is not None:
                    txn.pending, txn.state, txn.last_ts = gtid, IN_TRX, ts
                elif etype == c.XID_EVENT:
                    if txn.pending is not None:
                        merge_maria(txn.maria, *txn.pending)
                        txn.pending = None
                    txn.state, txn.boundary, txn.last_ts = IDLE, log_pos, ts
                elif txn.state == AFTER_GTID:
                    txn.state = IN_TRX
    finally:
        view.release()
    return pos, offset, count, False


try:
    from binrelay._speedups import take_run as take_run_c
except ImportError:  # pragma: no cover - depends on the build
    take_run_c = None

take_run = take_run_c or take_run_python
