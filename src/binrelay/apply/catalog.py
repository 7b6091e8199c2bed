"""What the downstream's catalog says about how a replicated table must be written.

A replica writes rows below SQL: no generated column is ever assigned, no trigger fires
for a row event, and foreign key actions run because the row's change is applied with the
upstream's foreign key checks.  binrelay writes with SQL statements, so it must know, per
table, what a statement would do beyond its own row:

* **generated columns** (STORED/PERSISTENT and VIRTUAL) cannot be assigned: they are left
  out of every statement; the server computes them from the other columns, as upstream.
  So are the hidden ``DB_ROW_HASH_n`` columns MariaDB adds after a table's others for each
  UNIQUE key too long to index (on BLOB/TEXT: a "long unique", index type HASH), which the
  binlog logs with the rows and no statement may name.
* **foreign keys**: a change of a parent may cascade to children (the upstream does not
  log cascaded changes), so every table linked by a foreign key is replayed in relay order,
  one connected group per task, with foreign key checks on, and updates stay updates (a
  REPLACE's delete would fire ON DELETE actions).
* **system-versioned tables** (MariaDB): the row start/end columns are written as logged
  (``binrelay.apply.versioning``), in relay order.  Tables versioned by transaction id
  have their DML logged as statements (replayed, as a replica does); a row change of one
  cannot be stored (a replica's ids are its own) and stops the sync.
* **sequences** (MariaDB): a NEXTVAL is logged as a write of the sequence's row, only the
  changed values with ``binlog_row_image=MINIMAL``: the others keep what is stored.
* **columns by position**: an upstream that logs no column names (``binlog_row_metadata``
  NO_LOG or MINIMAL, or a server older than the setting) has its rows written by position,
  as a replica applies them: the names, signedness, character sets and primary key of each
  table's columns come from here (``positional``; see ``binrelay.apply.positional``).
* **column types**: a value is written by SQL under a lenient sql_mode, where a column too
  narrow for it would truncate it with a warning; a replica stops on such a column (error
  1677).  Each logged column is checked against the downstream's (``columns``; see
  ``binrelay.apply.column_fit``).
* **triggers** would fire a second time (their effects are in the binlog already):
  binrelay does not replay trigger DDL and refuses to write to a downstream that has
  triggers on the tables it writes (see ``docs/apply.md``).

The catalog is read on the driver (at start, and after a DDL that can change it: whole, or
only the tables such a DDL names, see :func:`reread_rules`) and shipped to the tasks
as :class:`TableRules`, a small picklable value.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from binrelay.apply.changes import TableRef
from binrelay.apply.ddl_journal import sql_words, statement_names
from binrelay.apply.downstream import mariadb_at_least, query_rows
from binrelay.apply.sql import created_table, ddl_kind, rename_pairs, statement_proper
from binrelay.errors import UnfaithfulApplyError

__all__ = ["NARROW_KINDS", "SYSTEM_SCHEMAS", "DownstreamColumn", "TableColumns", "TableRules",
           "Trigger", "keeps_rules",
           "leaves_rules", "read_rules", "reread_rules"]

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
#: How MariaDB names the hidden column of a long unique key.
_HASH_COLUMN = re.compile(r"DB_ROW_HASH_[0-9]+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Trigger:
    schema: str
    name: str
    table: TableRef


@dataclass(frozen=True, slots=True)
class DownstreamColumn:
    """A column as the downstream's catalog describes it."""

    name: str
    #: ``information_schema.COLUMNS.DATA_TYPE``, lower-cased (``int``, ``varchar``...).
    data_type: str
    unsigned: bool = False
    #: Its character set's name (``utf8mb4``...; ``binary`` for the binary string types),
    #: None for the types that have none.
    charset: str | None = None
    #: ``COLUMN_TYPE`` as the catalog spells it (``varchar(20)``, ``decimal(10,2)
    #: unsigned``...): what an operator reads in an error.
    column_type: str = ""
    #: CHARACTER_MAXIMUM_LENGTH, CHARACTER_OCTET_LENGTH, NUMERIC_PRECISION (bits of a BIT),
    #: NUMERIC_SCALE, DATETIME_PRECISION; None where the catalog has none.
    char_length: int | None = None
    octet_length: int | None = None
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    #: An ENUM's or a SET's members, in order.
    members: tuple[str, ...] | None = None
    #: Computed by the server (a generated column, a period's row start or end).
    generated: bool = False
    nullable: bool = True
    #: A text column's collation (``utf8mb4_general_ci``...) and its id, as a table map
    #: numbers them (None where the server's list lacks the name): which values the
    #: downstream takes for one key value.
    collation: str | None = None
    collation_id: int | None = None
    #: AUTO_INCREMENT: a LOAD DATA of the table's rows takes its table-level AUTO-INC lock
    #: (``applier.LoadKinds``).
    auto_increment: bool = False

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Every table's columns travel with every Spark task: as a plain tuple of fields
        # they unpickle several times faster than a slotted dataclass's state.
        return DownstreamColumn, tuple(getattr(self, f) for f in _COLUMN_FIELDS)


