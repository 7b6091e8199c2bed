"""DDL on the downstream: run once, even across a crash between the DDL and its checkpoint
(the journal and the catalog decide, :mod:`~binrelay.apply.ddl_journal`), with the error
codes a replayed DDL may meet tolerated.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from binrelay import failpoints
from binrelay.apply.ddl_journal import (
    EVIDENT,
    SKIP,
    DdlJournal,
    catalog_print,
    decide,
    earlier_catalog_print,
    evident,
)
from binrelay.apply.downstream import (
    Query,
    ScriptError,
    errno_of,
    in_transaction,
    map_error,
    query_rows,
    rollback_quietly,
    run_queries,
    runs_scripts,
    server_message,
)
from binrelay.apply.sql import (
    ddl_kind,
    quote_ident,
    rename_targets,
    snippet,
)
from binrelay.apply.statement_sql import reset_statements
from binrelay.errors import (
    DownstreamDdlError,
    DownstreamError,
    DownstreamRowError,
    DownstreamSchemaError,
)

log = logging.getLogger(__name__)


class LeftContext:
    """The reset a driver's connection owes after a DDL ran in its upstream context: the
    next DDL's script leads with it (a round trip per DDL saved); anything else run on the
    connection must :meth:`settle` it first."""

    def __init__(self) -> None:
        self.pending: list[str] = []

    def take(self) -> list[str]:
        pending, self.pending = self.pending, []
        return pending

    def settle(self, conn: Any) -> None:
        if self.pending:
            with conn.cursor() as cur:
                for sql in self.take():
                    cur.execute(sql)


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
    it the session is reset here.
    """
    left = left if left is not None and runs_scripts(conn) else None
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
        # The server refused the DDL and undid it: a later run runs it.  On a lost
        # connection this fails too, the row stays as written, and it decides then.
        with contextlib.suppress(pymysql.MySQLError), conn.cursor() as cur:
            journal.refused(cur, position)
            conn.commit()
        raise
    failpoints.hit("ddl-applied", key)
    return done


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
                    earlier = earlier_catalog_print(cur, statement, schema)
                    now = earlier if earlier.digest == recorded else now
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


def _run_ddl(conn: Any, schema: str | None, statement: str, *, replay: bool,
             position: tuple[int, ...] | None, setup: Sequence[str],
             raw: bytes | None, entry: str | None = None,
             left: LeftContext | None = None) -> DdlResult:
    """USE, the context, the DDL: one round trip on a connection that runs scripts, led by
    the reset ``left`` owes and the journal ``entry`` with its commit when given."""
    kind = ddl_kind(statement)
    # The owed reset first: the journal row's literals are read in the applier's session.
    lead = left.take() if left is not None else []
    journaled = [*lead, *([entry, "COMMIT"] if entry is not None else ())]
    use = ["USE " + quote_ident(schema)] if schema else []
    # The context's own USE is the one above, which a database-level DDL may do without.
    context = [sql for sql in setup if not sql.upper().startswith("USE ")]
    script: list[Query] = [*journaled, *use, *context, statement if raw is None else raw]
    owed = bool(context or lead)  # the session is in an upstream context until reset
    with conn.cursor() as cur:
        try:
            try:
                run_queries(cur, script)
            except ScriptError as exc:
                if exc.index < len(lead):
                    rollback_quietly(conn)
                    raise map_error(exc.error, "resetting the session after a DDL",
                                    position=position) from None
                if exc.index < len(journaled):
                    rollback_quietly(conn)
                    raise _journal_error(exc.error, statement, position) from None
                if exc.index >= len(journaled) + len(use):
                    raise exc.error from None
                # A database-level DDL may run where its database is gone (or not yet made).
                if errno_of(exc.error) != 1049 or kind.name not in ("create database",
                                                                  "drop database"):
                    raise _ddl_error(exc.error, schema, statement, position) from None
                query_rows(cur, script[len(journaled) + len(use):])
            if left is not None:
                left.pending = reset_statements() if context else []
                owed = False
        except pymysql.MySQLError as exc:
            if owed:
                owed = not _reset(cur)
            code = errno_of(exc)
            if replay and code in kind.done_errors and (
                    code != 1146 or _renamed_already(cur, statement, schema)):
                return DdlResult(False, code, server_message(exc))
            raise _ddl_error(exc, schema, statement, position) from None
        finally:
            if owed:
                _reset(cur)
    if in_transaction(conn):  # a DDL commits by itself; CREATE TEMPORARY TABLE does not
        conn.commit()
    return DdlResult(True)


def _reset(cur: Any) -> bool:
    """The applier's own session settings back; False if the server could not be told."""
    try:
        for sql in reset_statements():
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


