"""Where transactions end in a relay file, and which of them are DDL, found fast.

Planning work over the relay log (Spark partitions, batch limits, DDL barriers) needs the
transaction ends in a byte range, not the events.  This scanner hops from header to header
(reading the type and size only; the events inside a transaction need no look), feeds the
others to the transaction tracker, and reports each end with its kind.  It trusts the bytes:
they are durable relay data, and the readers that decode them verify checksums.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.binlog.framing import iter_frames
from binrelay.binlog.parse import maria_gtid_text, mysql_gtid_text, query_text_prefix
from binrelay.binlog.txn import (
    IDLE,
    IN_GROUP_TYPES,
    QUERY_TYPES,
    TxnTracker,
    is_rollback,
    is_savepoint_statement,
    is_transaction_control,
)
from binrelay.errors import BinlogFormatError, RelayDirError
from binrelay.relay.scan import read_fde

_CHUNK = 4 << 20

#: Transaction kinds.  DML: row changes only, which the concurrent apply may compact and
#: reorder.  DDL: one statement that commits by itself.  SERIAL: a transaction that holds
#: statements (statement-format or MIXED DML, ``CREATE TABLE ... SELECT``), which must be
#: replayed as it is, in relay order.  XA_PREPARE: an XA transaction's prepared part, whose
#: fate is decided by a later XA_END group (``XA COMMIT`` / ``XA ROLLBACK``).  INCIDENT:
#: the upstream says events are missing here (a replica stops at it).  OTHER: nothing to
#: apply (GTID lists, rotations, an empty transaction).
DML, DDL, SERIAL, XA_PREPARE, XA_END, INCIDENT, OTHER = (
    "dml", "ddl", "serial", "xa-prepare", "xa-end", "incident", "other")
#: Kinds that are a batch of their own.
BARRIERS = frozenset({DDL, SERIAL, XA_PREPARE, INCIDENT})


@dataclass(frozen=True, slots=True)
class TxnEnd:
    start: int  # where the transaction (or standalone event) begins
    end: int  # where it ends: a position safe to cut at
    kind: str  # one of the kinds above
    #: The transaction's GTID ("0-1-5", "uuid:7"), None without GTIDs.
    gtid: str | None = None
    #: XA_PREPARE / XA_END: the XA transaction's id (:func:`xid_key`); XA_END: whether it
    #: committed.
    xid: str | None = None
    committed: bool = False


def transaction_ends(path: Path, start: int, stop: int, *,
                     enough_at: int | None = None) -> list[TxnEnd]:
    """Transaction ends in ``path`` after ``start`` (a transaction boundary >= 4) up to
    ``stop`` (a durable end: relay.meta's position or the end of a finished file).

    With ``enough_at``, scanning stops at the first end at or past that offset.
    """
    ends: list[TxnEnd] = []
    with closing(scan_transactions(path, start, stop)) as scan:
        for txn in scan:
            ends.append(txn)
            if enough_at is not None and txn.end >= enough_at:
                break
    return ends


def scan_transactions(path: Path, start: int, stop: int) -> Generator[TxnEnd, None, None]:
    """:func:`transaction_ends` one by one: the file is read only as far as the caller
    goes (a batch planner stops at a DDL, and must not pay for the relay behind it)."""
    fde = read_fde(path)
    if fde is None:
        raise RelayDirError(f"relay file {path} has no valid binlog header")
    checksum_len = fde.checksum_len
    tracker = TxnTracker()
    txn_start = start
    saw_rows = False
    saw_statement = False
    gtid: str | None = None

    def cut_short(offset: int, end: int) -> RelayDirError:
        return RelayDirError(f"relay file {path} ends at {end}, before {stop}",
                             hint="restart the relay to recover it")

    with open(path, "rb") as f:
        for pos, etype, size, event, hopped in iter_frames(f, start, stop, whole=_WHOLE,
                                                           path=str(path), chunk=_CHUNK,
                                                           incomplete=cut_short):
            # (``tracker.state`` read directly: this loop runs per transaction of the relay.)
            if hopped and tracker.state != IDLE:
                # The group's own events on the way here (outside a transaction they stand
                # for nothing: the next event starts one).
                saw_rows = saw_rows or hopped & _ROWS == _ROWS
                tracker.feed(c.TABLE_MAP_EVENT)  # any in-group type: the group has begun
            was_in = tracker.state != IDLE
            if not was_in:
                txn_start = pos
                saw_rows = False
                saw_statement = False
                gtid = None
            is_query = etype in QUERY_TYPES
            prefix = query_text_prefix(event, checksum_len) if is_query else b""
            flags = 0
            if etype == c.GTID_EVENT and len(event) >= c.EVENT_HEADER_LEN + 13:
                flags = event[c.EVENT_HEADER_LEN + 12]
                gtid = maria_gtid_text(event)
            elif etype == c.GTID_LOG_EVENT:
                # (MySQL 8.4's tagged GTIDs are not followed here: the set stays untagged.)
                gtid = _mysql_gtid(event)
            if tracker.feed(etype, maria_flags=flags, query_prefix=prefix):
                xid = None
                committed = False
                if etype == c.XID_EVENT and saw_rows and not saw_statement:
                    kind = DML  # the common case, first
                elif etype == c.XA_PREPARE_LOG_EVENT:
                    kind = XA_PREPARE
                    xid = _prepared_xid(event, checksum_len, path, pos)
                elif is_query and was_in and _is_xa_outcome(prefix):
                    kind = XA_END
                    text = query_text_prefix(event, checksum_len, limit=1024)
                    xid, committed = _xa_outcome(text, path, pos)
                elif etype == c.INCIDENT_EVENT:
                    kind = INCIDENT
                elif saw_statement or (is_query and was_in and is_rollback(prefix)):
                    # (A group the upstream rolled back: replayed as it is, so that only
                    # its non-transactional changes stay, as on a replica.)
                    kind = SERIAL
                elif saw_rows or etype == c.TRANSACTION_PAYLOAD_EVENT:
                    kind = DML
                elif is_query and not is_transaction_control(prefix):
                    kind = DDL
                else:
                    kind = OTHER
                yield TxnEnd(txn_start, pos + size, kind, gtid, xid, committed)
            elif is_query and tracker.state != IDLE and (
                    not is_transaction_control(prefix) or is_savepoint_statement(prefix)):
                # A statement inside a transaction: statement-format DML, the CREATE of a
                # CREATE TABLE ... SELECT whose rows follow, or a savepoint whose ROLLBACK
                # TO undoes logged rows: the transaction must be replayed as it is.
                saw_statement = True


def _mysql_gtid(event: bytes | memoryview) -> str | None:
    return mysql_gtid_text(event) if len(event) >= c.EVENT_HEADER_LEN + 25 else None


def xid_key(format_id: int, gtrid: bytes, bqual: bytes) -> str:
    """An XA transaction id as one text, the same from the prepare event and the outcome."""
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}"


def _prepared_xid(event: bytes | memoryview, checksum_len: int, path: Path, pos: int) -> str:
    # XA_PREPARE_LOG_EVENT body: one_phase (1), formatID (4), gtrid_length (4),
    # bqual_length (4), then gtrid and bqual (MySQL's layout, which MariaDB took over).
    base = c.EVENT_HEADER_LEN
    end = len(event) - checksum_len
    if end - base < 13:
        raise BinlogFormatError("XA_PREPARE event truncated", path=str(path), offset=pos)
    format_id, glen, blen = struct.unpack_from("<iII", event, base + 1)
    if base + 13 + glen + blen > end or glen > 64 or blen > 64:
        raise BinlogFormatError("XA_PREPARE event has an impossible XID", path=str(path),
                                offset=pos)
    data = bytes(event[base + 13:base + 13 + glen + blen])
    return xid_key(format_id, data[:glen], data[glen:])


def _is_xa_outcome(prefix: bytes) -> bool:
    upper = prefix.lstrip().upper()
    return upper.startswith((b"XA COMMIT", b"XA ROLLBACK")) and b"ONE PHASE" not in upper


_XID_TEXT = re.compile(
    rb"^\s*XA\s+(COMMIT|ROLLBACK)\s+X'([0-9A-Fa-f]*)'\s*,\s*X'([0-9A-Fa-f]*)'\s*,\s*(-?\d+)",
    re.IGNORECASE)


def _xa_outcome(text: bytes, path: Path, pos: int) -> tuple[str, bool]:
    """``XA COMMIT X'..',X'..',n`` (how both servers log the outcome of a prepared XA)."""
    m = _XID_TEXT.match(text)
    if m is None:
        raise BinlogFormatError(f"unexpected XA outcome statement {text[:80]!r}",
                                path=str(path), offset=pos)
    xid = xid_key(int(m.group(4)), bytes.fromhex(m.group(2).decode()),
                  bytes.fromhex(m.group(3).decode()))
    return xid, m.group(1).upper() == b"COMMIT"


#: Events inside a group that are not row changes.
_NOT_ROWS = frozenset({
    c.ANNOTATE_ROWS_EVENT, c.ROWS_QUERY_LOG_EVENT, c.INTVAR_EVENT, c.RAND_EVENT,
    c.USER_VAR_EVENT, c.BEGIN_LOAD_QUERY_EVENT, c.APPEND_BLOCK_EVENT,
    c.TRANSACTION_CONTEXT_EVENT, c.IGNORABLE_LOG_EVENT,
})

#: How the scan reads each event type (``iter_frames``): events inside a group are hopped
#: over, marked _IN_GROUP, rows events also _ROWS; the rest are read whole.
_IN_GROUP, _ROWS = 2, 6
_WHOLE = bytes(
    (_ROWS if t != c.TABLE_MAP_EVENT and t not in _NOT_ROWS else _IN_GROUP)
    if t in IN_GROUP_TYPES else 1 for t in range(256))