_COLUMN_FIELDS = tuple(f.name for f in fields(DownstreamColumn))


@dataclass(frozen=True, slots=True)
class TableColumns:
    """A downstream table's columns in their order, and its primary key (column indexes in
    key order, each part's prefix length: 0 = the whole column)."""

    columns: tuple[DownstreamColumn, ...]
    primary_key: tuple[int, ...] = ()
    primary_key_prefixes: tuple[int, ...] = ()
    #: How many of the last ``columns`` are long unique keys' hidden hashes.
    hashes: int = 0
    #: Each unique key's columns (the primary key's among them), names lower-cased; a part
    #: on a prefix of a column is named ``name(length)``.
    unique: tuple[frozenset[str], ...] = ()
    #: Its engine is InnoDB: transactional, so a load rolled back leaves nothing.
    innodb: bool = False

    def only_here(self, logged: Iterable[str]) -> tuple[str, ...]:
        """The columns a statement may write that the ``logged`` ones lack (names are
        case-insensitive): not generated, not a long unique key's hidden hash."""
        names = {name.casefold() for name in logged}
        stored = self.columns[:len(self.columns) - self.hashes]
        return tuple(c.name for c in stored
                     if not c.generated and c.name.casefold() not in names)


@dataclass(frozen=True)
class TableRules:
    """Per-table write rules from the downstream catalog (picklable)."""

    #: Generated columns by table, names lower-cased (column names are case-insensitive).
    generated: dict[TableRef, frozenset[str]] = field(default_factory=dict)
    #: Tables linked by foreign keys: table -> its group (the group's smallest table).
    fk_group: dict[TableRef, TableRef] = field(default_factory=dict)
    triggers: tuple[Trigger, ...] = ()
    #: The downstream's max_allowed_packet (bytes).
    max_allowed_packet: int = 16 << 20
    #: System-versioned tables: table -> (row start, row end) column names, lower-cased.
    versioned: dict[TableRef, tuple[str, str]] = field(default_factory=dict)
    #: Versioned tables whose period is transaction ids, not timestamps.
    versioned_by_trx: frozenset[TableRef] = frozenset()
    sequences: frozenset[TableRef] = frozenset()
    #: Foreign keys as (child, referenced table): what ``fk_group`` is made of.
    links: frozenset[tuple[TableRef, TableRef]] = frozenset()
    #: Tables with long unique keys: how many (each a hidden ``DB_ROW_HASH_n`` column, logged
    #: last).
    hashes: dict[TableRef, int] = field(default_factory=dict)
    #: Whether rows logged without column names are written by ``columns`` (the sync met
    #: such rows: the upstream logs them so).
    positional: bool = False
    #: Every table's columns: what a logged column is checked against
    #: (``binrelay.apply.column_fit``), and how a nameless one is named.
    columns: dict[TableRef, TableColumns] = field(default_factory=dict)
    #: ``innodb_autoinc_lock_mode = 2``: no statement holds a table's AUTO-INC lock.
    autoinc_interleaved: bool = False

    def columns_of(self, table: TableRef) -> TableColumns | None:
        """The downstream table's columns, as the catalog spells its name or in another
        case (a downstream with lower_case_table_names)."""
        found = self.columns.get(table)
        if found is None:
            wanted = (table.schema.casefold(), table.table.casefold())
            found = next((c for t, c in self.columns.items()
                          if (t.schema.casefold(), t.table.casefold()) == wanted), None)
        return found

    def replace_unsafe(self, table: TableRef, key_columns: Iterable[str]) -> bool:
        """Whether a REPLACE of the table's rows by ``key_columns`` (the upstream's key) may
        delete another row than the one of its key, or keep the row it replaces: the
        downstream has a unique key that does not hold every one of them (one the upstream
        may not have: :meth:`keys_cross`), or none within them (no key, or a wider one: the
        row's old version would stay beside the new).  Such a table's rows are written by
        INSERT after their keys' deletes, so that the downstream's keys stop what they stop
        on a replica (``docs/apply.md``)."""
        info = self.columns_of(table)
        if info is None:
            return False
        need = {c.lower() for c in key_columns}
        return bool(need) and (any(not need <= k for k in info.unique)
                               or not any(k <= need for k in info.unique))

    def keys_cross(self, table: TableRef, key_columns: Iterable[str]) -> bool:
        """Whether rows of two different upstream keys may meet on a downstream unique key
        (one that does not hold every column of ``key_columns``): then one task writes all
        the table's survivors, so that none meets a row another task is still to move.
        (Without such a key, rows of different upstream keys never collide, and each
        key's task deletes and inserts its own.)"""
        info = self.columns_of(table)
        if info is None:
            return False
        need = {c.lower() for c in key_columns}
        return bool(need) and any(not need <= k for k in info.unique)

    @functools.cached_property
    def routing(self) -> str:
        """A digest of every table's unique keys (none included) and its columns' types
        and collations (the upstream's key may be on any of them): what decides which
        tables' survivors are written by INSERT (:meth:`replace_unsafe`) and which by one
        task (:meth:`keys_cross`, ``key_collation.loose_key``), so a part of the keyed
        task ids (``plan.keyed_task_id``).  Computed where the rules are read (and
        shipped with them), not in every task.  The leading tag names these rules
        themselves: a release that decides otherwise on the same keys changes it."""
        keys = sorted((t.schema, t.table, sorted(sorted(k) for k in c.unique),
                       [(col.name, col.data_type, col.collation) for col in c.columns])
                      for t, c in self.columns.items())
        return hashlib.blake2b(repr(("v4", keys)).encode(), digest_size=8).hexdigest()

    @functools.cached_property
    def known_names(self) -> frozenset[tuple[str, str]]:
        """Every table the rules say something of, by its case-folded name."""
        return frozenset((t.schema.casefold(), t.table.casefold()) for t in (
            *self.generated, *self.hashes, *self.versioned, *self.versioned_by_trx,
            *self.sequences, *self.columns,
            *self.fk_group, *(t for link in self.links for t in link)))

    def reads_alike(self, other: TableRules) -> bool:
        """Whether what a read stage makes with these rules is what it makes with ``other``
        (rules read again after a DDL): equal, or ``other`` knows only more tables' columns,
        each with one unique key at most, of columns no collation compares (a table the DDL
        made: its rows are routed by key under both, and its columns, the upstream's own,
        need no check; a text key is routed to one task while the rules know nothing of
        it, by its collation once they do).  Rows by position need every table's columns:
        equal rules only then."""
        if self == other:
            return True
        if self.positional or replace(self, columns={}) != replace(other, columns={}):
            return False
        mine = self.columns
        return all(t in other.columns for t in mine) and all(
            mine[t] == c if t in mine else len(c.unique) <= 1 and not _foldable_key(c)
            for t, c in other.columns.items())

    def group_of(self, table: TableRef) -> TableRef | None:
        return self.fk_group.get(table)

    def period(self, table: TableRef, columns: tuple[str, ...]) -> tuple[int, int] | None:
        """Indexes of a versioned table's row start and row end in ``columns``, or None."""
        names = self.versioned.get(table)
        if names is None:
            return None
        if table in self.versioned_by_trx:
            raise UnfaithfulApplyError(
                "a change of a table versioned by transaction id (its row start/end are the"
                " server's own transaction ids, which differ on every server)",
                table=str(table), hint="version it by timestamp, or exclude it from the sync")
        lowered = [c.lower() for c in columns]
        if names[0] not in lowered or names[1] not in lowered:
            raise UnfaithfulApplyError(
                "the row images of a system-versioned table do not name its row start/end"
                " columns", table=str(table),
                hint="set binlog_row_metadata = FULL on the upstream")
        return lowered.index(names[0]), lowered.index(names[1])

    def writable(self, table: TableRef, columns: tuple[str, ...]) -> tuple[int, ...] | None:
        """Indexes of ``columns`` that statements may assign, or None when all may: not a
        generated column, nor one of the last columns that are the table's long unique
        keys' hidden hashes (by their names: a table map without them keeps its columns)."""
        gen = self.generated.get(table, frozenset())
        hashes = self.hashes.get(table, 0)
        hidden = {i for i in range(max(0, len(columns) - hashes), len(columns))
                  if _HASH_COLUMN.fullmatch(columns[i])}
        if not gen and not hidden:
            return None
        return tuple(i for i, c in enumerate(columns) if c.lower() not in gen and i not in hidden)


