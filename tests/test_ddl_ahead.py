"""A migration's run of DDL sent ahead (issue 14: a range of DDL in about their own time):
evident DDL of a batch go to the downstream several in one script, each with its journal
row, while the driver decodes the next.  Checked against real servers: the run ends as the
upstream's (definitions and rows); a DDL that fails in the middle of a script is handled
as alone (counted as done, or the sync stops at it with the ones before it applied); text
that could run into the next statement is never sent ahead; a sync killed with a script
still running on the downstream is waited for by the next one (the pipeline's lock).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binrelay import failpoints
from binrelay.apply import ddl as ddl_module
from binrelay.apply.checkpoint import DEFAULT_STORE, lock_name, pipeline_lock
from binrelay.apply.ddl_journal import ends_alone
from binrelay.errors import (
    CheckpointError,
    DownstreamDdlError,
    DownstreamRowError,
    UnfaithfulApplyError,
)
from fidelity import SimulatedCrash, assert_converged, make_env


def definitions(server: Any, schema: str) -> dict[str, str]:
    names = [n for (n,) in server.execute(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (schema,))]
    return {n: server.execute(f"SHOW CREATE TABLE `{schema}`.`{n}`")[0][1] for n in names}


def assert_same_definitions(env: Any, schema: str = "d") -> None:
    assert definitions(env.downstream, schema) == definitions(env.upstream, schema)


def migration(tables: int) -> list[str]:
    """Per table what a migration does, one statement after the other."""
    out = ["CREATE DATABASE d"]
    for i in range(tables):
        out += [f"CREATE TABLE d.t{i} (id INT PRIMARY KEY, a INT)",
                f"ALTER TABLE d.t{i} ADD COLUMN c INT NOT NULL DEFAULT {i}",
                f"CREATE INDEX a_idx ON d.t{i} (a)",
                f"RENAME TABLE d.t{i} TO d.r{i}"]
        if i % 3 == 2:
            out.append(f"DROP TABLE d.r{i}")  # logged with the server's own comment
    return out


def count_scripts(monkeypatch: Any) -> list[int]:
    """The number of DDL in each script sent ahead."""
    sizes: list[int] = []
    real = ddl_module.DdlsAhead._send

    def send(self: Any, conn: Any) -> None:
        if self._queued:
            sizes.append(len(self._queued))
        real(self, conn)

    monkeypatch.setattr(ddl_module.DdlsAhead, "_send", send)
    return sizes


def test_a_migration_goes_ahead_and_ends_as_upstream(mariadb_factory, tmp_path: Path, spark,
                                                     monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run([*migration(9),
             # Text a script must not let run into the next statement: a line comment
             # (not sent ahead), semicolons and comment marks inside names and literals,
             # a closed comment (sent ahead).
             "CREATE TABLE d.`x;y` (id INT PRIMARY KEY, v VARCHAR(8) DEFAULT '#;--')"
             " COMMENT 'a -- b; c # d'",
             "CREATE TABLE d.commented (id INT PRIMARY KEY) -- the last word",
             "CREATE TABLE d.hashed (id INT PRIMARY KEY) # the last word",
             "CREATE TABLE d.blocked (id INT PRIMARY KEY) /* closed */",
             "INSERT INTO d.r0 VALUES (1, 1, 1)",
             "ALTER TABLE d.r0 ADD COLUMN e INT DEFAULT 5",
             "INSERT INTO d.r0 VALUES (2, 2, 2, 2)"])
    env.relay()
    sizes = count_scripts(monkeypatch)
    seen = count_retimed(monkeypatch)
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)
    assert sum(sizes) >= 35 and max(sizes) == 8, sizes  # the scripts held several DDL
    assert sum(seen) >= 30, seen  # one session's DDL: retimed, not set again
    assert env.downstream.execute("SELECT COUNT(*) FROM binrelay.ddl_journal") == ((0,),)


def count_retimed(monkeypatch: Any) -> list[bool]:
    """Per DDL sent after another of the same script: whether it was retimed."""
    seen: list[bool] = []
    real = ddl_module._retimed

    def retimed(*args: Any) -> Any:
        out = real(*args)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(ddl_module, "_retimed", retimed)
    return seen


def test_contexts_that_change_between_ddl(mariadb_factory, tmp_path: Path, spark,
                                          monkeypatch) -> None:
    """A run of ADD COLUMN whose filled-in values depend on the session: its timestamp
    (CURRENT_TIMESTAMP), time zone (a TIMESTAMP default) and sql_mode change between the
    statements, or stay.  A DDL whose context is the one before it but for the timestamp
    is only retimed; each column must hold what the upstream's does."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", "CREATE TABLE d.p (id INT PRIMARY KEY)",
             "INSERT INTO d.p VALUES (1), (2), (3)",
             "SET timestamp = 1000000000",
             "ALTER TABLE d.p ADD COLUMN c1 TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
             "SET timestamp = 1500000000",
             "ALTER TABLE d.p ADD COLUMN c2 TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
             "SET time_zone = '+05:00'",
             "ALTER TABLE d.p ADD COLUMN c3 TIMESTAMP NOT NULL DEFAULT '2020-01-01 00:00:00'",
             "SET timestamp = 1600000000",
             "ALTER TABLE d.p ADD COLUMN c4 TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
             "SET time_zone = '+00:00'",
             "ALTER TABLE d.p ADD COLUMN c5 TIMESTAMP NOT NULL DEFAULT '2020-01-01 00:00:00'",
             "SET sql_mode = ''",
             "ALTER TABLE d.p ADD COLUMN c6 DATE NOT NULL DEFAULT '0000-00-00'",
             "SET timestamp = 1700000000",
             "ALTER TABLE d.p ADD COLUMN c7 DATETIME NOT NULL DEFAULT NOW()",
             "SET sql_mode = DEFAULT, timestamp = DEFAULT",
             "CREATE TABLE d.q (id INT PRIMARY KEY AUTO_INCREMENT)",
             "INSERT INTO d.q VALUES ()", "INSERT INTO d.q VALUES ()",
             "ALTER TABLE d.p ADD COLUMN c8 INT NOT NULL DEFAULT 8"])
    env.relay()
    seen = count_retimed(monkeypatch)
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)
    assert True in seen and False in seen, seen
    first, second = env.downstream.execute(
        "SELECT UNIX_TIMESTAMP(c1), UNIX_TIMESTAMP(c2) FROM d.p WHERE id = 1")[0]
    assert (first, second) == (1000000000, 1500000000)


