"""A DDL and a crash (issue 12, item 6): a DDL commits by itself, so a kill -9 between it
and its checkpoint leaves the batch in flight with the DDL done or not.  The replay decides
from the DDL journal and the downstream's catalog, and never runs a DDL twice.

Checked at both sides of the DDL, for every kind: crashed once at each DDL right after its
journal row committed (the DDL not run) and right after the DDL ran (checkpoint not moved),
in process and by a real SIGKILL of ``binrelay sync``; then every table must equal the
upstream's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from binrelay import failpoints
from binrelay.apply.ddl import apply_ddl
from binrelay.apply.ddl_journal import (
    EVIDENT,
    RUN,
    SKIP,
    CatalogPrint,
    DdlJournal,
    catalog_print,
    decide,
    earlier_catalog_prints,
    evidence,
    evidence_kept,
    evident,
    statement_words,
)
from binrelay.apply.downstream import pooled_connection
from binrelay.apply.statement_sql import REPLICA_SQL_MODE
from binrelay.config import load_config
from binrelay.errors import DdlOutcomeUnknownError, DownstreamError
from binrelay.spark.sync import SyncPipeline
from fidelity import SimulatedCrash, assert_converged, make_env, sync_with_crashes
from relay_helpers import binrelay_cmd, run_binrelay

# Every DDL kind, with rows in between so that a DDL run twice shows in the data.
EVERY_KIND = [
    "CREATE DATABASE d",
    "CREATE TABLE d.a (id INT PRIMARY KEY, v VARCHAR(20))",
    "CREATE TABLE d.b (id INT PRIMARY KEY, v VARCHAR(20))",
    "INSERT INTO d.a VALUES (1, 'a1'), (2, 'a2')",
    "INSERT INTO d.b VALUES (1, 'b1')",
    # The same definitions: only InnoDB's table ids tell the swapped tables apart.
    "RENAME TABLE d.a TO d.tmp, d.b TO d.a, d.tmp TO d.b",
    "INSERT INTO d.a VALUES (5, 'after the swap')",
    "ALTER TABLE d.a ADD COLUMN n INT DEFAULT 7",
    "ALTER TABLE d.a MODIFY v VARCHAR(40)",
    "CREATE TABLE d.w (id INT PRIMARY KEY, p INT, q INT)",
    "INSERT INTO d.w VALUES (1, 10, 20)",
    "ALTER TABLE d.w RENAME COLUMN p TO q, RENAME COLUMN q TO p",
    "ALTER TABLE d.b DROP COLUMN v",
    "ALTER TABLE d.b ADD COLUMN v INT",
    "INSERT INTO d.b VALUES (9, 99)",
    # No definition changes either: the rows of a partition and of a table swapped.
    "CREATE TABLE d.pt (id INT PRIMARY KEY, v VARCHAR(20)) PARTITION BY RANGE (id)"
    " (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN MAXVALUE)",
    "CREATE TABLE d.ex (id INT PRIMARY KEY, v VARCHAR(20))",
    "INSERT INTO d.pt VALUES (1, 'p'), (200, 'q')",
    "INSERT INTO d.ex VALUES (2, 'x')",
    "ALTER TABLE d.pt EXCHANGE PARTITION p0 WITH TABLE d.ex",
    "INSERT INTO d.ex VALUES (3, 'after the exchange')",
    "CREATE INDEX iv ON d.a (v)",
    "DROP INDEX iv ON d.a",
    "TRUNCATE TABLE d.b",
    "INSERT INTO d.b VALUES (10, 100)",
    "CREATE TABLE d.c AS SELECT id, v FROM d.a",
    "CREATE OR REPLACE TABLE d.c2 (id INT PRIMARY KEY) SELECT id FROM d.b",
    "ALTER TABLE d.c RENAME TO d.c3",
    "CREATE VIEW d.v AS SELECT id FROM d.a",
    "DROP VIEW d.v",
    "CREATE SEQUENCE d.s",
    "DROP SEQUENCE d.s",
    "CREATE PROCEDURE d.p() SELECT 1",
    "DROP PROCEDURE d.p",
    "DROP TABLE d.c3",
    "RENAME TABLE d.a TO d.x, d.x TO d.y",
    "INSERT INTO d.y VALUES (6, 'chain', 1)",
    "CREATE DATABASE e",
    "CREATE TABLE e.t (id INT PRIMARY KEY)",
    "DROP DATABASE e",
]
DDL_COUNT = sum(not s.startswith("INSERT") for s in EVERY_KIND)


def crash_once_per_ddl(point: str, monkeypatch: Any) -> set[str]:
    """Make ``point`` "kill" the sync once per DDL (by position)."""
    crashed: set[str] = set()

    def hit(name: str, key: str = "") -> None:
        if name == point and key not in crashed:
            crashed.add(key)
            raise SimulatedCrash(key)

    monkeypatch.setattr(failpoints, "hit", hit)
    monkeypatch.setattr(failpoints, "armed", lambda name: name == point)
    return crashed


def sync_through_crashes(env: Any, spark: Any) -> None:
    for _ in range(500):
        try:
            env.sync(spark)
            return
        except SimulatedCrash:
            continue
    raise AssertionError("the sync never got to the end")


@pytest.mark.parametrize("point", ["ddl-journaled", "ddl-applied"])
def test_every_ddl_kind_replayed_after_a_crash(point: str, mariadb_factory, tmp_path: Path,
                                               spark, monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(EVERY_KIND)
    env.relay()
    crashed = crash_once_per_ddl(point, monkeypatch)
    sync_through_crashes(env, spark)
    assert len(crashed) == DDL_COUNT
    assert_converged(env)
    journal = env.downstream.execute("SELECT COUNT(*) FROM binrelay.ddl_journal")
    assert journal == ((0,),), "the journal rows go with the checkpoint"


def test_a_real_kill_at_every_ddl(mariadb_factory, tmp_path: Path) -> None:
    """``binrelay sync`` SIGKILLed right after each DDL ran, started again until it ends."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d",
             "CREATE TABLE d.a (id INT PRIMARY KEY, v INT)",
             "CREATE TABLE d.b (id INT PRIMARY KEY, v INT)",
             "INSERT INTO d.a VALUES (1, 1), (2, 2)", "INSERT INTO d.b VALUES (3, 3)",
             "RENAME TABLE d.a TO d.tmp, d.b TO d.a, d.tmp TO d.b",
             "INSERT INTO d.a VALUES (4, 4)",
             "CREATE TABLE d.c SELECT * FROM d.b",
             "TRUNCATE TABLE d.b",
             "INSERT INTO d.b VALUES (5, 5)"])
    env.relay()
    marks = tmp_path / "failpoints"
    marks.mkdir()
    environ = {**os.environ, "BINRELAY_FAILPOINTS": "ddl-applied",
               "BINRELAY_FAILPOINT_DIR": str(marks)}
    codes = []
    for _ in range(12):
        done = subprocess.run(binrelay_cmd("sync", "--config", str(env.config),
                                           "--until-caught-up"),
                              capture_output=True, text=True, timeout=300, env=environ,
                              check=False)
        codes.append(done.returncode)
        if done.returncode == 0:
            break
        assert done.returncode == -9, done.stderr
    assert codes == [-9] * 6 + [0]  # 3 CREATE TABLE, RENAME, CREATE … SELECT, TRUNCATE
    assert_converged(env)