def read_rules(conn: Any, *, exclude_schemas: Iterable[str] = (),
               positional: bool = False) -> TableRules:
    """Read every table's columns and keys, foreign keys, triggers and max_allowed_packet;
    ``positional``: the rules name the columns of rows logged without names."""
    skip = tuple(sorted(SYSTEM_SCHEMAS | set(exclude_schemas)))
    with conn.cursor() as cur:
        read = _read(cur, _Everywhere(skip), positional=positional)
        cur.execute("SELECT @@global.max_allowed_packet")
        (packet,) = cur.fetchone()
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'innodb_autoinc_lock_mode'")
        interleaved = [str(v) for _n, v in cur.fetchall()] == ["2"]
    conn.commit()
    generated, versioned, by_trx, sequences, links, triggers, hashes, columns = read
    return TableRules({t: frozenset(c) for t, c in generated.items()}, fk_groups(links),
                      triggers, int(packet), versioned, frozenset(by_trx),
                      frozenset(sequences), frozenset(links), hashes, positional, columns,
                      interleaved)


def reread_rules(conn: Any, rules: TableRules, statements: Iterable[tuple[str, str | None]],
                 *, exclude_schemas: Iterable[str] = ()) -> TableRules:
    """``rules`` after ``statements`` (``(DDL text, default schema)``, each of
    :data:`NARROW_KINDS`), the catalog read again for the tables they can name only: what
    :func:`read_rules` would return, at a fraction of its cost on a server with many
    tables.

    Such a DDL changes the rules of the tables it names, and the foreign keys of the tables
    that reference them (a renamed parent's children reference it by its new name); a
    foreign key is defined by its child, so every other link stays as it was.  Triggers are
    not read again: none of these kinds makes one, and a rename takes a table's triggers
    along, which a full read has refused already (``TableRules.triggers`` stops the sync).
    """
    skip = SYSTEM_SCHEMAS | set(exclude_schemas)
    with conn.cursor() as cur:
        named = {t for t in _candidates(cur, statements) if t.schema not in skip}
        # Opening a table's definition costs the server a millisecond: only those there.
        there = _existing(cur, sorted(named))
        named |= there  # as the server spells them (lower_case_table_names)
        children = {child for child, parent in rules.links if parent in named}
        generated, versioned, by_trx, sequences, links, _triggers, hashes, columns = _read(
            cur, _Named(sorted(there), sorted(there | children)), triggers=False)
    conn.commit()
    gone = named | children
    all_links = {link for link in rules.links if link[0] not in gone} | set(links)
    return TableRules(
        {**{t: c for t, c in rules.generated.items() if t not in named},
         **{t: frozenset(c) for t, c in generated.items()}},
        fk_groups(all_links), rules.triggers, rules.max_allowed_packet,
        {**{t: p for t, p in rules.versioned.items() if t not in named}, **versioned},
        frozenset({t for t in rules.versioned_by_trx if t not in named} | by_trx),
        frozenset({t for t in rules.sequences if t not in named} | sequences),
        frozenset(all_links),
        {**{t: n for t, n in rules.hashes.items() if t not in named}, **hashes},
        rules.positional,
        {**{t: c for t, c in rules.columns.items() if t not in named}, **columns},
        rules.autoinc_interleaved)