def test_rows_after_ddl_sent_ahead_follow_their_rules(mariadb_factory, tmp_path: Path,
                                                     spark, monkeypatch) -> None:
    """Rows after DDL sent ahead are written by the rules those DDL leave (a generated
    column added, a table made system-versioned): the catalog is read again only once the
    DDL have run."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d",
             "CREATE TABLE d.g (id INT PRIMARY KEY, a INT)",
             "INSERT INTO d.g VALUES (1, 1)",
             "ALTER TABLE d.g ADD COLUMN s INT AS (a + 1) STORED",
             "ALTER TABLE d.g ADD COLUMN v INT AS (a * 2) VIRTUAL",
             # Rows between DDL of the run: applied in it, after the DDL before them.
             "INSERT INTO d.g (id, a) VALUES (2, 20)",
             "UPDATE d.g SET a = 5 WHERE id = 1",
             "CREATE TABLE d.h (id INT PRIMARY KEY, a INT)",
             "INSERT INTO d.h VALUES (1, 1)",
             "ALTER TABLE d.h ADD COLUMN b INT DEFAULT 3, ADD SYSTEM VERSIONING",
             "UPDATE d.h SET a = 2 WHERE id = 1",
             "INSERT INTO d.h (id, a) VALUES (2, 2)",
             "CREATE TABLE d.last (id INT PRIMARY KEY)"])
    env.relay()
    sizes = count_scripts(monkeypatch)
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)
    assert sizes, "no DDL went ahead"


#: A run of evident DDL, and whether each has a journal row of its own when sent ahead:
#: only where it could take away (or make again) what a DDL since the last row made or
#: took away, whose replay would then not be what it was.
RUN_OF_DDL = [
    ("CREATE TABLE d.t (id INT PRIMARY KEY, a INT)", True),  # first after CREATE DATABASE
    ("ALTER TABLE d.t ADD COLUMN c INT", False),  # only adds, as the CREATE
    ("CREATE INDEX ia ON d.t (a)", False),
    # Takes c away: ADD COLUMN c, run again after it, would add it back.
    ("ALTER TABLE d.t ADD COLUMN e INT, DROP COLUMN c", True),
    # Takes t away: CREATE TABLE d.t, run again after it, would make it again.
    ("RENAME TABLE d.t TO d.u", True),
    ("CREATE TABLE d.v (id INT PRIMARY KEY)", False),  # names nothing the RENAME did
    # Makes t again: the RENAME, run again after it, would fail (u exists).
    ("CREATE TABLE d.t (id INT PRIMARY KEY, b INT)", True),
    ("DROP TABLE d.v", False),  # names nothing of the CREATE before it
    ("TRUNCATE TABLE d.u", False),
    ("CREATE TABLE d.v (id INT PRIMARY KEY, w INT)", True),  # makes v again
    ("DROP INDEX ia ON d.u", False),
    ("CREATE INDEX ia ON d.u (e)", True),  # makes ia again
    ("ALTER TABLE d.t ADD COLUMN f INT DEFAULT 6", False),
]


def journaled_ahead(monkeypatch: Any) -> list[tuple[str, bool]]:
    """Per DDL sent ahead: its statement and whether its script commits a journal row."""
    sent: list[tuple[str, bool]] = []
    real = ddl_module.DdlsAhead._send

    def send(self: Any, conn: Any) -> None:
        before = list(self._queued)
        real(self, conn)
        sent.extend((item.script.statement, item.script.journaled > item.script.lead)
                    for item in before[:len(before) - len(self._queued)])

    monkeypatch.setattr(ddl_module.DdlsAhead, "_send", send)
    return sent


def test_journal_rows_only_where_a_replay_needs_them(mariadb_factory, tmp_path: Path, spark,
                                                    monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", *(sql for sql, _row in RUN_OF_DDL),
             "INSERT INTO d.t VALUES (1, 2, 3)", "INSERT INTO d.u VALUES (4, 5, 6)"])
    env.relay()
    sent = journaled_ahead(monkeypatch)
    env.sync(spark)
    # (A DROP TABLE is logged as the server rewrote it.)
    assert [row for _sql, row in sent] == [row for _sql, row in RUN_OF_DDL], sent
    assert_converged(env)
    assert_same_definitions(env)


@pytest.mark.parametrize("at", range(1, len(RUN_OF_DDL) + 1))
def test_a_run_with_rows_left_out_replayed_after_a_crash(at: int, mariadb_factory,
                                                        tmp_path: Path, spark,
                                                        monkeypatch) -> None:
    """The sync "dies" right after DDL ``at`` of the run, sent ahead, ran (the rest of its
    script going on on the downstream): the replay runs the DDL again from the batch's last
    journal row, and the run ends as the upstream's."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", *(sql for sql, _row in RUN_OF_DDL),
             "INSERT INTO d.t VALUES (1, 2, 3)", "INSERT INTO d.u VALUES (4, 5, 6)"])
    env.relay()
    ran: list[str] = []

    def hit(name: str, key: str = "") -> None:
        if name == "ddl-applied":
            ran.append(key)
            if len(ran) == at + 1:
                raise SimulatedCrash(key)

    monkeypatch.setattr(failpoints, "hit", hit)
    sent = journaled_ahead(monkeypatch)
    with pytest.raises(SimulatedCrash):
        env.sync(spark)
    assert sent and [row for _sql, row in sent] == [row for _sql, row in RUN_OF_DDL][:len(sent)]
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)


