"""``binrelay sync`` and ``binrelay recover``: the relay log applied to the downstream on Spark.

The loop, one batch at a time (the downstream checkpoint is the only position that counts):

1. The next batch is the relay range [checkpoint position, end): ``end`` from the batch
   limits, never past the relay's durable end, and never mixing DDL with anything else.
   After a crash the first batch is exactly the batch that was in flight (Drainer's rule:
   replay the same range).
2. A DDL batch runs on the driver, once, idempotently on replay; then the checkpoint moves.
3. Otherwise the checkpoint is marked in flight (``consistent = 0``), Spark reads the range
   with the ``relaylog`` source, routes every change by table and key (folded for
   case-insensitive collations; an update that changes the key goes as a delete of the old
   key and an insert of the new one), and each of ``[sync] tasks`` tasks applies the net
   effect of its keys in one downstream transaction (REPLACE / DELETE, tables without a key
   in relay order).  When every task has committed, the checkpoint moves to ``end`` with
   ``consistent = 1`` and the relay consumer position follows.

A crash between 3's first and last step leaves ``consistent = 0``: replaying the batch
brings the downstream to the upstream's state at ``end`` (see docs/apply.md).  Nothing here
talks to the upstream: ``recover`` works while it is down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from binrelay.apply.applier import Downstream, apply_ddl, apply_plan_part
from binrelay.apply.changes import ABSENT, Change, TableRef
from binrelay.apply.checkpoint import (
    Checkpoint,
    CheckpointStore,
    Position,
    TaskLedger,
    create_checkpoint_table,
    finish_batch,
    init_checkpoint,
    mark_in_flight,
    read_checkpoint,
)
from binrelay.apply.plan import (
    DELETE,
    INSERT,
    PlanPart,
    batch_ordered_tables,
    fold_key,
    ordered_task_id,
    partition_of,
    plan_batch,
)
from binrelay.config import Config
from binrelay.relay import consumers
from binrelay.relay.layout import SubdirName, binlog_sort_key
from binrelay.relay.position import RelayPosition
from binrelay.relay.watch import ChangeWaiter
from binrelay.spark.changes import image_params
from binrelay.spark.decode import decode_segment, iter_segment_changes
from binrelay.spark.planning import (
    advance,
    durable_end,
    earliest,
    plan_partitions,
)

log = logging.getLogger(__name__)


def _position(pos: RelayPosition) -> Position:
    return Position(str(pos.subdir), pos.binlog_name, pos.binlog_pos)


def _relay_position(pos: Position) -> RelayPosition:
    return RelayPosition(SubdirName.parse(pos.subdir), pos.binlog_name, pos.binlog_pos)


# --- what runs in Spark tasks (picklable, no driver state) ---------------------------------


def segment_changes(relay_dir: str, segment: Any) -> Iterator[Change]:
    """The apply changes of one relay partition, decoded straight from the file.

    The same decoding as the ``relaylog`` source (``decode.iter_segment_changes``), without
    the round trip through Arrow, the JVM and back that a DataFrame would cost the sync.
    """
    seq = SubdirName.parse(segment.subdir).seq
    file_no = binlog_sort_key(segment.file)[1]
    converters: dict[int, tuple[Any, Any]] = {}
    last_where = None
    row = 0
    for change, _ts in iter_segment_changes(Path(relay_dir), segment):
        table = change.table
        cached = converters.get(id(table))
        if cached is None or cached[0] is not table:
            cached = (table, image_params(table), TableRef(table.schema, table.table),
                      tuple(table.column_names), tuple(table.primary_key))
            converters[id(table)] = cached
        _t, convert, ref, columns, key = cached
        where = change.where
        if where is last_where:
            row += 1
        else:
            last_where, row = where, 0
        pos = where.pos if where is not None else 0
        before, after = convert(change.before), convert(change.after)
        op = change.op
        if op == "update" and key and not any(v is ABSENT for v in after) and \
                tuple(before[i] for i in key) != tuple(after[i] for i in key):
            yield Change(ref, DELETE, columns, key, before, None, (seq, file_no, pos, row, 0))
            yield Change(ref, INSERT, columns, key, None, after, (seq, file_no, pos, row, 1))
            continue
        yield Change(ref, op, columns, key, before, after, (seq, file_no, pos, row, 0))


def route(change: Change, tasks: int, ordered: frozenset[TableRef] = frozenset()) -> int:
    """The task that applies ``change``: by folded key (keys a lenient collation may take
    for one meet in one task), or by table when the table is replayed in order."""
    if not change.key or change.table in ordered:
        return partition_of(change.table, (), tasks)
    image = change.after if change.op == INSERT else change.before
    assert image is not None
    return partition_of(change.table, fold_key(tuple(image[i] for i in change.key)), tasks)


def _ordered_here(items: Iterator[tuple[int, Change]]) -> Iterator[set[TableRef]]:
    yield set(batch_ordered_tables(ch for _k, ch in items))


@dataclass(frozen=True)
class TaskContext:
    downstream: Downstream
    pipeline: str
    batch_id: int
    store: CheckpointStore
    tasks: int
    #: Tables replayed in relay order in this batch (each whole in one task).
    ordered: frozenset[TableRef] = frozenset()


def apply_task(ctx: TaskContext, index: int, changes: Iterator[Change]
               ) -> Iterator[dict[str, int]]:
    """One apply task: the net effect of its keys, in one downstream transaction each part."""
    local = sorted(changes, key=lambda ch: ch.position)
    ops: dict[str, int] = {}
    for ch in local:
        ops[ch.op] = ops.get(ch.op, 0) + 1
    if not local:
        yield ops
        return
    plan = plan_batch(local, ordered_tables=ctx.ordered)
    ledger = TaskLedger(ctx.pipeline, ctx.batch_id, ctx.store)
    parts = []
    if plan.keyed:
        parts.append(PlanPart(f"keyed-{index}-of-{ctx.tasks}", plan.keyed))
    parts += [PlanPart(f"{ordered_task_id(t.table)}-{index}-of-{ctx.tasks}", ordered=t)
              for t in plan.ordered]
    conn = ctx.downstream.connect()
    try:
        for part in parts:
            apply_plan_part(conn, part, ledger=ledger)
    finally:
        conn.close()
    yield ops


# --- the driver ------------------------------------------------------------------------------


@dataclass
class SyncStats:
    batches: int = 0
    ddl: int = 0
    changes: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class BatchReport:
    """What one applied batch did; given to every ``SyncPipeline`` listener (metrics,
    progress) after the batch's checkpoint has committed."""

    pipeline: str
    batch_id: int
    kind: str  # "dml", "ddl" or "empty"
    start: RelayPosition
    end: RelayPosition
    #: The relay's durable end when the batch was planned (progress: how far to go).
    relay_end: RelayPosition
    #: Row changes read from the relay, by op ("insert", "update", "delete").
    rows_by_op: dict[str, int]
    ddl: int
    relay_bytes: int
    seconds: float
    #: Whether this batch replayed one left in flight by a crash.
    replayed: bool = False

    @property
    def changes(self) -> int:
        return sum(self.rows_by_op.values())


