"""The events that need a table's schema to read: TABLE_MAP and the rows events, with the
row changes they hold (every other event is :mod:`binrelay.binlog.events`'s).

Every event keeps its :class:`~binrelay.binlog.events.EventHeader` (``header.log_pos`` is the
upstream end position, ``header.event_size`` its size).  Row images are decoded lazily:
:meth:`RowsEvent.rows` yields one :class:`RowChange` at a time, so memory stays bounded by
the largest row, not by the event or the transaction.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from binrelay.binlog._fast import fast_new
from binrelay.binlog.events import BinlogEvent, EventHeader
from binrelay.rows import mysqljson
from binrelay.rows.compiler import ABSENT, JsonTree
from binrelay.rows.tablemap import TableMap

INSERT, UPDATE, DELETE = "insert", "update", "delete"
#: Ops as ``_speedups``' C functions take them (``image_tuples``, ``fold_images``).
OP_CODES = {INSERT: 0, UPDATE: 1, DELETE: 2}

try:
    from binrelay._speedups import image_tuples as image_tuples_c
except ImportError:  # pragma: no cover - depends on the build
    image_tuples_c = None

# Rows event flags.
STMT_END_F = 0x1
NO_FOREIGN_KEY_CHECKS_F = 0x2
RELAXED_UNIQUE_CHECKS_F = 0x4
COMPLETE_ROWS_F = 0x8


@dataclass(frozen=True, slots=True)
class TableMapEvent:
    header: EventHeader
    table: TableMap


@dataclass(frozen=True, slots=True)
class Location:
    """Where a row change comes from: the rows event's start and end offsets in ``file``
    (for events inside a TRANSACTION_PAYLOAD, the payload's) and the transaction's GTID."""

    file: str | None
    pos: int
    end_pos: int
    gtid: str | None = None
    #: The rows event's flags (``NO_FOREIGN_KEY_CHECKS_F``: the upstream session had
    #: foreign_key_checks off, which a replica applies the row with too).
    flags: int = 0


@dataclass(frozen=True, slots=True)
class RowChange:
    """One changed row.  ``before``/``after`` are tuples with one entry per column of the
    table map (``None`` = SQL NULL, ``ABSENT`` = not in this image); inserts have no before
    image, deletes no after image.  ``where`` is set by the change scanner."""

    op: str
    table: TableMap
    before: tuple[Any, ...] | None
    after: tuple[Any, ...] | None
    where: Location | None = None

    @property
    def schema(self) -> str:
        return self.table.schema

    @property
    def table_name(self) -> str:
        return self.table.table

    def before_dict(self) -> dict[str, Any] | None:
        return _as_dict(self.table, self.before)

    def after_dict(self) -> dict[str, Any] | None:
        return _as_dict(self.table, self.after)


def _as_dict(table: TableMap, image: tuple[Any, ...] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {col.label: v for col, v in zip(table.columns, image, strict=True) if v is not ABSENT}


RowDecoderFn = Callable[[bytes, int, int], tuple[tuple[Any, ...], int]]


@dataclass(frozen=True, slots=True)
class RowsEvent:
    """WRITE/UPDATE/DELETE rows (v1, v2, MariaDB compressed, MySQL partial update)."""

    header: EventHeader
    table: TableMap
    op: str
    flags: int
    #: Columns in the (before, for updates) image: bit i = column i.
    columns_present: int
    #: Columns in the after image of an update (same as ``columns_present`` otherwise).
    columns_present_after: int
    #: v2 extra row info (partition / NDB), raw.
    extra_data: bytes = b""
    partial_json: bool = False
    data: bytes = field(default=b"", repr=False)
    start: int = field(default=0, repr=False)
    end: int = field(default=0, repr=False)
    decode_first: RowDecoderFn | None = field(default=None, repr=False)
    decode_second: RowDecoderFn | None = field(default=None, repr=False)
    on_error: Callable[[Exception], Exception] | None = field(default=None, repr=False)

    @property
    def stmt_end(self) -> bool:
        return bool(self.flags & STMT_END_F)

    def __iter__(self) -> Iterator[RowChange]:
        return self.rows()

    def rows(self, where: Location | None = None) -> Iterator[RowChange]:
        """Decode the row images (the whole event's when the first is asked for)."""
        try:
            yield from iter_rows(self.table, self.op, self.partial_json, self.data, self.start,
                                 self.end, self.decode_first, self.decode_second, where)
        except Exception as exc:  # struct.error, IndexError ...: whatever a corrupt image causes
            if self.on_error is None:
                raise
            raise self.on_error(exc) from exc


_new_row_change = fast_new(RowChange)
new_location = fast_new(Location)


def iter_rows(table: TableMap, op: str, partial: bool, b: bytes, p: int, end: int,
              first: RowDecoderFn | None, second: RowDecoderFn | None,
              where: Location | None) -> Iterator[RowChange]:
    """The row changes of one rows event's images in ``b[p:end]``."""
    new = _new_row_change
    for before, after in row_images(table, op, partial, b, p, end, first, second):
        yield new(op, table, before, after, where)


def row_images(table: TableMap, op: str, partial: bool, b: bytes, p: int, end: int,
               first: RowDecoderFn | None, second: RowDecoderFn | None
               ) -> list[tuple[Any, Any]]:
    """One rows event's images in ``b[p:end]`` as ``(before, after)`` pairs (None for the
    image its op lacks): what a caller needing no :class:`RowChange` per row reads."""
    assert first is not None
    plan = getattr(first, "plan", None)
    if plan is not None and image_tuples_c is not None:
        plan_after = None if second is None else getattr(second, "plan", None)
        if op != UPDATE or plan_after is not None:
            images = image_tuples_c(b, p, end, OP_CODES[op], plan, plan_after)
            if images is not None:
                return images
    out: list[tuple[Any, Any]] = []
    add = out.append
    if op == UPDATE:
        assert second is not None
        while p < end:
            before, p = first(b, p, end)
            after, p = second(b, p, end)
            if partial:
                before, after = _resolve_partial_json(table, before, after)
            add((before, after))
    elif op == INSERT:
        while p < end:
            after, p = first(b, p, end)
            add((None, after))
    else:
        while p < end:
            before, p = first(b, p, end)
            add((before, None))
    return out


def _resolve_partial_json(table: TableMap, before: tuple[Any, ...],
                          after: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Apply JSON diffs of a PARTIAL_UPDATE_ROWS after image to the before image, then turn
    the JSON trees into text.  Without a before value the diffs stay as they are."""
    b = list(before)
    a = list(after)
    for i, (bv, av) in enumerate(zip(before, after, strict=True)):
        if isinstance(av, mysqljson.JsonPartialUpdate) and isinstance(bv, JsonTree):
            doc = copy.deepcopy(bv.value)
            a[i] = mysqljson.to_text(mysqljson.apply_diffs(doc, av.diffs))
        elif isinstance(av, JsonTree):
            a[i] = mysqljson.to_text(av.value)
        if isinstance(bv, JsonTree):
            b[i] = mysqljson.to_text(bv.value)
    return tuple(b), tuple(a)


#: Every event the rows decoder yields: the binlog layer's, and TABLE_MAP and rows events.
Event = BinlogEvent | TableMapEvent | RowsEvent
