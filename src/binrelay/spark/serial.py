"""Driver side: a relay range replayed as it is, event by event, in relay order.

Used for what the concurrent apply cannot reorder: DDL, transactions that hold statements
(statement-format or MIXED DML, ``CREATE TABLE ... SELECT``), committed XA transactions, and
every transaction in ``[sync] mode = "strict"``.  Each statement runs with the session
context its Query event carries (default database, sql_mode, time zone, character sets,
timestamp, INSERT_ID / LAST_INSERT_ID, RAND seeds, user variables), as a replica's SQL
thread runs it; row events become one statement per row, in order.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, NamedTuple

from binrelay.apply.catalog import TableRules
from binrelay.apply.changes import Change
from binrelay.apply.positional import complete
from binrelay.apply.replay import Action, Load, SessionStatement
from binrelay.apply.sql import (
    replica_side_event,
    snippet,
    start_transaction_clause,
    statement_body,
)
from binrelay.apply.statement_sql import context_statements, runs_as_logged
from binrelay.binlog import constants as c
from binrelay.binlog.events import (
    DeleteFileEvent,
    ExecuteLoadQueryEvent,
    FormatDescription,
    FormatDescriptionEvent,
    IntvarEvent,
    LoadBlockEvent,
    MariadbGtidEvent,
    MysqlGtidEvent,
    QueryEvent,
    RandEvent,
    UserVarEvent,
    XidEvent,
)
from binrelay.binlog.framing import iter_events
from binrelay.binlog.statement import MARIADB_SQL_MODES
from binrelay.binlog.txn import (
    ends_transaction,
    is_rollback,
    is_savepoint_statement,
    is_transaction_control,
)
from binrelay.errors import (
    ApplyError,
    NamelessRowsError,
    RelayDirError,
    UnfaithfulApplyError,
)
from binrelay.position import SubdirName, binlog_sort_key
from binrelay.relay.scan import parse_fde, read_fde_event
from binrelay.rows.decoder import EventDecoder, image_decoders
from binrelay.rows.events import NO_FOREIGN_KEY_CHECKS_F, RowsEvent
from binrelay.spark.compact import table_shape
from binrelay.spark.planning import Segment

log = logging.getLogger(__name__)

#: Statements that do not commit by themselves (the others are DDL and do).
_DML_WORDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD", "SELECT", "CALL",
                        "DO", "SET", "WITH", "VALUES", "TABLE", "HANDLER", "EXECUTE"})


#: Events a statement-by-statement replay has no way to apply: an INCIDENT says events are
#: lost.
_CANNOT_REPLAY = {
    c.INCIDENT_EVENT: "an INCIDENT event (the upstream lost events here)",
}

#: What a replayed LOAD DATA says in place of its file-name part, by duplicate handling:
#: the file is the one the relay log carries, sent from memory (``sqlclient``), so LOCAL.
_LOAD_DUPLICATES = {0: b"", 1: b" IGNORE", 2: b" REPLACE"}


#: What a LOAD DATA LOCAL makes warnings of where the upstream's (a file on the server)
#: stopped, unless the statement said IGNORE: a key another row has (unless it said
#: REPLACE), a missing parent row, a failed CHECK; under STRICT_ALL_TABLES, a value that
#: does not convert or a row short of a column without default (under STRICT_TRANS_TABLES
#: alone a non-transactional table warns of them too, and loads on; a transactional one's
#: load failed, and was not logged).
_DUPLICATE = frozenset({1062})
_REFUSED = frozenset({1452, 4025})
_CONVERSION = frozenset({1261, 1262, 1263, 1264, 1265, 1292, 1364, 1366, 1406})
_STRICT_ALL = 1 << MARIADB_SQL_MODES.index("STRICT_ALL_TABLES")  # (MySQL's bit too)


#: A statement-format LOAD DATA's file is held in memory up to this size, and beyond it in
#: a temporary file (0600, unlinked as made: nothing is left after a crash): a load may be
#: gigabytes, which the driver must not hold.
LOAD_IN_MEMORY = 64 << 20


def load_file() -> IO[bytes]:
    """Where a LOAD DATA's file is gathered as its blocks arrive (:data:`LOAD_IN_MEMORY`)."""
    return tempfile.SpooledTemporaryFile(max_size=LOAD_IN_MEMORY)


def _drop_file(files: dict[int, IO[bytes]], file_id: int) -> None:
    file = files.pop(file_id, None)
    if file is not None:
        file.close()


