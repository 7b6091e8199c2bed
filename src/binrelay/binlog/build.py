"""Binlog events built from their parts, byte for byte as MariaDB 10.11 and MySQL 8.0 write
them: the relay's dummy events for holes (:mod:`~binrelay.binlog.dummy`) and the tests'
binlog files use the same encoders (``tests/binlog_builder.py`` strings them into files and
``tests/test_binlog_events.py`` checks them against a real server's binlog).
"""

from __future__ import annotations

import struct
import zlib

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER, U32, lenenc_bytes

# MariaDB Gtid_log_event flags.
FL_STANDALONE, FL_GROUP_COMMIT_ID, FL_TRANSACTIONAL, FL_ALLOW_PARALLEL = 1, 2, 4, 8
FL_DDL, FL_PREPARED_XA, FL_COMPLETED_XA = 32, 64, 128

# Post-header lengths exactly as the servers write them in their FDE.  MariaDB 10.11 writes one
# per event type up to 171 (DELETE_ROWS_COMPRESSED); GTID (162) is 19, GTID_LIST (163) is 4.
MARIADB_10_11_POST_HEADERS = bytes.fromhex(
    "380d000800120004040404120000e400041a08000000080808020000000a0a0a0000000000000a0a0a"
    + "00" * 119
    + "041304000d0808080a0a0a"
)
MARIADB_10_11_VERSION = "10.11.19-MariaDB-0+deb12u1-log"
# MySQL 8.0.40 (41 types, up to TRANSACTION_PAYLOAD), from a real 8.0.40 binlog.
MYSQL_8_0_POST_HEADERS = bytes.fromhex(
    "000d0008000000000400040000006200041a08000000080808020000000a0a0a2a2a001234000a2800"
)
MYSQL_8_0_VERSION = "8.0.40"



def event(event_type: int, body: bytes, *, log_pos: int, checksum: bool, server_id: int = 1,
          timestamp: int = 1_700_000_000, flags: int = 0) -> bytes:
    """One event: 19-byte header, ``body``, CRC32 when ``checksum``."""
    size = c.EVENT_HEADER_LEN + len(body) + (4 if checksum else 0)
    raw = HEADER.pack(timestamp, event_type, server_id, size, log_pos, flags) + body
    return with_crc(raw) if checksum else raw


def with_crc(raw: bytes | bytearray) -> bytes:
    """``raw`` with its CRC32 appended."""
    return bytes(raw) + U32.pack(zlib.crc32(raw))


def fde_event(*, flavor: str, checksum: bool, log_pos: int | None = None, server_id: int = 1,
              timestamp: int = 1_700_000_000, create_timestamp: int | None = None,
              in_use: bool = False, server_version: str | None = None) -> bytes:
    """A FORMAT_DESCRIPTION_EVENT.  Its CRC is always written, and computed with the in-use
    flag clear, as both servers do (the flag is toggled in place when the file is closed)."""
    body = fde_body(flavor=flavor, checksum=checksum,
                    create_timestamp=timestamp if create_timestamp is None else create_timestamp,
                    server_version=server_version)
    size = c.EVENT_HEADER_LEN + len(body) + 4
    if log_pos is None:
        log_pos = 4 + size  # the FDE sits right after the magic
    raw = HEADER.pack(timestamp, c.FORMAT_DESCRIPTION_EVENT, server_id, size, log_pos, 0) + body
    ev = bytearray(with_crc(raw))
    if in_use:
        ev[17] |= 1
    return bytes(ev)


def fde_body(*, flavor: str, checksum: bool, create_timestamp: int,
             server_version: str | None = None) -> bytes:
    if flavor == "mariadb":
        version, post_headers = MARIADB_10_11_VERSION, MARIADB_10_11_POST_HEADERS
    elif flavor == "mysql":
        version, post_headers = MYSQL_8_0_VERSION, MYSQL_8_0_POST_HEADERS
    else:
        raise ValueError(flavor)
    version = server_version or version
    return (struct.pack("<H", 4) + version.encode().ljust(50, b"\0")
            + struct.pack("<IB", create_timestamp, c.EVENT_HEADER_LEN) + post_headers
            + bytes([1 if checksum else 0]))


