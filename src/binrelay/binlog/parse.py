"""Bytes to events: the one parser of event headers and bodies (pure, no I/O).

``parse(event, context)`` turns the bytes of one whole event (header, body, checksum as in
the file) into the event of :mod:`binrelay.binlog.events` (go-mysql's ``Parse`` is the
model); rows and TABLE_MAP events come back as ``OtherEvent`` here, as reading them needs
table schemas (:mod:`binrelay.rows` reads them, with these same body parsers for the rest).

A :class:`Context` is what a body's layout depends on, learnt from the FORMAT_DESCRIPTION in
force: post-header lengths, checksum length, flavour.  The body parsers (``BODY_PARSERS``,
one per event type) take ``(context, header, event, end)``, ``end`` being where the body
stops (before the checksum); a body that does not parse raises :class:`Corrupt` or whatever
the bytes cause, which the entry points turn into ``BinlogFormatError`` naming the event.

The relay's hot path needs a few fields of a few events without the rest:
``parse_rotate``, ``parse_maria_gtid``, ``parse_maria_gtid_list``, ``parse_mysql_gtid`` and
``query_text_prefix`` use the same body parsers on events that may arrive cut short or before
any FORMAT_DESCRIPTION.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from typing import Any

from binrelay.binlog import compression
from binrelay.binlog import constants as c
from binrelay.binlog._fast import fast_new
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import MARIA_GTID, uuid_text
from binrelay.binlog.events import (
    AnnotateRowsEvent,
    BinlogCheckpointEvent,
    BinlogEvent,
    DeleteFileEvent,
    EventHeader,
    ExecuteLoadQueryEvent,
    FormatDescription,
    FormatDescriptionEvent,
    IntvarEvent,
    LoadBlockEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    MysqlGtidEvent,
    OtherEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RandEvent,
    RotateEvent,
    RowsQueryEvent,
    StopEvent,
    TransactionPayloadEvent,
    UserVarEvent,
    XidEvent,
)
from binrelay.binlog.statement import parse_intvar, parse_rand, parse_user_var
from binrelay.binlog.tagged import parse_tagged_gtid
from binrelay.errors import (
    BinlogFormatError,
    ChecksumMismatchError,
    GtidError,
    IncompleteEventError,
)
from binrelay.gtid import MAX_GNO, MysqlGtidSet

_HEADER_LEN = c.EVENT_HEADER_LEN

# Hot constructors (see _fast.py): every field positional, in declaration order.
new_header = fast_new(EventHeader)
_new_query = fast_new(QueryEvent)
_new_xid = fast_new(XidEvent)
_new_maria_gtid = fast_new(MariadbGtidEvent)
_new_annotate = fast_new(AnnotateRowsEvent)
_new_rows_query = fast_new(RowsQueryEvent)
_new_other = fast_new(OtherEvent)


class Corrupt(Exception):
    """A body that does not parse; the entry points add the event type and position."""


# --- header and checksums --------------------------------------------------------------------


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


# --- the context a body is read in -----------------------------------------------------------

#: Post-header lengths to assume before any FORMAT_DESCRIPTION (binlog v4 defaults); an FDE
#: that announces others is obeyed.
DEFAULT_POST_HEADER: dict[int, int] = {
    c.QUERY_EVENT: 13, c.QUERY_COMPRESSED_EVENT: 13, c.EXECUTE_LOAD_QUERY_EVENT: 26,
    c.TABLE_MAP_EVENT: 8, c.ROTATE_EVENT: 8,
    # Empty in every server so far.
    c.INTVAR_EVENT: 0, c.RAND_EVENT: 0, c.USER_VAR_EVENT: 0,
}


class Context:
    """What reading a body depends on: the FORMAT_DESCRIPTION in force (None before one),
    its post-header lengths for the types in ``post_header``, its flavour and checksum
    length.  Mutable: a reader moves it on at each FDE with :meth:`use`."""

    __slots__ = ("checksum_len", "fde", "mariadb", "post_header")

    def __init__(self, fde: FormatDescription | None = None,
                 defaults: dict[int, int] | None = None) -> None:
        self.post_header = dict(DEFAULT_POST_HEADER if defaults is None else defaults)
        self.fde: FormatDescription | None = None
        self.mariadb = False
        self.checksum_len = 0
        if fde is not None:
            self.use(fde)

    def use(self, fde: FormatDescription) -> None:
        self.fde = fde
        self.mariadb = fde.is_mariadb
        self.checksum_len = fde.checksum_len
        for etype in self.post_header:
            n = fde.post_header_len(etype)
            if n:
                self.post_header[etype] = n


# --- bodies ----------------------------------------------------------------------------------


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _rotate(ctx: Context, header: EventHeader, event: bytes, end: int) -> RotateEvent:
    if end < _HEADER_LEN + 8:
        raise Corrupt("truncated")
    position = int.from_bytes(event[_HEADER_LEN:_HEADER_LEN + 8], "little")
    name = _text(event[_HEADER_LEN + 8:end])
    # A fake Rotate is sent by the server at the start of a dump (and when it moves to the
    # next file on its own); it is not in the upstream file and is never relayed.
    fake = header.timestamp == 0 or header.log_pos == 0 or header.is_artificial
    return RotateEvent(header, name, position, fake)


# Query post-header: thread_id 4, exec_time 4, db_len 1, error_code 2, status_vars_len 2;
# Execute_load_query adds file_id 4, fn_pos_start 4, fn_pos_end 4, dup_handling 1.
_QUERY_POST_HEADER = 13


def _text_start(event: bytes | bytearray | memoryview, end: int, post: int) -> int:
    """Where a Query event's statement starts (post-header ``post`` bytes long)."""
    if end < _HEADER_LEN + _QUERY_POST_HEADER or post < _QUERY_POST_HEADER:
        raise Corrupt("truncated")
    db_len = event[_HEADER_LEN + 8]
    status_len = event[_HEADER_LEN + 11] | event[_HEADER_LEN + 12] << 8
    start = _HEADER_LEN + post + status_len + db_len + 1
    if start > end:
        raise Corrupt("truncated")
    return start