def _load(ev: ExecuteLoadQueryEvent, files: dict[int, IO[bytes]], position: tuple[int, ...]
          ) -> tuple[bytes, Load]:
    """The LOAD DATA statement as a replica's applier runs it, its file-name part (from the
    name to ``INTO``) replaced by the file the relay log carries, and that file."""
    if ev.error_code:
        # Part of it done upstream (a non-transactional table): LOCAL cannot stop where the
        # upstream stopped.
        raise UnfaithfulApplyError(
            f"statement-format LOAD DATA {snippet(ev.query, 60)!r} failed part way upstream"
            f" (error {ev.error_code})", position=position,
            hint="resynchronise the table it loads from the upstream past this position")
    data = files.pop(ev.file_id, None)
    if data is None:
        raise _no_load_file(ev.file_id, position)
    name = f"binrelay-load-{'-'.join(map(str, position))}"
    raw = ev.raw_query
    statement = (raw[:ev.fn_start] + b" LOCAL INFILE '" + name.encode() + b"'"
                 + _LOAD_DUPLICATES[ev.dup_handling] + b" INTO" + raw[ev.fn_end:])
    stops: frozenset[int] = frozenset()
    if ev.dup_handling != 1:
        stops = _REFUSED | (_DUPLICATE if ev.dup_handling == 0 else frozenset()) | (
            _CONVERSION if (ev.status.sql_mode or 0) & _STRICT_ALL else frozenset())
    return statement, Load(name, data, stops)


#: Temporary tables do not end a transaction.
_TEMPORARY = re.compile(r"(?:CREATE\s+(?:OR\s+REPLACE\s+)?|DROP\s+)TEMPORARY\b", re.IGNORECASE)


#: What a downstream session without ``pseudo_thread_id`` cannot keep apart for each
#: upstream session: its temporary tables, its CONNECTION_ID().
_CREATE_TEMPORARY = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?TEMPORARY\b", re.IGNORECASE)
_CONNECTION_ID = re.compile(r"\bCONNECTION_ID\s*\(", re.IGNORECASE)


def creates_temporary(statement: str) -> bool:
    return _CREATE_TEMPORARY.match(statement_body(statement).lstrip(" \t\r\n(")) is not None


def needs_own_thread(statement: str) -> bool:
    """Whether ``statement`` makes a temporary table or reads ``CONNECTION_ID()``: replayed
    without the upstream session's ``pseudo_thread_id`` it would meet other sessions'
    temporary tables of the same name, or read the applier's id."""
    return creates_temporary(statement) or _CONNECTION_ID.search(statement) is not None


def commits_implicitly(statement: str) -> bool:
    """Whether ``statement`` is a DDL (it commits by itself): its first word, past leading
    comments (a client's ``/* ... */ UPDATE`` is DML), is no DML's, and it is not on a
    temporary table."""
    body = statement_body(statement).lstrip(" \t\r\n(")
    words = body.split(None, 1)
    if not words or words[0].upper() in _DML_WORDS:
        return False
    return _TEMPORARY.match(body) is None


def _replica_side(text: str, raw: bytes) -> tuple[str, bytes]:
    """``CREATE EVENT`` / ``ALTER EVENT`` made ``DISABLE ON SLAVE`` in the statement itself
    (``sql.replica_side_event``), as a replica's SQL thread makes them: an event created
    enabled runs at once downstream, before any later statement could disable it.  The
    bytes are edited alike when they are the text's UTF-8, or ASCII up to the last edit;
    otherwise left as they are (the replay disables the event right after it runs:
    ``replay._replica_side_disabled``)."""
    edits = replica_side_event(text)
    if edits is None:
        return text, raw
    edited = _edit(text, edits)
    # (The text is the bytes read as UTF-8, any other byte kept as an escape.)
    if raw == text.encode("utf-8", "surrogateescape"):
        return edited, edited.encode("utf-8", "surrogateescape")
    last = max(end for _start, end, _text in edits)
    if text[:last].isascii() and raw[:last].isascii():
        return edited, _edit(raw.decode("latin-1"), edits).encode("latin-1")
    log.warning("an event's statement could not be made DISABLE ON SLAVE before it runs:"
                " it is disabled right after", extra={"statement": snippet(text, 80)})
    return text, raw


