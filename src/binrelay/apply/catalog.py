"""What the downstream's catalog says about how a replicated table must be written.

A replica writes rows below SQL: no generated column is ever assigned, no trigger fires
for a row event, and foreign key actions run because the row's change is applied with the
upstream's foreign key checks.  binrelay writes with SQL statements, so it must know, per
table, what a statement would do beyond its own row:

* **generated columns** (STORED/PERSISTENT and VIRTUAL) cannot be assigned: they are left
  out of every statement; the server computes them from the other columns, as upstream.
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
* **triggers** would fire a second time (their effects are in the binlog already):
  binrelay does not replay trigger DDL and refuses to write to a downstream that has
  triggers on the tables it writes (see ``docs/apply.md``).

The catalog is read on the driver (at start and after every DDL) and shipped to the tasks
as :class:`TableRules`, a small picklable value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from binrelay.apply.changes import TableRef
from binrelay.apply.sql import ddl_kind
from binrelay.errors import UnfaithfulApplyError

__all__ = ["SYSTEM_SCHEMAS", "TableRules", "Trigger", "keeps_rules", "read_rules"]

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


@dataclass(frozen=True, slots=True)
class Trigger:
    schema: str
    name: str
    table: TableRef


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
        """Indexes of ``columns`` that statements may assign, or None when all may."""
        gen = self.generated.get(table)
        if not gen:
            return None
        return tuple(i for i, c in enumerate(columns) if c.lower() not in gen)


def read_rules(conn: Any, *, exclude_schemas: Iterable[str] = ()) -> TableRules:
    """Read generated columns, foreign keys, triggers and max_allowed_packet."""
    skip = tuple(sorted(SYSTEM_SCHEMAS | set(exclude_schemas)))
    marks = ", ".join(["%s"] * len(skip))
    generated: dict[TableRef, set[str]] = {}
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, GENERATION_EXPRESSION, DATA_TYPE"
            " FROM information_schema.COLUMNS"
            f" WHERE IS_GENERATED = 'ALWAYS' AND TABLE_SCHEMA NOT IN ({marks})", skip)
        periods: dict[TableRef, dict[str, str]] = {}
        by_trx = set()
        for schema, table, column, expression, data_type in cur.fetchall():
            ref = TableRef(schema, table)
            if expression in _PERIOD_ENDS:
                periods.setdefault(ref, {})[expression] = column.lower()
                if data_type.lower() == "bigint":
                    by_trx.add(ref)
            else:
                generated.setdefault(ref, set()).add(column.lower())
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES"
            f" WHERE TABLE_TYPE IN ('SYSTEM VERSIONED', 'SEQUENCE') AND TABLE_SCHEMA NOT IN"
            f" ({marks})", skip)
        versioned = {}
        sequences = set()
        for schema, table, kind in cur.fetchall():
            ref = TableRef(schema, table)
            if kind == "SEQUENCE":
                sequences.add(ref)
                continue
            # Implicit periods are not in information_schema.COLUMNS (invisible columns).
            named = periods.get(ref, {})
            versioned[ref] = (named.get("ROW START", "row_start"),
                              named.get("ROW END", "row_end"))
        cur.execute(
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA,"
            " REFERENCED_TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS"
            f" WHERE CONSTRAINT_SCHEMA NOT IN ({marks})", skip)
        links = [(TableRef(a, b), TableRef(c, d)) for a, b, c, d in cur.fetchall()]
        cur.execute(
            "SELECT TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_SCHEMA, EVENT_OBJECT_TABLE"
            f" FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA NOT IN ({marks})"
            " ORDER BY 1, 2", skip)
        triggers = tuple(Trigger(s, n, TableRef(ts, tt)) for s, n, ts, tt in cur.fetchall())
        cur.execute("SELECT @@global.max_allowed_packet")
        (packet,) = cur.fetchone()
    conn.commit()
    return TableRules({t: frozenset(c) for t, c in generated.items()}, fk_groups(links),
                      triggers, int(packet), versioned, frozenset(by_trx),
                      frozenset(sequences))


_PERIOD_ENDS = frozenset({"ROW START", "ROW END"})

#: DDL kinds (``apply.sql.ddl_kind``) that add nothing :class:`TableRules` tracks: no
#: table, column, foreign key, trigger, period or sequence comes into being (TRUNCATE, an
#: index, a view, an empty database), or they only take some away (DROP TABLE / DATABASE),
#: after which the old rules are stricter than needed, never looser: a table still listed
#: as linked by a foreign key is replayed in order, which is right for any table.
_RULES_KEPT = frozenset({"truncate", "create index", "drop index", "create view", "drop view",
                         "create database", "drop table", "drop database"})


def keeps_rules(statement: str) -> bool:
    """Whether rules read before ``statement`` (a DDL) stay safe to write with after it,
    so the catalog need not be read again."""
    return ddl_kind(statement).name in _RULES_KEPT


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
