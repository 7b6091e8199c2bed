"""Map-side compaction for ``binrelay sync``: what a relay partition ships to apply tasks.

A batch's changes mostly touch the same keys again and again (a sysbench batch of 226 k row
changes lands on 40 k rows), and only the last operation per key matters to a keyed table
(``binrelay.apply.plan``).  So each read task decodes its partition and keeps the last
image per key before anything crosses the shuffle; the apply task then keeps, per key, the
record with the latest position over all partitions.  Only survivors are converted to SQL
parameters and pickled, as flat tuples (the table's shape is one shared object, which the
pickler writes once per batch of records).

Tables that must be replayed in order (no key, partial images, keys a collation may fold
together: :func:`binrelay.apply.plan.ordered_reason`) travel as whole
:class:`~binrelay.apply.changes.Change` objects, routed by table.  A reason that shows up
only late in a partition (a partial image) or only across partitions (folded keys) is
handled by decoding again with :func:`raw_records` for those tables: rare, and only slower.

Record layouts (first element says which):

* ``(KEYED, shape, key_values, position, row)``: ``row`` is the final image as parameters,
  or ``None`` when the key ends up deleted; ``shape`` is ``(TableRef, columns, key)``.
* ``(RAW, change, reason)``: a change of a table replayed in order, and why.
* ``(STATS, rows_by_op, ())``: what the partition read (op -> row changes).
* ``(FLAGS, suspect, ())``, one per partition to every task: whether the partition had a
  table to replay in order or a key with text in it (``simple`` tells what that allows).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from binrelay.apply.catalog import TableRules
from binrelay.apply.changes import ABSENT, DELETE, INSERT, UPDATE, Change, TableRef
from binrelay.apply.key_collation import lenient_key, loose_key, may_fold
from binrelay.apply.plan import (
    DOWNSTREAM_COLUMNS,
    FK_LINKED,
    FOLDED_KEYS,
    LENIENT_KEY,
    NO_KEY,
    PARTIAL_IMAGE,
    VERSIONED,
    Survivors,
    fold_key,
    partition_of,
    partitioner,
)
from binrelay.apply.positional import complete, nameless
from binrelay.errors import BinlogFormatError, ChangeError, UnfaithfulApplyError
from binrelay.position import SubdirName, binlog_sort_key
from binrelay.rows.coltypes import CHARACTER_TYPES
from binrelay.rows.decoder import image_decoders
from binrelay.rows.events import NO_FOREIGN_KEY_CHECKS_F, OP_CODES, row_images
from binrelay.rows.scanner import KeyFold, fold_events_c, row_error
from binrelay.spark.changes import image_params, to_param
from binrelay.spark.decode import iter_segment_runs

KEYED, RAW, STATS, FLAGS = 0, 1, 2, 3

Shape = tuple[TableRef, tuple[str, ...], tuple[int, ...]]
Record = tuple[Any, ...]


@dataclass
class _Table:
    """One table's state while a partition is compacted."""

    shape: Shape
    convert: Any  # image -> SQL parameters
    keyof: Any  # image -> key values as SQL parameters (see _key_function)
    #: The key's columns, as indexes into the decoded image (``fold_images``).
    key_index: tuple[int, ...] = ()
    #: key values -> (position, image or None): the last operation on each key.
    last: dict[tuple[Any, ...], tuple[tuple[int, ...], Any]] = field(default_factory=dict)
    reason: str | None = None
    #: What its changes are routed by when replayed in order: the table, or its foreign
    #: key group (a group is replayed whole, in relay order, by one task).
    route: TableRef | None = None
    #: What its changes carry besides their images (``table_shape``).
    traits: dict[str, Any] = field(default_factory=dict)
    #: The rules know nothing of it and its key may fold (``may_fold``): one task.
    unknown_fold: bool = False
    #: The downstream's table has columns the logged rows lack: its updates must keep
    #: their values, as a replica's do (its inserts and deletes are written as ever).
    downstream_only: bool = False