def _existing(cur: Any, tables: list[TableRef]) -> set[TableRef]:
    """Which of ``tables`` exist (views too)."""
    query = _Named(tables, []).select("TABLE_SCHEMA, TABLE_NAME", "TABLES", "1",
                                      "TABLE_SCHEMA", "TABLE_NAME")
    if query is None:
        return set()
    cur.execute(*query)
    return {TableRef(s, n) for s, n in cur.fetchall()}


@dataclass(frozen=True)
class _Everywhere:
    """Every table outside the ``skip`` schemas."""

    skip: tuple[str, ...]

    def select(self, columns: str, view: str, where: str, schema_col: str, name_col: str,
               *, children: bool = False) -> tuple[str, tuple[str, ...]]:
        del name_col, children
        marks = ", ".join(["%s"] * len(self.skip))
        return (f"SELECT {columns} FROM information_schema.{view} WHERE {where}"
                f" AND {schema_col} NOT IN ({marks})", self.skip)


@dataclass(frozen=True)
class _Named:
    """These tables only (``children``: for the foreign keys, whose child is looked up)."""

    tables: list[TableRef]
    children: list[TableRef]

    def select(self, columns: str, view: str, where: str, schema_col: str, name_col: str,
               *, children: bool = False) -> tuple[str, tuple[str, ...]] | None:
        tables = self.children if children else self.tables
        if not tables:
            return None
        # One equality per table: the server opens those tables' definitions only (an OR
        # or an IN list makes it read every table's).
        sql = " UNION ALL ".join(
            f"SELECT {columns} FROM information_schema.{view} WHERE {where}"
            f" AND {schema_col} = %s AND {name_col} = %s" for _ in tables)
        return sql, tuple(p for t in tables for p in (t.schema, t.table))