def _query_text_start(ctx: Context, header: EventHeader, event: bytes, end: int) -> int:
    return _text_start(event, end, ctx.post_header.get(header.event_type, _QUERY_POST_HEADER))


def _query(ctx: Context, header: EventHeader, event: bytes, end: int) -> QueryEvent:
    text = _query_text_start(ctx, header, event, end)
    thread_id, exec_time, db_len, error_code, status_len = struct.unpack_from(
        "<IIBHH", event, _HEADER_LEN)
    schema = _text(event[text - db_len - 1:text - 1])
    raw = event[text:end]
    compressed = header.event_type == c.QUERY_COMPRESSED_EVENT
    if compressed:
        raw = compression.maria_uncompress(raw)
    status_start = text - db_len - 1 - status_len
    # The status variables stay raw: parsing them is QueryEvent.status's job, for the few
    # readers that replay statements (a MySQL BEGIN is a Query event per transaction).
    return _new_query(header, schema, _text(raw), thread_id, exec_time, error_code,
                      compressed, raw, event[status_start:status_start + status_len],
                      ctx.mariadb, None)


def _execute_load_query(ctx: Context, header: EventHeader, event: bytes,
                        end: int) -> ExecuteLoadQueryEvent:
    query = _query(ctx, header, event, end)
    if end < _HEADER_LEN + _QUERY_POST_HEADER + 13:
        raise Corrupt("truncated")
    file_id, fn_start, fn_end, dup = struct.unpack_from(
        "<IIIB", event, _HEADER_LEN + _QUERY_POST_HEADER)
    if not fn_start <= fn_end <= len(query.raw_query) or dup > 2:
        raise Corrupt(f"file name at {fn_start}..{fn_end} of a {len(query.raw_query)}-byte"
                      f" statement, duplicate handling {dup}")
    return ExecuteLoadQueryEvent(
        query.header, query.schema, query.query, query.thread_id, query.exec_time,
        query.error_code, query.compressed, query.raw_query, query.status_vars, query.mariadb,
        None, file_id, fn_start, fn_end, dup)


def _load_block(ctx: Context, header: EventHeader, event: bytes, end: int) -> LoadBlockEvent:
    if end < _HEADER_LEN + 4:
        raise Corrupt("truncated")
    return LoadBlockEvent(header, int.from_bytes(event[_HEADER_LEN:_HEADER_LEN + 4], "little"),
                          bytes(event[_HEADER_LEN + 4:end]),
                          header.event_type == c.BEGIN_LOAD_QUERY_EVENT)


