"""The event-level API: raw events in (as relay files hold them), typed events out.

:class:`EventDecoder` keeps the state decoding needs between events — the current
FORMAT_DESCRIPTION (checksum length, post-header lengths, flavour) and the table maps of the
current statement — and nothing else.  It never opens files or sockets; feeding it the bytes
of each whole event, in order, is the caller's job (see :mod:`binrelay.rows.reader`).

Table maps: every statement's row events are preceded by TABLE_MAP events for the tables
they touch, and a table id means that table only until the statement ends (ids are reused for
other tables later).  So the first TABLE_MAP after a statement end (STMT_END_F) starts a fresh
id -> table mapping.  Parsed table maps are cached by their bytes, which also keeps their
compiled row decoders: a busy table's map is parsed and compiled once.

Any problem in the input — truncated or corrupt events, bad checksums, row events without a
table map — raises :class:`~binrelay.errors.BinlogFormatError` with the offset (and path, if
given); no other exception escapes, whatever the bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import LenencError, read_lenenc, uuid_text
from binrelay.binlog.events import (
    EventHeader,
    FormatDescription,
    crc32_ok,
    parse_format_description,
    verify_checksum,
)
from binrelay.binlog.statement import parse_intvar, parse_rand, parse_user_var
from binrelay.errors import BinlogFormatError, ChecksumMismatchError, IncompleteEventError
from binrelay.gtid import MysqlGtidSet
from binrelay.rows import compression
from binrelay.rows._fast import fast_new
from binrelay.rows.compiler import row_decoder
from binrelay.rows.events import (
    DELETE,
    INSERT,
    STMT_END_F,
    UPDATE,
    AnnotateRowsEvent,
    BinlogCheckpointEvent,
    Event,
    FormatDescriptionEvent,
    IntvarEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    MysqlGtidEvent,
    OtherEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RandEvent,
    RotateEvent,
    RowsEvent,
    RowsQueryEvent,
    StopEvent,
    TableMapEvent,
    TransactionPayloadEvent,
    UserVarEvent,
    XidEvent,
)
from binrelay.rows.tablemap import TableMap, parse_table_map
from binrelay.rows.tagged import parse_tagged_gtid

#: zlib.crc32 of data followed by its own little-endian CRC32 is always this constant, so a
#: whole event (checksum included) is checked by one call, without slicing.
CRC32_RESIDUE = 0x2144DF1C
_crc32 = zlib.crc32
_HEADER_LEN = c.EVENT_HEADER_LEN

# (operation, MySQL v2 layout, MariaDB compressed, partial JSON update) per rows event type.
_ROWS_TYPES: dict[int, tuple[str, bool, bool, bool]] = {
    c.WRITE_ROWS_EVENT_V1: (INSERT, False, False, False),
    c.UPDATE_ROWS_EVENT_V1: (UPDATE, False, False, False),
    c.DELETE_ROWS_EVENT_V1: (DELETE, False, False, False),
    c.WRITE_ROWS_EVENT: (INSERT, True, False, False),
    c.UPDATE_ROWS_EVENT: (UPDATE, True, False, False),
    c.DELETE_ROWS_EVENT: (DELETE, True, False, False),
    c.PARTIAL_UPDATE_ROWS_EVENT: (UPDATE, True, False, True),
    c.WRITE_ROWS_COMPRESSED_EVENT_V1: (INSERT, False, True, False),
    c.UPDATE_ROWS_COMPRESSED_EVENT_V1: (UPDATE, False, True, False),
    c.DELETE_ROWS_COMPRESSED_EVENT_V1: (DELETE, False, True, False),
    c.WRITE_ROWS_COMPRESSED_EVENT: (INSERT, True, True, False),
    c.UPDATE_ROWS_COMPRESSED_EVENT: (UPDATE, True, True, False),
    c.DELETE_ROWS_COMPRESSED_EVENT: (DELETE, True, True, False),
}

# Post-header lengths to assume before any FORMAT_DESCRIPTION (binlog v4 defaults).
_DEFAULT_POST_HEADER = {
    c.QUERY_EVENT: 13, c.QUERY_COMPRESSED_EVENT: 13, c.EXECUTE_LOAD_QUERY_EVENT: 26,
    c.TABLE_MAP_EVENT: 8, c.ROTATE_EVENT: 8,
    # Empty in every server so far; an FDE that announces one is obeyed.
    c.INTVAR_EVENT: 0, c.RAND_EVENT: 0, c.USER_VAR_EVENT: 0,
    **{t: (10 if v2 else 8) for t, (_, v2, _, _) in _ROWS_TYPES.items()},
}

_TABLE_CACHE_SIZE = 1024

# Hot constructors (see _fast.py): every field positional, in declaration order.
_new_header = fast_new(EventHeader)
_new_query = fast_new(QueryEvent)
_new_xid = fast_new(XidEvent)
_new_maria_gtid = fast_new(MariadbGtidEvent)
_new_annotate = fast_new(AnnotateRowsEvent)
_new_rows_query = fast_new(RowsQueryEvent)
_new_table_map = fast_new(TableMapEvent)
_new_rows = fast_new(RowsEvent)
_new_other = fast_new(OtherEvent)


class _Corrupt(Exception):
    """Internal: a body that does not parse; ``decode`` adds the event type and position."""


def _net_length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_lenenc(data, pos, end)
    except LenencError as exc:
        raise _Corrupt("length-encoded integer truncated" if exc.first is None
                       else "bad length-encoded integer") from None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class EventDecoder:
    """Feed whole events in file order; get typed events (see :mod:`binrelay.rows.events`).

    ``verify_checksums``: check each event's CRC32 when the FDE says the file has them.
    ``path``: named in error messages.  ``fde``: the FORMAT_DESCRIPTION in force, for a
    decoder that starts after a file's first event (a Spark partition starting mid-file).

    Not thread-safe: one decoder per ordered stream of events.
    """

    def __init__(self, *, verify_checksums: bool = True, path: str | None = None,
                 fde: FormatDescription | None = None) -> None:
        self.verify_checksums = verify_checksums
        self.path = path
        self.fde: FormatDescription | None = None
        self._checksum_len = 0
        self._post_header: dict[int, int] = dict(_DEFAULT_POST_HEADER)
        self._mariadb = False
        self._tables: dict[int, TableMap] = {}
        self._statement_ended = False
        self._cache: dict[bytes, TableMap] = {}
        self._rows_layout: dict[int, tuple[Any, ...]] = {}
        self._handlers: dict[int, Callable[[EventHeader, bytes, int], Any]] = {
            c.FORMAT_DESCRIPTION_EVENT: self._fde,
            c.ROTATE_EVENT: self._rotate,
            c.QUERY_EVENT: self._query,
            c.QUERY_COMPRESSED_EVENT: self._query,
            c.XID_EVENT: self._xid,
            c.INTVAR_EVENT: self._intvar,
            c.RAND_EVENT: self._rand,
            c.USER_VAR_EVENT: self._user_var,
            c.GTID_EVENT: self._maria_gtid,
            c.GTID_LIST_EVENT: self._maria_gtid_list,
            c.BINLOG_CHECKPOINT_EVENT: self._checkpoint,
            c.ANNOTATE_ROWS_EVENT: self._annotate,
            c.ROWS_QUERY_LOG_EVENT: self._rows_query,
            c.GTID_LOG_EVENT: self._mysql_gtid,
            c.ANONYMOUS_GTID_LOG_EVENT: self._mysql_gtid,
            c.GTID_TAGGED_LOG_EVENT: self._mysql_gtid_tagged,
            c.PREVIOUS_GTIDS_LOG_EVENT: self._previous_gtids,
            c.TABLE_MAP_EVENT: self._table_map,
            c.TRANSACTION_PAYLOAD_EVENT: self._payload,
            c.STOP_EVENT: self._stop,
            **{t: self._rows for t in _ROWS_TYPES},
        }
        if fde is not None:
            self._use_fde(fde)
        # Set while decoding one event, for error messages.
        self._offset: int | None = None

    # --- public API ------------------------------------------------------------------------

    @property
    def tables(self) -> dict[int, TableMap]:
        """The table maps of the current statement, by table id (read-only view)."""
        return dict(self._tables)

    def decode(self, event: bytes, offset: int | None = None) -> Event:
        """Decode one whole event (header, body, checksum as in the file)."""
        return self._decode(event, offset, None)

    def feed(self, event: bytes, offset: int | None = None) -> Iterator[Event]:
        """Decode one event; a TRANSACTION_PAYLOAD is followed by the events inside it."""
        ev = self._decode(event, offset, None)
        yield ev
        if isinstance(ev, TransactionPayloadEvent):
            yield from ev.events()

    # --- dispatch --------------------------------------------------------------------------

    def _decode(self, event: bytes, offset: int | None, checksum_len: int | None) -> Event:
        if type(event) is not bytes:
            event = bytes(event)
        self._offset = offset
        if len(event) < _HEADER_LEN:
            raise IncompleteEventError("event header truncated", path=self.path, offset=offset)
        header = _new_header(*_HEADER.unpack_from(event))
        size = header.event_size
        if size != len(event):
            if size > len(event):
                raise IncompleteEventError(
                    f"event of {size} bytes truncated to {len(event)}", path=self.path,
                    offset=offset)
            raise self._error(header, f"event size {size} but {len(event)} bytes given")
        etype = header.event_type
        if checksum_len is None:
            if etype == c.FORMAT_DESCRIPTION_EVENT:
                checksum_len = 0  # the FDE handler works its own checksum out
            elif self.fde is not None:
                checksum_len = self._checksum_len
                if checksum_len and self.verify_checksums and _crc32(event) != CRC32_RESIDUE:
                    raise ChecksumMismatchError(
                        f"CRC32 mismatch in {c.event_type_name(etype)} event", offset=offset,
                        path=self.path)
            else:
                # Before any FDE (a fake Rotate, or a caller that gave none): a matching CRC
                # means the event has one.
                checksum_len = c.CHECKSUM_LEN if crc32_ok(event) else 0
        end = size - checksum_len
        if end < _HEADER_LEN:
            raise self._error(header, "event shorter than its checksum")
        handler = self._handlers.get(etype, self._other)
        try:
            return handler(header, event, end)
        except BinlogFormatError:
            raise
        except Exception as exc:  # struct.error, IndexError ...: whatever corrupt bytes cause
            raise self._error(header, str(exc) or type(exc).__name__) from exc

    def _error(self, header: EventHeader, message: str) -> BinlogFormatError:
        return BinlogFormatError(f"{c.event_type_name(header.event_type)}: {message}",
                                 path=self.path, offset=self._offset)

    def _row_error(self, header: EventHeader, offset: int | None) -> Callable[
            [Exception], BinlogFormatError]:
        path = self.path

        def wrap(exc: Exception) -> BinlogFormatError:
            if isinstance(exc, BinlogFormatError):
                return exc
            return BinlogFormatError(
                f"{c.event_type_name(header.event_type)}: bad row image: "
                f"{str(exc) or type(exc).__name__}", path=path, offset=offset)

        return wrap

    def _use_fde(self, fde: FormatDescription) -> None:
        self.fde = fde
        self._checksum_len = fde.checksum_len
        self._mariadb = fde.is_mariadb
        for etype in _DEFAULT_POST_HEADER:
            n = fde.post_header_len(etype)
            if n:
                self._post_header[etype] = n
        self._rows_layout.clear()
        self._tables.clear()

    # --- handlers --------------------------------------------------------------------------

    def _fde(self, header: EventHeader, event: bytes, end: int) -> FormatDescriptionEvent:
        fde = parse_format_description(event)
        if fde.checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32 and self.verify_checksums:
            verify_checksum(event, fde.checksum_alg, offset=self._offset, path=self.path)
        self._use_fde(fde)
        return FormatDescriptionEvent(header, fde)

    def _rotate(self, header: EventHeader, event: bytes, end: int) -> RotateEvent:
        if end < _HEADER_LEN + 8:
            raise _Corrupt("truncated")
        position = int.from_bytes(event[_HEADER_LEN:_HEADER_LEN + 8], "little")
        name = _text(event[_HEADER_LEN + 8:end])
        fake = header.timestamp == 0 or header.log_pos == 0 or header.is_artificial
        return RotateEvent(header, name, position, fake)

    def _query(self, header: EventHeader, event: bytes, end: int) -> QueryEvent:
        base = _HEADER_LEN
        post = self._post_header.get(header.event_type, 13)
        if end < base + 13 or post < 13:
            raise _Corrupt("truncated")
        thread_id, exec_time, db_len, error_code, status_len = struct.unpack_from(
            "<IIBHH", event, base)
        start = base + post + status_len
        if start + db_len + 1 > end:
            raise _Corrupt("truncated")
        schema = _text(event[start:start + db_len])
        raw = event[start + db_len + 1:end]
        compressed = header.event_type == c.QUERY_COMPRESSED_EVENT
        if compressed:
            raw = compression.maria_uncompress(raw)
        # The status variables stay raw: parsing them is QueryEvent.status's job, for the
        # few readers that replay statements (a MySQL BEGIN is a Query event per transaction).
        return _new_query(header, schema, _text(raw), thread_id, exec_time, error_code,
                          compressed, raw, event[start - status_len:start], self._mariadb,
                          None)

    def _xid(self, header: EventHeader, event: bytes, end: int) -> XidEvent:
        if end < _HEADER_LEN + 8:
            raise _Corrupt("truncated")
        return _new_xid(header, int.from_bytes(event[_HEADER_LEN:_HEADER_LEN + 8], "little"))

    def _statement_body(self, header: EventHeader, event: bytes, end: int) -> bytes:
        start = _HEADER_LEN + self._post_header.get(header.event_type, 0)
        if start > end:
            raise _Corrupt("truncated")
        return event[start:end]

    def _intvar(self, header: EventHeader, event: bytes, end: int) -> IntvarEvent:
        kind, value = parse_intvar(self._statement_body(header, event, end))
        return IntvarEvent(header, kind, value)

    def _rand(self, header: EventHeader, event: bytes, end: int) -> RandEvent:
        seed1, seed2 = parse_rand(self._statement_body(header, event, end))
        return RandEvent(header, seed1, seed2)

    def _user_var(self, header: EventHeader, event: bytes, end: int) -> UserVarEvent:
        return UserVarEvent(header, parse_user_var(self._statement_body(header, event, end)))

    def _maria_gtid(self, header: EventHeader, event: bytes, end: int) -> MariadbGtidEvent:
        if end < _HEADER_LEN + 13:
            raise _Corrupt("truncated")
        seq_no, domain_id, flags = struct.unpack_from("<QIB", event, _HEADER_LEN)
        commit_id = None
        if flags & c.FL_GROUP_COMMIT_ID:
            if end < _HEADER_LEN + 21:
                raise _Corrupt("truncated")
            commit_id = int.from_bytes(event[_HEADER_LEN + 13:_HEADER_LEN + 21], "little")
        return _new_maria_gtid(header, domain_id, header.server_id, seq_no, flags, commit_id)

    def _maria_gtid_list(self, header: EventHeader, event: bytes,
                         end: int) -> MariadbGtidListEvent:
        base = _HEADER_LEN
        if end < base + 4:
            raise _Corrupt("truncated")
        count = int.from_bytes(event[base:base + 4], "little") & 0x0FFFFFFF
        if base + 4 + 16 * count > end:
            raise _Corrupt("truncated")
        gtids = tuple(struct.unpack_from("<IIQ", event, base + 4 + 16 * i) for i in range(count))
        return MariadbGtidListEvent(header, gtids)

    def _checkpoint(self, header: EventHeader, event: bytes, end: int) -> BinlogCheckpointEvent:
        base = _HEADER_LEN
        if end < base + 4:
            raise _Corrupt("truncated")
        n = int.from_bytes(event[base:base + 4], "little")
        if base + 4 + n > end:
            raise _Corrupt("truncated")
        return BinlogCheckpointEvent(header, _text(event[base + 4:base + 4 + n]))

    def _annotate(self, header: EventHeader, event: bytes, end: int) -> AnnotateRowsEvent:
        return _new_annotate(header, _text(event[_HEADER_LEN:end]))

    def _rows_query(self, header: EventHeader, event: bytes, end: int) -> RowsQueryEvent:
        # One length byte (the length modulo 256: useless for long statements), then the text.
        if end < _HEADER_LEN + 1:
            raise _Corrupt("truncated")
        return _new_rows_query(header, _text(event[_HEADER_LEN + 1:end]))

    def _mysql_gtid(self, header: EventHeader, event: bytes, end: int) -> MysqlGtidEvent:
        base = _HEADER_LEN
        if end < base + 25:
            raise _Corrupt("truncated")
        flags = event[base]
        uuid = uuid_text(event[base + 1:base + 17])
        gno = int.from_bytes(event[base + 17:base + 25], "little", signed=True)
        anonymous = header.event_type == c.ANONYMOUS_GTID_LOG_EVENT
        last_committed = sequence_number = None
        # Logical clock (5.7+): type code 2, last_committed, sequence_number.
        if end >= base + 42 and event[base + 25] == 2:
            last_committed, sequence_number = struct.unpack_from("<qq", event, base + 26)
        return MysqlGtidEvent(header, uuid, gno, "", anonymous, last_committed,
                              sequence_number, flags)

    def _mysql_gtid_tagged(self, header: EventHeader, event: bytes, end: int) -> MysqlGtidEvent:
        fields = parse_tagged_gtid(event[_HEADER_LEN:end])
        return MysqlGtidEvent(header, fields["uuid"], fields["gno"], fields.get("tag", ""),
                              False, fields.get("last_committed"),
                              fields.get("sequence_number"), fields.get("flags", 0))

    def _previous_gtids(self, header: EventHeader, event: bytes, end: int) -> PreviousGtidsEvent:
        try:
            gtid_set = MysqlGtidSet.decode(event[_HEADER_LEN:end])
        except Exception as exc:
            raise _Corrupt(str(exc)) from exc
        return PreviousGtidsEvent(header, str(gtid_set))

    def _stop(self, header: EventHeader, event: bytes, end: int) -> StopEvent:
        return StopEvent(header)

    def _other(self, header: EventHeader, event: bytes, end: int) -> OtherEvent:
        return _new_other(header, event[_HEADER_LEN:end])

    def _table_map(self, header: EventHeader, event: bytes, end: int) -> TableMapEvent:
        return _new_table_map(header, self._add_table_map(event, 0, end))

    def _add_table_map(self, buf: bytes, base: int, end: int) -> TableMap:
        key = buf[base + _HEADER_LEN:end]
        table = self._cache.get(key)
        if table is None:
            post = self._post_header.get(c.TABLE_MAP_EVENT, 8)
            try:
                table = parse_table_map(key, table_id_len=4 if post == 6 else 6,
                                        mariadb=self._mariadb)
            except ValueError as exc:
                raise _Corrupt(str(exc)) from exc
            if len(self._cache) >= _TABLE_CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = table
        if self._statement_ended:
            # A new statement: the previous statement's ids mean nothing any more.
            self._tables.clear()
            self._statement_ended = False
        self._tables[table.table_id] = table
        return table

    def _rows(self, header: EventHeader, event: bytes, end: int) -> RowsEvent:
        (table, op, flags, present, present_after, extra, partial, data, start, stop, first,
         second) = self._rows_setup(header.event_type, event, 0, end)
        return _new_rows(header, table, op, flags, present, present_after, extra, partial,
                         data, start, stop, first, second,
                         self._row_error(header, self._offset))

    def _rows_setup(self, etype: int, buf: bytes, base: int, end: int) -> tuple[Any, ...]:
        """Everything but the row images of a rows event at ``buf[base:end]``."""
        layout = self._rows_layout.get(etype)
        if layout is None:
            layout = self._rows_layout[etype] = self._layout(etype)
        op, v2, compressed, partial, id_len, skip = layout
        p0 = base + _HEADER_LEN
        pos = p0 + id_len + 2
        if pos + 1 > end:
            raise _Corrupt("truncated")
        table_id = int.from_bytes(buf[p0:p0 + id_len], "little")
        flags = buf[pos - 2] | buf[pos - 1] << 8
        extra = b""
        if v2:
            if pos + 2 > end:
                raise _Corrupt("truncated")
            extra_len = buf[pos] | buf[pos + 1] << 8
            if extra_len < 2 or pos + extra_len > end:
                raise _Corrupt(f"bad extra data length {extra_len}")
            extra = buf[pos + 2:pos + extra_len]
            pos += extra_len
        pos += skip
        ncols = buf[pos]
        if ncols < 0xFB:
            pos += 1
        else:
            ncols, pos = _net_length(buf, pos, end)
        nbytes = (ncols + 7) >> 3
        if pos + nbytes * (2 if op == UPDATE else 1) > end:
            raise _Corrupt("columns bitmap truncated")
        present = buf[pos] if nbytes == 1 else int.from_bytes(buf[pos:pos + nbytes], "little")
        pos += nbytes
        present_after = present
        if op == UPDATE:
            if nbytes == 1:
                present_after = buf[pos]
            else:
                present_after = int.from_bytes(buf[pos:pos + nbytes], "little")
            pos += nbytes
        table = self._tables.get(table_id)
        if table is None:
            raise _Corrupt(f"no TABLE_MAP for table id {table_id} before this event "
                           "(was decoding started in the middle of a statement?)")
        if ncols != len(table.columns):
            raise _Corrupt(f"{ncols} columns, but the TABLE_MAP of "
                           f"`{table.schema}`.`{table.table}` has {len(table.columns)}")
        if compressed:
            data = compression.maria_uncompress(buf[pos:end])
            start, stop = 0, len(data)
        else:
            data, start, stop = buf, pos, end
        decoders = table.decoders
        first = decoders.get((present, False, partial))
        if first is None:
            first = self._compile(table, present, False, partial)
        second = None
        if op == UPDATE:
            second = decoders.get((present_after, partial, False))
            if second is None:
                second = self._compile(table, present_after, partial, False)
        if flags & STMT_END_F:
            self._statement_ended = True
        return (table, op, flags, present, present_after, extra, partial, data, start, stop,
                first, second)

    def _layout(self, etype: int) -> tuple[Any, ...]:
        op, v2, compressed, partial = _ROWS_TYPES[etype]
        post = self._post_header.get(etype, 10 if v2 else 8)
        id_len = 4 if post == 6 else 6
        # v1 events may announce a longer post-header than they use; v2 ones hold the extra
        # data length in it, read separately.
        skip = 0 if v2 else max(0, post - id_len - 2)
        return op, v2, compressed, partial, id_len, skip

    @staticmethod
    def _compile(table: TableMap, present: int, partial_json: bool,
                 json_tree: bool) -> Any:
        try:
            return row_decoder(table, present, partial_json=partial_json, json_tree=json_tree)
        except ValueError as exc:
            raise _Corrupt(str(exc)) from exc

    def _payload(self, header: EventHeader, event: bytes, end: int) -> TransactionPayloadEvent:
        base = _HEADER_LEN + self._post_header.get(c.TRANSACTION_PAYLOAD_EVENT, 0)
        try:
            fields, pos = compression.parse_payload_header(event, base, end)
        except ValueError as exc:
            raise _Corrupt(str(exc)) from exc
        ctype = fields.get(compression.OTW_PAYLOAD_COMPRESSION_TYPE_FIELD,
                           compression.COMPRESSION_NONE)
        size = fields.get(compression.OTW_PAYLOAD_SIZE_FIELD, end - pos)
        usize = fields.get(compression.OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD, 0)
        if pos + size > end:
            raise _Corrupt(f"payload of {size} bytes truncated")
        payload = event[pos:pos + size]
        offset = self._offset

        def inner() -> Iterator[Event]:
            events = compression.iter_payload_events(payload, ctype, usize)
            while True:
                try:
                    raw = next(events)
                except StopIteration:
                    return
                except ValueError as exc:
                    raise self._error(header, str(exc)) from exc
                # Inner events carry no checksum, and their positions are the payload's.
                yield self._decode(raw, offset, 0)

        return TransactionPayloadEvent(header, ctype, size, usize, inner)