def _edit(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, insert in reversed(edits):
        text = text[:start] + insert + text[end:]
    return text


class SessionEnds:
    """Where the upstream's sessions, and their temporary tables, ended, as a replica's SQL
    thread tells it: the upstream's first binlog after a start (its header has a creation
    time), and, here, the relay of another upstream (a switch: its sessions' thread ids are
    not the old one's).  Each relay file's header is read once."""

    def __init__(self, relay_dir: Path) -> None:
        self.relay_dir = relay_dir
        self._seen: set[Path] = set()
        self._subdir: str | None = None

    def reached(self, segments: list[Segment]) -> Path | None:
        """The first file of ``segments``, not met before, where that is so, if any."""
        found = None
        for segment in segments:
            path = self.relay_dir / segment.subdir / segment.file
            if path in self._seen:
                continue
            self._seen.add(path)
            switched = self._subdir not in (None, segment.subdir)
            self._subdir = segment.subdir
            try:
                fde = parse_fde(read_fde_event(path))
            except FileNotFoundError:
                continue  # (purged: the batch's own read of it says so)
            if found is None and (switched or (fde is not None and fde.create_timestamp)):
                found = path
        return found


class FileReader(NamedTuple):
    """A relay file as a replay reads it: its FORMAT_DESCRIPTION_EVENT (bytes, what it
    says) and an event decoder that has read it, for the file's segments in relay order
    (each starts at a transaction's start, where the decoder holds no table map)."""

    fde: FormatDescription
    decoder: EventDecoder
    mariadb: bool
    version: str | None


#: The readers of the relay files one replay reads (a barrier batch: a segment per DDL,
#: each of which read its file's header and made a decoder), kept by the caller of
#: :func:`segment_actions` for that replay only, so that no file made again under the same
#: name meanwhile can be served an old header.
Headers = dict[Path, FileReader]


def _reader(path: Path, headers: Headers | None) -> FileReader:
    """The relay file's header, read, and a decoder that has read it."""
    found = None if headers is None else headers.get(path)
    if found is not None:
        return found
    try:
        raw = read_fde_event(path)
    except FileNotFoundError:
        raise RelayDirError(f"relay file {path} is gone (purged?) but a batch still needs it",
                            hint="register the pipeline as a relay consumer so purge keeps "
                                 "it") from None
    fde = None if raw is None else parse_fde(raw)
    if raw is None or fde is None:
        raise RelayDirError(f"relay file {path} has no valid binlog header")
    decoder = EventDecoder(path=str(path))
    mariadb, version = True, None
    for ev in decoder.feed(raw, 4):
        if isinstance(ev, FormatDescriptionEvent):
            mariadb, version = ev.fde.is_mariadb, ev.fde.server_version
    reader = FileReader(fde, decoder, mariadb, version)
    if headers is not None:
        headers[path] = reader
    return reader


def _no_load_file(file_id: int, position: tuple[int, ...]) -> UnfaithfulApplyError:
    return UnfaithfulApplyError(
        f"a statement-format LOAD DATA whose file (id {file_id}) does not start in its"
        " transaction", position=position,
        hint="the relay log is not as the upstream wrote it; check it with mariadb-binlog"
             " and resynchronise the downstream past this position")


#: The savepoint a transaction the upstream rolled back is replayed after, and rolled back
#: to (:func:`rolled_back`).
ROLLED_BACK = b"binrelay_rolled_back"


def rolled_back(actions: list[Action], position: tuple[int, ...]) -> list[Action]:
    """A transaction that ended in ROLLBACK upstream, as a replica's SQL thread runs it:
    its actions between a savepoint and a rollback to it, so that its transactional changes
    are undone and only what no rollback undoes stays (non-transactional tables, temporary
    tables made), while the replay's own transaction (earlier transactions of the batch,
    the checkpoint) goes on."""
    if not actions:
        return actions
    for action in actions:
        if isinstance(action, SessionStatement) and \
                is_savepoint_statement(action.raw[:32]) and ROLLED_BACK in action.raw.lower():
            raise UnfaithfulApplyError(
                f"a rolled-back transaction uses the savepoint name binrelay replays it"
                f" with ({snippet(action.text, 60)!r})", position=action.position,
                hint="resynchronise the tables it changes from the upstream past this"
                     " position")
    start = actions[0].position
    return [SessionStatement(start, "", b"SAVEPOINT " + ROLLED_BACK,
                             "SAVEPOINT " + ROLLED_BACK.decode(), (), False),
            *actions,
            SessionStatement(position, "", b"ROLLBACK TO SAVEPOINT " + ROLLED_BACK,
                             "ROLLBACK TO SAVEPOINT " + ROLLED_BACK.decode(), (), False)]


def segment_actions(relay_dir: Path, segment: Segment, rules: Callable[[], TableRules],
                    headers: Headers | None = None, *, pseudo_thread: bool = False,
                    committed_to: tuple[int, ...] | None = None,
                    read_columns: Callable[[], TableRules] | None = None,
                    ) -> Iterator[tuple[int | None, str | None, list[Action]]]:
    """The segment's transactions, each as ``(end offset, GTID, actions in relay order)``;
    ``rules``: the catalog's write rules as they stand; ``headers``: the relay files already
    read in this replay (``_reader``); ``pseudo_thread``: the downstream session may take
    each upstream session's thread id (``context_statements``); without it, a statement
    that :func:`needs_own_thread` stops the replay with one line.

    Rows that follow a DDL in its own transaction (a row-format ``CREATE TABLE ... SELECT``)
    are written to the table that DDL made, so the DDL and what came before it are yielded
    first, with ``None`` for an end: the caller runs them and brings the rules up to date
    before the rest of the transaction is decoded by them.

    ``committed_to``: the replay skips the transactions before that position (they were
    committed with a DDL's journal row); their rows are not read here, as the tables they
    were logged for may have been changed since by that DDL (rows logged without column
    names are read by the downstream's table as it is).

    ``read_columns``: called when rows logged without column names meet rules that hold no
    tables' columns; returns the rules with them, read then (so the replay goes on in its
    session, with its temporary tables).  Without it, :class:`NamelessRowsError` stops the
    replay."""
    path = relay_dir / segment.subdir / segment.file
    fde, decoder, mariadb, version = _reader(path, headers)
    seq = SubdirName.parse(segment.subdir).seq
    file_no = binlog_sort_key(segment.file)[1]
    now = rules()
    after_ddl = False  # the actions end with a DDL
    shapes: dict[int, Any] = {}
    actions: list[Action] = []
    gtid: str | None = None
    intvars: list[IntvarEvent] = []
    rand: RandEvent | None = None
    user_vars: list[UserVarEvent] = []
    files: dict[int, IO[bytes]] = {}  # LOAD DATA files by id, as their blocks arrive
    with open(path, "rb") as f, contextlib.ExitStack() as left:
        # (A file no statement took is closed here; one a statement took goes with its
        # action, closed once that is dropped.)
        left.callback(lambda: [file.close() for file in files.values()])
        for pos, raw in iter_events(f, segment.start, segment.stop,
                                    checksum_alg=fde.checksum_alg, path=str(path)):
            row = 0
            for ev in decoder.feed(raw, pos):
                if ev.header.flags & c.LOG_EVENT_RELAY_LOG_F:
                    continue  # the relay's own filler for a hole: not the upstream's
                if isinstance(ev, MariadbGtidEvent | MysqlGtidEvent):
                    gtid = ev.gtid
                elif isinstance(ev, IntvarEvent):
                    intvars.append(ev)
                elif isinstance(ev, RandEvent):
                    rand = ev
                elif isinstance(ev, UserVarEvent):
                    user_vars.append(ev)
                elif isinstance(ev, LoadBlockEvent):
                    if ev.begins:
                        _drop_file(files, ev.file_id)
                        files[ev.file_id] = load_file()
                    elif ev.file_id not in files:
                        raise _no_load_file(ev.file_id, (seq, file_no, pos))
                    try:
                        files[ev.file_id].write(ev.data)
                    except OSError as exc:
                        raise ApplyError(
                            f"cannot gather a statement-format LOAD DATA's file in"
                            f" {tempfile.gettempdir()}: {exc.strerror or exc}",
                            position=(seq, file_no, pos),
                            hint="free space there, or point TMPDIR at a directory with"
                                 " room for the file, and run the sync again") from None
                elif isinstance(ev, DeleteFileEvent):
                    _drop_file(files, ev.file_id)  # the LOAD DATA failed upstream
                elif ev.header.event_type in _CANNOT_REPLAY:
                    raise UnfaithfulApplyError(
                        f"{_CANNOT_REPLAY[ev.header.event_type]} in the relay log",
                        position=(seq, file_no, pos),
                        hint="binrelay cannot apply it as a replica would; resynchronise the"
                             " downstream from the upstream past this position")
                elif isinstance(ev, QueryEvent):
                    prefix = ev.raw_query[:32]
                    if is_savepoint_statement(prefix):
                        actions.append(SessionStatement((seq, file_no, pos, 0), ev.schema,
                                                        ev.raw_query, ev.query, (), False))
                    elif not is_transaction_control(prefix) and runs_as_logged(ev.status):
                        # (Not ``raw``: that is the event's, whose end a COMMIT's gives.)
                        query, text = ev.raw_query, ev.query
                        load = None
                        if isinstance(ev, ExecuteLoadQueryEvent):
                            query, load = _load(ev, files, (seq, file_no, pos))
                            text = query.decode("utf-8", "surrogateescape")
                        cut = start_transaction_clause(query)
                        if cut:
                            query, text = query[:-cut], text[:-cut]
                        after_ddl = commits_implicitly(text)
                        if after_ddl:
                            text, query = _replica_side(text, query)
                        if not pseudo_thread and needs_own_thread(text):
                            raise UnfaithfulApplyError(
                                f"statement {snippet(text, 60)!r} needs its upstream"
                                " session's thread id downstream (temporary tables of"
                                " several sessions, CONNECTION_ID()), which the apply user"
                                " may not set", position=(seq, file_no, pos),
                                hint="let the [to] user set pseudo_thread_id, as a"
                                     " replica's applier does (MariaDB: GRANT BINLOG REPLAY"
                                     " ON *.*, SUPER before 10.5.2; MySQL:"
                                     " SESSION_VARIABLES_ADMIN), then sync again")
                        setup = context_statements(
                            ev.status, schema=ev.schema, timestamp=ev.header.timestamp,
                            thread_id=ev.thread_id, intvars=tuple(intvars), rand=rand,
                            user_vars=tuple(user_vars), mariadb_upstream=mariadb,
                            upstream_version=version, autocommit=after_ddl,
                            pseudo_thread=pseudo_thread,
                            suppress_use=bool(ev.header.flags & c.LOG_EVENT_SUPPRESS_USE_F))
                        actions.append(SessionStatement(
                            (seq, file_no, pos, 0), ev.schema, query, text, tuple(setup),
                            after_ddl, tuple(v.name for v in user_vars), ev.error_code, load))
                    intvars, rand, user_vars = [], None, []
                    if is_rollback(prefix):
                        actions = rolled_back(actions, (seq, file_no, pos, 0))
                    if ends_transaction(prefix):
                        yield pos + len(raw), gtid, actions
                        actions, gtid, after_ddl = [], None, False
                elif isinstance(ev, RowsEvent):
                    if committed_to is not None and (seq, file_no, pos) < committed_to[:3]:
                        continue
                    if after_ddl:
                        yield None, gtid, actions
                        actions, now, after_ddl = [], rules(), False
                        shapes.clear()
                    cached = shapes.get(id(ev.table))
                    if cached is None or cached[0] is not ev.table:
                        # (Completed here, by the rules after the DDL before it: the
                        # decoder read its table map before that DDL ran.)
                        try:
                            named = complete(ev.table, now)
                        except NamelessRowsError:
                            if read_columns is None:
                                raise
                            now = read_columns()
                            shapes.clear()
                            named = complete(ev.table, now)
                        cached = (ev.table, named, *table_shape(named, now))
                        shapes[id(ev.table)] = cached
                    _t, named, (ref, columns, key), convert, traits = cached
                    fk = not ev.flags & NO_FOREIGN_KEY_CHECKS_F
                    if named is not ev.table:
                        first, second = image_decoders(
                            named, ev.op, ev.columns_present, ev.columns_present_after,
                            ev.partial_json)
                        ev = replace(ev, table=named, decode_first=first, decode_second=second)
                    for change in ev.rows():
                        before, after = convert(change.before), convert(change.after)
                        actions.append(Change(ref, change.op, columns, key, before, after,
                                              (seq, file_no, pos, row), fk, **traits))
                        row += 1
                elif isinstance(ev, XidEvent) or \
                        ev.header.event_type == c.XA_PREPARE_LOG_EVENT:
                    yield pos + len(raw), gtid, actions
                    actions, gtid, after_ddl = [], None, False
    if actions or gtid is not None:
        yield segment.stop, gtid, actions

