"""The SQL the applier sends (pure: text and parameters, no connection).

Every identifier is quoted with backticks (a backtick inside doubled), whatever it holds.
Values travel as PyMySQL parameters (``%s``), which the driver escapes for the session (the
applier's sql_mode keeps backslash escapes on), except in the keyed path's multi-row
statements: there they are rendered here, as PyMySQL would (:func:`sql_literal`), so that
each row's size is known exactly and each value is escaped once.  Because PyMySQL
%-formats a statement that has parameters, a ``%`` inside an identifier is doubled in such
statements; statements without parameters (rendered ones, and DDL passed through from the
upstream) run verbatim.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from binrelay.apply.changes import ABSENT, DELETE, INSERT, Change, TableRef

__all__ = [
    "MAX_STATEMENT_BYTES",
    "MAX_STATEMENT_ROWS",
    "REPLICA_SQL_MODE",
    "TRIGGER_EVENTS",
    "DdlKind",
    "Statement",
    "change_statement",
    "creates_by_select",
    "ddl_kind",
    "delete_keys",
    "event_ddl",
    "events_fired",
    "load_rows",
    "name_spelled",
    "quote_ident",
    "quote_table",
    "rename_targets",
    "replace_rows",
    "replica_side_event",
    "snippet",
    "sql_literal",
    "statement_body",
    "statement_proper",
    "trigger_ddl",
    "use_schema",
]

#: The session sql_mode, whatever the downstream's global one: a replica applies a row as
#: the upstream stored it, so no strict mode (the ENUM error value '' and values stored
#: under a non-strict upstream mode go in as they are), NO_AUTO_VALUE_ON_ZERO so that a 0
#: in an AUTO_INCREMENT column stays 0, no NO_ZERO_DATE / NO_ZERO_IN_DATE and
#: ALLOW_INVALID_DATES, so zero and invalid dates are stored again. Never
#: NO_BACKSLASH_ESCAPES (PyMySQL escapes with backslashes) or ANSI_QUOTES.
REPLICA_SQL_MODE = "NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES,NO_ENGINE_SUBSTITUTION"

#: Bounds of one multi-row statement: well below the default max_allowed_packet (16 MiB on
#: MariaDB 10.11, 64 MiB on MySQL 8) and small enough that a lock wait stays short.
MAX_STATEMENT_ROWS = 1000
MAX_STATEMENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement. ``params`` None means: run ``sql`` as is (no %-formatting).

    ``positions`` are the relay positions of the rows it writes, so that an error can name
    them; ``expect_rows`` (for ordered replay) is how many rows it must match, if known.
    """

    sql: str
    params: tuple[Any, ...] | None = None
    table: TableRef | None = None
    positions: tuple[tuple[int, ...], ...] = ()
    expect_rows: int | None = None
    #: A ``LOAD DATA LOCAL INFILE`` statement's file (:func:`load_rows`), sent from memory.
    data: bytes | None = None


# ---- identifiers ------------------------------------------------------------------------


def quote_ident(name: str) -> str:
    """`name`, with backticks doubled: safe for any identifier the server accepts."""
    return "`" + name.replace("`", "``") + "`"


def quote_table(table: TableRef) -> str:
    return quote_ident(table.schema) + "." + quote_ident(table.table)


def _p(sql: str) -> str:
    """Identifier text inside a parameterised statement (PyMySQL will %-format it)."""
    return sql.replace("%", "%%")


def use_schema(schema: str) -> Statement:
    return Statement("USE " + quote_ident(schema))


# ---- multi-row statements for the keyed path --------------------------------------------


#: What PyMySQL's escape_string does to text on a session with backslash escapes (the
#: applier's, REPLICA_SQL_MODE): \0, \\, \n, \r, \Z (^Z), \" and \'.  A list, as
#: PyMySQL's: ``str.translate`` indexes it (characters past its end stay as they are).
_ESCAPES = [chr(x) for x in range(128)]
for _char, _escaped in (("\0", "\\0"), ("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"),
                        ("\032", "\\Z"), ('"', '\\"'), ("'", "\\'")):
    _ESCAPES[ord(_char)] = _escaped