def _read(cur: Any, where: _Everywhere | _Named, *, triggers: bool = True,
          positional: bool = False) -> tuple[
        dict[TableRef, set[str]], dict[TableRef, tuple[str, str]], set[TableRef],
        set[TableRef], list[tuple[TableRef, TableRef]], tuple[Trigger, ...],
        dict[TableRef, int], dict[TableRef, TableColumns]]:
    """The catalog's facts :class:`TableRules` holds, for the tables ``where`` selects (in
    one round trip on a connection that runs scripts), their columns among them."""
    # Rows logged for the mysql schema's tables (time zones, a dump's grants...) are
    # applied as any others: by position they need its tables' columns.  Else they are
    # the server's own (the same definitions on a replica), and left out: every table's
    # columns travel with each Spark task, and the mysql schema's are hundreds.
    rows_where = replace(where, skip=tuple(s for s in where.skip if s != "mysql")) \
        if isinstance(where, _Everywhere) and positional else where
    where_skip = frozenset(where.skip) if isinstance(where, _Everywhere) else frozenset()
    asked = {
        "columns": rows_where.select(
            "TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, DATA_TYPE, COLUMN_TYPE,"
            " CHARACTER_SET_NAME, CHARACTER_MAXIMUM_LENGTH, CHARACTER_OCTET_LENGTH,"
            " NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, IS_GENERATED,"
            " GENERATION_EXPRESSION, IS_NULLABLE, COLLATION_NAME, EXTRA", "COLUMNS", "1",
            "TABLE_SCHEMA", "TABLE_NAME"),
        "tables": where.select(
            "TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, ENGINE", "TABLES",
            "(TABLE_TYPE IN ('SYSTEM VERSIONED', 'SEQUENCE') OR ENGINE IN ('MEMORY', 'HEAP',"
            " 'InnoDB'))", "TABLE_SCHEMA", "TABLE_NAME"),
        "links": where.select(
            "CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME",
            "REFERENTIAL_CONSTRAINTS", "1", "CONSTRAINT_SCHEMA", "TABLE_NAME", children=True),
        "triggers": where.select(
            "TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_SCHEMA, EVENT_OBJECT_TABLE", "TRIGGERS",
            "1", "EVENT_OBJECT_SCHEMA", "EVENT_OBJECT_TABLE") if triggers else None,
        # The unique keys; the long ones' index type is HASH (so is every index of a MEMORY
        # table, which "tables" lists, and which has no hidden column).
        "keys": rows_where.select(
            "TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME, SEQ_IN_INDEX, SUB_PART,"
            " INDEX_TYPE", "STATISTICS", "NON_UNIQUE = 0", "TABLE_SCHEMA", "TABLE_NAME"),
        "collations": None if cur.connection.server_version in _COLLATION_IDS
        else _collations_query(cur.connection.server_version)}
    queries = {name: q for name, q in asked.items() if q is not None}
    answers = dict(zip(queries, query_rows(cur, list(queries.values())), strict=True))
    if "collations" in answers:
        _COLLATION_IDS[cur.connection.server_version] = {
            str(name): int(i) for name, i in answers["collations"] if i is not None}
    ids = _COLLATION_IDS[cur.connection.server_version]
    generated: dict[TableRef, set[str]] = {}
    periods: dict[TableRef, dict[str, str]] = {}
    by_trx = set()
    for (schema, table, column, _o, data_type, _ct, _cs, _cl, _ol, _p, _s, _f, is_generated,
         expression, _n, _co, _x) in answers.get("columns", ()):
        if is_generated != "ALWAYS" or (schema in where_skip):
            continue
        ref = TableRef(schema, table)
        if expression in _PERIOD_ENDS:
            periods.setdefault(ref, {})[expression] = column.lower()
            if data_type.lower() == "bigint":
                by_trx.add(ref)
        else:
            generated.setdefault(ref, set()).add(column.lower())
    versioned = {}
    sequences = set()
    memory = set()
    innodb = set()
    for schema, table, kind, engine in answers.get("tables", ()):
        ref = TableRef(schema, table)
        if str(engine).upper() in ("MEMORY", "HEAP"):
            memory.add(ref)
        elif str(engine).upper() == "INNODB":
            innodb.add(ref)
        if kind not in ("SEQUENCE", "SYSTEM VERSIONED"):
            continue
        if kind == "SEQUENCE":
            sequences.add(ref)
            continue
        # Implicit periods are not in information_schema.COLUMNS (invisible columns).
        period = periods.get(ref, {})
        versioned[ref] = (period.get("ROW START", "row_start"),
                          period.get("ROW END", "row_end"))
    links = [(TableRef(a, b), TableRef(c, d)) for a, b, c, d in answers.get("links", ())]
    found = tuple(sorted((Trigger(s, n, TableRef(ts, tt))
                          for s, n, ts, tt in answers.get("triggers", ())),
                         key=lambda t: (t.schema, t.name)))
    hashes: dict[TableRef, int] = {}
    primary = []
    unique: dict[TableRef, dict[str, set[str]]] = {}
    for schema, table, index, column, seq, sub_part, index_type in answers.get("keys", ()):
        ref = TableRef(schema, table)
        # A part on a prefix of a column holds less than the column: not the column's name.
        unique.setdefault(ref, {}).setdefault(index, set()).add(
            column.lower() + (f"({sub_part})" if sub_part else ""))
        if index == "PRIMARY":
            primary.append((schema, table, column, seq, sub_part))
        elif index_type == "HASH" and int(seq) == 1 and ref not in memory \
                and schema not in where_skip:
            hashes[ref] = hashes.get(ref, 0) + 1
    columns = _table_columns(answers.get("columns", ()), primary, versioned, hashes, unique,
                             ids, innodb)
    return generated, versioned, by_trx, sequences, links, found, hashes, columns


