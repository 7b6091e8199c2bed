"""Batch planning (pure): from a batch's row changes to what the downstream must be told.

A batch is a relay range cut at transaction ends. For a table with a key, only the net
effect per key value matters (``docs/apply.md`` has the argument): the last operation on
each key by position, where an update that changes the key is a delete of the old key and
an upsert of the new one. Survivors can then run in any order, in parallel, any number of
times. Tables that cannot be compacted this way go to an *ordered* task that replays their
changes in relay order, exactly once (see :class:`OrderedTable`).

The pieces are exposed separately so that Spark can plan without collecting a batch on one
machine: ``flatMap(key_ops)`` → ``reduceByKey(later)`` keyed by ``(table, key_values)`` →
``partition_of`` ; :func:`ordered_reason` tells which tables must be routed whole to an
ordered task instead. :func:`plan_batch` is the same thing in one process.
"""

from __future__ import annotations

import json
import struct
import unicodedata
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from binrelay.apply.changes import ABSENT, DELETE, INSERT, Change, TableRef
from binrelay.errors import ChangeError

__all__ = [
    "BatchPlan",
    "Delete",
    "KeyedOp",
    "OrderedTable",
    "PlanPart",
    "Survivors",
    "Upsert",
    "batch_ordered_tables",
    "fold_key",
    "group_ordered",
    "key_ops",
    "keyed_task_id",
    "later",
    "ordered_reason",
    "ordered_task_id",
    "partition_of",
    "partitioner",
    "plan_batch",
]

NO_KEY = "no primary or NOT NULL unique key"
PARTIAL_IMAGE = "partial row image (binlog_row_image MINIMAL/NOBLOB)"
FOLDED_KEYS = "key values that a case/accent/pad-insensitive collation may treat as equal"
LENIENT_KEY = ("a key column the downstream compares more leniently than the upstream (its"
               " collation): replayed in order, so that two upstream keys it takes for one"
               " stop as on a replica")
FORCED = "routed to an ordered task by the caller"
DOWNSTREAM_COLUMNS = ("updates of a table with columns only the downstream has (a replica's"
                      " update keeps their values, a REPLACE would reset them): replayed in"
                      " relay order")
VERSIONED = ("system-versioned (its history rows follow from the order of its changes:"
             " replayed in relay order)")
FK_LINKED = ("linked by a foreign key (its changes may cascade: replayed in relay order with"
             " its group, foreign key checks on)")