def sql_literal(value: Any) -> str:
    """A parameter as the SQL literal PyMySQL would send for it on the applier's session
    (``Connection.escape``), written here because the keyed path renders millions of them:
    text quoted with backslash escapes, bytes as ``X'..'``, integers as digits."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str:
        return "'" + value.translate(_ESCAPES) + "'"
    if value is None:
        return "NULL"
    if kind is bytes or kind is bytearray:
        return "X'" + value.hex() + "'"
    if kind is bool:
        return "1" if value else "0"
    if kind is Decimal and value.is_finite():
        return format(value, "f")  # bare: an exact number, never compared as a double
    raise TypeError(f"not a row value for a multi-row statement: {kind.__name__}")


def value_size(value: Any) -> int:
    # Upper bound of the escaped literal: escaping at most doubles a string, plus quotes or
    # the _binary prefix; the bound only has to keep statements under max_allowed_packet.
    if isinstance(value, str):
        return 2 * len(value.encode("utf-8", "surrogatepass")) + 3
    if isinstance(value, bytes | bytearray):
        return 2 * len(value) + 10
    return 70  # DECIMAL(65, 30): 65 digits, a point and a sign


def render_rows_python(rows: list[tuple[Any, ...]], start: int, max_rows: int,
                       max_bytes: int, bare: bool) -> tuple[int, str]:
    """``(end, text)``: ``rows[start:end]`` as SQL (``(v1, v2), (v1, v2)``; with ``bare``,
    one-value rows as ``v, v``, the first value of each), as many rows as fit in
    ``max_rows`` rows and ``max_bytes`` bytes of UTF-8, each counted with the two bytes
    of its separator; one row at least, however big.

    The specification of ``binrelay._speedups.render_rows`` (C), which renders the same
    bytes without a Python string per value; a test runs both."""
    size = 0
    parts: list[str] = []
    end = start
    for row in rows[start:]:
        if parts and end - start >= max_rows:
            break
        text = sql_literal(row[0]) if bare else "(" + ", ".join(map(sql_literal, row)) + ")"
        # Exact for ASCII (the common case, answered without a scan); else the UTF-8 size.
        row_size = 2 + (len(text) if text.isascii()
                        else len(text.encode("utf-8", "surrogateescape")))
        if parts and size + row_size > max_bytes:
            break
        parts.append(text)
        size += row_size
        end += 1
    return end, ", ".join(parts)


try:
    from binrelay._speedups import render_rows as render_rows_c
except ImportError:  # pragma: no cover - depends on the build
    render_rows_c = None

render_rows = render_rows_c or render_rows_python


def _rendered(
    rows: Sequence[tuple[Any, ...]], max_rows: int, max_bytes: int, *, bare: bool = False,
) -> Iterable[tuple[int, int, str]]:
    """``[start, end)`` slices of ``rows`` rendered as SQL, in bounded statements
    (:func:`render_rows`)."""
    rows = rows if isinstance(rows, list) else list(rows)
    start = 0
    while start < len(rows):
        end, text = render_rows(rows, start, max_rows, max_bytes, bare)
        yield start, end, text
        start = end


def replace_rows(
    table: TableRef,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    positions: Sequence[tuple[int, ...]],
    *,
    max_rows: int = MAX_STATEMENT_ROWS,
    max_bytes: int = MAX_STATEMENT_BYTES,
    verb: str = "REPLACE",
) -> list[Statement]:
    """``REPLACE INTO t (cols) VALUES (...), (...)`` in bounded statements, the values
    rendered into the text (:func:`sql_literal`).

    REPLACE (not INSERT … ON DUPLICATE KEY UPDATE) on purpose: it deletes *every* row that
    conflicts on any unique key, which is what makes survivors order-independent.
    ``verb`` INSERT: for rows whose keys were deleted before, where a conflict on another
    unique key must stop the write (``TableRules.replace_unsafe``).
    """
    head = (f"{verb} INTO {quote_table(table)} ("
            + ", ".join(quote_ident(c) for c in columns) + ") VALUES ")
    try:
        return [Statement(head + values, None, table, tuple(positions[start:end]))
                for start, end, values in _rendered(rows, max_rows, max_bytes - len(head))]
    except TypeError:
        # Rendering refuses ABSENT (not a value): looked for only then, not in every row.
        if any(ABSENT in row for row in rows):
            raise ValueError("REPLACE of a partial row image would invent the absent "
                             "values") from None
        raise


#: The file name a :func:`load_rows` statement reads: only what the statement holds is sent
#: under it (``sqlclient.Connection.offering``).
LOAD_NAME = "binrelay-rows"

#: What LOAD DATA's default escaping (``ESCAPED BY '\\'``) needs escaped in a field: the
#: escape itself, the field and line terminators, and NUL and CR to keep lines plain.
_TSV_ESCAPES = {0: "\\0", 9: "\\t", 10: "\\n", 13: "\\r", 92: "\\\\"}
_TSV_BYTES = {k: v.encode() for k, v in _TSV_ESCAPES.items()}


def _tsv_value(value: Any, kind: str) -> bytes | None:
    """One field (None: the value is not of what the column's ``kind`` takes)."""
    if value is None:
        return None if kind.isupper() else b"\\N"
    kind = kind.lower()
    if kind in "in":
        if type(value) is bool:
            return b"1" if value else b"0"
        if type(value) is int:
            return str(value).encode()
        if kind == "n" and type(value) is Decimal and value.is_finite():
            return format(value, "f").encode()
        return None
    if type(value) is str and kind in "sb":
        return _tsv_escape(value.encode("utf-8", "surrogateescape"))
    if kind == "b" and type(value) in (bytes, bytearray):
        return _tsv_escape(bytes(value))
    return None


def _tsv_escape(data: bytes) -> bytes:
    return b"".join(_TSV_BYTES.get(b, bytes((b,))) for b in data)


def render_tsv_python(rows: list[tuple[Any, ...]], start: int, max_rows: int,
                      max_bytes: int, kinds: str) -> tuple[int, bytes] | None:
    """``(end, data)``: ``rows[start:end]`` as LOAD DATA lines (fields tab-separated,
    ``\\N`` for NULL, the escapes of :data:`_TSV_ESCAPES`), as many rows as fit in
    ``max_rows`` rows and ``max_bytes`` bytes, one at least; None when a value is not of
    what its column's kind takes (``kinds``, one letter per column: ``i`` an integer
    column, ``n`` a DECIMAL, ``s`` a column that reads text, ``b`` a binary string; in
    upper case, NULL is not taken), a row has another width, or the first row alone is
    over ``max_bytes``.

    The specification of ``binrelay._speedups.render_tsv`` (C); a test runs both."""
    out = bytearray()
    end = start
    for row in rows[start:]:
        if end > start and end - start >= max_rows:
            break
        if type(row) is not tuple or len(row) != len(kinds):
            return None
        fields = [_tsv_value(v, k) for v, k in zip(row, kinds, strict=True)]
        if any(f is None for f in fields):
            return None
        line = b"\t".join(fields) + b"\n"  # type: ignore[arg-type]
        if len(out) + len(line) > max_bytes:
            if end == start:
                return None
            break
        out += line
        end += 1
    return end, bytes(out)


try:
    from binrelay._speedups import render_tsv as render_tsv_c
except ImportError:  # pragma: no cover - depends on the build
    render_tsv_c = None

render_tsv = render_tsv_c or render_tsv_python


def load_rows(
    table: TableRef,
    columns: Sequence[str],
    kinds: str,
    rows: Sequence[tuple[Any, ...]],
    positions: Sequence[tuple[int, ...]],
    *,
    max_rows: int = MAX_STATEMENT_ROWS,
    max_bytes: int = MAX_STATEMENT_BYTES,
) -> list[Statement] | None:
    """What :func:`replace_rows` writes, as ``LOAD DATA LOCAL INFILE ... REPLACE`` statements
    whose file each carries (``Statement.data``): the server reads no SQL per value, which
    made a third of its CPU for a bulk of rows.  None when a value is not of what its
    column's kind takes (:func:`render_tsv_python`): those rows go by REPLACE.

    The applier takes a load's result only when every row went in without a warning
    (``applier._check_load``), else it writes the rows by REPLACE."""
    rows = rows if isinstance(rows, list) else list(rows)
    head = (f"LOAD DATA LOCAL INFILE '{LOAD_NAME}' REPLACE INTO TABLE {quote_table(table)}"
            " CHARACTER SET utf8mb4 FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\'"
            " LINES TERMINATED BY '\\n' ("
            + ", ".join(quote_ident(c) for c in columns) + ")")
    out: list[Statement] = []
    start = 0
    while start < len(rows):
        found = render_tsv(rows, start, max_rows, max_bytes, kinds)
        if found is None:
            return None
        end, data = found
        out.append(Statement(head, None, table, tuple(positions[start:end]), data=data))
        start = end
    return out


def delete_keys(
    table: TableRef,
    key_columns: Sequence[str],
    keys: Sequence[tuple[Any, ...]],
    positions: Sequence[tuple[int, ...]],
    *,
    max_rows: int = MAX_STATEMENT_ROWS,
    max_bytes: int = MAX_STATEMENT_BYTES,
) -> list[Statement]:
    """``DELETE FROM t WHERE (k1, k2) IN ((..), (..))`` in bounded statements (a missing row
    is fine: deleting by key is idempotent), the values rendered into the text."""
    if not key_columns:
        raise ValueError("delete by key needs key columns")
    if len(key_columns) == 1:
        target = quote_ident(key_columns[0])
    else:
        target = "(" + ", ".join(quote_ident(c) for c in key_columns) + ")"
    head = f"DELETE FROM {quote_table(table)} WHERE {target} IN ("
    return [Statement(head + values + ")", None, table, tuple(positions[start:end]))
            for start, end, values in _rendered(keys, max_rows, max_bytes - len(head) - 1,
                                                bare=len(key_columns) == 1)]


# ---- one change at a time: ordered replay and strict mode --------------------------------


def _match(change: Change, image: tuple[Any, ...]) -> tuple[str, tuple[Any, ...], str]:
    """WHERE clause that finds the row ``image`` names, its parameters, and a LIMIT."""
    if change.key:
        cols = [change.columns[i] for i in change.key]
        vals = tuple(image[i] for i in change.key)
        # Key columns are NOT NULL, so = is exact and can use the index.
        return " AND ".join(f"{_p(quote_ident(c))} = %s" for c in cols), vals, ""
    present = [i for i, v in enumerate(image) if v is not ABSENT]
    if not present:
        raise ValueError("a row image without any column cannot name a row")
    # No key: match the whole row, NULL-safe, and touch one of possibly identical rows.  A
    # text value by its collation would match rows that differ (case, trailing spaces even
    # under a _bin collation, every non-BMP character under utf8mb4_general_ci), which a
    # replica tells apart by their bytes: by its characters too (the collation's test kept
    # for an index to find the candidates).  (Not the text of a number or a time.)
    terms: list[str] = []
    params: list[Any] = []
    for i in present:
        column, value = _p(quote_ident(change.columns[i])), image[i]
        terms.append(f"{column} <=> %s")
        params.append(value)
        if isinstance(value, str) and i in change.text:
            terms.append(f"CAST(CONVERT({column} USING utf8mb4) AS BINARY)"
                         " <=> CAST(%s AS BINARY)")
            params.append(value)
    return " AND ".join(terms), tuple(params), " LIMIT 1"


def change_statement(change: Change) -> Statement | None:
    """The statement that replays one change exactly as the upstream applied it (or None
    when it writes nothing: an update whose after image holds no column).

    Inserts are plain INSERTs of the present columns (absent ones take their defaults, as
    they did upstream); updates set the present after-image columns of the row the before
    image names; deletes remove that row. Updates and deletes must match one row.
    """
    table = _p(quote_table(change.table))
    pos = (change.position,)
    if change.op == INSERT:
        assert change.after is not None
        if change.sequence and ABSENT in change.after:
            return _sequence_write(change)
        present = [i for i, v in enumerate(change.after) if v is not ABSENT]
        cols = ", ".join(_p(quote_ident(change.columns[i])) for i in present)
        marks = ", ".join(["%s"] * len(present))
        return Statement(f"INSERT INTO {table} ({cols}) VALUES ({marks})",
                         tuple(change.after[i] for i in present), change.table, pos, 1)
    assert change.before is not None
    where, where_params, limit = _match(change, change.before)
    if change.op == DELETE:
        return Statement(f"DELETE FROM {table} WHERE {where}{limit}", where_params,
                         change.table, pos, 1)
    assert change.after is not None
    present = [i for i, v in enumerate(change.after) if v is not ABSENT]
    if not present:
        return None
    sets = ", ".join(f"{_p(quote_ident(change.columns[i]))} = %s" for i in present)
    return Statement(f"UPDATE {table} SET {sets} WHERE {where}{limit}",
                     tuple(change.after[i] for i in present) + where_params, change.table,
                     pos, 1)


def _sequence_write(change: Change) -> Statement:
    """A sequence's row with the absent values taken from the stored row (a sequence table
    always holds exactly one row; writing it replaces it, as a NEXTVAL does)."""
    assert change.after is not None
    table = _p(quote_table(change.table))
    cols = [_p(quote_ident(c)) for c in change.columns]
    values = ", ".join(c if v is ABSENT else "%s" for c, v in zip(cols, change.after,
                                                                  strict=True))
    return Statement(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {values} FROM {table}",
                     tuple(v for v in change.after if v is not ABSENT), change.table,
                     (change.position,), 1)


# ---- DDL pass-through -------------------------------------------------------------------


def snippet(statement: str, limit: int = 80) -> str:
    """A statement on one line, cut to ``limit`` characters, for messages."""
    text = " ".join(statement.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class DdlKind:
    """What a DDL statement is, and which errors mean "this already happened" on a replay."""

    name: str
    done_errors: frozenset[int]


#: One part of an account name: quoted (a space, an @ inside) or bare.
_ACCOUNT_PART = r"""(?:`(?:[^`]|``)*`|'(?:[^'\\]|''|\\.)*'|"(?:[^"]|"")*"|[^\s@'`"]+)"""
#: A DEFINER clause and the blanks after it (``app@%``, ```app user`@`%```, CURRENT_USER...).
DEFINER_CLAUSE = (rf"DEFINER\s*=\s*(?:CURRENT_USER(?:\s*\(\s*\))?|"
                  rf"{_ACCOUNT_PART}(?:\s*@\s*{_ACCOUNT_PART})?)\s+")

# 1007 database exists · 1008 database does not exist · 1050 table exists · 1051 unknown
# table · 1054 unknown column (CHANGE/RENAME COLUMN replayed) · 1060 duplicate column ·
# 1061 duplicate key name · 1091 can't drop column/key · 1146 table does not exist (RENAME
# replayed: only when every target exists, checked by the applier) · 4091 unknown sequence ·
# 4092 unknown view.  ALTER SEQUENCE sets values, not steps: running it again is harmless.
_KINDS: tuple[tuple[re.Pattern[str], DdlKind], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), DdlKind(name, frozenset(codes)))
    for pattern, name, codes in (
        (r"CREATE\s+OR\s+REPLACE\b", "create or replace", ()),
        (r"CREATE\s+(?:TEMPORARY\s+)?TABLE\b", "create table", (1050,)),
        (r"CREATE\s+(?:TEMPORARY\s+)?SEQUENCE\b", "create sequence", (1050,)),
        (r"CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\b", "create index", (1061,)),
        (r"CREATE\s+(?:DATABASE|SCHEMA)\b", "create database", (1007,)),
        (rf"CREATE\s+(?:ALGORITHM\s*=\s*\w+\s+)?(?:{DEFINER_CLAUSE})?"
         r"(?:SQL\s+SECURITY\s+\w+\s+)?VIEW\b", "create view", (1050,)),
        (r"DROP\s+(?:TEMPORARY\s+)?TABLES?\b", "drop table", (1051,)),
        (r"DROP\s+VIEW\b", "drop view", (1051, 4092)),
        (r"DROP\s+(?:TEMPORARY\s+)?SEQUENCE\b", "drop sequence", (4091,)),
        (r"DROP\s+INDEX\b", "drop index", (1091,)),
        (r"DROP\s+(?:DATABASE|SCHEMA)\b", "drop database", (1008,)),
        (r"ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\b", "alter table",
         (1054, 1060, 1061, 1091, 1146)),
        (r"RENAME\s+TABLES?\b", "rename table", (1146,)),
        (r"TRUNCATE\b", "truncate", ()),
    )
)
_OTHER = DdlKind("other", frozenset())
# Plain comments only: /*! and /*M! comments are executable and part of the statement.
_LEADING_NOISE = re.compile(r"(?:\s+|/\*(?![!M]).*?\*/|(?:--\s|#)[^\n]*(?:\n|$))*", re.DOTALL)
#: An executable comment's mark and the version it may carry.
_EXECUTABLE_OPENS = re.compile(r"/\*M?!(\d*)")


