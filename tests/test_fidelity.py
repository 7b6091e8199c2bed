"""Apply fidelity on real schemas: the downstream ends exactly as a native replica's would.

Each scenario: a fresh upstream and downstream MariaDB, SQL run upstream (several sessions
where it matters), the relay, ``sync --until-caught-up`` on Spark, then every user table
compared (CHECKSUM TABLE and a sorted dump; a table with generated columns by its dump
alone, MDEV-22943) and the checkpoint consistent.  The whole
suite runs twice: with MariaDB's defaults, and with ``binlog_row_image=MINIMAL`` upstream
and a strict global ``sql_mode`` downstream.
"""

from __future__ import annotations

import contextlib
import random
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pymysql
import pytest

import binrelay.spark.serial as serial
import binrelay.spark.sync as sync_module
from binrelay.config import load_config
from binrelay.errors import (
    ApplyError,
    BinrelayError,
    DownstreamRowError,
    DownstreamSchemaError,
    UnfaithfulApplyError,
)
from binrelay.spark.sync import SyncPipeline
from binrelay.spark.tasks import apply_with_checkpoint
from fidelity import Env, assert_converged, make_env, sync_with_crashes
from relay_helpers import relay_until_caught_up

VARIANTS = {
    "full": ((), ()),
    "minimal-strict": (
        ("--binlog-row-image=MINIMAL",),
        ("--sql-mode=STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
         "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",)),
}


@pytest.fixture(params=sorted(VARIANTS))
def env(request, mariadb_factory, tmp_path: Path) -> Env:
    upstream_args, downstream_args = VARIANTS[request.param]
    e = make_env(mariadb_factory, tmp_path, upstream_args=upstream_args,
                 downstream_args=downstream_args)
    yield e
    e.close_sessions()


def converge(env: Env, spark, steps) -> None:
    env.run(steps)
    env.relay()
    env.sync(spark)
    assert_converged(env)


SCHEMA = "CREATE DATABASE app"

FOREIGN_KEYS = [
    SCHEMA,
    "CREATE TABLE app.parent (id INT PRIMARY KEY, name VARCHAR(20) UNIQUE)",
    "CREATE TABLE app.child (id INT PRIMARY KEY, parent_id INT, note VARCHAR(20),"
    " FOREIGN KEY (parent_id) REFERENCES app.parent (id) ON DELETE CASCADE"
    " ON UPDATE CASCADE)",
    "CREATE TABLE app.soft (id INT PRIMARY KEY, parent_id INT,"
    " FOREIGN KEY (parent_id) REFERENCES app.parent (id) ON DELETE SET NULL)",
    "CREATE TABLE app.grandchild (id INT PRIMARY KEY, child_id INT,"
    " FOREIGN KEY (child_id) REFERENCES app.child (id) ON DELETE CASCADE)",
    "INSERT INTO app.parent VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
    "INSERT INTO app.child VALUES (10, 1, 'x'), (11, 1, 'y'), (12, 2, 'z'), (13, 3, 'w')",
    "INSERT INTO app.soft VALUES (20, 1), (21, 2), (22, 4)",
    "INSERT INTO app.grandchild VALUES (30, 10), (31, 11), (32, 13)",
    # Cascades the upstream does not log: a replica gets them by applying with checks on.
    "DELETE FROM app.parent WHERE id = 1",
    "UPDATE app.parent SET id = 30 WHERE id = 3",
    "DELETE FROM app.parent WHERE id = 4",
    # REPLACE on a parent with children: delete + insert upstream, cascading there.
    "REPLACE INTO app.parent VALUES (2, 'b2')",
    "UPDATE app.parent SET name = 'c2' WHERE id = 30",
    "INSERT INTO app.child VALUES (14, 30, 'v')",
    # A session with checks off (a dump being loaded): the child before its parent.
    (1, "SET SESSION foreign_key_checks = 0"),
    (1, "INSERT INTO app.child VALUES (15, 40, 'early')"),
    (1, "INSERT INTO app.parent VALUES (40, 'late')"),
    "DELETE FROM app.parent WHERE id = 40",
]


def test_foreign_key_cascades(env: Env, spark) -> None:
    converge(env, spark, FOREIGN_KEYS)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.child") == \
        env.upstream.scalar("SELECT COUNT(*) FROM app.child")


TRIGGERS = [
    SCHEMA,
    "CREATE TABLE app.t (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE app.audit (seq INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(10), id INT)",
    "CREATE TRIGGER app.t_ins AFTER INSERT ON app.t FOR EACH ROW"
    " INSERT INTO app.audit (what, id) VALUES ('ins', NEW.id)",
    "CREATE TRIGGER app.t_upd BEFORE UPDATE ON app.t FOR EACH ROW SET NEW.v = NEW.v * 10",
    "CREATE TRIGGER app.t_del AFTER DELETE ON app.t FOR EACH ROW"
    " INSERT INTO app.audit (what, id) VALUES ('del', OLD.id)",
    "INSERT INTO app.t VALUES (1, 1), (2, 2), (3, 3)",
    "UPDATE app.t SET v = 5 WHERE id = 2",
    "DELETE FROM app.t WHERE id = 3",
    "DROP TRIGGER app.t_del",
    "DELETE FROM app.t WHERE id = 1",
]


def test_triggers_fire_once(env: Env, spark) -> None:
    converge(env, spark, TRIGGERS)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.audit") == 4  # not 8
    assert env.downstream.execute("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS") == ()


def test_a_downstream_trigger_stops_the_sync(env: Env, spark) -> None:
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("CREATE TRIGGER app.d BEFORE INSERT ON app.t FOR EACH ROW SET @x = 1")
    env.run(["INSERT INTO app.t VALUES (1)"])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=r"trigger app\.d"):
        env.sync(spark)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.t") == 0


# A trigger goes with its table: dropped with it (DROP TABLE, DROP DATABASE, CREATE OR
# REPLACE TABLE); it then fires
# for no statement, which binrelay replays (in statement format).  One on a renamed table
# still does: that statement stops.
TRIGGERS_GONE = [
    SCHEMA,
    "CREATE DATABASE app2",
    "CREATE TABLE app.u (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE app.t (id INT PRIMARY KEY)",
    "CREATE TABLE app.r (id INT PRIMARY KEY)",
    "CREATE TABLE app2.w (id INT PRIMARY KEY)",
    "CREATE TRIGGER app.tt BEFORE INSERT ON app.t FOR EACH ROW SET NEW.id = NEW.id + 1",
    "CREATE TRIGGER app.tr BEFORE INSERT ON r FOR EACH ROW SET NEW.id = NEW.id + 1",
    "CREATE TRIGGER app2.tw AFTER UPDATE ON app2.w FOR EACH ROW SET @x = 1",
    "CREATE TABLE app.o (id INT PRIMARY KEY)",
    "CREATE TRIGGER app.t_o BEFORE INSERT ON app.o FOR EACH ROW SET NEW.id = NEW.id + 1",
    "CREATE OR REPLACE TABLE app.o (id INT PRIMARY KEY, x INT)",
    "DROP TABLE app.t",
    "DROP DATABASE app2",
    "DROP TABLE app.r",
    "CREATE TABLE app.r (id INT PRIMARY KEY)",
    (1, "SET SESSION binlog_format = 'STATEMENT'"),
    (1, "INSERT INTO app.u VALUES (1, 1), (2, 2)"),
    (1, "UPDATE app.u SET v = v + 1 WHERE id = 2"),
    (1, "INSERT INTO app.r VALUES (7)"),
]


def test_a_trigger_goes_with_its_table(env: Env, spark) -> None:
    converge(env, spark, TRIGGERS_GONE)
    assert env.downstream.execute("SELECT id FROM app.r") == ((7,),)
    env.run(["CREATE TABLE app.m (id INT PRIMARY KEY)",
             "CREATE TRIGGER app.tm BEFORE INSERT ON app.m FOR EACH ROW SET NEW.id = NEW.id",
             "ALTER TABLE app.m RENAME TO app.m2",
             "CREATE TABLE app.m (id INT PRIMARY KEY)",
             "DROP TABLE app.m",
             (1, "SET SESSION binlog_format = 'STATEMENT'"),
             (1, "INSERT INTO app.u VALUES (3, 3)")])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=r"trigger app\.tm"):
        env.sync(spark)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.u") == 2


# Statements (STATEMENT, or MIXED: MariaDB's default) that fire none of the upstream's
# triggers are replayed; the one that would fire one stops.
STATEMENTS_BESIDE_TRIGGERS = [
    SCHEMA,
    "CREATE TABLE app.t (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE app.audit (n INT AUTO_INCREMENT PRIMARY KEY, id INT)",
    "CREATE TABLE app.w (id INT PRIMARY KEY, v INT)",
    "CREATE TRIGGER app.t_ins AFTER INSERT ON app.t FOR EACH ROW"
    " INSERT INTO app.audit (id) VALUES (NEW.id)",
    "CREATE TRIGGER app.w_upd BEFORE UPDATE ON app.w FOR EACH ROW SET NEW.v = NEW.v * 10",
    "INSERT INTO app.t VALUES (1, 1), (2, 2), (3, 3)",
    "INSERT INTO app.w VALUES (1, 1), (2, 2)",
    (1, "SET SESSION binlog_format = 'STATEMENT'"),
    (1, "UPDATE app.t SET v = v + 1 WHERE id < 3"),
    (1, "DELETE FROM app.t WHERE id = 3"),
    (1, "DELETE FROM app.w WHERE id = 2"),
    (1, "UPDATE app.audit SET id = id * 2"),
    (2, "SET SESSION binlog_format = 'MIXED'"),
    (2, "UPDATE app.t SET v = 0 WHERE id = 1"),
    (2, "INSERT INTO app.t VALUES (4, 4)"),  # fires upstream: MIXED logs its rows
]


def test_statements_that_fire_no_trigger_beside_triggers(env: Env, spark) -> None:
    converge(env, spark, STATEMENTS_BESIDE_TRIGGERS)


@pytest.mark.parametrize(("statement", "fires"), [
    ("UPDATE app.w SET v = 5 WHERE id = 1", "app.w_upd"),
    ("INSERT INTO app.v_t VALUES (9, 9)", "app.t_ins, reachable through the view v_t"),
    # A function called by a CREATE TABLE ... SELECT writes a table with a trigger.
    ("CREATE TABLE app.c SELECT app.add_t(8) AS n", "app.t_ins, reachable through the"
     " function add_t"),
], ids=["update", "view", "create-select"])
def test_a_statement_that_fires_a_trigger_stops(mariadb_factory, tmp_path: Path, spark,
                                                statement: str, fires: str) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run([*STATEMENTS_BESIDE_TRIGGERS[:8],
             "CREATE VIEW app.v_t AS SELECT id, v FROM app.t",
             "CREATE FUNCTION app.add_t(n INT) RETURNS INT DETERMINISTIC MODIFIES SQL DATA"
             " BEGIN INSERT INTO app.t VALUES (n, n); RETURN n; END",
             (1, "SET SESSION binlog_format = 'STATEMENT'"),
             (1, "UPDATE app.t SET v = 7 WHERE id = 2"),
             (1, statement)])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=rf"{re.escape(statement[:30])}.*trigger"
                                                   rf" {re.escape(fires)}\)"):
        env.sync(spark)
    # It stops there: the transactions before it applied, nothing of it.
    assert env.downstream.scalar("SELECT v FROM app.t WHERE id = 2") == 7
    assert env.downstream.execute("SELECT id, v FROM app.w ORDER BY id") == ((1, 1), (2, 2))
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.t WHERE id > 4") == 0
    env.close_sessions()


GENERATED = [
    SCHEMA,
    "CREATE TABLE app.g (id INT PRIMARY KEY, a INT, b VARCHAR(10),"
    " s INT AS (a * 2) STORED, v VARCHAR(20) AS (CONCAT(b, '!')) VIRTUAL,"
    " iv INT AS (a + 1) VIRTUAL, UNIQUE KEY (s), KEY (iv))",
    "CREATE TABLE app.gk (a INT, b INT AS (a * 3) PERSISTENT, c INT AS (a - 1) VIRTUAL)",
    "INSERT INTO app.g (id, a, b) VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z')",
    "UPDATE app.g SET a = a + 10 WHERE id < 3",
    "UPDATE app.g SET b = 'w' WHERE id = 3",
    "DELETE FROM app.g WHERE id = 2",
    "INSERT INTO app.gk (a) VALUES (1), (1), (2)",
    "UPDATE app.gk SET a = 5 WHERE a = 2",
    "DELETE FROM app.gk WHERE a = 1 LIMIT 1",
]


def test_generated_columns(env: Env, spark) -> None:
    converge(env, spark, GENERATED)


# Rules a DDL in the range changes, read again for the tables it names only (the sync's
# narrow read): a foreign key added (its cascades the upstream does not log), its parent
# renamed (the child then references the new name), a generated column added, a table
# made LIKE another.  Rules read wrong would miss a cascade or write a generated column.
RULES_BY_DDL = [
    SCHEMA,
    "CREATE TABLE app.parent (id INT PRIMARY KEY, name VARCHAR(20))",
    "CREATE TABLE app.child (id INT PRIMARY KEY, parent_id INT, note VARCHAR(20))",
    "INSERT INTO app.parent VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    "INSERT INTO app.child VALUES (10, 1, 'x'), (11, 2, 'y'), (12, 3, 'z')",
    "ALTER TABLE app.child ADD FOREIGN KEY (parent_id) REFERENCES app.parent (id)"
    " ON DELETE CASCADE",
    "DELETE FROM app.parent WHERE id = 1",
    "RENAME TABLE app.parent TO app.parent2",
    "INSERT INTO app.parent2 VALUES (4, 'd')",
    "INSERT INTO app.child VALUES (13, 4, 'w')",
    "DELETE FROM app.parent2 WHERE id = 2",
    "ALTER TABLE app.child ADD COLUMN doubled INT AS (parent_id * 2) STORED",
    "INSERT INTO app.child (id, parent_id, note) VALUES (14, 3, 'v')",
    "UPDATE app.child SET parent_id = 4 WHERE id = 12",
    "CREATE TABLE app.g LIKE app.child",
    "INSERT INTO app.g (id, parent_id, note) VALUES (1, 1, 'g')",
    "UPDATE app.g SET parent_id = 2",
]


def test_rules_changed_by_ddl_in_the_range(env: Env, spark, monkeypatch) -> None:
    narrow = []
    real = sync_module.reread_rules

    def spy(*args, **kwargs):
        narrow.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(sync_module, "reread_rules", spy)
    converge(env, spark, RULES_BY_DDL)
    assert len(narrow) >= 4  # the rows after each of those DDL
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.child") == 3


def test_a_long_run_of_tables_with_text_keys(mariadb_factory, tmp_path: Path, spark,
                                            monkeypatch) -> None:
    """More tables with a text key made in a run than the narrow read takes: the run (its
    rows replayed in relay order) goes on without a read of the catalog, and the rows
    after it, written by key, are written with every table's columns known (a key a
    collation compares: 'a' and 'A' are one row)."""
    env = make_env(mariadb_factory, tmp_path)
    tables = [f"app.k{i}" for i in range(sync_module._NARROW_MAX + 4)]
    steps = [SCHEMA]
    for t in tables:
        steps += [f"CREATE TABLE {t} (k VARCHAR(8) PRIMARY KEY, v INT)",
                  f"INSERT INTO {t} VALUES ('x', 0)", f"CREATE INDEX v_idx ON {t} (v)"]
    for t in tables:
        steps += [f"INSERT INTO {t} VALUES ('a', 1)", f"DELETE FROM {t} WHERE k = 'a'",
                  f"INSERT INTO {t} VALUES ('A', 2)", f"UPDATE {t} SET v = 3 WHERE k = 'x'"]
    env.run(steps)
    env.relay()
    reads, known = [], []
    real_read, real_dml = SyncPipeline.read_rules, SyncPipeline._dml

    def read_rules(self, conn):
        reads.append(self.keys_unread)
        return real_read(self, conn)

    def dml(self, segments, batch_id):
        known.append({f"{t.schema}.{t.table}" for t in self.rules.columns})
        return real_dml(self, segments, batch_id)

    monkeypatch.setattr(SyncPipeline, "read_rules", read_rules)
    monkeypatch.setattr(SyncPipeline, "_dml", dml)
    env.sync(spark)
    assert_converged(env)
    # (A first batch, before the run, has no rows.)
    assert known and set(tables) <= known[-1], known
    assert reads == [[], None], reads  # at the start; whole, before the rows by key


