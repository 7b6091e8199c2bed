"""Typed events: what :class:`binrelay.rows.decoder.EventDecoder` turns raw events into.

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

from binrelay.binlog import constants as c
from binrelay.binlog.events import EventHeader, FormatDescription
from binrelay.binlog.statement import QueryStatus, UserVar, parse_status_vars
from binrelay.errors import BinlogFormatError
from binrelay.rows import mysqljson
from binrelay.rows._fast import fast_new
from binrelay.rows.compiler import ABSENT, JsonTree
from binrelay.rows.tablemap import TableMap

INSERT, UPDATE, DELETE = "insert", "update", "delete"

# Rows event flags.
STMT_END_F = 0x1
NO_FOREIGN_KEY_CHECKS_F = 0x2
RELAXED_UNIQUE_CHECKS_F = 0x4
COMPLETE_ROWS_F = 0x8


@dataclass(frozen=True, slots=True)
class FormatDescriptionEvent:
    header: EventHeader
    fde: FormatDescription


@dataclass(frozen=True, slots=True)
class RotateEvent:
    header: EventHeader
    next_file: str
    position: int
    fake: bool


@dataclass(frozen=True, slots=True)
class QueryEvent:
    """A statement: BEGIN/COMMIT, DDL, or DML under statement-based logging.

    ``query`` is ``raw_query`` decoded as UTF-8 (undecodable bytes as lone surrogates); the
    server runs ``raw_query`` in the character set the status variables name
    (``status.charset[0]``), so replaying it means sending these bytes, not ``query``.
    """

    header: EventHeader
    schema: str
    query: str
    thread_id: int
    exec_time: int
    error_code: int
    #: True when it came from a MariaDB QUERY_COMPRESSED_EVENT.
    compressed: bool = False
    #: The statement exactly as logged (uncompressed).
    raw_query: bytes = field(default=b"", repr=False)
    #: The raw status-variables block; :attr:`status` parses it.
    status_vars: bytes = field(default=b"", repr=False)
    #: The upstream is MariaDB (the FDE said so): which status-variable codes exist.
    mariadb: bool = False
    _status: QueryStatus | None = field(default=None, repr=False, compare=False)

    @property
    def status(self) -> QueryStatus:
        """The parsed status variables (parsed on first use: most readers never need them).

        Raises :class:`~binrelay.errors.BinlogFormatError` for a block that does not parse.
        """
        status = self._status
        if status is None:
            try:
                status = parse_status_vars(self.status_vars, mariadb=self.mariadb)
            except BinlogFormatError as exc:
                h = self.header
                raise BinlogFormatError(
                    exc.reason, offset=h.start_pos if h.log_pos else None) from None
            object.__setattr__(self, "_status", status)
        return status


@dataclass(frozen=True, slots=True)
class IntvarEvent:
    """INTVAR: the auto-increment context of the next statement."""

    header: EventHeader
    #: ``binlog.statement.LAST_INSERT_ID_EVENT`` (1) or ``INSERT_ID_EVENT`` (2).
    kind: int
    value: int


@dataclass(frozen=True, slots=True)
class RandEvent:
    """RAND: the seeds RAND() starts from in the next statement."""

    header: EventHeader
    seed1: int
    seed2: int


@dataclass(frozen=True, slots=True)
class UserVarEvent:
    """USER_VAR: the value of a user variable the next statement reads."""

    header: EventHeader
    var: UserVar

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def value(self) -> bytes | int | float | str | None:
        return self.var.value


@dataclass(frozen=True, slots=True)
class XidEvent:
    header: EventHeader
    xid: int


@dataclass(frozen=True, slots=True)
class MariadbGtidEvent:
    header: EventHeader
    domain_id: int
    server_id: int
    seq_no: int
    flags: int
    commit_id: int | None = None

    @property
    def gtid(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"

    @property
    def standalone(self) -> bool:
        return bool(self.flags & c.FL_STANDALONE)


@dataclass(frozen=True, slots=True)
class MariadbGtidListEvent:
    header: EventHeader
    gtids: tuple[tuple[int, int, int], ...]  # (domain_id, server_id, seq_no)

    @property
    def gtid_list(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.gtids)


@dataclass(frozen=True, slots=True)
class BinlogCheckpointEvent:
    header: EventHeader
    file: str


@dataclass(frozen=True, slots=True)
class AnnotateRowsEvent:
    """MariaDB: the statement that produced the following row events."""

    header: EventHeader
    query: str


@dataclass(frozen=True, slots=True)
class RowsQueryEvent:
    """MySQL: the statement that produced the following row events."""

    header: EventHeader
    query: str


@dataclass(frozen=True, slots=True)
class MysqlGtidEvent:
    header: EventHeader
    uuid: str
    gno: int
    tag: str = ""
    anonymous: bool = False
    last_committed: int | None = None
    sequence_number: int | None = None
    flags: int = 0

    @property
    def gtid(self) -> str:
        if self.anonymous:
            return "ANONYMOUS"
        return f"{self.uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.uuid}:{self.gno}"


@dataclass(frozen=True, slots=True)
class PreviousGtidsEvent:
    header: EventHeader
    gtid_set: str


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
        """Decode the row images one at a time (lazily)."""
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
    assert first is not None
    new = _new_row_change
    if op == UPDATE:
        assert second is not None
        while p < end:
            before, p = first(b, p, end)
            after, p = second(b, p, end)
            if partial:
                before, after = _resolve_partial_json(table, before, after)
            yield new(op, table, before, after, where)
    elif op == INSERT:
        while p < end:
            after, p = first(b, p, end)
            yield new(op, table, None, after, where)
    else:
        while p < end:
            before, p = first(b, p, end)
            yield new(op, table, before, None, where)


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


@dataclass(frozen=True, slots=True)
class TransactionPayloadEvent:
    """MySQL 8.0.20+ compressed transaction.  ``EventDecoder.feed`` yields the events inside
    right after this one; :meth:`events` iterates them on demand."""

    header: EventHeader
    compression_type: int
    payload_size: int
    uncompressed_size: int
    inner: Callable[[], Iterator[Any]] = field(repr=False, compare=False,
                                               default=lambda: iter(()))

    def events(self) -> Iterator[Any]:
        return self.inner()


@dataclass(frozen=True, slots=True)
class StopEvent:
    header: EventHeader


@dataclass(frozen=True, slots=True)
class OtherEvent:
    """Any event this module does not interpret (heartbeat, LOAD DATA blocks, type 100 of
    Aurora ...): header and raw body, passed through."""

    header: EventHeader
    body: bytes = field(repr=False)

    @property
    def type_name(self) -> str:
        return c.event_type_name(self.header.event_type)


Event = (FormatDescriptionEvent | RotateEvent | QueryEvent | IntvarEvent | RandEvent
         | UserVarEvent | XidEvent | MariadbGtidEvent
         | MariadbGtidListEvent | BinlogCheckpointEvent | AnnotateRowsEvent | RowsQueryEvent
         | MysqlGtidEvent | PreviousGtidsEvent | TableMapEvent | RowsEvent
         | TransactionPayloadEvent | StopEvent | OtherEvent)