def statement_body(statement: str) -> str:
    """``statement`` from its first word on: leading blanks and plain comments skipped, an
    executable comment (``/*!NNNNN ...``, ``/*M!NNNNNN ...``) opened, as its text runs (a
    client's ``/* app: ... */ UPDATE ...`` is an UPDATE), MariaDB's ``SET STATEMENT ...
    FOR`` passed (:func:`statement_proper`)."""
    at = 0
    while True:
        at = _LEADING_NOISE.match(statement, at).end()  # type: ignore[union-attr]
        opened = _EXECUTABLE_OPENS.match(statement, at)
        if opened is None:
            proper = _set_statement_end(statement, at)
            if proper == at:
                return statement[at:]
            at = proper
        else:
            at = opened.end()


def statement_proper(statement: str) -> str:
    """The statement a MariaDB ``SET STATEMENT var = value [, ...] FOR <statement>`` runs,
    from its first word (``statement`` itself when it has no such prefix).  MariaDB logs an
    ALTER / CREATE TABLE typed so with the prefix: what kind of DDL it is, and what it
    names, is read after it (it still runs as logged)."""
    at = _LEADING_NOISE.match(statement).end()  # type: ignore[union-attr]
    proper = _set_statement_end(statement, at)
    if proper == at:
        return statement
    return statement[_LEADING_NOISE.match(statement, proper).end():]  # type: ignore[union-attr]


