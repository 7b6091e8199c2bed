"""The checkpoint table in the downstream: where the apply got to, and whether it is whole.

One row per pipeline in ``<schema>.checkpoint`` (schema ``binrelay`` by default) holds what
MySQL's ``mysql.slave_relay_log_info`` and Drainer's ``tidb_binlog.checkpoint`` hold: the
relay position applied up to (subdir, file, offset), the same file/offset as the upstream's
binlog position (relay files keep upstream offsets), the GTID set, and ``consistent``.

Batch protocol (concurrent mode)::

    mark_in_flight(batch, target)   consistent = 0, committed before any data of the batch
    ... tasks apply survivors, each in its own transaction (ordered tasks claim a
        TaskLedger row in that transaction, so they run once even when replayed) ...
    finish_batch(batch)             position = target, consistent = 1, committed

A crash in between leaves ``consistent = 0`` and the target of the batch: replaying the
same range (same batch id) brings the downstream to the upstream's state at the target.

Strict mode writes the position in the data's own transaction instead
(:func:`advance_in_transaction`, used by ``applier.apply_transaction``).

Every function takes an open PyMySQL connection with autocommit off (``Downstream.connect``)
and commits what it changes itself, except :func:`advance_in_transaction`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pymysql

from binrelay.apply.changes import TableRef
from binrelay.apply.downstream import errno_of
from binrelay.apply.sql import quote_ident, quote_table
from binrelay.errors import BinrelayError, CheckpointError
from binrelay.position import Position

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "CheckpointUpdate",
    "TaskLedger",
    "advance_in_transaction",
    "advance_statement",
    "create_checkpoint_table",
    "finish_batch",
    "init_checkpoint",
    "mark_in_flight",
    "pipeline_lock",
    "read_checkpoint",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckpointStore:
    """Where the checkpoint lives: ``<schema>.<table>`` and ``<schema>.<table>_task``."""

    schema: str = "binrelay"
    table: str = "checkpoint"

    @property
    def ref(self) -> TableRef:
        return TableRef(self.schema, self.table)

    @property
    def task_ref(self) -> TableRef:
        return TableRef(self.schema, self.table + "_task")


DEFAULT_STORE = CheckpointStore()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    pipeline: str
    #: The transaction end applied up to, and the GTID set applied up to there.
    position: Position
    gtid_set: str
    consistent: bool
    batch_id: int
    #: The end of the batch in flight and the GTID set there (None, "" when consistent).
    target: Position | None
    target_gtid_set: str
    updated_at: _dt.datetime


@dataclass(frozen=True, slots=True)
class TaskLedger:
    """Exactly-once for tasks of one batch: a task claims ``(pipeline, batch, task id)`` in
    its own transaction; a second claim (a retry after commit, a replay after a crash, a
    speculative copy) finds the row and skips the task. Picklable: ship it to executors."""

    pipeline: str
    batch_id: int
    store: CheckpointStore = DEFAULT_STORE

    def claim_sql(self) -> str:
        # Runs with parameters: % in identifiers doubled.
        return (f"INSERT INTO {quote_table(self.store.task_ref).replace('%', '%%')} "
                "(pipeline, batch_id, task_id, applied_at) VALUES (%s, %s, %s, UTC_TIMESTAMP(6))")


@dataclass(frozen=True, slots=True)
class CheckpointUpdate:
    """Move ``pipeline`` from ``before`` to ``after`` (GTID set ``after_gtid_set``) with the
    data, in one transaction: strict mode's upstream transactions, and the batches the
    driver applies itself."""

    pipeline: str
    before: Position
    after: Position
    after_gtid_set: str
    store: CheckpointStore = DEFAULT_STORE
    #: The batch id to record (a driver's batch); None keeps the row's.
    batch_id: int | None = None


def _ddl(store: CheckpointStore) -> tuple[str, ...]:
    # utf8mb4_bin: pipeline names and file names compare exactly. DATETIME in UTC, written
    # explicitly: it reads the same whatever the reader's time_zone.
    return (
        f"CREATE DATABASE IF NOT EXISTS {quote_ident(store.schema)}",
        f"""CREATE TABLE IF NOT EXISTS {quote_table(store.ref)} (
            pipeline VARCHAR(191) NOT NULL PRIMARY KEY,
            relay_subdir VARCHAR(255) NOT NULL,
            relay_log_name VARCHAR(255) NOT NULL,
            relay_log_pos BIGINT UNSIGNED NOT NULL,
            master_log_name VARCHAR(255) NOT NULL,
            master_log_pos BIGINT UNSIGNED NOT NULL,
            gtid_set LONGTEXT NOT NULL,
            consistent TINYINT(1) NOT NULL,
            batch_id BIGINT UNSIGNED NOT NULL,
            target_subdir VARCHAR(255) NULL,
            target_log_name VARCHAR(255) NULL,
            target_log_pos BIGINT UNSIGNED NULL,
            target_gtid_set LONGTEXT NULL,
            updated_at DATETIME(6) NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
        f"""CREATE TABLE IF NOT EXISTS {quote_table(store.task_ref)} (
            pipeline VARCHAR(191) NOT NULL,
            batch_id BIGINT UNSIGNED NOT NULL,
            task_id VARCHAR(400) NOT NULL,
            applied_at DATETIME(6) NOT NULL,
            PRIMARY KEY (pipeline, batch_id, task_id)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    )


def create_checkpoint_table(conn: Any, store: CheckpointStore = DEFAULT_STORE) -> None:
    """Create the schema and both tables if missing (idempotent); refuse a non-transactional
    table, on which position and data could not commit together."""
    with conn.cursor() as cur:
        for statement in _ddl(store):
            cur.execute(statement)
        cur.execute(
            "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN (%s, %s)",
            (store.schema, store.table, store.task_ref.table))
        for name, engine in cur.fetchall():
            if str(engine).lower() != "innodb":
                raise CheckpointError(
                    f"checkpoint table {store.schema}.{name} uses engine {engine}",
                    hint="convert it to InnoDB (ALTER TABLE … ENGINE=InnoDB)")
    conn.commit()


_COLUMNS = ("pipeline, relay_subdir, relay_log_name, relay_log_pos, gtid_set, consistent, "
            "batch_id, target_subdir, target_log_name, target_log_pos, target_gtid_set, "
            "updated_at")


def _stored(pipeline: str, subdir: str, name: str, pos: int) -> Position:
    try:
        return Position.from_dict({"subdir": subdir, "file": name, "pos": int(pos)})
    except BinrelayError as exc:
        raise CheckpointError(f"pipeline {pipeline!r}: the checkpoint row holds {exc.message}",
                              hint="the row was not written by binrelay; restore it") from exc


def _row_to_checkpoint(row: tuple[Any, ...]) -> Checkpoint:
    (pipeline, subdir, name, pos, gtid, consistent, batch_id,
     t_subdir, t_name, t_pos, t_gtid, updated_at) = row
    target = None if t_subdir is None else _stored(pipeline, t_subdir, t_name, t_pos)
    return Checkpoint(pipeline, _stored(pipeline, subdir, name, pos), gtid, bool(consistent),
                      int(batch_id), target, t_gtid or "", updated_at.replace(tzinfo=_dt.UTC))


def _select(cur: Any, pipeline: str, store: CheckpointStore) -> Checkpoint | None:
    cur.execute(f"SELECT {_COLUMNS} FROM {quote_table(store.ref).replace('%', '%%')}"
                " WHERE pipeline = %s", (pipeline,))
    row = cur.fetchone()
    return None if row is None else _row_to_checkpoint(row)


def _locked_now(cur: Any, pipeline: str, store: CheckpointStore) -> tuple[Checkpoint, Any]:
    """The locked checkpoint row and the server's UTC time, in one round trip: a write under
    the lock stamps the row with that time, so it knows the row it leaves without reading it
    back."""
    cur.execute(f"SELECT {_COLUMNS}, UTC_TIMESTAMP(6) FROM"
                f" {quote_table(store.ref).replace('%', '%%')} WHERE pipeline = %s FOR UPDATE",
                (pipeline,))
    row = cur.fetchone()
    if row is None:
        raise CheckpointError(f"pipeline {pipeline!r} has no checkpoint",
                              hint="initialise it first (init_checkpoint)")
    return _row_to_checkpoint(row[:-1]), row[-1]


def read_checkpoint(
    conn: Any, pipeline: str, store: CheckpointStore = DEFAULT_STORE,
) -> Checkpoint | None:
    """The committed checkpoint of ``pipeline`` (None if it has none yet). Ends the
    connection's transaction (a commit), so that each read sees the latest commit."""
    with conn.cursor() as cur:
        found = _select(cur, pipeline, store)
    # End the read view, so that the next read of this connection sees newer commits.
    conn.commit()
    return found


def _position_sql(prefix: str) -> str:
    return (f"{prefix}subdir = %s, {prefix}log_name = %s, {prefix}log_pos = %s, "
            f"{'gtid_set' if prefix == 'relay_' else prefix + 'gtid_set'} = %s")


def _position_params(pos: Position | None, gtid_set: str) -> tuple[Any, ...]:
    if pos is None:
        return (None, None, None, None)
    return (str(pos.subdir), pos.binlog_name, pos.binlog_pos, gtid_set)


def _write(cur: Any, store: CheckpointStore, pipeline: str, position: Position, gtid_set: str,
           consistent: bool, batch_id: int, target: Position | None,
           target_gtid_set: str = "", *, now: Any) -> Checkpoint:
    """Update the row, stamped ``now`` (the server's UTC time, :func:`_locked_now`); the
    checkpoint as written."""
    table = quote_table(store.ref).replace("%", "%%")
    cur.execute(
        f"UPDATE {table} SET {_position_sql('relay_')}, master_log_name = %s,"
        f" master_log_pos = %s, consistent = %s, batch_id = %s, {_position_sql('target_')},"
        " updated_at = %s WHERE pipeline = %s",
        (*_position_params(position, gtid_set), position.binlog_name, position.binlog_pos,
         int(consistent), batch_id, *_position_params(target, target_gtid_set), now,
         pipeline))
    return Checkpoint(pipeline, position, gtid_set, consistent, batch_id, target,
                      target_gtid_set if target is not None else "",
                      now.replace(tzinfo=_dt.UTC))


def init_checkpoint(
    conn: Any, pipeline: str, position: Position, gtid_set: str = "",
    store: CheckpointStore = DEFAULT_STORE,
) -> Checkpoint:
    """Give ``pipeline`` a checkpoint at ``position`` (GTID set ``gtid_set``; consistent,
    batch 0) unless it has one already; returns the checkpoint as it stands."""
    table = quote_table(store.ref).replace("%", "%%")
    with conn.cursor() as cur:
        cur.execute(
            f"INSERT IGNORE INTO {table} (pipeline, relay_subdir, relay_log_name,"
            " relay_log_pos, gtid_set, master_log_name, master_log_pos, consistent, batch_id,"
            " updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, 1, 0, UTC_TIMESTAMP(6))",
            (pipeline, *_position_params(position, gtid_set), position.binlog_name,
             position.binlog_pos))
        found = _select(cur, pipeline, store)
    conn.commit()
    assert found is not None
    return found


def _under_lock(conn: Any, pipeline: str, store: CheckpointStore,
                step: Callable[[Any, Checkpoint, Any], Checkpoint | None]) -> Checkpoint:
    """``step(cursor, checkpoint, now)`` on the pipeline's locked checkpoint row, committed as
    one transaction (rolled back if it raises); ``step`` returns the checkpoint it wrote
    (stamped ``now``), or None when there is nothing to change.  Returns the checkpoint as
    committed."""
    try:
        with conn.cursor() as cur:
            current, now = _locked_now(cur, pipeline, store)
            updated = step(cur, current, now)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return current if updated is None else updated


def _not_newer(pipeline: str, batch_id: int, current: Checkpoint) -> CheckpointError:
    return CheckpointError(
        f"pipeline {pipeline!r}: batch {batch_id} is not after the last finished batch"
        f" {current.batch_id}", hint="batch ids must increase")


def mark_in_flight(
    conn: Any, pipeline: str, batch_id: int, target: Position, target_gtid_set: str = "",
    store: CheckpointStore = DEFAULT_STORE, *, start: Position | None = None,
) -> Checkpoint:
    """Record that batch ``batch_id`` (ending at ``target``, GTID set ``target_gtid_set``
    there) is being applied:
    ``consistent = 0``, committed. Call it before writing any data of the batch.

    Marking the batch already in flight again (same id and target) is a no-op: that is the
    replay of a crashed batch. Any other batch while one is in flight is refused, and so is
    a batch whose ``start`` (when given) is not the checkpoint's position: the caller's idea
    of the checkpoint is stale (another process of the same pipeline moved it).
    """
    def step(cur: Any, current: Checkpoint, now: Any) -> Checkpoint | None:
        if start is not None and current.position != start:
            raise CheckpointError(
                f"pipeline {pipeline!r}: the checkpoint is at {current.position}, not at"
                f" {start} where batch {batch_id} starts",
                hint="another sync of the same pipeline is running; run one per pipeline")
        if not current.consistent:
            if current.batch_id == batch_id and current.target == target \
                    and current.target_gtid_set == target_gtid_set:
                return None
            raise CheckpointError(
                f"pipeline {pipeline!r}: batch {current.batch_id} (to {current.target}) is"
                f" in flight; cannot start batch {batch_id}")
        if batch_id <= current.batch_id:
            raise _not_newer(pipeline, batch_id, current)
        return _write(cur, store, pipeline, current.position, current.gtid_set, False,
                      batch_id, target, target_gtid_set, now=now)

    return _under_lock(conn, pipeline, store, step)


def finish_batch(
    conn: Any, pipeline: str, batch_id: int, store: CheckpointStore = DEFAULT_STORE,
) -> Checkpoint:
    """Batch ``batch_id`` is fully applied: position = its target, ``consistent = 1``, and its
    task ledger rows go, all committed together. Finishing it twice is a no-op."""
    def step(cur: Any, current: Checkpoint, now: Any) -> Checkpoint | None:
        if current.consistent and current.batch_id == batch_id:
            return None
        if current.consistent or current.batch_id != batch_id or current.target is None:
            raise CheckpointError(
                f"pipeline {pipeline!r}: batch {batch_id} is not the batch in flight"
                f" (checkpoint: batch {current.batch_id},"
                f" {'consistent' if current.consistent else 'in flight'})")
        cur.execute(
            f"DELETE FROM {quote_table(store.task_ref).replace('%', '%%')}"
            " WHERE pipeline = %s AND batch_id <= %s", (pipeline, batch_id))
        return _write(cur, store, pipeline, current.target, current.target_gtid_set, True,
                      batch_id, None, now=now)

    return _under_lock(conn, pipeline, store, step)


def advance_in_transaction(cur: Any, update: CheckpointUpdate) -> bool:
    """Inside the caller's open transaction (strict mode, a driver's batch): lock the
    checkpoint row and check it. Returns False when it is already at ``update.after`` (this
    upstream transaction or batch was applied before: skip it); True when it is at
    ``update.before`` and has been moved to ``update.after`` (commit it with the data).
    Anything else is a CheckpointError."""
    current, now = _locked_now(cur, update.pipeline, update.store)
    if not current.consistent:
        raise CheckpointError(
            f"pipeline {update.pipeline!r}: batch {current.batch_id} is in flight; strict"
            " mode needs a consistent checkpoint")
    # Places, not GTID sets: the set is derived from the place, and comparing its text
    # would only add ways to disagree (set ordering, formatting).
    if current.position == update.after:
        return False
    if current.position != update.before:
        raise CheckpointError(
            f"pipeline {update.pipeline!r} is at {current.position}, not at {update.before}"
            " where this transaction starts",
            hint="apply transactions in relay order from the checkpoint's position")
    batch_id = current.batch_id if update.batch_id is None else update.batch_id
    if update.batch_id is not None and batch_id <= current.batch_id:
        raise _not_newer(update.pipeline, batch_id, current)
    _write(cur, update.store, update.pipeline, update.after, update.after_gtid_set, True,
           batch_id, None, now=now)
    return True


def advance_statement(update: CheckpointUpdate) -> tuple[str, tuple[Any, ...]]:
    """:func:`advance_in_transaction`'s move as one statement with its parameters, to send
    with the data in one round trip: it matches the row (1 row) only where that function
    would move it (consistent, at ``update.before``, a batch id below ``update.batch_id``)
    and moves it, stamped with the server's time; matching none, it changed nothing and
    :func:`advance_in_transaction` tells why."""
    before = update.before
    newer = "" if update.batch_id is None else " AND batch_id < %s"
    sql = (f"UPDATE {quote_table(update.store.ref).replace('%', '%%')} SET"
           f" {_position_sql('relay_')}, master_log_name = %s, master_log_pos = %s,"
           f" consistent = 1, batch_id = {'batch_id' if update.batch_id is None else '%s'},"
           f" {_position_sql('target_')}, updated_at = UTC_TIMESTAMP(6)"
           # (Bytes: the columns' collation pads, and a name with a space appended is not
           # the place advance_in_transaction compares.  MySQL 8 warns of BINARY x.)
           " WHERE pipeline = %s AND consistent = 1 AND CAST(relay_subdir AS BINARY) = %s"
           f" AND CAST(relay_log_name AS BINARY) = %s AND relay_log_pos = %s{newer}")
    batch = () if update.batch_id is None else (update.batch_id,)
    params = (*_position_params(update.after, update.after_gtid_set), update.after.binlog_name,
              update.after.binlog_pos, *batch, *_position_params(None, ""), update.pipeline,
              str(before.subdir), before.binlog_name, before.binlog_pos, *batch)
    return sql, params


#: How long a sync waits for its pipeline's lock while its holder runs no statement
#: (another sync of the same pipeline between two): a holder running one (a killed sync's
#: session finishing its DDL, as a replay would wait behind on the table's metadata lock)
#: is waited for as long as it runs.
LOCK_WAIT = 300.0
#: How often the wait says so again.
_LOCK_TELL_EVERY = 60.0


def lock_name(pipeline: str, store: CheckpointStore = DEFAULT_STORE) -> str:
    """The pipeline's lock's name: within the 64 characters a server allows, whatever the
    pipeline's and the store's names."""
    digest = hashlib.sha256(f"{store.schema}\0{store.table}\0{pipeline}".encode()).hexdigest()
    return "binrelay." + digest[:40]


@contextlib.contextmanager
def pipeline_lock(conn: Any, pipeline: str, store: CheckpointStore = DEFAULT_STORE, *,
                  wait: float = LOCK_WAIT) -> Iterator[bool]:
    """The pipeline's named lock (``GET_LOCK``) on ``conn``, held while a batch is replayed
    in order on it.  A sync killed in the middle of a script of DDL leaves its session
    running the rest of the script on the server; that session ends, and lets go of the
    lock, only once the script has run, so the next sync's replay waits for it rather than
    run DDL beside it.  Released when the block ends normally; when it raises, the caller
    closes the connection, which releases it.

    Yields whether the lock is held: not on a server without user locks (a Galera node
    refuses ``GET_LOCK``), where the caller sends no script that could outlive it."""
    held = _take_lock(conn, pipeline, lock_name(pipeline, store), wait)
    yield held
    if held:
        with conn.cursor() as cur:
            cur.execute("DO RELEASE_LOCK(%s)", (lock_name(pipeline, store),))


def _take_lock(conn: Any, pipeline: str, name: str, wait: float) -> bool:
    idle_since = told = None
    with conn.cursor() as cur:
        while True:
            try:
                cur.execute("SELECT GET_LOCK(%s, %s)", (name, 0 if told is None else 1))
            except pymysql.MySQLError as exc:
                if errno_of(exc) != _NOT_SUPPORTED:
                    raise
                log.debug("the downstream has no user locks: DDL go one at a time",
                          extra={"pipeline": pipeline})
                return False
            if cur.fetchone()[0] == 1:
                return True
            cur.execute("SELECT w.id, p.COMMAND, p.TIME, LEFT(p.INFO, 80) FROM"
                        " (SELECT IS_USED_LOCK(%s) AS id) AS w LEFT JOIN"
                        " information_schema.PROCESSLIST AS p ON p.ID = w.id", (name,))
            holder, command, seconds, info = cur.fetchone()
            now = time.monotonic()
            if command == "Query":
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= wait:
                raise CheckpointError(
                    f"pipeline {pipeline!r}: downstream connection {holder} has held the"
                    f" pipeline's lock for {wait:.0f} s without running a statement"
                    " (another sync of this pipeline runs)",
                    hint=f"stop the other sync (or KILL connection {holder} on the"
                         " downstream); then start the sync again")
            if told is None or now - told >= _LOCK_TELL_EVERY:
                told = now
                log.warning(
                    "waiting for the pipeline's lock: downstream connection %s holds it (%s)",
                    holder, f"running for {seconds} s: {info}" if command == "Query"
                    else "another sync of this pipeline, or a killed one's session",
                    extra={"pipeline": pipeline, "connection": holder})


#: ER_NOT_SUPPORTED_YET: what a Galera node answers ``GET_LOCK``.
_NOT_SUPPORTED = 1235