STATEMENTS = [
    SCHEMA,
    "CREATE TABLE app.s (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40), d DATETIME(6),"
    " r DOUBLE, n INT)",
    "CREATE TABLE app.src (k INT PRIMARY KEY, w INT)",
    "INSERT INTO app.src VALUES (1, 10), (2, 20), (3, 30)",
    (1, "SET SESSION binlog_format = STATEMENT"),
    (1, "SET SESSION time_zone = '+05:30'"),
    (1, "SET TIMESTAMP = 1700000000.123456"),
    (1, "INSERT INTO app.s (v, d) VALUES ('now', NOW(6))"),
    (1, "INSERT INTO app.s (v, n) VALUES ('id', LAST_INSERT_ID())"),
    (1, "SET @word = 'héllo', @num = 42, @dec = 1.50, @nothing = NULL"),
    (1, "INSERT INTO app.s (v, n, r) VALUES (@word, @num, @dec)"),
    (1, "INSERT INTO app.s (v) VALUES (@nothing)"),
    (1, "INSERT INTO app.s (v, r) VALUES ('rand', RAND(7))"),
    (1, "INSERT INTO app.s (v, n) SELECT CONCAT('from ', k), w FROM app.src"),
    (1, "UPDATE app.s SET n = n + 1 WHERE n IS NOT NULL"),
    (1, "BEGIN"),
    (1, "INSERT INTO app.s (v) VALUES ('in a transaction')"),
    (1, "DELETE FROM app.src WHERE k = 2"),
    (1, "COMMIT"),
    # A client's comment before a statement: DML all the same (replayed once after a crash).
    (1, "BEGIN"),
    (1, "/* app: cart */ UPDATE app.s SET n = n * 2 WHERE n IS NOT NULL"),
    (1, "-- batch job\nINSERT INTO app.s (v) VALUES ('commented')"),
    (1, "COMMIT"),
    (2, "SET SESSION binlog_format = MIXED"),
    (2, "BEGIN"),
    (2, "INSERT INTO app.s (v, n) VALUES ('mixed', 1)"),
    (2, "INSERT INTO app.s (v) VALUES (UUID())"),  # unsafe: logged as rows
    (2, "UPDATE app.src SET w = w + 1"),
    (2, "COMMIT"),
    "INSERT INTO app.s (v) VALUES ('row')",
    (1, "SET SESSION sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES'"),
    (1, 'INSERT INTO "app"."s" ("v") VALUES (\'back\\slash\')'),
]


def test_statement_and_mixed_events(env: Env, spark) -> None:
    converge(env, spark, STATEMENTS)


DDL_CONTEXT = [
    SCHEMA,
    "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(10))",
    "INSERT INTO app.t VALUES (1, 'a'), (2, 'b')",
    (1, "SET SESSION sql_mode = 'ANSI_QUOTES'"),
    (1, 'CREATE TABLE "app"."quoted" ("a b" INT PRIMARY KEY, "c" VARCHAR(5) DEFAULT \'x\')'),
    (1, "INSERT INTO app.quoted (`a b`) VALUES (1)"),
    (2, "SET SESSION time_zone = '-03:00'"),
    (2, "SET TIMESTAMP = 1600000000"),
    (2, "ALTER TABLE app.t ADD COLUMN ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,"
        " ADD COLUMN dt DATETIME DEFAULT '2020-01-01 00:00:00'"),
    (2, "ALTER TABLE app.t ADD COLUMN created DATETIME NOT NULL DEFAULT NOW()"),
    (3, "SET SESSION character_set_client = latin1"),
    (3, "SET SESSION collation_connection = latin1_swedish_ci"),
    (3, "CREATE TABLE app.l (id INT PRIMARY KEY, v VARCHAR(10) DEFAULT 'é')"
        " CHARACTER SET utf8mb4"),
    (3, "INSERT INTO app.l (id) VALUES (1)"),
    # MariaDB logs SET STATEMENT ... FOR <DDL> as typed: still a DDL (it commits, so the
    # rows before it are not replayed again after a crash; the rules are read again).
    "INSERT INTO app.t (id, v) VALUES (3, 'c')",
    "SET STATEMENT lock_wait_timeout = 5, sql_mode = 'NO_ZERO_DATE' FOR ALTER TABLE app.t"
    " ADD COLUMN g INT AS (id * 2) STORED",
    "INSERT INTO app.t (id, v) VALUES (4, 'd')",
    "SET STATEMENT max_statement_time = 0 FOR CREATE TABLE app.s (id INT PRIMARY KEY, n INT)",
    "INSERT INTO app.s VALUES (1, 1)",
]


def test_ddl_with_its_session_context(env: Env, spark) -> None:
    converge(env, spark, DDL_CONTEXT)


CREATE_SELECT = [
    SCHEMA,
    "CREATE TABLE app.a (id INT PRIMARY KEY, v INT)",
    "INSERT INTO app.a VALUES (1, 1), (2, 2), (3, 3)",
    "CREATE TABLE app.b ENGINE=InnoDB SELECT * FROM app.a WHERE id > 1",
    "CREATE TABLE app.c (id INT PRIMARY KEY, extra INT DEFAULT 7) SELECT id, v FROM app.a",
    "INSERT INTO app.b VALUES (9, 9)",
    "UPDATE app.c SET extra = 8 WHERE id = 1",
    # A replay after a crash past the ALTER skips the CREATE's rows (committed with the
    # ALTER's journal row): written again, the deleted row would come back.
    "DELETE FROM app.b WHERE id = 2",
    "ALTER TABLE app.b ADD COLUMN z INT FIRST",
    "INSERT INTO app.b VALUES (0, 10, 10)",
]


def test_create_table_select(env: Env, spark) -> None:
    converge(env, spark, CREATE_SELECT)


# A row-format CREATE ... SELECT logs its rows after the CREATE, in its own transaction: they
# are written by the rules of the table the CREATE made (system versioning, generated,
# invisible and defaulted columns, a cascading key), not those read before it ran.
CREATE_SELECT_RULES = [
    SCHEMA,
    "CREATE TABLE app.a (id INT PRIMARY KEY, v INT)",
    "INSERT INTO app.a VALUES (1, 1), (2, 1), (3, 2)",
    "CREATE TABLE app.h (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING"
    " SELECT id, v FROM app.a",
    "UPDATE app.h SET v = 9 WHERE id = 1",
    "CREATE TABLE app.g (id INT PRIMARY KEY, v INT, d INT AS (v * 2) VIRTUAL,"
    " s INT AS (v + 1) STORED, hid INT INVISIBLE DEFAULT 4) SELECT id, v FROM app.a",
    "INSERT INTO app.g (id, v) VALUES (5, 5)",
    "CREATE TABLE app.i (n INT AUTO_INCREMENT PRIMARY KEY, v INT CHECK (v > 0),"
    " u VARCHAR(36) DEFAULT UUID()) SELECT v FROM app.a",
    "CREATE TABLE app.u (v INT UNIQUE, id INT) IGNORE SELECT v, id FROM app.a",
    "CREATE OR REPLACE TABLE app.r (v INT PRIMARY KEY, id INT, w INT AS (id * 3) STORED)"
    " REPLACE SELECT v, id FROM app.a",
    "CREATE TABLE app.c (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES app.a (id)"
    " ON DELETE CASCADE) SELECT id, id AS pid FROM app.a",
    "DELETE FROM app.a WHERE id = 1",
]


def test_create_table_select_writes_by_the_new_tables_rules(env: Env, spark) -> None:
    converge(env, spark, CREATE_SELECT_RULES)


# Partition maintenance: EXCHANGE swaps rows between a partition and a table and changes no
# definition; MariaDB runs it only with autocommit on (off, it waits on its own row locks).
PARTITION_MAINTENANCE = [
    SCHEMA,
    "CREATE TABLE app.p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id)"
    " (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (100))",
    "CREATE TABLE app.x (id INT PRIMARY KEY, v INT)",
    "INSERT INTO app.p VALUES (1, 1), (50, 50)",
    "INSERT INTO app.x VALUES (5, 5)",
    "ALTER TABLE app.p EXCHANGE PARTITION p0 WITH TABLE app.x",
    "UPDATE app.p SET v = 7 WHERE id = 5",
    "UPDATE app.x SET v = 8",
    "ALTER TABLE app.p REORGANIZE PARTITION p1 INTO (PARTITION p1a VALUES LESS THAN (60),"
    " PARTITION p1b VALUES LESS THAN (100))",
    "INSERT INTO app.p VALUES (70, 70), (20, 20)",
    "ALTER TABLE app.p CONVERT PARTITION p1b TO TABLE app.y",
    "INSERT INTO app.y VALUES (80, 80)",
    "CREATE TABLE app.z (id INT PRIMARY KEY, v INT)",
    "INSERT INTO app.z VALUES (150, 1)",
    "ALTER TABLE app.p CONVERT TABLE app.z TO PARTITION p2 VALUES LESS THAN (200)",
    "UPDATE app.p SET v = 2 WHERE id = 150",
    "DELETE FROM app.x",
    "INSERT INTO app.x VALUES (160, 6)",
    "ALTER TABLE app.p EXCHANGE PARTITION p2 WITH TABLE app.x",
    "UPDATE app.x SET v = 3",
]


def test_partition_maintenance(env: Env, spark) -> None:
    converge(env, spark, PARTITION_MAINTENANCE)


def test_a_statement_that_failed_part_way_upstream(mariadb_factory, tmp_path: Path,
                                                   spark) -> None:
    """A statement-format INSERT into a MyISAM table that failed part way is logged with its
    error: a replica runs it, meets the same error having done the same part, and goes on.
    (Not crash-replayed: a MyISAM change cannot commit with the checkpoint.)"""
    env = make_env(mariadb_factory, tmp_path)
    env.run([SCHEMA, "CREATE TABLE app.m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
             "CREATE TABLE app.i (id INT PRIMARY KEY) ENGINE=InnoDB",
             "INSERT INTO app.m VALUES (5, 5)",
             (1, "SET SESSION binlog_format = 'STATEMENT'")])
    with pytest.raises(pymysql.err.IntegrityError):
        env.run([(1, "INSERT INTO app.m VALUES (1, 1), (5, 6), (7, 7)")])
    env.run([(1, "BEGIN"), (1, "INSERT INTO app.i VALUES (1)")])
    with pytest.raises(pymysql.err.IntegrityError):
        env.run([(1, "INSERT INTO app.m VALUES (2, 2), (5, 6)")])
    env.run([(1, "COMMIT"), (1, "INSERT INTO app.m VALUES (8, 8)")])
    assert env.upstream.execute("SELECT id FROM app.m ORDER BY id") == ((1,), (2,), (5,), (8,))
    env.relay()
    env.sync(spark)
    assert_converged(env)


def test_a_statement_that_failed_upstream_but_not_downstream_stops(
        mariadb_factory, tmp_path: Path, spark) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run([SCHEMA, "CREATE TABLE app.m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
             (1, "SET SESSION sql_log_bin = 0"), (1, "INSERT INTO app.m VALUES (5, 5)"),
             (2, "SET SESSION binlog_format = 'STATEMENT'")])
    with pytest.raises(pymysql.err.IntegrityError):
        env.run([(2, "INSERT INTO app.m VALUES (1, 1), (5, 6), (7, 7)")])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=r"failed upstream \(error 1062\) but not"):
        env.sync(spark)


@pytest.mark.parametrize("crashes", [False, True], ids=["straight", "crashes"])
def test_a_two_phase_alter(mariadb_factory, tmp_path: Path, spark, monkeypatch,
                           crashes: bool) -> None:
    """``binlog_alter_two_phase`` upstream: an ALTER is logged when it starts and again when
    it commits (or rolls back); the rows committed while it ran, logged between the two in
    the table's old shape, go in before it, as a replica's order has them."""
    env = make_env(mariadb_factory, tmp_path, upstream_args=["--binlog-alter-two-phase=ON"],
                   sync={"batch-bytes": 16 * 1024} if crashes else None)
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v INT, w VARCHAR(40))",
             "INSERT INTO app.t SELECT seq, seq % 1000, REPEAT('x', 40)"
             " FROM app.seq_1_to_200000"])
    (binlog_file, at, *_rest), = env.upstream.execute("SHOW MASTER STATUS")
    alter = threading.Thread(target=env.upstream.execute, args=(
        "ALTER TABLE app.t ADD COLUMN z INT DEFAULT 3, ADD INDEX iv (v, w),"
        " ALGORITHM=INPLACE, LOCK=NONE",))
    alter.start()
    for _ in range(500):  # until its START ALTER is logged
        if any("START ALTER" in str(row[-1]) for row in env.upstream.execute(
                f"SHOW BINLOG EVENTS IN '{binlog_file}' FROM {int(at)}")):
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the ALTER logged no START ALTER")
    env.run(["INSERT INTO app.t (id, v, w) VALUES (300001, 1, 'during the alter')",
             "UPDATE app.t SET v = 7 WHERE id = 5", "DELETE FROM app.t WHERE id = 6"])
    alter.join()
    env.run(["CREATE TABLE app.u (id INT PRIMARY KEY, v INT)",
             "INSERT INTO app.u VALUES (1, 1), (2, 1)",
             "ALTER TABLE app.u ADD COLUMN x INT DEFAULT 4",
             "INSERT INTO app.u (id, v) VALUES (3, 2)"])
    with pytest.raises(pymysql.err.IntegrityError):  # ROLLBACK ALTER
        env.upstream.execute("ALTER TABLE app.u ADD UNIQUE (v)")
    env.run(["INSERT INTO app.u VALUES (4, 1, 5)"])
    binlog = subprocess.run(
        ["mariadb-binlog", "-v", *(str(env.upstream.binlog_path(name))
                                   for name, _size in env.upstream.binlog_files())],
        capture_output=True, text=True, check=True).stdout
    start = binlog.index("START ALTER")
    assert start < binlog.index("'during the alter'") < binlog.index("COMMIT ALTER")
    assert "ROLLBACK ALTER" in binlog
    env.relay()
    if crashes:
        assert sync_with_crashes(env, spark, monkeypatch) >= 2
    else:
        env.sync(spark)
    assert_converged(env)
    assert env.downstream.execute("SELECT z FROM app.t WHERE id = 300001") == ((3,),)
    # The relaylog source shows each ALTER that took effect once, at its COMMIT ALTER.
    statements = [r.query for r in spark.read.format("relaylog")
                  .option("relay_dir", str(env.relay_dir)).load()
                  .where("op = 'ddl'").select("query").collect()]
    assert sum("ADD COLUMN z" in q for q in statements) == 1
    assert sum("ADD COLUMN x" in q for q in statements) == 1
    assert not any("ADD UNIQUE" in q for q in statements)


