"""Event header and the event bodies the relay unit has to understand.

The relay never decodes row images: it needs to know where a file starts (FDE), where it ends
(Rotate), where transactions start and end (GTID, Query, XID) and which GTIDs it has relayed.
Each parser takes the raw bytes of one whole event (header included, checksum included when
the file has one) and returns a frozen dataclass, or raises ``BinlogFormatError``.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import uuid_text
from binrelay.errors import BinlogFormatError, ChecksumMismatchError
from binrelay.gtid import MAX_GNO


@dataclass(frozen=True, slots=True)
class EventHeader:
    timestamp: int
    event_type: int
    server_id: int
    event_size: int
    log_pos: int  # end position of the event in the upstream file (0 for some artificial events)
    flags: int

    @property
    def start_pos(self) -> int:
        return self.log_pos - self.event_size

    @property
    def is_artificial(self) -> bool:
        return bool(self.flags & c.LOG_EVENT_ARTIFICIAL_F)


def parse_header(data: bytes | bytearray | memoryview, offset: int = 0) -> EventHeader:
    if len(data) - offset < c.EVENT_HEADER_LEN:
        raise BinlogFormatError("event header truncated", offset=offset)
    header = EventHeader(*_HEADER.unpack_from(data, offset))
    if header.event_size < c.EVENT_HEADER_LEN:
        raise BinlogFormatError(
            f"event size {header.event_size} is smaller than the {c.EVENT_HEADER_LEN}-byte header",
            offset=offset,
        )
    return header


def crc32_ok(event: bytes | bytearray | memoryview) -> bool:
    """True when the last four bytes of ``event`` are the CRC32 of the bytes before them."""
    if len(event) < c.EVENT_HEADER_LEN + c.CHECKSUM_LEN:
        return False
    view = memoryview(event)
    return zlib.crc32(view[:-4]) == int.from_bytes(view[-4:], "little")


def fde_crc32_ok(event: bytes | bytearray | memoryview) -> bool:
    """FDE checksums ignore the in-use flag, so closing a file keeps them valid."""
    if len(event) < c.EVENT_HEADER_LEN + c.CHECKSUM_LEN:
        return False
    view = bytearray(event)
    view[17] &= ~c.LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    return crc32_ok(view)


def verify_checksum(event: bytes | bytearray | memoryview, checksum_alg: int,
                    *, offset: int | None = None, path: str | None = None) -> None:
    if checksum_alg != c.BINLOG_CHECKSUM_ALG_CRC32:
        return
    event_type = event[4] if len(event) > 4 else c.UNKNOWN_EVENT
    ok = fde_crc32_ok(event) if event_type == c.FORMAT_DESCRIPTION_EVENT else crc32_ok(event)
    if not ok:
        raise ChecksumMismatchError(
            f"CRC32 mismatch in {c.event_type_name(event_type)} event", offset=offset, path=path
        )


# --- Format description -------------------------------------------------------------------

_VERSION_RE = re.compile(rb"^(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class FormatDescription:
    binlog_version: int
    server_version: str
    create_timestamp: int
    header_length: int
    post_header_lengths: bytes
    checksum_alg: int

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()

    @property
    def checksum_len(self) -> int:
        return c.CHECKSUM_LEN if self.checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32 else 0

    def post_header_len(self, event_type: int) -> int:
        if 0 < event_type <= len(self.post_header_lengths):
            return self.post_header_lengths[event_type - 1]
        return 0


def _version_has_checksum_alg(version: bytes) -> bool:
    # The checksum-algorithm byte exists from MySQL 5.6.1 and MariaDB 5.3 on.
    m = _VERSION_RE.match(version)
    if not m:
        return False
    major, minor, patch = (int(x) for x in m.groups())
    if b"mariadb" in version.lower():
        return (major, minor) >= (5, 3)
    return (major, minor, patch) >= (5, 6, 1)


def parse_format_description(event: bytes | bytearray | memoryview) -> FormatDescription:
    header = parse_header(event)
    if header.event_type != c.FORMAT_DESCRIPTION_EVENT:
        raise BinlogFormatError(f"expected a FORMAT_DESCRIPTION_EVENT, got {header.event_type}")
    body = bytes(event[c.EVENT_HEADER_LEN : header.event_size])
    if len(body) < 2 + 50 + 4 + 1 or len(event) < header.event_size:
        raise BinlogFormatError("FORMAT_DESCRIPTION_EVENT truncated")
    binlog_version = int.from_bytes(body[0:2], "little")
    raw_version = body[2:52].split(b"\0", 1)[0]
    if not _VERSION_RE.match(raw_version):
        # Every server writes "major.minor.patch..."; without it the checksum byte's presence
        # is unknowable, and guessing "absent" would skip the CRC check of a damaged FDE.
        raise BinlogFormatError(f"FORMAT_DESCRIPTION_EVENT has no server version: {raw_version!r}")
    create_timestamp = int.from_bytes(body[52:56], "little")
    header_length = body[56]
    rest = body[57:]
    if _version_has_checksum_alg(raw_version):
        if len(rest) < 5:
            raise BinlogFormatError("FORMAT_DESCRIPTION_EVENT truncated")
        # The body always ends with the algorithm byte and a 4-byte checksum field, even when
        # the algorithm is OFF.
        checksum_alg = rest[-5]
        post_header_lengths = rest[:-5]
    else:
        checksum_alg = c.BINLOG_CHECKSUM_ALG_OFF
        post_header_lengths = rest
    if checksum_alg not in (c.BINLOG_CHECKSUM_ALG_OFF, c.BINLOG_CHECKSUM_ALG_CRC32):
        raise BinlogFormatError(f"unknown binlog checksum algorithm {checksum_alg}")
    if header_length != c.EVENT_HEADER_LEN:
        raise BinlogFormatError(f"unsupported event header length {header_length}")
    return FormatDescription(
        binlog_version=binlog_version,
        server_version=raw_version.decode("ascii", "replace"),
        create_timestamp=create_timestamp,
        header_length=header_length,
        post_header_lengths=bytes(post_header_lengths),
        checksum_alg=checksum_alg,
    )


# --- Rotate ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rotate:
    position: int
    next_file: str
    #: A fake Rotate is sent by the server at the start of a dump (and when it moves to the next
    #: file on its own); it is not in the upstream file and is never relayed.
    fake: bool


def parse_rotate(event: bytes | bytearray | memoryview, checksum_len: int) -> Rotate:
    header = parse_header(event)
    end = header.event_size - checksum_len
    if end < c.EVENT_HEADER_LEN + 8 or len(event) < header.event_size:
        raise BinlogFormatError("ROTATE_EVENT truncated")
    position = int.from_bytes(event[c.EVENT_HEADER_LEN : c.EVENT_HEADER_LEN + 8], "little")
    name = bytes(event[c.EVENT_HEADER_LEN + 8 : end]).decode("utf-8", "replace")
    fake = header.timestamp == 0 or header.log_pos == 0 or header.is_artificial
    return Rotate(position=position, next_file=name, fake=fake)


def parse_rotate_lenient(event: bytes | bytearray | memoryview) -> Rotate:
    """Parse a Rotate whose checksum presence is unknown (the fake Rotate precedes the FDE).

    A fake Rotate from a CRC32 server carries a checksum; the name never contains bytes that
    would make a CRC32 of the rest match by chance, so a matching CRC means "has a checksum".
    """
    return parse_rotate(event, c.CHECKSUM_LEN if crc32_ok(event) else 0)


# --- Query -----------------------------------------------------------------------------------

_QUERY_POST_HEADER = 13  # thread_id 4, exec_time 4, db_len 1, error_code 2, status_vars_len 2
# Execute_load_query adds file_id 4, fn_pos_start 4, fn_pos_end 4, dup_handling 1.
_EXECUTE_LOAD_QUERY_EXTRA = 13


def query_text_prefix(event: bytes | bytearray | memoryview, checksum_len: int,
                      limit: int = 32) -> bytes:
    """The first ``limit`` bytes of a Query event's statement (enough to tell BEGIN/COMMIT)."""
    size = len(event) - checksum_len
    base = c.EVENT_HEADER_LEN
    if size < base + _QUERY_POST_HEADER:
        raise BinlogFormatError("QUERY_EVENT truncated")
    post_header = _QUERY_POST_HEADER
    if event[4] == c.EXECUTE_LOAD_QUERY_EVENT:
        post_header += _EXECUTE_LOAD_QUERY_EXTRA
    db_len = event[base + 8]
    status_len = int.from_bytes(event[base + 11 : base + 13], "little")
    start = base + post_header + status_len + db_len + 1
    if start > size:
        raise BinlogFormatError("QUERY_EVENT truncated")
    return bytes(event[start : min(size, start + limit)])