def test_a_ddl_the_catalog_cannot_show_stops_with_one_line(mariadb_factory, tmp_path: Path,
                                                           spark, monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
             "CREATE USER 'reader'@'localhost' IDENTIFIED BY 'pw'",
             "INSERT INTO d.t VALUES (1)"])
    env.relay()
    crashed = crash_once_per_ddl("ddl-applied", monkeypatch)
    for _ in range(3):  # CREATE DATABASE, CREATE TABLE, CREATE USER
        with pytest.raises(SimulatedCrash):
            env.sync(spark)
    with pytest.raises(DdlOutcomeUnknownError) as info:
        env.sync(spark)
    assert "CREATE USER" in str(info.value)
    assert len(crashed) == 3
    # Through the CLI: one line naming what to do.
    done = run_binrelay("sync", "--config", str(env.config), "--until-caught-up", timeout=300)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "BR5005" in lines[0] and "SET ran = 1" in lines[0], done.stderr
    # The operator looks: the user is there, so it ran.
    assert env.downstream.execute(
        "SELECT COUNT(*) FROM mysql.user WHERE User = 'reader'") == ((1,),)
    env.downstream.execute("UPDATE binrelay.ddl_journal SET ran = 1")
    env.sync(spark)
    assert_converged(env)


def test_a_failed_ddl_is_run_by_the_next_attempt(mariadb_factory) -> None:
    """A DDL the downstream refuses stops the sync; its row stays (the rows before it were
    committed with it) saying "run it" (``ran`` 0): once the operator mends the downstream,
    the rerun runs it (a row that still said "as fingerprinted" could make it skip)."""
    server = mariadb_factory(server_id=2)
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE binrelay")
        cur.execute("CREATE DATABASE d")
        journal = DdlJournal("binrelay", "p", batch_id=7)
        journal.create(cur)
    # Not evident (ADD without COLUMN): the catalog print decides.
    statement, where = "ALTER TABLE t ADD v INT", (1, 1, 400, 0)
    assert not evident(statement, "d")
    with pytest.raises(DownstreamError):
        apply_ddl(conn, "d", statement, replay=False, position=where, journal=journal)
    assert server.execute("SELECT ran FROM binrelay.ddl_journal") == ((0,),)
    server.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
    assert apply_ddl(conn, "d", statement, position=where, journal=journal).applied
    # Run again in the same batch (the replay after a crash): the journal says it ran.
    again = apply_ddl(conn, "d", statement, position=where, journal=journal)
    assert not again.applied and "journal" in again.message
    assert server.execute("SELECT COUNT(*) FROM information_schema.COLUMNS"
                          " WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = 't'") == ((2,),)
    conn.close()


