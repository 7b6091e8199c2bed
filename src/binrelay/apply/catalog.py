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

__all__ = ["SYSTEM_SCHEMAS", "TableRules", "Trigger", "read_rules"]

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

    def group_of(self, table: TableRef) -> TableRef | None:
        return self.fk_group.get(table)

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
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS"
            f" WHERE IS_GENERATED = 'ALWAYS' AND TABLE_SCHEMA NOT IN ({marks})", skip)
        for schema, table, column in cur.fetchall():
            generated.setdefault(TableRef(schema, table), set()).add(column.lower())
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
                      triggers, int(packet))


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
