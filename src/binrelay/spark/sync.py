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

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from binrelay.apply.catalog import (
    NARROW_KINDS,
    TableRules,
    keeps_rules,
    leaves_rules,
    read_rules,
    reread_rules,
)
from binrelay.apply.changes import TableRef
from binrelay.apply.checkpoint import (
    Checkpoint,
    CheckpointStore,
    CheckpointUpdate,
    advance_in_transaction,
    create_checkpoint_table,
    finish_batch,
    init_checkpoint,
    mark_in_flight,
    pipeline_lock,
    read_checkpoint,
)
from binrelay.apply.ddl import LeftContext
from binrelay.apply.ddl_journal import DdlJournal
from binrelay.apply.downstream import (
    RETRY_ERRORS,
    Downstream,
    downstream_lost,
    pooled_connection,
)
from binrelay.apply.replay import (
    Action,
    ReplaySession,
    SessionStatement,
    SkippedTriggers,
    replay_actions,
)
from binrelay.apply.sql import ddl_kind
from binrelay.config import Config
from binrelay.errors import (
    ApplyError,
    DownstreamConnectionError,
    NamelessRowsError,
    UnfaithfulApplyError,
)
from binrelay.gtid import advance_gtid_set
from binrelay.position import Position, binlog_sort_key
from binrelay.relay import consumers
from binrelay.relay.relaydir import RelayView, earliest
from binrelay.relay.watch import ChangeWaiter
from binrelay.spark.compact import raw_records, to_replay
from binrelay.spark.decode import xa_committed
from binrelay.spark.failures import spark_failures, task_errors
from binrelay.spark.planning import (
    Segment,
    gtid_set_at,
    next_batch,
    plan_partitions,
    position_of_gtid_set,
    relay_bytes,
)
from binrelay.spark.read_ahead import ReadAhead, read_stage, start_read
from binrelay.spark.serial import (
    Headers,
    SessionEnds,
    creates_temporary,
    segment_actions,
)
from binrelay.spark.tasks import (
    TaskContext,
    apply_alone,
    apply_here,
    apply_if_simple,
    apply_lanes,
    apply_spread,
    apply_task,
    apply_with_checkpoint,
    identity,
    kept,
    lanes,
    packed,
)
from binrelay.spark.workers import WarmKeeper, warm_up
from binrelay.threadtimes import thread_times

log = logging.getLogger(__name__)
T = TypeVar("T")
#: A planned batch: its end, its partitions, the GTIDs of its transactions.
Planned = tuple[Position, list[Segment], list[str]]
#: A batch being planned in the planner's thread, by ``[start, max bytes]`` (the planner may
#: raise the latter: ``_plan_for_spark``), with the gate its read stage waits on if
#: chained: the planned batch, its read stage if started, and the batch after it if chained
#: (``_plan_then_read``).
Ahead = tuple[list[Any], "Future[PlannedAhead]", "threading.Event | None"]
PlannedAhead = tuple[Planned, "ReadAhead | None", "Ahead | None"]


# --- the driver ------------------------------------------------------------------------------


@dataclass
class SyncStats:
    batches: int = 0
    ddl: int = 0
    changes: int = 0
    seconds: float = 0.0
    #: Batches whose read stage ran while the barrier batch before them was replayed.
    read_ahead: int = 0


@dataclass(frozen=True)
class BatchReport:
    """What one applied batch did; given to every ``SyncPipeline`` listener (metrics,
    progress) after the batch's checkpoint has committed."""

    pipeline: str
    batch_id: int
    kind: str  # "dml", "ddl" or "empty" (no row change nor DDL: e.g. only GTID lists)
    start: Position
    end: Position
    #: The relay's durable end when the batch was planned (progress: how far to go).
    relay_end: Position
    #: Row changes read from the relay, by op ("insert", "update", "delete").
    rows_by_op: dict[str, int]
    ddl: int
    relay_bytes: int
    seconds: float
    #: Whether this batch replayed one left in flight by a crash.
    replayed: bool = False
    #: The sync's driver thread during the batch: seconds on a CPU, and seconds it was
    #: ready to run but waited for one (None: the kernel does not say).
    cpu_seconds: float = 0.0
    cpu_wait_seconds: float | None = None

    @property
    def changes(self) -> int:
        return sum(self.rows_by_op.values())


BatchListener = Callable[[BatchReport], None]


@dataclass
class Outage:
    """A downstream outage: since when (monotonic), attempts so far."""

    since: float
    attempts: int = 0


#: How often the consumer position follows the checkpoint (at least), seconds.
_REGISTER_EVERY = 1.0
#: More DDL than this since the catalog was read (a migration's run, no rows between): one
#: read of the whole catalog costs less than a narrow read per statement.
_NARROW_MAX = 16