def test_a_ddl_counted_as_done_in_a_script_lets_the_rest_run(mariadb_factory, tmp_path: Path,
                                                             spark, monkeypatch) -> None:
    """A CREATE TABLE the downstream already has fails in the middle of a script ("exists",
    which a replay counts as done): the DDL after it in the same script still run."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(migration(4))
    env.relay()
    env.downstream.execute("CREATE DATABASE d")
    env.downstream.execute("CREATE TABLE d.t1 (id INT PRIMARY KEY, a INT)")
    sizes = count_scripts(monkeypatch)
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)
    assert max(sizes) > 1


def test_big_ddl_in_scripts_of_bounded_size(mariadb_factory, tmp_path: Path, spark,
                                            monkeypatch) -> None:
    """DDL of ~9 KB each (long comments) from one session in a time zone of its own (their
    TIMESTAMP defaults are read in it): scripts stay within their byte bound, one of them
    fails inside a script ("exists"), and every definition ends as the upstream's."""
    env = make_env(mariadb_factory, tmp_path)
    # Comments of 1,000 characters on 9 columns (a column's comment holds 1,024).
    columns = ", ".join(f"c{n} INT COMMENT '{chr(97 + n) * 1000}'" for n in range(9))

    def create(i: int) -> str:
        return (f"CREATE TABLE d.big{i} (id INT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT"
                f" '2020-01-0{1 + i % 9} 00:00:00', {columns})")

    env.run(["CREATE DATABASE d", "SET time_zone = '+05:00'", *map(create, range(14))])
    env.relay()
    with env.downstream.connect() as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+05:00'")
        cur.execute("CREATE DATABASE d")
        cur.execute(create(5))
    sizes = count_scripts(monkeypatch)
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)
    assert len(sizes) >= 3 and 1 < max(sizes) < 8, sizes