def maria_gtid_body(seq_no: int, domain_id: int = 0, flags: int = FL_TRANSACTIONAL
                    | FL_ALLOW_PARALLEL, *, commit_id: int | None = None,
                    xid: tuple[int, bytes, bytes] | None = None, extra: bytes = b"") -> bytes:
    """seq u64, domain u32, flags u8, then commit id / XA xid / ``extra`` (flags_extra and
    what it announces), zero-padded to 19 bytes."""
    if commit_id is not None:
        flags |= FL_GROUP_COMMIT_ID
    body = struct.pack("<QIB", seq_no, domain_id, flags)
    if commit_id is not None:
        body += struct.pack("<Q", commit_id)
    if xid is not None:
        format_id, gtrid, bqual = xid
        body += struct.pack("<iBB", format_id, len(gtrid), len(bqual)) + gtrid + bqual
    return (body + extra).ljust(19, b"\0")


def gtid_list_body(triples: list[tuple[int, int, int]]) -> bytes:
    """count u32, then (domain u32, server_id u32, seq u64) each; MariaDB pads an empty list to
    6 bytes so that the event can be replaced by a dummy of the same size for old replicas."""
    body = struct.pack("<I", len(triples))
    body += b"".join(struct.pack("<IIQ", *t) for t in triples)
    return body.ljust(6, b"\0")


def checkpoint_body(name: str) -> bytes:
    return struct.pack("<I", len(name)) + name.encode()


def query_body(text: str | bytes, *, db: str = "", status_vars: bytes = b"", thread_id: int = 1,
               exec_time: int = 0, error_code: int = 0) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return (struct.pack("<IIBHH", thread_id, exec_time, len(db), error_code, len(status_vars))
            + status_vars + db.encode() + b"\0" + raw)


def xid_body(xid: int) -> bytes:
    return struct.pack("<Q", xid)


def rotate_body(next_file: str, position: int = 4) -> bytes:
    return struct.pack("<Q", position) + next_file.encode()


def xa_prepare_body(gtrid: bytes, bqual: bytes = b"", *, format_id: int = 1,
                    one_phase: bool = False) -> bytes:
    return struct.pack("<BiII", one_phase, format_id, len(gtrid), len(bqual)) + gtrid + bqual


def table_map_body(table_id: int, db: str = "app", table: str = "t") -> bytes:
    """A real TABLE_MAP for ``db.table(id INT NULL)``."""
    return (table_id.to_bytes(6, "little") + struct.pack("<H", 1)
            + bytes([len(db)]) + db.encode() + b"\0" + bytes([len(table)]) + table.encode() + b"\0"
            + b"\x01"  # one column
            + b"\x03"  # MYSQL_TYPE_LONG
            + b"\x00"  # no column metadata
            + b"\x01")  # the column is nullable


def write_rows_body(table_id: int, values: list[int], *, v2: bool = False) -> bytes:
    """WRITE_ROWS (v1, or v2 with empty extra data) of ``values`` into the table above."""
    head = table_id.to_bytes(6, "little") + struct.pack("<H", 1)  # STMT_END_F
    if v2:
        head += struct.pack("<H", 2)
    rows = b"".join(b"\x00" + struct.pack("<i", v) for v in values)
    return head + b"\x01" + b"\x01" + rows  # 1 column, all columns present


def mysql_gtid_body(uuid: str, gno: int, *, last_committed: int = 0, sequence_number: int = 1,
                    transaction_length: int = 0, v80: bool = True) -> bytes:
    """GTID_LOG_EVENT / ANONYMOUS_GTID_LOG_EVENT: 5.7 layout, plus the 8.0 commit timestamp,
    transaction length and server version when ``v80``."""
    body = (b"\x01" + bytes.fromhex(uuid.replace("-", "")) + struct.pack("<q", gno)
            + b"\x02" + struct.pack("<qq", last_committed, sequence_number))
    if v80:
        body += (1_700_000_000_000_000).to_bytes(7, "little")
        body += lenenc_bytes(transaction_length)
        body += struct.pack("<I", 80040)
    return body


def previous_gtids_body(sids: dict[str, list[tuple[int, int]]]) -> bytes:
    """The SID block: n_sids u64, then per SID uuid, n_intervals u64, [start, end) u64 pairs."""
    out = struct.pack("<Q", len(sids))
    for uuid in sorted(sids):
        ivs = sids[uuid]
        out += bytes.fromhex(uuid.replace("-", "")) + struct.pack("<Q", len(ivs))
        out += b"".join(struct.pack("<QQ", a, b + 1) for a, b in ivs)
    return out


def user_var_null_body(name: bytes) -> bytes:
    """USER_VAR_EVENT of ``SET @`name` = NULL``: name length u32, name, is_null."""
    return struct.pack("<I", len(name)) + name + b"\x01"