def _set_statement_end(statement: str, at: int) -> int:
    """Past ``SET STATEMENT ... FOR`` when it starts at ``at`` (the first ``FOR`` outside
    quotes, comments and parentheses, and not a variable's name), else ``at``."""
    words, depth, pos, prev, before = 0, 0, at, "", ""
    while (token := _TOKEN.match(statement, pos)) is not None:
        word, pos = token.group(1), token.end()
        upper = word.upper()
        if words < 2:  # SET, then STATEMENT
            if upper != ("SET", "STATEMENT")[words]:
                return at
            words += 1
        elif word == "(":
            depth += 1
        elif word == ")":
            depth -= 1
        elif depth == 0 and upper == "FOR" and not (
                prev == "@" or (prev == "." and not before.isdigit())):  # @for, a.for; 1. FOR
            return pos
        prev, before = word, prev
    return at  # cut short: not read as a prefix


_START_TRANSACTION = re.compile(rb"\s+START\s+TRANSACTION\s*;?\s*$", re.IGNORECASE)


def start_transaction_clause(raw: bytes) -> int:
    """How many bytes at the end of ``raw`` are a ``START TRANSACTION`` table option (ASCII:
    as many characters of its text), to be left out.

    MySQL 8.0.21+ logs the CREATE of a ``CREATE TABLE … SELECT`` with that option (its
    replicas then insert the rows in the same transaction); MariaDB and older MySQL do not
    know it.  Without it the CREATE commits first, as MariaDB's own CREATE … SELECT is
    logged, and the rows follow."""
    if ddl_kind(raw[:64].decode("utf-8", "replace")).name != "create table":
        return 0
    found = _START_TRANSACTION.search(raw)
    return 0 if found is None else len(raw) - found.start()