STORED_AS_IS = [
    SCHEMA,
    (1, "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'"),
    (1, "CREATE TABLE app.v (id INT PRIMARY KEY, d DATE, dt DATETIME, e ENUM('a', 'b'),"
        " s VARCHAR(3), n INT NOT NULL)"),
    (1, "INSERT INTO app.v VALUES (1, '0000-00-00', '0000-00-00 00:00:00', 'a', 'abc', 1)"),
    (1, "INSERT INTO app.v VALUES (2, '2020-02-30', '2020-04-31 10:00:00', 'zz', 'abcdef', 2)"),
    (1, "INSERT INTO app.v VALUES (3, '2021-00-10', NULL, '', 'x', 3)"),
    (1, "UPDATE app.v SET e = 'nope' WHERE id = 1"),
    # An ENUM with a '' member: its error value (index 0) is not that member.
    (1, "CREATE TABLE app.e (id INT PRIMARY KEY, e ENUM('', 'a'), s SET('', 'x'))"),
    (1, "INSERT INTO app.e VALUES (1, 'zz', ''), (2, '', 'x'), (3, 'a', ',x')"),
    (1, "UPDATE app.e SET e = 'bad' WHERE id = 3"),
    # Rows a session with CHECK constraints off wrote (a replica stores them too), in the
    # batch path and in a transaction replayed in order after a statement.
    "CREATE TABLE app.c (id INT PRIMARY KEY, a INT CHECK (a > 0), b INT,"
    " CONSTRAINT ordered CHECK (b >= a))",
    "INSERT INTO app.c VALUES (1, 1, 1)",
    (2, "SET SESSION check_constraint_checks = 0"),
    (2, "INSERT INTO app.c VALUES (2, -1, -5)"),
    (2, "UPDATE app.c SET a = -7 WHERE id = 1"),
    (2, "SET SESSION binlog_format = 'MIXED'"),
    (2, "BEGIN"),
    (2, "UPDATE app.v SET n = n + 1"),  # logged as a statement
    (2, "INSERT INTO app.c SELECT 3, 5, 0 FROM DUAL WHERE UUID() IS NOT NULL"),  # as rows
    (2, "COMMIT"),
]


def test_values_stored_under_a_lenient_mode(env: Env, spark) -> None:
    converge(env, spark, STORED_AS_IS)
    assert env.downstream.execute("SELECT id, e + 0 FROM app.e ORDER BY id") == \
        ((1, 0), (2, 1), (3, 0))


# ucs2 takes any code unit, lone surrogates too, and utf32 takes U+D800: values that no
# Unicode text holds (the row decoder keeps their bytes).
WIDE_UNITS = [
    SCHEMA,
    (1, "SET SESSION sql_mode = ''"),
    (1, "CREATE TABLE app.w (id INT PRIMARY KEY, u VARCHAR(4) CHARACTER SET ucs2,"
        " c CHAR(3) CHARACTER SET ucs2, x VARCHAR(4) CHARACTER SET utf32)"),
    (1, "CREATE TABLE app.wn (u VARCHAR(4) CHARACTER SET ucs2, x VARCHAR(4) CHARACTER SET utf32)"),
    (1, "CREATE TABLE app.wk (k VARCHAR(4) CHARACTER SET ucs2 PRIMARY KEY, v INT)"),
    (1, "INSERT INTO app.w VALUES (1, X'D800', X'DC000041', X'0000D800'), (2, 'ok', 'ok', 'ok')"),
    (1, "INSERT INTO app.wn VALUES (X'D800', X'0000DFFF'), ('ok', 'ok'), (X'DFFF', 'b')"),
    (1, "INSERT INTO app.wk VALUES (X'D800', 1), ('a', 2), (X'DBFF', 3)"),
    (1, "UPDATE app.w SET u = X'DBFF0042', c = X'D8000020' WHERE id = 2"),
    (1, "UPDATE app.wn SET x = 'z' WHERE u = X'D800'"),
    (1, "DELETE FROM app.wn WHERE u = 'ok'"),
    (1, "UPDATE app.wk SET v = 10 WHERE k = X'D800'"),
    (1, "DELETE FROM app.wk WHERE k = X'DBFF'"),
]


# Bytes a set's text does not hold one to one: undefined in a single-byte set (cp1250
# 0x81, swe7 0x80), two bytes of one character (armscii8 0xA5 and 0x28), and the
# multi-byte sets whose Python codecs are not the server's tables (sjis 0x815F and 0x5C,
# cp932's duplicates 0x8790 and 0x81E0, eucjpms's extensions), keys among them.
ODD_BYTES = [
    SCHEMA,
    (1, "SET SESSION sql_mode = ''"),
    (1, "CREATE TABLE app.ob (id INT PRIMARY KEY, a VARCHAR(8) CHARACTER SET cp1250,"
        " b VARCHAR(8) CHARACTER SET armscii8, c VARCHAR(8) CHARACTER SET cp932,"
        " d VARCHAR(8) CHARACTER SET eucjpms, e CHAR(4) CHARACTER SET cp932,"
        " f VARCHAR(8) CHARACTER SET swe7, g CHAR(4) CHARACTER SET armscii8,"
        " h VARCHAR(8) CHARACTER SET sjis, j VARCHAR(8) CHARACTER SET big5)"),
    (1, "CREATE TABLE app.ok (k VARCHAR(4) CHARACTER SET cp932 COLLATE cp932_bin PRIMARY KEY,"
        " v INT)"),
    (1, "CREATE TABLE app.os (k VARCHAR(4) CHARACTER SET sjis PRIMARY KEY, v INT)"),
    (1, "INSERT INTO app.ob VALUES (1, X'81', X'A5', X'8790', X'ADA1', X'879020', X'80',"
        " X'A520', X'815F', X'A3E1'), (2, X'41', X'28', X'81E0', X'8FFEFE', X'81E0', X'41',"
        " X'28', X'5C', X'A140')"),
    (1, "INSERT INTO app.ok VALUES (X'8790', 1), (X'81E0', 2), (X'41', 3)"),
    (1, "INSERT INTO app.os VALUES (X'815F', 1), (X'5C', 2), (X'61', 3)"),
    (1, "UPDATE app.ob SET a = X'8141', c = X'87908790' WHERE id = 2"),
    (1, "UPDATE app.ok SET v = v + 10 WHERE k = X'8790'"),
    (1, "UPDATE app.ok SET k = X'879041' WHERE k = X'81E0'"),
    (1, "UPDATE app.os SET k = X'41' WHERE k = X'61'"),
    (1, "DELETE FROM app.os WHERE k = X'5C'"),
]


def test_bytes_a_text_does_not_hold_reach_the_downstream_as_stored(env: Env, spark) -> None:
    converge(env, spark, ODD_BYTES)
    assert env.downstream.execute("SELECT HEX(k) FROM app.ok ORDER BY k") == \
        (("41",), ("8790",), ("879041",))


def test_code_units_no_text_holds(env: Env, spark) -> None:
    converge(env, spark, WIDE_UNITS)
    assert env.upstream.execute("SELECT HEX(u), HEX(x) FROM app.w WHERE id = 1") == \
        (("D800", "0000D800"),)
    assert env.downstream.execute("SELECT HEX(k), v FROM app.wk ORDER BY k") == \
        (("0061", 2), ("D800", 10))


XA = [
    SCHEMA,
    "CREATE TABLE app.x (id INT PRIMARY KEY, v INT)",
    (1, "XA START 'rolled'"),
    (1, "INSERT INTO app.x VALUES (1, 1)"),
    (1, "XA END 'rolled'"),
    (1, "XA PREPARE 'rolled'"),
    (2, "INSERT INTO app.x VALUES (2, 2)"),
    (1, "XA ROLLBACK 'rolled'"),
    (1, "XA START 'kept'"),
    (1, "INSERT INTO app.x VALUES (3, 3)"),
    (1, "UPDATE app.x SET v = 20 WHERE id = 2"),
    (1, "XA END 'kept'"),
    (1, "XA PREPARE 'kept'"),
    (2, "INSERT INTO app.x VALUES (4, 4)"),
    (1, "XA COMMIT 'kept'"),
    (1, "XA START 'one'"),
    (1, "INSERT INTO app.x VALUES (5, 5)"),
    (1, "XA END 'one'"),
    (1, "XA COMMIT 'one' ONE PHASE"),
]


def test_xa_transactions(env: Env, spark) -> None:
    converge(env, spark, XA)
    assert env.downstream.execute("SELECT id FROM app.x ORDER BY id") == ((2,), (3,), (4,), (5,))


def test_an_xa_still_prepared_waits_for_its_outcome(env: Env, spark) -> None:
    env.run([SCHEMA, "CREATE TABLE app.x (id INT PRIMARY KEY)",
             (1, "XA START 'w'"), (1, "INSERT INTO app.x VALUES (1)"), (1, "XA END 'w'"),
             (1, "XA PREPARE 'w'"), (2, "INSERT INTO app.x VALUES (2)")])
    conn = env.connections.pop(1)  # the XA stays prepared upstream after a disconnect
    conn.close()
    env.relay()
    env.sync(spark)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.x") == 0
    env.run(["XA COMMIT 'w'"])
    env.relay()
    env.sync(spark)
    assert_converged(env)


UNIQUE_SWAPS = [
    SCHEMA,
    "CREATE TABLE app.u (id INT PRIMARY KEY, code INT NOT NULL, tag VARCHAR(8), pad CHAR(200),"
    " UNIQUE (code), UNIQUE (tag))",
    "INSERT INTO app.u (id, code, tag) VALUES "
    + ", ".join(f"({i}, {i}, 't{i}')" for i in range(1, 401)),
    # Swaps through an intermediate value, freed values taken by new rows, chains.
    *[stmt for i in range(1, 200, 2) for stmt in (
        f"UPDATE app.u SET code = -1 WHERE id = {i}",
        f"UPDATE app.u SET code = {i} WHERE id = {i + 1}",
        f"UPDATE app.u SET code = {i + 1} WHERE id = {i}",
        f"UPDATE app.u SET tag = NULL WHERE id = {i}",
        f"UPDATE app.u SET tag = 't{i}' WHERE id = {i + 1}")],
    "DELETE FROM app.u WHERE id BETWEEN 300 AND 350",
    "INSERT INTO app.u (id, code, tag) VALUES " + ", ".join(f"({i + 1000}, {i}, 't{i}')"
                                                           for i in range(300, 351)),
    # Enough row bytes for several partitions in one batch.
    *[f"UPDATE app.u SET pad = REPEAT('{c}', 200)" for c in "abcdefgh"],
]


def test_unique_values_moving_between_rows(mariadb_factory, tmp_path: Path, spark) -> None:
    # Many small partitions and several apply tasks: the multi-partition, shuffled path.
    env = make_env(mariadb_factory, tmp_path, sync={"partition-bytes": 65536, "tasks": 4,
                                                    "batch-bytes": 1 << 20})
    converge(env, spark, UNIQUE_SWAPS)


