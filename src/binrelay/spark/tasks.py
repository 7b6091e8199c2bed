"""What runs in the sync's Spark tasks: picklable functions over a partition, no driver
state.  Each applies or compacts its share and returns what the driver needs to know.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from binrelay.apply.applier import apply_parts_with_checkpoint, apply_plan_part
from binrelay.apply.catalog import TableRules
from binrelay.apply.changes import TableRef
from binrelay.apply.checkpoint import (
    CheckpointStore,
    CheckpointUpdate,
    TaskLedger,
)
from binrelay.apply.downstream import Downstream, pooled_connection
from binrelay.apply.plan import (
    PlanPart,
    group_ordered,
    keyed_task_id,
    ordered_task_id,
    plan_batch,
)
from binrelay.spark.compact import (
    Record,
    compact_segment,
    merge,
    ordered_tables,
    raw_records,
    record_table,
    simple,
    to_replay,
)
from binrelay.spark.failures import task_errors

_heap_frozen = False


def freeze_heap() -> None:
    """Once per Python worker: move what is alive (modules, pyspark's and ours) out of the
    collector's reach.

    PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker, and
    with pyspark, PyMySQL and our decoder loaded that walk costs ~20 ms of CPU (measured),
    most of a small streaming batch's worker time.  Frozen objects are still freed by
    reference counting; only cycles among them would stay, and they are the modules.
    What tasks create later is collected as before.
    """
    global _heap_frozen
    if not _heap_frozen:
        gc.collect()
        gc.freeze()
        _heap_frozen = True


_pauses = 0
_pauses_lock = threading.Lock()
_was_enabled = True


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector off while a task (or a driver's batch) runs, on again when the
    last of the process's concurrent ones ends.

    A task builds millions of tuples (records, images, values) that form no cycles, and
    keeps them until it ends; the collector's oldest generation is walked whenever the
    objects alive grew by a quarter, each time all of them: py-spy put 50 % of an apply
    task's samples under what allocated when it ran (unpickling the shuffle, building
    the ops).  Reference counting still frees everything as usual; PySpark's daemon
    collects after each task.
    """
    global _pauses, _was_enabled
    with _pauses_lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


@contextlib.contextmanager
def task_heap() -> Iterator[None]:
    """What every Spark task runs in: :func:`freeze_heap`, then :func:`paused_gc`."""
    freeze_heap()
    with paused_gc():
        yield



@dataclass(frozen=True)
class TaskContext:
    downstream: Downstream
    pipeline: str
    batch_id: int
    store: CheckpointStore
    tasks: int
    #: Tables replayed in relay order in this batch (each whole in one task).
    ordered: frozenset[TableRef] = frozenset()
    #: What the downstream catalog says about writing each table.
    rules: TableRules = field(default_factory=TableRules)

    def __post_init__(self) -> None:
        # Computed once where the context is made (the driver), pickled with the rules.
        _ = self.rules.routing


@task_errors
def apply_task(ctx: TaskContext, index: int, records: Iterator[Record]
               ) -> Iterator[dict[str, int]]:
    """One apply task: the net effect of its keys (and its ordered tables, whole), each part
    in one downstream transaction."""
    with task_heap():
        yield from apply_records(ctx, index, records)


def apply_records(ctx: TaskContext, index: int, records: Iterator[Record]
                  ) -> Iterator[dict[str, int]]:
    """:func:`apply_task` in the calling process."""
    parts, ops = _parts(ctx, index, records)
    if parts:
        ledger = TaskLedger(ctx.pipeline, ctx.batch_id, ctx.store)
        with pooled_connection(ctx.downstream) as conn:
            for part in parts:
                apply_plan_part(conn, part, ledger=ledger,
                                max_packet=ctx.rules.max_allowed_packet, rules=ctx.rules,
                                lane=(index, ctx.tasks))
    yield ops


def _parts(ctx: TaskContext, index: int, records: Iterator[Record]
           ) -> tuple[list[PlanPart], dict[str, int]]:
    """A task's records as the parts it applies, and what they counted (op -> changes)."""
    keyed, raw, ops = merge(records)
    parts = []
    if keyed:
        rules = ctx.rules
        keyed = [replace(s, by_insert=True) if rules.replace_unsafe(s.table, s.key_columns)
                 else s for s in keyed]
        parts.append(PlanPart(keyed_task_id(index, ctx.tasks, rules.routing), tuple(keyed)))
    if raw:
        # Raw changes are those of tables replayed in order, whatever the reason.
        plan = plan_batch(raw, ordered_tables=ctx.ordered | {ch.table for ch in raw})
        # A table (or foreign key group) replayed in order is whole in one task, so its id
        # needs no task index: the ledger then knows it across a restart with another
        # task count.
        parts += [PlanPart(ordered_task_id(t.table), ordered=t)
                  for t in group_ordered(plan.ordered, ctx.rules.group_of)]
    return parts, ops


@task_errors
def apply_if_simple(ctx: TaskContext, index: int, records: Iterator[Record]
                    ) -> Iterator[tuple[str, Any, Any]]:
    """The first job's task: apply at once when the batch is simple (``compact.simple``),
    else only report this task's ordered tables and compacted tables, applying nothing."""
    with task_heap():
        local = list(records)
        if simple(local):
            for ops in apply_records(ctx, index, iter(local)):
                yield "applied", ops, None
            return
        for reasons, keyed in ordered_tables(local):
            yield "ordered", reasons, keyed


def lanes(tasks: int, slots: int) -> int:
    """How many Spark tasks carry a batch's ``tasks`` apply tasks when Spark runs ``slots``
    tasks at once: each then applies its share concurrently (:func:`apply_lanes`)."""
    return max(1, min(tasks, slots))


@task_errors
def apply_lanes(step: Callable[[TaskContext, int, Iterator[Record]], Iterator[Any]],
                ctx: TaskContext, items: Iterator[tuple[int, bytes]]) -> Iterator[Any]:
    """One Spark task carrying one or more apply tasks (their records :func:`packed`, keyed
    by apply task index), each run by ``step`` on its own connection, at once (a thread
    each).

    An apply task mostly waits on the downstream, yet Spark gives it a whole slot (a core):
    with ``[sync] tasks`` above the slots (4 tasks on ``local[2]``) only as many would write
    at a time, and the downstream, whose writes wait on its disk too, would idle.  So the
    apply stage has one Spark task per slot and ``tasks`` connections in all, as
    ``[sync] tasks`` says.  If one fails the Spark task fails once all have stopped; those
    that committed are skipped when it runs again (their ledger claims)."""
    with task_heap():
        by_task: dict[int, list[Record]] = {}
        for index, blob in items:
            records = by_task.get(index)
            if records is None:
                records = by_task[index] = []
            records.extend(pickle.loads(blob))
        records = None
        results = run_at_once(step, ctx, by_task)
    for result in results:
        yield from result


def run_at_once(step: Callable[[TaskContext, int, Iterator[Record]], Iterator[Any]],
                ctx: TaskContext, by_task: dict[int, list[Record]]) -> list[list[Any]]:
    """``step`` over each apply task's records (emptying ``by_task``), a thread and a
    connection each when there are several; their results in task order.  Every thread
    has stopped when this returns or raises (the first failure, by task order)."""
    try:
        if len(by_task) <= 1:
            return [list(step(ctx, i, iter(r))) for i, r in by_task.items()]
        with ThreadPoolExecutor(len(by_task), thread_name_prefix="apply") as pool:
            running = [pool.submit(lambda i=i, r=r: list(step(ctx, i, iter(r))))
                       for i, r in sorted(by_task.items())]
            return [future.result() for future in running]
    finally:
        # Freed here, by reference counting, not walked by the collector once it is on.
        by_task.clear()


@task_errors
def apply_alone(ctx: TaskContext, relay_dir: str, segments: Iterator[Any]
                ) -> Iterator[dict[str, int]]:
    """A small batch in one Spark task: compact, decide the ordered tables and apply, with
    no shuffle and one job instead of two (what keeps streaming lag low)."""
    with task_heap():
        yield from apply_here(ctx, relay_dir, segments)


def apply_here(ctx: TaskContext, relay_dir: str, segments: Iterator[Any]
               ) -> Iterator[dict[str, int]]:
    """:func:`apply_alone` in the calling process."""
    alone, records = _alone(ctx, relay_dir, segments)
    yield from apply_records(alone, 0, iter(records))


def apply_with_checkpoint(ctx: TaskContext, relay_dir: str, segments: list[Any],
                          update: CheckpointUpdate) -> dict[str, int] | None:
    """What :func:`apply_here` applies, with the checkpoint's move from the batch's start
    to its end, in one downstream transaction (the driver's batches: see
    ``apply_parts_with_checkpoint``); what it counted, or None when the checkpoint was at
    the batch's end already (nothing done)."""
    with paused_gc():
        alone, records = _alone(ctx, relay_dir, segments)
        parts, ops = _parts(alone, 0, iter(records))
        del records
        # Keyed rows alone go in one script (applier._in_one_trip); an upstream statement
        # is never sent where a semicolon of its own could start another.
        keyed = all(part.ordered is None for part in parts)
        with pooled_connection(replace(ctx.downstream, scripts=keyed)) as conn:
            done = apply_parts_with_checkpoint(conn, parts, update,
                                               max_packet=ctx.rules.max_allowed_packet,
                                               rules=ctx.rules)
        del parts  # (see apply_lanes)
    return ops if done else None


def apply_spread(ctx: TaskContext, relay_dir: str, segments: list[Any],
                 begin: Callable[[], None]) -> list[dict[str, int]]:
    """A batch of rows applied from the calling process as ``ctx.tasks`` apply tasks
    would apply it through Spark (the same records, parts, ledger claims and task ids), a
    connection and a thread each: the downstream writes on as many of its threads, where a
    batch in one transaction (:func:`apply_with_checkpoint`) gives it one.  As Spark's
    second job does when the batch is not ``compact.simple``, the tables found to need
    replaying in order are decoded again, raw, each whole for one task.  ``begin`` runs
    before anything is written (the caller marks the batch in flight there).  What each
    apply task counted."""
    with paused_gc():
        tasks, rules = ctx.tasks, ctx.rules
        by_task: dict[int, list[Record]] = {i: [] for i in range(tasks)}
        for segment in segments:
            for target, record in compact_segment(relay_dir, segment, tasks, rules):
                by_task[target].append(record)
        if not all(simple(records) for records in by_task.values()):
            ordered, redo = to_replay(found for records in by_task.values()
                                      for found in ordered_tables(records))
            if redo:
                for index, records in by_task.items():
                    by_task[index] = [r for r in records if record_table(r) not in redo]
                for segment in segments:
                    for target, record in raw_records(relay_dir, segment, tasks, redo, rules):
                        by_task[target].append(record)
            ctx = replace(ctx, ordered=frozenset(ordered))
        begin()
        return [ops for result in run_at_once(apply_records, ctx, by_task) for ops in result]


def _alone(ctx: TaskContext, relay_dir: str, segments: Iterable[Any]
           ) -> tuple[TaskContext, list[Record]]:
    """A whole batch's records for one task (compacted; the tables found to need replaying
    in order decoded again, raw), and that task's context."""
    segments = list(segments)
    rules = ctx.rules
    records = [rec for seg in segments
               for _t, rec in compact_segment(relay_dir, seg, 1, rules)]
    ordered, redo = to_replay(ordered_tables(records))
    if redo:
        records = [rec for rec in records if record_table(rec) not in redo]
        records += [rec for seg in segments
                    for _t, rec in raw_records(relay_dir, seg, 1, redo, rules)]
    return TaskContext(ctx.downstream, ctx.pipeline, ctx.batch_id, ctx.store, 1,
                       frozenset(ordered), rules), records


@task_errors
def compacted(relay_dir: str, segments: Iterator[Any], tasks: int, rules: TableRules
              ) -> Iterator[tuple[int, Record]]:
    """A read task: its partitions compacted (``compact_segment``), keyed by apply task,
    :func:`packed`."""
    with task_heap():
        yield from packed(pair for segment in segments
                          for pair in compact_segment(relay_dir, segment, tasks, rules))


def identity(key: int) -> int:
    return key


#: Records per packed shuffle element (:func:`packed`).
PACK = 2000


def packed(pairs: Iterable[tuple[int, Record]], per: int = PACK
           ) -> Iterator[tuple[int, bytes]]:
    """``(apply task, record)`` pairs as ``(apply task, pickled list of records)``: what
    the shuffle carries.  PySpark's partitionBy handles each element in Python (its
    partition function, a list append, cloudpickle's per-container hook): per record that
    cost more than decoding and compacting it (py-spy); per thousands of records, once,
    and the records are pickled by the C pickler."""
    buffers: dict[int, list[Record]] = {}
    for target, record in pairs:
        buffer = buffers.get(target)
        if buffer is None:
            buffer = buffers[target] = []
        buffer.append(record)
        if len(buffer) >= per:
            yield target, pickle.dumps(buffer, pickle.HIGHEST_PROTOCOL)
            buffer.clear()
    for target, buffer in buffers.items():
        if buffer:
            yield target, pickle.dumps(buffer, pickle.HIGHEST_PROTOCOL)


def unpacked(items: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, Record]]:
    """:func:`packed`'s pairs again."""
    for target, blob in items:
        for record in pickle.loads(blob):
            yield target, record


@task_errors
def kept(items: Iterator[tuple[int, bytes]], redo: Any) -> Iterator[tuple[int, bytes]]:
    """Packed pairs without the records of the tables in ``redo`` (decoded again, raw)."""
    return packed((t, r) for t, r in unpacked(items) if record_table(r) not in redo)