def ddl_kind(statement: str) -> DdlKind:
    statement = statement_proper(statement)
    body = statement[_LEADING_NOISE.match(statement).end():]  # type: ignore[union-attr]
    for pattern, kind in _KINDS:
        if pattern.match(body):
            return kind
    return _OTHER


_NAME = r"(?:`(?:[^`]|``)+`|[^\s`.,;()]+)"
_QNAME = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_RENAME_PAIR = re.compile(rf"({_QNAME})\s+TO\s+({_QNAME})", re.IGNORECASE)
_RENAME_TABLE = re.compile(r"\s*RENAME\s+TABLES?\s+(.*?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_ALTER_RENAME = re.compile(
    rf"\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+{_QNAME}\s+.*?\bRENAME\s+(?:TO\s+|AS\s+)?"
    rf"(?!(?:COLUMN|INDEX|KEY)\b)({_QNAME})\s*;?\s*$", re.IGNORECASE | re.DOTALL)


_TRIGGER_DDL = re.compile(
    rf"(CREATE)\s+(?:OR\s+REPLACE\s+)?(?:{DEFINER_CLAUSE})?TRIGGER\s+"
    rf"(?:IF\s+NOT\s+EXISTS\s+)?({_QNAME})|(DROP)\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?({_QNAME})",
    re.IGNORECASE)
_IF_NOT_EXISTS = re.compile(r"IF\s+NOT\s+EXISTS\s+$", re.IGNORECASE)
#: A name read only where it cannot be taken for another: quoted with backticks, or
#: letters, digits, $ and _ (no ANSI quotes, no comment next to it).
_PLAIN_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_PLAIN_QNAME = rf"{_PLAIN_NAME}(?:\s*\.\s*{_PLAIN_NAME})?"
#: What follows a trigger's name: its time, its event(s), the table it is on.
_TRIGGER_ON = re.compile(
    rf"\s+(?:BEFORE|AFTER)\s+((?:INSERT|UPDATE|DELETE)(?:\s+OR\s+(?:INSERT|UPDATE|DELETE))*)"
    rf"\s+ON\s+({_PLAIN_QNAME})\s+FOR\s+EACH\s+ROW\b", re.IGNORECASE)
#: What a trigger fires on.
TRIGGER_EVENTS = frozenset({"INSERT", "UPDATE", "DELETE"})
#: The end of a statement: comments (the server's ``/* generated by server */``), a ``;``.
_STATEMENT_END = r"(?:\s*/\*(?![!M]).*?\*/)*\s*;?\s*$"
_DROP_TABLES = re.compile(
    rf"DROP\s+TABLES?\s+(?:IF\s+EXISTS\s+)?({_PLAIN_QNAME}(?:\s*,\s*{_PLAIN_QNAME})*)"
    rf"(?:\s+(?:RESTRICT|CASCADE))?{_STATEMENT_END}", re.IGNORECASE | re.DOTALL)