def test_a_ddl_refused_in_a_script_stops_there(mariadb_factory, tmp_path: Path, spark) -> None:
    """A RENAME onto a table only the downstream has fails in the middle of a script: the
    sync stops with that DDL's position, the DDL before it applied and none after it; once
    the downstream is mended the next sync runs it and the rest."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(migration(4))
    env.relay()
    env.downstream.execute("CREATE DATABASE d")
    env.downstream.execute("CREATE TABLE d.r2 (other INT)")
    with pytest.raises(DownstreamDdlError) as info:
        env.sync(spark)
    assert "RENAME TABLE d.t2 TO d.r2" in str(info.value)
    tables = {n for (n,) in env.downstream.execute(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'd'")}
    assert tables == {"r0", "r1", "t2", "r2"}  # t2 altered and indexed, not renamed
    assert "a_idx" in env.downstream.execute("SHOW CREATE TABLE d.t2")[0][1]
    assert env.downstream.execute(
        "SELECT ran FROM binrelay.ddl_journal WHERE statement LIKE 'RENAME TABLE d.t2%'"
    ) == ((0,),)
    # The journal's last row is the refused DDL's: nothing after it was journaled.
    assert env.downstream.execute(
        "SELECT statement FROM binrelay.ddl_journal ORDER BY written_at DESC, position DESC"
        " LIMIT 1") == (("RENAME TABLE d.t2 TO d.r2",),)
    env.downstream.execute("DROP TABLE d.r2")
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)


def test_a_killed_syncs_script_is_waited_for(mariadb_factory, tmp_path: Path, spark,
                                             monkeypatch, caplog) -> None:
    """The sync "dies" after the first DDL of a script while the downstream is held up
    inside it (another session's metadata lock on a table a later DDL of the script
    alters): the server's session runs the rest of the script after the sync is gone.  The
    next sync waits for the pipeline's lock until it has, then replays the batch and ends
    as the upstream."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", "CREATE TABLE d.held (id INT PRIMARY KEY)",
             "INSERT INTO d.held VALUES (1)"])
    env.relay()
    env.sync(spark)
    reader = env.downstream.connect(autocommit=False)
    with reader.cursor() as cur:
        cur.execute("SELECT * FROM d.held")  # a shared metadata lock until it commits
    run = migration(3)[1:]
    env.run([*run[:3], "ALTER TABLE d.held ADD COLUMN late INT DEFAULT 9", *run[3:]])
    env.relay()

    crashed: list[str] = []

    def hit(name: str, key: str = "") -> None:
        if name == "ddl-applied" and not crashed:
            crashed.append(key)
            raise SimulatedCrash(key)

    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(SimulatedCrash):
        env.sync(spark)
    assert crashed
    # The killed sync's session goes on with its script, up to the DDL the reader holds.
    deadline = time.monotonic() + 30
    while env.downstream.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE"
            " '%metadata lock%' AND INFO LIKE 'ALTER TABLE d.held%'") != ((1,),):
        assert time.monotonic() < deadline, "the script never reached the held table"
        time.sleep(0.05)

    outcome: list[BaseException | None] = []

    def resume() -> None:
        try:
            env.sync(spark)
            outcome.append(None)
        except BaseException as exc:  # reported below
            outcome.append(exc)

    caplog.set_level(logging.WARNING, logger="binrelay.apply.checkpoint")
    resumed = threading.Thread(target=resume)
    resumed.start()
    deadline = time.monotonic() + 60
    while not any("pipeline's lock" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline and resumed.is_alive(), outcome
        time.sleep(0.05)
    assert not outcome  # still waiting
    reader.commit()
    reader.close()
    resumed.join(120)
    assert outcome == [None]
    assert_converged(env)
    assert_same_definitions(env)


def with_rows(tables: int) -> list[str]:
    """A migration with rows between its DDL: a keyless table's (applied twice, they would
    be there twice), a keyed table's inserts, updates and deletes, an ENUM's error value
    (written back as stored: a warning downstream that stops nothing), backslashes in
    values from a session without backslash escapes (its DDL's context has none either;
    the rows run after the applier's own is back)."""
    out = ["CREATE DATABASE d", "CREATE TABLE d.log (n INT, note VARCHAR(16))",
           "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'"]
    for i in range(tables):
        out += [f"CREATE TABLE d.t{i} (id INT PRIMARY KEY, a INT, e ENUM('x', 'y'))",
                f"INSERT INTO d.log VALUES ({i}, 'made\\'), ({i}, 'a\\nb''s')",
                f"INSERT INTO d.t{i} VALUES (1, {i}, 'x'), (2, {i}, 'nope')",
                f"ALTER TABLE d.t{i} ADD COLUMN c INT NOT NULL DEFAULT {i}",
                f"UPDATE d.t{i} SET a = a + 10 WHERE id = 1",
                f"CREATE INDEX a_idx ON d.t{i} (a)",
                f"DELETE FROM d.t{i} WHERE id = 2",
                f"INSERT INTO d.log VALUES ({i}, 'indexed'), ({i}, 'again')",
                f"RENAME TABLE d.t{i} TO d.r{i}"]
    return out


def rows_sent_ahead(monkeypatch: Any) -> list[int]:
    """Per group of rows between DDL that went ahead: its statements."""
    sent: list[int] = []
    real = ddl_module.DdlsAhead.add_rows

    def add_rows(self: Any, conn: Any, left: Any, statements: Any) -> bool:
        taken = real(self, conn, left, statements)
        if taken:
            sent.append(len(statements))
        return taken

    monkeypatch.setattr(ddl_module.DdlsAhead, "add_rows", add_rows)
    return sent


def test_rows_between_ddl_go_ahead_in_their_scripts(mariadb_factory, tmp_path: Path, spark,
                                                    monkeypatch) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(with_rows(5))
    env.relay()
    sent = rows_sent_ahead(monkeypatch)
    sizes = count_scripts(monkeypatch)
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)
    assert len(sent) >= 20, sent  # the rows between (not those a RENAME's rules hold up)
    assert max(sizes) > 1