@pytest.mark.parametrize("downstream_key, rows", [
    ("ADD UNIQUE (code)", ["INSERT INTO app.k VALUES (1, 'a', 7), (2, 'a', 7)"]),
    # Taken from a row the batch does not touch: a REPLACE would delete that row.
    ("ADD UNIQUE (code)", ["INSERT INTO app.k VALUES (1, 'a', 7)", None,
                           "INSERT INTO app.k VALUES (2, 'a', 7)"]),
    ("DROP PRIMARY KEY, ADD PRIMARY KEY (id)",
     ["INSERT INTO app.k VALUES (1, 'a', 1), (1, 'b', 2)"]),
], ids=["unique", "unique-against-an-older-row", "narrower-primary-key"])
@pytest.mark.parametrize("path", ["spark", "driver"])
def test_a_unique_key_only_the_downstream_has_stops_where_a_replica_stops(
        mariadb_factory, tmp_path: Path, spark, downstream_key: str, rows: list[str | None],
        path: str) -> None:
    """Rows the upstream keeps apart and the downstream's own unique key does not: a
    replica stops on them (1062); a REPLACE would delete one silently.  The survivors of a
    table with a unique key the upstream's key is not part of are written by INSERT after
    their keys' deletes, so the downstream's key stops the sync, nothing of the batch
    kept."""
    sync = {"tasks": 4} if path == "spark" else {"driver-batch-bytes": 1 << 30}
    env = make_env(mariadb_factory, tmp_path, sync=sync)
    env.run([SCHEMA, "CREATE TABLE app.k (id INT, r CHAR(1), code INT, PRIMARY KEY (id, r))"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER TABLE app.k " + downstream_key)
    before = None
    for i, step in enumerate(rows):
        if step is None:
            env.relay()
            env.sync(spark)
            before = env.downstream.execute("SELECT * FROM app.k")
            continue
        env.run([step] + (["UPDATE app.k SET code = code"] if i else []))
    env.relay()
    with pytest.raises(DownstreamRowError, match="Duplicate entry"):
        env.sync(spark)
    assert env.downstream.execute("SELECT * FROM app.k") == (before or ())


@pytest.mark.parametrize("downstream_key", [
    "DROP PRIMARY KEY", "DROP PRIMARY KEY, ADD PRIMARY KEY (id, r)",
    "DROP PRIMARY KEY, ADD UNIQUE (r, id)"], ids=["none", "wider-primary-key", "wider-unique"])
@pytest.mark.parametrize("path", ["spark", "driver"])
def test_a_key_the_downstream_lacks_or_widens_keeps_one_row_per_upstream_key(
        mariadb_factory, tmp_path: Path, spark, downstream_key: str, path: str) -> None:
    """A downstream table with no unique key within the upstream's key (none, or one with a
    column more): a REPLACE of a row's new version would not meet its old one, and both
    would stay; a replica finds the old row by its before image.  Each key's row is
    deleted, then its final image inserted."""
    sync = {"tasks": 4} if path == "spark" else {"driver-batch-bytes": 1 << 30}
    env = make_env(mariadb_factory, tmp_path, sync=sync)
    env.run([SCHEMA, "CREATE TABLE app.w (id INT PRIMARY KEY, r CHAR(1) NOT NULL, v INT)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER TABLE app.w " + downstream_key)
    env.run(["INSERT INTO app.w VALUES " + ", ".join(f"({i}, 'a', {i})" for i in range(300))])
    env.relay()
    env.sync(spark)
    env.run(["UPDATE app.w SET r = 'b', v = v + 1 WHERE id % 2 = 0",
             "UPDATE app.w SET v = 7 WHERE id % 3 = 0", "DELETE FROM app.w WHERE id % 5 = 0",
             "INSERT INTO app.w VALUES (1000, 'c', 1), (1001, 'c', 2)",
             "UPDATE app.w SET r = 'd' WHERE id = 1000"])
    env.relay()
    env.sync(spark)
    assert_converged(env)


@pytest.mark.parametrize("metadata, path", [("FULL", "spark"), ("FULL", "driver"),
                                            ("MINIMAL", "spark")])
@pytest.mark.parametrize("upstream, downstream, values", [
    ("utf8mb4_bin", "utf8mb4_general_ci", ("a", "A")),
    ("utf8mb4_nopad_bin", "utf8mb4_bin", ("b", "b ")),
], ids=["case", "trailing-space"])
def test_a_key_the_downstream_compares_more_leniently_stops_where_a_replica_stops(
        mariadb_factory, tmp_path: Path, spark, metadata: str, path: str, upstream: str,
        downstream: str, values: tuple[str, str]) -> None:
    """Two keys the upstream's collation tells apart and the downstream's does not: a
    replica stops on the second row (1062); a REPLACE of it would delete the first row, in
    the same batch or a later one.  The table is replayed in order (its rows by INSERT),
    which stops there too, the batch's rows not kept.  With MINIMAL metadata the rows are
    applied by position and the collations are logged all the same."""
    sync = {"tasks": 4} if path == "spark" else {"driver-batch-bytes": 1 << 30}
    env = make_env(mariadb_factory, tmp_path, sync=sync,
                   upstream_args=(f"--binlog-row-metadata={metadata}",))
    env.run([SCHEMA, f"CREATE TABLE app.c (k VARCHAR(8) COLLATE {upstream} PRIMARY KEY,"
                     " v INT)", "CREATE TABLE app.other (id INT PRIMARY KEY, v INT)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute(f"ALTER TABLE app.c MODIFY k VARCHAR(8) COLLATE {downstream}")
    env.run([f"INSERT INTO app.c VALUES ('{values[0]}', 1)",
             "INSERT INTO app.other VALUES (1, 1)"])
    env.relay()
    env.sync(spark)
    before = env.downstream.execute("SELECT k, v FROM app.c")
    assert before == ((values[0], 1),)
    # The first row untouched by the batch (keys of one batch that fold together are
    # replayed in order anyway).
    env.run([f"INSERT INTO app.c VALUES ('{values[1]}', 2)", "UPDATE app.other SET v = 2"])
    env.relay()
    with pytest.raises(DownstreamRowError, match="Duplicate entry"):
        env.sync(spark)
    assert env.downstream.execute("SELECT k, v FROM app.c") == before
    env.run(["UPDATE app.c SET v = v + 10"])
    env.relay()
    with pytest.raises(DownstreamRowError, match="Duplicate entry"):
        env.sync(spark)
    assert env.downstream.execute("SELECT k, v FROM app.c") == before


def test_a_table_made_during_the_sync_whose_key_the_downstream_compares_more_leniently(
        mariadb_factory, tmp_path: Path, spark) -> None:
    """A database whose default collation differs downstream (an operator's choice): a
    table made in it during the sync takes each side's default, case-sensitive upstream,
    not downstream.  'b' then 'B' in a later batch: a replica stops on the second (1062),
    and so does the sync (its columns are read before rows are written by key), where a
    REPLACE of 'B' would have taken the place of 'b'."""
    env = make_env(mariadb_factory, tmp_path, upstream_args=("--binlog-row-metadata=FULL",))
    env.run(["CREATE DATABASE app CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER DATABASE app COLLATE utf8mb4_general_ci")
    env.run(["CREATE TABLE app.n (k VARCHAR(8) PRIMARY KEY, v INT)",
             "INSERT INTO app.n VALUES ('b', 1)",
             "CREATE TABLE app.other (id INT PRIMARY KEY)",
             "INSERT INTO app.n VALUES ('B', 2)", "INSERT INTO app.other VALUES (1)"])
    env.relay()
    with pytest.raises(DownstreamRowError, match="Duplicate entry"):
        env.sync(spark)
    assert env.downstream.execute("SELECT k, v FROM app.n") == (("b", 1),)


@pytest.mark.parametrize("path", ["spark", "driver"])
def test_a_lenient_collation_on_a_key_the_downstream_lacks_loses_no_row(
        mariadb_factory, tmp_path: Path, spark, path: str) -> None:
    """No key downstream, and the upstream's key column compared case-insensitively there:
    'a' and 'A' are two rows on both sides.  A delete of 'A' by key (before its row's
    INSERT) would delete 'a' too; the table is replayed in order instead, where the update
    of 'A' matches two rows and stops the sync, nothing lost."""
    sync = {"tasks": 4} if path == "spark" else {"driver-batch-bytes": 1 << 30}
    env = make_env(mariadb_factory, tmp_path, sync=sync)
    env.run([SCHEMA, "CREATE TABLE app.n (k VARCHAR(8) COLLATE utf8mb4_bin PRIMARY KEY,"
                     " v INT)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER TABLE app.n DROP PRIMARY KEY,"
                           " MODIFY k VARCHAR(8) COLLATE utf8mb4_general_ci NOT NULL")
    env.run(["INSERT INTO app.n VALUES ('a', 1), ('A', 2)"])
    env.relay()
    env.sync(spark)
    before = sorted(env.downstream.execute("SELECT k, v FROM app.n"))
    assert before == [("A", 2), ("a", 1)]
    env.run(["UPDATE app.n SET v = 3 WHERE k = 'A'"])
    env.relay()
    with pytest.raises(DownstreamRowError, match="matched 2 rows"):
        env.sync(spark)
    assert sorted(env.downstream.execute("SELECT k, v FROM app.n")) == before


def test_keys_one_by_a_collation_fold_key_does_not_know_keep_their_rows(
        mariadb_factory, tmp_path: Path, spark) -> None:
    """Keys a collation takes for one beyond what ``fold_key`` folds (every character
    beyond the BMP is one under utf8mb4_general_ci, 'ß' is 's'), and a DOUBLE key's -0
    and 0, renamed to each other: the old key's delete and the new key's write must not
    run in two tasks, where the delete may commit last and remove the new row."""
    env = make_env(mariadb_factory, tmp_path, sync={"tasks": 4, "partition-bytes": 1 << 20})
    env.run([SCHEMA,
             "CREATE TABLE app.e (k VARCHAR(20) PRIMARY KEY, v INT)"
             " CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
             "CREATE TABLE app.d (k DOUBLE PRIMARY KEY, v INT)",
             "INSERT INTO app.e VALUES " + ", ".join(
                 f"('k{i}{chr(0x1F300 + i)}', {i}), ('s{i}ß', {i})" for i in range(60)),
             "INSERT INTO app.d VALUES (-0e0, 1), (1, 1)"])
    env.relay()
    env.sync(spark)
    env.run([*(f"UPDATE app.e SET k = 'k{i}{chr(0x1F400 + i)}' WHERE v = {i} AND k LIKE 'k%'"
               for i in range(60)),
             *(f"UPDATE app.e SET k = 's{i}s' WHERE v = {i} AND k LIKE 's%'"
               for i in range(60)),
             "UPDATE app.d SET k = 0e0, v = 2 WHERE v = 1 AND k < 1"])
    env.relay()
    env.sync(spark)
    assert_converged(env)


def test_a_key_the_downstream_compares_more_strictly_converges(
        mariadb_factory, tmp_path: Path, spark) -> None:
    """A downstream key column that tells apart what the upstream's does not (``_bin`` for
    ``_ci``) takes the upstream's rows as they are, keys changing case included."""
    env = make_env(mariadb_factory, tmp_path, sync={"tasks": 4})
    env.run([SCHEMA, "CREATE TABLE app.c (k VARCHAR(8) COLLATE utf8mb4_general_ci PRIMARY"
                     " KEY, v INT)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER TABLE app.c MODIFY k VARCHAR(8) COLLATE utf8mb4_bin")
    env.run(["INSERT INTO app.c VALUES " + ", ".join(f"('k{i}', {i})" for i in range(200))])
    env.relay()
    env.sync(spark)
    env.run(["UPDATE app.c SET k = UPPER(k) WHERE v % 3 = 0",
             "UPDATE app.c SET v = v + 1000 WHERE v % 2 = 0", "DELETE FROM app.c WHERE v < 10"])
    env.relay()
    env.sync(spark)
    assert_converged(env)


def test_unique_keys_of_both_sides_keep_their_rows_under_every_apply_path(
        mariadb_factory, tmp_path: Path, spark, monkeypatch) -> None:
    """The unique-key swaps written by INSERT after deletes, by the driver and after
    crashes (a task run again deletes and inserts its rows again)."""
    env = make_env(mariadb_factory, tmp_path, sync={"tasks": 4, "partition-bytes": 65536})
    env.run(UNIQUE_SWAPS)
    env.relay()
    assert sync_with_crashes(env, spark, monkeypatch) > 3
    assert_converged(env)


def test_rows_larger_than_the_downstreams_packet(mariadb_factory, tmp_path: Path,
                                                 spark) -> None:
    env = make_env(mariadb_factory, tmp_path, upstream_args=("--max-allowed-packet=64M",),
                   downstream_args=("--max-allowed-packet=1M",))
    big = "REPEAT('x', 300000)"
    env.run([SCHEMA, "CREATE TABLE app.b (id INT PRIMARY KEY, v LONGTEXT)",
             f"INSERT INTO app.b VALUES (1, {big}), (2, {big}), (3, {big}), (4, {big})"])
    env.relay()
    env.sync(spark)
    assert_converged(env)
    env.run(["INSERT INTO app.b VALUES (5, REPEAT('y', 2000000))"])
    env.relay()
    with pytest.raises(DownstreamRowError, match="max_allowed_packet") as info:
        env.sync(spark)
    assert info.value.table == "app.b"


SAVEPOINTS = [
    SCHEMA,
    "CREATE TABLE app.a (id INT PRIMARY KEY) ENGINE=InnoDB",
    "CREATE TABLE app.m (id INT PRIMARY KEY) ENGINE=MyISAM",
    "BEGIN",
    "INSERT INTO app.a VALUES (1)",
    "SAVEPOINT s1",
    # With a non-transactional change in between, the rows before ROLLBACK TO are logged
    # and only the rollback undoes them.
    "INSERT INTO app.a VALUES (2)",
    "INSERT INTO app.m VALUES (2)",
    "ROLLBACK TO s1",
    "INSERT INTO app.a VALUES (3)",
    "COMMIT",
    # A transaction rolled back is logged, with its ROLLBACK, when it made a temporary
    # table (MIXED) or changed a non-transactional one (STATEMENT): a replica runs it and
    # its ROLLBACK, which undoes the InnoDB rows only.
    "SET SESSION binlog_format = 'MIXED'",
    "BEGIN",
    "INSERT INTO app.a VALUES (20)",
    "CREATE TEMPORARY TABLE app.tmp (id INT)",
    "ROLLBACK",
    "SET SESSION binlog_format = 'STATEMENT'",
    "BEGIN",
    "INSERT INTO app.a VALUES (21)",
    "INSERT INTO app.m VALUES (21)",
    "ROLLBACK",
    "INSERT INTO app.a VALUES (4)",
    # A savepoint in a row transaction, once the upstream has a trigger (which binrelay
    # notes and does not replay): a savepoint fires none.
    "SET SESSION binlog_format = 'ROW'",
    "CREATE TRIGGER app.tm BEFORE INSERT ON app.m FOR EACH ROW SET NEW.id = NEW.id",
    "BEGIN",
    "INSERT INTO app.a VALUES (5)",
    "SAVEPOINT s2",
    "INSERT INTO app.a VALUES (6)",
    "RELEASE SAVEPOINT s2",
    "COMMIT",
]


def test_rollback_to_a_savepoint(env: Env, spark) -> None:
    converge(env, spark, SAVEPOINTS)
    assert env.downstream.execute("SELECT id FROM app.a ORDER BY id") == \
        ((1,), (3,), (4,), (5,), (6,))
    assert env.downstream.execute("SELECT id FROM app.m ORDER BY id") == ((2,), (21,))


def _load_data_steps(tmp: Path, binlog_format: str) -> list:
    small = tmp / "rows.csv"
    small.write_text("1,a\n2,b\n3,c\n")
    big = tmp / "big.csv"
    big.write_text("".join(f"{i},{'x' * (i % 50)}\n" for i in range(10, 40_000)))
    again = tmp / "again.csv"
    again.write_text("2,B\n4,d\n")
    latin = tmp / "latin1.csv"
    latin.write_bytes("5;café\n6;naïve\n".encode("latin1"))
    vars_ = tmp / "vars.csv"
    vars_.write_text("7|seven\n8|eight\n")
    return [
        SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(60))",
        "CREATE TABLE app.c (id INT PRIMARY KEY, t_id INT, FOREIGN KEY (t_id)"
        " REFERENCES app.t (id) ON DELETE CASCADE)",
        (1, f"SET SESSION binlog_format = {binlog_format}"),
        (1, f"LOAD DATA INFILE '{small}' INTO TABLE app.t FIELDS TERMINATED BY ','"),
        (1, f"LOAD DATA INFILE '{big}' INTO TABLE app.t FIELDS TERMINATED BY ','"),
        (1, f"LOAD DATA INFILE '{again}' REPLACE INTO TABLE app.t FIELDS TERMINATED BY ','"),
        (1, f"LOAD DATA INFILE '{again}' IGNORE INTO TABLE app.t FIELDS TERMINATED BY ','"),
        (1, f"LOAD DATA INFILE '{latin}' INTO TABLE app.t CHARACTER SET latin1"
            " FIELDS TERMINATED BY ';'"),
        (1, f"LOAD DATA INFILE '{vars_}' INTO TABLE app.t FIELDS TERMINATED BY '|'"
            " (@i, v) SET id = @i + 100000"),
        (1, "BEGIN"),
        (1, f"LOAD DATA INFILE '{small}' INTO TABLE app.c FIELDS TERMINATED BY ','"
            " (id, @x) SET t_id = id"),
        (1, "DELETE FROM app.t WHERE id = 1"),
        (1, "COMMIT"),
        "ALTER TABLE app.t ADD COLUMN w INT",
        (1, f"LOAD DATA INFILE '{again}' REPLACE INTO TABLE app.t FIELDS TERMINATED BY ','"
            " (id, v) SET w = 9"),
    ]


@pytest.mark.parametrize("binlog_format, held", [
    ("STATEMENT", "memory"), ("STATEMENT", "file"), ("MIXED", "memory")])
def test_a_statement_format_load_data(env: Env, spark, monkeypatch, binlog_format: str,
                                      held: str) -> None:
    """LOAD DATA in statement format (MIXED may too: MariaDB's default) logs the file itself
    (BEGIN_LOAD_QUERY, APPEND_BLOCK ... events) and the statement: a replica writes the
    file and loads it.  The sync runs it as LOAD DATA LOCAL, the file sent from the relay
    log's bytes (it stopped with one line).  A file of many blocks, REPLACE and IGNORE, a
    column list with SET, a character set clause, a load into a table with a foreign key.
    A file bigger than the driver holds in memory is gathered in a temporary file."""
    made: list[tempfile.SpooledTemporaryFile[bytes]] = []
    if held == "file":
        monkeypatch.setattr(serial, "LOAD_IN_MEMORY", 4096)
        gather = serial.load_file
        monkeypatch.setattr(serial, "load_file", lambda: made.append(gather()) or made[-1])
    converge(env, spark, _load_data_steps(env.tmp, binlog_format))
    if held == "file":
        assert any(file._rolled for file in made)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.t") == 3 + 39_990 + 1 + 2 + 2 - 1
    assert env.downstream.scalar("SELECT v FROM app.t WHERE id = 5") == "café"
    kinds = {row[2] for name, _size in env.upstream.binlog_files()
             for row in env.upstream.execute(f"SHOW BINLOG EVENTS IN '{name}'")}
    # (MariaDB 10.11 in MIXED logs these loads as rows.)
    loads = {"Begin_load_query", "Append_block", "Execute_load_query"}
    assert loads <= kinds if binlog_format == "STATEMENT" else "Write_rows_v1" in kinds, kinds


def test_a_load_data_file_with_no_room_to_gather_it_stops_with_one_line(
        env: Env, spark, monkeypatch) -> None:
    """The temporary directory full while a LOAD DATA's file is gathered: one line saying
    where and what to do, nothing of the load applied."""
    class Full:
        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            pass

    monkeypatch.setattr(serial, "load_file", Full)
    env.run(_load_data_steps(env.tmp, "STATEMENT"))
    env.relay()
    with pytest.raises(ApplyError, match=r"cannot gather a statement-format LOAD DATA's"
                                         r" file .*No space left on device") as err:
        env.sync(spark)
    assert "TMPDIR" in str(err.value) and "\n" not in str(err.value)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.t") == 0


@pytest.mark.parametrize("drift, mode, error, left", [
    ("INSERT INTO app.t VALUES (2, 'drift')", "DEFAULT", 1062, ((2, "drift"),)),
    ("ALTER TABLE app.t MODIFY v VARCHAR(3)", "'STRICT_ALL_TABLES'", 1265, ()),
], ids=["duplicate", "strict-conversion"])
def test_a_load_data_that_meets_what_stops_it_only_downstream_stops(
        env: Env, spark, drift: str, mode: str, error: int, left: tuple) -> None:
    """A downstream that drifted stops a plain LOAD DATA (neither IGNORE nor REPLACE) where
    a replica's load from a file stops: a duplicate key; under STRICT_ALL_TABLES a value its
    (narrower) column cannot hold.  LOCAL would make a warning of either and go on."""
    data = env.tmp / "rows.csv"
    data.write_text("1,abcd\n2,b\n")
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(10))"])
    env.relay()
    env.sync(spark)
    env.downstream.execute(drift)
    env.run([(1, f"SET SESSION binlog_format = STATEMENT, sql_mode = {mode}"),
             (1, f"LOAD DATA INFILE '{data}' INTO TABLE app.t FIELDS TERMINATED BY ','")])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=f"met error {error} downstream"):
        env.sync(spark)
    assert env.downstream.execute("SELECT * FROM app.t") == left


def test_a_load_data_that_failed_part_way_upstream_stops_before_it_runs(env: Env,
                                                                          spark) -> None:
    """Into a non-transactional table a load that failed part way is logged with its error
    for what it did; LOCAL cannot stop at the same row: the sync stops with one line."""
    data = env.tmp / "rows.csv"
    data.write_text("1,a\n1,dup\n2,b\n")
    env.run([SCHEMA, "CREATE TABLE app.m (id INT PRIMARY KEY, v VARCHAR(5)) ENGINE=MyISAM",
             (1, "SET SESSION binlog_format = STATEMENT")])
    with pytest.raises(pymysql.err.IntegrityError):
        env.run([(1, f"LOAD DATA INFILE '{data}' INTO TABLE app.m FIELDS TERMINATED BY ','")])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match="failed part way upstream"):
        env.sync(spark)
    assert env.downstream.execute("SELECT COUNT(*) FROM app.m") == ((0,),)


def test_a_statement_format_load_data_replayed_after_crashes(
        mariadb_factory, tmp_path: Path, spark, monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path, sync={"batch-bytes": 16 * 1024})
    env.run(_load_data_steps(tmp_path, "STATEMENT"))
    env.relay()
    assert sync_with_crashes(env, spark, monkeypatch) >= 5
    assert_converged(env)


def test_the_relaylog_source_shows_statements_and_hides_rolled_back_xa(env: Env,
                                                                        spark) -> None:
    env.run([*XA[:2], (3, "SET SESSION binlog_format = STATEMENT"),
             (3, "INSERT INTO app.x VALUES (7, 7)"), *XA[2:]])
    env.relay()
    rows = spark.read.format("relaylog").option("relay_dir", str(env.relay_dir)).load() \
        .select("op", "query", "after").collect()
    assert any(r.op == "ddl" and "VALUES (7, 7)" in r.query for r in rows)
    inserted = sorted(int(r.after[0]) for r in rows if r.op == "insert")
    assert inserted == [2, 3, 4, 5]  # not 1: that XA was rolled back


def test_the_relaylog_source_flags_what_a_rollback_undid(env: Env, spark) -> None:
    """A group the upstream rolled back, and rows a ROLLBACK TO undid, are in the binlog
    when they also changed a non-transactional table: the source shows them with
    ``rolled_back`` (their InnoDB rows never committed; their MyISAM ones did)."""
    env.run(SAVEPOINTS)
    env.relay()
    rows = spark.read.format("relaylog").option("relay_dir", str(env.relay_dir)).load() \
        .select("table", "op", "query", "after", "rolled_back").collect()
    changed = sorted((r.table, int(r.after[0]), r.rolled_back) for r in rows
                     if r.op == "insert")
    # (The MyISAM row of the first transaction is logged as a group of its own, before it:
    # it committed at once.)
    assert changed == [("a", 1, False), ("a", 2, True), ("a", 3, False), ("a", 5, False),
                       ("a", 6, False), ("m", 2, False)]
    statements = {r.query: r.rolled_back for r in rows if r.op == "ddl"}
    assert statements["INSERT INTO app.a VALUES (20)"] is True
    assert statements["INSERT INTO app.a VALUES (21)"] is True
    assert statements["INSERT INTO app.m VALUES (21)"] is True
    assert statements["INSERT INTO app.a VALUES (4)"] is False
    assert not any(v for q, v in statements.items() if "CREATE TABLE" in q)


VERSIONED = [
    SCHEMA,
    # Implicit (invisible) row_start/row_end, a column left out of versioning, a keyless
    # table, explicit period columns.
    "CREATE TABLE app.v (id INT PRIMARY KEY, x INT, note VARCHAR(10) WITHOUT SYSTEM"
    " VERSIONING) WITH SYSTEM VERSIONING",
    "CREATE TABLE app.k (a INT, b INT) WITH SYSTEM VERSIONING",
    "CREATE TABLE app.e (id INT PRIMARY KEY, x INT,"
    " vs TIMESTAMP(6) GENERATED ALWAYS AS ROW START INVISIBLE,"
    " ve TIMESTAMP(6) GENERATED ALWAYS AS ROW END INVISIBLE,"
    " PERIOD FOR SYSTEM_TIME (vs, ve)) WITH SYSTEM VERSIONING",
    "INSERT INTO app.v (id, x) VALUES (1, 1), (2, 2), (3, 3), (4, 4)",
    "INSERT INTO app.k VALUES (1, 1), (1, 1), (2, 2)",
    "INSERT INTO app.e (id, x) VALUES (1, 1), (2, 2)",
    "UPDATE app.v SET x = x + 10 WHERE id <= 2",
    "UPDATE app.v SET note = 'n' WHERE id = 3",
    "DELETE FROM app.v WHERE id = 4",
    "REPLACE INTO app.v (id, x) VALUES (1, 100)",
    "INSERT INTO app.v (id, x) VALUES (2, 0) ON DUPLICATE KEY UPDATE x = 200",
    "INSERT INTO app.v (id, x) VALUES (4, 44)",
    "UPDATE app.k SET b = 9 WHERE a = 1 LIMIT 1",
    "DELETE FROM app.k WHERE a = 2",
    # A keyless versioned table's rows a collation takes for one are told apart.
    "CREATE TABLE app.kt (who VARCHAR(10) COLLATE utf8mb4_general_ci, n INT)"
    " WITH SYSTEM VERSIONING",
    "INSERT INTO app.kt VALUES ('bob', 1), ('BOB', 1), ('ann', 1), ('ANN', 1)",
    "UPDATE app.kt SET n = 2 WHERE who = BINARY 'BOB'",
    "DELETE FROM app.kt WHERE who = BINARY 'ANN'",
    "BEGIN",
    "UPDATE app.e SET x = 10 WHERE id = 1",
    "UPDATE app.e SET x = 11 WHERE id = 1",
    "DELETE FROM app.e WHERE id = 2",
    "COMMIT",
    (1, "SET SESSION system_versioning_insert_history = 1"),
    (1, "INSERT INTO app.v (id, x, row_start, row_end) VALUES"
        " (9, 9, '2001-01-01 00:00:00', '2002-01-01 00:00:00.5')"),
    "DELETE HISTORY FROM app.k",
    "UPDATE app.v SET x = x + 1",
    # Statement format: the server versions the rows here as it did upstream, at the
    # statement's logged time.
    (2, "SET SESSION binlog_format = STATEMENT"),
    (2, "UPDATE app.v SET x = x * 2 WHERE id < 3"),
    (2, "DELETE FROM app.v WHERE id = 9"),
    # DDL on a versioned table (allowed upstream by the session; a replica applies it).
    (3, "SET SESSION system_versioning_alter_history = KEEP"),
    (3, "ALTER TABLE app.v ADD COLUMN y INT DEFAULT 5"),
    "UPDATE app.v SET y = 6 WHERE id = 1",
]

SEQUENCES = [
    SCHEMA,
    "CREATE SEQUENCE app.s START WITH 10 INCREMENT BY 5 CACHE 3",
    "CREATE SEQUENCE app.n NOCACHE",
    "SELECT NEXTVAL(app.s)",
    "SELECT NEXTVAL(app.s)",
    "SELECT NEXTVAL(app.s)",
    "SELECT NEXTVAL(app.s)",
    "SELECT NEXTVAL(app.n)",
    "SELECT SETVAL(app.n, 100)",
    "SELECT SETVAL(app.n, 50)",
    "CREATE TABLE app.t (id INT PRIMARY KEY DEFAULT NEXTVAL(app.s), y INT)",
    "INSERT INTO app.t (y) VALUES (1), (2), (3), (4)",
    "ALTER SEQUENCE app.s RESTART WITH 7 INCREMENT BY 2",
    "INSERT INTO app.t (y) VALUES (5)",
    (1, "SET SESSION binlog_format = MIXED"),
    (1, "INSERT INTO app.t (y) VALUES (6)"),
    (1, "SELECT NEXTVAL(app.n)"),
    "CREATE SEQUENCE app.gone",
    "SELECT NEXTVAL(app.gone)",
    "DROP SEQUENCE app.gone",
]


def test_system_versioned_tables(env: Env, spark) -> None:
    converge(env, spark, VERSIONED)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.v FOR SYSTEM_TIME ALL") > 5


def test_a_table_versioned_by_transaction_id_is_versioned_by_the_downstream(
        mariadb_factory, tmp_path: Path, spark) -> None:
    """MariaDB logs DML of such a table as statements, whatever binlog_format says; a
    replica re-runs them and versions the rows with its own transaction ids: so do we."""
    env = make_env(mariadb_factory, tmp_path)
    env.run([SCHEMA, "CREATE TABLE app.w (id INT PRIMARY KEY, x INT,"
             " s BIGINT UNSIGNED GENERATED ALWAYS AS ROW START,"
             " e BIGINT UNSIGNED GENERATED ALWAYS AS ROW END,"
             " PERIOD FOR SYSTEM_TIME (s, e)) WITH SYSTEM VERSIONING ENGINE=InnoDB",
             "INSERT INTO app.w (id, x) VALUES (1, 1), (2, 2)",
             "UPDATE app.w SET x = 3 WHERE id = 1", "DELETE FROM app.w WHERE id = 2"])
    env.relay()
    env.sync(spark)
    rows = "SELECT id, x, e = 18446744073709551615 FROM app.w FOR SYSTEM_TIME ALL ORDER BY 1, 2"
    assert env.downstream.execute(rows) == env.upstream.execute(rows)
    assert len(env.downstream.execute(rows)) == 3


def test_sequences(env: Env, spark) -> None:
    converge(env, spark, SEQUENCES)
    # A NEXTVAL downstream continues where a native replica's would: after the values the
    # upstream reserved (its cache is its own).
    assert env.downstream.scalar("SELECT NEXTVAL(app.s)") == \
        env.upstream.scalar("SELECT next_not_cached_value FROM app.s")


COLLATED_KEYS = [
    SCHEMA,
    # Keys the server compares by collation: case, accents and trailing spaces collide.
    "CREATE TABLE app.ci (k VARCHAR(10) PRIMARY KEY, v INT)"
    " CHARSET utf8mb4 COLLATE utf8mb4_general_ci",
    "INSERT INTO app.ci VALUES ('a', 1)",
    "UPDATE app.ci SET k = 'A' WHERE k = 'a'",
    "INSERT INTO app.ci VALUES ('x', 1)",
    "DELETE FROM app.ci WHERE k = 'x'",
    "INSERT INTO app.ci VALUES ('X ', 2)",
    "INSERT INTO app.ci VALUES ('m', 1)",
    "UPDATE app.ci SET k = 'n' WHERE k = 'm'",
    "INSERT INTO app.ci VALUES ('M', 2)",
    "INSERT INTO app.ci VALUES ('é', 3)",
    "DELETE FROM app.ci WHERE k = 'é'",
    "INSERT INTO app.ci VALUES ('E', 4)",
    "CREATE TABLE app.cu (id INT PRIMARY KEY, u VARCHAR(10) UNIQUE) COLLATE latin1_swedish_ci",
    "INSERT INTO app.cu VALUES (1, 'a')",
    "UPDATE app.cu SET u = 'b' WHERE id = 1",
    "INSERT INTO app.cu VALUES (2, 'A')",
    "UPDATE app.cu SET u = 'c' WHERE id = 2",
    "UPDATE app.cu SET u = 'A ' WHERE id = 1",
]


def test_collated_keys(env: Env, spark) -> None:
    converge(env, spark, COLLATED_KEYS)


ODD_KEYS = [
    SCHEMA,
    "CREATE TABLE app.f (k FLOAT PRIMARY KEY, v INT)",
    "INSERT INTO app.f VALUES (0.1, 1), (1e30, 2), (-3.25, 3)",
    "UPDATE app.f SET v = 9 WHERE k > 0",
    "DELETE FROM app.f WHERE k < 0",
    "CREATE TABLE app.d (k DECIMAL(20,6) PRIMARY KEY, b BIT(5), e ENUM('x','y','z'), v INT)",
    "INSERT INTO app.d VALUES (1.5, b'10101', 'y', 1), (-0.000001, b'0', 'x', 2)",
    "UPDATE app.d SET v = v + 1",
    "DELETE FROM app.d WHERE k = 1.5",
    "CREATE TABLE app.bk (k BINARY(4) PRIMARY KEY, e ENUM('p','q') NOT NULL, v INT,"
    " UNIQUE (e, v))",
    "INSERT INTO app.bk VALUES (x'61000000', 'p', 1), (x'61000001', 'q', 2)",
    "UPDATE app.bk SET v = 5 WHERE k = x'61000000'",
    "DELETE FROM app.bk WHERE k = 'a'",
    "CREATE TABLE app.bitk (k BIT(10) PRIMARY KEY, v INT)",
    "INSERT INTO app.bitk VALUES (b'1', 1), (b'1111111111', 2)",
    "UPDATE app.bitk SET v = 3 WHERE k = 1",
    "CREATE TABLE app.ek (k ENUM('a','b','c') PRIMARY KEY, s SET('u','v'), v INT)",
    "INSERT INTO app.ek VALUES ('b', 'u,v', 1), ('c', '', 2)",
    "UPDATE app.ek SET k = 'a' WHERE k = 'b'",
]


def test_keys_of_float_decimal_binary_bit_and_enum_columns(env: Env, spark) -> None:
    converge(env, spark, ODD_KEYS)


@pytest.mark.parametrize("rules", ["read", "left"])
def test_keys_one_collation_takes_for_one_in_a_table_made_during_the_sync(
        env: Env, spark, monkeypatch, rules: str) -> None:
    """Tables made in the range, keyed by text that ``utf8mb4_general_ci`` compares as one
    (every character beyond the BMP) and ``fold_key`` does not: a row's key deleted and
    another spelling of it inserted in one batch.  Their columns are read after the CREATE
    TABLE; and were the rules left as they were, the survivors still go to one task."""
    if rules == "left":
        monkeypatch.setattr(sync_module, "leaves_rules", lambda *_args: True)
    steps: list[str] = [SCHEMA]
    for i in range(6):
        steps += [f"CREATE TABLE app.t{i} (k VARCHAR(8) PRIMARY KEY, v INT) CHARSET utf8mb4"
                  " COLLATE utf8mb4_general_ci",
                  f"INSERT INTO app.t{i} VALUES ('\U0001F600', 1), ('a{i}', 1)"]
    steps.append("CREATE TABLE app.barrier (id INT PRIMARY KEY)")
    for i in range(6):
        steps += [f"DELETE FROM app.t{i} WHERE k = '\U0001F600'",
                  f"INSERT INTO app.t{i} VALUES ('\U0001F601', 2), ('b{i}', 2)"]
    converge(env, spark, steps)


def test_decimal_keys_one_double_cannot_tell_apart(env: Env, spark) -> None:
    """An order book's prices: DECIMAL keys that differ past a double's precision.  Deleted
    many at a time (one statement for a batch's deletes, the table scanned), each must meet
    its own row only: a list of quoted values would be compared as doubles, and take every
    row near one of them."""
    rates = [f"1.{i:018d}" for i in range(1, 2001)]
    converge(env, spark, [
        SCHEMA,
        "CREATE TABLE app.book (rate DECIMAL(36,18) PRIMARY KEY, qty INT)",
        "INSERT INTO app.book VALUES " + ", ".join(f"({r}, 1)" for r in rates),
        "CREATE TABLE app.barrier (id INT PRIMARY KEY)",  # the deletes in a batch of their own
        "DELETE FROM app.book WHERE rate IN (" + ", ".join(rates[::4]) + ")",
        "UPDATE app.book SET qty = 2 WHERE rate IN (" + ", ".join(rates[1::4]) + ")",
    ])
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.book") == 1500


UNKEYED_PARTITIONED_INVISIBLE = [
    SCHEMA,
    "CREATE TABLE app.np (a INT, b VARCHAR(5), c INT NULL)",
    "INSERT INTO app.np VALUES (1, 'x', NULL), (1, 'x', NULL), (2, 'y', 3)",
    "UPDATE app.np SET c = 7 WHERE a = 1 LIMIT 1",
    "DELETE FROM app.np WHERE a = 1 AND c IS NULL",
    "INSERT INTO app.np VALUES (1, 'x', NULL)",
    "CREATE TABLE app.nu (id INT NULL, u INT NULL, UNIQUE KEY (u))",
    "INSERT INTO app.nu VALUES (1, NULL), (2, NULL), (3, 3)",
    "UPDATE app.nu SET u = 4 WHERE id = 1",
    "UPDATE app.nu SET u = NULL WHERE id = 3",
    "CREATE TABLE app.p (id INT, r INT, v INT, PRIMARY KEY (id, r)) PARTITION BY RANGE (r)"
    " (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20),"
    " PARTITION p2 VALUES LESS THAN MAXVALUE)",
    "INSERT INTO app.p VALUES (1, 5, 1), (2, 15, 2), (3, 25, 3)",
    "UPDATE app.p SET r = 16 WHERE id = 1",
    "ALTER TABLE app.p TRUNCATE PARTITION p2",
    "INSERT INTO app.p VALUES (4, 30, 4)",
    "ALTER TABLE app.p DROP PARTITION p0",
    "INSERT INTO app.p VALUES (5, 12, 5)",
    "CREATE TABLE app.inv (id INT PRIMARY KEY, h INT INVISIBLE DEFAULT 5, v INT)",
    "INSERT INTO app.inv (id, h, v) VALUES (1, 9, 1)",
    "INSERT INTO app.inv VALUES (2, 2)",
    "UPDATE app.inv SET h = 3 WHERE id = 2",
    "ALTER TABLE app.inv ADD COLUMN w INT INVISIBLE",
    "UPDATE app.inv SET w = 1",
    # Keyless rows that a collation takes for one (case, PAD SPACE even under a _bin
    # collation, characters beyond the BMP under utf8mb4_general_ci) are told apart by
    # their bytes, as a replica does; a latin1 column, its text converted.
    "CREATE TABLE app.nc (who VARCHAR(20), n INT) DEFAULT CHARSET=utf8mb4"
    " COLLATE=utf8mb4_general_ci",
    "INSERT INTO app.nc VALUES ('bob', 1), ('BOB', 1), ('😀', 1), ('😃', 1)",
    "UPDATE app.nc SET n = 2 WHERE who IN (BINARY 'BOB', BINARY '😃')",
    "CREATE TABLE app.nb (b VARCHAR(5) COLLATE utf8mb4_bin, l VARCHAR(5) CHARACTER SET"
    " latin1)",
    "INSERT INTO app.nb VALUES ('php', 'é'), ('php ', 'é'), ('x', 'é'), ('x', 'É')",
    "DELETE FROM app.nb WHERE HEX(b) = '70687020' OR l = BINARY 'É'",
    # (Values whose text is not the server's own spelling of the stored value stay matched
    # by their type.)
    "CREATE TABLE app.nf (f FLOAT, d DOUBLE, t DATETIME(6), tm TIME(3), ts TIMESTAMP(2) NULL,"
    " j JSON, n DECIMAL(6,2), e ENUM('x', 'y'))",
    "INSERT INTO app.nf VALUES (0.1, 1.1, '2024-01-02 03:04:05.123456', '-01:02:03.500',"
    " '2024-01-02 03:04:05.25', '{\"a\": [1, 2.5]}', 1.50, 'y'), (0.1, 1.1, NULL, NULL,"
    " NULL, NULL, NULL, 'x')",
    "UPDATE app.nf SET f = 2.5",
    "DELETE FROM app.nf WHERE e = 'y'",
]


def test_unkeyed_partitioned_and_invisible(env: Env, spark) -> None:
    converge(env, spark, UNKEYED_PARTITIONED_INVISIBLE)


# UNIQUE keys too long to index (BLOB/TEXT, long VARCHAR): MariaDB gives each a hidden
# DB_ROW_HASH_n column after the others, which the binlog logs with the rows and no
# statement may name (it wrote them: "Unknown column 'DB_ROW_HASH_1'").
LONG_UNIQUE = [
    SCHEMA,
    "CREATE TABLE app.lu (id INT PRIMARY KEY, b BLOB, t TEXT, UNIQUE (b), UNIQUE (t, id))",
    "INSERT INTO app.lu VALUES (1, 'x', 'y'), (2, 'z', 'w')",
    "UPDATE app.lu SET b = 'q' WHERE id = 1",
    "DELETE FROM app.lu WHERE id = 2",
    "ALTER TABLE app.lu ADD COLUMN z INT FIRST",
    "INSERT INTO app.lu VALUES (5, 3, 'x3', 'y')",
    "CREATE TABLE app.nk (b BLOB, v INT, UNIQUE (b))",
    "INSERT INTO app.nk VALUES ('a', 1), ('b', 2)",
    "UPDATE app.nk SET v = 3 WHERE b = 'a'",
    "DELETE FROM app.nk WHERE b = 'b'",
    "CREATE TABLE app.cu (id INT PRIMARY KEY, u VARCHAR(2000)) CHARSET utf8mb4",
    "CREATE UNIQUE INDEX uu ON app.cu (u)",
    "INSERT INTO app.cu VALUES (1, REPEAT('a', 1500)), (3, 'd')",
    "UPDATE app.cu SET u = 'b' WHERE id = 1",
    "DROP INDEX uu ON app.cu",
    "INSERT INTO app.cu VALUES (2, 'c')",
    "UPDATE app.cu SET u = 'e' WHERE id = 3",
]


def test_long_unique_keys(env: Env, spark) -> None:
    converge(env, spark, LONG_UNIQUE)


# MariaDB's COMPRESSED columns are logged as stored: compressed, in types of their own.
COMPRESSED_COLUMNS = [
    SCHEMA,
    "CREATE TABLE app.z (id INT PRIMARY KEY, v VARCHAR(300) COMPRESSED CHARSET utf8mb4,"
    " b BLOB COMPRESSED, t TEXT COMPRESSED CHARSET latin1, w VARCHAR(20))",
    "INSERT INTO app.z VALUES (1, REPEAT('é', 300), REPEAT(x'00ff', 900), 'café', 'x'),"
    " (2, '', '', '', ''), (3, 'a', x'80', NULL, 'y')",
    "UPDATE app.z SET v = CONCAT(v, 'z') WHERE id = 2",
    "UPDATE app.z SET t = REPEAT('ü', 500) WHERE id = 3",
    "DELETE FROM app.z WHERE id = 1",
]


def test_compressed_columns(env: Env, spark) -> None:
    converge(env, spark, COMPRESSED_COLUMNS)


SESSION_TYPES_AND_MULTI_TABLE = [
    SCHEMA,
    "CREATE TABLE app.t (id INT AUTO_INCREMENT PRIMARY KEY, ts TIMESTAMP(3) NULL,"
    " dt DATETIME NULL, j JSON, y YEAR)",
    "SET time_zone = '+05:00'",
    "INSERT INTO app.t (ts, dt, j, y) VALUES ('2026-03-01 01:02:03.456', '2026-03-01 01:02:03',"
    " '{\"a\": [1, 2]}', 2026)",
    "SET time_zone = 'SYSTEM'",
    "INSERT INTO app.t (ts, dt, j, y) VALUES ('1970-01-01 05:00:01', NULL,"
    " JSON_OBJECT('k', 'é'), 70)",
    "UPDATE app.t SET j = JSON_SET(j, '$.b', 1) WHERE id = 1",
    "INSERT INTO app.t VALUES (0, NULL, NULL, NULL, NULL)",
    "CREATE TABLE app.dup (id INT PRIMARY KEY, n INT, UNIQUE KEY (n))",
    "INSERT INTO app.dup VALUES (1, 1), (2, 2)",
    "INSERT INTO app.dup VALUES (3, 1) ON DUPLICATE KEY UPDATE n = 10",
    "REPLACE INTO app.dup VALUES (4, 2)",
    "CREATE TABLE app.m1 (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE app.m2 (id INT PRIMARY KEY, w INT)",
    "INSERT INTO app.m1 VALUES (1, 1), (2, 2), (3, 3)",
    "INSERT INTO app.m2 VALUES (1, 10), (2, 20)",
    "UPDATE app.m1 JOIN app.m2 USING (id) SET v = w, w = w + 1",
    "DELETE app.m1, app.m2 FROM app.m1 JOIN app.m2 USING (id) WHERE m1.id = 1",
    "TRUNCATE app.m2",
    "INSERT INTO app.m2 VALUES (7, 7)",
    "CREATE TEMPORARY TABLE app.tmp (id INT)",
    "INSERT INTO app.tmp VALUES (1), (2)",
    "INSERT INTO app.m1 SELECT id + 100, id FROM app.tmp",
    "DROP TEMPORARY TABLE app.tmp",
]


def test_time_zones_json_upserts_and_multi_table_statements(env: Env, spark) -> None:
    converge(env, spark, SESSION_TYPES_AND_MULTI_TABLE)


TEMPORARY_TABLES = [
    SCHEMA,
    "CREATE TABLE app.t (id INT PRIMARY KEY, v BIGINT, who INT)",
    "CREATE TABLE app.u (id INT PRIMARY KEY)",
    (1, "SET SESSION binlog_format = 'MIXED'"),
    (2, "SET SESSION binlog_format = 'MIXED'"),
    (3, "SET SESSION binlog_format = 'STATEMENT'"),
    # Two sessions' temporary tables of one name, interleaved: each its own, as on a replica
    # (MariaDB keys them by the session's pseudo_thread_id).
    (1, "CREATE TEMPORARY TABLE app.tmp (id INT)"),
    (2, "CREATE TEMPORARY TABLE app.tmp (id INT, n INT)"),
    (1, "INSERT INTO app.tmp VALUES (1), (2)"),
    (2, "INSERT INTO app.tmp VALUES (10, 1), (20, 2), (30, 3)"),
    # DDL between (batches of their own), then the temporary tables used again.
    "CREATE TABLE app.w (id INT PRIMARY KEY)",
    (1, "INSERT INTO app.t SELECT id, (SELECT COUNT(*) FROM app.tmp), 1 FROM app.tmp"),
    (2, "INSERT INTO app.t SELECT id, n, 2 FROM app.tmp"),
    # IF NOT EXISTS and OR REPLACE meet the session's own table, not another's.
    (3, "CREATE TEMPORARY TABLE IF NOT EXISTS app.tmp (id INT)"),
    (3, "INSERT INTO app.tmp VALUES (100)"),
    (1, "CREATE OR REPLACE TEMPORARY TABLE app.tmp (id INT)"),
    (1, "INSERT INTO app.tmp VALUES (3)"),
    (3, "INSERT INTO app.t SELECT id, (SELECT COUNT(*) FROM app.tmp), 3 FROM app.tmp"),
    # A session that ends drops its own (the upstream logs DROP ... IF EXISTS), not others'.
    (1, None),
    (2, "INSERT INTO app.t SELECT id + 1, n, 2 FROM app.tmp"),
    # A table made from a temporary one: a DDL in its session's context.
    (2, "CREATE TABLE app.copy AS SELECT * FROM app.tmp"),
    # A temporary table in front of a real one of its name: the session's statements see
    # it; rows logged for the real table right after that session's DDL (rows between
    # DDL: replayed in the same downstream session) go to the real one.
    (3, "CREATE TEMPORARY TABLE app.u (id INT PRIMARY KEY)"),
    (3, "INSERT INTO app.u VALUES (7)"),
    (3, "CREATE TABLE app.z (id INT PRIMARY KEY)"),
    "INSERT INTO app.u VALUES (1)",
    "ALTER TABLE app.w ADD COLUMN x INT",
    (3, "INSERT INTO app.t SELECT id + 1000, 0, 3 FROM app.u"),
    (3, "DROP TEMPORARY TABLE app.u"),
    (3, "INSERT INTO app.u VALUES (2)"),
    # CONNECTION_ID() is the upstream session's.
    (3, "INSERT INTO app.t VALUES (5000, CONNECTION_ID(), 3)"),
    (2, "INSERT INTO app.t VALUES (5001, CONNECTION_ID(), 2)"),
]


def test_temporary_tables_of_several_sessions(env: Env, spark) -> None:
    converge(env, spark, TEMPORARY_TABLES)


def test_a_temporary_table_lost_with_a_restart_stops_the_sync(env: Env, spark) -> None:
    """A statement-format session's temporary table lives in the sync's downstream session
    only: a sync restarted while the upstream session still uses it cannot replay that use
    (as a replica whose server restarted); it stops with one line saying so."""
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY)",
             (1, "SET SESSION binlog_format = 'MIXED'"),
             (1, "CREATE TEMPORARY TABLE app.tmp (id INT)"),
             (1, "INSERT INTO app.tmp VALUES (1)")])
    relay_until_caught_up(env.config, env.upstream, env.relay_dir, env.tmp / "relay.log")
    env.sync(spark)
    env.run([(1, "INSERT INTO app.t SELECT * FROM app.tmp")])
    env.relay()
    with pytest.raises(DownstreamSchemaError, match="temporary table, it was lost"):
        env.sync(spark)  # a new process: a new downstream session
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.t") == 0


def test_an_upstream_restart_ends_its_sessions_temporary_tables(mariadb_factory,
                                                               tmp_path: Path,
                                                               spark) -> None:
    """The upstream crashed with a session's temporary table open (no DROP logged): after
    its restart, a new session with the same thread id must not find it downstream, as it
    does not upstream (a replica drops them at the restarted upstream's first binlog)."""
    env = make_env(mariadb_factory, tmp_path,
                   upstream_args=("--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1"))
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v INT)"])
    # Ids the restarted server gives out before the session's comes round again.
    spare = [env.upstream.connect() for _ in range(20)]
    temporary = [(1, "SET SESSION binlog_format = 'MIXED'"),
                 (1, "CREATE TEMPORARY TABLE IF NOT EXISTS app.tmp (id INT)")]
    env.run([*temporary, (1, "INSERT INTO app.tmp VALUES (1)")])
    thread = env.session(1).thread_id()
    pipeline = SyncPipeline(load_config(env.config), spark=spark)
    relay_until_caught_up(env.config, env.upstream, env.relay_dir, env.tmp / "relay.log")
    pipeline.run(until_caught_up=True)  # the temporary table is in its session now
    env.upstream.kill()
    env.connections.clear()
    del spare
    env.upstream.start()
    for _ in range(200):
        conn = env.upstream.connect()
        if conn.thread_id() == thread:
            env.connections[1] = conn
            break
        conn.close()
    assert env.connections, f"no session of thread id {thread} after the restart"
    env.run([*temporary, (1, "INSERT INTO app.tmp VALUES (2)"),
             (1, "INSERT INTO app.t SELECT id, 0 FROM app.tmp")])
    env.relay()
    pipeline.run(until_caught_up=True)
    assert_converged(env)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.t") == 1


