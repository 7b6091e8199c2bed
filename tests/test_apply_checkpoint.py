"""The checkpoint table, strict mode, and what the applier says when the downstream says no."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binrelay.apply import (
    INSERT,
    UPDATE,
    Change,
    CheckpointStore,
    CheckpointUpdate,
    Downstream,
    TableRef,
    TaskLedger,
    applier,
    apply_parts_with_checkpoint,
    apply_plan_part,
    apply_transaction,
    create_checkpoint_table,
    finish_batch,
    init_checkpoint,
    mark_in_flight,
    plan_batch,
    read_checkpoint,
)
from binrelay.apply.plan import KEY_BLOCK_BITS
from binrelay.errors import (
    ApplyError,
    CheckpointError,
    DownstreamAuthError,
    DownstreamConnectionError,
    DownstreamRowError,
    DownstreamSchemaError,
    UnfaithfulApplyError,
)
from binrelay.position import Position, SubdirName
from binrelay.testing.sandbox import MariaDBServer, ServerFactory, find_free_port

STORE = CheckpointStore("br`ckpt")
SUB = SubdirName.parse("0-1.000001")
#: A partition for v < 1000 only (v must be in every unique key): a row with a larger v is
#: refused (error 1526) whatever the session's checks (an applier, as a replica, stores rows
#: that break a CHECK constraint: test_fidelity).
SMALL_V = " PARTITION BY RANGE (v) (PARTITION p VALUES LESS THAN (1000))"
P0, G0 = Position(SUB, "mysql-bin.000001", 4), "0-1-0"
P1, G1 = Position(SUB, "mysql-bin.000001", 1200), "0-1-5"
P2, G2 = Position(SUB, "mysql-bin.000002", 350), "0-1-9"


@pytest.fixture(scope="module")
def server(mariadb_template: Path, mariadb_socket_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    factory = ServerFactory(tmp_path_factory.mktemp("apply-ckpt"), template=mariadb_template,
                            socket_dir=mariadb_socket_dir)
    try:
        yield factory(server_id=1, extra_args=["--skip-log-bin"])
    finally:
        factory.close()


@pytest.fixture
def target(server: MariaDBServer) -> Downstream:
    return Downstream(server.host, server.port)


@pytest.fixture
def conn(target: Downstream) -> Iterator[Any]:
    connection = target.connect()
    create_checkpoint_table(connection, STORE)
    try:
        yield connection
    finally:
        connection.close()


def _fresh_read(target: Downstream, pipeline: str) -> Any:
    """What another process would see: a new connection, committed data only."""
    with contextlib.closing(target.connect()) as other:
        return read_checkpoint(other, pipeline, STORE)


def _rows(server: MariaDBServer, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in server.execute(sql)]


# ---- the checkpoint table ---------------------------------------------------------------------


def test_create_is_idempotent_and_transactional(conn: Any, server: MariaDBServer) -> None:
    create_checkpoint_table(conn, STORE)
    engines = _rows(server, "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES"
                            " WHERE TABLE_SCHEMA = 'br`ckpt' ORDER BY 1")
    assert engines == [("checkpoint", "InnoDB"), ("checkpoint_task", "InnoDB")]
    server.execute("CREATE DATABASE myisam_ckpt")
    server.execute("CREATE TABLE myisam_ckpt.checkpoint (pipeline INT) ENGINE=MyISAM")
    with pytest.raises(CheckpointError, match="MyISAM"):
        create_checkpoint_table(conn, CheckpointStore("myisam_ckpt"))


def test_batch_lifecycle_and_crash(conn: Any, target: Downstream, server: MariaDBServer
                                   ) -> None:
    server.execute("CREATE DATABASE IF NOT EXISTS app")
    server.execute("CREATE TABLE app.t (id INT PRIMARY KEY, v INT)")
    assert read_checkpoint(conn, "life", STORE) is None
    first = init_checkpoint(conn, "life", P0, G0, STORE)
    assert (first.position, first.gtid_set, first.consistent, first.batch_id, first.target,
            first.target_gtid_set) == (P0, G0, True, 0, None, "")
    assert init_checkpoint(conn, "life", P1, G1, STORE) == first  # never moves an existing one
    assert first.updated_at.tzinfo is dt.UTC
    assert abs(dt.datetime.now(dt.UTC) - first.updated_at) < dt.timedelta(minutes=5)

    # A process marks batch 1 in flight, writes some data, and dies before finishing.
    doomed = target.connect()
    mark_in_flight(doomed, "life", 1, P1, G1, STORE)
    seen = _fresh_read(target, "life")
    assert (seen.consistent, seen.batch_id, seen.position, seen.gtid_set, seen.target,
            seen.target_gtid_set) == (False, 1, P0, G0, P1, G1)
    ledger = TaskLedger("life", 1, STORE)
    ref = TableRef("app", "t")
    # Keys a block apart: a block of neighbouring keys goes to one task.
    ids = [i << KEY_BLOCK_BITS for i in range(6)]
    changes = [Change(ref, INSERT, ("id", "v"), (0,), None, (k, i), (1, i))
               for i, k in enumerate(ids)]
    parts = plan_batch(changes).parts(2)
    assert len(parts) == 2
    assert apply_plan_part(doomed, parts[0], ledger=ledger)
    with doomed.cursor() as cur:  # the second task is cut off mid-transaction
        cur.execute("INSERT INTO app.t VALUES (100, 100)")
    doomed.close()
    crashed = _fresh_read(target, "life")
    assert (crashed.consistent, crashed.position, crashed.target) == (False, P0, P1)
    assert (100,) not in _rows(server, "SELECT id FROM app.t")

    # Recovery: the same batch again (mark is a no-op), every task, finish.
    with pytest.raises(CheckpointError, match=r"batch 1 .* is in flight"):
        mark_in_flight(conn, "life", 2, P2, G2, STORE)
    assert mark_in_flight(conn, "life", 1, P1, G1, STORE).target == P1
    with pytest.raises(CheckpointError, match=r"batch 1 .* is in flight"):  # not the same end
        mark_in_flight(conn, "life", 1, P1, G2, STORE)
    assert [apply_plan_part(conn, p, ledger=ledger) for p in parts] == [False, True]
    done = finish_batch(conn, "life", 1, STORE)
    assert (done.consistent, done.position, done.gtid_set, done.target, done.target_gtid_set,
            done.batch_id) == (True, P1, G1, None, "", 1)
    assert _fresh_read(target, "life") == done
    assert finish_batch(conn, "life", 1, STORE) == done  # twice: a no-op
    assert _rows(server, "SELECT COUNT(*) FROM `br``ckpt`.checkpoint_task") == [(0,)]
    assert _rows(server, "SELECT id FROM app.t ORDER BY id") == [(k,) for k in ids]
    assert _rows(server, "SELECT master_log_name, master_log_pos FROM `br``ckpt`.checkpoint"
                         " WHERE pipeline = 'life'") == [("mysql-bin.000001", 1200)]

    with pytest.raises(CheckpointError, match="not after the last finished"):
        mark_in_flight(conn, "life", 1, P2, G2, STORE)
    with pytest.raises(CheckpointError, match="not the batch in flight"):
        finish_batch(conn, "life", 2, STORE)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        mark_in_flight(conn, "nobody", 1, P1, G1, STORE)
    # A process whose idea of the checkpoint is stale (another sync moved it) is refused.
    with pytest.raises(CheckpointError, match="another sync of the same pipeline"):
        mark_in_flight(conn, "life", 2, P2, G2, STORE, start=P0)
    assert mark_in_flight(conn, "life", 2, P2, G2, STORE, start=P1).target == P2


# ---- a driver's batch: data and checkpoint in one transaction ---------------------------------


def test_driver_batch_moves_the_checkpoint_with_its_data(conn: Any, target: Downstream,
                                                         server: MariaDBServer) -> None:
    server.execute("CREATE DATABASE IF NOT EXISTS app")
    server.execute("CREATE TABLE app.k (id INT, v INT, PRIMARY KEY (id, v))" + SMALL_V)
    server.execute("CREATE TABLE app.nokey (x INT, y INT)")
    keyed, keyless = TableRef("app", "k"), TableRef("app", "nokey")
    init_checkpoint(conn, "drv", P0, G0, STORE)
    first = [Change(keyed, INSERT, ("id", "v"), (0,), None, (i, i), (1, i)) for i in range(3)]
    first += [Change(keyless, INSERT, ("x", "y"), (), None, (7, 7), (1, 9)),
              Change(keyless, INSERT, ("x", "y"), (), None, (7, 7), (1, 10))]
    parts = plan_batch(first, ordered_tables={keyless}).parts(1)
    assert len(parts) == 2  # the keyed part, and the keyless table in relay order
    assert apply_parts_with_checkpoint(conn, parts, CheckpointUpdate("drv", P0, P1, G1, STORE, 1))
    seen = _fresh_read(target, "drv")
    assert (seen.consistent, seen.position, seen.gtid_set, seen.batch_id, seen.target) == (
        True, P1, G1, 1, None)
    # Run again (a sync that died before it learned of the commit): nothing doubled.
    assert not apply_parts_with_checkpoint(conn, parts,
                                           CheckpointUpdate("drv", P0, P1, G1, STORE, 1))
    assert _rows(server, "SELECT x, y FROM app.nokey") == [(7, 7), (7, 7)]
    assert _rows(server, "SELECT COUNT(*) FROM `br``ckpt`.checkpoint_task") == [(0,)]

    # A row the downstream refuses: neither the batch's other rows nor the checkpoint move.
    bad = [Change(keyed, INSERT, ("id", "v"), (0,), None, (5, 5), (2, 0)),
           Change(keyed, INSERT, ("id", "v"), (0,), None, (6, 5000), (2, 1)),
           Change(keyless, INSERT, ("x", "y"), (), None, (8, 8), (2, 2))]
    bad_parts = plan_batch(bad, ordered_tables={keyless}).parts(1)
    with pytest.raises(DownstreamRowError, match=r"app\.k"):
        apply_parts_with_checkpoint(conn, bad_parts, CheckpointUpdate("drv", P1, P2, G2, STORE, 2))
    assert _rows(server, "SELECT id FROM app.k ORDER BY id") == [(0,), (1,), (2,)]
    assert _rows(server, "SELECT COUNT(*) FROM app.nokey") == [(2,)]
    assert _fresh_read(target, "drv").position == P1
    # Not where the checkpoint stands, or not a newer batch: refused, nothing written.
    with pytest.raises(CheckpointError, match="not at"):
        apply_parts_with_checkpoint(conn, parts, CheckpointUpdate("drv", P0, P2, G2, STORE, 2))
    with pytest.raises(CheckpointError, match="not after the last finished"):
        apply_parts_with_checkpoint(conn, parts, CheckpointUpdate("drv", P1, P2, G2, STORE, 1))
    # Nor while another batch is in flight.
    mark_in_flight(conn, "drv", 2, P2, G2, STORE, start=P1)
    with pytest.raises(CheckpointError, match="in flight"):
        apply_parts_with_checkpoint(conn, parts, CheckpointUpdate("drv", P1, P2, G2, STORE, 3))
    assert _rows(server, "SELECT COUNT(*) FROM app.nokey") == [(2,)]


# ---- strict mode ------------------------------------------------------------------------------


def test_a_batch_of_keyed_rows_goes_in_one_script(target: Downstream, server: MariaDBServer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """On a connection that runs scripts, a batch of keyed rows and the checkpoint's move
    are one round trip; whatever that script meets that the ordinary way would stop on or
    look into (the checkpoint elsewhere, a row refused, a warning) has the batch rolled back
    and run again the ordinary way, which answers as it always has."""
    scripts: list[list[tuple[int, int]]] = []
    counted = applier.script_counts

    def spied(cur: Any, statements: Any) -> list[tuple[int, int]]:
        counts = counted(cur, statements)
        scripts.append(counts)
        return counts

    monkeypatch.setattr(applier, "script_counts", spied)
    ordinary: list[str] = []
    guarded = applier._guarded

    def the_ordinary_way(*args: Any, **kwargs: Any) -> bool:
        ordinary.append(kwargs["action"])
        return guarded(*args, **kwargs)

    monkeypatch.setattr(applier, "_guarded", the_ordinary_way)
    server.execute("CREATE DATABASE IF NOT EXISTS app")
    server.execute("CREATE TABLE app.o (id INT, v INT, s SMALLINT, e ENUM('a', 'b'), w TEXT,"
                   " PRIMARY KEY (id, v))" + SMALL_V)
    ref, cols = TableRef("app", "o"), ("id", "v", "s", "e", "w")
    conn = replace(target, scripts=True).connect()
    create_checkpoint_table(conn, STORE)
    init_checkpoint(conn, "one", P0, G0, STORE)

    def batch(*rows: tuple[Any, ...], at: int = 1) -> list[Any]:
        return plan_batch([Change(ref, INSERT, cols, (0, 1), None, row, (at, i))
                           for i, row in enumerate(rows)]).parts(1)

    def there() -> list[tuple[Any, ...]]:
        return _rows(server, "SELECT id, v, s, e, w FROM app.o ORDER BY id")

    try:
        first = batch(*[(i, i, 1, "a", "x") for i in range(5)])
        assert apply_parts_with_checkpoint(conn, first,
                                           CheckpointUpdate("one", P0, P1, G1, STORE, 1))
        assert len(scripts) == 1 and scripts[-1][0] == (1, 0) and not ordinary
        seen = _fresh_read(target, "one")
        assert (seen.consistent, seen.position, seen.gtid_set, seen.batch_id) == (
            True, P1, G1, 1)
        assert there() == [(i, i, 1, "a", "x") for i in range(5)]
        # Again (a sync that died before it learned of the commit): the move matches no
        # row, and the ordinary way says the batch was applied before.
        assert not apply_parts_with_checkpoint(conn, first,
                                               CheckpointUpdate("one", P0, P1, G1, STORE, 1))
        assert scripts[-1][0] == (0, 0) and _fresh_read(target, "one").batch_id == 1
        assert len(ordinary) == 1
        # A value the downstream would store otherwise (out of SMALLINT's range: a warning
        # in the replica's lenient mode): not committed, told as ever.
        with pytest.raises(UnfaithfulApplyError, match=r"Out of range.*table app\.o"):
            apply_parts_with_checkpoint(conn, batch((9, 9, 40000, "a", "x"), at=2),
                                        CheckpointUpdate("one", P1, P2, G2, STORE, 2))
        assert scripts[-1][1][1] > 0
        # A row the downstream refuses (no partition for it): the script stops there.
        refused = batch((7, 7, 1, "b", "y"), (8, 5000, 1, "a", "x"), at=2)
        with pytest.raises(DownstreamRowError, match=r"table app\.o, position 2\.1"):
            apply_parts_with_checkpoint(conn, refused,
                                        CheckpointUpdate("one", P1, P2, G2, STORE, 2))
        assert there() == [(i, i, 1, "a", "x") for i in range(5)]
        assert _fresh_read(target, "one").position == P1
        # Not where the checkpoint stands, not a newer batch, another batch in flight.
        good = batch((7, 7, 1, "b", "y"), at=2)
        with pytest.raises(CheckpointError, match="not at"):
            apply_parts_with_checkpoint(conn, good, CheckpointUpdate("one", P0, P2, G2, STORE, 2))
        with pytest.raises(CheckpointError, match="not after the last finished"):
            apply_parts_with_checkpoint(conn, good, CheckpointUpdate("one", P1, P2, G2, STORE, 1))
        with contextlib.closing(target.connect()) as other:
            mark_in_flight(other, "one", 5, P2, G2, STORE, start=P1)
            with pytest.raises(CheckpointError, match="in flight"):
                apply_parts_with_checkpoint(conn, good,
                                            CheckpointUpdate("one", P1, P2, G2, STORE, 6))
            server.execute("UPDATE `br``ckpt`.checkpoint SET consistent = 1, batch_id = 1,"
                           " target_subdir = NULL, target_log_name = NULL,"
                           " target_log_pos = NULL WHERE pipeline = 'one'")
        # A checkpoint row naming its place with a space appended (not binrelay's): the
        # column's collation would take it for the place, the ordinary way refuses it.
        server.execute("UPDATE `br``ckpt`.checkpoint SET relay_log_name ="
                       " CONCAT(relay_log_name, ' ') WHERE pipeline = 'one'")
        with pytest.raises(CheckpointError, match="holds"):
            apply_parts_with_checkpoint(conn, good, CheckpointUpdate("one", P1, P2, G2, STORE, 2))
        server.execute("UPDATE `br``ckpt`.checkpoint SET relay_log_name ="
                       " TRIM(relay_log_name) WHERE pipeline = 'one'")
        assert there() == [(i, i, 1, "a", "x") for i in range(5)]
        # An ENUM's error value, stored upstream as it is (a warning the ordinary way looks
        # into and takes): committed the ordinary way.
        with_error_value = batch((7, 7, 1, "", "y"), at=2)
        assert apply_parts_with_checkpoint(conn, with_error_value,
                                           CheckpointUpdate("one", P1, P2, G2, STORE, 2))
        assert scripts[-1][1][1] > 0 and there()[-1] == (7, 7, 1, "", "y")
        assert _fresh_read(target, "one").position == P2
        # A script bigger than one statement may be goes the ordinary way; one whose
        # characters could be but whose bytes are not, too.
        calls = len(scripts)
        p3, p4 = (Position(SUB, "mysql-bin.000002", n) for n in (900, 1900))
        big = batch(*[(10 + i, i, 1, "a", "z" * 1000) for i in range(10)], at=3)
        assert apply_parts_with_checkpoint(
            conn, big, CheckpointUpdate("one", P2, p3, G2, STORE, 3), max_packet=70_000)
        assert len(scripts) == calls and len(there()) == 16
        wide = batch(*[(30 + i, i, 1, "a", "\u00e9" * 500) for i in range(5)], at=4)
        assert apply_parts_with_checkpoint(
            conn, wide, CheckpointUpdate("one", p3, p4, G2, STORE, 4), max_packet=70_000)
        assert len(scripts) == calls and len(there()) == 21
    finally:
        conn.close()

def test_strict_mode_data_and_position_commit_together(conn: Any, server: MariaDBServer
                                                        ) -> None:
    server.execute("CREATE DATABASE IF NOT EXISTS app")
    server.execute("CREATE TABLE app.s (id INT, v INT, PRIMARY KEY (id, v))" + SMALL_V)
    ref = TableRef("app", "s")
    cols = ("id", "v")
    init_checkpoint(conn, "strict", P0, G0, STORE)
    txn1 = [Change(ref, INSERT, cols, (0,), None, (1, 10), (1, 0)),
            Change(ref, INSERT, cols, (0,), None, (2, 20), (1, 1))]
    assert apply_transaction(conn, txn1, CheckpointUpdate("strict", P0, P1, G1, STORE))
    # Replayed after a crash that happened after the commit: skipped, not doubled.
    assert not apply_transaction(conn, txn1, CheckpointUpdate("strict", P0, P1, G1, STORE))
    moved = read_checkpoint(conn, "strict", STORE)
    assert (moved.position, moved.gtid_set) == (P1, G1)

    bad = [Change(ref, UPDATE, cols, (0,), (1, 10), (1, 11), (2, 0)),
           Change(ref, UPDATE, cols, (0,), (2, 20), (2, 5000), (2, 1))]
    with pytest.raises(DownstreamRowError) as info:
        apply_transaction(conn, bad, CheckpointUpdate("strict", P1, P2, G2, STORE))
    assert "app.s" in str(info.value) and "position 2.1" in str(info.value)
    assert _rows(server, "SELECT id, v FROM app.s ORDER BY id") == [(1, 10), (2, 20)]
    assert read_checkpoint(conn, "strict", STORE).position == P1

    with pytest.raises(CheckpointError, match="not at"):
        apply_transaction(conn, txn1, CheckpointUpdate("strict", P2, P2, G2, STORE))
    # An update whose row is not there: the downstream diverged, say so.
    ghost = [Change(ref, UPDATE, cols, (0,), (9, 9), (9, 10), (3, 0))]
    with pytest.raises(DownstreamRowError, match="diverged"):
        apply_transaction(conn, ghost, CheckpointUpdate("strict", P1, P2, G2, STORE))
    assert read_checkpoint(conn, "strict", STORE).position == P1


# ---- bad input --------------------------------------------------------------------------------


def test_a_checkpoint_row_not_naming_a_position_is_refused(conn: Any, server: MariaDBServer
                                                           ) -> None:
    init_checkpoint(conn, "mangled", P0, G0, STORE)
    server.execute("UPDATE `br``ckpt`.checkpoint SET relay_subdir = 'no-sequence'"
                   " WHERE pipeline = 'mangled'")
    with pytest.raises(CheckpointError, match=r"'mangled'.*'no-sequence' is not a relay subdir"):
        read_checkpoint(conn, "mangled", STORE)


def test_unreachable_downstream() -> None:
    port = find_free_port()
    with pytest.raises(DownstreamConnectionError) as info:
        Downstream("127.0.0.1", port, "root", "pw-not-to-show", connect_timeout=2).connect()
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "pw-not-to-show" not in text
    assert "\n" not in text and info.value.retryable and text.startswith("[BR5102]")


def test_wrong_password(server: MariaDBServer) -> None:
    server.execute("CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'right-pw'")
    with pytest.raises(DownstreamAuthError) as info:
        Downstream(server.host, server.port, "app", "wrong-pw-123").connect()
    text = str(info.value)
    assert "Access denied" in text and "wrong-pw-123" not in text and "right-pw" not in text
    assert info.value.errno == 1045 and not info.value.retryable and "\n" not in text
    # A user without write privileges: an auth error too, naming the table.
    conn = Downstream(server.host, server.port, "app", "right-pw").connect()
    try:
        part = plan_batch([Change(TableRef("app", "t"), INSERT, ("id", "v"), (0,), None,
                                  (1, 1), (5, 5))]).parts(1)[0]
        with pytest.raises(DownstreamAuthError, match=r"app\.t"):
            apply_plan_part(conn, part)
    finally:
        conn.close()


def test_constraint_violation_names_table_and_position(conn: Any, server: MariaDBServer
                                                       ) -> None:
    """The downstream has partitions and a NOT NULL the upstream did not: the batch fails
    with the table and the position of the offending row, nothing of its task stays, and the
    checkpoint does not move."""
    server.execute("CREATE DATABASE IF NOT EXISTS app")
    server.execute("CREATE TABLE app.c (id INT, v INT, w VARCHAR(5) NOT NULL,"
                   " PRIMARY KEY (id, v))" + SMALL_V)
    server.execute("CREATE TABLE app.n (x INT NOT NULL, y INT)")
    init_checkpoint(conn, "bad", P0, G0, STORE)
    mark_in_flight(conn, "bad", 1, P1, G1, STORE)
    ledger = TaskLedger("bad", 1, STORE)
    ref = TableRef("app", "c")
    cols = ("id", "v", "w")
    changes = [Change(ref, INSERT, cols, (0,), None, (i, i, "ok"), (7, i)) for i in range(50)]
    changes[31] = Change(ref, INSERT, cols, (0,), None, (31, 5000, "ok"), (7, 31))
    (part,) = plan_batch(changes).parts(1)
    with pytest.raises(DownstreamRowError) as info:
        apply_plan_part(conn, part, ledger=ledger)
    text = str(info.value)
    assert "table app.c" in text and "position 7.31" in text and "partition" in text
    assert "\n" not in text and info.value.errno == 1526
    assert _rows(server, "SELECT COUNT(*) FROM app.c") == [(0,)]
    assert _rows(server, "SELECT COUNT(*) FROM `br``ckpt`.checkpoint_task") == [(0,)]

    nulls = [Change(ref, INSERT, cols, (0,), None, (1, 1, None), (8, 0))]
    with pytest.raises(DownstreamRowError, match=r"cannot be null .*position 8\.0"):
        apply_plan_part(conn, plan_batch(nulls).parts(1)[0], ledger=ledger)
    keyless = [Change(TableRef("app", "n"), INSERT, ("x", "y"), (), None, (1, 1), (9, 0)),
               Change(TableRef("app", "n"), INSERT, ("x", "y"), (), None, (None, 1), (9, 1))]
    with pytest.raises(DownstreamRowError, match=r"table app\.n, position 9\.1"):
        apply_plan_part(conn, plan_batch(keyless).parts(1)[0], ledger=ledger)
    assert _rows(server, "SELECT COUNT(*) FROM app.n") == [(0,)]

    missing = [Change(TableRef("app", "gone"), INSERT, ("id",), (0,), None, (1,), (10, 0))]
    with pytest.raises(DownstreamSchemaError, match=r"app\.gone.*position 10\.0"):
        apply_plan_part(conn, plan_batch(missing).parts(1)[0])

    after = read_checkpoint(conn, "bad", STORE)
    assert (after.position, after.consistent, after.batch_id) == (P0, False, 1)


def test_lost_connection_is_retryable(conn: Any, target: Downstream, server: MariaDBServer
                                      ) -> None:
    victim = target.connect()
    with victim.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        (victim_id,) = cur.fetchone()
    victim.commit()
    server.execute(f"KILL {int(victim_id)}")
    part = plan_batch([Change(TableRef("app", "t"), INSERT, ("id", "v"), (0,), None,
                              (77, 1), (11, 0))]).parts(1)[0]
    with pytest.raises(DownstreamConnectionError) as info:
        apply_plan_part(victim, part)
    assert info.value.retryable
    with contextlib.suppress(pymysql.MySQLError):
        victim.close()


def test_ordered_part_requires_a_ledger(conn: Any) -> None:
    part = plan_batch([Change(TableRef("app", "n"), INSERT, ("x", "y"), (), None, (1, 1),
                              (1, 0))]).parts(1)[0]
    with pytest.raises(ApplyError, match="needs a task ledger"):
        apply_plan_part(conn, part)