def test_rows_sent_ahead_escaped_for_the_applier(mariadb_factory, tmp_path: Path, spark,
                                                 monkeypatch) -> None:
    """Rows between DDL from a session without backslash escapes, after a DDL that has the
    rules read again (the DDL sent ahead run first, the connection's last answer given in
    the DDL's sql_mode): their values are escaped for the applier's session they run in."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d", "CREATE TABLE d.k (id INT PRIMARY KEY, v VARCHAR(32))"])
    env.relay()
    env.sync(spark)
    env.run(["SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'",
             "CREATE TABLE d.a (id INT PRIMARY KEY)",
             "ALTER TABLE d.k MODIFY v VARCHAR(40), ADD COLUMN w INT",
             "INSERT INTO d.k VALUES (1, 'ends\\', 1), (2, 'a\\nb''c', 2)",
             "CREATE INDEX i ON d.a (id)", "INSERT INTO d.k VALUES (3, '\\\\', 3)",
             "ALTER TABLE d.a ADD COLUMN b INT"])
    env.relay()
    sent = rows_sent_ahead(monkeypatch)
    env.sync(spark)
    assert sent, "the rows did not go ahead"
    assert_converged(env)
    assert env.downstream.execute("SELECT v FROM d.k ORDER BY id") == (
        ("ends\\",), ("a\\nb'c",), ("\\\\",))


@pytest.mark.parametrize(("after", "at"), [("rows", 1), ("rows", 3), ("rows", 6),
                                            ("ddl", 3), ("ddl", 6), ("ddl", 11)])
def test_rows_sent_ahead_replayed_after_a_crash(after: str, at: int, mariadb_factory,
                                               tmp_path: Path, spark, monkeypatch) -> None:
    """The sync "dies" once the script ending with rows ``at`` is answered (the rows
    judged, not committed: the next DDL's journal row commits them), or right after DDL
    ``at`` ran (its journal row committed the rows before it): the replay (which sends
    nothing ahead) applies each row once."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(with_rows(3))
    env.relay()
    sent = rows_sent_ahead(monkeypatch)
    real = ddl_module.DdlsAhead._drain

    def drain(self: Any, conn: Any) -> None:
        ends_with_rows = self._cur is not None and \
            isinstance(self._flight[-1] if self._flight else None, ddl_module._RowsAhead)
        real(self, conn)
        if after == "rows" and ends_with_rows and len(sent) == at:
            raise SimulatedCrash(at)

    applied: list[str] = []

    def hit(name: str, key: str = "") -> None:
        if after == "ddl" and name == "ddl-applied":
            applied.append(key)
            if len(applied) == at:
                raise SimulatedCrash(key)

    monkeypatch.setattr(ddl_module.DdlsAhead, "_drain", drain)
    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(SimulatedCrash):
        env.sync(spark)
    assert sent, "no rows went ahead before the crash"
    env.sync(spark)
    assert_converged(env)
    assert_same_definitions(env)


def test_a_lock_wait_in_rows_sent_ahead_runs_the_batch_again(mariadb_factory, tmp_path: Path,
                                                              spark, monkeypatch) -> None:
    """A row statement of a script sent ahead waits for a lock another downstream session
    holds, and times out with the transaction rolled back (``innodb_rollback_on_timeout``,
    as a deadlock rolls it back): the rows before it in the script are gone too, so the
    batch runs again from its checkpoint (the lock let go meanwhile), as a row run alone
    would have it; none is lost."""
    env = make_env(mariadb_factory, tmp_path, downstream_args=[
        "--innodb-rollback-on-timeout=ON", "--innodb-lock-wait-timeout=1"])
    env.run(["CREATE DATABASE d", "CREATE TABLE d.k (id INT PRIMARY KEY, v INT)",
             "INSERT INTO d.k VALUES (1, 1)"])
    env.relay()
    env.sync(spark)
    env.run(["CREATE TABLE d.a (id INT PRIMARY KEY)", "CREATE INDEX i ON d.a (id)",
             "INSERT INTO d.k VALUES (2, 2), (3, 3)", "UPDATE d.k SET v = 10 WHERE id = 1",
             "INSERT INTO d.k VALUES (4, 4)", "ALTER TABLE d.a ADD COLUMN b INT"])
    env.relay()
    sent = rows_sent_ahead(monkeypatch)
    holder = env.downstream.connect(autocommit=False)
    with holder.cursor() as cur:
        cur.execute("SELECT * FROM d.k WHERE id = 1 FOR UPDATE")
    timed_out: list[int] = []
    real = ddl_module.DdlsAhead._failed

    def failed(self: Any, conn: Any, error: BaseException) -> None:
        if not timed_out:
            timed_out.append(getattr(error, "args", (0,))[0])
            holder.commit()  # the lock is free from now on
        real(self, conn, error)

    monkeypatch.setattr(ddl_module.DdlsAhead, "_failed", failed)
    try:
        env.sync(spark)
    finally:
        holder.close()
    assert timed_out == [1205]
    assert sent, "the rows did not go ahead"
    assert_converged(env)
    assert_same_definitions(env)


@pytest.mark.parametrize("case", ["duplicate", "diverged", "changed"])
def test_a_row_sent_ahead_is_refused_as_alone(case: str, mariadb_factory, tmp_path: Path,
                                            spark, monkeypatch) -> None:
    """A row between DDL that the downstream refuses (a key it holds already), one whose
    row is missing there (an UPDATE that matches none) or a value it stores otherwise (a
    FLOAT(4,2)'s, with a warning only): in a script of rows sent ahead, in the middle of its
    statements, the sync stops with the error the row gives alone, as the replay of the
    batch (which sends nothing ahead) then does."""
    env = make_env(mariadb_factory, tmp_path)
    env.run(["CREATE DATABASE d",
             "CREATE TABLE d.k (id INT PRIMARY KEY, v VARCHAR(32), f FLOAT)",
             "INSERT INTO d.k VALUES (1, 'one', 1)"])
    env.relay()
    env.sync(spark)
    env.downstream.execute({
        "duplicate": "INSERT INTO d.k VALUES (5, 'here', 0)",
        "diverged": "DELETE FROM d.k WHERE id = 1",
        # (What the catalog check cannot see: a FLOAT's (M,D), not in the table map.)
        "changed": "ALTER TABLE d.k MODIFY f FLOAT(4,2)",
    }[case])
    env.run(["CREATE TABLE d.a (id INT PRIMARY KEY)", "CREATE INDEX i ON d.a (id)",
             "INSERT INTO d.k VALUES (4, 'four', 1), (5, 'five', 1000.5), (6, 'six', 2)",
             "UPDATE d.k SET v = 'once more' WHERE id = 1",
             "ALTER TABLE d.a ADD COLUMN b INT"])
    env.relay()
    sent = rows_sent_ahead(monkeypatch)
    error = DownstreamRowError if case != "changed" else UnfaithfulApplyError
    with pytest.raises(error) as ahead:
        env.sync(spark)
    assert sent, "the rows did not go ahead"
    with pytest.raises(error) as alone:
        env.sync(spark)
    assert str(ahead.value) == str(alone.value)
    assert ahead.value.position == alone.value.position is not None


def test_the_lock_held_elsewhere_stops_with_one_line(mariadb_factory) -> None:
    server = mariadb_factory(server_id=2)
    holder = server.connect()
    with holder.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, 0), CONNECTION_ID()", (lock_name("p", DEFAULT_STORE),))
        got, holder_id = cur.fetchone()
    assert got == 1
    conn = server.connect()
    with pytest.raises(CheckpointError) as info, pipeline_lock(conn, "p", wait=1.5):
        pass
    assert f"connection {holder_id}" in str(info.value) and info.value.hint
    holder.close()
    # Let go by its holder, the lock is taken and given back.
    with pipeline_lock(conn, "p", wait=5), contextlib.closing(server.connect()) as other, \
            other.cursor() as cur:
        cur.execute("SELECT IS_USED_LOCK(%s) = %s", (lock_name("p"), conn.thread_id()))
        assert cur.fetchone() == (1,)
    with conn.cursor() as cur:
        cur.execute("SELECT IS_FREE_LOCK(%s)", (lock_name("p"),))
        assert cur.fetchone() == (1,)


