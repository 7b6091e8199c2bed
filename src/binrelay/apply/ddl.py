"""DDL on the downstream: run once, even across a crash between the DDL and its checkpoint
(the journal and the catalog decide, :mod:`~binrelay.apply.ddl_journal`), with the error
codes a replayed DDL may meet tolerated.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pymysql

from binrelay import failpoints
from binrelay.apply.applier import check_answer, statement_error
from binrelay.apply.changes import TableRef
from binrelay.apply.ddl_journal import (
    EVIDENT,
    SKIP,
    DdlJournal,
    Evidence,
    catalog_print,
    decide,
    earlier_catalog_prints,
    ends_alone,
    evidence,
    evidence_kept,
    evident,
)
from binrelay.apply.downstream import (
    Query,
    ScriptError,
    errno_of,
    escaping_for_applier,
    in_transaction,
    map_error,
    query_rows,
    rollback_quietly,
    run_queries,
    runs_scripts,
    script_packet,
    server_message,
)
from binrelay.apply.sql import (
    Statement,
    ddl_kind,
    quote_ident,
    rename_targets,
    snippet,
)
from binrelay.apply.statement_sql import reset_statements, sets_pseudo_thread
from binrelay.errors import (
    DownstreamConnectionError,
    DownstreamDdlError,
    DownstreamError,
    DownstreamRowError,
    DownstreamSchemaError,
)

log = logging.getLogger(__name__)


class LeftContext:
    """What a driver's connection owes before anything else runs on it: the reset after a
    DDL ran in its upstream context (the next DDL's script leads with it, a round trip per
    DDL saved), and, with ``ahead``, the DDL sent ahead (:class:`DdlsAhead`).  Anything
    else run on the connection must :meth:`settle` it first."""

    def __init__(self, ahead: int = 0, max_packet: int | None = None,
                 kept_apart: Callable[[TableRef], bool] = lambda _table: False) -> None:
        self.pending: list[str] = []
        self.ahead = DdlsAhead(ahead, max_packet) if ahead > 0 else None
        #: Tables whose rows are never sent ahead: those not known to be transactional
        #: (statements after one refused in a script have run, and stay in such a table).
        self.kept_apart = kept_apart
        #: What is to run after DDL on the settled connection, in order (bookkeeping that
        #: commits with the next DDL's journal row or the checkpoint).
        self.followups: list[Callable[[Any], None]] = []

    def take(self) -> list[str]:
        pending, self.pending = self.pending, []
        return pending

    def finish(self, conn: Any) -> None:
        """The DDL sent ahead run and their answers read; the owed reset still owed."""
        if self.ahead is not None:
            self.ahead.finish(conn)

    def settle(self, conn: Any) -> None:
        self.finish(conn)
        if self.pending:
            with conn.cursor() as cur:
                for sql in self.take():
                    cur.execute(sql)
        if self.followups:
            followups, self.followups = self.followups, []
            with conn.cursor() as cur:
                for followup in followups:
                    followup(cur)


@dataclass(frozen=True, slots=True)
class DdlResult:
    """``applied`` False: the server said the DDL had already happened (``errno``)."""

    applied: bool
    errno: int | None = None
    message: str = ""


def apply_ddl(
    conn: Any, schema: str | None, statement: str, *, replay: bool = True,
    position: tuple[int, ...] | None = None, setup: Sequence[str] = (),
    raw: bytes | None = None, journal: DdlJournal | None = None,
    left: LeftContext | None = None,
) -> DdlResult:
    """Run an upstream DDL statement as is, with ``schema`` as the default database.

    ``setup``: SET statements giving the upstream session's context (sql_mode, time zone,
    character sets, timestamp: ``apply.statement_sql``), run first and undone after;
    ``raw``: the statement's exact bytes in that context's client character set.

    With ``replay`` (the DDL may have run before a crash, which a DDL's implicit commit
    allows), an error that says it already happened counts as done: per statement kind,
    "exists" for CREATE, "unknown"/"doesn't exist"/"can't drop" for DROP, duplicate or
    unknown column/key for ALTER, and a missing source table for RENAME only if every
    renamed-to table exists. Any other error is a DownstreamDdlError.

    ``journal`` (with ``position``): the DDL is journaled before it runs, and a DDL the
    journal shows ran before a crash is not run again (``apply.ddl_journal``).

    ``left``: the reset the connection owes; this DDL's script leads with it and leaves
    the connection owing its own (the caller settles it before anything else).  Without
    it the session is reset here.  With its ``ahead``, an evident DDL of a batch not
    replayed is sent ahead (:class:`DdlsAhead`): applied True then means "sent"; a failure
    raises when its answer is read.
    """
    left = left if left is not None and runs_scripts(conn) else None
    if left is not None and left.ahead is not None and journal is not None \
            and position is not None \
            and _goes_ahead(left.ahead, journal, schema, statement, raw):
        entry = journal.begin_sql(position, EVIDENT, statement, ran=0)
        script = _ddl_script(schema, statement, setup, raw, entry, left.take(), position)
        left.pending = script.reset()
        left.ahead.add(conn, _Ahead.of(script, journal, replay, conn.encoding),
                       (schema, tuple(setup)))
        return DdlResult(True, message="sent ahead")
    if left is not None:
        left.finish(conn)
    if journal is None or position is None:
        if in_transaction(conn):
            rollback_quietly(conn)  # nothing may ride on the DDL's implicit commit
        return _run_ddl(conn, schema, statement, replay=replay, position=position,
                        setup=setup, raw=raw, left=left)
    # Journaled: what the caller's transaction holds (the rows of the batch before this
    # DDL) commits with the journal row, which says so to a replay.
    entry = _ran_before(conn, journal, schema, statement, position, left)
    if entry is None:
        return DdlResult(False, None, "it ran before the crash (DDL journal)")
    key = ".".join(map(str, position))
    # The journal row is committed in the DDL's own round trip (the server runs the script
    # in order, so a crash leaves the same states as two round trips would); apart only
    # where a test crashes between the two.
    together = runs_scripts(conn) and not failpoints.armed("ddl-journaled")
    if not together:
        if left is not None:
            left.settle(conn)
        _commit_entry(conn, entry, statement, position)
        failpoints.hit("ddl-journaled", key)
    try:
        done = _run_ddl(conn, schema, statement, replay=replay, position=position,
                        setup=setup, raw=raw, entry=entry if together else None, left=left)
    except DownstreamError:
        _refused(conn, journal, position)
        raise
    _applied(position)
    return done


def _refused(conn: Any, journal: DdlJournal, position: tuple[int, ...] | None) -> None:
    """The server refused the DDL and undid it: a later run runs it.  On a lost connection
    this fails too, the row stays as written, and it decides then."""
    if position is None:
        return
    with contextlib.suppress(pymysql.MySQLError), conn.cursor() as cur:
        journal.refused(cur, position)
        conn.commit()


def _applied(position: tuple[int, ...] | None) -> None:
    if position is not None:
        failpoints.hit("ddl-applied", ".".join(map(str, position)))


def _ran_before(conn: Any, journal: DdlJournal, schema: str | None, statement: str,
                position: tuple[int, ...], left: LeftContext | None) -> str | None:
    """None when the journal and the catalog show the DDL ran before a crash; otherwise
    the statement that journals it (the caller commits it before the DDL runs)."""
    try:
        if left is not None and (journal.replayed or not evident(statement, schema)):
            left.settle(conn)  # the look-ups below run in the applier's own session
        with conn.cursor() as cur:
            recorded, verdict, superseded = journal.recorded(cur, position) \
                if journal.replayed else (None, None, False)
            if superseded or (verdict == 1 and recorded is not None):
                conn.commit()
                log.debug("DDL ran before the crash (a later DDL of the batch was"
                          " journaled, or the operator said so): not run again", extra={
                              "position": ".".join(map(str, position)),
                              "statement": snippet(statement)})
                return None
            if evident(statement, schema):
                # Run again, the server answers whether it ran: no print (most of a DDL's
                # cost besides the DDL itself), and the row says "run it".
                return journal.begin_sql(position, EVIDENT, statement, ran=0)
            now = written = catalog_print(cur, statement, schema)
            if journal.replayed:
                if recorded is not None and recorded != now.digest:
                    # Maybe journaled by an earlier release, which printed otherwise:
                    # compare like with like.
                    now = next((earlier for earlier in earlier_catalog_prints(
                        cur, statement, schema) if earlier.digest == recorded), now)
                if decide(statement, recorded, verdict, now, position=position,
                          journal=journal) == SKIP:
                    conn.commit()
                    log.info("DDL ran before the crash: not run again", extra={
                        "position": ".".join(map(str, position)),
                        "statement": snippet(statement)})
                    return None
            return journal.begin_sql(position, written.digest, statement)
    except pymysql.MySQLError as exc:
        rollback_quietly(conn)
        raise _journal_error(exc, statement, position) from None


def _commit_entry(conn: Any, entry: str, statement: str, position: tuple[int, ...]) -> None:
    try:
        with conn.cursor() as cur:
            cur.execute(entry)
        conn.commit()
    except pymysql.MySQLError as exc:
        rollback_quietly(conn)
        raise _journal_error(exc, statement, position) from None


def _journal_error(exc: BaseException, statement: str,
                   position: tuple[int, ...]) -> DownstreamError:
    return map_error(exc, f"journaling DDL {snippet(statement)!r}", position=position)


@dataclass(frozen=True, slots=True)
class _DdlScript:
    """A DDL's script: the owed reset (``lead`` statements), the journal row and its commit
    (up to ``journaled``), the USE (``use`` statements), the context, the DDL."""

    schema: str | None
    statement: str
    position: tuple[int, ...] | None
    script: list[Query]
    lead: int
    journaled: int
    use: int
    #: The DDL runs in an upstream context: the session owes a reset after it.
    context: bool
    #: The script gives the session an upstream session's thread id (its context), or
    #: takes one back (its lead): a reset after it takes it back.
    own_thread: bool = False

    def reset(self) -> list[str]:
        """What the session owes after the script."""
        return reset_statements(pseudo_thread=self.own_thread) if self.context else []


def _ddl_script(schema: str | None, statement: str, setup: Sequence[str], raw: bytes | None,
                entry: str | None, lead: list[str],
                position: tuple[int, ...] | None = None) -> _DdlScript:
    journaled = [*lead, *([entry, "COMMIT"] if entry is not None else ())]
    use = ["USE " + quote_ident(schema)] if schema else []
    # The context's own USE is the one above, which a database-level DDL may do without.
    context = [sql for sql in setup if not sql.upper().startswith("USE ")]
    return _DdlScript(schema, statement, position,
                      [*journaled, *use, *context, statement if raw is None else raw],
                      len(lead), len(journaled), len(use), bool(context),
                      sets_pseudo_thread([*lead, *context]))


def _run_ddl(conn: Any, schema: str | None, statement: str, *, replay: bool,
             position: tuple[int, ...] | None, setup: Sequence[str],
             raw: bytes | None, entry: str | None = None,
             left: LeftContext | None = None) -> DdlResult:
    """USE, the context, the DDL: one round trip on a connection that runs scripts, led by
    the reset ``left`` owes and the journal ``entry`` with its commit when given."""
    # The owed reset first: the journal row's literals are read in the applier's session.
    script = _ddl_script(schema, statement, setup, raw, entry,
                         left.take() if left is not None else [], position)
    with conn.cursor() as cur:
        try:
            run_queries(cur, script.script)
        except ScriptError as exc:
            return _ddl_failed(conn, cur, script, exc.index, exc.error, replay=replay,
                               left=left)
        except BaseException:
            if script.context or script.lead:
                _reset(cur, script)
            raise
        if left is not None:
            left.pending = script.reset()
        elif script.context:
            _reset(cur, script)
    if in_transaction(conn):  # a DDL commits by itself; CREATE TEMPORARY TABLE does not
        conn.commit()
    return DdlResult(True)


def _ddl_failed(conn: Any, cur: Any, script: _DdlScript, index: int, error: BaseException, *,
                replay: bool, left: LeftContext | None) -> DdlResult:
    """Statement ``index`` of ``script`` failed with ``error`` (none after it ran): the DDL
    counted as done (an error a replay may meet) or run without its USE (a database-level
    DDL where its database is gone), or a DownstreamError raised; the session reset, or
    owing its reset to ``left``."""
    kind = ddl_kind(script.statement)
    schema, statement, position = script.schema, script.statement, script.position
    owed = bool(script.context or script.lead)  # in an upstream context until reset
    try:
        try:
            if index < script.lead:
                rollback_quietly(conn)
                raise map_error(error, "resetting the session after a DDL",
                                position=position) from None
            if index < script.journaled:
                rollback_quietly(conn)
                raise _journal_error(error, statement, position) from None
            if index >= script.journaled + script.use:
                raise error
            # A database-level DDL may run where its database is gone (or not yet made).
            if errno_of(error) != 1049 or kind.name not in ("create database",
                                                          "drop database"):
                raise _ddl_error(error, schema, statement, position) from None
            query_rows(cur, script.script[script.journaled + script.use:])
            if left is not None:
                left.pending = script.reset()
                owed = False
        except pymysql.MySQLError as exc:
            if owed:
                owed = not _reset(cur, script)
            code = errno_of(exc)
            if replay and code in kind.done_errors and (
                    code != 1146 or _renamed_already(cur, statement, schema)):
                if owed:  # still in the DDL's context (autocommit on): not to be used
                    raise DownstreamConnectionError(
                        "the session's settings could not be restored after a DDL",
                        hint="the sync goes on from its checkpoint on a new connection",
                        position=position) from None
                return DdlResult(False, code, server_message(exc))
            raise _ddl_error(exc, schema, statement, position) from None
    finally:
        if owed:
            _reset(cur, script)
    if in_transaction(conn):
        conn.commit()
    return DdlResult(True)


#: Bytes an upstream DDL may have to be sent ahead, and of a script of DDL sent ahead: far
#: below any server's max_allowed_packet.
_AHEAD_STATEMENT = 16 * 1024
_AHEAD_SCRIPT = 64 * 1024


def _goes_ahead(ahead: DdlsAhead, journal: DdlJournal, schema: str | None, statement: str,
                raw: bytes | None) -> bool:
    """Whether the DDL may be sent ahead: evident (its replay needs no catalog print taken
    after the DDL before it), in a batch that is not a replay (whose look-ups of the
    journal need the DDL before done), with no failpoint between its journal row and it,
    and text that ends where it does in a script that goes on after it."""
    size = len(raw) if raw is not None else len(statement) * 4
    return (not journal.replayed and size <= min(_AHEAD_STATEMENT, ahead.script_bytes // 2)
            and not failpoints.armed("ddl-journaled") and evident(statement, schema)
            and _plain(statement, raw) and ends_alone(statement))


def _plain(statement: str, raw: bytes | None) -> bool:
    """Whether the statement is ASCII, which every client character set reads alike: in
    gbk, big5 or sjis a quote or a backtick byte may be the second half of a character,
    where the text as decoded shows none (so :func:`ends_alone` could not tell)."""
    return raw.isascii() if raw is not None else statement.isascii()


#: The timestamp a context sets (``statement_sql.context_statements``: the first of the
#: session's variables in its last SET, after those of the statement alone).
_TIMESTAMP = re.compile(r"@@session\.timestamp = [0-9.]+")


def _retimed(before: tuple[str | None, tuple[str, ...]],
             now: tuple[str | None, tuple[str, ...]], full: _DdlScript) -> _DdlScript | None:
    """The script of a DDL run right after another whose default database and context
    (``before``) are its own (``now``) but for the timestamp: the journal row (written at
    the server's time, its literals the same in any session: ``DdlJournal.begin_sql``), then
    the statement's own variables (LAST_INSERT_ID, INSERT_ID, the RAND seeds, user
    variables) and timestamp, the DDL.  None when it is not so (a context of more
    statements, whose string user variables go by collation_connection, is set in full)."""
    (schema, setup), (schema_now, setup_now) = before, now
    if schema != schema_now or not setup_now or len(setup_now) != len(setup) \
            or any(not sql.startswith("USE ") for sql in setup_now[:-1]):
        return None
    if [_TIMESTAMP.sub("", sql) for sql in setup] != [_TIMESTAMP.sub("", sql)
                                                     for sql in setup_now]:
        return None
    last = setup_now[-1]
    timed = _TIMESTAMP.search(last)
    if not last.startswith("SET ") or timed is None:
        return None
    journaled = full.script[full.lead:full.journaled]  # the journal row and COMMIT, or none
    if any(not isinstance(sql, str) or not sql.isascii() for sql in journaled):
        return None  # the journal's own name would be read in the upstream's charset
    lead = ["SET @@session.timestamp = DEFAULT"] if journaled else []
    return replace(full, script=[*lead, *journaled, last[:timed.end()], full.script[-1]],
                   lead=len(lead), journaled=len(lead) + len(journaled), use=0, context=True)


def _unjournaled(full: _DdlScript) -> _DdlScript:
    """``full`` without its journal row and COMMIT: a DDL whose evidence, and that of the
    DDL run before it since the last journal row, each keeps (``evidence_kept``)."""
    return replace(full, script=[*full.script[:full.lead], *full.script[full.journaled:]],
                   journaled=full.lead)


@dataclass(frozen=True, slots=True)
class _Ahead:
    #: The script as sent: ``full``, or, in the context of the DDL before it, retimed.
    script: _DdlScript
    full: _DdlScript
    journal: DdlJournal
    replay: bool
    encoding: str
    #: ``script`` as bytes (:meth:`as_sent` keeps them in step).
    packet: bytes
    evidence: Evidence

    @classmethod
    def of(cls, script: _DdlScript, journal: DdlJournal, replay: bool,
           encoding: str) -> _Ahead:
        return cls(script, script, journal, replay, encoding,
                   script_packet(script.script, encoding),
                   evidence(script.statement, script.schema))

    def as_sent(self, script: _DdlScript) -> _Ahead:
        return replace(self, script=script, packet=script_packet(script.script,
                                                                 self.encoding))

    @property
    def count(self) -> int:
        return len(self.script.script)

    def again(self) -> _Ahead:
        """As sent in a script of its own (its context and journal row in full)."""
        return self.as_sent(self.full)


@dataclass(frozen=True, slots=True)
class _RowsAhead:
    """Rows between DDL sent ahead (:meth:`DdlsAhead.add_rows`): the owed reset (``lead``
    statements), then each row statement followed by SHOW WARNINGS, so that every answer
    is judged as if the statement had run alone (``applier.check_answer``)."""

    statements: tuple[Statement, ...]
    lead: int
    packet: bytes
    count: int

    def again(self) -> _RowsAhead:
        return self


class DdlsAhead:
    """Evident DDL of a batch that is not a replay, sent to the downstream up to ``limit``
    in one script, each exactly as alone (its owed reset, journal row and COMMIT, USE,
    context, the DDL), while the driver decodes the next ones from the relay: the round
    trips, and the driver's own work between them, leave the DDL's time.

    The server runs a script's statements in order and stops at the first that fails, so
    every state a crash can leave is one that DDL sent one at a time leave too: each DDL's
    journal row committed before it, the DDL done or not, none after a failed one (the
    replay decides as ever; a killed sync's session may finish its script meanwhile: the
    pipeline's lock, ``checkpoint.pipeline_lock``, holds the replay until it has).  A DDL
    that fails is handled as alone (counted as done, or the error raised), and the ones
    after it in its script are sent again.

    A DDL whose upstream context is the one before it but for its timestamp (a migration's
    statements, from one session) is retimed rather than reset and set again: the two SET
    statements of ~30 variables were half of what a DDL cost besides itself.

    A DDL that keeps the evidence of those sent since the last journal row, each keeping
    its own (``ddl_journal.evidence_kept``: CREATE TABLE t, ALTER TABLE t ADD COLUMN c,
    CREATE INDEX i ON t; or DDL on other tables), has none: a replay finds no row for it
    and runs it again, as it runs the one with the row, and the server's answer tells
    each one's outcome.  The row's commit (its fsync, ahead of the DDL's own) was most of
    what a DDL cost besides itself, the driver's share aside."""

    def __init__(self, limit: int, max_packet: int | None = None) -> None:
        self.limit = limit
        #: Bytes of a script: well within the server's max_allowed_packet.
        self.script_bytes = _AHEAD_SCRIPT if max_packet is None else \
            max(1024, min(_AHEAD_SCRIPT, max_packet // 4))
        self._queued: list[_Ahead] = []
        self._flight: list[_Ahead] = []
        self._cur: Any = None
        self._answered = 0  # statements of the script in flight answered so far
        #: The default database and context of the last DDL added, while the session is
        #: sure to be left in it (None once anything else may run on the connection).
        self._context: tuple[str | None, tuple[str, ...]] | None = None
        #: The evidence of the DDL added since the last with a journal row, while nothing
        #: else may have run between them.
        self._run: list[Evidence] = []
        #: Per row statement of the rows in flight, answered: [matched, warnings, listed].
        self._answers: list[list[Any]] = []
        #: Rows in flight whose answers are all read, to be judged once the script is.
        self._answered_rows: _RowsAhead | None = None
        #: Rows sent ahead since the last DDL ran: uncommitted, as they must stay.
        self._rows_open = False

    def add(self, conn: Any, item: _Ahead, context: tuple[str | None, tuple[str, ...]]
            ) -> None:
        if self._queued and sum(len(queued.packet) for queued in self._queued) \
                + len(item.packet) > self.script_bytes:
            self._drain(conn)
            self._send(conn)
        # Decided once nothing can run before it but the DDL added before it.
        kept = self._context is not None and evidence_kept(self._run, item.evidence)
        self._run = [*self._run, item.evidence] if kept else [item.evidence]
        if self._context is not None:
            script = _unjournaled(item.full) if kept else item.full
            script = _retimed(self._context, context, script) or script
            if script is not item.full:
                item = item.as_sent(script)
        self._context = context
        self._queued.append(item)
        if len(self._queued) >= self.limit:
            # The script before this one is answered first: one script in flight at a time.
            self._drain(conn)
            self._send(conn)

    def add_rows(self, conn: Any, left: LeftContext, statements: Sequence[Statement]) -> bool:
        """Rows between DDL of the run (``replay_actions``), sent as the end of a script
        that the DDL queued before them lead, once the script before is answered; the
        driver decodes what follows meanwhile.  False (nothing done) when they are to run
        the ordinary way: a load among them, more than a script holds, bookkeeping owed.

        They stay uncommitted, as rows run alone before a DDL: the next DDL's journal row
        commits them (the DDL after rows has one: a replay skips the rows before its
        batch's last row, which a DDL's implicit commit alone would not tell it), or the
        batch's checkpoint.  Each statement's answer is judged as if it had run alone
        (its SHOW WARNINGS follows it in the script); one that fails (the server ran none
        after it) raises what it raises alone (:meth:`_rows_failed`)."""
        if left.followups or not runs_scripts(conn) or any(
                st.data is not None or (st.table is not None and left.kept_apart(st.table))
                for st in statements):
            return False
        with escaping_for_applier(conn), conn.cursor() as cur:
            texts = [st.sql if st.params is None else cur.mogrify(st.sql, st.params)
                     for st in statements]
        script = [*left.pending]
        for text in texts:
            script += [text, "SHOW WARNINGS"]
        packet = script_packet(script, conn.encoding)
        if len(packet) > self.script_bytes:
            return False
        item = _RowsAhead(tuple(statements), len(left.take()), packet, len(script))
        # The next DDL in its context in full, with a journal row.
        self._context, self._run = None, []
        if self._queued and sum(len(queued.packet) for queued in self._queued) \
                + len(packet) > self.script_bytes:
            self._drain(conn)
            self._send(conn)
        self._queued.append(item)
        self._drain(conn)
        self._send(conn)
        return True

    def finish(self, conn: Any) -> None:
        """Every DDL sent and answered (anything may run on the connection next)."""
        self._context, self._run = None, []
        self._drain(conn)
        while self._queued:
            self._send(conn)
            self._drain(conn)

    def _send(self, conn: Any) -> None:
        """The queued DDL that fit in a script (one at least) sent; the rest stay queued."""
        if not self._queued:
            return
        count, size = 0, 0
        for item in self._queued[:self.limit]:
            size += len(item.packet)
            if count and size > self.script_bytes:
                break
            count += 1
            if isinstance(item, _RowsAhead):
                break  # rows end a script: judged before anything after them is sent
        items, self._queued = self._queued[:count], self._queued[count:]
        self._flight, self._cur, self._answered = items, conn.cursor(), 0
        self._answers, self._answered_rows = [], None
        try:
            self._cur.execute(b";\n".join(item.packet for item in items))
        except pymysql.MySQLError as exc:
            self._failed(conn, exc)
            return
        self._answered = 1
        self._note()
        self._advance()

    def _drain(self, conn: Any) -> None:
        if self._cur is None:
            return
        try:
            while self._flight:
                if not self._cur.nextset():
                    raise DownstreamError("the downstream answered fewer statements than a"
                                          " script of DDL sent ahead holds")
                self._answered += 1
                self._note()
                self._advance()
            if self._cur.nextset():
                raise DownstreamError("the downstream answered more statements than a script"
                                      " of DDL sent ahead holds", hint="report it: a DDL"
                                      " sent ahead was read as several statements")
        except pymysql.MySQLError as exc:
            self._failed(conn, exc)
            return
        self._cur = None
        rows, self._answered_rows = self._answered_rows, None
        if rows is not None:
            self._judge(conn, rows.statements, self._answers)
        elif in_transaction(conn) and not self._rows_open:
            conn.commit()

    def _note(self) -> None:
        """The answer just read, if it is one of rows in flight: a row statement's matched
        rows and warnings, or the SHOW WARNINGS after it."""
        item = self._flight[0] if self._flight else None
        if not isinstance(item, _RowsAhead) or self._answered <= item.lead:
            return
        cur = self._cur
        if (self._answered - item.lead) % 2:
            self._answers.append([int(cur.rowcount), cur._result.warning_count, ()])
        elif self._answers[-1][1]:
            self._answers[-1][2] = tuple(cur.fetchall())

    def _advance(self) -> None:
        """The first DDL in flight ran once its script's last statement is answered."""
        while self._flight and self._answered >= self._flight[0].count:
            item = self._flight.pop(0)
            self._answered -= item.count
            if isinstance(item, _RowsAhead):
                self._answered_rows, self._rows_open = item, True
            else:
                self._rows_open = False  # (its journal row's COMMIT, or the DDL itself)
                _applied(item.script.position)

    def _failed(self, conn: Any, error: BaseException) -> None:
        """Statement ``_answered`` of the script in flight failed: the server ran none
        after it.  Its DDL is handled as alone; the ones after it are sent again."""
        cur, flight = self._cur, self._flight
        self._cur, self._flight, self._context, self._run = None, [], None, []
        if not flight:  # an answer after the script's last: a statement read as two
            self._queued = []
            raise DownstreamError("the downstream answered more statements than a script of"
                                  f" DDL sent ahead holds: {server_message(error)}",
                                  hint="report it: a DDL sent ahead was read as several"
                                       " statements")
        item, *rest = flight
        if isinstance(item, _RowsAhead):
            raise self._rows_failed(conn, item, error) from None
        # The session is reset below: no DDL after it may count on its context.
        self._queued = [other.again() for other in [*rest, *self._queued]]
        script = item.script
        try:
            _ddl_failed(conn, cur, script, self._answered, error, replay=item.replay,
                        left=None)
        except BaseException as exc:
            self._queued = []  # none may run after a refused DDL
            if isinstance(exc, DownstreamError):
                _refused(conn, item.journal, script.position)
            raise
        _applied(script.position)

    def _judge(self, conn: Any, statements: Sequence[Statement],
               answers: list[list[Any]]) -> None:
        """Each row statement's answer judged as if it had run alone; the first refused
        stops the batch (nothing queued runs after it: a DDL's journal row would commit
        the rows)."""
        try:
            with conn.cursor() as cur:
                for st, (matched, warnings, listed) in zip(statements, answers, strict=True):
                    check_answer(cur, st, matched, warnings, listed)
        except BaseException:
            self._queued = []
            raise

    def _rows_failed(self, conn: Any, item: _RowsAhead, error: BaseException
                     ) -> BaseException:
        """Statement ``_answered`` of ``item`` failed (none after it ran): those before it
        judged, then what it raises alone (a deadlock as it is: the server rolled the
        transaction back, the batch runs again).  It is not run again here: a retryable
        error undid the rows before it too."""
        self._queued = []
        index = self._answered - item.lead
        try:
            if index >= 0:
                done = index // 2  # (an odd index: the SHOW WARNINGS after statement done)
                self._judge(conn, item.statements[:done], self._answers[:done])
        finally:
            rollback_quietly(conn)
        if index < 0:
            return map_error(error, "resetting the session before rows between DDL")
        return statement_error(item.statements[index // 2], error,
                               "reading a row statement's warnings" if index % 2 else
                               "replaying a transaction in order", None)


def _reset(cur: Any, script: _DdlScript) -> bool:
    """The applier's own session settings back after ``script``; False if the server could
    not be told."""
    try:
        for sql in reset_statements(pseudo_thread=script.own_thread):
            cur.execute(sql)
    except pymysql.MySQLError:
        return False
    return True


def _renamed_already(cur: Any, statement: str, schema: str | None) -> bool:
    targets = rename_targets(statement, schema)
    if not targets:
        return False
    for target in targets:
        cur.execute("SELECT 1 FROM information_schema.TABLES"
                    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (target.schema, target.table))
        if cur.fetchone() is None:
            return False
    return True


def _ddl_error(exc: BaseException, schema: str | None, statement: str,
               position: tuple[int, ...] | None) -> DownstreamError:
    mapped = map_error(exc, f"running DDL {snippet(statement)!r} in schema {schema!r}",
                        position=position)
    if type(mapped) in (DownstreamError, DownstreamSchemaError, DownstreamRowError):
        return DownstreamDdlError(mapped.reason, position=position, errno=mapped.errno)
    return mapped