#: The string types whose values are bytes: no character set in the catalog.
_BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob",
                           "longblob"})


def _table_columns(listing: Iterable[tuple[Any, ...]], primary: Iterable[tuple[Any, ...]],
                   versioned: dict[TableRef, tuple[str, str]],
                   hashes: dict[TableRef, int], unique: dict[TableRef, dict[str, set[str]]],
                   collation_ids: dict[str, int] | None = None,
                   innodb: frozenset[TableRef] | set[TableRef] = frozenset(),
                   ) -> dict[TableRef, TableColumns]:
    """Each table's columns in order, its primary key and unique keys, from the catalog's
    rows, with the columns the catalog does not show and the binlog logs: an implicit
    period's, the long unique keys' hashes."""
    listed: dict[TableRef, list[tuple[int, DownstreamColumn]]] = {}
    ids = collation_ids or {}
    for (schema, table, name, ordinal, data_type, column_type, charset, char_length,
         octet_length, precision, scale, fsp, is_generated, _e, nullable, collation, extra
         ) in listing:
        kind = str(data_type).lower()
        if charset is None and kind in _BINARY_TYPES:
            charset = "binary"
        if collation is not None:
            # Interned: the tasks' copy of the rules pickles each name once.
            collation = sys.intern(str(collation))
            charset = sys.intern(str(charset))
        spelled = str(column_type)
        listed.setdefault(TableRef(schema, table), []).append((int(ordinal), DownstreamColumn(
            name, kind, "unsigned" in spelled.lower(), charset, spelled, _int(char_length),
            _int(octet_length), _int(precision), _int(scale), _int(fsp),
            _members(spelled) if kind in ("enum", "set") else None,
            is_generated == "ALWAYS", nullable == "YES", collation,
            None if collation is None else ids.get(collation),
            "auto_increment" in str(extra or "").lower())))
    keys: dict[TableRef, list[tuple[int, str, int]]] = {}
    for schema, table, name, seq, sub_part in primary:
        keys.setdefault(TableRef(schema, table), []).append((int(seq), name, int(sub_part or 0)))
    out = {}
    for ref, entries in listed.items():
        cols = [col for _o, col in sorted(entries, key=lambda e: e[0])]
        period = versioned.get(ref)
        lowered = [c.name.lower() for c in cols]
        if period is not None and period[0] not in lowered and period[1] not in lowered:
            # An implicit period's row start and end are invisible to the catalog; the
            # server keeps them after the other columns, and logs them there.
            cols += [DownstreamColumn(period[0], "timestamp", fsp=6, generated=True),
                     DownstreamColumn(period[1], "timestamp", fsp=6, generated=True)]
            lowered += list(period)
        cols += [DownstreamColumn(f"DB_ROW_HASH_{n}", "bigint", generated=True)
                 for n in range(1, hashes.get(ref, 0) + 1)]
        parts = sorted(keys.get(ref, ()))
        out[ref] = TableColumns(tuple(cols),
                                tuple(lowered.index(name.lower()) for _s, name, _p in parts),
                                tuple(prefix for _s, _n, prefix in parts), hashes.get(ref, 0),
                                tuple(sorted((frozenset(k) for k in unique.get(ref, {}).values()),
                                             key=sorted)), ref in innodb)
    return out


#: Each server version's collation ids by name (its list, the same for every read).
_COLLATION_IDS: dict[str, dict[str, int]] = {}


def _collations_query(server_version: str) -> tuple[str, tuple[()]]:
    """The server's collation names with their ids: MariaDB 10.10+ names its UCA 14
    collations in full (``utf8mb4_uca1400_ai_ci``, what a column shows) only in
    COLLATION_CHARACTER_SET_APPLICABILITY, which older servers and MySQL give no ids."""
    if mariadb_at_least(server_version, (10, 10, 1)):
        return ("SELECT FULL_COLLATION_NAME, ID FROM"
                " information_schema.COLLATION_CHARACTER_SET_APPLICABILITY", ())
    return "SELECT COLLATION_NAME, ID FROM information_schema.COLLATIONS", ()


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


