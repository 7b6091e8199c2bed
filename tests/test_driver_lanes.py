"""A batch of rows the driver applies itself, written by ``[sync] tasks`` connections at once
(``tasks.apply_spread``): the same records, ledger claims and checkpoint marks as a Spark
batch, so the same repair after a crash; a batch with a table to replay in order stays one
transaction with its checkpoint.  Real servers; the size threshold is set to 0 so that the
tests' small batches take the path a catch-up's 16 MiB ones take."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from binrelay.apply.checkpoint import read_checkpoint
from binrelay.spark import sync as sync_module
from binrelay.spark import tasks as tasks_module
from binrelay.spark.compact import record_table
from fidelity import SimulatedCrash, assert_converged, make_env, sync_with_crashes

SCHEMA = "CREATE DATABASE app"
TABLES = [
    "CREATE TABLE app.a (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
    "CREATE TABLE app.b (id BIGINT PRIMARY KEY, code INT, UNIQUE KEY (code))",
    "CREATE TABLE app.c (id INT NOT NULL, r INT NOT NULL, v INT, PRIMARY KEY (id, r))",
    # No key: replayed in relay order, by one of the connections.
    "CREATE TABLE app.nokey (v INT)",
]
#: The driver applies every batch of rows (Spark is up: only this makes it).
DRIVER = {"driver-batch-bytes": 1 << 30, "tasks": 4, "batch-bytes": 256 << 10}


def workload(rounds: int = 6) -> list[str]:
    steps = []
    for r in range(rounds):
        base = r * 3000
        steps += [
            "INSERT INTO app.a VALUES " + ", ".join(
                f"({base + i}, 'v{i}', {i})" for i in range(3000)),
            f"UPDATE app.a SET n = n + 1 WHERE id % 7 = {r % 7}",
            f"UPDATE app.a SET id = id + 100000 WHERE id BETWEEN {base} AND {base + 99}",
            f"DELETE FROM app.a WHERE id % 11 = {r % 11}",
            "INSERT INTO app.b VALUES " + ", ".join(
                f"({base + i}, {base + i})" for i in range(1000)),
            # A unique key value moves between rows (deletes before writes, one statement).
            f"UPDATE app.b SET code = -code WHERE id BETWEEN {base} AND {base + 50}",
            "INSERT INTO app.c VALUES " + ", ".join(
                f"({i}, {r}, {i * r})" for i in range(500)),
            f"DELETE FROM app.c WHERE r = {r} AND id % 5 = 0",
            "INSERT INTO app.nokey VALUES " + ", ".join(f"({i})" for i in range(50)),
            f"DELETE FROM app.nokey WHERE v = {r}",
        ]
    return steps


@pytest.fixture
def spread(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int, set[str]]]:
    """Every driver batch of rows takes the several-connection path; what it ran:
    ``(batch, apply task, thread, tables)`` per apply task."""
    monkeypatch.setattr(sync_module, "_SPREAD_BYTES", 0)
    calls: list[tuple[int, int, int, set[str]]] = []
    real = tasks_module.apply_records

    def spied(ctx: Any, index: int, records: Any) -> Any:
        records = list(records)
        tables = {str(t) for t in map(record_table, records) if t is not None}
        calls.append((ctx.batch_id, index, threading.get_ident(), tables))
        yield from real(ctx, index, iter(records))

    monkeypatch.setattr(tasks_module, "apply_records", spied)
    return calls


def _ledger(env: Any) -> int:
    return env.downstream.execute("SELECT COUNT(*) FROM binrelay.checkpoint_task")[0][0]


def test_a_driver_batch_is_written_by_the_tasks_connections(
        mariadb_factory, tmp_path: Path, spark, spread) -> None:
    env = make_env(mariadb_factory, tmp_path, sync=DRIVER)
    env.run([SCHEMA, *TABLES, *workload()])
    env.relay()
    stats = env.sync(spark)
    assert_converged(env)
    assert stats.batches > 1
    by_batch: dict[int, set[tuple[int, int]]] = {}
    for batch, index, thread, _tables in spread:
        by_batch.setdefault(batch, set()).add((index, thread))
    # Every batch of rows: all four apply tasks, on threads of a pool (one that finishes
    # before the next is handed out may hand its thread on).
    assert by_batch and all({i for i, _t in runs} == {0, 1, 2, 3}
                            for runs in by_batch.values())
    assert max(len({t for _i, t in runs}) for runs in by_batch.values()) > 1
    assert _ledger(env) == 0  # the checkpoint's move took the batch's claims


def test_a_crash_before_the_checkpoint_moves_is_repaired(
        mariadb_factory, tmp_path: Path, spark, spread, monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path, sync=DRIVER)
    env.run([SCHEMA, *TABLES, *workload()])
    env.relay()
    # Every batch crashes once with all its connections committed, then is replayed.
    assert sync_with_crashes(env, spark, monkeypatch) >= 2
    assert_converged(env)


def test_a_connection_that_fails_leaves_the_batch_in_flight_for_the_next_run(
        mariadb_factory, tmp_path: Path, spark, spread, monkeypatch) -> None:
    """One apply task fails after the others committed: the run stops with the batch in
    flight (``consistent = 0``), and the next run replays it, the committed tasks skipped by
    their ledger claims."""
    env = make_env(mariadb_factory, tmp_path, sync=DRIVER)
    env.run([SCHEMA, *TABLES, *workload(3)])
    env.relay()
    real = tasks_module.apply_records
    done: list[int] = []

    def failing(ctx: Any, index: int, records: Any) -> Any:
        if index == 2 and ctx.batch_id >= 2:
            records = list(records)
            raise SimulatedCrash(ctx.batch_id)
        result = list(real(ctx, index, records))
        done.append(index)
        yield from result

    monkeypatch.setattr(tasks_module, "apply_records", failing)
    with pytest.raises(SimulatedCrash):
        env.sync(spark)
    conn = env.downstream.connect()
    try:
        cp = read_checkpoint(conn, "sync")
    finally:
        conn.close()
    assert cp is not None and not cp.consistent and cp.batch_id >= 2
    assert {0, 1, 3} <= set(done)
    assert _ledger(env) >= 3  # the other tasks' claims
    monkeypatch.setattr(tasks_module, "apply_records", real)
    env.sync(spark)
    assert_converged(env)
    assert _ledger(env) == 0


def test_keys_a_collation_folds_together_are_replayed_in_order_by_one_connection(
        mariadb_factory, tmp_path: Path, spark, spread) -> None:
    """Keys a collation may take for one row ('a' and 'A' under latin1_swedish_ci), which
    only the whole batch shows: their table is decoded again and replayed in relay order,
    whole, by one of the connections (as Spark's second job does); the rest as usual."""
    env = make_env(mariadb_factory, tmp_path, sync=DRIVER)
    env.run([SCHEMA, "CREATE TABLE app.t (k VARCHAR(10) PRIMARY KEY, n INT)",
             "CREATE TABLE app.a (id INT PRIMARY KEY, v INT)",
             "INSERT INTO app.a VALUES " + ", ".join(f"({i}, {i})" for i in range(2000)),
             "INSERT INTO app.t VALUES ('a', 1), ('B', 2), ('c', 3)",
             "UPDATE app.t SET k = 'A' WHERE k = 'a'",
             "DELETE FROM app.t WHERE k = 'B'",
             "INSERT INTO app.t VALUES ('b', 4)",
             "UPDATE app.t SET k = 'a', n = 5 WHERE k = 'A'",
             "UPDATE app.a SET v = v + 1 WHERE id % 3 = 0"])
    env.relay()
    env.sync(spark)
    assert_converged(env)
    with_t = [(batch, index) for batch, index, _thread, tables in spread if "app.t" in tables]
    assert with_t and len({batch for batch, _i in with_t}) == len(with_t)
    assert any("app.a" in tables for *_run, tables in spread)


def test_tables_with_a_counter_are_loaded_in_turns(
        mariadb_factory, tmp_path: Path, spark, spread, monkeypatch) -> None:
    """Four tables with an AUTO_INCREMENT key (the sandbox at lock mode 1): each apply task
    is told its place among the batch's tasks, so that each starts loading another table
    (``applier._turns``); what they leave is what the upstream has, the counters too."""
    env = make_env(mariadb_factory, tmp_path, sync=DRIVER)
    counted = [f"CREATE TABLE app.q{i} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20),"
               " n INT NOT NULL)" for i in range(4)]
    steps = []
    for r in range(30):
        # The four tables alike in every batch, as a multi-threaded bulk load leaves them.
        steps += [f"INSERT INTO app.q{i} (v, n) VALUES " + ", ".join(
                      f"('v{r}-{k}', {k})" for k in range(200)) for i in range(4)]
        steps += [f"UPDATE app.q{i} SET n = n + 1 WHERE id % 50 = {r}" for i in range(4)]
    env.run([SCHEMA, *counted, *steps])
    env.relay()
    real = tasks_module.apply_plan_part
    lanes: set[tuple[int, int]] = set()

    def spied(conn: Any, part: Any, **kwargs: Any) -> Any:
        lanes.add(kwargs["lane"])
        return real(conn, part, **kwargs)

    monkeypatch.setattr(tasks_module, "apply_plan_part", spied)
    loads = int(env.downstream.execute("SHOW GLOBAL STATUS LIKE 'Com_load'")[0][1])
    env.sync(spark)
    assert_converged(env)
    assert lanes == {(i, 4) for i in range(4)}
    assert int(env.downstream.execute("SHOW GLOBAL STATUS LIKE 'Com_load'")[0][1]) > loads
    for i in range(4):
        counter = "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE" \
            f" TABLE_SCHEMA = 'app' AND TABLE_NAME = 'q{i}'"
        assert env.downstream.execute(counter) == env.upstream.execute(counter)
