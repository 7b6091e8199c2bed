"""The event-level API: raw events in (as relay files hold them), typed events out.

:class:`EventDecoder` keeps the state decoding needs between events — the current
FORMAT_DESCRIPTION (checksum length, post-header lengths, flavour) and the table maps of the
current statement — and nothing else.  It never opens files or sockets; feeding it the bytes
of each whole event, in order, is the caller's job (see :mod:`binrelay.rows.reader`).

Table maps: every statement's row events are preceded by TABLE_MAP events for the tables
they touch, and a table id means that table only until the statement ends (ids are reused for
other tables later).  So the first TABLE_MAP after a statement end (STMT_END_F) starts a fresh
id -> table mapping.  Parsed table maps are cached by their bytes, process-wide, which also
keeps their compiled row decoders: a busy table's map is parsed and compiled once, not once
per decoder (a Spark worker makes one per partition and batch).

Any problem in the input — truncated or corrupt events, bad checksums, row events without a
table map — raises :class:`~binrelay.errors.BinlogFormatError` with the offset (and path, if
given); no other exception escapes, whatever the bytes.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from binrelay.binlog import compression
from binrelay.binlog import constants as c
from binrelay.binlog._fast import fast_new
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import LenencError, read_lenenc
from binrelay.binlog.events import (
    EventHeader,
    FormatDescription,
    FormatDescriptionEvent,
    TransactionPayloadEvent,
)
from binrelay.binlog.parse import (
    BODY_PARSERS,
    DEFAULT_POST_HEADER,
    Context,
    Corrupt,
    crc32_ok,
    format_error,
    new_header,
    other,
    parse_format_description,
    verify_checksum,
)
from binrelay.errors import BinlogFormatError, ChecksumMismatchError, IncompleteEventError
from binrelay.rows.compiler import row_decoder
from binrelay.rows.events import (
    DELETE,
    INSERT,
    STMT_END_F,
    UPDATE,
    Event,
    RowsEvent,
    TableMapEvent,
)
from binrelay.rows.plans import tuple_plan
from binrelay.rows.tablemap import TableMap, parse_table_map

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

# The binlog layer's defaults, and the rows events' (v1: 8, v2: 10).
_DEFAULT_POST_HEADER = {
    **DEFAULT_POST_HEADER,
    **{t: (10 if v2 else 8) for t, (_, v2, _, _) in _ROWS_TYPES.items()},
}

_TABLE_CACHE_SIZE = 1024
#: Table maps parsed, by the format they were parsed under (the post-header length, which
#: gives the table id's width; MariaDB or not), then by the event's body (which holds the
#: table id): shared by every decoder of the process, with their compiled row decoders.
#: A Spark worker reads each batch's partitions with new decoders; parsing the same maps
#: and compiling their row decoders again each time cost milliseconds per table and batch.
_TABLE_MAPS: dict[tuple[int, bool], dict[bytes, TableMap]] = {}
_EVICTING = threading.Lock()


def _table_maps(ctx: Context) -> dict[bytes, TableMap]:
    post = ctx.post_header.get(c.TABLE_MAP_EVENT, 8)
    return _TABLE_MAPS.setdefault((post, ctx.mariadb), {})


_read_payload = BODY_PARSERS[c.TRANSACTION_PAYLOAD_EVENT]

# Hot constructors (see _fast.py): every field positional, in declaration order.
_new_table_map = fast_new(TableMapEvent)
_new_rows = fast_new(RowsEvent)


def _net_length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_lenenc(data, pos, end)
    except LenencError as exc:
        raise Corrupt("length-encoded integer truncated" if exc.first is None
                      else "bad length-encoded integer") from None


def _compile(table: TableMap, present: int, partial_json: bool, json_tree: bool) -> Any:
    try:
        return row_decoder(table, present, partial_json=partial_json, json_tree=json_tree,
                           planner=tuple_plan)
    except ValueError as exc:
        raise Corrupt(str(exc)) from exc


def image_decoders(table: TableMap, op: str, present: int, present_after: int,
                   partial: bool) -> tuple[Any, Any]:
    """The row decoders of a rows event of ``table`` (its first image's, and an update's
    second's), as the event decoder gives them: for a caller that reads the event's images
    by another table map (``binrelay.apply.positional``)."""
    decoders = table.decoders
    first = decoders.get((present, False, partial)) or _compile(table, present, False, partial)
    second = None
    if op == UPDATE:
        second = decoders.get((present_after, partial, False)) or \
            _compile(table, present_after, partial, False)
    return first, second


class EventDecoder:
    """Feed whole events in file order; get typed events (:mod:`binrelay.binlog.events`, and
    TABLE_MAP and rows events from :mod:`binrelay.rows.events`).

    ``verify_checksums``: check each event's CRC32 when the FDE says the file has them.
    ``path``: named in error messages.  ``fde``: the FORMAT_DESCRIPTION in force, for a
    decoder that starts after a file's first event (a Spark partition starting mid-file).

    Not thread-safe: one decoder per ordered stream of events (decoders in different
    threads may share parsed table maps).
    """

    def __init__(self, *, verify_checksums: bool = True, path: str | None = None,
                 fde: FormatDescription | None = None) -> None:
        self.verify_checksums = verify_checksums
        self.path = path
        self._ctx = Context(defaults=_DEFAULT_POST_HEADER)
        self._tables: dict[int, TableMap] = {}
        self._statement_ended = False
        self._cache = _table_maps(self._ctx)
        self._rows_layout: dict[int, tuple[Any, ...]] = {}
        # The binlog layer reads every body but these, which need table maps or this state.
        self._handlers: dict[int, Callable[[EventHeader, bytes, int], Any]] = {
            **{t: partial(parser, self._ctx) for t, parser in BODY_PARSERS.items()},
            c.FORMAT_DESCRIPTION_EVENT: self._fde,
            c.TABLE_MAP_EVENT: self._table_map,
            c.TRANSACTION_PAYLOAD_EVENT: self._payload,
            **{t: self._rows for t in _ROWS_TYPES},
        }
        self._other = partial(other, self._ctx)
        if fde is not None:
            self._use_fde(fde)
        # Set while decoding one event, for error messages.
        self._offset: int | None = None

    # --- public API ------------------------------------------------------------------------

    @property
    def fde(self) -> FormatDescription | None:
        """The FORMAT_DESCRIPTION in force (None before the first)."""
        return self._ctx.fde

    @property
    def checksum_len(self) -> int:
        return self._ctx.checksum_len

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
        header = new_header(*_HEADER.unpack_from(event))
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
            elif self._ctx.fde is not None:
                checksum_len = self._ctx.checksum_len
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
        except Exception as exc:  # Corrupt, struct.error, IndexError ...: what bad bytes cause
            raise self._error(header, str(exc) or type(exc).__name__) from exc

    def _error(self, header: EventHeader, message: str) -> BinlogFormatError:
        return format_error(header.event_type, message, path=self.path, offset=self._offset)

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
        self._ctx.use(fde)
        self._cache = _table_maps(self._ctx)
        self._rows_layout.clear()
        self._tables.clear()

    # --- handlers --------------------------------------------------------------------------

    def _fde(self, header: EventHeader, event: bytes, end: int) -> FormatDescriptionEvent:
        fde = parse_format_description(event)
        if fde.checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32 and self.verify_checksums:
            verify_checksum(event, fde.checksum_alg, offset=self._offset, path=self.path)
        self._use_fde(fde)
        return FormatDescriptionEvent(header, fde)

    def _table_map(self, header: EventHeader, event: bytes, end: int) -> TableMapEvent:
        return _new_table_map(header, self._add_table_map(event, 0, end))

    def _add_table_map(self, buf: bytes, base: int, end: int) -> TableMap:
        key = buf[base + _HEADER_LEN:end]
        table = self._cache.get(key)
        if table is None:
            post = self._ctx.post_header.get(c.TABLE_MAP_EVENT, 8)
            try:
                table = parse_table_map(key, table_id_len=4 if post == 6 else 6,
                                        mariadb=self._ctx.mariadb)
            except ValueError as exc:
                raise Corrupt(str(exc)) from exc
            if len(self._cache) >= _TABLE_CACHE_SIZE:
                with _EVICTING:  # other threads' decoders share it
                    for old in list(self._cache)[:len(self._cache) - _TABLE_CACHE_SIZE + 1]:
                        self._cache.pop(old, None)
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
            raise Corrupt("truncated")
        table_id = int.from_bytes(buf[p0:p0 + id_len], "little")
        flags = buf[pos - 2] | buf[pos - 1] << 8
        extra = b""
        if v2:
            if pos + 2 > end:
                raise Corrupt("truncated")
            extra_len = buf[pos] | buf[pos + 1] << 8
            if extra_len < 2 or pos + extra_len > end:
                raise Corrupt(f"bad extra data length {extra_len}")
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
            raise Corrupt("columns bitmap truncated")
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
            raise Corrupt(f"no TABLE_MAP for table id {table_id} before this event "
                           "(was decoding started in the middle of a statement?)")
        if ncols != len(table.columns):
            raise Corrupt(f"{ncols} columns, but the TABLE_MAP of "
                           f"`{table.schema}`.`{table.table}` has {len(table.columns)}")
        if compressed:
            data = compression.maria_uncompress(buf[pos:end])
            start, stop = 0, len(data)
        else:
            data, start, stop = buf, pos, end
        # (image_decoders, inline: this runs once per rows event.)
        decoders = table.decoders
        first = decoders.get((present, False, partial))
        if first is None:
            first = _compile(table, present, False, partial)
        second = None
        if op == UPDATE:
            second = decoders.get((present_after, partial, False))
            if second is None:
                second = _compile(table, present_after, partial, False)
        if flags & STMT_END_F:
            self._statement_ended = True
        return (table, op, flags, present, present_after, extra, partial, data, start, stop,
                first, second)

    def _layout(self, etype: int) -> tuple[Any, ...]:
        op, v2, compressed, partial = _ROWS_TYPES[etype]
        post = self._ctx.post_header.get(etype, 10 if v2 else 8)
        id_len = 4 if post == 6 else 6
        # v1 events may announce a longer post-header than they use; v2 ones hold the extra
        # data length in it, read separately.
        skip = 0 if v2 else max(0, post - id_len - 2)
        return op, v2, compressed, partial, id_len, skip

    def _payload(self, header: EventHeader, event: bytes, end: int) -> TransactionPayloadEvent:
        outer = _read_payload(self._ctx, header, event, end)
        offset = self._offset

        def inner() -> Iterator[Event]:
            events = outer.events()
            while True:
                try:
                    raw = next(events)
                except StopIteration:
                    return
                except ValueError as exc:
                    raise self._error(header, str(exc)) from exc
                # Inner events carry no checksum, and their positions are the payload's.
                yield self._decode(raw, offset, 0)

        return TransactionPayloadEvent(header, outer.compression_type, outer.payload_size,
                                       outer.uncompressed_size, inner)