#: Reasons known from the table alone, the same in every partition of a batch.
_STATIC = frozenset({NO_KEY, FK_LINKED, VERSIONED, LENIENT_KEY})


_PLAIN = frozenset((int, str, bytes))


def _plain_key(image: tuple[Any, ...], key: tuple[int, ...]) -> tuple[Any, ...] | None:
    """The key's values when they are all ``int``, ``str`` or ``bytes`` (SQL parameters as
    they are), else None."""
    values = tuple([image[i] for i in key])
    for v in values:
        if type(v) not in _PLAIN:
            return None
    return values


def _key_function(key: tuple[int, ...], columns: Any) -> Any:
    """``image -> key values`` as SQL parameters, or None when a key column is NULL or
    absent (the row cannot be identified).  For the images :func:`fold_images` leaves."""

    def keyof(image: tuple[Any, ...]) -> tuple[Any, ...] | None:
        values = _plain_key(image, key)
        if values is not None:
            return values
        if any(image[i] is None or image[i] is ABSENT for i in key):
            return None
        return tuple(to_param(image[i], columns[i]) for i in key)

    return keyof


_UPDATE_CODE, _DELETE_CODE = OP_CODES[UPDATE], OP_CODES[DELETE]


def fold_images_python(last: dict[tuple[Any, ...], Any], images: list[tuple[Any, Any]],
                       op: int, key: tuple[int, ...], seq: int, file_no: int, offset: int,
                       row: int) -> int:
    """The compaction loop's common case (``_speedups.fold_images`` runs it in C): each
    image's key, its last operation recorded in ``last`` as :func:`compact_segment` does,
    for the images of one rows event (``op`` an ``OP_CODES`` value, ``key`` the key's
    indexes into the decoded image, ``row`` the first image's row number).  Returns how
    many it took; it stops, leaving ``last`` as it was for that image, at the first whose
    key values are not all ``int``, ``str`` or ``bytes`` (NULL, ABSENT, other types: the
    caller converts them) or whose after image lacks a column (ABSENT: a partial image)."""
    for i, (before, after) in enumerate(images):
        if op == _DELETE_CODE:
            kb = _plain_key(before, key)
            if kb is None:
                return i
            last[kb] = ((seq, file_no, offset, row + i), None)
            continue
        for v in after:
            if v is ABSENT:
                return i
        ka = _plain_key(after, key)
        if ka is None:
            return i
        position = (seq, file_no, offset, row + i)
        if op == _UPDATE_CODE:
            kb = _plain_key(before, key)
            if kb is None:
                return i
            if ka != kb:
                last[kb] = (position, None)
        last[ka] = (position, after)
    return len(images)


try:
    from binrelay._speedups import fold_images as fold_images_c
except ImportError:  # pragma: no cover - dev/setup builds it
    fold_images_c = None

fold_images = fold_images_c or fold_images_python


def _bad_key(table: _Table, position: tuple[int, ...]) -> ChangeError:
    return ChangeError("a key column is NULL or missing from the row image",
                       table=str(table.shape[0]), position=position)