@pytest.mark.parametrize(("statement", "expected"), [
    ("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20))", True),
    ("CREATE TABLE IF NOT EXISTS t (id INT)", True),
    ("CREATE TABLE t SELECT 1 AS a", True),
    ("CREATE TABLE t LIKE u", True),
    ("/* lead */ CREATE TABLE t (a INT)", True),
    ("CREATE TABLE IF NOT EXISTS t SELECT 1 AS a", False),
    ("CREATE TEMPORARY TABLE t (a INT)", False),
    ("CREATE OR REPLACE TABLE t (a INT)", False),
    ("CREATE INDEX i ON t (a)", True),
    ("CREATE UNIQUE INDEX IF NOT EXISTS i ON t (a)", True),
    ("CREATE OR REPLACE INDEX i ON t (a)", False),
    ("DROP INDEX i ON t", True),
    ("DROP TABLE t", True),
    ("DROP TABLE IF EXISTS a, b /* generated by server */", True),
    ("DROP TEMPORARY TABLE t", False),
    ("TRUNCATE TABLE t", True),
    ("RENAME TABLE a TO b", True),
    ("RENAME TABLE d.a TO e.b", True),
    ("RENAME TABLE a TO b, b TO c", False),
    ("RENAME TABLE a TO tmp, b TO a, tmp TO b", False),
    ("RENAME TABLE `a,b` TO c", False),
    ("ALTER TABLE t ADD COLUMN c INT", True),
    ("ALTER TABLE t ADD COLUMN `c` INT AFTER a, ALGORITHM=INSTANT", True),
    ("ALTER TABLE t ADD COLUMN c INT, RENAME COLUMN p TO q, RENAME COLUMN q TO p", True),
    ("ALTER TABLE t ADD COLUMN c INT, RENAME TO u", True),
    # Run again, it meets no t, and no new name at the end to tell that it ran.
    ("ALTER TABLE t ADD COLUMN c INT, RENAME TO u, ADD COLUMN d INT", False),
    # A literal or a comment after the new name: no name a replay could check.
    ("ALTER TABLE t RENAME TO u, ADD COLUMN c INT COMMENT 'RENAME v'", False),
    ("RENAME TABLE a TO b/**/", False),
    # Run again, refused as already versioned / with a period: not "done".
    ("ALTER TABLE t ADD COLUMN c INT, ADD SYSTEM VERSIONING", False),
    ("ALTER TABLE t ADD COLUMN s DATE, ADD COLUMN e DATE, ADD PERIOD FOR p(s, e)", False),
    ("ALTER TABLE t ADD COLUMN IF NOT EXISTS c INT", False),
    ("ALTER TABLE t ADD COLUMN (a INT, b INT)", False),
    ("ALTER TABLE t ADD c INT", False),
    ("ALTER TABLE t MODIFY a BIGINT", False),
    ("ALTER TABLE t RENAME COLUMN p TO q, RENAME COLUMN q TO p", False),
    # Words that are not SQL do not count: in literals, quoted names, comments.
    ("ALTER TABLE t COMMENT 'ADD COLUMN x', RENAME COLUMN p TO q, RENAME COLUMN q TO p", False),
    ("ALTER TABLE `ADD COLUMN x` RENAME COLUMN p TO q, RENAME COLUMN q TO p", False),
    ("ALTER TABLE t /* ADD COLUMN x */ RENAME COLUMN p TO q, RENAME COLUMN q TO p", False),
    ("ALTER TABLE t -- ADD COLUMN x\n RENAME COLUMN p TO q, RENAME COLUMN q TO p", False),
    # Run again, these would not fail: a column dropped IF EXISTS comes back.
    ("ALTER TABLE t CHANGE COLUMN IF EXISTS x z INT, ADD COLUMN x INT", False),
    ("ALTER TABLE t DROP COLUMN IF EXISTS x, ADD COLUMN x INT", False),
    # What the reading cannot be sure of.
    ("ALTER TABLE t ADD COLUMN x INT /*!50100 , RENAME COLUMN p TO q */", False),
    ("ALTER TABLE t ADD COLUMN x VARCHAR(5) DEFAULT 'a\\\\'", False),
    ("CREATE DATABASE d", False),
    ("CREATE VIEW v AS SELECT 1", False),
    ("CREATE PROCEDURE p() SELECT 1", False),
])
def test_which_ddl_the_servers_answer_shows_ran(statement: str, expected: bool) -> None:
    assert evident(statement, "d") is expected