#: How the server escapes an ENUM or SET member in COLUMN_TYPE (``append_unescaped``),
#: besides a quote doubled.
_MEMBER_ESCAPES = {"\\": "\\", "0": "\0", "n": "\n", "r": "\r"}


def _members(column_type: str) -> tuple[str, ...]:
    """An ENUM's or SET's members from its COLUMN_TYPE (``enum('a','it''s','a\\\\b')``):
    quoted, a quote inside doubled, a backslash, NUL, LF and CR escaped."""
    inner = column_type[column_type.index("(") + 1:column_type.rindex(")")]
    out, i = [], 0
    while i < len(inner):
        if inner[i] != "'":
            i += 1
            continue
        j, value = i + 1, []
        while j < len(inner):
            char = inner[j]
            if char == "'":
                if inner[j + 1:j + 2] == "'":
                    value.append("'")
                    j += 2
                    continue
                break
            if char == "\\" and inner[j + 1:j + 2] in _MEMBER_ESCAPES:
                value.append(_MEMBER_ESCAPES[inner[j + 1]])
                j += 2
                continue
            value.append(char)
            j += 1
        out.append("".join(value))
        i = j + 1
    return tuple(out)


def _candidates(cur: Any, statements: Iterable[tuple[str, str | None]]) -> set[TableRef]:
    """Every table the ``(statement, default schema)`` pairs can name: each statement's words
    in each schema it names that exists (its default schema included; as the server spells
    it); keywords among them only widen the look-up.  One query for all of them."""
    names = [(words, candidates) for words, candidates in (
        statement_names(statement, schema) for statement, schema in statements)
        if words and candidates]
    if not names:
        return set()
    cur.execute(" UNION ALL ".join(
        f"SELECT {i}, SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN"
        f" ({', '.join(['%s'] * len(candidates))})" for i, (_w, candidates) in enumerate(names)),
        [c for _w, candidates in names for c in candidates])
    return {TableRef(s, w) for i, s in cur.fetchall() for w in names[int(i)][0]}


_PERIOD_ENDS = frozenset({"ROW START", "ROW END"})

#: DDL kinds (``apply.sql.ddl_kind``) that add nothing :class:`TableRules` tracks: no
#: table, column, foreign key, trigger, period or sequence comes into being (TRUNCATE, an
#: index that is not UNIQUE (``keeps_rules``), a view, an empty database), or they only take
#: some away (DROP TABLE / DATABASE), after which the old rules are stricter than needed,
#: never looser: a table still listed as linked by a foreign key is replayed in order, which
#: is right for any table.  (A DROP INDEX may take a primary key or a long unique key's
#: hidden column away: its table is read again.)
_RULES_KEPT = frozenset({"truncate", "create index", "create view", "drop view",
                         "create database", "drop table", "drop database"})


#: DDL kinds that change only the rules of the tables they name (and the foreign keys of
#: the tables referencing those): after them :func:`reread_rules` reads those tables only.
NARROW_KINDS = frozenset({"create table", "alter table", "rename table", "create index",
                          "drop index"})


def keeps_rules(statement: str) -> bool:
    """Whether rules read before ``statement`` (a DDL) stay safe to write with after it,
    so the catalog need not be read again."""
    kind = ddl_kind(statement).name
    if kind == "create index" and re.search(r"\bUNIQUE\b", sql_words(statement) or "UNIQUE",
                                            re.IGNORECASE):
        return False  # it may be a long unique key, with its hidden column
    return kind in _RULES_KEPT


#: Words of a CREATE or ALTER TABLE that may make a rule: generated columns and periods
#: (``AS``, ``GENERATED``), foreign keys, system versioning, sequences, a definition taken
#: from another table, a unique key (a long one has a hidden column), and (ALTER) whatever
#: may take a column, a key or the name away, or change the engine (whose key length limit
#: makes or unmakes long unique keys).
_MAY_MAKE_RULES = re.compile(
    r"\b(?:AS|GENERATED|REFERENCES|FOREIGN|CONSTRAINT|VERSIONING|PERIOD|SYSTEM|ROW|SEQUENCE"
    r"|LIKE|SELECT|DROP|CHANGE|MODIFY|RENAME|CONVERT|PARTITION|PARTITIONS|IF|UNIQUE)\b",
    re.IGNORECASE)
_ADDS_COLUMNS_ONLY = re.compile(r"\s*ALTER\s+TABLE\s+[^\s.]+(?:\s*\.\s*[^\s.]+)?\s+ADD\s+COLUMN\b",
                                re.IGNORECASE)