def run_events(env: Env) -> None:
    """Events that run upstream for a while (their rows logged), made and altered in every
    form, then the upstream's scheduler stopped; the downstream's runs."""
    env.upstream.execute("SET GLOBAL event_scheduler = ON")
    env.downstream.execute("SET GLOBAL event_scheduler = ON")
    env.run([
        SCHEMA,
        "CREATE TABLE app.tick (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(8))",
        "CREATE TABLE app.counter (id INT PRIMARY KEY, n INT)",
        "INSERT INTO app.counter VALUES (1, 0)",
        "CREATE EVENT app.e ON SCHEDULE EVERY 1 SECOND ENABLE COMMENT 'ticks: DO it'"
        " DO INSERT INTO app.tick (what) VALUES ('e')",
        "CREATE DEFINER = CURRENT_USER EVENT IF NOT EXISTS app.c ON SCHEDULE EVERY 1 SECOND"
        " DO UPDATE app.counter SET n = n + 1",
        "CREATE EVENT app.off ON SCHEDULE EVERY 1 SECOND DISABLE"
        " DO INSERT INTO app.tick (what) VALUES ('off')",
        "CREATE EVENT app.once ON SCHEDULE AT CURRENT_TIMESTAMP + INTERVAL 1 SECOND"
        " ON COMPLETION PRESERVE DO INSERT INTO app.tick (what) VALUES ('once')",
        # As mysqldump writes one (a dump loaded upstream).
        "/*!50106 CREATE*/ /*!50117 DEFINER=`root`@`localhost`*/ /*!50106 EVENT app.dumped"
        " ON SCHEDULE EVERY 1 SECOND ON COMPLETION NOT PRESERVE ENABLE"
        " DO INSERT INTO app.tick (what) VALUES ('dumped') */",
    ])
    time.sleep(2.5)
    env.run(["ALTER EVENT app.off ENABLE", "ALTER EVENT app.c RENAME TO app.c2"])
    time.sleep(1.5)
    env.upstream.execute("SET GLOBAL event_scheduler = OFF")