def test_an_evident_ddl_is_journaled_without_a_print(mariadb_factory, monkeypatch) -> None:
    """Its row says "run it" (``ran`` 0, which a release without evident DDL follows too);
    the replay runs it and the server's "duplicate column" says it ran."""
    server = mariadb_factory(server_id=2)
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE binrelay")
        cur.execute("CREATE DATABASE d")
        cur.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
        journal = DdlJournal("binrelay", "p", batch_id=7)
        journal.create(cur)

    def no_print(*_a: Any, **_k: Any) -> CatalogPrint:
        raise AssertionError("an evident DDL needs no catalog print")

    monkeypatch.setattr("binrelay.apply.ddl.catalog_print", no_print)
    statement, where = "ALTER TABLE t ADD COLUMN v INT", (1, 1, 400, 0)
    assert apply_ddl(conn, "d", statement, position=where, journal=journal).applied
    assert server.execute("SELECT fingerprint, ran FROM binrelay.ddl_journal") == (
        (EVIDENT, 0),)
    assert decide(statement, EVIDENT, 0, CatalogPrint("anything")) == RUN
    again = apply_ddl(conn, "d", statement, position=where, journal=journal)
    assert not again.applied and again.errno == 1060
    assert server.execute("SELECT COUNT(*) FROM information_schema.COLUMNS"
                          " WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = 't'") == ((2,),)
    conn.close()


def test_a_row_journaled_by_an_earlier_release_still_decides(mariadb_factory) -> None:
    """Earlier releases printed routines and events for a table DDL too: a crash under one,
    replayed under this one, compares like with like (here a procedure named like the
    table makes the two prints differ)."""
    server = mariadb_factory(server_id=2)
    conn = server.connect()
    statement, where = "ALTER TABLE d.t ADD v INT", (1, 1, 400, 0)  # not evident
    journal = DdlJournal("binrelay", "p", batch_id=3)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE binrelay")
        cur.execute("CREATE DATABASE d")
        cur.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
        cur.execute("CREATE PROCEDURE d.t() SELECT 1")
        journal.create(cur)
        earlier = earlier_catalog_prints(cur, statement, None)[0]
        assert earlier.digest != catalog_print(cur, statement, None).digest
        journal.begin(cur, where, earlier.digest, statement)  # the crash came before the DDL
    conn.commit()
    assert apply_ddl(conn, None, statement, position=where, journal=journal).applied
    again = apply_ddl(conn, None, statement, position=where, journal=journal)  # it ran now
    assert not again.applied and "journal" in again.message
    assert server.execute("SELECT COUNT(*) FROM information_schema.COLUMNS"
                          " WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = 't'") == ((2,),)
    conn.close()