#: Column types whose values a key compares exactly (numbers, bits, years, dates and
#: times), as ``information_schema.COLUMNS`` names them; any other may be compared by more
#: than its bytes (text by a collation, FLOAT's -0) or is one the table map logs as text
#: (binary strings, UUID, INET): ``key_collation.may_fold`` decides alike.
EXACT_KEY_TYPES = frozenset({
    "tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "bit", "year", "date",
    "time", "datetime", "timestamp"})


def _foldable_key(info: TableColumns) -> bool:
    """Whether a unique key of the table has a column not of :data:`EXACT_KEY_TYPES`."""
    keyed = {re.sub(r"\(\d+\)$", "", name) for key in info.unique for name in key}
    return any(col.data_type not in EXACT_KEY_TYPES and col.name.lower() in keyed
               for col in info.columns)


#: Column types of a CREATE TABLE whose key a collation may compare loosely, or more
#: leniently than the upstream's (the downstream's database may have another default), or
#: that the table map logs as text (``key_collation.may_fold``): such a table's columns are
#: read before rows are written by key.
_TEXT_OR_FLOAT = re.compile(
    r"\b(?:CHAR|VARCHAR|VARCHAR2|CHARACTER|VARCHARACTER|NCHAR|NVARCHAR|NATIONAL|TEXT"
    r"|TINYTEXT|MEDIUMTEXT|LONGTEXT|LONG|CLOB|ENUM|SET|FLOAT|FLOAT4|FLOAT8|DOUBLE|REAL"
    r"|COLLATE|BINARY|VARBINARY|TINYBLOB|BLOB|MEDIUMBLOB|LONGBLOB|RAW|UUID|INET4|INET6"
    r"|JSON|GEOMETRY|POINT|VECTOR)\b", re.IGNORECASE)


def leaves_rules(rules: TableRules, statement: str, schema: str | None, *,
                 keys: bool = True) -> bool:
    """Whether ``rules`` are exactly what a read would give after ``statement`` (a DDL run
    on the catalog they describe, or on one whose earlier DDL are still to be read): a plain
    ``CREATE TABLE`` of a name the rules know nothing of (its columns plain: no text or
    floating point, whose keys a collation compares; no key to another table, not
    versioned), an ``ALTER TABLE ... ADD COLUMN`` of plain columns and
    nothing else, or a ``RENAME TABLE`` of tables the rules know nothing of (under either
    name).  Words in literals, quoted names and comments do not count.

    ``keys`` False: a ``CREATE TABLE`` with text or floating-point columns counts as plain
    too; the rules then lack only its columns, which rows applied by key need (a key
    of them may be compared by a collation: ``key_collation``) and rows replayed in relay
    order do not."""
    if rules.positional:
        return False  # the tables' columns are in the rules: each of these changes them
    statement = statement_proper(statement)
    kind = ddl_kind(statement).name
    if kind == "rename table":
        # Rules follow a renamed table: none before, none after.
        pairs = rename_pairs(statement, schema)
        return pairs is not None and _unknown(rules, [t for pair in pairs for t in pair])
    text = sql_words(statement)
    if text is None or _MAY_MAKE_RULES.search(text):
        return False
    if kind == "alter table":
        # (A key made of the new column, PRIMARY or bare KEY (which is PRIMARY): one the
        # rules would not know.)
        return _ADDS_COLUMNS_ONLY.match(text) is not None and \
            re.search(r"\b(?:ENGINE|PRIMARY|KEY)\b", text, re.IGNORECASE) is None
    if kind != "create table":
        return False
    made = created_table(statement, schema)
    return made is not None and re.match(r"\s*CREATE\s+TABLE\b", text, re.IGNORECASE) \
        is not None and (not keys or _TEXT_OR_FLOAT.search(text) is None) \
        and _unknown(rules, [made])


def _unknown(rules: TableRules, tables: list[TableRef | None]) -> bool:
    """Whether the rules say nothing of any of ``tables`` (a table dropped since its rules
    were read keeps them), in any spelling a server with lower_case_table_names may take
    for it."""
    if any(t is None for t in tables):
        return False
    keys = {(t.schema.casefold(), t.table.casefold()) for t in tables if t is not None}
    return keys.isdisjoint(rules.known_names)


def fk_groups(links: Iterable[tuple[TableRef, TableRef]]) -> dict[TableRef, TableRef]:
    """Connected groups of tables linked by foreign keys (child, parent), each named by its
    smallest table (stable across runs, so ordered task ids are too)."""
    parent: dict[TableRef, TableRef] = {}

    def find(t: TableRef) -> TableRef:
        parent.setdefault(t, t)
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for child, referenced in links:
        a, b = find(child), find(referenced)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {t: find(t) for t in parent}