_DROP_DATABASE = re.compile(
    rf"DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?({_PLAIN_NAME}){_STATEMENT_END}",
    re.IGNORECASE | re.DOTALL)
#: CREATE OR REPLACE TABLE drops the table it names first (a temporary one has no trigger).
_REPLACE_TABLE = re.compile(rf"CREATE\s+OR\s+REPLACE\s+TABLE\s+({_PLAIN_QNAME})(?=[\s(])",
                            re.IGNORECASE)
#: (Not after a letter: ``/*!50000RENAME TABLE ...*/`` renames too.)  RENAME COLUMN,
#: INDEX and KEY (the next word, past blanks only) rename no table.
#: (ASCII: the server's keywords and blanks are; Python's IGNORECASE takes the Kelvin sign
#: for a K.)
_RENAME_WORD = re.compile(
    "(?<![A-Za-z_$])RENAME(?![A-Za-z0-9_$])"
    "(?!(?a:[ \t\n\r\f\v]+(?:COLUMN|INDEX|KEY))(?![0-9A-Za-z_$\u0080-\U0010ffff]))",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TablesGone:
    """What a DDL does to the tables triggers are on (:func:`tables_gone`)."""

    #: Tables a DROP TABLE (or a CREATE OR REPLACE TABLE) drops, a schema a DROP DATABASE
    #: drops (with their triggers).
    tables: tuple[TableRef, ...] = ()
    schema: str | None = None
    #: It may rename a table (its triggers go along): any RENAME.
    renames: bool = False


def tables_gone(statement: str, schema: str | None) -> TablesGone | None:
    """What ``statement`` does to tables with triggers, as far as it is read for certain:
    the tables a DROP TABLE names, the table a CREATE OR REPLACE TABLE replaces, the schema
    of a DROP DATABASE; any statement with the word RENAME (RENAME TABLE, ALTER TABLE ...
    RENAME; not RENAME COLUMN, INDEX or KEY, the next word past blanks) may rename one.
    None: nothing of that."""
    statement = statement_proper(statement)
    body = statement[_LEADING_NOISE.match(statement).end():]  # type: ignore[union-attr]
    if _RENAME_WORD.search(body):
        return TablesGone(renames=True)
    m = _DROP_TABLES.match(body)
    if m is not None:
        names = [_split_qname(n, schema) for n in re.findall(_PLAIN_QNAME, m.group(1))]
        return TablesGone(tables=tuple(n for n in names if n is not None))
    m = _DROP_DATABASE.match(body)
    if m is not None:
        return TablesGone(schema=_unquote(m.group(1)))
    m = _REPLACE_TABLE.match(body)
    if m is not None:
        name = _split_qname(m.group(1), schema)
        return None if name is None else TablesGone(tables=(name,))
    return None


def trigger_ddl(statement: str, schema: str | None
                ) -> tuple[str, TableRef | None, TableRef | None, frozenset[str]] | None:
    """``("create" | "create if absent" | "drop", trigger name as schema.name, its table,
    its events)`` for trigger DDL (the table of a CREATE, in the trigger's schema, where it
    reads, else None; its events, every one where it does not read), or None.  A CREATE ...
    IF NOT EXISTS is logged even where the trigger was there: then it changed nothing."""
    statement = statement_proper(statement)
    body = statement[_LEADING_NOISE.match(statement).end():]  # type: ignore[union-attr]
    m = _TRIGGER_DDL.match(body)
    if m is None:
        return None
    if m.group(1):
        before_name = body[m.start():m.start(2)]
        what = "create if absent" if _IF_NOT_EXISTS.search(before_name) else "create"
        name = _split_qname(m.group(2), schema)
        on = _TRIGGER_ON.match(body, m.end())
        if on is None or name is None:
            return what, name, None, TRIGGER_EVENTS
        events = frozenset(e.upper() for e in re.split(r"\s+OR\s+", on.group(1), flags=re.I))
        return what, name, _split_qname(on.group(2), name.schema), events
    return "drop", _split_qname(m.group(4), schema), None, TRIGGER_EVENTS


#: The triggers a statement-format DML may fire, by its first word (an INSERT's ON
#: DUPLICATE KEY UPDATE fires UPDATE triggers too); anything else (a REPLACE, a LOAD DATA,
#: a SELECT or DO of a stored function) may fire any.
_FIRES = {"INSERT": frozenset({"INSERT"}), "UPDATE": frozenset({"UPDATE"}),
          "DELETE": frozenset({"DELETE"})}
#: Words that widen a statement's events: ON DUPLICATE KEY UPDATE; MariaDB's UPDATE /
#: DELETE ... FOR PORTION OF, which inserts the parts of a row left outside the period.
_DUPLICATE = re.compile(r"(?<![\w$])DUPLICATE(?![\w$])", re.IGNORECASE)
_PORTION = re.compile(r"(?<![\w$])PORTION(?![\w$])", re.IGNORECASE)


def events_fired(statement: str) -> frozenset[str]:
    """The trigger events ``statement`` may fire on the tables it names.  Every event for a
    statement with an executable comment (a server may skip or run what it holds)."""
    if _EXECUTABLE_OPENS.search(statement) or _PORTION.search(statement):
        return TRIGGER_EVENTS
    first = re.match(r"[A-Za-z]+", statement_body(statement))
    events = TRIGGER_EVENTS if first is None else _FIRES.get(first.group(0).upper(),
                                                             TRIGGER_EVENTS)
    if events == {"INSERT"} and _DUPLICATE.search(statement):
        return frozenset({"INSERT", "UPDATE"})
    return events


_CREATE_TABLE_SELECT = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\b"
    r".*(?<![\w$])(?:SELECT|VALUES|TABLE)(?![\w$])", re.IGNORECASE | re.DOTALL)