def compact_segment(relay_dir: str, segment: Any, tasks: int,
                    rules: TableRules | None = None, *, by_name: bool = True
                    ) -> Iterator[tuple[int, Record]]:
    """The partition's records, each with the apply task (of ``tasks``) it goes to;
    ``by_name``: as :func:`table_shape`."""
    rules = rules or TableRules()
    by_map: dict[int, tuple[Any, _Table]] = {}
    by_ref: dict[TableRef, _Table] = {}
    raw: list[Change] = []
    ops = {INSERT: 0, UPDATE: 0, DELETE: 0}
    seq = SubdirName.parse(segment.subdir).seq
    file_no = binlog_sort_key(segment.file)[1]
    # The rows events of a keyed table seen once here are folded by the scanner's C loop
    # (KeyFold), the Python below taking only what that loop leaves.
    fold = KeyFold(seq, file_no) if fold_events_c is not None else None
    # Per rows event, not per change: the table's state is found once, and no object is
    # made per row (a change object and three generator hops were a third of a read task).
    for tm, op, where, offset, row, images in _event_images(relay_dir, segment, rules,
                                                            by_name, fold):
        found = by_map.get(id(tm))
        if found is None or found[0] is not tm:
            found = (tm, _table_state(tm, by_ref, rules, by_name))
            by_map[id(tm)] = found
        table = found[1]
        ops[op] += len(images)
        if op == UPDATE and table.downstream_only and table.reason is None:
            # A REPLACE of the row would reset those columns: UPDATE, in relay order.
            table.reason = DOWNSTREAM_COLUMNS
        if table.reason is not None:
            if table.reason in _STATIC:
                ref, columns, key = table.shape
                convert, fk, traits = table.convert, _fk_checks(where), table.traits
                for i, (before, after) in enumerate(images, row):
                    raw.append(Change(ref, op, columns, key, convert(before), convert(after),
                                      (seq, file_no, offset, i, 0), fk, **traits))
            continue  # a late reason: re-read below
        last = table.last
        done = fold_images(last, images, OP_CODES[op], table.key_index, seq, file_no,
                           offset, row)
        if done == len(images):
            if fold is not None and id(tm) not in fold.fast and not table.downstream_only:
                _fold_later(fold, tm, table)
            continue
        keyof = table.keyof
        for i, (before, after) in enumerate(images[done:], row + done):
            position = (seq, file_no, offset, i)
            if op == INSERT:
                if ABSENT in after:
                    table.reason = PARTIAL_IMAGE
                    break
                k = keyof(after)
                if k is None:
                    raise _bad_key(table, position)
                last[k] = (position, after)
            elif op == DELETE:
                k = keyof(before)
                if k is None:
                    raise _bad_key(table, position)
                last[k] = (position, None)
            else:
                if ABSENT in after:
                    table.reason = PARTIAL_IMAGE
                    break
                kb = keyof(before)
                ka = keyof(after)
                if kb is None or ka is None:
                    raise _bad_key(table, position)
                if ka != kb:
                    last[kb] = (position, None)
                last[ka] = (position, after)
        if table.reason is not None and fold is not None:
            _unfold(fold, table)  # (a partial image: the Python loop's from here on)

    if fold is not None:
        for op, code in OP_CODES.items():
            ops[op] += fold.counts[code]
    redo = set()
    text_keys = False
    for table in by_ref.values():
        text = _text_key(table.last)
        text_keys = text_keys or text
        if table.reason is None and text and _folds_together(table.last):
            table.reason = FOLDED_KEYS
        if table.reason is not None and table.reason not in _STATIC:
            redo.add(table.shape[0])
    if redo:
        raw += [ch for ch in segment_changes(relay_dir, segment, rules, by_name=by_name)
                if ch.table in redo]
    late = False
    for ch in raw:
        table = by_ref[ch.table]
        late = late or table.reason not in _STATIC
        yield partition_of(table.route or ch.table, (), tasks), (RAW, ch, table.reason)
    for table in by_ref.values():
        if table.reason is not None:
            continue
        ref, convert = table.shape[0], table.convert
        shape = table.shape
        key_columns = [shape[1][i] for i in shape[2]]
        info = rules.columns_of(ref)
        if rules.keys_cross(ref, key_columns) or table.unknown_fold or \
                (info is not None and loose_key(info, key_columns) is not None):
            # By one task, which sees every survivor of the table and runs its deletes
            # before its writes: none meets a row another task is still to move (on a
            # downstream-only key), nor is deleted under another spelling of its key (nor,
            # in a table made since the rules were read, under one fold_key keeps apart).
            alone = partition_of(ref, (), tasks)

            def target_of(_key: tuple[Any, ...], alone: int = alone) -> int:
                return alone
        else:
            target_of = partitioner(ref, tasks, fold=True)
        for k, (position, image) in table.last.items():
            yield target_of(k), (KEYED, shape, k, position,
                                           None if image is None else convert(image))
    yield segment.start % tasks, (STATS, ops, ())
    # Every apply task learns whether the batch may have tables to replay in order (see
    # ``simple``); a few bytes per partition and task.
    suspect = text_keys or late
    for target in range(tasks):
        yield target, (FLAGS, suspect, ())