@dataclass(frozen=True, slots=True)
class Upsert:
    """Write the row's final image (``REPLACE``): it must be complete, no ABSENT value."""

    table: TableRef
    columns: tuple[str, ...]
    key: tuple[int, ...]
    row: tuple[Any, ...]
    position: tuple[int, ...]

    @property
    def key_values(self) -> tuple[Any, ...]:
        return tuple(self.row[i] for i in self.key)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(self.columns[i] for i in self.key)


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove the row with this key value, if there is one."""

    table: TableRef
    key_columns: tuple[str, ...]
    key_values: tuple[Any, ...]
    position: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Survivors:
    """One table's keyed survivors in bulk, what ``spark.compact.merge`` hands the applier:
    one object per table, not one :class:`Upsert` or :class:`Delete` per row (making those
    and reading their keys back was most of an apply task's work before its statements).

    ``deleted`` (key values) and ``rows`` (final images) are each in key order, with their
    positions in ``deleted_at`` and ``rows_at``; applying it is applying :meth:`ops`.
    """

    table: TableRef
    columns: tuple[str, ...]
    key: tuple[int, ...]
    deleted: tuple[tuple[Any, ...], ...]
    deleted_at: tuple[tuple[int, ...], ...]
    rows: tuple[tuple[Any, ...], ...]
    rows_at: tuple[tuple[int, ...], ...]
    #: Rows written by INSERT after their keys' deletes, not by REPLACE: the downstream has
    #: a unique key the upstream's key is not part of, or none within it
    #: (``TableRules.replace_unsafe``).
    by_insert: bool = False

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(self.columns[i] for i in self.key)

    def ops(self) -> tuple[KeyedOp, ...]:
        key_columns = self.key_columns
        return (*(Delete(self.table, key_columns, k, at)
                  for k, at in zip(self.deleted, self.deleted_at, strict=True)),
                *(Upsert(self.table, self.columns, self.key, row, at)
                  for row, at in zip(self.rows, self.rows_at, strict=True)))


KeyedOp = Upsert | Delete


@dataclass(frozen=True, slots=True)
class OrderedTable:
    """All of one table's changes in a batch, in relay order, to be replayed one by one.

    Replaying is not idempotent (a keyless table may hold duplicate rows; a partial image
    needs the row as it was), so the task that applies it must run exactly once: the applier
    requires a task ledger for it (``binrelay.apply.checkpoint.TaskLedger``).
    """

    table: TableRef
    reason: str
    changes: tuple[Change, ...]


@dataclass(frozen=True, slots=True)
class PlanPart:
    """One task's work: keyed survivors (any order among them) or one ordered table.

    ``task_id`` is derived from the plan alone, so replaying the same relay range with the
    same number of tasks gives the same ids (the task ledger relies on that).
    """

    task_id: str
    ops: tuple[KeyedOp | Survivors, ...] = ()
    ordered: OrderedTable | None = None


@dataclass(frozen=True, slots=True)
class BatchPlan:
    keyed: tuple[KeyedOp, ...]
    ordered: tuple[OrderedTable, ...]
    #: How many changes went in (the compaction ratio is ``len(keyed) / changes``).
    changes: int

    def parts(self, n: int) -> tuple[PlanPart, ...]:
        """Keyed survivors spread over ``n`` tasks by key, then one task per ordered table.

        Empty keyed tasks are left out.
        """
        if n < 1:
            raise ValueError(f"need at least one task, got {n}")
        buckets: list[list[KeyedOp]] = [[] for _ in range(n)]
        for op in self.keyed:
            buckets[partition_of(op.table, op.key_values, n)].append(op)
        parts = [PlanPart(keyed_task_id(i, n), tuple(ops)) for i, ops in enumerate(buckets)
                 if ops]
        parts += [PlanPart(ordered_task_id(t.table), ordered=t) for t in self.ordered]
        return tuple(parts)


def keyed_task_id(index: int, n: int, routing: str = "") -> str:
    # Names the routing too (:func:`partitioner`, and ``routing``: the digest of the
    # downstream's unique keys, which send some tables' survivors to one task): a batch
    # begun by a release, or on a catalog, that routed keys otherwise finds none of its
    # keyed tasks in the ledger and runs them all again, which keyed survivors allow; it
    # never skips a task whose keys were not applied.
    return f"keyed-{index}-of-{n}-blocks{1 << KEY_BLOCK_BITS}" + \
        (f"-unique{routing}" if routing else "")


def ordered_task_id(table: TableRef) -> str:
    # JSON keeps schema and table apart whatever characters they hold.
    return "ordered:" + json.dumps([table.schema, table.table], ensure_ascii=False)


# ---- the keyed path, change by change ---------------------------------------------------


def key_ops(change: Change) -> tuple[KeyedOp, ...]:
    """A keyed change as operations on key values (the change must be keyed and complete)."""
    if not change.key or change.partial:
        raise ChangeError("not a keyed change with a full image; route it to an ordered task",
                          table=str(change.table), position=change.position)
    table, pos = change.table, change.position
    if change.op == INSERT:
        assert change.after is not None
        return (Upsert(table, change.columns, change.key, change.after, pos),)
    if change.op == DELETE:
        return (Delete(table, change.key_columns, change.before_key, pos),)
    assert change.after is not None
    upsert = Upsert(table, change.columns, change.key, change.after, pos)
    old = change.before_key
    if old == upsert.key_values:
        return (upsert,)
    return (Delete(table, change.key_columns, old, pos), upsert)


def later(a: KeyedOp, b: KeyedOp) -> KeyedOp:
    """Of two operations on the same key, the one that wins (the later by position)."""
    if a.position == b.position and a != b:
        raise ChangeError("two different operations on one key at the same position",
                          table=str(a.table), position=a.position)
    return a if a.position > b.position else b


def ordered_reason(change: Change) -> str | None:
    """Why this change's table must go to an ordered task for the whole batch, if it must.

    (:func:`plan_batch` adds one batch-wide reason: :data:`FOLDED_KEYS`.)
    """
    if not change.key:
        return NO_KEY
    if change.partial:
        return PARTIAL_IMAGE
    return None


def fold_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A key value as a lenient collation might see it: case, accents and trailing spaces
    dropped from text.

    The planner compares keys exactly, the downstream by the column's collation. If two
    distinct keys of a batch fold to the same value, the downstream might take them for one
    row, so the table is replayed in order instead (an over-approximation: costs speed only).
    """
    if str not in map(type, values):
        return values  # nothing to fold (checked without a Python loop)
    return tuple(_fold_text(v) if isinstance(v, str) else v for v in values)


def _fold_text(text: str) -> str:
    if text.isascii():
        return text.lower().rstrip(" ")
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return stripped.casefold().rstrip(" ")


# ---- partitioning -----------------------------------------------------------------------

_LEN = struct.Struct(">I")


def _canonical(value: Any) -> bytes:
    if value is None:
        tag, payload = b"N", b""
    elif isinstance(value, int):
        tag, payload = b"I", str(int(value)).encode()
    elif isinstance(value, str):
        tag, payload = b"S", value.encode("utf-8", "surrogatepass")
    elif isinstance(value, Decimal):
        # As DECIMAL values were routed when handed on as text; -0 as 0, which it equals.
        tag, payload = b"S", format(value.copy_abs() if value.is_zero() else value,
                                    "f").encode()
    elif isinstance(value, bytes | bytearray):
        tag, payload = b"B", bytes(value)
    elif value is ABSENT:
        raise ValueError("an absent value cannot be part of a key")
    else:
        raise TypeError(f"not a SQL parameter: {type(value).__name__}")
    return tag + _LEN.pack(len(payload)) + payload


def partition_of(table: TableRef, key_values: tuple[Any, ...], n: int) -> int:
    """Which of ``n`` tasks applies this key: the same in every process and every run."""
    return partitioner(table, n)(key_values)


#: A one-integer key goes to the task of its block of 2**KEY_BLOCK_BITS consecutive values,
#: so each task writes runs of neighbouring rows, as the upstream's own inserts did; with
#: every key routed alone, four tasks loading one table each wrote every fourth row and
#: split its pages in the middle (250,000 sysbench rows: 103–115 MB of table instead of
#: 57–64, its inserts 1.3 s instead of 1.1, a CREATE INDEX after them twice as long).
KEY_BLOCK_BITS = 10


def partitioner(table: TableRef, n: int, *, fold: bool = False
                ) -> Callable[[tuple[Any, ...]], int]:
    """:func:`partition_of` for one table's keys, its part of the work done once; with
    ``fold``, of the keys :func:`fold_key` makes of them (how keyed survivors are routed:
    keys a collation may take for one row meet in one task).

    A batch replayed after a crash skips the keyed tasks its task ledger says committed, so
    their keys must be the same keys as before: whenever this routing changes,
    :func:`keyed_task_id` changes with it."""
    if n == 1:
        return lambda _key: 0
    # crc32 of a length-prefixed encoding, not hash(): str hashing is salted per process.
    # crc32(a + b) == crc32(b, crc32(a)): the table's part is computed once.
    head = zlib.crc32(_canonical(table.schema) + _canonical(table.table))
    crc32, pack = zlib.crc32, _LEN.pack
    # A block's task, once per block: a read task routes every survivor (bounded: keys
    # spread too thin to share blocks are simply computed again).
    blocks: dict[int, int] = {}

    def of(key_values: tuple[Any, ...]) -> int:
        if len(key_values) == 1 and isinstance(key_values[0], int):
            block = key_values[0] >> KEY_BLOCK_BITS
            target = blocks.get(block)
            if target is None:
                if len(blocks) >= 1 << 16:
                    blocks.clear()
                text = str(block).encode()
                target = blocks[block] = crc32(b"K" + pack(len(text)) + text, head) % n
            return target
        if fold:
            key_values = fold_key(key_values)  # (an integer folds to itself)
        return crc32(b"".join([_canonical(v) for v in key_values]), head) % n

    return of


# ---- the whole batch --------------------------------------------------------------------


def plan_batch(changes: Iterable[Change], *, ordered_tables: Iterable[TableRef] = ()) -> BatchPlan:
    """Net effect of a batch: keyed survivors plus ordered tables (``ordered_tables`` adds
    tables the caller wants replayed in order anyway).

    Whether a table is keyed or ordered must be decided for the whole batch: planning a
    slice of a batch (one Spark partition) is only right if ``ordered_tables`` holds every
    table that the whole batch sends to ordered tasks (:func:`batch_ordered_tables`) and each
    of those tables' changes are all in one slice.
    """
    by_table: dict[TableRef, list[Change]] = {}
    count = 0
    for change in changes:
        by_table.setdefault(change.table, []).append(change)
        count += 1
    forced = set(ordered_tables)

    keyed: list[KeyedOp] = []
    ordered: list[OrderedTable] = []
    for table in sorted(by_table):
        table_changes = by_table[table]
        reason, survivors = _decide(table_changes, table in forced)
        if survivors is not None:
            keyed.extend(survivors)
        else:
            ordered.append(OrderedTable(table, reason, _relay_order(table_changes)))
    return BatchPlan(tuple(keyed), tuple(ordered), count)


def batch_ordered_tables(changes: Iterable[Change]) -> dict[TableRef, str]:
    """The tables these changes send to ordered tasks, with the reason.

    Exact for a whole batch. For Spark: run it on slices in which keys that fold together
    meet (e.g. partitions routed by ``partition_of(table, fold_key(key), n)``), take the
    union, and pass it to :func:`plan_batch` as ``ordered_tables`` after routing those
    tables' changes to one task each.
    """
    by_table: dict[TableRef, list[Change]] = {}
    for change in changes:
        by_table.setdefault(change.table, []).append(change)
    out = {}
    for table, table_changes in by_table.items():
        reason, survivors = _decide(table_changes, False)
        if survivors is None:
            out[table] = reason
    return out


def _decide(changes: list[Change], forced: bool) -> tuple[str, list[KeyedOp] | None]:
    """The keyed survivors of one table's changes, or the reason they must be replayed."""
    _check_one_shape(changes)
    if forced:
        return FORCED, None
    reason = next((r for r in map(ordered_reason, changes) if r is not None), None)
    if reason is not None:
        return reason, None
    survivors = _net(changes)
    return (FOLDED_KEYS, None) if survivors is None else ("", survivors)


def _check_one_shape(changes: list[Change]) -> None:
    # DDL is a barrier, so a batch sees one definition per table; two would mean the source
    # let a batch span a DDL, and compaction across it would be wrong.
    first = changes[0]
    for change in changes:
        if change.columns != first.columns or change.key != first.key:
            raise ChangeError("the table's columns or key change within one batch (a batch "
                              "must not span a DDL)", table=str(change.table),
                              position=change.position)


def _net(changes: list[Change]) -> list[KeyedOp] | None:
    """Last operation per key, or None if two distinct keys fold together."""
    last: dict[tuple[Any, ...], KeyedOp] = {}
    for change in changes:
        for op in key_ops(change):
            seen = last.get(op.key_values)
            last[op.key_values] = op if seen is None else later(seen, op)
    folded: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for key in last:
        other = folded.setdefault(fold_key(key), key)
        if other != key:
            return None
    # Deletes before upserts of the same change: fewer REPLACE conflicts, same result.
    return sorted(last.values(), key=lambda op: (op.position, isinstance(op, Upsert)))


def group_ordered(ordered: Iterable[OrderedTable],
                  group_of: Any) -> list[OrderedTable]:
    """Ordered tables of one foreign key group merged into one, in relay order, named by the
    group (``group_of(table)``: the group's table, or None for a table of its own).

    A cascade crosses tables, so a group's changes must be replayed in one sequence.
    """
    out: list[OrderedTable] = []
    groups: dict[TableRef, list[OrderedTable]] = {}
    for table in ordered:
        group = group_of(table.table)
        if group is None:
            out.append(table)
        else:
            groups.setdefault(group, []).append(table)
    for group, members in sorted(groups.items()):
        changes = [ch for t in members for ch in t.changes]
        out.append(OrderedTable(group, FK_LINKED, _relay_order(changes)))
    return out


def _relay_order(changes: list[Change]) -> tuple[Change, ...]:
    ordered = sorted(changes, key=lambda c: c.position)
    out: list[Change] = []
    for change in ordered:
        if out and out[-1].position == change.position:
            # A re-read of the same relay bytes yields the same change twice: drop the copy.
            if out[-1] != change:
                raise ChangeError("two different changes at the same position",
                                  table=str(change.table), position=change.position)
            continue
        out.append(change)
    return tuple(out)