def creates_by_select(statement: str) -> bool:
    """Whether ``statement`` may be a CREATE TABLE filled by a query (``SELECT``, MySQL's
    ``TABLE v`` and ``VALUES ROW(...)``), which may call a stored function that writes
    other tables."""
    return _CREATE_TABLE_SELECT.match(statement_body(statement)) is not None


#: utf8_general_ci's equalities casefold does not make (ß is s there, ı is i).
_GENERAL_CI = str.maketrans({"ß": "s", "ẞ": "s", "ı": "i"})


def _fold(text: str) -> str:
    """Case and accents out, as the loosest of the server's name comparisons (a stored
    routine's, utf8_general_ci) leaves them."""
    if text.isascii():  # (a long statement's usual case: no character-by-character walk)
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.translate(_GENERAL_CI))
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _readings(statement: str) -> str:
    """``statement`` folded, once per way a server may read its executable comments'
    versions (the whole run of digits, five, six), joined by line breaks: ``/*!40101t2*/``
    runs as ``t2``; ``/*!500002t*/`` as ``2t`` where a version is five digits long (MySQL's)
    and as ``t`` where it is six (MariaDB's ``/*M!``)."""
    if _EXECUTABLE_OPENS.search(statement) is None:
        return _fold(statement)
    return "\n".join(
        _fold(_EXECUTABLE_OPENS.sub(lambda m, n=n: " " + m.group(1)[n:], statement))
        for n in (10**9, 5, 6))


#: What an unquoted name is made of (MySQL: ASCII letters, digits, $ and _, and U+0080 on).
_NAME_CHAR = "0-9A-Za-z_$\u0080-\U0010ffff"


def name_spelled(statement: str, names: Iterable[str]) -> str | None:
    """One of ``names`` (tables, views, routines) that ``statement`` may name, or None.

    Read so that no spelling is missed rather than parsed: a name counts wherever it stands
    whole (not inside a longer unquoted name) in the text, in any case and with or without
    accents, bare or quoted (backticks, ANSI double quotes), inside a string or a comment
    too.  A name beyond ASCII counts in any statement beyond ASCII: the text was read as
    UTF-8, and the client's character set may have been another."""
    variants: dict[str, str] = {}
    wide = not statement.isascii()
    for name in names:
        if wide and not name.isascii():
            return name
        for spelling in {name, name.replace("`", "``"), name.replace('"', '""')}:
            variants.setdefault(_fold(spelling), name)
    if not variants:
        return None
    pattern = re.compile(
        rf"(?<![{_NAME_CHAR}])(?:{'|'.join(map(re.escape, sorted(variants, key=len)[::-1]))})"
        rf"(?![{_NAME_CHAR}])")
    found = pattern.search(_readings(statement))
    return None if found is None else variants[found.group(0)]


#: The tokens of a statement's clauses: a quoted name or string, a word, one other
#: character; blanks, comments and the marks of an executable comment (``/*!50106`` ...
#: ``*/``, as mysqldump writes an event's CREATE) in between are skipped.
_TOKEN = re.compile(
    r"(?:\s+|/\*M?!\d*|\*/|/\*.*?\*/|(?:--(?=\s)|#)[^\n]*)*+"
    r"(`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|[\w$]+|.)",
    re.DOTALL)


@dataclass(frozen=True, slots=True)
class _EventDdl:
    """What a CREATE / ALTER EVENT says before its body (offsets into the statement)."""

    name: list[str]  # the event's name: one or two identifier tokens
    renamed: list[str] | None  # ALTER ... RENAME TO's
    status: list[tuple[int, int]]  # ENABLE / DISABLE [ON SLAVE | ON REPLICA] spans
    clauses_end: int  # where COMMENT or DO starts, or the end of the last token


#: What a definer is given for: the word after it says which (an EVENT, or not).
_DEFINED = frozenset({"EVENT", "PROCEDURE", "FUNCTION", "TRIGGER", "VIEW", "PACKAGE",
                      "TABLE", "SQL", "ALGORITHM", "AGGREGATE"})


def _event_ddl(statement: str) -> _EventDdl | None:
    tokens = []
    at = 0
    while (m := _TOKEN.match(statement, at)) is not None:
        tokens.append((m.start(1), m.end(1), m.group(1)))
        at = m.end()
    words = [t.upper() for _s, _e, t in tokens]
    k = 0

    def take(*want: str) -> bool:
        nonlocal k
        if words[k:k + len(want)] == list(want):
            k += len(want)
            return True
        return False

    if take("SET", "STATEMENT"):  # MariaDB's prefix: the event statement follows its FOR
        depth = 0
        while k < len(words) and (depth or words[k] != "FOR" or words[k - 1] in ("@", ".")):
            depth += {"(": 1, ")": -1}.get(words[k], 0)
            k += 1
        k += 1
    if not (take("CREATE") or take("ALTER")):
        return None
    take("OR", "REPLACE")
    if take("DEFINER", "="):
        # The definer, however spelled (``u@10.0.0.1``, ``CURRENT_ROLE()``...), up to the
        # kind of object it defines.
        while k < len(tokens) and words[k] not in _DEFINED:
            k += 1
    if not take("EVENT"):
        return None
    take("IF", "NOT", "EXISTS")

    def name() -> list[str]:
        nonlocal k
        parts = [tokens[k][2]] if k < len(tokens) else []
        k += 1
        if take("."):
            parts.append(tokens[k][2] if k < len(tokens) else "")
            k += 1
        k = min(k, len(tokens))
        return parts

    def last_end() -> int:
        return tokens[k - 1][1] if k else len(statement)

    event, renamed, status, depth = name(), None, [], 0
    end = last_end()
    while k < len(tokens):
        start, stop, _text = tokens[k]
        word = words[k]
        if words[k - 1] == "@":
            pass  # a variable's name (@enable), not a clause's word
        elif word == "(":
            depth += 1
        elif word == ")":
            depth -= 1
        elif depth == 0 and word in ("COMMENT", "DO", ";"):
            end = start
            break
        elif depth == 0 and word == "RENAME" and words[k + 1:k + 2] == ["TO"]:
            k += 2
            renamed = name()
            end = last_end()
            continue
        elif depth == 0 and word in ("ENABLE", "DISABLE"):
            k += 1
            if word == "DISABLE" and take("ON"):
                k = min(k + 1, len(tokens))  # SLAVE / REPLICA
            status.append((start, last_end()))
            end = last_end()
            continue
        k += 1
        end = stop
    return _EventDdl(event, renamed, status, end)