def test_events_run_upstream_only(env: Env, spark) -> None:
    """As on a replica, the events the upstream makes do not run downstream
    (SLAVESIDE_DISABLED): their runs are in the binlog already."""
    run_events(env)
    env.relay()
    env.sync(spark)
    time.sleep(2.5)  # the downstream's scheduler would have run them meanwhile
    assert_converged(env)
    assert env.downstream.execute(
        "SELECT EVENT_NAME, STATUS FROM information_schema.EVENTS ORDER BY 1") == (
        ("c2", "SLAVESIDE_DISABLED"), ("dumped", "SLAVESIDE_DISABLED"),
        ("e", "SLAVESIDE_DISABLED"),
        ("off", "SLAVESIDE_DISABLED"), ("once", "SLAVESIDE_DISABLED"))


def test_events_replayed_after_a_crash(mariadb_factory, tmp_path: Path, spark,
                                       monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path, sync={"batch-bytes": 16 * 1024})
    run_events(env)
    env.relay()
    assert sync_with_crashes(env, spark, monkeypatch) >= 2
    time.sleep(2.5)
    assert_converged(env)
    assert {status for (status,) in env.downstream.execute(
        "SELECT STATUS FROM information_schema.EVENTS")} == {"SLAVESIDE_DISABLED"}