def _fold_later(fold: KeyFold, tm: Any, table: _Table) -> None:
    """Lets the scanner's C loop fold ``tm``'s next rows events into ``table`` when their
    images hold every column and the table's row plan reads them: once Python has read
    such images (their decoder is compiled then; compiling one here could fail where
    Python, reading only the columns logged, would not)."""
    full = (1 << len(tm.columns)) - 1
    plan = getattr(tm.decoders.get((full, False, False)), "plan", None)
    if isinstance(plan, bytes):
        fold.fast[id(tm)] = (tm, table.last, table.key_index, len(tm.columns), plan)


def _unfold(fold: KeyFold, table: _Table) -> None:
    """``table`` is to be replayed in order now: its events are the Python loop's again."""
    for handle in [h for h, entry in fold.fast.items() if entry[1] is table.last]:
        del fold.fast[handle]


def _table_state(tm: Any, by_ref: dict[TableRef, _Table], rules: TableRules,
                 by_name: bool) -> _Table:
    ref = TableRef(tm.schema, tm.table)
    shape, convert, traits = table_shape(tm, rules, by_name=by_name)
    table = by_ref.get(ref)
    if table is None:
        # keyof reads the decoded image, so it keeps the table map's key indexes.
        key = tuple(tm.primary_key)
        table = _Table(shape, convert, _key_function(key, tm.columns), key, traits=traits)
        group = rules.group_of(ref)
        if group is not None:
            table.reason, table.route = FK_LINKED, group
        elif traits["period"] is not None:
            table.reason = VERSIONED
        elif not shape[2]:
            table.reason = NO_KEY
        else:
            info = rules.columns_of(ref)
            if info is None:
                table.unknown_fold = may_fold(tm, key)
            elif lenient_key(tm, info) is not None:
                table.reason = LENIENT_KEY
            elif info.only_here(tm.column_names):
                table.downstream_only = True
        by_ref[ref] = table
    elif table.shape != shape:
        # DDL is a barrier: one definition per table in a batch.
        raise ChangeError("the table's columns or key change within one batch (a batch "
                          "must not span a DDL)", table=str(ref))
    return table