def _delete_file(ctx: Context, header: EventHeader, event: bytes, end: int) -> DeleteFileEvent:
    if end < _HEADER_LEN + 4:
        raise Corrupt("truncated")
    return DeleteFileEvent(header, int.from_bytes(event[_HEADER_LEN:_HEADER_LEN + 4], "little"))


def _xid(ctx: Context, header: EventHeader, event: bytes, end: int) -> XidEvent:
    if end < _HEADER_LEN + 8:
        raise Corrupt("truncated")
    return _new_xid(header, int.from_bytes(event[_HEADER_LEN:_HEADER_LEN + 8], "little"))


def _statement_body(ctx: Context, header: EventHeader, event: bytes, end: int) -> bytes:
    start = _HEADER_LEN + ctx.post_header.get(header.event_type, 0)
    if start > end:
        raise Corrupt("truncated")
    return event[start:end]


def _intvar(ctx: Context, header: EventHeader, event: bytes, end: int) -> IntvarEvent:
    kind, value = parse_intvar(_statement_body(ctx, header, event, end))
    return IntvarEvent(header, kind, value)


def _rand(ctx: Context, header: EventHeader, event: bytes, end: int) -> RandEvent:
    seed1, seed2 = parse_rand(_statement_body(ctx, header, event, end))
    return RandEvent(header, seed1, seed2)


def _user_var(ctx: Context, header: EventHeader, event: bytes, end: int) -> UserVarEvent:
    return UserVarEvent(header, parse_user_var(_statement_body(ctx, header, event, end)))


def _maria_gtid(ctx: Context, header: EventHeader, event: bytes, end: int) -> MariadbGtidEvent:
    if end < _HEADER_LEN + 13:
        raise Corrupt("truncated")
    seq_no, domain_id, flags = MARIA_GTID.unpack_from(event, _HEADER_LEN)
    commit_id = None
    if flags & c.FL_GROUP_COMMIT_ID:
        if end < _HEADER_LEN + 21:
            raise Corrupt("truncated")
        commit_id = int.from_bytes(event[_HEADER_LEN + 13:_HEADER_LEN + 21], "little")
    return _new_maria_gtid(header, domain_id, header.server_id, seq_no, flags, commit_id)


def _maria_gtid_list(ctx: Context, header: EventHeader, event: bytes,
                     end: int) -> MariadbGtidListEvent:
    base = _HEADER_LEN
    if end < base + 4:
        raise Corrupt("truncated")
    count = int.from_bytes(event[base:base + 4], "little") & 0x0FFFFFFF  # top bits: flags
    if base + 4 + 16 * count > end:
        raise Corrupt("truncated")
    gtids = tuple(struct.unpack_from("<IIQ", event, base + 4 + 16 * i) for i in range(count))
    return MariadbGtidListEvent(header, gtids)


def _checkpoint(ctx: Context, header: EventHeader, event: bytes,
                end: int) -> BinlogCheckpointEvent:
    base = _HEADER_LEN
    if end < base + 4:
        raise Corrupt("truncated")
    n = int.from_bytes(event[base:base + 4], "little")
    if base + 4 + n > end:
        raise Corrupt("truncated")
    return BinlogCheckpointEvent(header, _text(event[base + 4:base + 4 + n]))


def _annotate(ctx: Context, header: EventHeader, event: bytes, end: int) -> AnnotateRowsEvent:
    return _new_annotate(header, _text(event[_HEADER_LEN:end]))


def _rows_query(ctx: Context, header: EventHeader, event: bytes, end: int) -> RowsQueryEvent:
    # One length byte (the length modulo 256: useless for long statements), then the text.
    if end < _HEADER_LEN + 1:
        raise Corrupt("truncated")
    return _new_rows_query(header, _text(event[_HEADER_LEN + 1:end]))