def event_ddl(statement: str, schema: str | None) -> TableRef | None:
    """The event (as schema.name) a ``CREATE EVENT`` / ``ALTER EVENT`` leaves (an ALTER's
    ``RENAME TO`` target), else None."""
    found = _event_ddl(statement)
    if found is None:
        return None
    parts = [_ident(token) for token in found.renamed or found.name]
    if len(parts) == 2:
        return TableRef(parts[0], parts[1])
    return TableRef(schema, parts[0]) if schema and parts else None


def _ident(token: str) -> str:
    """An identifier token as the name it spells (backticks, or ANSI_QUOTES' double quotes)."""
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "`\"":
        return token[1:-1].replace(token[0] * 2, token[0])
    return token


def replica_side_event(statement: str) -> list[tuple[int, int, str]] | None:
    """For a ``CREATE EVENT`` / ``ALTER EVENT``, the edits (``start, end, text``: replace
    ``statement[start:end]``, in order) that make the event ``DISABLE ON SLAVE``, as a
    replica's SQL thread makes every event it creates or alters (SLAVESIDE_DISABLED): the
    status clause the statement has, if any, out, ``DISABLE ON SLAVE`` in before its
    ``COMMENT`` or ``DO`` (or after its last clause).  None for any other statement.  Every
    edit lies before the event's body, outside quoted text and comments."""
    found = _event_ddl(statement)
    if found is None:
        return None
    edits = [(start, end, "") for start, end in found.status]
    return [*edits, (found.clauses_end, found.clauses_end, " DISABLE ON SLAVE ")]


def _unquote(name: str) -> str:
    name = name.strip()
    if name.startswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def _split_qname(qname: str, schema: str | None) -> TableRef | None:
    parts = re.findall(_NAME, qname)
    if len(parts) == 2:
        return TableRef(_unquote(parts[0]), _unquote(parts[1]))
    if len(parts) == 1 and schema:
        return TableRef(schema, _unquote(parts[0]))
    return None


_CREATE_TABLE = re.compile(rf"CREATE\s+TABLE\s+(?!IF\b)({_QNAME})", re.IGNORECASE)


def created_table(statement: str, schema: str | None) -> TableRef | None:
    """The table ``CREATE TABLE name ...`` makes (not ``IF NOT EXISTS``, not ``TEMPORARY``,
    not ``OR REPLACE``), or None."""
    statement = statement_proper(statement)
    body = statement[_LEADING_NOISE.match(statement).end():]  # type: ignore[union-attr]
    m = _CREATE_TABLE.match(body)
    if m is None or '"' in m.group(1):  # an ANSI-quoted name: not read here
        return None
    return _split_qname(m.group(1), schema)


def rename_pairs(statement: str, schema: str | None
                 ) -> list[tuple[TableRef | None, TableRef]] | None:
    """``(from, to)`` per table a RENAME TABLE / ALTER TABLE … RENAME renames (``from``
    None for ALTER TABLE, whose table is not read here), or None if unsure."""
    statement = statement_proper(statement)
    body = statement[_LEADING_NOISE.match(statement).end():]  # type: ignore[union-attr]
    pairs: list[tuple[str, str]] = []
    whole = _RENAME_TABLE.match(body)
    if whole:
        for pair in whole.group(1).split(","):
            m = _RENAME_PAIR.fullmatch(pair.strip())
            if m is None:
                return None
            pairs.append((m.group(1), m.group(2)))
    else:
        m = _ALTER_RENAME.match(body)
        if m is None:
            return None
        pairs.append(("", m.group(1)))
    refs = [(_split_qname(src, schema) if src else None, _split_qname(dst, schema))
            for src, dst in pairs]
    if any(dst is None or (src is None and whole) for src, dst in refs):
        return None
    return [(src, dst) for src, dst in refs if dst is not None]


def rename_targets(statement: str, schema: str | None) -> tuple[TableRef, ...] | None:
    """The tables a RENAME TABLE / ALTER TABLE … RENAME leaves behind, or None if unsure.

    For a chain (``a TO b, b TO c``) that is the last name of each chain.
    """
    pairs = rename_pairs(statement, schema)
    if pairs is None:
        return None
    sources = {src for src, _ in pairs}
    return tuple(dst for _, dst in pairs if dst not in sources)
