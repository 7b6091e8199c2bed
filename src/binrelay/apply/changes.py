"""What the applier consumes: one row change of one table, values already SQL parameters.

Everything here is a frozen, picklable value: Spark ships changes between processes.

Values are what PyMySQL can escape: ``None``, ``int``, ``str``, ``bytes``. The caller turns
decoded binlog values into these (text as ``str``, binary strings as ``bytes``, BIT and
integers as ``int``, DECIMAL/float/temporal as the server's own text). A value may also be
:data:`ABSENT`: the column is not in this row image (``binlog_row_image=MINIMAL`` or
``NOBLOB``); an absent value is never written (see ``docs/apply.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from binrelay.errors import ChangeError
from binrelay.rows.compiler import ABSENT

__all__ = ["ABSENT", "DELETE", "INSERT", "OPS", "UPDATE", "Change", "TableRef"]

INSERT = "insert"
UPDATE = "update"
DELETE = "delete"
OPS = frozenset((INSERT, UPDATE, DELETE))


@dataclass(frozen=True, order=True, slots=True)
class TableRef:
    schema: str
    table: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"

    def parts(self) -> tuple[str, str]:
        return self.schema, self.table


@dataclass(frozen=True, slots=True)
class Change:
    """One row change, as the upstream applied it.

    ``key`` indexes ``columns`` and names the primary key (or a NOT NULL unique key); empty
    means the table has neither, and its changes are applied in relay order without
    compaction. ``position`` is sortable, increases in relay order and is unique per change
    (e.g. ``(subdir seq, file number, event offset, row index)``).
    """

    table: TableRef
    op: str
    columns: tuple[str, ...]
    key: tuple[int, ...]
    before: tuple[Any, ...] | None
    after: tuple[Any, ...] | None
    position: tuple[int, ...]
    #: Whether the upstream applied it with foreign key checks on (a rows event's
    #: NO_FOREIGN_KEY_CHECKS flag clear); tables linked by foreign keys are replayed so.
    fk_checks: bool = True
    #: In a system-versioned table: the indexes of its row start and row end columns
    #: (``binrelay.apply.versioning`` replays such changes).
    period: tuple[int, int] | None = None
    #: A write of a sequence's one row (MariaDB): absent values keep the stored ones, as
    #: ``binlog_row_image=MINIMAL`` logs only what a NEXTVAL changed.
    sequence: bool = False
    #: The indexes of its text columns (compared by a collation): where a row is found by
    #: all its columns (no key), their values are matched by their characters too.
    text: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # Cheap shape checks only: these run once per row of a catch-up.
        problem = _shape_problem(self)
        if problem:
            raise ChangeError(problem, table=str(self.table), position=self.position)

    @property
    def before_key(self) -> tuple[Any, ...]:
        """The key value the row had before the change (update, delete)."""
        assert self.before is not None
        return tuple(self.before[i] for i in self.key)

    @property
    def after_key(self) -> tuple[Any, ...]:
        """The key value the row has after the change (insert, update).

        A minimal after image may leave out unchanged key columns: they keep the before value.
        """
        after, before = self.after, self.before
        assert after is not None
        return tuple(before[i] if after[i] is ABSENT and before is not None else after[i]
                     for i in self.key)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(self.columns[i] for i in self.key)

    @property
    def partial(self) -> bool:
        """The after image lacks a column: the final row cannot be written blind."""
        return self.after is not None and any(v is ABSENT for v in self.after)


def _shape_problem(change: Change) -> str:
    op, width = change.op, len(change.columns)
    if op not in OPS:
        return f"unknown op {op!r}"
    if (change.before is None) != (op == INSERT):
        return f"{op} must {'not ' if op == INSERT else ''}have a before image"
    if (change.after is None) != (op == DELETE):
        return f"{op} must {'not ' if op == DELETE else ''}have an after image"
    for name, image in (("before", change.before), ("after", change.after)):
        if image is not None and len(image) != width:
            return f"{name} image has {len(image)} values for {width} columns"
    if any(not 0 <= i < width for i in change.key) or len(set(change.key)) != len(change.key):
        return f"key {change.key} does not index {width} columns"
    if not change.position:
        return "empty position"
    # The key must identify the row: present in the image that names it (before for update
    # and delete, after for insert; an update's after image may omit unchanged key columns).
    named = change.after if op == INSERT else change.before
    assert named is not None
    if any(named[i] is ABSENT or named[i] is None for i in change.key):
        return "a key column is NULL or missing from the row image"
    if op == UPDATE and change.after is not None and any(
        change.after[i] is None for i in change.key
    ):
        return "an update sets a key column to NULL"
    return ""