def _mysql_gno(event: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    """The transaction number of the untagged MySQL GTID_LOG_EVENT at ``event[pos:end]``."""
    base = pos + _HEADER_LEN
    if end < base + 25:
        raise Corrupt("truncated")
    gno = int.from_bytes(event[base + 17:base + 25], "little", signed=True)
    if not 1 <= gno <= MAX_GNO:
        raise Corrupt(f"transaction number {gno} out of range")
    return gno


def _mysql_gtid(ctx: Context, header: EventHeader, event: bytes, end: int) -> MysqlGtidEvent:
    """GTID_LOG_EVENT / ANONYMOUS_GTID_LOG_EVENT: commit flag u8, source uuid 16 bytes,
    gno i64, then (5.7+) the logical clock."""
    base = _HEADER_LEN
    anonymous = header.event_type == c.ANONYMOUS_GTID_LOG_EVENT
    if anonymous:
        if end < base + 25:
            raise Corrupt("truncated")
        gno = int.from_bytes(event[base + 17:base + 25], "little", signed=True)
    else:
        gno = _mysql_gno(event, 0, end)
    flags = event[base]
    uuid = uuid_text(event[base + 1:base + 17])
    last_committed = sequence_number = None
    # Logical clock: type code 2, last_committed, sequence_number.
    if end >= base + 42 and event[base + 25] == 2:
        last_committed, sequence_number = struct.unpack_from("<qq", event, base + 26)
    return MysqlGtidEvent(header, uuid, gno, "", anonymous, last_committed, sequence_number,
                          flags)


def _mysql_gtid_tagged(ctx: Context, header: EventHeader, event: bytes,
                       end: int) -> MysqlGtidEvent:
    fields = parse_tagged_gtid(event[_HEADER_LEN:end])
    return MysqlGtidEvent(header, fields["uuid"], fields["gno"], fields.get("tag", ""),
                          False, fields.get("last_committed"),
                          fields.get("sequence_number"), fields.get("flags", 0))


def _previous_gtid_set(ctx: Context, header: EventHeader, event: bytes,
                       end: int) -> MysqlGtidSet:
    try:
        return MysqlGtidSet.decode(bytes(event[_HEADER_LEN:end]))
    except GtidError as exc:
        raise Corrupt(exc.message) from exc


def _previous_gtids(ctx: Context, header: EventHeader, event: bytes,
                    end: int) -> PreviousGtidsEvent:
    return PreviousGtidsEvent(header, str(_previous_gtid_set(ctx, header, event, end)))


def _stop(ctx: Context, header: EventHeader, event: bytes, end: int) -> StopEvent:
    return StopEvent(header)


def _payload(ctx: Context, header: EventHeader, event: bytes,
             end: int) -> TransactionPayloadEvent:
    """MySQL's compressed transaction; ``events()`` gives the raw events inside (no
    checksums; the payload's positions).  The rows decoder reads them as events."""
    base = _HEADER_LEN + ctx.post_header.get(c.TRANSACTION_PAYLOAD_EVENT, 0)
    try:
        fields, pos = compression.parse_payload_header(event, base, end)
    except ValueError as exc:
        raise Corrupt(str(exc)) from exc
    ctype = fields.get(compression.OTW_PAYLOAD_COMPRESSION_TYPE_FIELD,
                       compression.COMPRESSION_NONE)
    size = fields.get(compression.OTW_PAYLOAD_SIZE_FIELD, end - pos)
    usize = fields.get(compression.OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD, 0)
    if pos + size > end:
        raise Corrupt(f"payload of {size} bytes truncated")
    payload = event[pos:pos + size]
    return TransactionPayloadEvent(
        header, ctype, size, usize,
        lambda: compression.iter_payload_events(payload, ctype, usize))


def other(ctx: Context, header: EventHeader, event: bytes, end: int) -> OtherEvent:
    """Any event not read here: header and raw body, passed through."""
    return _new_other(header, event[_HEADER_LEN:end])


BodyParser = Callable[[Context, EventHeader, bytes, int], Any]

BODY_PARSERS: dict[int, BodyParser] = {
    c.ROTATE_EVENT: _rotate,
    c.QUERY_EVENT: _query,
    c.QUERY_COMPRESSED_EVENT: _query,
    c.EXECUTE_LOAD_QUERY_EVENT: _execute_load_query,
    c.BEGIN_LOAD_QUERY_EVENT: _load_block,
    c.APPEND_BLOCK_EVENT: _load_block,
    c.DELETE_FILE_EVENT: _delete_file,
    c.XID_EVENT: _xid,
    c.INTVAR_EVENT: _intvar,
    c.RAND_EVENT: _rand,
    c.USER_VAR_EVENT: _user_var,
    c.GTID_EVENT: _maria_gtid,
    c.GTID_LIST_EVENT: _maria_gtid_list,
    c.BINLOG_CHECKPOINT_EVENT: _checkpoint,
    c.ANNOTATE_ROWS_EVENT: _annotate,
    c.ROWS_QUERY_LOG_EVENT: _rows_query,
    c.GTID_LOG_EVENT: _mysql_gtid,
    c.ANONYMOUS_GTID_LOG_EVENT: _mysql_gtid,
    c.GTID_TAGGED_LOG_EVENT: _mysql_gtid_tagged,
    c.PREVIOUS_GTIDS_LOG_EVENT: _previous_gtids,
    c.TRANSACTION_PAYLOAD_EVENT: _payload,
    c.STOP_EVENT: _stop,
}


def format_error(etype: int, message: str, *, path: str | None = None,
                 offset: int | None = None) -> BinlogFormatError:
    return BinlogFormatError(f"{c.event_type_name(etype)}: {message}", path=path,
                             offset=offset)


# --- entry points ----------------------------------------------------------------------------


def parse(event: bytes, context: Context | None = None, *, verify_checksums: bool = True,
          path: str | None = None, offset: int | None = None) -> BinlogEvent:
    """One whole event (header, body, checksum as in the file) as its event dataclass.

    ``context``: the FORMAT_DESCRIPTION in force (a fresh one when None: before any FDE a
    matching CRC32 means the event has one); an FDE moves it on.  Rows and TABLE_MAP events
    are ``OtherEvent`` here.  Raises ``BinlogFormatError`` (``ChecksumMismatchError``,
    ``IncompleteEventError``) naming the event, ``path`` and ``offset``."""
    ctx = Context() if context is None else context
    event = bytes(event)
    header = parse_header(event, 0)
    if header.event_size > len(event):
        raise IncompleteEventError(f"event of {header.event_size} bytes truncated to"
                                   f" {len(event)}", path=path, offset=offset)
    event = event[:header.event_size]
    etype = header.event_type
    if etype == c.FORMAT_DESCRIPTION_EVENT:
        fde = parse_format_description(event)
        if verify_checksums:
            verify_checksum(event, fde.checksum_alg, offset=offset, path=path)
        ctx.use(fde)
        return FormatDescriptionEvent(header, fde)
    checksum_len = ctx.checksum_len if ctx.fde is not None else (
        c.CHECKSUM_LEN if crc32_ok(event) else 0)
    if checksum_len and verify_checksums and ctx.fde is not None and not crc32_ok(event):
        raise ChecksumMismatchError(f"CRC32 mismatch in {c.event_type_name(etype)} event",
                                    offset=offset, path=path)
    end = header.event_size - checksum_len
    if end < _HEADER_LEN:
        raise format_error(etype, "event shorter than its checksum", path=path, offset=offset)
    try:
        return BODY_PARSERS.get(etype, other)(ctx, header, event, end)
    except BinlogFormatError:
        raise
    except Exception as exc:  # Corrupt, struct.error, IndexError ...: what bad bytes cause
        raise format_error(etype, str(exc) or type(exc).__name__, path=path,
                           offset=offset) from exc


def _field(parser: BodyParser, event: bytes | bytearray | memoryview, checksum_len: int,
           ctx: Context | None = None) -> Any:
    """A body parser on an event that may be cut short (the relay's field readers)."""
    data = bytes(event)
    if len(data) < _HEADER_LEN:
        raise BinlogFormatError(f"{c.event_type_name(data[4] if len(data) > 4 else 0)}:"
                                " truncated")
    header = new_header(*_HEADER.unpack_from(data))
    try:
        return parser(ctx or _PLAIN, header, data, len(data) - checksum_len)
    except BinlogFormatError:
        raise
    except Exception as exc:
        raise format_error(header.event_type, str(exc) or type(exc).__name__) from exc


_PLAIN = Context()


def parse_rotate(event: bytes | bytearray | memoryview, checksum_len: int) -> RotateEvent:
    header = parse_header(event)
    if len(event) < header.event_size:
        raise format_error(c.ROTATE_EVENT, "truncated")
    return _field(_rotate, event[:header.event_size], checksum_len)


def parse_rotate_lenient(event: bytes | bytearray | memoryview) -> RotateEvent:
    """A Rotate whose checksum presence is unknown (the fake Rotate precedes the FDE).

    A fake Rotate from a CRC32 server carries a checksum; the name never contains bytes that
    would make a CRC32 of the rest match by chance, so a matching CRC means "has a checksum".
    """
    return parse_rotate(event, c.CHECKSUM_LEN if crc32_ok(event) else 0)


def query_text_prefix(event: bytes | bytearray | memoryview, checksum_len: int,
                      limit: int = 32) -> bytes:
    """The first ``limit`` bytes of a Query event's statement (enough to tell BEGIN/COMMIT).
    On the relay's hot path (every MySQL BEGIN): reads the buffer as it is."""
    end = len(event) - checksum_len
    etype = event[4] if len(event) > 4 else c.QUERY_EVENT
    try:
        start = _text_start(event, end, _PLAIN.post_header.get(etype, _QUERY_POST_HEADER))
    except Corrupt as exc:
        raise format_error(etype, str(exc)) from None
    return bytes(event[start:min(end, start + limit)])


def parse_maria_gtid(event: bytes | bytearray | memoryview) -> MariadbGtidEvent:
    """Sequence number, domain, server and flags of a MariaDB GTID_EVENT (its checksum, if
    any, is not needed)."""
    return _field(_maria_gtid, event, 0)


def parse_maria_gtid_list(event: bytes | bytearray | memoryview,
                          checksum_len: int) -> list[tuple[int, int, int]]:
    """(domain_id, server_id, seq_no) triples of a MariaDB GTID_LIST event."""
    return list(_field(_maria_gtid_list, event, checksum_len).gtids)


def maria_gtid_text(buf: bytes | bytearray | memoryview, pos: int = 0) -> str:
    """``domain-server-seq`` of the MariaDB GTID_EVENT at ``buf[pos:]``, its 13 body bytes
    known to be there, without an event object (the scanners' hot paths)."""
    seq, domain, _flags = MARIA_GTID.unpack_from(buf, pos + _HEADER_LEN)
    return f"{domain}-{int.from_bytes(buf[pos + 5:pos + 9], 'little')}-{seq}"


def mysql_gtid_text(buf: bytes | bytearray | memoryview, pos: int = 0) -> str:
    """``uuid:gno`` of the untagged MySQL GTID_LOG_EVENT at ``buf[pos:]``, its 25 body bytes
    known to be there, without an event object."""
    base = pos + _HEADER_LEN
    gno = int.from_bytes(buf[base + 17:base + 25], "little", signed=True)
    return f"{uuid_text(buf[base + 1:base + 17])}:{gno}"


def checked_mysql_gno(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    """:func:`_mysql_gno` for readers of buffers (the scanner): a BinlogFormatError."""
    try:
        return _mysql_gno(buf, pos, end)
    except Corrupt as exc:
        raise format_error(c.GTID_LOG_EVENT, str(exc)) from None


def parse_previous_gtids(event: bytes | bytearray | memoryview,
                         checksum_len: int) -> MysqlGtidSet:
    """The GTID set a MySQL PREVIOUS_GTIDS_LOG_EVENT holds."""
    return _field(_previous_gtid_set, event, checksum_len)


def parse_mysql_gtid(event: bytes | bytearray | memoryview) -> MysqlGtidEvent:
    """A MySQL GTID_LOG_EVENT (untagged) as its event."""
    return _field(_mysql_gtid, event, 0)


def mysql_gtid_fields(event: bytes | bytearray | memoryview) -> tuple[str, int]:
    """``(uuid, gno)`` of an untagged MySQL GTID_LOG_EVENT, its number checked, without an
    event object (the relay's hot path, once per transaction)."""
    try:
        gno = _mysql_gno(event, 0, len(event))
    except Corrupt as exc:
        raise format_error(c.GTID_LOG_EVENT, str(exc)) from None
    return uuid_text(event[_HEADER_LEN + 1:_HEADER_LEN + 17]), gno
