"""The binlog's events as frozen dataclasses: the one event model.

Every event keeps its :class:`EventHeader` (``header.log_pos`` is the upstream end position,
``header.event_size`` its size).  :mod:`binrelay.binlog.parse` makes them from bytes
(``parse``, and the few field parsers the relay's hot path uses); :mod:`binrelay.rows` adds
the events that need a table's schema to read: TABLE_MAP and the rows events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from binrelay.binlog import constants as c
from binrelay.binlog.statement import QueryStatus, UserVar, parse_status_vars
from binrelay.errors import BinlogFormatError


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
class ExecuteLoadQueryEvent(QueryEvent):
    """EXECUTE_LOAD_QUERY: a statement-format ``LOAD DATA``, whose file the BEGIN_LOAD_QUERY
    and APPEND_BLOCK events of ``file_id`` before it carry.  ``raw_query[fn_start:fn_end]``
    is the part from the file's name to ``INTO`` (``LOCAL``, ``INFILE '...'``, ``REPLACE``
    or ``IGNORE``) that a replayer replaces with its own file; ``dup_handling``: 0 stop on a
    duplicate key, 1 ignore it, 2 replace the row."""

    file_id: int = 0
    fn_start: int = 0
    fn_end: int = 0
    dup_handling: int = 0


@dataclass(frozen=True, slots=True)
class LoadBlockEvent:
    """BEGIN_LOAD_QUERY (``begins``) or APPEND_BLOCK: a block of a ``LOAD DATA`` file."""

    header: EventHeader
    file_id: int
    data: bytes = field(repr=False)
    begins: bool


@dataclass(frozen=True, slots=True)
class DeleteFileEvent:
    """DELETE_FILE: the ``LOAD DATA`` of ``file_id`` failed upstream; its file is dropped."""

    header: EventHeader
    file_id: int


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
    """Any event this module does not interpret (heartbeat, type 100 of Aurora ...): header
    and raw body, passed through."""

    header: EventHeader
    body: bytes = field(repr=False)

    @property
    def type_name(self) -> str:
        return c.event_type_name(self.header.event_type)


#: The events this layer reads whole (rows and TABLE_MAP events are OtherEvent here).
BinlogEvent = (FormatDescriptionEvent | RotateEvent | QueryEvent | LoadBlockEvent
               | DeleteFileEvent | IntvarEvent | RandEvent
               | UserVarEvent | XidEvent | MariadbGtidEvent | MariadbGtidListEvent
               | BinlogCheckpointEvent | AnnotateRowsEvent | RowsQueryEvent | MysqlGtidEvent
               | PreviousGtidsEvent | TransactionPayloadEvent | StopEvent | OtherEvent)