#: DDL statements one batch may hold when they follow each other (a migration): one
#: checkpoint commit for them all, while the checkpoint still moves every this many.
_DDL_RUN = 64
#: Evident DDL of such a run sent to the downstream in one script (``ddl.DdlsAhead``), the
#: next ones decoded while it runs: a killed sync's session may finish one script's worth
#: after the kill (the next sync waits for it).
_DDL_AHEAD = 8
#: Bytes of row transactions such a run takes between its DDL (a trickle of
#: writes between a migration's statements): applied in relay order on the driver, each
#: committed with the next DDL's journal row, instead of a batch (and its checkpoint
#: commits and catalog read) of their own between every two DDL.  A little only: they go
#: a statement per row, where a bulk load after a CREATE TABLE is better served by a batch
#: of its own (compacted, multi-row statements; 1 MiB here made a catch-up from sysbench's
#: prepare 7 % slower).
_RUN_ROWS = 64 * 1024
#: A catch-up starts Spark at its first batch of rows bigger than this (a backlog is coming,
#: while batches are kept to ``partition-bytes`` until Spark is up); the rows between DDL
#: never pay for its start (seconds of two cores).
_SPARK_WORTHY = 64 * 1024
#: With Spark up, a batch of rows still goes to the driver (``driver-batch-bytes`` at
#: most) while the relay holds no more than this many driver batches after the
#: checkpoint: a streaming sync a little behind (a burst of writes, CPU taken by others)
#: catches up in a few driver batches.  Handing the backlog to Spark in one big batch costs
#: more CPU in all (JVM scheduling, pickling, the shuffle, more processes), which on a
#: busy machine is time: measured on 2 cores with a native replica and the upstream
#: competing (``bench.sync_lag``, both at once), 17-32 MiB batches took 1.5-3.5 s through
#: Spark where 16 MiB driver batches took 0.5-1.4 s, and the sync fell further behind
#: (heartbeat p99 5.8 s).  A catch-up's backlog (hundreds of MiB) still goes to Spark, its
#: tail too (``_batch_limit``).
_DRIVER_BACKLOG = 4
#: A batch of rows the driver applies is written by ``[sync] tasks`` connections from this
#: many relay bytes on (a catch-up's driver batches, ~16 MiB); a smaller one (a streaming
#: sync's: under 2-thread unthrottled sysbench, 1-5 MiB) in one transaction with the
#: checkpoint's move, which saves the in-flight mark's and the ledger's commits, and whose
#: lag was measured so (``bench.sync_lag``, not rerun with several connections).
_SPREAD_BYTES = 8 << 20
#: How long a chained plan's read stage waits for the batch before the barrier to be done
#: (``_plan_then_read``), seconds; after that the batch's apply job runs the stage.  Every
#: exit of the run opens the gate first.
_GATE_WAIT = 600.0
#: The local properties ``SparkContext.setJobGroup`` sets.
_JOB_GROUP_KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
#: Backoff between attempts to reach a lost downstream: 0.5 s, doubling, at most 30 s.
_BACKOFF_FIRST, _BACKOFF_CAP = 0.5, 30.0


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
        #: The driver's own sessions (checkpoint marks, DDL, catalog reads, barrier
        #: batches): several statements per round trip (``Downstream.scripts``).  The
        #: tasks' rows go through ``downstream``; the driver's batches of keyed rows in
        #: one script too (``tasks.apply_with_checkpoint``).
        self.driver_downstream = replace(self.downstream, scripts=True)
        #: Where transactions are replayed in relay order, and the checkpoint moved.
        self.replayer = ReplaySession(self.driver_downstream)
        self.session_ends = SessionEnds(self.relay_dir)
        self._spark = spark
        self._own_spark = spark is None
        self._spark_starting: threading.Thread | None = None
        self._spark_failed: BaseException | None = None
        #: Keeps the Python workers of a session this pipeline started past PySpark's
        #: idle timeout while batches stay on the driver.
        self._keeper: WarmKeeper | None = None
        self._keeper_lock = threading.Lock()
        self._closed = False
        self.should_stop = should_stop or (lambda: False)
        self.stats = SyncStats()
        self.listeners: list[BatchListener] = list(listeners or ())
        self.rules = TableRules()
        #: The upstream logged rows without column names: the rules hold every table's
        #: columns, to apply them by (``apply.positional``); set when such rows are met.
        self.positional = False
        #: A DDL ran since the rules were read: read them again before rows are written
        #: (not after every DDL: a migration's run of DDL reads the catalog once).
        self.rules_stale = False
        #: While stale: the DDL (text, default schema) since the read when each is one whose
        #: tables alone need reading again (``catalog.NARROW_KINDS``); None: read it all.
        self.stale_ddl: list[tuple[str, str | None]] | None = []
        #: Tables made since the read (their CREATE TABLE, default schema) whose columns
        #: (text, floating point: their keys' collations) the rules lack: read before the
        #: next batch that writes rows by key, not before rows replayed in relay order (a
        #: migration's run of DDL and rows); a RENAME after one is noted with it.  None:
        #: more than ``_NARROW_MAX``: the whole catalog is read before that batch (a run of
        #: DDL and rows in relay order goes on without a read).
        self.keys_unread: list[tuple[str, str | None]] | None = []
        self.triggers = SkippedTriggers(config.sync.checkpoint_schema, config.sync.pipeline)
        self.journal = DdlJournal(config.sync.checkpoint_schema, config.sync.pipeline)
        #: When the consumer position was last written, and a newer one not written yet.
        self._registered_at = 0.0
        self._unregistered: Position | None = None
        #: The downstream outage being waited out, if any.
        self.outage: Outage | None = None
        #: The next batch's read stage, started while a barrier batch is replayed.
        self._read_ahead: ReadAhead | None = None
        self._done_batch = -1  # the id of the last batch applied
        #: The thread that plans batches ahead (``_run``'s), once started.
        self._planner: ThreadPoolExecutor | None = None
        #: Set as ``_run`` exits: a plan being made then starts no read stage.
        self._closing = threading.Event()
        #: The run is a catch-up (``until_caught_up``): see ``_batch_limit``.
        self._catching_up = False
        #: The last batch of rows went to Spark bigger than the driver's backlog rule
        #: allows (a backlog arrived): see ``_batch_limit``.
        self._far_behind = False
        #: The last error retried (text, epoch seconds), kept in the consumer registration
        #: for ``status``.
        self.last_error: tuple[str, float] | None = None

    # --- setup ---------------------------------------------------------------------------

    @property
    def spark(self) -> Any:
        """The Spark session, started (and its Python workers warmed up) on first use, or
        taken over from :meth:`start_spark`'s thread."""
        starting = self._spark_starting
        if starting is not None:
            starting.join()
            self._spark_starting = None
            failed, self._spark_failed = self._spark_failed, None
            if failed is not None:
                raise failed
        if self._spark is None:
            self._spark = self._new_spark()
        return self._spark

    @property
    def spark_ready(self) -> bool:
        """Whether Spark can take a job now without waiting for its start."""
        starting = self._spark_starting
        if starting is not None:
            return not starting.is_alive()
        return self._spark is not None

    def start_spark(self) -> None:
        """Start Spark in the background (a session this pipeline owns only), so that its
        start-up (JVM, executors, Python workers: seconds) overlaps with reading the
        checkpoint and the relay and with the first batches, which the driver applies
        itself meanwhile (``_dml``)."""
        if self._spark is not None or self._spark_starting is not None:
            return

        def start() -> None:
            try:
                self._spark = self._new_spark()
            except BaseException as exc:  # handed to the thread that needs the session
                self._spark_failed = exc

        # A daemon: a sync that is done before Spark is up exits without waiting for it
        # (the JVM ends with this process, as it watches its standard input).
        self._spark_starting = threading.Thread(target=start, name="spark-start",
                                                daemon=True)
        self._spark_starting.start()

    def _new_spark(self) -> Any:
        from binrelay.spark.session import build_session

        spark = build_session(self.sync.master, app_name=f"binrelay-{self.name}",
                              driver_host=self.sync.driver_host)
        sc = spark.sparkContext
        log.info("spark driver started", extra={
            "master": sc.master, "driver": f"{sc.getConf().get('spark.driver.host')}:"
                                           f"{sc.getConf().get('spark.driver.port')}"})
        with spark_failures():
            warm_up(sc)
        with self._keeper_lock:
            if not self._closed:
                self._keeper = WarmKeeper(sc)
        log.info("spark ready", extra={"workers": int(sc.defaultParallelism)})
        return spark

    @property
    def name(self) -> str:
        return self.sync.pipeline

    def close(self) -> None:
        """Stop the Spark session this pipeline started on a cluster, so that the master
        sees the application finish (a session given by the caller is left alone).  In
        local mode the JVM ends with this process: a stop would only add a second."""
        self.replayer.close()
        with self._keeper_lock:
            self._closed = True
            keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.close()
        if self._own_spark and not self.sync.master.startswith("local") and (
                self._spark is not None or self._spark_starting is not None):
            with contextlib.suppress(Exception):  # a start that failed has nothing to stop
                spark = self.spark
                self._spark = None
                spark.stop()

    def read_rules(self, conn: Any) -> None:
        """The downstream catalog's rules for writing tables (at start, and after DDL before
        rows are written again); refuses a downstream with triggers on the tables it would
        write.  Ends the transaction ``conn`` is in."""
        skip = (self.store.schema,)
        narrow = [] if (self.rules_stale and self.stale_ddl is None) \
            or self.keys_unread is None else self.keys_unread + (self.stale_ddl or [])
        if narrow:
            self.rules = reread_rules(conn, self.rules, narrow, exclude_schemas=skip)
        else:
            self.rules = read_rules(conn, exclude_schemas=skip, positional=self.positional)
        self.rules_stale = False
        self.stale_ddl = []
        self.keys_unread = []
        if self.rules.triggers:
            t = self.rules.triggers[0]
            more = len(self.rules.triggers) - 1
            raise UnfaithfulApplyError(
                f"the downstream has trigger {t.schema}.{t.name} on {t.table}"
                + (f" (and {more} more)" if more else "")
                + ": it would fire again for rows whose trigger effects are already in the"
                  " binlog", hint="drop the downstream's triggers on replicated tables "
                                  "(binrelay does not replay trigger DDL), then sync again")

    def checkpoint(self) -> Checkpoint:
        with pooled_connection(self.driver_downstream) as conn:
            create_checkpoint_table(conn, self.store)
            with conn.cursor() as cur:
                self.triggers.create(cur)
                self.journal.create(cur)
            conn.commit()
            found = read_checkpoint(conn, self.name, self.store)
            if found is None:
                wanted = self.sync.binlog_gtid
                start = position_of_gtid_set(self.relay_dir, wanted) if wanted \
                    else earliest(self.relay_dir)
                found = init_checkpoint(conn, self.name, start, wanted, self.store)
                log.info("new pipeline", extra={"pipeline": self.name, "start": str(start),
                                                "gtid_set": wanted})
            elif self.sync.binlog_gtid:
                log.info("binlog-gtid ignored: the pipeline has a checkpoint",
                         extra={"pipeline": self.name, "checkpoint": str(found.position)})
            return found

    # --- the loop --------------------------------------------------------------------------

    def run(self, *, until_caught_up: bool = False) -> SyncStats:
        """Apply batches until told to stop, or (``until_caught_up``) until the relay's
        durable end as it was at the start of each batch.

        A lost or refused downstream connection is waited for, with capped backoff, and the
        sync goes on from its checkpoint (the batch in flight replayed first, as
        ``recover`` does): forever when streaming, for ``[sync] reconnect-deadline`` seconds
        with ``until_caught_up``.  Any other error stops it."""
        started = time.monotonic()
        try:
            self.retrying(lambda: self._run(until_caught_up), deadline=until_caught_up)
        finally:
            self.stats.seconds = time.monotonic() - started
        return self.stats

    def retrying(self, step: Callable[[], T], *, deadline: bool) -> T | None:
        """``step()``, run again after a lost downstream came back (None when told to stop
        while waiting); with ``deadline``, at most ``[sync] reconnect-deadline`` seconds of
        waiting."""
        while True:
            try:
                result = step()
            except NamelessRowsError:
                if self.positional:
                    raise
                # Met in a Spark task or a batch the driver applies with its checkpoint:
                # the run goes on from the checkpoint (the batch in flight applied again,
                # as after a crash), its rows read by the downstream's columns.
                self._turn_positional()
            except Exception as exc:
                lost = downstream_lost(exc)
                if lost is None:
                    raise
                if not self._wait_for_downstream(lost, deadline):
                    return None
            else:
                self._downstream_back()
                return result

    def _turn_positional(self) -> None:
        """Rows logged without column names were met: from now on the rules hold every
        table's columns, read before the next rows are (``apply.positional``)."""
        log.warning("the upstream logged rows without column names (binlog_row_metadata ="
                    " NO_LOG or MINIMAL): applying them by position, with the downstream"
                    " tables' columns, as a replica does; the downstream's tables must have"
                    " the upstream's columns in the upstream's order",
                    extra={"pipeline": self.name})
        self.positional = True
        self.rules_stale, self.stale_ddl = True, None

    def _wait_for_downstream(self, lost: DownstreamConnectionError, until_caught_up: bool
                             ) -> bool:
        """Sleep before the next attempt; False when told to stop meanwhile.  With
        ``until_caught_up``, raises a :class:`DownstreamConnectionError` saying how long the
        outage lasted once ``reconnect-deadline`` is past."""
        outage = self.outage
        if outage is None:
            outage = self.outage = Outage(time.monotonic())
            busy = getattr(lost, "errno", None) in RETRY_ERRORS
            log.warning("downstream busy (a lock wait timeout or deadlock); retrying" if busy
                        else "downstream lost; retrying", extra={
                "pipeline": self.name, "downstream": str(self.downstream), "error": str(lost)})
            self.last_error = (str(lost), time.time())
            consumers.note_error(self.relay_dir, self.name, self.last_error)
            for listener in self.listeners:
                lost_hook = getattr(listener, "downstream_lost", None)
                if lost_hook is not None:
                    lost_hook()
        else:
            log.debug("downstream still lost", extra={"error": str(lost)})
        outage.attempts += 1
        waited = time.monotonic() - outage.since
        deadline = self.sync.reconnect_deadline
        if until_caught_up and waited >= deadline:
            raise DownstreamConnectionError(
                f"the downstream {self.downstream} stayed unreachable for {waited:.0f} s"
                f" ({outage.attempts} attempts; last: {lost.reason})",
                hint="start it (or fix [to]) and run the sync again: it goes on from its "
                     "checkpoint; [sync] reconnect-deadline sets how long to wait") from None
        delay = min(_BACKOFF_CAP, _BACKOFF_FIRST * 2 ** (outage.attempts - 1))
        if until_caught_up:
            delay = min(delay, max(0.0, deadline - waited))
        ends = time.monotonic() + delay
        while time.monotonic() < ends:
            if self.should_stop():
                return False
            time.sleep(min(0.2, max(0.0, ends - time.monotonic())))
        return not self.should_stop()

    def _downstream_back(self) -> None:
        if self.outage is not None:
            log.info("downstream back", extra={
                "pipeline": self.name, "seconds": round(time.monotonic() - self.outage.since, 3),
                "attempts": self.outage.attempts})
            self.outage = None

    def _run(self, until_caught_up: bool) -> None:
        self._catching_up = until_caught_up
        waiter: ChangeWaiter | None = None
        over: threading.Event | None = None
        blocked = False
        planner: ThreadPoolExecutor | None = None
        ahead: Ahead | None = None
        self._closing.clear()
        try:
            # The checkpoint is read once: from then on this process is the one moving it
            # (mark_in_flight refuses a batch that does not start where it stands).
            cp = self.checkpoint()
            self._downstream_back()
            if self._own_spark and not until_caught_up and self.sync.mode != "strict":
                # A service: warm before a backlog arrives.  (A catch-up starts Spark when
                # its first batch of rows needs it: a range of DDL never does; strict mode
                # applies on the driver.)
                self.start_spark()
            with pooled_connection(self.driver_downstream) as conn:
                self.read_rules(conn)
            start = cp.position
            gtid = cp.gtid_set or gtid_set_at(self.relay_dir, start)
            batch_id = cp.batch_id
            self._register(start)
            if not cp.consistent and cp.target is not None:
                end = cp.target
                gtid = cp.target_gtid_set
                self._batch(start, end, batch_id, gtid, replayed=True)
                start = end
            while not self.should_stop():
                # One reading of the relay dir per batch: its end, its files, their chain.
                view = RelayView(self.relay_dir)
                end_limit = view.end
                if end_limit.sort_key <= start.sort_key:
                    if until_caught_up:
                        break
                    self._far_behind = False  # caught up: the next burst is not its tail
                    waiter = self._wait(waiter, end_limit)
                    continue
                max_bytes = self._batch_limit(view, start, end_limit)
                planning = time.monotonic()
                from_ahead = ahead is not None and tuple(ahead[0]) == (start, max_bytes)
                if ahead is not None and from_ahead:
                    (end, segments, gtids), read_ahead, ahead = ahead[1].result()
                    self._adopt(read_ahead)
                    if ahead is not None and ahead[2] is not None:
                        ahead[2].set()  # the batch before this barrier is done
                else:
                    self._drop(ahead)
                    ahead = None
                    end, segments, gtids = self._plan(view, start, end_limit, max_bytes)
                if end == start and from_ahead:
                    # Planned on an older view of the relay, which may not have held the
                    # XA transaction's outcome yet.
                    self._drop(ahead)
                    ahead = None
                    end, segments, gtids = self._plan(view, start, end_limit, max_bytes)
                if end == start:
                    # A prepared XA transaction whose outcome is not relayed yet.
                    if not blocked:
                        log.info("waiting for the outcome of a prepared XA transaction",
                                 extra={"pipeline": self.name, "at": str(start)})
                        blocked = True
                    if until_caught_up:
                        break
                    waiter = self._wait(waiter, end_limit)
                    continue
                blocked = False
                self._note_size(max_bytes, segments)
                batch_id += 1
                gtid = advance_gtid_set(gtid, gtids)
                if ahead is None and self._plan_ahead(segments, end, end_limit):
                    # The next batch is planned while Spark applies this one (the driver
                    # only waits meanwhile): a catch-up's batch of 256 MiB takes ~0.5 s
                    # of planning, which then no longer sits between two Spark jobs.
                    planner = self._planner = planner or ThreadPoolExecutor(
                        1, thread_name_prefix="plan")
                    barrier = self._barrier(segments)
                    over = threading.Event() if barrier and not self.spark_ready else None
                    key: list[Any] = [end, max_bytes]
                    # After a batch of rows Spark applies, the next one's read stage runs
                    # as its apply job's tasks leave slots free (queued behind that job).
                    behind = None if barrier or not self._spark_rows(segments) else batch_id
                    ahead = (key, planner.submit(self._plan_then_read, view, end, end_limit,
                                                 max_bytes, barrier or behind is not None,
                                                 True, over=over, key=key, behind=behind),
                             None)
                try:
                    self._batch(start, end, batch_id, gtid, relay_end=end_limit,
                                segments=segments, planned_in=time.monotonic() - planning)
                finally:
                    if over is not None:
                        over.set()
                        over = None
                start = end
        finally:
            self._closing.set()
            if planner is not None:
                self._open(ahead)  # a chained plan waiting on its gate would hold shutdown
                planner.shutdown(wait=True, cancel_futures=True)
                self._planner = None
            self._drop(ahead)
            if waiter is not None:
                waiter.close()
            if self._unregistered is not None:
                self._register(self._unregistered)

    def _batch_limit(self, view: RelayView, start: Position, end_limit: Position) -> int:
        """The most relay bytes the next batch takes.  While Spark starts, the driver
        applies batches itself: small ones, so that Spark takes over as soon as it is up;
        with Spark up, a streaming sync's batches the driver applies when the backlog is a
        few of them (``_DRIVER_BACKLOG``).  A catch-up (``until_caught_up``), and a
        streaming sync whose last batch of rows was bigger than that (a backlog arrived),
        give Spark the last few batches' worth as one: the tail of a sysbench catch-up,
        41 MiB, took 1.96 s as one Spark batch and 3.4 s as three driver batches of 16 MiB
        (one connection; 3.35-3.45 s on four), the bigger batch's survivors denser in the
        tables, on an otherwise idle 2-core machine."""
        sync = self.sync
        if not sync.driver_apply:
            return sync.batch_bytes
        if not self.spark_ready:
            return min(sync.batch_bytes, sync.partition_bytes)
        backlog = _DRIVER_BACKLOG * sync.driver_batch_bytes
        if self._catching_up or self._far_behind or not backlog or \
                relay_bytes(view, start, end_limit, at_most=backlog) > backlog:
            return sync.batch_bytes
        return min(sync.batch_bytes, sync.driver_batch_bytes)

    def _note_size(self, max_bytes: int, segments: list[Segment]) -> None:
        """Note whether a planned batch of rows shows a backlog (``_far_behind``); a
        barrier between the batches of a backlog leaves it as it was."""
        if not self._barrier(segments):
            self._far_behind = max_bytes > self.sync.driver_batch_bytes and \
                sum(s.stop - s.start for s in segments) > \
                _DRIVER_BACKLOG * self.sync.driver_batch_bytes

    def _plan(self, view: RelayView, start: Position, end_limit: Position,
              max_bytes: int) -> Planned:
        """The batch from ``start`` (``next_batch``): its end, its partitions and the GTIDs
        of its transactions."""
        gtids: list[str] = []
        end, segments = next_batch(
            view, start, end_limit, max_bytes=max_bytes,
            max_transactions=self.sync.batch_transactions or None,
            target_bytes=self.sync.partition_bytes, gtids=gtids, ddl_run=_DDL_RUN,
            run_rows=0 if self.sync.mode == "strict" else min(_RUN_ROWS, max_bytes))
        return end, segments, gtids

    def _barrier(self, segments: list[Segment]) -> bool:
        """Whether the batch of ``segments`` is replayed on the driver in relay order (DDL,
        statements, XA: ``_serial``), leaving Spark's slots to the next batch's read stage
        (``read_ahead``)."""
        return self.sync.mode != "strict" and any(s.kind != "dml" for s in segments)

    def _plan_then_read(self, view: RelayView, start: Position, end_limit: Position,
                        max_bytes: int, read: bool, chain: bool = False,
                        gate: threading.Event | None = None, *,
                        over: threading.Event | None = None,
                        key: list[Any] | None = None,
                        behind: int | None = None) -> PlannedAhead:
        """:meth:`_plan`, in the planner's thread; when ``read`` (the batch before runs no
        Spark job, or is ``behind``) and the planned batch is one for Spark's apply stage,
        its read stage started too, once ``gate`` is open if given.

        With ``chain``, a planned barrier batch has the batch after it planned next in
        this thread, its read stage gated on the batch before the barrier being done (the
        main thread opens the gate as it takes the barrier's plan): so the read stage
        starts as the barrier's replay does, not ~0.5 s into it, after its planning, and
        never ahead of a job the batch before the barrier has still to run (Spark runs
        jobs first come, first served).

        With ``over`` (set when the barrier batch before is applied), planned while Spark
        starts: should Spark come up before the barrier is over, the batch is planned again
        with the limit a ready Spark gets (``_batch_limit``), ``key`` told so, and its read
        stage started, to run alongside the barrier instead of after it.

        With ``behind`` (the id of the batch before, a batch of rows on Spark), the
        read stage is started once that batch's apply job is submitted: Spark runs jobs
        first come, first served, so its tasks take the slots that job's tasks leave, and
        never delay it."""
        planned = self._plan(view, start, end_limit, max_bytes)
        if over is not None and key is not None:
            planned, max_bytes = self._plan_for_spark(view, start, end_limit, planned,
                                                      max_bytes, over, key)
        segments = planned[1]
        if behind is not None and read and self._spark_reads(segments) and \
                not self._wait_for_job(behind):
            read = False
        if gate is not None:
            # Until the gate opens; or the run ends (its exit may come while this plan
            # is made, after it opened the gates it knew of).
            waited = time.monotonic() + _GATE_WAIT
            while not gate.wait(0.05):
                if self._closing.is_set() or time.monotonic() > waited:
                    read = False
                    break
        read = read and not self._closing.is_set()
        started = self._read_next(start, segments, read)
        chained: Ahead | None = None
        if chain and self._planner is not None and self._barrier(segments) and \
                self._plan_ahead(segments, planned[0], end_limit):
            opened = threading.Event()
            chained = ([planned[0], max_bytes],
                       self._planner.submit(self._plan_then_read, view, planned[0],
                                            end_limit, max_bytes, True, False, opened),
                       opened)
        return planned, started, chained

    def _plan_for_spark(self, view: RelayView, start: Position, end_limit: Position,
                        planned: Planned, max_bytes: int, over: threading.Event,
                        key: list[Any]) -> tuple[Planned, int]:
        """``_plan_then_read``'s wait for Spark while a barrier is applied: the plan (and
        its limit) to use, planned again if Spark came up first."""
        while not over.wait(0.05):
            if self._closing.is_set():
                return planned, max_bytes
            if self.spark_ready:
                break
        else:
            return planned, max_bytes
        limit = self._batch_limit(view, start, end_limit)
        if limit == max_bytes or over.is_set():
            return planned, max_bytes
        key[1] = limit  # (the main thread then waits for this plan rather than make its own)
        return self._plan(view, start, end_limit, limit), limit

    def _read_next(self, start: Position, segments: list[Segment], read: bool
                   ) -> ReadAhead | None:
        """The read stage of the planned batch of ``segments``, started now, when ``read``
        and it is one for Spark's apply stage."""
        # A session started (``spark_ready``) and not failed: this thread leaves its
        # start, and a failure's report, to the main thread (``spark``).
        if not read or not self._spark_reads(segments):
            return None
        spark = self._spark
        rules = self.rules  # as they stand: _read_stage compares them with those it uses
        started = start_read(spark.sparkContext, str(self.relay_dir), segments,
                             self.sync.tasks, rules)
        if started is not None:
            log.debug("read stage started ahead", extra={
                "pipeline": self.name, "at": str(start), "partitions": len(segments)})
        return started

    def _job_group(self, batch_id: int) -> str:
        return f"binrelay-{self.name}-{batch_id}"

    def _spark_reads(self, segments: list[Segment]) -> bool:
        """Whether the batch of ``segments`` has a read stage on Spark (its rows in more
        than one partition: ``_dml``)."""
        return len(segments) > 1 and self._spark_rows(segments)

    def _spark_rows(self, segments: list[Segment]) -> bool:
        """Whether the batch of ``segments`` is rows that Spark's tasks apply."""
        return self.spark_ready and self._spark_failed is None and \
            self.sync.mode != "strict" and all(s.kind == "dml" for s in segments) and \
            not self._on_driver(sum(s.stop - s.start for s in segments))

    def _wait_for_job(self, batch_id: int) -> bool:
        """Wait until an apply job of batch ``batch_id`` is submitted (``_dml``'s job
        group); False if the run ends first, or the batch was done without one."""
        tracker = self._spark.sparkContext.statusTracker()
        group = self._job_group(batch_id)
        waited = time.monotonic() + _GATE_WAIT
        while not self._closing.is_set() and time.monotonic() < waited:
            if tracker.getJobIdsForGroup(group):
                return True
            if self._done_batch >= batch_id:
                return False
            time.sleep(0.01)
        return False

    def _drop(self, ahead: Ahead | None) -> None:
        """A batch planned ahead that will not run (its start or size changed, the run
        ends), and any chained after it: their planning cancelled if not begun, their
        read stages cancelled, and any kept before."""
        if ahead is not None:
            if ahead[2] is not None:
                ahead[2].set()
            if not ahead[1].cancel():
                try:
                    _planned, read_ahead, chained = ahead[1].result()
                except Exception:  # its planning's error: not needed now
                    pass
                else:
                    self._adopt(read_ahead)
                    self._drop(chained)
        self._adopt(None)

    def _open(self, ahead: Ahead | None) -> None:
        """Every gate of ``ahead`` and of the plans chained after it, open."""
        while ahead is not None:
            if ahead[2] is not None:
                ahead[2].set()
            future = ahead[1]
            if not future.done() or future.cancelled() or future.exception() is not None:
                return
            ahead = future.result()[2]

    def _adopt(self, read_ahead: ReadAhead | None) -> None:
        """Keep ``read_ahead`` for the next batch, cancelling the one kept before."""
        if self._read_ahead is not None and self._read_ahead is not read_ahead:
            self._read_ahead.cancel()
        self._read_ahead = read_ahead

    def _read_stage(self, segments: list[Segment], tasks: int,
                    rules: TableRules) -> tuple[Any, Any]:
        """The batch's read stage (``read_ahead.read_stage``): the one started ahead when
        it was made of these partitions and rules, otherwise a new one."""
        ahead, self._read_ahead = self._read_ahead, None
        if ahead is not None:
            if ahead.serves(segments, tasks, rules):
                self.stats.read_ahead += 1
                return ahead.source, ahead.shuffled
            log.debug("read stage started ahead not used: the catalog's rules changed",
                      extra={"pipeline": self.name})
            ahead.cancel()
        return read_stage(self.spark.sparkContext, str(self.relay_dir), segments, tasks,
                          rules)

    def _plan_ahead(self, segments: list[Segment], end: Position,
                    end_limit: Position) -> bool:
        """Whether to plan the batch after ``segments`` (ending at ``end``) while they are
        applied: when the driver will mostly wait (Spark applies rows, more than the driver
        applies itself; or the downstream runs DDL) and there is more relay than a
        partition after them (a DDL-rich range plans each short batch in microseconds,
        less than handing it to a thread would cost)."""
        if end.sort_key >= end_limit.sort_key:
            return False
        if (end.subdir, end.binlog_name) == (end_limit.subdir, end_limit.binlog_name) and \
                end_limit.binlog_pos - end.binlog_pos <= self.sync.partition_bytes:
            return False
        rows = sum(s.stop - s.start for s in segments if s.kind == "dml")
        return (self.spark_ready and rows > self.sync.driver_batch_bytes) or \
            any(s.kind == "ddl" for s in segments)

    def _applied_to(self, end: Position) -> None:
        """The consumer position (what purge keeps) follows the checkpoint at most once a
        second and when the run ends: one durable file write per batch would cost a run of
        small batches (DDL) a millisecond each.  A position behind the checkpoint is safe:
        purge keeps more."""
        if time.monotonic() - self._registered_at >= _REGISTER_EVERY:
            self._register(end)
        else:
            self._unregistered = end

    def _register(self, position: Position) -> None:
        consumers.register(self.relay_dir, self.name, position, last_error=self.last_error)
        self._registered_at = time.monotonic()
        self._unregistered = None

    def _wait(self, waiter: ChangeWaiter | None, end: Position) -> ChangeWaiter:
        """Sleep until the relay writes more (or a second passes).  Caught up, purge may
        have what the sync applied: the consumer position follows, as often as
        ``_applied_to`` lets it (a streaming sync is caught up after nearly every batch,
        tens of times a second; an idle one registers on its next wake-up, within a
        second)."""
        if self._unregistered is not None and \
                time.monotonic() - self._registered_at >= _REGISTER_EVERY:
            self._register(self._unregistered)
        fresh = waiter is None
        waiter = waiter or ChangeWaiter(self.relay_dir)
        if not waiter.watch(self.relay_dir / str(end.subdir)) and not fresh:
            waiter.wait(1.0)  # (a watch just started: the run looks at the relay again first)
        return waiter

    def _batch(self, start: Position, end: Position, batch_id: int, gtid: str, *,
               relay_end: Position | None = None, replayed: bool = False,
               segments: list[Segment] | None = None, planned_in: float = 0.0) -> None:
        started = time.monotonic()
        times = thread_times()
        if segments is None:
            segments = plan_partitions(self.relay_dir, start, end,
                                       target_bytes=self.sync.partition_bytes)
        by_key = all(s.kind == "dml" for s in segments)  # (else replayed in relay order)
        if (self.rules_stale and any(s.kind != "ddl" for s in segments)) or \
                (self.keys_unread != [] and by_key and segments):
            with pooled_connection(self.driver_downstream) as conn:
                self.read_rules(conn)
        rows_by_op: dict[str, int] = {}
        ddl_before = self.stats.ddl
        spark_seconds = 0.0
        reached = start
        relay_bytes = sum(s.stop - s.start for s in segments)
        rows_only = not replayed and by_key
        self._follow_upstream_restarts(segments)
        if self.sync.mode == "strict" and rows_only:
            rows_by_op, reached = self._strict(segments)
            segments = []
        if rows_only and segments and self._on_driver(relay_bytes):
            applying = time.monotonic()
            rows_by_op = self._driver_batch(start, end, batch_id, gtid, segments, reached)
            spark_seconds = time.monotonic() - applying
        else:
            with self.replayer.use() as conn:
                mark_in_flight(conn, self.name, batch_id, end, gtid, self.store,
                               start=reached)
                if any(s.kind != "dml" for s in segments):
                    journal = replace(self.journal, batch_id=batch_id, replayed=replayed)
                    rows_by_op = self._serial(conn, segments, journal)
                    with conn.cursor() as cur:
                        journal.clear(cur)  # committed with the checkpoint
                elif segments:
                    applying = time.monotonic()
                    with spark_failures():
                        rows_by_op = self._dml(segments, batch_id)
                    spark_seconds = time.monotonic() - applying
                finish_batch(conn, self.name, batch_id, self.store)
        self._applied_to(end)
        self.stats.batches += 1
        self._done_batch = batch_id
        used = thread_times().since(times)
        report = BatchReport(
            pipeline=self.name, batch_id=batch_id,
            kind="ddl" if self.stats.ddl > ddl_before else (
                "dml" if any(rows_by_op.values()) else "empty"),
            start=start, end=end, relay_end=relay_end or end, rows_by_op=rows_by_op,
            ddl=self.stats.ddl - ddl_before,
            relay_bytes=relay_bytes,
            seconds=time.monotonic() - started, replayed=replayed,
            # On a busy host a slow batch of a streaming sync is mostly a wait for a CPU
            # (its work is milliseconds): the two tell it from a slow downstream.
            cpu_seconds=used.cpu, cpu_wait_seconds=used.waited)
        log.info("batch applied", extra={
            "pipeline": self.name, "batch": batch_id, "kind": report.kind,
            "start": str(start), "end": str(end), "rows": report.changes,
            "ddl": report.ddl, "bytes": report.relay_bytes,
            "seconds": round(report.seconds, 3), "spark_seconds": round(spark_seconds, 3),
            "plan_seconds": round(planned_in, 3), "replayed": replayed,
            "cpu_seconds": round(report.cpu_seconds, 3),
            **({} if report.cpu_wait_seconds is None
               else {"cpu_wait_seconds": round(report.cpu_wait_seconds, 3)})})
        for listener in self.listeners:
            listener(report)

    def _follow_upstream_restarts(self, segments: list[Segment]) -> None:
        """As a replica's SQL thread drops its temporary tables when the upstream restarted,
        so does the replay session when a batch reaches where its sessions ended."""
        ended = self.session_ends.reached(segments)
        if ended is not None and self.replayer.temporary:
            log.info("the upstream restarted or was switched: its sessions' temporary"
                     " tables are gone, and so are the replay session's",
                     extra={"pipeline": self.name, "file": str(ended)})
            self.replayer.close(lost=False)

    def _strict(self, segments: list[Segment]) -> tuple[dict[str, int], Position]:
        """``[sync] mode = "strict"``: every upstream transaction of the batch applied in
        relay order, each in one downstream transaction together with its checkpoint row
        (MySQL's ``relay_log_info_repository=TABLE``); the batch's own protocol then only
        marks its (empty) rest."""
        rows_by_op: dict[str, int] = {}
        headers: Headers = {}
        with self.replayer.use() as conn:
            self.replayer.replaying()
            cp = read_checkpoint(conn, self.name, self.store)
            assert cp is not None
            current, current_gtids = cp.position, cp.gtid_set
            for segment in segments:
                for end_off, gtid, actions in segment_actions(
                        self.relay_dir, segment, lambda: self.rules, headers,
                        pseudo_thread=self.replayer.pseudo_thread,
                        read_columns=lambda: self._columns_now(conn, None)):
                    if end_off is None:  # a DDL's own rows: no rows-only batch has them
                        raise ApplyError("a DDL in a batch of rows only",
                                         hint="report this: the batch was planned wrong")
                    after = segment.position(end_off)
                    after_gtids = advance_gtid_set(current_gtids, [gtid] if gtid else [])
                    update = CheckpointUpdate(self.name, current, after, after_gtids,
                                              self.store)
                    with conn.cursor() as cur:
                        fresh = advance_in_transaction(cur, update)
                    if fresh:
                        self._replay(conn, actions, rows_by_op)
                    conn.commit()
                    current, current_gtids = after, after_gtids
        self.stats.changes += sum(rows_by_op.values())
        return rows_by_op, current

    def _serial(self, conn: Any, segments: list[Segment],
                journal: DdlJournal) -> dict[str, int]:
        """A barrier batch (a run of DDL with the rows between them, a transaction with
        statements, a prepared XA), replayed on the driver in relay order, in the
        connection's open transaction: rows before a DDL commit with its journal row (the
        DDL's script), the rest with the checkpoint (the caller's ``finish_batch``).  So a
        replay of the batch skips the rows before its last journaled DDL: they were
        committed."""
        rows_by_op: dict[str, int] = {}
        committed_to = None
        headers: Headers = {}
        self.replayer.replaying()
        with pipeline_lock(conn, self.name, self.store) as locked:
            # DDL sent ahead may outlive a killed sync: only under the lock that holds its
            # replay until they have run.
            left = LeftContext(ahead=_DDL_AHEAD if locked else 0,
                               max_packet=self.rules.max_allowed_packet,
                               kept_apart=self._not_innodb)
            if journal.replayed:
                with conn.cursor() as cur:
                    committed_to = journal.last(cur)
            for segment in segments:
                if segment.kind == "xa" and not xa_committed(self.relay_dir, segment):
                    log.info("XA transaction rolled back upstream: not applied",
                             extra={"xid": segment.xid,
                                    "at": str(segment.position(segment.start))})
                    continue
                if segment.kind == "dml":
                    self._rules_now(conn, left)
                where = segment.position(segment.start)
                at = (where.subdir.seq, binlog_sort_key(where.binlog_name)[1])
                for end, _gtid, actions in segment_actions(
                        self.relay_dir, segment, lambda: self.rules, headers,
                        pseudo_thread=self.replayer.pseudo_thread,
                        committed_to=committed_to if segment.kind == "dml" else None,
                        read_columns=lambda: self._columns_now(conn, left)):
                    if segment.kind == "dml" and committed_to is not None \
                            and end is not None and (*at, end) < committed_to[:3]:
                        continue
                    self._replay(conn, actions, rows_by_op, journal, left)
                    if end is None:  # rows of the DDL's own transaction follow
                        self._rules_now(conn, left)
            left.settle(conn)
        self.stats.changes += sum(rows_by_op.values())
        return rows_by_op

    def _not_innodb(self, table: TableRef) -> bool:
        """A table the catalog's rules know not to be InnoDB (its rows are not sent ahead;
        a table a DDL of the run made is not known yet, and its rows may be)."""
        columns = self.rules.columns_of(table)
        return columns is not None and not columns.innodb

    def _columns_now(self, conn: Any, left: LeftContext | None) -> TableRules:
        """Rows logged without column names met while transactions are replayed in relay
        order (``segment_actions``): the rules with every table's columns, read now, as
        :meth:`_rules_now` reads rules (the replay goes on in its session)."""
        self._turn_positional()
        if left is not None:
            self._rules_now(conn, left)
        else:
            with pooled_connection(self.driver_downstream) as other:
                self.read_rules(other)
        return self.rules

    def _rules_now(self, conn: Any, left: LeftContext) -> None:
        """The catalog's rules read again if a DDL of the run changed them, before rows are
        decoded by them: once the DDL have run (those sent ahead first), and on a connection
        of its own, as ``conn`` may hold rows that must commit with the next DDL's journal
        row."""
        if not self.rules_stale:
            return
        left.finish(conn)
        with pooled_connection(self.driver_downstream) as other:
            self.read_rules(other)

    def _replay(self, conn: Any, actions: list[Action], rows_by_op: dict[str, int],
                journal: DdlJournal | None = None, left: LeftContext | None = None) -> None:
        """One transaction's actions, in order, counted (row changes by op, DDL); ``left``:
        the connection's owed reset, carried from one to the next (``replay_actions``)."""
        for action in actions:
            if isinstance(action, SessionStatement):
                self.stats.ddl += action.ddl
                if not action.ddl and creates_temporary(action.text):
                    self.replayer.temporary = True
                if action.ddl:
                    self._rules_after(action.text, action.schema or None)
            else:
                rows_by_op[action.op] = rows_by_op.get(action.op, 0) + 1
        replay_actions(conn, actions, triggers=self.triggers,
                       max_packet=self.rules.max_allowed_packet, journal=journal,
                       left=left)

    def _rules_after(self, ddl: str, schema: str | None) -> None:
        """What the catalog's rules need after ``ddl`` ran: nothing (``keeps_rules``), a read
        of the tables it names (``NARROW_KINDS``, up to ``_NARROW_MAX`` of them since the
        last read), or a whole read; done before the next batch that writes rows."""
        # leaves_rules judges by the rules as read: with DDL still to be read, the names
        # it knows nothing of may be those DDL's (CREATE TABLE a ... AS ..., RENAME a TO b).
        if keeps_rules(ddl) or (
                not self.rules_stale and leaves_rules(self.rules, ddl, schema)):
            if self.keys_unread and ddl_kind(ddl).name == "rename table":
                self._keys_unread((ddl, schema))  # (the new name is read)
            return
        if not self.rules_stale and leaves_rules(self.rules, ddl, schema, keys=False):
            self._keys_unread((ddl, schema))
            return
        self.rules_stale = True
        if self.stale_ddl is not None and len(self.stale_ddl) < _NARROW_MAX \
                and ddl_kind(ddl).name in NARROW_KINDS:
            self.stale_ddl.append((ddl, schema))
        else:
            self.stale_ddl = None

    def _keys_unread(self, ddl: tuple[str, str | None]) -> None:
        if self.keys_unread is not None and len(self.keys_unread) < _NARROW_MAX:
            self.keys_unread.append(ddl)
        else:
            self.keys_unread = None

    def _dml(self, segments: list, batch_id: int) -> dict[str, int]:
        """Apply the batch's DML partitions (planned once, in ``_batch``) on Spark tasks.

        Read tasks decode and compact their partitions (``binrelay.spark.compact``); the
        survivors are shuffled by key to the apply tasks.  No DataFrame: that would add Arrow
        -> JVM -> Python conversions per row.
        """

        tasks = self.sync.tasks
        relay_dir = str(self.relay_dir)
        rules = self.rules
        # The whole batch in one task (compact, find the ordered tables, apply).
        alone = TaskContext(self.downstream, self.name, batch_id, self.store, 1, rules=rules)
        if self._on_driver(sum(s.stop - s.start for s in segments)):
            # (A replayed batch, marked in flight already.)  As the driver wrote it: its
            # tasks' ledger claims then skip what they committed.
            if self._spread(segments):
                spread = TaskContext(self.downstream, self.name, batch_id, self.store, tasks,
                                     rules=rules)
                return self._counted(apply_spread(spread, relay_dir, segments,
                                                  lambda: None))
            return self._counted(list(apply_here(alone, relay_dir, iter(segments))))
        sc = self.spark.sparkContext
        with self._apply_jobs(sc, batch_id):
            # Two steps: which tables this batch must replay in order is known only from all of
            # its records, and such a table must be whole in one task, never also upserted by
            # another.
            if len(segments) == 1:
                counts = sc.parallelize(segments, 1).mapPartitions(
                    lambda segs: apply_alone(alone, relay_dir, segs)).collect()
                return self._counted(counts)
            # Records stay keyed by apply task; a Spark task per slot applies its apply tasks
            # at once (apply_lanes): ``tasks`` connections write, whatever the slots.
            width = lanes(tasks, sc.defaultParallelism)
            source, shuffled = self._read_stage(segments, tasks, rules)
            # One job when no table can need replaying in order (each task sees that from every
            # partition's flags and applies at once); otherwise the first job only finds the
            # ordered tables and a second one applies.  The second reuses the first's shuffle
            # files: the partitions are not decoded again.
            ctx = TaskContext(self.downstream, self.name, batch_id, self.store, tasks, rules=rules)
            first = shuffled.mapPartitions(
                lambda items: apply_lanes(apply_if_simple, ctx, items)).collect()
            if all(kind == "applied" for kind, _r, _k in first):
                return self._counted([ops for _kind, ops, _k in first])
            ordered, redo = to_replay((reasons, tables) for _kind, reasons, tables in first)
            routed = shuffled
            if redo:
                log.info("replaying tables in relay order", extra={
                    "batch": batch_id, "tables": ", ".join(map(str, sorted(redo))),
                    "reasons": "; ".join(sorted(set(redo.values())))})
                rest = shuffled.mapPartitions(lambda items: kept(items, redo))
                again = source.mapPartitions(task_errors(
                    lambda segs: packed(pair for seg in segs
                                        for pair in raw_records(relay_dir, seg, tasks, redo,
                                                                rules))))
                routed = rest.union(again).partitionBy(width, identity)
            ctx = TaskContext(self.downstream, self.name, batch_id, self.store, tasks,
                              frozenset(ordered), rules)
            counts = routed.mapPartitions(
                lambda items: apply_lanes(apply_task, ctx, items)).collect()
            return self._counted(counts)

    @contextlib.contextmanager
    def _apply_jobs(self, sc: Any, batch_id: int) -> Iterator[None]:
        """The batch's Spark jobs in its job group, by which the planner sees its apply job
        submitted (``_wait_for_job``); this thread's later jobs in none, and the keep-warm
        thread (which sees only jobs of no group) told."""
        sc.setJobGroup(self._job_group(batch_id), "apply")
        try:
            yield
        finally:
            for key in _JOB_GROUP_KEYS:
                sc.setLocalProperty(key, None)
            with self._keeper_lock:
                if self._keeper is not None:
                    self._keeper.used()

    def _on_driver(self, size: int) -> bool:
        """Whether this process applies a batch of rows of ``size`` relay bytes itself, as
        one task would (the same functions, so the same result): while Spark starts, or when
        the batch is so small that Spark would give it one task anyway (a streaming sync's
        batches, the rows between DDL), where a Spark job would add only its costs."""
        sync = self.sync
        if not sync.driver_apply:
            return False
        ready = self.spark_ready
        if not ready and size > _SPARK_WORTHY:
            self.start_spark()  # (a streaming sync started it already)
        return size <= sync.driver_batch_bytes or (
            not ready and size <= 2 * sync.partition_bytes)

    def _driver_batch(self, start: Position, end: Position, batch_id: int, gtid: str,
                      segments: list[Segment], reached: Position) -> dict[str, int]:
        """A batch of rows applied here: as ``[sync] tasks`` apply tasks would, a
        connection each, between the checkpoint's in-flight mark and its move (as a Spark
        batch); or, with one task or under ``_SPREAD_BYTES``, with the checkpoint's move in
        one downstream transaction."""
        if self._spread(segments):
            ctx = TaskContext(self.downstream, self.name, batch_id, self.store,
                              self.sync.tasks, rules=self.rules)
            with self.replayer.use() as conn:
                def begin() -> None:
                    mark_in_flight(conn, self.name, batch_id, end, gtid, self.store,
                                   start=reached)

                counts = apply_spread(ctx, str(self.relay_dir), segments, begin)
                finish_batch(conn, self.name, batch_id, self.store)
            return self._counted(counts)
        ctx = TaskContext(self.downstream, self.name, batch_id, self.store, 1,
                          rules=self.rules)
        update = CheckpointUpdate(self.name, start, end, gtid, self.store, batch_id)
        ops = apply_with_checkpoint(ctx, str(self.relay_dir), segments, update)
        if ops is None:
            # This process moves the checkpoint: only another one could have.
            log.warning("batch already applied: the checkpoint was at its end (is another"
                        " sync of this pipeline running?)", extra={
                            "pipeline": self.name, "batch": batch_id, "end": str(end)})
            return {}
        return self._counted([ops])

    def _spread(self, segments: list[Segment]) -> bool:
        """Whether a batch of rows the driver applies is written by ``[sync] tasks``
        connections (``tasks.apply_spread``) rather than in one transaction."""
        return self.sync.tasks > 1 and \
            sum(s.stop - s.start for s in segments) >= _SPREAD_BYTES

    def _counted(self, counts: list[dict[str, int]]) -> dict[str, int]:
        rows_by_op: dict[str, int] = {}
        for part in counts:
            for op, n in part.items():
                rows_by_op[op] = rows_by_op.get(op, 0) + n
        self.stats.changes += sum(rows_by_op.values())
        return rows_by_op


def recover(config: Config, *, listeners: list[BatchListener] | None = None
            ) -> tuple[bool, SyncStats]:
    """SPEC §2: if the checkpoint says ``consistent = 0``, replay the relay log from it to the
    end of the last complete transaction relayed; never needs the upstream.  Returns whether
    anything had to be done."""
    pipeline = SyncPipeline(config, listeners=listeners)
    try:
        cp = pipeline.retrying(pipeline.checkpoint, deadline=True)
        if cp is None or cp.consistent:
            return False, pipeline.stats
        return True, pipeline.run(until_caught_up=True)
    finally:
        pipeline.close()