# --- GTIDs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MariaGtidEvent:
    domain_id: int
    server_id: int
    seq_no: int
    flags: int

    @property
    def standalone(self) -> bool:
        return bool(self.flags & c.FL_STANDALONE)


def parse_maria_gtid(event: bytes | bytearray | memoryview) -> MariaGtidEvent:
    if len(event) < c.EVENT_HEADER_LEN + 13:
        raise BinlogFormatError("GTID_EVENT truncated")
    seq_no, domain_id, flags = struct.unpack_from("<QIB", event, c.EVENT_HEADER_LEN)
    server_id = int.from_bytes(event[5:9], "little")
    return MariaGtidEvent(domain_id=domain_id, server_id=server_id, seq_no=seq_no, flags=flags)


def parse_maria_gtid_list(event: bytes | bytearray | memoryview,
                          checksum_len: int) -> list[tuple[int, int, int]]:
    """(domain_id, server_id, seq_no) triples of a MariaDB GTID_LIST event."""
    base = c.EVENT_HEADER_LEN
    end = len(event) - checksum_len
    if end < base + 4:
        raise BinlogFormatError("GTID_LIST_EVENT truncated")
    count = int.from_bytes(event[base : base + 4], "little") & 0x0FFFFFFF
    if base + 4 + 16 * count > end:
        raise BinlogFormatError("GTID_LIST_EVENT truncated")
    return [struct.unpack_from("<IIQ", event, base + 4 + 16 * i) for i in range(count)]


@dataclass(frozen=True, slots=True)
class MysqlGtidEvent:
    uuid: str
    gno: int
    tag: str = ""


def parse_mysql_gtid(event: bytes | bytearray | memoryview) -> MysqlGtidEvent:
    """GTID_LOG_EVENT (untagged): commit flag u8, source uuid 16 bytes, gno i64."""
    base = c.EVENT_HEADER_LEN
    if len(event) < base + 25:
        raise BinlogFormatError("GTID_LOG_EVENT truncated")
    uuid = uuid_text(event[base + 1 : base + 17])
    gno = int.from_bytes(event[base + 17 : base + 25], "little", signed=True)
    if not 1 <= gno <= MAX_GNO:
        raise BinlogFormatError(f"GTID_LOG_EVENT has transaction number {gno} out of range")
    return MysqlGtidEvent(uuid=uuid, gno=gno)