BatchListener = Callable[[BatchReport], None]


class SyncPipeline:
    def __init__(self, config: Config, *, spark: Any = None,
                 should_stop: Callable[[], bool] | None = None,
                 listeners: list[BatchListener] | None = None) -> None:
        self.config = config
        self.relay_dir = config.resolve_relay_dir()
        self.sync = config.sync
        self.store = CheckpointStore(schema=config.sync.checkpoint_schema)
        self.downstream = Downstream(config.to.host, config.to.port, config.to.user,
                                     config.to.password)
        self._spark = spark
        self.should_stop = should_stop or (lambda: False)
        self.stats = SyncStats()
        self.listeners: list[BatchListener] = list(listeners or ())

    # --- setup ---------------------------------------------------------------------------

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from binrelay.spark.session import build_session

            self._spark = build_session(self.sync.master, app_name=f"binrelay-{self.name}")
        return self._spark

    @property
    def name(self) -> str:
        return self.sync.pipeline

    def checkpoint(self) -> Checkpoint:
        conn = self.downstream.connect()
        try:
            create_checkpoint_table(conn, self.store)
            found = read_checkpoint(conn, self.name, self.store)
            if found is None:
                found = init_checkpoint(conn, self.name, _position(earliest(self.relay_dir)),
                                        self.store)
            return found
        finally:
            conn.close()

    # --- the loop --------------------------------------------------------------------------

    def run(self, *, until_caught_up: bool = False) -> SyncStats:
        """Apply batches until told to stop, or (``until_caught_up``) until the relay's
        durable end as it was at the start of each batch."""
        started = time.monotonic()
        waiter: ChangeWaiter | None = None
        try:
            while not self.should_stop():
                cp = self.checkpoint()
                start = _relay_position(cp.position)
                consumers.register(self.relay_dir, self.name, start)
                if not cp.consistent and cp.target is not None:
                    self._batch(start, _relay_position(cp.target), cp.batch_id,
                                replayed=True)
                    continue
                end_limit = durable_end(self.relay_dir)
                if end_limit.sort_key <= start.sort_key:
                    if until_caught_up:
                        break
                    waiter = waiter or ChangeWaiter(self.relay_dir)
                    waiter.watch(self.relay_dir / str(end_limit.subdir))
                    waiter.wait(1.0)
                    continue
                end = advance(self.relay_dir, start, end_limit,
                              max_bytes=self.sync.batch_bytes,
                              max_transactions=self.sync.batch_transactions or None)
                self._batch(start, end, cp.batch_id + 1, relay_end=end_limit)
        finally:
            if waiter is not None:
                waiter.close()
            self.stats.seconds = time.monotonic() - started
        return self.stats

    def _batch(self, start: RelayPosition, end: RelayPosition, batch_id: int, *,
               relay_end: RelayPosition | None = None, replayed: bool = False) -> None:
        started = time.monotonic()
        segments = plan_partitions(self.relay_dir, start, end,
                                   target_bytes=self.sync.partition_bytes)
        rows_by_op: dict[str, int] = {}
        ddl_before = self.stats.ddl
        conn = self.downstream.connect()
        try:
            mark_in_flight(conn, self.name, batch_id, _position(end), self.store)
            ddl = [s for s in segments if s.kind == "ddl"]
            if ddl:
                self._ddl(conn, ddl)
            elif segments:
                rows_by_op = self._dml(segments, batch_id)
            finish_batch(conn, self.name, batch_id, self.store)
        finally:
            conn.close()
        consumers.register(self.relay_dir, self.name, end)
        self.stats.batches += 1
        log.info("batch %d applied: %s -> %s", batch_id, start, end)
        report = BatchReport(
            pipeline=self.name, batch_id=batch_id,
            kind="ddl" if self.stats.ddl > ddl_before else ("dml" if segments else "empty"),
            start=start, end=end, relay_end=relay_end or end, rows_by_op=rows_by_op,
            ddl=self.stats.ddl - ddl_before,
            relay_bytes=sum(s.stop - s.start for s in segments),
            seconds=time.monotonic() - started, replayed=replayed)
        for listener in self.listeners:
            listener(report)

    def _ddl(self, conn: Any, segments: list) -> None:
        for segment in segments:
            for batch in decode_segment(self.relay_dir, segment):
                for row in batch.to_pylist():
                    apply_ddl(conn, row["schema"] or None, row["query"],
                              position=(row["pos"],))
                    self.stats.ddl += 1

    def _dml(self, segments: list, batch_id: int) -> dict[str, int]:
        """Apply the batch's DML partitions (planned once, in ``_batch``) on Spark tasks.

        The tasks decode the partitions themselves (no DataFrame: that would add Arrow ->
        JVM -> Python conversions per row).
        """
        from pyspark import StorageLevel

        tasks = self.sync.tasks
        relay_dir = str(self.relay_dir)
        sc = self.spark.sparkContext
        # Two steps: which tables this batch must replay in order (no key, partial images,
        # keys a collation may fold together) is known only from all of its changes, and such
        # a table must be whole in one task, never also upserted by another.
        cached = (sc.parallelize(segments, max(1, len(segments)))
                  .flatMap(lambda seg: ((route(ch, tasks), ch)
                                        for ch in segment_changes(relay_dir, seg)))
                  .partitionBy(tasks, lambda k: k).persist(StorageLevel.MEMORY_AND_DISK))
        try:
            ordered = frozenset().union(*cached.mapPartitions(_ordered_here).collect())
            routed = cached
            if ordered:
                routed = cached.map(lambda kv: (route(kv[1], tasks, ordered), kv[1])) \
                    .partitionBy(tasks, lambda k: k)
            ctx = TaskContext(self.downstream, self.name, batch_id, self.store, tasks, ordered)
            counts = routed.mapPartitionsWithIndex(
                lambda i, items: apply_task(ctx, i, (ch for _k, ch in items))).collect()
        finally:
            cached.unpersist()
        rows_by_op: dict[str, int] = {}
        for part in counts:
            for op, n in part.items():
                rows_by_op[op] = rows_by_op.get(op, 0) + n
        self.stats.changes += sum(rows_by_op.values())
        return rows_by_op


def recover(config: Config) -> tuple[bool, SyncStats]:
    """SPEC §2: if the checkpoint says ``consistent = 0``, replay the relay log from it to the
    end of the last complete transaction relayed; never needs the upstream.  Returns whether
    anything had to be done."""
    pipeline = SyncPipeline(config)
    cp = pipeline.checkpoint()
    if cp.consistent:
        return False, pipeline.stats
    return True, pipeline.run(until_caught_up=True)
