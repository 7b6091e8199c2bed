"""Whether a DDL ran before a crash, decided from evidence; never by running it twice.

A DDL commits by itself, so it cannot commit together with the checkpoint: a kill -9
between the two leaves its batch in flight with the DDL done, and the replay must not run
it again (``RENAME TABLE a TO tmp, b TO a, tmp TO b`` would swap the tables back; an error
code such as "table exists" cannot tell that case apart).  So before a DDL runs, the
applier commits a journal row holding a fingerprint of the downstream's catalog for
everything the statement names: schemas, tables (their InnoDB table ids and ``SHOW CREATE``
text), views, sequences, routines, events (for a statement on tables: schemas, tables and
views, with the ids only where a RENAME may swap tables; see ``_SEEN_WITHOUT_IDS``).  A
replay of the same batch then decides:

- no row: the crash came before the DDL: run it;
- a row, and the catalog is not as fingerprinted: the DDL ran: do not run it again;
- a row, and the catalog is as fingerprinted: it did not take effect: run it, unless its
  effect is one the catalog does not show (accounts, plugins, servers; a RENAME or an
  EXCHANGE PARTITION of tables with no table id to tell them apart): then stop with one
  line, and the operator's verdict, written into the row, decides;
- a row of an :func:`evident` DDL (no fingerprint, ``ran`` 0): run it; run again, the
  server's own answer says it ran.

Only the batch's last journaled DDL is decided so: a row of a later one proves it ran.  The
rows of a batch go in its last transaction, with the checkpoint.

An evident DDL run right after others (nothing between) that leaves their evidence as it
was, and whose own the next ones leave (:func:`evidence_kept`), needs no row: with none,
a replay runs it, and the server's answer says whether it ran, as for the one with the row.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from binrelay.apply.changes import TableRef
from binrelay.apply.downstream import Query, ScriptError, errno_of, query_rows, run_queries
from binrelay.apply.sql import (
    DEFINER_CLAUSE,
    ddl_kind,
    quote_table,
    rename_targets,
    snippet,
    statement_proper,
)
from binrelay.apply.statement_sql import sql_string
from binrelay.errors import DdlOutcomeUnknownError

__all__ = ["EVIDENT", "RUN", "SKIP", "CatalogPrint", "DdlJournal", "Evidence", "catalog_print",
           "decide", "earlier_catalog_prints", "ends_alone", "evidence", "evidence_kept",
           "evident", "sql_words"]

RUN, SKIP = "run", "skip"

#: Identifiers as a statement may write them: `quoted`, "quoted" (ANSI_QUOTES) or bare.
#: Words of string literals and keywords come along too: they only widen the look-up.
_WORDS = re.compile(r'`((?:[^`]|``)+)`|"((?:[^"\\]|""|\\.)+)"|([0-9A-Za-z_$\u0080-\uffff]+)')
_SYSTEM = frozenset({"information_schema", "performance_schema", "mysql", "sys"})
_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=\d+")

#: DDL whose effect the catalog shows even though ``ddl_kind`` does not name it.
_SEEN_OTHER = re.compile(
    rf"\s*(?:CREATE|ALTER|DROP)\s+(?:OR\s+REPLACE\s+)?(?:{DEFINER_CLAUSE})?"
    r"(?:(?:AGGREGATE\s+)?(?:PROCEDURE|FUNCTION)|EVENT|DATABASE|SCHEMA|VIEW|PACKAGE"
    rf"(?:\s+BODY)?)\b|\s*ALTER\s+(?:ALGORITHM\s*=\s*\w+\s+)?(?:{DEFINER_CLAUSE})?"
    r"(?:SQL\s+SECURITY\s+\w+\s+)?VIEW\b", re.IGNORECASE)
#: DDL that ends in the same state however often it runs.
_REPEATABLE = re.compile(r"\s*(?:GRANT|ANALYZE|OPTIMIZE|REPAIR|CHECK|FLUSH|ALTER\s+SEQUENCE)\b",
                         re.IGNORECASE)
_UDF = re.compile(r"\bSONAME\b", re.IGNORECASE)
#: Kinds (``ddl_kind``) that change tables and indexes only: their print leaves routines and
#: events out.
TABLE_KINDS = frozenset({"create table", "create index", "drop table", "drop index",
                         "alter table", "rename table", "truncate"})
#: Kinds whose effect shows in the tables' definitions, or which, when it does not show
#: (ALTER ... FORCE), ends in the same state if run again: the DDL whose outcome is decided
#: is the batch's last journaled one, so no row after it was applied.  Their print leaves
#: InnoDB's table ids out (a scan of every table in the server, per DDL).  A RENAME may
#: swap tables of the same definition, and a TRUNCATE shows only in the ids; so does an
#: ALTER TABLE ... EXCHANGE PARTITION (:func:`_swaps`).
_SEEN_WITHOUT_IDS = TABLE_KINDS - {"rename table", "truncate"}
_EXCHANGE = re.compile(r"\bEXCHANGE\s+PARTITION\b", re.IGNORECASE)


def _swaps(statement: str, kind: str) -> bool:
    """Whether the DDL may swap tables (or a partition's rows with a table's) and change no
    definition: only InnoDB's table ids tell whether it ran.  An EXCHANGE PARTITION run
    again swaps the rows back."""
    if kind == "rename table":
        return True
    if kind != "alter table":
        return False
    text = sql_words(statement)
    # Text it cannot read for certain: the words as written (a literal may say them too).
    return _EXCHANGE.search(statement if text is None else text) is not None


#: The fingerprint of a journal row written for an :func:`evident` DDL, which has no print
#: (its ``ran`` is 0: "run it", which a release before evident DDL also does with it).
EVIDENT = "-" * 64

#: What :func:`evident` reads past, in one pass left to right as the server lexes (a quote
#: inside a quoted name is not a literal's start): string literals, quoted names (each
#: left as a one-word name) and plain comments (a line comment to its line's end).
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`(?:[^`]|``)+`|/\*.*?\*/"
                    r"|(?:--\s|#)[^\n]*", re.DOTALL)
_ADD_COLUMN = re.compile(r"\bADD\s+COLUMN\s+(?!IF\b)[0-9A-Za-z_$\u0080-\uffff]+", re.IGNORECASE)
_CONDITIONAL = re.compile(r"\bIF\s+EXISTS\b", re.IGNORECASE)
_IF_NOT_EXISTS = re.compile(r"\bIF\s+NOT\s+EXISTS\b", re.IGNORECASE)
_SELECT = re.compile(r"\bSELECT\b", re.IGNORECASE)
#: A query inside a DDL (a SELECT, a table value constructor): it may call a function.
_REACHES = re.compile(r"\b(?:SELECT|VALUES|WITH)\b", re.IGNORECASE)
#: What an ALTER TABLE run again on the table it left may refuse with an error that is not
#: "done" (already versioned, a period there): its print decides.
_VERSIONING = re.compile(r"\b(?:VERSIONING|PERIOD)\b", re.IGNORECASE)
#: A word as a bare name may be written: a renamed-to name read for certain (no comment or
#: literal taken into it) is one.
_BARE = re.compile(r"[0-9A-Za-z_$\u0080-\uffff]+")
_TEMPORARY = re.compile(r"\s*(?:CREATE|DROP)\s+TEMPORARY\b", re.IGNORECASE)
#: An ALTER TABLE's RENAME of the table (not of a column or an index), in :func:`sql_words`.
_TABLE_RENAME = re.compile(r"\bRENAME\s+(?!(?:COLUMN|INDEX|KEY)\b)", re.IGNORECASE)


def sql_words(statement: str) -> str | None:
    """``statement`` with its string literals, quoted names (each left as the one-word name
    ``q``) and plain comments taken out: what is left are its keywords and bare names, for
    a test of which words it has.  None when it cannot be read so for certain (a backslash,
    which may or may not escape a quote; an executable comment ``/*!``)."""
    if "\\" in statement or "/*!" in statement or "/*M!" in statement:
        return None
    return _TOKEN.sub(_masked, statement)


def _masked(token: re.Match[str]) -> str:
    first = token.group()[:1]
    return " ? " if first in "'\"" else " q " if first == "`" else " "


def ends_alone(statement: str) -> bool:
    """Whether ``statement`` ends where its text does when a script goes on after it: no
    semicolon, no line comment (which would take the separator and the next statement
    into it), no quote or block comment left open, nothing :func:`sql_words` cannot read
    for certain.  Closed plain comments (the server's own ``/* generated by server */``)
    may stay."""
    if sql_words(statement) is None:
        return False
    text = _TOKEN.sub(lambda t: " # " if t.group()[:1] in "-#" else _masked(t), statement)
    return not any(mark in text for mark in (";", "#", "--", "/*", "*/", "'", '"', "`"))


def evident(statement: str, schema: str | None) -> bool:
    """Whether the server's own answer tells if ``statement`` (a DDL; ``schema``: its default
    one) ran: run again on the
    catalog it left, it fails with an error its kind counts as done
    (``apply.sql.DdlKind.done_errors``: the table exists, the column is a duplicate, the
    index or table is unknown) and changes nothing, or it changes nothing.  Such a DDL needs
    no catalog print: a replay runs it (the journal row then only says "a later DDL ran").

    Only the batch's last journaled DDL is ever decided so (no row was written after it),
    which is why each kind here is judged on the state it left alone (or that DDL after it
    left which keep its evidence and have no row of their own: :func:`evidence_kept`):

    * CREATE TABLE / CREATE INDEX (not OR REPLACE, not TEMPORARY; not a CREATE TABLE IF
      NOT EXISTS ... SELECT): "exists" (or, IF NOT EXISTS, nothing);
    * DROP TABLE (not TEMPORARY) / DROP INDEX: "unknown" (or, IF EXISTS, nothing);
    * TRUNCATE: an empty table emptied again;
    * RENAME TABLE of one table: its old name is gone (the applier checks the new is there);
    * ALTER TABLE with an ADD COLUMN of a named column and no IF EXISTS clause: the column
      is there, so the whole statement fails (an ALTER is atomic), whatever else it does;
      but for a RENAME of the table that is not its last clause (its table is gone then:
      only a last one's new name is checked).

    Anything else, and anything it cannot read for certain (a backslash, an executable
    comment), is not evident: its print decides.
    """
    statement = statement_proper(statement)
    text = sql_words(statement)
    if text is None:
        return False
    kind = ddl_kind(statement).name
    if kind in ("create table", "drop table"):
        return not _TEMPORARY.match(text) and not (
            _IF_NOT_EXISTS.search(text) and _SELECT.search(text))
    if kind in ("create index", "drop index", "truncate"):
        return True
    if kind == "rename table":
        return "," not in text and _renamed_to_plain(statement, schema)
    if kind == "alter table":
        return _CONDITIONAL.search(text) is None and _ADD_COLUMN.search(text) is not None \
            and _VERSIONING.search(text) is None \
            and (_TABLE_RENAME.search(text) is None or _renamed_to_plain(statement, schema))
    return False


def _renamed_to_plain(statement: str, schema: str | None) -> bool:
    """Whether the names a RENAME (last in the statement) renames to are read for certain,
    as a replay checks that they are there: not a comment or a literal after them."""
    targets = rename_targets(statement, schema)
    return bool(targets) and all(
        _BARE.fullmatch(t.table) and (t.schema is None or _BARE.fullmatch(t.schema))
        for t in targets)


@dataclass(frozen=True, slots=True)
class CatalogPrint:
    """A digest of what the downstream's catalog says about the names in a statement."""

    digest: str
    #: A base table named by the statement has no table id to tell it from another table of
    #: the same definition (not InnoDB, or a server without INNODB_SYS_TABLES).
    unidentified: bool = False


#: Words reserved in every MariaDB and MySQL version that DDL text is full of: written bare
#: (and not after a dot) they cannot name anything, so the print does not look them up.
_RESERVED = frozenset({
    "ADD", "ALTER", "AND", "AS", "BIGINT", "BINARY", "BLOB", "BY", "CASCADE", "CHANGE", "CHAR",
    "CHARACTER", "CHECK", "COLLATE", "COLUMN", "CONSTRAINT", "CREATE", "DECIMAL", "DEFAULT",
    "DELETE", "DOUBLE", "DROP", "EXISTS", "FLOAT", "FOREIGN", "FROM", "FULLTEXT", "GROUP", "IF",
    "IN", "INDEX", "INSERT", "INT", "INTEGER", "INTO", "IS", "KEY", "KEYS", "LIKE", "LONGBLOB",
    "LONGTEXT", "MEDIUMBLOB", "MEDIUMINT", "MEDIUMTEXT", "NOT", "NULL", "ON", "OR", "ORDER",
    "PRIMARY", "REFERENCES", "RENAME", "SELECT", "SET", "SMALLINT", "SPATIAL", "TABLE", "TINYBLOB",
    "TINYINT", "TINYTEXT", "TO", "UNIQUE", "UNSIGNED", "UPDATE", "VALUES", "VARBINARY", "VARCHAR",
    "WHERE", "WITH"})


def statement_words(statement: str, *, names_only: bool = False,
                    qualifiers: bool = True) -> list[str]:
    """Every word of the statement that may be a name (quoted or bare); with ``names_only``
    without the bare ones that cannot be (reserved words, numbers), unless after a dot
    (``db.select`` names a table); without ``qualifiers``, without those right before a
    dot (``db`` of ``db.t``)."""
    words: set[str] = set()
    # Three readings, each where another may go wrong (a quote inside a comment or a
    # literal, read as a quoted name's start, would hide every name up to the next one):
    # quotes as they may be written, with backslash escapes; quoted names as the server
    # lexes them; every bare word, whatever quotes it may be in.
    for match in _WORDS.finditer(statement):
        if not qualifiers and _before_dot(statement, match.end()):
            continue
        quoted, ansi, bare = match.groups()
        if quoted:
            words.add(quoted.replace("``", "`"))
        elif ansi:
            words.add(ansi.replace('""', '"'))
        elif _may_name(statement, match, names_only):
            words.add(bare)
    for token in _TOKEN.finditer(statement):
        first = token.group()[:1]
        if first in '`"' and (qualifiers or not _before_dot(statement, token.end())):
            words.add(token.group()[1:-1].replace(first * 2, first))
    for match in _BARE.finditer(statement):
        # (A quoted qualifier's word ends before its quote.)
        end = match.end() + statement.startswith(("`", '"'), match.end())
        if (qualifiers or not _before_dot(statement, end)) \
                and _may_name(statement, match, names_only):
            words.add(match.group())
    return sorted(words)


def _may_name(statement: str, bare: re.Match[str], names_only: bool) -> bool:
    word = bare.group()
    return not names_only or not (word.upper() in _RESERVED or word.isdigit()) \
        or _after_dot(statement, bare.start())


def _before_dot(text: str, at: int) -> bool:
    while at < len(text) and text[at].isspace():
        at += 1
    return text.startswith(".", at)


#: What an ALTER TABLE may take away or rename (a column, an index, a partition, the
#: table's name), besides adding: words as :func:`sql_words` leaves them.
_TAKES = re.compile(r"\b(?:DROP|CHANGE|RENAME|MODIFY|EXCHANGE|DISCARD|IMPORT|REMOVE"
                    r"|REORGANIZE|COALESCE|TRUNCATE|PARTITIONS?|CONVERT|REPLACE)\b",
                    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the server's answer to an :func:`evident` DDL run again is read from: the
    objects it names (every word that may name a table, a column or an index, casefolded;
    its schemas' names left out), and whether it only adds (a table, a column, an index)
    and takes nothing away, so that its evidence ("it exists") stays what a later DDL that
    also only adds left."""

    names: frozenset[str]
    adds: bool
    #: It may reach objects it does not name (a CREATE TABLE ... SELECT from a view, or
    #: calling a function): run again, it may meet what any later DDL took away.
    reaches: bool = False


def evidence(statement: str, schema: str | None) -> Evidence:
    """The :class:`Evidence` of an :func:`evident` DDL."""
    proper = statement_proper(statement)
    names = frozenset(word.casefold() for word in statement_words(
        statement, names_only=True, qualifiers=False))
    kind = ddl_kind(proper).name
    text = sql_words(proper)
    adds = kind in ("create table", "create index") or (
        kind == "alter table" and text is not None and _TAKES.search(text) is None)
    reaches = text is None or _REACHES.search(text) is not None
    return Evidence(names, adds and evident(statement, schema), reaches)


def evidence_kept(earlier: Sequence[Evidence], later: Evidence) -> bool:
    """Whether an :func:`evident` DDL run right after the DDL of ``earlier`` (evident too,
    run in order, nothing else between) leaves each one's evidence as it was: it names
    none of their objects (and neither it nor they may reach any: a SELECT, whose function
    may write a table a TRUNCATE run again would empty), or it and every one of them that
    it does name (or may reach) only add.  Then
    a replay that runs them all again, from the first, tells each one's outcome from the
    server's answer, and only the first needs a journal row (which also says that the rows
    before it were committed): a later DDL that took away what an earlier one made (CREATE
    t, then RENAME t TO u) would let the earlier one run twice."""
    return all((later.adds and before.adds)
               or not (before.reaches or later.reaches or later.names & before.names)
               for before in earlier)


def statement_names(statement: str, schema: str | None, *, names_only: bool = True
                    ) -> tuple[list[str], list[str]]:
    """The words of ``statement`` that may name an object (:func:`statement_words`), and
    those (with its default ``schema``) that may name a schema: what a look-up of what it
    names starts from."""
    words = statement_words(statement, names_only=names_only)
    return words, sorted({*words, *([schema] if schema else [])} - _SYSTEM)


def _after_dot(text: str, at: int) -> bool:
    at -= 1
    while at >= 0 and text[at].isspace():
        at -= 1
    return at >= 0 and text[at] == "."


def _marks(n: int) -> str:
    return ", ".join(["%s"] * n)


def catalog_print(cur: Any, statement: str, schema: str | None) -> CatalogPrint:
    """The catalog's state for every schema and object the statement can name (for a
    statement of ``TABLE_KINDS``: its schemas, tables and views)."""
    kind = ddl_kind(statement).name
    return _print(cur, statement, schema, routines=kind not in TABLE_KINDS,
                  ids=kind not in _SEEN_WITHOUT_IDS or _swaps(statement, kind),
                  exact_tables=True)


def earlier_catalog_prints(cur: Any, statement: str, schema: str | None
                           ) -> list[CatalogPrint]:
    """The prints earlier releases took, for a journal row one of them wrote: until November
    2026 routines and events for every statement, tables found by a scan; until this one an
    EXCHANGE PARTITION without table ids, which cannot show whether it ran (its print says
    so: ``unidentified``)."""
    prints = [_print(cur, statement, schema, routines=True, ids=True, exact_tables=False)]
    kind = ddl_kind(statement).name
    if kind == "alter table" and _swaps(statement, kind):
        blind = _print(cur, statement, schema, routines=False, ids=False, exact_tables=True)
        prints.append(CatalogPrint(blind.digest, unidentified=True))
    return prints


def _print(cur: Any, statement: str, schema: str | None, *, routines: bool, ids: bool,
           exact_tables: bool) -> CatalogPrint:
    """The facts, looked up in at most three round trips on a connection that runs scripts
    (the look-ups were most of a DDL's cost besides the DDL): the schemas, with the tables
    of the schemas the statement most likely names; then every found table's definition,
    its ids, routines and events."""
    words, candidates = statement_names(statement, schema, names_only=exact_tables)
    if not candidates:
        return CatalogPrint(hashlib.sha256(b"").hexdigest())
    guess = _likely_schemas(statement, schema, candidates) if words and exact_tables else []
    first = query_rows(cur, [(
        "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME"
        " FROM information_schema.SCHEMATA"
        f" WHERE SCHEMA_NAME IN ({_marks(len(candidates))})", candidates),
        *([_tables_query(guess, words, exact_tables)] if guess else [])])
    facts: list[tuple[Any, ...]] = [("db", *row) for row in sorted(first[0])]
    schemas = [row[1] for row in facts]
    if not (schemas and words):
        return _digest(facts, False)
    if guess == schemas:
        tables = sorted(first[1])
    else:
        tables = sorted(query_rows(cur, [_tables_query(schemas, words, exact_tables)])[0])
    stored = [(s, n) for s, n, kind in tables if kind != "VIEW"]
    params = (*schemas, *words)
    second: list[Query] = ["SHOW CREATE TABLE " + quote_table(TableRef(table_schema, name))
                           for table_schema, name, _kind in tables]
    if routines:
        second += [
            ("SELECT ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE, CREATED, LAST_ALTERED,"
             " ROUTINE_DEFINITION FROM information_schema.ROUTINES"
             f" WHERE {_named('ROUTINE', schemas, words)}", params),
            ("SELECT EVENT_SCHEMA, EVENT_NAME, CREATED, LAST_ALTERED, STATUS,"
             " EVENT_DEFINITION FROM information_schema.EVENTS"
             f" WHERE {_named('EVENT', schemas, words)}", params)]
    with_ids = ids and bool(stored)
    if with_ids:
        second.append(_table_ids_query(stored))
    found: list[tuple[Any, ...]] | None = []
    try:
        results = run_queries(cur, second)
    except ScriptError as exc:
        if not (with_ids and exc.index == len(second) - 1
                and errno_of(exc.error) in _NO_IDS):
            raise exc.error from None
        # No INNODB_SYS_TABLES (MySQL 8 names it otherwise): no ids; the rest again.
        results = [*run_queries(cur, second[:-1]), ()]
        found = None
    for (table_schema, name, kind), rows in zip(tables, results, strict=False):
        text = _AUTO_INCREMENT.sub("", str(rows[0][1]))
        facts.append(("table", table_schema, name, kind, text))
    if found is not None and with_ids:
        found = sorted(results[-1])
    unidentified = False
    if found is None:
        unidentified = bool(stored)
    else:
        facts += [("id", *row) for row in found]
        with_id = {(s, n) for s, n, _f, _id in found}
        unidentified = ids and any(s_n not in with_id for s_n in stored)
    if routines:
        at = len(tables)
        facts += [("routine", *row) for row in sorted(results[at], key=repr)]
        facts += [("event", *row) for row in sorted(results[at + 1], key=repr)]
    return _digest(facts, unidentified)


def _digest(facts: list[tuple[Any, ...]], unidentified: bool) -> CatalogPrint:
    digest = hashlib.sha256(repr(facts).encode("utf-8", "surrogateescape")).hexdigest()
    return CatalogPrint(digest, unidentified)


#: A qualifier: a name written right before a dot (``db.t``): the schemas a statement names
#: besides its default one.
_QUALIFIER = re.compile(r'(?:`((?:[^`]|``)+)`|"((?:[^"\\]|""|\\.)+)"|([0-9A-Za-z_$\u0080-\uffff]+))'
                        r"\s*\.(?!\d)")


def _likely_schemas(statement: str, schema: str | None, candidates: list[str]) -> list[str]:
    """The schemas among ``candidates`` that the statement most likely names (its default
    one, and those written before a dot): its tables are looked up in these together with
    the schemas themselves, and again, one round trip more, if the guess was wrong."""
    named = {schema} if schema else set()
    for match in _QUALIFIER.finditer(statement):
        quoted, ansi, bare = match.groups()
        named.add(quoted.replace("``", "`") if quoted else
                  ansi.replace('""', '"') if ansi else bare)
    return sorted(named & set(candidates))


def _tables_query(schemas: list[str], words: list[str], exact_tables: bool) -> Query:
    if exact_tables:
        # One equality per (schema, name): the server opens those tables' definitions only,
        # where an IN list makes it read every table's (milliseconds per thousand tables,
        # per DDL).
        pairs = [(s, w) for s in schemas for w in words]
        return (" UNION ALL ".join(
            "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s" for _ in pairs),
            [p for pair in pairs for p in pair])
    return ("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM"
            f" information_schema.TABLES WHERE {_named('TABLE', schemas, words)}",
            (*schemas, *words))


def _named(prefix: str, schemas: list[str], words: list[str]) -> str:
    return (f"{prefix}_SCHEMA IN ({_marks(len(schemas))})"
            f" AND {prefix}_NAME IN ({_marks(len(words))})")


#: What a server without ``information_schema.INNODB_SYS_TABLES`` (or the right to read
#: it) answers: then there are no table ids.
_NO_IDS = frozenset({1109, 1044, 1142, 1227})


def _table_ids_query(tables: list[tuple[str, str]]) -> Query:
    """``(schema, table, InnoDB name, table id)`` per InnoDB table or partition of
    ``tables``.  A swap of two tables of the same definition shows only here."""
    # InnoDB names its tables in the server's file-name encoding: the server encodes.
    wanted = " UNION ALL ".join(
        "SELECT %s AS s, %s AS n, CONCAT(CAST(CONVERT(%s USING filename) AS BINARY), '/',"
        " CAST(CONVERT(%s USING filename) AS BINARY)) AS f" for _ in tables)
    return (f"SELECT w.s, w.n, t.NAME, t.TABLE_ID FROM ({wanted}) AS w"
            " JOIN information_schema.INNODB_SYS_TABLES AS t ON t.NAME = w.f"
            " OR LEFT(t.NAME, LENGTH(w.f) + 3) = CONCAT(w.f, '#P#')",
            [p for s, n in tables for p in (s, n, s, n)])


def decide(statement: str, recorded: str | None, verdict: int | None, now: CatalogPrint, *,
           position: tuple[int, ...] | None = None, journal: DdlJournal | None = None) -> str:
    """RUN or SKIP a DDL being replayed (see the module's docstring), or raise
    DdlOutcomeUnknownError.  ``recorded``: the journal row's fingerprint (None: no row);
    ``verdict``: the operator's (1 ran, 0 did not)."""
    if recorded is None or verdict == 0:
        return RUN
    if verdict == 1 or recorded != now.digest:
        return SKIP
    proper = statement_proper(statement)
    kind = ddl_kind(proper).name
    seen = (kind != "other" or _SEEN_OTHER.match(proper)) and not _UDF.search(proper)
    if _REPEATABLE.match(proper) or (seen and not (_swaps(proper, kind)
                                                      and now.unidentified)):
        return RUN
    where = "" if journal is None or position is None else journal.row_sql(position)
    raise DdlOutcomeUnknownError(
        f"cannot tell whether DDL {snippet(statement, 60)!r} ran before the crash: the"
        " downstream's catalog looks the same either way", position=position,
        hint=f"check the downstream; if it took effect, UPDATE {where} SET ran = 1, if not"
             " SET ran = 0; then start the sync again")


def position_text(position: tuple[int, ...]) -> str:
    return ".".join(map(str, position))


def _position_of(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@dataclass(frozen=True, slots=True)
class DdlJournal:
    """``<schema>.ddl_journal``: the DDL of the batch in flight, with the fingerprint taken
    right before each ran."""

    schema: str
    pipeline: str
    batch_id: int = 0
    #: The batch may have run before (a replay after a crash): only then can a row of it
    #: be there to read; a batch this process just marked in flight has none.
    replayed: bool = True

    @property
    def table(self) -> TableRef:
        return TableRef(self.schema, "ddl_journal")

    def _t(self) -> str:
        return quote_table(self.table).replace("%", "%%")

    def create(self, cur: Any) -> None:
        """Once, outside any batch: a CREATE commits implicitly."""
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {quote_table(self.table)} ("
            " pipeline VARCHAR(191) NOT NULL, position VARCHAR(96) NOT NULL,"
            " batch_id BIGINT UNSIGNED NOT NULL, fingerprint CHAR(64) NOT NULL,"
            " ran TINYINT NULL COMMENT 'the operator''s verdict: 1 it ran, 0 it did not',"
            " statement VARCHAR(255) NOT NULL, written_at DATETIME(6) NOT NULL,"
            " PRIMARY KEY (pipeline, position))"
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")

    def recorded(self, cur: Any, position: tuple[int, ...]) -> tuple[str | None, int | None,
                                                                        bool]:
        """The fingerprint written before this DDL ran in this batch, the operator's verdict
        (``(None, None)`` when there is no row: a row of another batch is stale, left by a
        pipeline that was reset), and whether a later DDL of the batch has a row: then this
        one ran for certain (rows are written in relay order, each after the DDL before it
        ran), whatever the catalog says (a later DDL may have undone it: CREATE then DROP)."""
        cur.execute(f"SELECT position, fingerprint, ran FROM {self._t()} WHERE pipeline = %s"
                    " AND batch_id = %s", (self.pipeline, self.batch_id))
        rows = {_position_of(str(p)): (str(f), ran) for p, f, ran in cur.fetchall()}
        fingerprint, verdict = rows.get(tuple(position), (None, None))
        return fingerprint, verdict, any(p > tuple(position) for p in rows)

    def last(self, cur: Any) -> tuple[int, ...] | None:
        """The position of the batch's last journaled DDL (None: none is): the rows of the
        batch before it were committed with the journal rows."""
        cur.execute(f"SELECT position FROM {self._t()} WHERE pipeline = %s AND batch_id = %s",
                    (self.pipeline, self.batch_id))
        return max((_position_of(str(p)) for (p,) in cur.fetchall()), default=None)

    def begin(self, cur: Any, position: tuple[int, ...], fingerprint: str,
              statement: str, *, ran: int | None = None) -> None:
        """The caller commits, before the DDL runs."""
        cur.execute(self.begin_sql(position, fingerprint, statement, ran=ran))

    def begin_sql(self, position: tuple[int, ...], fingerprint: str, statement: str, *,
                  ran: int | None = None) -> str:
        """The statement :meth:`begin` runs; ``ran`` 0 for an :func:`evident` DDL (a replay
        runs it).  Its literals read alike in every sql_mode: it may be built while the
        connection is still in an upstream DDL's session (``ddl.LeftContext``), whose
        NO_BACKSLASH_ESCAPES would make PyMySQL's escaping wrong for the session it runs in."""
        values = (sql_string(self.pipeline), sql_string(position_text(position)),
                  str(int(self.batch_id)), sql_string(fingerprint),
                  "NULL" if ran is None else str(int(ran)), sql_string(snippet(statement, 255)))
        # Sent as it is, never formatted: the table's name with its % as they are.
        return (f"REPLACE INTO {quote_table(self.table)} (pipeline, position, batch_id,"
                " fingerprint,"
                f" ran, statement, written_at) VALUES ({', '.join(values)},"
                " UTC_TIMESTAMP(6))")

    def refused(self, cur: Any, position: tuple[int, ...]) -> None:
        """The DDL failed: the server undid it, so a later run runs it (``ran`` 0).  The row
        stays: it still says the rows before the DDL were committed with it."""
        cur.execute(f"UPDATE {self._t()} SET ran = 0 WHERE pipeline = %s AND position = %s",
                    (self.pipeline, position_text(position)))

    def clear(self, cur: Any) -> None:
        """In the batch's last transaction, with the checkpoint."""
        cur.execute(f"DELETE FROM {self._t()} WHERE pipeline = %s", (self.pipeline,))

    def row_sql(self, position: tuple[int, ...]) -> str:
        pipeline = self.pipeline.replace("'", "''")
        return (f"{quote_table(self.table)} WHERE pipeline = '{pipeline}'"
                f" AND position = '{position_text(position)}'")