def test_an_applier_that_may_not_take_thread_ids(mariadb_factory, tmp_path: Path,
                                                spark) -> None:
    """An apply user without BINLOG REPLAY (or SUPER) cannot keep the upstream sessions'
    temporary tables apart, nor give CONNECTION_ID() theirs: statements without either are
    replayed, the first with either stops the sync with one line saying what to grant."""
    env = make_env(mariadb_factory, tmp_path, user="applier")
    for sql in ("CREATE USER 'applier'@'%'", "GRANT ALL ON *.* TO 'applier'@'%'",
                "REVOKE SUPER, BINLOG REPLAY ON *.* FROM 'applier'@'%'"):
        env.downstream.execute(sql)
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v BIGINT)",
             (1, "SET SESSION binlog_format = 'STATEMENT'"),
             (1, "INSERT INTO app.t VALUES (1, 1), (2, 2)"),
             (1, "UPDATE app.t SET v = v + 1")])
    converge(env, spark, [])
    for made in ("CREATE TEMPORARY TABLE app.tmp (id INT)",
                 "INSERT INTO app.t VALUES (3, CONNECTION_ID())"):
        env.run([(1, "SET SESSION binlog_format = 'STATEMENT'"), (1, made)])
        env.relay()
        with pytest.raises(UnfaithfulApplyError, match="BINLOG REPLAY") as stopped:
            env.sync(spark)
        assert "thread id" in str(stopped.value)
        env.downstream.execute("GRANT BINLOG REPLAY ON *.* TO 'applier'@'%'")
        converge(env, spark, [])
        env.downstream.execute("REVOKE BINLOG REPLAY ON *.* FROM 'applier'@'%'")


# Rows whose table maps carry no column names are applied by position: what the names,
# signedness, character sets and key of each column are comes from the downstream's table,
# which must follow every DDL before the rows (columns moved, dropped, renamed, a key
# dropped and made again, a table made again under its name by CREATE ... SELECT, tables
# swapped by a RENAME).
BY_POSITION = [
    SCHEMA,
    "CREATE TABLE app.u (id INT UNSIGNED PRIMARY KEY, t TINYINT UNSIGNED, s SMALLINT,"
    " m MEDIUMINT UNSIGNED, b BIGINT UNSIGNED, c CHAR(3) CHARSET latin1,"
    " k BINARY(4), e ENUM('x','y'), st SET('p','q'), f FLOAT, n VARCHAR(10) CHARSET ucs2)",
    "INSERT INTO app.u VALUES (4294967295, 255, -32768, 16777215, 18446744073709551615,"
    " 'é€', x'61000000', 'y', 'p,q', -1.5, 'ẞ'), (1, 0, 0, 0, 0, '', x'00', 'x', '', 0, '')",
    "UPDATE app.u SET t = 254, c = 'ü' WHERE id = 4294967295",
    "DELETE FROM app.u WHERE id = 1",
    "CREATE TABLE app.k (k BINARY(6) PRIMARY KEY, v INT)",
    "INSERT INTO app.k VALUES ('ab', 1), (x'616200000001', 2)",
    "UPDATE app.k SET v = 3 WHERE k = 'ab'",
    "DELETE FROM app.k WHERE k = x'616200000001'",
    "CREATE TABLE app.ci (k VARCHAR(10) PRIMARY KEY, v INT) COLLATE utf8mb4_general_ci",
    "INSERT INTO app.ci VALUES ('a', 1)",
    "UPDATE app.ci SET k = 'A' WHERE k = 'a'",
    "INSERT INTO app.ci VALUES ('x', 1)",
    "DELETE FROM app.ci WHERE k = 'x'",
    "INSERT INTO app.ci VALUES ('X ', 2)",
    "CREATE TABLE app.t (id INT PRIMARY KEY, a INT, b VARCHAR(10))",
    "INSERT INTO app.t VALUES (1, 1, 'one'), (2, 2, 'two')",
    "ALTER TABLE app.t ADD COLUMN z BIGINT FIRST",
    "UPDATE app.t SET z = 7, a = 10 WHERE id = 1",
    "INSERT INTO app.t VALUES (70, 3, 3, 'three')",
    "ALTER TABLE app.t MODIFY b VARCHAR(10) AFTER z, DROP COLUMN a",
    "UPDATE app.t SET b = 'uno' WHERE id = 1",
    "ALTER TABLE app.t RENAME COLUMN b TO bb",
    "INSERT INTO app.t VALUES (8, 'four', 4)",
    "UPDATE app.t SET z = 0 WHERE z IS NULL",
    "ALTER TABLE app.t DROP PRIMARY KEY, ADD PRIMARY KEY (z, id)",
    "UPDATE app.t SET bb = 'dos' WHERE id = 2",
    "DROP INDEX `PRIMARY` ON app.t",
    "INSERT INTO app.t VALUES (8, 'four', 4)",
    "DELETE FROM app.t WHERE id = 4 LIMIT 1",
    "CREATE TABLE app.t2 SELECT * FROM app.t",
    "CREATE OR REPLACE TABLE app.t (id INT PRIMARY KEY, w VARCHAR(5)) SELECT id, bb AS w"
    " FROM app.t2",
    "UPDATE app.t SET w = 'x' WHERE id = 1",
    "CREATE TABLE app.s1 (id INT PRIMARY KEY, v VARCHAR(5))",
    "CREATE TABLE app.s2 (v VARCHAR(5), id INT PRIMARY KEY)",
    "INSERT INTO app.s1 VALUES (1, 'a')",
    "INSERT INTO app.s2 VALUES ('b', 2)",
    "RENAME TABLE app.s1 TO app.tmp, app.s2 TO app.s1, app.tmp TO app.s2",
    "INSERT INTO app.s1 VALUES ('c', 3)",
    "INSERT INTO app.s2 VALUES (4, 'd')",
    "UPDATE app.s1 SET v = 'bb' WHERE id = 2",
]

_BY_POSITION_SCENARIOS = {
    "by-position": BY_POSITION, "foreign-keys": FOREIGN_KEYS, "generated": GENERATED,
    "rules-by-ddl": RULES_BY_DDL, "ddl-context": DDL_CONTEXT, "create-select": CREATE_SELECT,
    "create-select-rules": CREATE_SELECT_RULES, "stored-as-is": STORED_AS_IS,
    "wide-units": WIDE_UNITS, "unique-swaps": UNIQUE_SWAPS, "versioned": VERSIONED,
    "sequences": SEQUENCES, "collated-keys": COLLATED_KEYS, "odd-keys": ODD_KEYS,
    "unkeyed-partitioned-invisible": UNKEYED_PARTITIONED_INVISIBLE,
    "session-types": SESSION_TYPES_AND_MULTI_TABLE, "statements": STATEMENTS,
    "long-unique": LONG_UNIQUE, "compressed-columns": COMPRESSED_COLUMNS,
}


@pytest.mark.parametrize("steps", list(_BY_POSITION_SCENARIOS.values()),
                         ids=list(_BY_POSITION_SCENARIOS))
def test_rows_logged_without_column_names_applied_by_position(mariadb_factory, tmp_path: Path,
                                                              spark, steps) -> None:
    """MariaDB's default, binlog_row_metadata = NO_LOG, logs no column names, signedness,
    charsets or key: the relay says so at its start, and the sync, meeting such rows,
    reads the downstream's columns and applies them by position, as a replica does (it
    stopped with one line, and before that wrote ``Unknown column '@1'``)."""
    env = make_env(mariadb_factory, tmp_path, upstream_args=("--binlog-row-metadata=NO_LOG",))
    env.run(steps)
    env.relay()
    assert "binlog_row_metadata = NO_LOG" in (tmp_path / "relay.log").read_text()
    env.sync(spark)
    assert_converged(env)


def test_rows_by_position_met_in_a_replay_keep_its_temporary_tables(
        mariadb_factory, tmp_path: Path, spark) -> None:
    """Rows without column names first met while a run of DDL is replayed in order: the
    columns are read there and the replay goes on in its session, whose temporary table (a
    statement-format session's) a later statement reads.  (Applying the batch again from
    its checkpoint would have started a new session, without it.)"""
    env = make_env(mariadb_factory, tmp_path, upstream_args=("--binlog-row-metadata=NO_LOG",))
    converge(env, spark, [
        SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v INT)",
        (1, "SET SESSION binlog_format = STATEMENT"),
        (1, "CREATE TEMPORARY TABLE app.tmp (id INT)"),
        (1, "INSERT INTO app.tmp VALUES (1), (2)"),
        "ALTER TABLE app.t ADD COLUMN w INT",
        "INSERT INTO app.t VALUES (100, 1, 1)",
        "ALTER TABLE app.t ADD COLUMN x INT FIRST",
        (1, "INSERT INTO app.t (id, v) SELECT id + 10, id FROM app.tmp"),
        "UPDATE app.t SET x = 5 WHERE id = 100",
    ])


@pytest.mark.parametrize("sync", [{"driver-batch-bytes": 1 << 20}, {"mode": "strict"}],
                         ids=["driver", "strict"])
def test_rows_by_position_in_the_other_apply_modes(mariadb_factory, tmp_path: Path, spark,
                                                   sync: dict) -> None:
    env = make_env(mariadb_factory, tmp_path, sync=sync,
                   upstream_args=("--binlog-row-metadata=NO_LOG",))
    converge(env, spark, BY_POSITION)


@pytest.mark.parametrize("metadata", ["NO_LOG", "MINIMAL"])
def test_rows_by_position_replayed_after_crashes(mariadb_factory, tmp_path: Path, spark,
                                                 monkeypatch, metadata: str) -> None:
    """Every batch crashed once before its checkpoint and replayed, the range full of DDL
    that moves columns; MINIMAL (MySQL's default) logs signedness and charsets, not names."""
    env = make_env(mariadb_factory, tmp_path, sync={"batch-bytes": 16 * 1024},
                   upstream_args=(f"--binlog-row-metadata={metadata}",))
    env.run(BY_POSITION)
    env.relay()
    assert sync_with_crashes(env, spark, monkeypatch) > 5
    assert_converged(env)


@pytest.mark.parametrize("change, said", [
    ("ALTER TABLE app.t ADD COLUMN x INT AFTER id",
     "column 3 is VARCHAR in the binlog, the downstream's column 'v' in that place is INT"),
    ("ALTER TABLE app.t MODIFY v SMALLINT",
     "column 'v' is int in the binlog and smallint(6) downstream (narrower)"),
    ("ALTER TABLE app.t DROP COLUMN w",
     "the upstream logged 3 columns without their names, the downstream's table has 2"),
    ("DROP TABLE app.t", "a table the downstream does not have"),
], ids=["moved", "type", "fewer", "missing"])
def test_rows_by_position_into_a_table_that_differs_stop_with_one_line(
        mariadb_factory, tmp_path: Path, spark, change: str, said: str) -> None:
    """A downstream table that is not the upstream's stops the sync where a replica's SQL
    thread stops (a table definition that does not match, a missing table), rather than
    writing values into other columns.  (A column the downstream has after the logged ones
    is what a replica takes too: it keeps its default.)"""
    env = make_env(mariadb_factory, tmp_path, upstream_args=("--binlog-row-metadata=NO_LOG",))
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v INT, w VARCHAR(5))"])
    env.relay()
    env.sync(spark)
    env.downstream.execute(change)
    env.run(["INSERT INTO app.t VALUES (1, 1, 'a')"])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=re.escape(said)):
        env.sync(spark)
    if not change.startswith("DROP"):
        assert env.downstream.scalar("SELECT COUNT(*) FROM app.t") == 0


_COLUMNS_UPSTREAM = ("CREATE TABLE app.c (id INT PRIMARY KEY, i INT, d DECIMAL(10,4),"
                     " v VARCHAR(20) CHARACTER SET utf8mb4, dt DATETIME(6),"
                     " e ENUM('a','it''s','b\\\\c'), b VARBINARY(8), tx TEXT CHARACTER SET latin1)")
_COLUMNS_ROW = ("INSERT INTO app.c VALUES (1, -100000, 123456.1234, 'abcdefghij\u00e9',"
                " '2024-01-02 03:04:05.123456', 'it''s', 0x0102, 'caf\u00e9')")


