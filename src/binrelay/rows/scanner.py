"""The fast path: row changes straight out of a buffer of whole events.

:class:`EventDecoder` builds a typed object for every event, which is what a dump or an
applier that cares about DDL needs, and costs a few microseconds per event.  A sysbench-like
binlog has three events or more per changed row (annotate/rows-query, table map, rows, plus
GTID and XID per transaction), so for bulk row extraction (the Spark source) that overhead
dominates.  :class:`ChangeScanner` walks a buffer holding many events, looks only at the type
byte and size of each, keeps the state it needs (FDE, table maps, current GTID) and yields
:class:`~binrelay.rows.events.RowChange` objects located by file offset and GTID.  Events it
does not need are skipped without being copied; rare events that change state (FDE, Rotate,
TRANSACTION_PAYLOAD) go through the shared :class:`EventDecoder`, so both paths agree.

Every event's CRC32 is still checked, by the walk (:mod:`binrelay.rows.walk`) that also
skips the events the scanner has no use for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import TYPE_SIZE as _TYPE_SIZE
from binrelay.binlog.parse import checked_mysql_gno, maria_gtid_text, mysql_gtid_text
from binrelay.errors import BinlogFormatError, ChecksumMismatchError
from binrelay.rows.decoder import _ROWS_TYPES, EventDecoder
from binrelay.rows.events import (
    DELETE,
    INSERT,
    OP_CODES,
    Location,
    RowChange,
    RowDecoderFn,
    RowsEvent,
    _new_row_change,
    iter_rows,
    new_location,
)
from binrelay.rows.tablemap import TableMap
from binrelay.rows.walk import BAD_CRC, BAD_SIZE, keep_table, walk_events

_HEADER_LEN = c.EVENT_HEADER_LEN

_ROWS, _TABLE_MAP, _MARIA_GTID_KIND, _MYSQL_GTID, _DELEGATE = 1, 2, 3, 4, 5
_KINDS: dict[int, int] = {t: _ROWS for t in _ROWS_TYPES}
_KINDS.update({
    c.TABLE_MAP_EVENT: _TABLE_MAP,
    c.GTID_EVENT: _MARIA_GTID_KIND,
    c.GTID_LOG_EVENT: _MYSQL_GTID,
    c.ANONYMOUS_GTID_LOG_EVENT: _MYSQL_GTID,
    c.GTID_TAGGED_LOG_EVENT: _DELEGATE,
    c.FORMAT_DESCRIPTION_EVENT: _DELEGATE,
    c.ROTATE_EVENT: _DELEGATE,
    c.TRANSACTION_PAYLOAD_EVENT: _DELEGATE,
})
#: One rows event as :meth:`ChangeScanner.scan_events` gives it: (event type, offset for
#: errors, location, table, op, partial JSON, columns present, columns present after, data,
#: start, stop, decoder of the first image, of the second), the images in data[start:stop].
RowsRun = tuple[int, int, Location, TableMap, str, bool, int, int, bytes, int, int,
                RowDecoderFn, RowDecoderFn | None]

try:
    from binrelay._speedups import fold_events as fold_events_c
except ImportError:  # pragma: no cover - dev/setup builds it
    fold_events_c = None


#: Events per call of the C loop (``KeyFold``): a few milliseconds of a partition.
_FOLD_RUN = 1024


@dataclass
class KeyFold:
    """What a reader of keyed tables folds rows events into without seeing them
    (``spark.compact.compact_segment``): ``fast`` maps ``id(table map)`` to ``(table map,
    last, key indexes, columns, plan)``, ``last`` as ``fold_images`` fills it, ``plan`` the
    table's row plan for images with every column; ``counts`` the row changes folded, by
    ``OP_CODES`` value; ``seq``, ``file_no``: the positions' first two numbers.  The
    scanner's C loop (``_speedups.fold_events``) takes the rows events of those tables (and
    the GTID and cached TABLE_MAP events between them) and yields only the rest, which the
    reader takes as it takes every event without it."""

    seq: int
    file_no: int
    fast: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])


_KEEP = keep_table((t for t, k in _KINDS.items() if k != _DELEGATE),
                   (t for t, k in _KINDS.items() if k == _DELEGATE))


def row_error(path: str | None, etype: int, offset: int, exc: Exception) -> BinlogFormatError:
    """The error for a row image of a rows event at ``offset`` that did not decode."""
    return _event_error(path, etype, offset, exc, "bad row image: ")


def _event_error(path: str | None, etype: int, offset: int, exc: Exception,
                 what: str = "") -> BinlogFormatError:
    return BinlogFormatError(
        f"{c.event_type_name(etype)}: {what}{str(exc) or type(exc).__name__}", path=path,
        offset=offset)


class ChangeScanner:
    """Yields the row changes of a stream of events given as buffers (one file per scanner).

    ``scan(buf, pos, end, file_offset=...)`` consumes whole events from ``buf[pos:end]`` and
    stops before the first incomplete one; :attr:`stopped_at` tells where (an index into
    ``buf``), so the caller can keep that tail and append the next chunk.  ``file_offset`` is
    the file offset of ``buf[0]``, for locations and error messages.
    """

    def __init__(self, *, verify_checksums: bool = True, path: str | None = None,
                 decoder: EventDecoder | None = None) -> None:
        self.decoder = decoder or EventDecoder(verify_checksums=verify_checksums, path=path)
        self.path = path
        self.verify_checksums = verify_checksums
        #: GTID of the transaction being scanned ("0-1-5" or "uuid:n"), None without GTIDs.
        self.gtid: str | None = None
        self.stopped_at = 0

    def scan(self, buf: bytes, pos: int = 0, end: int | None = None, *,
             file_offset: int = 0) -> Iterator[RowChange]:
        return self._scan(buf, pos, end, file_offset, False)

    def scan_events(self, buf: bytes, pos: int = 0, end: int | None = None, *,
                    file_offset: int = 0, fold: KeyFold | None = None) -> Iterator[RowsRun]:
        """What :meth:`scan` walks, one :data:`RowsRun` per rows event, the images left for
        the caller to decode with the run's decoders (reporting a failure as
        :func:`row_error` says); with ``fold``, the events :class:`KeyFold` takes are folded
        there and not yielded."""
        return self._scan(buf, pos, end, file_offset, True, fold)

    def _scan(self, buf: bytes, pos: int, end: int | None, file_offset: int,
              runs: bool, fold: KeyFold | None = None) -> Iterator[Any]:
        # One loop for both: a generator layer per event would cost scan() ~6 %.
        if end is None:
            end = len(buf)
        dec = self.decoder
        add_table_map = dec._add_table_map
        path = self.path
        kinds = _KINDS
        new_change = _new_row_change
        self.stopped_at = pos
        # Without an FDE nothing can be read but an FDE: the typed decoder takes events
        # one at a time until it has one.
        while dec.fde is None and end - pos >= _HEADER_LEN:
            size = _TYPE_SIZE.unpack_from(buf, pos + 4)[1]
            if size < _HEADER_LEN:
                raise self._bad_size(size, file_offset + pos)
            if pos + size > end:
                return
            yield from self._delegate(bytes(buf[pos:pos + size]), file_offset + pos,
                                      file_offset + pos + size, runs)
            pos = self.stopped_at = pos + size
        while True:
            # Only the last event of a walk can change the checksum length (a new FDE).
            checksum_len = dec.checksum_len
            crc = bool(checksum_len and self.verify_checksums)
            events, stopped, status = walk_events(buf, pos, end, crc, _KEEP)
            for etype, pos, ev_end in (events if fold is None or fold_events_c is None else
                                       self._unfolded(buf, events, fold, file_offset)):
                kind = kinds[etype]
                body_end = ev_end - checksum_len
                if kind == _ROWS:
                    try:
                        (table, op, flags, present, present_after, _extra, partial, data, p,
                         stop, first, second) = dec._rows_setup(etype, buf, pos, body_end)
                    except BinlogFormatError:
                        raise
                    except Exception as exc:
                        raise self._error(etype, file_offset + pos, exc) from exc
                    where = new_location(path, file_offset + pos, file_offset + ev_end,
                                         self.gtid, flags)
                    if runs:
                        yield (etype, file_offset + pos, where, table, op, partial, present,
                               present_after, data, p, stop, first, second)
                        self.stopped_at = ev_end
                        continue
                    try:
                        if op == INSERT:
                            while p < stop:
                                after, p = first(data, p, stop)
                                yield new_change(op, table, None, after, where)
                        elif op == DELETE:
                            while p < stop:
                                before, p = first(data, p, stop)
                                yield new_change(op, table, before, None, where)
                        else:
                            yield from iter_rows(table, op, partial, data, p, stop, first,
                                                 second, where)
                    except BinlogFormatError:
                        raise
                    except Exception as exc:
                        raise row_error(path, etype, file_offset + pos, exc) from exc
                elif kind == _TABLE_MAP:
                    try:
                        add_table_map(buf, pos, body_end)
                    except BinlogFormatError:
                        raise
                    except Exception as exc:
                        raise BinlogFormatError(f"{c.event_type_name(etype)}: {exc}",
                                                path=path, offset=file_offset + pos) from exc
                elif kind == _MARIA_GTID_KIND:
                    if body_end - pos < _HEADER_LEN + 13:
                        raise BinlogFormatError("GTID_EVENT truncated", path=path,
                                                offset=file_offset + pos)
                    self.gtid = maria_gtid_text(buf, pos)
                elif kind == _MYSQL_GTID:
                    self.gtid = self._mysql_gtid(etype, buf, pos, body_end, file_offset)
                else:
                    yield from self._delegate(bytes(buf[pos:ev_end]), file_offset + pos,
                                              file_offset + ev_end, runs)
                self.stopped_at = ev_end
            self.stopped_at = pos = stopped
            if status == BAD_SIZE:
                raise self._bad_size(_TYPE_SIZE.unpack_from(buf, pos + 4)[1],
                                     file_offset + pos)
            if status == BAD_CRC:
                raise ChecksumMismatchError(
                    f"CRC32 mismatch in {c.event_type_name(buf[pos + 4])} event", path=path,
                    offset=file_offset + pos)
            # The walk stops after an event that may change how the rest reads (a new FDE):
            # go on with the decoder's new state; otherwise only a short tail is left.
            if not events or kinds[events[-1][0]] != _DELEGATE:
                return

    # --- helpers -----------------------------------------------------------------------------

    def _unfolded(self, buf: bytes, events: list[tuple[int, int, int]], fold: KeyFold,
                  file_offset: int) -> Iterator[tuple[int, int, int]]:
        """The walk's events :class:`KeyFold` does not take, in order; the decoder's state
        (tables, statement end) and :attr:`gtid` as if this scanner had taken them all."""
        dec = self.decoder
        assert fold_events_c is not None
        layouts = {}
        for etype, (op, _v2, compressed, partial) in _ROWS_TYPES.items():
            if not compressed and not partial:
                layout = dec._rows_layout.get(etype) or dec._layout(etype)
                layouts[etype] = (OP_CODES[op], layout[1], layout[4], layout[5])
        i, n = 0, len(events)
        while i < n:
            # At most _FOLD_RUN events a call: the C loop holds the GIL, and other threads
            # of the process (the driver's) must not wait for a whole partition.
            upto = min(n, i + _FOLD_RUN)
            i, dec._statement_ended, gtid_at = fold_events_c(
                buf, events, i, upto, dec.checksum_len, dec._cache, dec._tables,
                dec._statement_ended, fold.fast, layouts, fold.seq, fold.file_no, file_offset,
                fold.counts)
            if gtid_at >= 0:
                self.gtid = maria_gtid_text(buf, gtid_at)
            if i < upto:
                yield events[i]
                i += 1

    def _bad_size(self, size: int, offset: int) -> BinlogFormatError:
        return BinlogFormatError(
            f"event size {size} is smaller than the {_HEADER_LEN}-byte header",
            path=self.path, offset=offset)

    def _error(self, etype: int, offset: int, exc: Exception) -> BinlogFormatError:
        return _event_error(self.path, etype, offset, exc)

    def _mysql_gtid(self, etype: int, buf: bytes, pos: int, body_end: int,
                    file_offset: int) -> str | None:
        if etype == c.ANONYMOUS_GTID_LOG_EVENT:
            return None
        try:
            checked_mysql_gno(buf, pos, body_end)
        except BinlogFormatError as exc:
            raise BinlogFormatError(exc.reason, path=self.path, offset=file_offset + pos
                                    ) from None
        return mysql_gtid_text(buf, pos)

    def _delegate(self, raw: bytes, offset: int, end_offset: int,
                  runs: bool) -> Iterator[Any]:
        """Events that change the decoder's state go through the typed decoder."""
        ev = self.decoder.decode(raw, offset)
        etype = ev.header.event_type
        if etype == c.GTID_TAGGED_LOG_EVENT:
            self.gtid = ev.gtid  # type: ignore[union-attr]
        elif etype == c.TRANSACTION_PAYLOAD_EVENT:
            for inner in ev.events():  # type: ignore[union-attr]
                if isinstance(inner, RowsEvent):
                    yield from self._rows_of(inner, offset, end_offset, runs)
        elif isinstance(ev, RowsEvent):  # only before any FDE
            yield from self._rows_of(ev, offset, end_offset, runs)

    def _rows_of(self, ev: RowsEvent, offset: int, end_offset: int,
                 runs: bool) -> Iterator[Any]:
        where = Location(self.path, offset, end_offset, self.gtid, ev.flags)
        if runs:
            yield (ev.header.event_type, offset, where, ev.table, ev.op, ev.partial_json,
                   ev.columns_present, ev.columns_present_after, ev.data, ev.start, ev.end,
                   ev.decode_first, ev.decode_second)
        else:
            yield from ev.rows(where)