def test_an_exchange_journaled_without_ids_asks_the_operator(mariadb_factory) -> None:
    """A journal row the previous release wrote for an EXCHANGE PARTITION (its print without
    table ids) cannot tell whether it ran: the operator's verdict decides."""
    server = mariadb_factory(server_id=2)
    conn = server.connect()
    statement, where = "ALTER TABLE d.p EXCHANGE PARTITION p0 WITH TABLE d.x", (1, 1, 400, 0)
    journal = DdlJournal("binrelay", "p", batch_id=3)
    with conn.cursor() as cur:
        for sql in ("CREATE DATABASE binrelay", "CREATE DATABASE d",
                    "CREATE TABLE d.p (id INT PRIMARY KEY) PARTITION BY RANGE (id)"
                    " (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN"
                    " MAXVALUE)", "CREATE TABLE d.x (id INT PRIMARY KEY)",
                    "INSERT INTO d.x VALUES (5)"):
            cur.execute(sql)
        journal.create(cur)
        blind = earlier_catalog_prints(cur, statement, None)[-1]
        assert blind.unidentified and blind.digest != catalog_print(cur, statement, None).digest
        journal.begin(cur, where, blind.digest, statement)
    conn.commit()
    with pytest.raises(DdlOutcomeUnknownError, match="EXCHANGE PARTITION"):
        apply_ddl(conn, None, statement, position=where, journal=journal)
    conn.rollback()
    server.execute("UPDATE binrelay.ddl_journal SET ran = 0")  # the operator looked
    assert apply_ddl(conn, None, statement, position=where, journal=journal,
                     setup=("SET @@session.autocommit = 1",)).applied
    assert server.execute("SELECT id FROM d.p") == ((5,),)
    conn.close()


def test_the_words_a_print_looks_up() -> None:
    assert statement_words("ALTER TABLE db . select ADD COLUMN c INT DEFAULT 7",
                           names_only=True) == ["c", "db", "select"]
    assert statement_words("CREATE TABLE `INT` (id INT, `7` int) COMMENT 'ON x'",
                           names_only=True) == ["7", "COMMENT", "INT", "id", "x"]
    assert "ALTER" in statement_words("ALTER TABLE t ADD c INT")  # the earlier print's


def test_the_words_a_quote_in_a_comment_cannot_hide() -> None:
    words = statement_words("ALTER TABLE /* 5\" */ x ADD COLUMN d INT, DROP COLUMN c /* \" */",
                            names_only=True, qualifiers=False)
    assert {"x", "d", "c"} <= set(words)
    words = statement_words("ALTER TABLE t ADD COLUMN w INT COMMENT 'width (5\")', RENAME TO u,"
                            " ADD COLUMN h INT COMMENT 'height (3\")'", names_only=True)
    assert {"t", "w", "u", "h"} <= set(words)
    assert "u" in statement_words("RENAME TABLE /* don`t */ t TO `u` /* ` */", names_only=True)
    # Qualifiers left out, if asked; a name after a dot kept.
    assert statement_words("CREATE INDEX i ON `d` . t (a)", names_only=True,
                           qualifiers=False) == ["a", "i", "t"]