@pytest.mark.parametrize(("statement", "alone"), [
    ("DROP TABLE `r` /* generated by server */", True),
    ("CREATE TABLE t (a VARCHAR(3) DEFAULT '#;--') COMMENT 'x;y'", True),
    ("ALTER TABLE `a;b` ADD COLUMN c INT", True),
    ('CREATE TABLE "q;t" (a INT)', True),
    ("CREATE TABLE t (a INT) -- a comment", False),
    ("CREATE TABLE t (a INT) # a comment", False),
    ("CREATE TABLE t (a INT) /* left open", False),
    ("CREATE TABLE t (a INT) /*!50100 PARTITION BY HASH (a) */", False),
    ("CREATE TABLE t (a VARCHAR(3) DEFAULT 'a\\'b')", False),
    ("CREATE TABLE t (a INT);", False),
    ("CREATE TABLE t (a INT); DROP TABLE u", False),
    # A quote inside a quoted name starts no literal: what follows is read as the server
    # reads it.
    ("CREATE TABLE `x'y` (a INT) -- '", False),
    ("CREATE INDEX `i'` ON t (a) #'", False),
    ('CREATE TABLE `x"` (a INT) #"', False),
    ("CREATE TABLE `it's` (a VARCHAR(3) DEFAULT 'a;b')", True),
    ("CREATE TABLE t (a VARCHAR(3) DEFAULT 'open)", False),
])
def test_ends_alone(statement: str, alone: bool) -> None:
    assert ends_alone(statement) is alone