_MISFITS = {
    "int": ("MODIFY i TINYINT", "column 'i' is int in the binlog and tinyint(4) downstream"
                                " (narrower)"),
    "unsigned": ("MODIFY i INT UNSIGNED", "(UNSIGNED downstream: negative values do not fit)"),
    "decimal": ("MODIFY d DECIMAL(10,2)",
                "column 'd' is decimal(10,4) in the binlog and decimal(10,2)"),
    "varchar": ("MODIFY v VARCHAR(5) CHARACTER SET utf8mb4",
                "and varchar(5) downstream (narrower)"),
    "charset": ("MODIFY v VARCHAR(20) CHARACTER SET latin1",
                "(utf8mb4 upstream, latin1 downstream)"),
    "fsp": ("MODIFY dt DATETIME", "and datetime downstream (fewer fractional digits)"),
    "enum": ("MODIFY e ENUM('a','b')", "(no member \"it's\")"),
    "binary": ("MODIFY b VARCHAR(8)", "(bytes upstream, text downstream)"),
    "text": ("MODIFY tx TINYTEXT CHARACTER SET latin1", "and tinytext downstream (narrower)"),
    "type": ("MODIFY i VARCHAR(20)", "column 'i' is int in the binlog and varchar(20)"),
}
#: Logged by position, a column's bytes are read as the downstream's type says (80 bytes
#: are 80 latin1 characters, an INT is UNSIGNED), and an ENUM's index or a string's bytes go
#: in as a replica stores them: no misfit then.  Another type is the replica's own check.
_MISFITS_BY_POSITION = {
    **{case: what for case, what in _MISFITS.items()
       if case not in ("enum", "binary", "unsigned")},
    "type": (_MISFITS["type"][0], "the downstream's column 'i' in that place is VARCHAR"),
    "charset": (_MISFITS["charset"][0], "varchar of 80 bytes in the binlog and varchar(20)"
                                        " downstream (narrower)"),
    "text": (_MISFITS["text"][0], "column 'tx' is text in the binlog and tinytext downstream"),
}


@pytest.mark.parametrize("metadata, change, said", [
    *[pytest.param("FULL", *what, id=case) for case, what in _MISFITS.items()],
    *[pytest.param("NO_LOG", *what, id=f"by-position-{case}")
      for case, what in _MISFITS_BY_POSITION.items()]])
def test_a_downstream_column_that_cannot_hold_the_logged_values_stops_with_one_line(
        mariadb_factory, tmp_path: Path, spark, metadata: str, change: str, said: str) -> None:
    """A replica's SQL thread stops on a column of another type, or narrower (error 1677);
    written by SQL under the applier's lenient sql_mode the values would be clipped,
    rounded or cut with a warning, and the checkpoint say consistent.  The sync stops
    before it writes a row of the table."""
    env = make_env(mariadb_factory, tmp_path,
                   upstream_args=(f"--binlog-row-metadata={metadata}",))
    env.run([SCHEMA, _COLUMNS_UPSTREAM])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER TABLE app.c " + change)
    env.run([_COLUMNS_ROW, "UPDATE app.c SET id = 2"])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=re.escape(said)):
        env.sync(spark)
    assert env.downstream.scalar("SELECT COUNT(*) FROM app.c") == 0


@pytest.mark.parametrize("path", ["spark", "driver"])
def test_a_null_into_a_column_only_the_downstream_has_not_null_stops(
        mariadb_factory, tmp_path: Path, spark, path: str) -> None:
    """A replica stores the column's default for it, a multi-row statement under the
    applier's sql_mode the type's zero: neither is the upstream's row.  The table map's
    null bit is no guide (every column of an outer join's inner table has it, the key's
    too): rows of a multi-table DELETE and UPDATE through a LEFT JOIN go in, the NULL
    value stops the sync."""
    sync = {} if path == "spark" else {"driver-batch-bytes": 1 << 30}
    env = make_env(mariadb_factory, tmp_path, sync=sync)
    env.run([SCHEMA, "CREATE TABLE app.p (id INT PRIMARY KEY, v INT)",
             "CREATE TABLE app.q (id INT PRIMARY KEY, v INT)",
             "INSERT INTO app.p VALUES (1, 1), (2, 2), (3, 3)",
             "INSERT INTO app.q VALUES (1, 10), (2, 20)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER TABLE app.q MODIFY v INT NOT NULL")
    env.run(["UPDATE app.p LEFT JOIN app.q ON p.id = q.id SET q.v = q.v + 1 WHERE p.id < 3",
             "DELETE app.q FROM app.p LEFT JOIN app.q ON p.id = q.id WHERE p.id = 2"])
    env.relay()
    env.sync(spark)
    assert env.downstream.execute("SELECT * FROM app.q") == ((1, 11),)
    env.run(["INSERT INTO app.q VALUES (5, 50), (6, NULL)"])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match="a NULL for column 'v', which the"
                                                   " downstream's table has NOT NULL"):
        env.sync(spark)
    assert env.downstream.execute("SELECT * FROM app.q") == ((1, 11),)


def test_a_wider_downstream_column_takes_the_values_unchanged(mariadb_factory,
                                                              tmp_path: Path, spark) -> None:
    """What a replica takes with ``slave_type_conversions = ALL_NON_LOSSY``: a wider column
    of the same kind holds every value as it was."""
    env = make_env(mariadb_factory, tmp_path)
    env.run([SCHEMA, _COLUMNS_UPSTREAM])
    env.relay()
    env.sync(spark)
    env.downstream.execute(
        "ALTER TABLE app.c MODIFY i BIGINT, MODIFY d DECIMAL(14,6), MODIFY v VARCHAR(30)"
        " CHARACTER SET utf8mb4, MODIFY e ENUM('b\\\\c','b','it''s','a'), MODIFY b VARBINARY(20),"
        " MODIFY tx MEDIUMTEXT CHARACTER SET utf8mb4")
    env.run([_COLUMNS_ROW, "INSERT INTO app.c (id, e) VALUES (2, 'a')",
             "UPDATE app.c SET i = i - 1"])
    env.relay()
    env.sync(spark)
    query = "SELECT id, i, d + 0, v, dt, e, b, tx FROM app.c ORDER BY id"
    assert env.downstream.execute(query) == env.upstream.execute(query)


def test_a_value_the_downstream_would_change_stops_the_write(mariadb_factory, tmp_path: Path,
                                                            spark) -> None:
    """What the catalog check cannot see (a FLOAT's (M,D), which the table map does not
    log: here a downstream table of the name already there, which the replayed CREATE TABLE
    leaves as it is): a value the downstream would store changed (1000.5 into FLOAT(4,2):
    99.99, with only a warning in the applier's lenient session; a replica stores the
    logged float as it is) stops the sync with one line; nothing of the batch is
    committed."""
    env = make_env(mariadb_factory, tmp_path)
    env.downstream.execute("CREATE DATABASE app")
    env.downstream.execute("CREATE TABLE app.t (id INT PRIMARY KEY, v FLOAT(4,2))")
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v FLOAT)",
             "INSERT INTO app.t VALUES (1, 5), (2, 1000.5)"])
    env.relay()
    with pytest.raises(UnfaithfulApplyError, match=r"changed a value as it stored it: Out"
                                                   r" of range value for column 'v'") as err:
        env.sync(spark)
    assert err.value.table == "app.t"
    assert env.downstream.execute("SELECT COUNT(*) FROM app.t") == ((0,),)


@pytest.mark.parametrize("split", [False, True], ids=["one-sync", "catalog-read"])
def test_a_mariadb_5_3_fractional_temporal_stops_with_one_line(
        mariadb_factory, tmp_path: Path, spark, split: bool) -> None:
    """MariaDB 5.3-10.0's columns with fractional seconds (``mysql56_temporal_format =
    OFF``) log the pre-5.6 type code without their precision, in a layout of their own: read
    as that format, DATETIME(6)'s bytes came out a zero date, stored so with a warning.  The
    sync stops with one line: where the catalog shows the downstream's column has fractional
    seconds, and where the value read is no value of that format."""
    env = make_env(mariadb_factory, tmp_path, upstream_args=("--mysql56-temporal-format=OFF",))
    env.run([SCHEMA, "CREATE TABLE app.h (id INT PRIMARY KEY, dt6 DATETIME(6), v INT)"])
    if split:
        env.relay()
        env.sync(spark)
    env.run(["INSERT INTO app.h VALUES (1, '2024-05-06 07:08:09.123456', 5)"])
    env.relay()
    with pytest.raises(BinrelayError, match=r"pre-5\.6 format") as err:
        env.sync(spark)
    assert "FORCE" in str(err.value) + (err.value.hint or "")
    assert env.downstream.execute("SELECT COUNT(*) FROM app.h") == ((0,),)


@pytest.mark.parametrize("metadata", ["NO_LOG", "FULL"])
def test_a_downstream_only_column_keeps_its_values_on_an_update(
        mariadb_factory, tmp_path: Path, spark, metadata: str) -> None:
    """A replica's row update writes the logged columns: a column only the downstream has
    keeps what it holds there (a REPLACE of the row would reset it to its default); an
    insert, and a delete then insert of one key, give it its default.  Rows by position
    (NO_LOG) and by name (FULL)."""
    env = make_env(mariadb_factory, tmp_path,
                   upstream_args=(f"--binlog-row-metadata={metadata}",))
    env.run([SCHEMA, "CREATE TABLE app.t (id INT PRIMARY KEY, v INT)",
             "INSERT INTO app.t VALUES (1, 1), (2, 2), (3, 3)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("ALTER TABLE app.t ADD COLUMN extra INT DEFAULT 42")
    env.downstream.execute("UPDATE app.t SET extra = 7")
    env.run(["INSERT INTO app.t VALUES (4, 4)", "UPDATE app.t SET v = 5 WHERE id = 1",
             "DELETE FROM app.t WHERE id = 2", "DELETE FROM app.t WHERE id = 3",
             "INSERT INTO app.t VALUES (3, 30)", "INSERT INTO app.t VALUES (6, 6)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute("UPDATE app.t SET extra = 8 WHERE id = 6")
    # A key change is an update too (not a delete and an insert, which would reset it).
    env.run(["UPDATE app.t SET id = 10 WHERE id = 6"])
    env.relay()
    env.sync(spark)
    assert env.downstream.execute("SELECT * FROM app.t ORDER BY id") == \
        ((1, 5, 7), (3, 30, 42), (4, 4, 42), (10, 6, 8))


@pytest.mark.parametrize("steps", [FOREIGN_KEYS, TRIGGERS, GENERATED, UNIQUE_SWAPS, VERSIONED,
                                   SEQUENCES, COLLATED_KEYS, ODD_KEYS],
                         ids=["foreign-keys", "triggers", "generated", "unique-swaps",
                              "versioned", "sequences", "collated-keys", "odd-keys"])
def test_the_drivers_own_apply(mariadb_factory, tmp_path: Path, spark, steps,
                               monkeypatch) -> None:
    """Small batches applied by the driver with Spark up (``driver-batch-bytes``), each in
    one transaction with the checkpoint's move: the same result as the executors'."""
    env = make_env(mariadb_factory, tmp_path, sync={"driver-batch-bytes": 1 << 20})
    atomic = []

    def spied(*args, **kwargs):
        atomic.append(args[3])
        return apply_with_checkpoint(*args, **kwargs)

    monkeypatch.setattr(sync_module, "apply_with_checkpoint", spied)
    jobs = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    converge(env, spark, steps)
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs, \
        "a Spark job ran: the driver was to apply every batch"
    assert atomic, "no batch of rows was applied with its checkpoint"


@pytest.mark.parametrize("steps", [FOREIGN_KEYS, STATEMENTS, XA, GENERATED, VERSIONED,
                                   SEQUENCES, TEMPORARY_TABLES],
                         ids=["foreign-keys", "statements", "xa", "generated", "versioned",
                              "sequences", "temporary-tables"])
def test_strict_mode(mariadb_factory, tmp_path: Path, spark, steps) -> None:
    env = make_env(mariadb_factory, tmp_path, sync={"mode": "strict"})
    converge(env, spark, steps)


@pytest.mark.parametrize("steps", [FOREIGN_KEYS, TRIGGERS, GENERATED, STATEMENTS, DDL_CONTEXT,
                                   CREATE_SELECT, CREATE_SELECT_RULES, STORED_AS_IS, XA,
                                   UNIQUE_SWAPS, VERSIONED, PARTITION_MAINTENANCE,
                                   SEQUENCES, COLLATED_KEYS, UNKEYED_PARTITIONED_INVISIBLE,
                                   SESSION_TYPES_AND_MULTI_TABLE, LONG_UNIQUE],
                         ids=["foreign-keys", "triggers", "generated", "statements",
                              "ddl-context", "create-select", "create-select-rules",
                              "stored-as-is", "xa", "unique-swaps", "versioned",
                              "partition-maintenance", "sequences", "collated-keys",
                              "unkeyed-partitioned-invisible", "session-types", "long-unique"])
def test_every_batch_replayed_after_a_crash(mariadb_factory, tmp_path: Path, spark, steps,
                                            monkeypatch) -> None:
    """Each case as a replay: every batch dies once between its data and its checkpoint,
    then ``recover`` and the sync finish from what it left; the result must not change."""
    env = make_env(mariadb_factory, tmp_path, sync={"batch-bytes": 16 * 1024})
    env.run(steps)
    env.relay()
    # (A run of DDL is one batch with the rows between and after them: most cases are the
    # binlog's header and that run, whose replay skips the rows committed with a DDL.)
    assert sync_with_crashes(env, spark, monkeypatch) >= 2
    assert_converged(env)


def test_collated_keys_under_a_random_workload(env: Env, spark) -> None:
    """3,000 transactions of three sessions over keys a collation folds ('a', 'A', 'a '):
    inserts, key and unique-value moves, deletes by the folded value; many batches, each
    over several partitions."""
    rnd = random.Random(1)
    env.run([SCHEMA,
             "CREATE TABLE app.r (id INT PRIMARY KEY, u VARCHAR(8) COLLATE utf8mb4_general_ci,"
             " k VARCHAR(8) COLLATE utf8mb4_general_ci NOT NULL, pad VARCHAR(200),"
             " UNIQUE KEY (u))",
             "CREATE TABLE app.s (k VARCHAR(6) COLLATE latin1_swedish_ci PRIMARY KEY, v INT,"
             " pad VARCHAR(200))"])

    def word() -> str:
        return "".join(rnd.choice("aAbBcCdDeE") for _ in range(rnd.randint(1, 2))) \
            + rnd.choice(["", " ", "  "])

    statements = [
        lambda i: ("INSERT INTO app.r VALUES (%s, %s, %s, %s)",
                   (rnd.randrange(60), word(), word(), "p" * rnd.randrange(200))),
        lambda i: ("UPDATE app.r SET u = %s WHERE id = %s", (word(), rnd.randrange(60))),
        lambda i: ("UPDATE app.r SET id = %s WHERE id = %s",
                   (rnd.randrange(60), rnd.randrange(60))),
        lambda i: ("DELETE FROM app.r WHERE u = %s", (word(),)),
        lambda i: ("REPLACE INTO app.s VALUES (%s, %s, %s)",
                   (word(), i, "q" * rnd.randrange(200))),
        lambda i: ("UPDATE app.s SET k = %s WHERE k = %s", (word(), word())),
        lambda i: ("DELETE FROM app.s WHERE k = %s", (word(),)),
    ]
    weights = [30, 15, 10, 10, 15, 10, 10]
    sessions = [env.session(i) for i in range(3)]
    for conn in sessions:
        conn.autocommit(False)
    for i in range(3000):
        conn = rnd.choice(sessions)
        with conn.cursor() as cur:
            for _ in range(rnd.randint(1, 4)):
                sql, args = rnd.choices(statements, weights)[0](i)
                with contextlib.suppress(pymysql.err.IntegrityError):
                    cur.execute(sql, args)  # a duplicate the collation sees: skipped
        conn.commit()
    env.relay()
    env.sync(spark)
    assert_converged(env)