@pytest.mark.parametrize(("run", "kept"), [
    (["CREATE TABLE t (id INT PRIMARY KEY, a INT)", "ALTER TABLE t ADD COLUMN c INT",
      "CREATE INDEX i ON t (a)", "CREATE TABLE u LIKE t"], True),
    (["CREATE TABLE t (id INT)", "RENAME TABLE t TO u"], False),
    (["DROP TABLE t", "CREATE TABLE t (id INT)"], False),
    (["DROP INDEX i ON t", "CREATE INDEX i ON t (a)"], False),
    (["RENAME TABLE t TO u", "DROP TABLE u"], False),
    (["TRUNCATE TABLE t", "ALTER TABLE t ADD COLUMN c INT"], False),
    (["ALTER TABLE t ADD COLUMN c INT", "ALTER TABLE t ADD COLUMN d INT, DROP COLUMN c"], False),
    (["ALTER TABLE t ADD COLUMN c INT", "ALTER TABLE T ADD COLUMN d INT, CHANGE b e INT"], False),
    (["RENAME TABLE a.t TO a.u", "CREATE TABLE b.t (id INT)"], False),  # schemas aside
    (["RENAME TABLE t TO u", "CREATE TABLE v (id INT)", "DROP TABLE w"], True),
    (["CREATE TABLE x (a INT)", "ALTER TABLE x ADD COLUMN c INT",
      "ALTER TABLE /* 5\" */ x ADD COLUMN d INT, DROP COLUMN c /* \" */"], False),
    # A SELECT may read what it does not name (a view, a function).
    (["CREATE TABLE snap SELECT * FROM v_orders", "DROP TABLE orders"], False),
    (["CREATE TABLE snap SELECT * FROM v_orders", "CREATE INDEX i ON orders (a)"], True),
    # Its function may write t: the TRUNCATE run again would empty it.
    (["TRUNCATE TABLE t", "CREATE TABLE x SELECT f() AS v"], False),
])
def test_which_runs_of_ddl_keep_their_evidence(run: list[str], kept: bool) -> None:
    assert all(evident(sql, "d") for sql in run)
    evidences = [evidence(sql, "d") for sql in run]
    assert all(evidence_kept(evidences[:i], evidences[i])
               for i in range(1, len(run))) is kept


def test_decide() -> None:
    same = CatalogPrint("x")
    assert decide("CREATE TABLE t (i INT)", None, None, same) == RUN
    assert decide("CREATE TABLE t (i INT)", "x", None, same) == RUN
    assert decide("CREATE TABLE t (i INT)", "y", None, same) == SKIP
    assert decide("CREATE TABLE t (i INT)", "x", 1, same) == SKIP
    assert decide("CREATE TABLE t (i INT)", "y", 0, same) == RUN
    assert decide("CREATE PROCEDURE p() SELECT 1", "x", None, same) == RUN
    assert decide("GRANT SELECT ON d.* TO u", "x", None, same) == RUN
    assert decide("RENAME TABLE a TO b", "x", None, same) == RUN
    with pytest.raises(DdlOutcomeUnknownError):
        decide("RENAME TABLE a TO b", "x", None, CatalogPrint("x", unidentified=True))
    exchange = "ALTER TABLE p EXCHANGE  PARTITION p0 WITH TABLE t"
    assert decide(exchange, "x", None, same) == RUN
    with pytest.raises(DdlOutcomeUnknownError):
        decide(exchange, "x", None, CatalogPrint("x", unidentified=True))
    for plain in ("ALTER TABLE t ADD COLUMN c INT", "ALTER TABLE t COMMENT 'a\\b'",
                  "ALTER TABLE t /*!50100 COMMENT 'x' */"):  # the last two not read for sure
        assert decide(plain, "x", None, CatalogPrint("x", unidentified=True)) == RUN
    with pytest.raises(DdlOutcomeUnknownError):
        decide("CREATE USER u", "x", None, same)
    with pytest.raises(DdlOutcomeUnknownError):
        decide("CREATE FUNCTION f RETURNS STRING SONAME 'f.so'", "x", None, same)


def test_the_catalog_print_sees_each_kind(mariadb_factory) -> None:
    server = mariadb_factory(server_id=1)
    conn = server.connect()
    conn.autocommit(True)
    cases = [
        ("CREATE DATABASE `d-1`", None),
        ("CREATE TABLE `d-1`.`a-€` (id INT PRIMARY KEY, v INT)", "d-1"),
        ("CREATE TABLE b (id INT PRIMARY KEY, v INT)", "d-1"),
        ("RENAME TABLE `a-€` TO tmp, b TO `a-€`, tmp TO b", "d-1"),
        ("TRUNCATE TABLE b", "d-1"),
        ("ALTER TABLE b COMMENT 'x'", "d-1"),
        ("CREATE TABLE p (id INT) PARTITION BY HASH (id) PARTITIONS 2", "d-1"),
        ("TRUNCATE TABLE p", "d-1"),
        ("CREATE TABLE x (id INT)", "d-1"),
        ("ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE x", "d-1"),
        ("ALTER DATABASE `d-1` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", None),
        ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 1", "d-1"),
        ("CREATE SEQUENCE s", "d-1"),
    ]
    with conn.cursor() as cur:
        for statement, schema in cases:
            if schema:
                cur.execute(f"USE `{schema}`")
            before = catalog_print(cur, statement, schema)
            cur.execute(statement)
            after = catalog_print(cur, statement, schema)
            assert before.digest != after.digest, statement
            assert not after.unidentified, statement
            assert catalog_print(cur, statement, schema) == after, statement
        # Rows do not change it (nor the AUTO_INCREMENT counter).
        cur.execute("CREATE TABLE ai (id INT AUTO_INCREMENT PRIMARY KEY)")
        before = catalog_print(cur, "ALTER TABLE ai ADD COLUMN v INT", "d-1")
        cur.execute("INSERT INTO ai VALUES (), (), ()")
        assert catalog_print(cur, "ALTER TABLE ai ADD COLUMN v INT", "d-1") == before
        # A table without an InnoDB id.
        cur.execute("CREATE TABLE m (id INT) ENGINE=MyISAM")
        assert catalog_print(cur, "RENAME TABLE m TO m2", "d-1").unidentified
    conn.close()