def table_shape(tm: Any, rules: TableRules, *, by_name: bool = True
                ) -> tuple[Shape, Any, dict[str, Any]]:
    """The table as statements write it, ``image -> SQL parameters`` for it, and what its
    :class:`Change` objects carry besides: a system-versioned table's ``period`` (row
    start, row end indexes; not part of the key: DML only ever sees current rows), whether
    it is a ``sequence``.  Generated columns are left out (the downstream computes them;
    assigning one is an error).  ``by_name``: the changes are to be written (by column
    name), so a table map without names stops here; False for a reading of positions and
    keys only (columns then labelled ``@1``, ``@2``...).  A table map logged without
    names is completed before (``positional.complete``)."""
    ref = TableRef(tm.schema, tm.table)
    if by_name and not tm.has_names:
        raise nameless(ref)  # (callers complete a nameless map first: positional.complete)
    columns, key = tuple(tm.column_names), tuple(tm.primary_key)
    text = tuple(i for i, col in enumerate(tm.columns) if col.type in CHARACTER_TYPES)
    convert = image_params(tm)
    keep = rules.writable(ref, columns)
    if keep is not None and len(keep) < len(columns):
        if any(k not in keep for k in key):
            raise ChangeError("a generated column is part of the table's key; binrelay "
                              "cannot name its rows without writing it", table=str(ref))
        index = {old: new for new, old in enumerate(keep)}
        columns, key = tuple(columns[i] for i in keep), tuple(index[k] for k in key)
        text = tuple(index[i] for i in text if i in index)
        full_convert = convert

        def convert(image: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
            full = full_convert(image)
            return None if full is None else tuple([full[i] for i in keep])

    strict = _not_null(tm, rules, ref, columns)
    if strict:
        checked = convert

        def convert(image: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
            out = checked(image)
            if out is not None:
                for i in strict:
                    if out[i] is None:
                        raise _null_into_not_null(ref, columns[i])
            return out

    period = rules.period(ref, columns)
    if period is not None:
        key = tuple(k for k in key if k not in period)
    traits = {"period": period, "sequence": ref in rules.sequences, "text": text}
    return (ref, columns, key), convert, traits


def _not_null(tm: Any, rules: TableRules, ref: TableRef, columns: tuple[str, ...]
              ) -> tuple[int, ...]:
    """Indexes of ``columns`` the table map says may be NULL and the downstream has NOT
    NULL: a NULL there would be stored as the type's zero by a multi-row statement under
    the applier's sql_mode (a replica stores the column's default); binrelay stops."""
    info = rules.columns_of(ref)
    if info is None:
        return ()
    down = {c.name.lower(): c for c in info.columns if not c.nullable and not c.generated}
    if not down:
        return ()
    may_be_null = {c.name.lower() for c in tm.columns if c.nullable and c.name is not None}
    return tuple(i for i, name in enumerate(columns)
                 if name.lower() in down and name.lower() in may_be_null)


def _null_into_not_null(ref: TableRef, column: str) -> UnfaithfulApplyError:
    return UnfaithfulApplyError(
        f"a NULL for column {column!r}, which the downstream's table has NOT NULL: a replica"
        " would store the column's default, binrelay stops rather than invent the value",
        table=str(ref), hint="let the downstream's column take NULL, as the upstream's does")


def _fk_checks(where: Any) -> bool:
    return where is None or not where.flags & NO_FOREIGN_KEY_CHECKS_F


def _text_key(last: dict[tuple[Any, ...], Any]) -> bool:
    # A key's columns have one type each, so one key tells whether any is text.
    return any(isinstance(v, str) for v in next(iter(last), ()))


def _folds_together(last: dict[tuple[Any, ...], Any]) -> bool:
    seen: set[tuple[Any, ...]] = set()
    for k in last:
        folded = fold_key(k)
        if folded in seen:
            return True
        seen.add(folded)
    return False


def raw_records(relay_dir: str, segment: Any, tasks: int, tables: dict[TableRef, str],
                rules: TableRules | None = None) -> Iterator[tuple[int, Record]]:
    """The second, rare pass: ``tables``' changes of the partition as whole changes."""
    rules = rules or TableRules()
    for ch in segment_changes(relay_dir, segment, rules):
        if ch.table in tables:
            route = rules.group_of(ch.table) or ch.table
            yield partition_of(route, (), tasks), (RAW, ch, tables[ch.table])


def segment_changes(relay_dir: str, segment: Any, rules: TableRules | None = None, *,
                    by_name: bool = True) -> Iterator[Change]:
    """Every change of one relay partition as a :class:`Change` (for ordered replay).

    An update that changes the key becomes a delete of the old key and an insert of the new
    one (positions ``(..., 0)`` and ``(..., 1)``), except in tables linked by foreign keys
    (there a delete would fire ON DELETE actions where the upstream fired ON UPDATE ones)
    and in tables with columns only the downstream has (an insert would reset them).
    ``by_name``: as :func:`table_shape`.
    """
    rules = rules or TableRules()
    seq = SubdirName.parse(segment.subdir).seq
    file_no = binlog_sort_key(segment.file)[1]
    converters: dict[int, tuple[Any, Any, TableRef, tuple[str, ...], tuple[int, ...],
                                bool, dict[str, Any]]] = {}
    for table, op, where, offset, first_row, images in _event_images(relay_dir, segment,
                                                                     rules, by_name):
        cached = converters.get(id(table))
        if cached is None or cached[0] is not table:
            (ref, columns, key), convert, traits = table_shape(table, rules, by_name=by_name)
            info = rules.columns_of(ref)
            split = rules.group_of(ref) is None and traits["period"] is None and \
                not (info is not None and info.only_here(columns))
            cached = (table, convert, ref, columns, key, split, traits)
            converters[id(table)] = cached
        _t, convert, ref, columns, key, split, traits = cached
        fk = _fk_checks(where)
        for row, (old, new) in enumerate(images, first_row):
            before, after = convert(old), convert(new)
            position = (seq, file_no, offset, row)
            if split and op == UPDATE and key and not any(v is ABSENT for v in after) and \
                    tuple(before[i] for i in key) != tuple(after[i] for i in key):
                yield Change(ref, DELETE, columns, key, before, None, (*position, 0), fk)
                yield Change(ref, INSERT, columns, key, None, after, (*position, 1), fk)
                continue
            yield Change(ref, op, columns, key, before, after, (*position, 0), fk, **traits)


def _event_images(relay_dir: str, segment: Any, rules: TableRules, by_name: bool,
                  fold: KeyFold | None = None
                  ) -> Iterator[tuple[Any, str, Any, int, int, list[tuple[Any, Any]]]]:
    """Per rows event of the partition: its table map, op, location, offset, the row
    number of its first image and its ``(before, after)`` images; (offset, row) numbers
    the changes in relay order (the rows events of one MySQL transaction payload share its
    offset, and their rows keep counting).  ``by_name``: each table map is checked against
    the downstream's columns, and one logged without column names completed from them
    (``positional.complete``) and the images read by it.  ``fold``: as
    ``iter_segment_runs`` says."""
    path = str(Path(relay_dir) / segment.subdir / segment.file)
    last_offset, row = -1, 0
    named: dict[int, tuple[Any, Any]] = {}
    for (etype, offset, where, tm, op, partial, present, present_after, data, p, stop,
         first, second) in iter_segment_runs(Path(relay_dir), segment, fold):
        if offset != last_offset:
            last_offset, row = offset, 0
        if by_name:
            found = named.get(id(tm))
            if found is None or found[0] is not tm:
                found = named[id(tm)] = (tm, complete(tm, rules))
            if found[1] is not tm:
                tm = found[1]
                first, second = image_decoders(tm, op, present, present_after, partial)
        try:
            images = row_images(tm, op, partial, data, p, stop, first, second)
        except BinlogFormatError:
            raise
        except Exception as exc:  # whatever a corrupt image causes, as the scanner says it
            raise row_error(path, etype, offset, exc) from exc
        yield tm, op, where, offset, row, images
        row += len(images)


# --- the apply side --------------------------------------------------------------------------


def record_table(record: Record) -> TableRef | None:
    kind = record[0]
    if kind == KEYED:
        return record[1][0]
    if kind == RAW:
        return record[1].table
    return None


def ordered_tables(records: Iterable[Record]) -> Iterator[tuple[dict[TableRef, str],
                                                                set[TableRef]]]:
    """Of one apply task's records: the tables that must be replayed in order (with the
    reason) and the tables that arrived compacted.  Keys that fold together always meet in
    one task (they are routed by folded key), so the union over tasks is exact."""
    reasons: dict[TableRef, str] = {}
    keyed: set[TableRef] = set()
    folded: dict[TableRef, dict[tuple[Any, ...], tuple[Any, ...]]] = {}
    for record in records:
        kind = record[0]
        if kind == RAW:
            reasons.setdefault(record[1].table, record[2])
        elif kind == KEYED:
            ref, k = record[1][0], record[2]
            keyed.add(ref)
            if str in map(type, k):
                seen = folded.setdefault(ref, {})
                other = seen.setdefault(fold_key(k), k)
                if other != k:
                    reasons.setdefault(ref, FOLDED_KEYS)
    yield reasons, keyed


def to_replay(found: Iterable[tuple[dict[TableRef, str], set[TableRef]]]
              ) -> tuple[dict[TableRef, str], dict[TableRef, str]]:
    """Of :func:`ordered_tables`' findings (of every apply task): the tables to replay in
    order, with the reason, and those of them that also arrived compacted, to decode again
    raw (:func:`raw_records`)."""
    ordered: dict[TableRef, str] = {}
    keyed: set[TableRef] = set()
    for reasons, tables in found:
        ordered.update(reasons)
        keyed |= tables
    return ordered, {t: r for t, r in ordered.items() if t in keyed}


def simple(records: list[Record]) -> bool:
    """Whether no table of the whole batch can need replaying in order: no partition had a
    keyless table, a partial image or a text key (which may fold together with a key of
    another partition).  Every task sees every partition's flags, so all decide alike, and
    then each may apply its records at once: the batch needs one Spark job, not two."""
    return not any(r[1] for r in records if r[0] == FLAGS)


def merge(records: Iterable[Record]) -> tuple[list[Survivors], list[Change], dict[str, int]]:
    """One apply task's records: the keyed survivors over all partitions (latest position
    per key), one :class:`Survivors` per table, in key order; the raw changes; the op
    counts."""
    # Per table, its first shape and key -> record.  A table is found by its shape object's
    # id first (records unpickled together share one): hashing a TableRef per record cost
    # more than the rest of the loop.  Each shape is kept with its entry, so that no id is
    # reused meanwhile.
    by_ref: dict[TableRef, tuple[Shape, dict[tuple[Any, ...], Record]]] = {}
    by_shape: dict[int, tuple[Shape, dict[tuple[Any, ...], Record]]] = {}
    raw: list[Change] = []
    ops: dict[str, int] = {}
    for record in records:
        kind = record[0]
        if kind == KEYED:
            shape = record[1]
            found = by_shape.get(id(shape))
            if found is None:
                first, best = by_ref.setdefault(shape[0], (shape, {}))
                if first is not shape and first != shape:
                    # DDL is a barrier: one definition per table in a batch.
                    raise ChangeError("the table's columns or key change within one batch",
                                      table=str(shape[0]), position=record[3])
                found = by_shape[id(shape)] = (shape, best)
            best = found[1]
            k = record[2]
            seen = best.get(k)
            if seen is None or seen[3] < record[3]:
                best[k] = record
        elif kind == RAW:
            raw.append(record[1])
        elif kind == STATS:
            for op, n in record[1].items():
                ops[op] = ops.get(op, 0) + n
    return [_survivors(first, best) for first, best in by_ref.values()], raw, ops


def _survivors(shape: Shape, best: dict[tuple[Any, ...], Record]) -> Survivors:
    # Key order: each multi-row statement then writes a run of neighbouring rows (pages
    # read and dirtied once, not once per row).  Keys whose values do not compare (mixed
    # types) keep relay order.
    try:
        entries = sorted(best.values(), key=_KEY_OF)
    except TypeError:
        entries = sorted(best.values(), key=_POSITION_OF)
    kept = [r for r in entries if r[4] is not None]
    gone = [r for r in entries if r[4] is None] if len(kept) < len(entries) else []
    ref, columns, key = shape
    return Survivors(ref, columns, key,
                     tuple([r[2] for r in gone]), tuple([r[3] for r in gone]),
                     tuple([r[4] for r in kept]), tuple([r[3] for r in kept]))


_KEY_OF = operator.itemgetter(2)
_POSITION_OF = operator.itemgetter(3)