class _NoUserLocks:
    """A real connection whose server answers GET_LOCK as a Galera node does."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def cursor(self) -> Any:
        outer = self.conn.cursor()

        class Cursor:
            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: Any) -> None:
                outer.close()

            def execute(self, sql: str, args: Any = None) -> Any:
                if "GET_LOCK" in sql:
                    raise pymysql.err.NotSupportedError(
                        1235, "This version of MariaDB doesn't yet support 'GET_LOCK in"
                              " cluster (WSREP_ON=ON)'")
                return outer.execute(sql, args)

        return Cursor()


def test_a_server_without_user_locks(mariadb_factory, tmp_path: Path, spark,
                                     monkeypatch) -> None:
    """A downstream that refuses GET_LOCK (a Galera node): no lock, and no DDL sent ahead
    (one at a time, as a killed sync's session then outlives nothing but its statement)."""
    server = mariadb_factory(server_id=2)
    with pipeline_lock(_NoUserLocks(server.connect()), "p") as locked:
        assert locked is False

    from binrelay.spark import sync as sync_module

    real = sync_module.pipeline_lock

    def refused(conn: Any, *args: Any, **kwargs: Any) -> Any:
        return real(_NoUserLocks(conn), *args, **kwargs)

    monkeypatch.setattr(sync_module, "pipeline_lock", refused)
    env = make_env(mariadb_factory, tmp_path)
    env.run(migration(4))
    env.relay()
    sizes = count_scripts(monkeypatch)
    env.sync(spark)
    assert sizes == []
    assert_converged(env)
    assert_same_definitions(env)


@pytest.mark.parametrize(("raw", "plain"), [
    (b"CREATE TABLE t (a INT)", True),
    # gbk, not ASCII: the second byte of such a character may be a backtick or a quote.
    ("CREATE TABLE `\u9227x` (a INT)".encode("gbk"), False),
    ("CREATE TABLE t (a INT) COMMENT 'caf\u00e9'".encode(), False),
])
def test_only_ascii_goes_ahead(raw: bytes, plain: bool) -> None:
    assert ddl_module._plain(raw.decode("utf-8", "surrogateescape"), raw) is plain


def test_the_names_of_the_lock_fit_a_server() -> None:
    assert len(lock_name("p" * 200)) <= 64
    assert lock_name("a") != lock_name("b")
    assert lock_name("a") == lock_name("a", DEFAULT_STORE)