# Rows between DDL, in tables without a key (a row applied twice shows), a generated column
# added mid-run (the rules are read again within the batch), updates and deletes.
ROWS_AMONG_DDL = [
    "CREATE DATABASE d",
    "CREATE TABLE d.k (v INT)",
    "INSERT INTO d.k VALUES (1), (2)",
    "CREATE TABLE d.a (id INT PRIMARY KEY, v INT)",
    "INSERT INTO d.a VALUES (1, 1)",
    "INSERT INTO d.k VALUES (3)",
    "ALTER TABLE d.k ADD COLUMN w INT DEFAULT 5",
    "INSERT INTO d.k VALUES (4, 6)",
    "UPDATE d.k SET w = w + 1",
    "RENAME TABLE d.k TO d.k2",
    "INSERT INTO d.k2 VALUES (7, 8)",
    "DELETE FROM d.k2 WHERE v = 1",
    "ALTER TABLE d.a ADD COLUMN g INT AS (v * 2) VIRTUAL",
    "INSERT INTO d.a (id, v) VALUES (2, 5)",
    "CREATE TABLE d.z (v INT)",
]


def test_rows_between_ddl_go_in_the_ddl_batch(mariadb_factory, tmp_path: Path,
                                              spark) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(ROWS_AMONG_DDL)
    env.relay()
    reports: list[Any] = []
    SyncPipeline(load_config(env.config), spark=spark,
                 listeners=[reports.append]).run(until_caught_up=True)
    kinds = [(r.kind, r.ddl, r.changes) for r in reports if r.kind != "empty"]
    assert kinds == [("ddl", 7, 12)]  # one batch, one checkpoint move
    assert_converged(env)


def test_rows_after_a_ddl_in_its_upstream_context(mariadb_factory, tmp_path: Path,
                                                  spark) -> None:
    """Each DDL runs in its upstream session's context (time zone, sql_mode, client
    character set) and leaves the driver's session owing the reset, which the next DDL's
    script leads with: the rows between are written in the applier's own session (a
    TIMESTAMP, a backslash, a quote and non-ASCII text come out as upstream), and the
    connection goes back to the pool reset."""
    env = make_env(mariadb_factory, tmp_path)
    odd = "'a\\\\b''c \u00e9'"  # the value a\b'c é
    env.run([
        "CREATE DATABASE d",
        (1, "SET time_zone = '+05:00', sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES',"
            " NAMES gbk"),
        (1, 'CREATE TABLE d."a" (id INT PRIMARY KEY, t TIMESTAMP(6) NULL,'
            " s VARCHAR(20) CHARACTER SET utf8mb4, b VARCHAR(8) DEFAULT 'x\\y')"),
        f"INSERT INTO d.a (id, t, s) VALUES (1, '2026-01-02 03:04:05.5', {odd})",
        (1, "ALTER TABLE d.a ADD COLUMN c TIMESTAMP NOT NULL DEFAULT '2026-01-01 00:00:00'"),
        f"INSERT INTO d.a (id, t, s) VALUES (2, '2026-06-07 08:09:10', {odd})",
        (1, "CREATE INDEX i ON d.a (t)"),
        (1, "CREATE TABLE d.b (id INT PRIMARY KEY, t TIMESTAMP NULL)"),
        "INSERT INTO d.b VALUES (1, '2026-03-04 05:06:07')",
        "UPDATE d.a SET t = t + INTERVAL 1 SECOND",
        (1, "CREATE TABLE d.z (v INT)"),
    ])
    env.relay()
    reports: list[Any] = []
    pipeline = SyncPipeline(load_config(env.config), spark=spark,
                            listeners=[reports.append])
    pipeline.run(until_caught_up=True)
    assert [(r.kind, r.ddl) for r in reports if r.kind != "empty"] == [("ddl", 6)]
    assert_converged(env)
    with pooled_connection(pipeline.driver_downstream) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@session.time_zone, @@session.sql_mode,"
                    " @@session.character_set_client")
        assert cur.fetchone() == ("+00:00", REPLICA_SQL_MODE, "utf8mb4")


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES,ANSI_QUOTES"])
def test_a_journal_row_reads_alike_in_every_sql_mode(mariadb, sql_mode: str) -> None:
    """A journal row may be built while the connection is still in an upstream DDL's
    session (its reset leads the script): its literals mean the same in any sql_mode."""
    statement = "ALTER TABLE `b%`.t ADD COLUMN c VARCHAR(9) DEFAULT 'it''s \\ \u00e9'"
    journal = DdlJournal("b%jr", "p.1", batch_id=7)
    with mariadb.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE `b%jr`")
        journal.create(cur)
        cur.execute("SET sql_mode = %s", (sql_mode,))
        cur.execute(journal.begin_sql((1, 2, 3, 0), EVIDENT, statement, ran=0))
        cur.execute("SELECT pipeline, position, batch_id, fingerprint, ran, statement"
                    " FROM `b%jr`.ddl_journal")
        assert cur.fetchall() == (("p.1", "1.2.3.0", 7, EVIDENT, 0, statement),)


@pytest.mark.parametrize("point", ["ddl-journaled", "ddl-applied", "finish"])
def test_rows_between_ddl_after_a_crash(mariadb_factory, tmp_path: Path, spark, monkeypatch,
                                        point: str) -> None:
    """Rows before a DDL commit with its journal row, so a replay skips them; those after
    the batch's last journaled DDL are applied again (they went with the checkpoint)."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(ROWS_AMONG_DDL)
    env.relay()
    if point == "finish":
        assert sync_with_crashes(env, spark, monkeypatch) == 2  # the header, the run
    else:
        crashed = crash_once_per_ddl(point, monkeypatch)
        sync_through_crashes(env, spark)
        assert len(crashed) == 7
    assert_converged(env)


def test_rows_before_a_refused_ddl_are_not_applied_twice(mariadb_factory, tmp_path: Path,
                                                         spark) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", "CREATE TABLE d.k (v INT)", "INSERT INTO d.k VALUES (1)",
             "RENAME TABLE d.k TO d.c", "INSERT INTO d.c VALUES (2)"])
    env.relay()
    env.downstream.execute("CREATE DATABASE d")
    env.downstream.execute("CREATE TABLE d.c (x INT)")  # in the way of the RENAME
    with pytest.raises(DownstreamError, match="already exists"):
        env.sync(spark)
    # The row before the RENAME was committed with its journal row, which says "run it".
    assert env.downstream.execute("SELECT v FROM d.k") == ((1,),)
    assert env.downstream.execute("SELECT ran FROM binrelay.ddl_journal"
                                  " WHERE statement LIKE 'RENAME%'") == ((0,),)
    env.downstream.execute("DROP TABLE d.c")  # the operator mends the downstream
    env.sync(spark)
    assert_converged(env)


def test_rules_of_a_table_made_and_renamed_in_one_run(mariadb_factory, tmp_path: Path,
                                                      spark) -> None:
    """The rows after the RENAME write a system-versioned table the run made: the rules are
    read for it under its new name, though the RENAME alone would leave them."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", "CREATE TABLE d.a (id INT PRIMARY KEY, x INT)"
             " WITH SYSTEM VERSIONING", "RENAME TABLE d.a TO d.b",
             "INSERT INTO d.b (id, x) VALUES (1, 5), (2, 6)", "UPDATE d.b SET x = x + 1",
             "DELETE FROM d.b WHERE id = 1"])
    env.relay()
    env.sync(spark)
    assert_converged(env)
