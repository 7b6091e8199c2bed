"""A barrier batch's replay reads each relay file's header once (``spark.serial._reader``
with the replay's ``headers``) and decodes its segments with one decoder, and clear errors
for a file gone or garbled."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from binlog_builder import BinlogBuilder
from binrelay.apply.catalog import TableRules
from binrelay.apply.sql import event_ddl
from binrelay.errors import RelayDirError
from binrelay.spark import serial
from binrelay.spark.planning import Segment


def test_a_relay_file_header_is_read_once_per_replay(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mysql-bin.000001"
    b = BinlogBuilder(flavor="mariadb", checksum=True).header()
    b.ddl("CREATE TABLE app.t (id INT)")
    path.write_bytes(b.bytes())
    reads: list[Path] = []
    read = serial.read_fde_event
    monkeypatch.setattr(serial, "read_fde_event", lambda p: reads.append(p) or read(p))
    headers: serial.Headers = {}
    first = serial._reader(path, headers)
    assert first.fde.is_mariadb and first.mariadb
    assert serial._reader(path, headers) is first and reads == [path]
    # Another replay reads it again (a file may be made anew under the same name).
    again = serial._reader(path, {})
    assert again.fde == first.fde and again.decoder is not first.decoder
    assert reads == [path, path]
    with pytest.raises(RelayDirError, match="is gone"):
        serial._reader(tmp_path / "mysql-bin.000002", headers)
    garbled = tmp_path / "mysql-bin.000003"
    garbled.write_bytes(b"\xfebin" + b"\0" * 10)
    with pytest.raises(RelayDirError, match="no valid binlog header"):
        serial._reader(garbled, headers)


def test_segments_of_a_file_read_with_one_decoder_as_each_with_its_own(
        tmp_path: Path) -> None:
    relay = tmp_path / "relay"
    (relay / "0-1.000001").mkdir(parents=True)
    b = BinlogBuilder(flavor="mariadb", checksum=True).header()
    cuts = [len(b.bytes())]
    for text in ("CREATE TABLE app.t (id INT PRIMARY KEY, v INT)",
                 "ALTER TABLE app.t ADD COLUMN w INT", "DROP TABLE app.t"):
        b.ddl(text)
        cuts.append(len(b.bytes()))
    (relay / "0-1.000001" / "mysql-bin.000001").write_bytes(b.bytes())
    segments = [Segment("0-1.000001", "mysql-bin.000001", start, stop, "ddl")
                for start, stop in itertools.pairwise(cuts)]
    rules = TableRules()
    shared: serial.Headers = {}
    together = [list(serial.segment_actions(relay, seg, lambda: rules, shared))
                for seg in segments]
    alone = [list(serial.segment_actions(relay, seg, lambda: rules)) for seg in segments]
    assert together == alone
    assert [a.text for seg in together for _end, _gtid, actions in seg for a in actions] == [
        "CREATE TABLE app.t (id INT PRIMARY KEY, v INT)",
        "ALTER TABLE app.t ADD COLUMN w INT", "DROP TABLE app.t"]


@pytest.mark.parametrize(("statement", "ddl"), [
    ("CREATE TABLE t (id INT)", True),
    ("  (SELECT 1)", False),
    ("/* app: cart */ UPDATE t SET n = n + 1", False),
    ("-- note\nINSERT INTO t VALUES (1)", False),
    ("# note\n/* more */ DELETE FROM t", False),
    ("/*!40000 ALTER TABLE t DISABLE KEYS */", True),
    ("/*M!100301 INSERT INTO t VALUES (1) */", False),
    ("/* a */ ALTER TABLE t ADD c INT", True),
    ("CREATE TEMPORARY TABLE t (id INT)", False),
    ("CREATE OR REPLACE TEMPORARY TABLE t (id INT)", False),
    ("DROP TEMPORARY TABLE IF EXISTS t", False),
    ("create or replace table t (id int)", True),
    ("", False),
    # MariaDB's SET STATEMENT ... FOR, logged as typed: what follows its FOR decides.
    ("SET STATEMENT lock_wait_timeout = 5 FOR ALTER TABLE t ADD c INT", True),
    ("/* x */ set statement sql_mode = 'A,FOR', n = (SELECT 1 FOR UPDATE) for\n"
     "/* y */ CREATE TABLE t (id INT)", True),
    ("SET STATEMENT x = 1 FOR INSERT INTO t VALUES (1)", False),
    ("SET STATEMENT x = 1 FOR CREATE TEMPORARY TABLE t (id INT)", False),
    ("SET STATEMENT x = 1", False),
    ("SET STATEMENT max_statement_time = @for FOR INSERT INTO t VALUES (1)", False),
    ("SET/* c */STATEMENT x = @@session.for FOR ALTER TABLE t ADD c INT", True),
    ("SET STATEMENT long_query_time = 1. FOR ALTER TABLE t ADD c INT", True),
    ("SET @a = 1", False),
])
def test_which_statements_commit_by_themselves(statement: str, ddl: bool) -> None:
    assert serial.commits_implicitly(statement) is ddl


@pytest.mark.parametrize(("statement", "own"), [
    ("CREATE TEMPORARY TABLE t (id INT)", True),
    ("/* job */ create or replace temporary table t AS SELECT 1", True),
    ("CREATE TEMPORARY SEQUENCE s", True),
    ("SET STATEMENT max_statement_time = 1 FOR CREATE TEMPORARY TABLE t (id INT)", True),
    ("INSERT INTO t VALUES (CONNECTION_ID())", True),
    ("UPDATE t SET owner = connection_id ()", True),
    ("CREATE TABLE t (id INT)", False),
    ("DROP TEMPORARY TABLE t", False),
    ("INSERT INTO t SELECT * FROM tmp", False),
    ("INSERT INTO t (connection_ids) VALUES (1)", False),
])
def test_which_statements_need_their_sessions_thread_id(statement: str, own: bool) -> None:
    """Without ``pseudo_thread_id`` downstream these cannot be replayed as a replica does."""
    assert serial.needs_own_thread(statement) is own


@pytest.mark.parametrize(("text", "raw", "want"), [
    ("CREATE DEFINER=`u`@`%` EVENT e ON SCHEDULE EVERY 1 DAY ENABLE DO DELETE FROM t",
     None, "CREATE DEFINER=`u`@`%` EVENT e ON SCHEDULE EVERY 1 DAY   DISABLE ON SLAVE DO"
           " DELETE FROM t"),
    # UTF-8 bytes: edited alike, whatever is before the body.
    ("CREATE EVENT e ON SCHEDULE EVERY 1 HOUR COMMENT 'café' DO DELETE FROM t", None,
     "CREATE EVENT e ON SCHEDULE EVERY 1 HOUR  DISABLE ON SLAVE COMMENT 'café' DO DELETE"
     " FROM t"),
    # Another client charset, ASCII up to the edits: the bytes edited at the same offsets.
    ("ALTER EVENT e DISABLE ON SLAVE DO INSERT INTO t VALUES ('é')",
     "ALTER EVENT e DISABLE ON SLAVE DO INSERT INTO t VALUES ('é')".encode("latin-1"),
     "ALTER EVENT e   DISABLE ON SLAVE DO INSERT INTO t VALUES ('é')"),
    ("ALTER EVENT e RENAME TO f", None, "ALTER EVENT e RENAME TO f DISABLE ON SLAVE "),
    ("alter event e on schedule every (1 + 1) hour enable;", None,
     "alter event e on schedule every (1 + 1) hour  DISABLE ON SLAVE ;"),
    # As mysqldump writes an event (the dump loaded upstream): executable comments.
    ("/*!50106 CREATE*/ /*!50117 DEFINER=`root`@`localhost`*/ /*!50106 EVENT `e` ON SCHEDULE"
     " EVERY 1 DAY STARTS '2026-01-01 00:00:00' ON COMPLETION NOT PRESERVE ENABLE DO"
     " INSERT INTO t VALUES (1) */", None,
     "/*!50106 CREATE*/ /*!50117 DEFINER=`root`@`localhost`*/ /*!50106 EVENT `e` ON SCHEDULE"
     " EVERY 1 DAY STARTS '2026-01-01 00:00:00' ON COMPLETION NOT PRESERVE  DISABLE ON SLAVE"
     " DO INSERT INTO t VALUES (1) */"),
    ("/*!50106 ALTER EVENT `e` RENAME TO `db`.`f` */", None,
     "/*!50106 ALTER EVENT `e` RENAME TO `db`.`f` DISABLE ON SLAVE  */"),
    # Comments between the clauses; a status word in a comment or string stays.
    ("CREATE OR REPLACE DEFINER = 'u'@'%' EVENT IF NOT EXISTS d.e /* ENABLE */ ON SCHEDULE"
     " EVERY 1 DAY -- enable\n ENABLE COMMENT 'ENABLE' DO SELECT 1", None,
     "CREATE OR REPLACE DEFINER = 'u'@'%' EVENT IF NOT EXISTS d.e /* ENABLE */ ON SCHEDULE"
     " EVERY 1 DAY -- enable\n  DISABLE ON SLAVE COMMENT 'ENABLE' DO SELECT 1"),
    ("CREATE DEFINER=`root`@`localhost` PROCEDURE p() SELECT 1", None, None),
    ("CREATE TABLE event (a INT)", None, None),
    ("SET STATEMENT x = 'FOR' FOR CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 1", None,
     "SET STATEMENT x = 'FOR' FOR CREATE EVENT e ON SCHEDULE EVERY 1 DAY DISABLE ON SLAVE "
     " DO SELECT 1"),
    # Not ASCII before the edits, not UTF-8: left as it is (disabled right after it runs).
    ("CREATE EVENT `é` ON SCHEDULE EVERY 1 HOUR ENABLE DO DELETE FROM t",
     "CREATE EVENT `é` ON SCHEDULE EVERY 1 HOUR ENABLE DO DELETE FROM t".encode("latin-1"),
     None),
    ("CREATE TABLE t (id INT)", None, None),
])
def test_events_made_replica_side_disabled(text: str, raw: bytes | None,
                                           want: str | None) -> None:
    """A replica's SQL thread makes every event it creates or alters SLAVESIDE_DISABLED:
    so does the statement binrelay runs, before the event can run once downstream."""
    raw = text.encode("utf-8") if raw is None else raw
    got_text, got_raw = serial._replica_side(text, raw)
    if want is None:
        assert (got_text, got_raw) == (text, raw)
    else:
        def spaced(sql: str) -> str:
            return " ".join(sql.split())

        assert spaced(got_text) == spaced(want)
        assert got_raw == got_text.encode("utf-8" if raw == text.encode("utf-8")
                                          else "latin-1")


@pytest.mark.parametrize(("text", "want"), [
    # A quote or a DO in a comment before the body: read past (not a string, not the body).
    ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY -- Bob's job\n ENABLE DO INSERT INTO log"
     " VALUES ('what to do')",
     "CREATE EVENT e ON SCHEDULE EVERY 1 DAY -- Bob's job\n DISABLE ON SLAVE DO INSERT INTO"
     " log VALUES ('what to do')"),
    ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY /* DO later */ ENABLE DO SELECT 1",
     "CREATE EVENT e ON SCHEDULE EVERY 1 DAY /* DO later */ DISABLE ON SLAVE DO SELECT 1"),
    ("ALTER EVENT e ENABLE -- re-enabled", "ALTER EVENT e DISABLE ON SLAVE -- re-enabled"),
    # The definer as the server logs it (quoted, spaces allowed); a comment before EVENT.
    ("CREATE DEFINER=`app user`@`%` EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 1",
     "CREATE DEFINER=`app user`@`%` EVENT e ON SCHEDULE EVERY 1 DAY DISABLE ON SLAVE DO"
     " SELECT 1"),
    ("CREATE /* c */ EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 1",
     "CREATE /* c */ EVENT e ON SCHEDULE EVERY 1 DAY DISABLE ON SLAVE DO SELECT 1"),
    ("/*!50106 ALTER EVENT `e` ENABLE */", "/*!50106 ALTER EVENT `e` DISABLE ON SLAVE */"),
    # "--" then a line end: a comment of nothing (the next line is read).
    ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY --\nDO BEGIN\n ALTER TABLE t DISABLE KEYS; END",
     "CREATE EVENT e ON SCHEDULE EVERY 1 DAY --\n DISABLE ON SLAVE DO BEGIN\n ALTER TABLE t"
     " DISABLE KEYS; END"),
    ("ALTER EVENT e DISABLE ON --\nSLAVE", "ALTER EVENT e DISABLE ON SLAVE"),
    # Unquoted names and definers as typed; a user variable is no clause's word.
    ("CREATE EVENT évt ON SCHEDULE EVERY 1 DAY ENABLE DO SELECT 1",
     "CREATE EVENT évt ON SCHEDULE EVERY 1 DAY DISABLE ON SLAVE DO SELECT 1"),
    ("ALTER DEFINER=u@my-host.example EVENT e ENABLE",
     "ALTER DEFINER=u@my-host.example EVENT e DISABLE ON SLAVE"),
    ("ALTER DEFINER=CURRENT_ROLE() EVENT e ON SCHEDULE EVERY @enable DAY",
     "ALTER DEFINER=CURRENT_ROLE() EVENT e ON SCHEDULE EVERY @enable DAY DISABLE ON SLAVE"),
    # A parenthesis in a comment, RENAME TO in a string: no clause of the statement.
    ("ALTER EVENT e /* ( */ COMMENT 'RENAME TO x'",
     "ALTER EVENT e /* ( */ DISABLE ON SLAVE COMMENT 'RENAME TO x'"),
])
def test_event_clauses_past_comments(text: str, want: str) -> None:
    got, _raw = serial._replica_side(text, text.encode("utf-8"))
    assert " ".join(got.split()) == " ".join(want.split())


@pytest.mark.parametrize(("text", "want"), [
    ("ALTER EVENT e COMMENT 'RENAME TO x '", ("db", "e")),
    ("ALTER EVENT e RENAME TO `o``k`.f", ("o`k", "f")),
    ('CREATE EVENT "e" ON SCHEDULE EVERY 1 DAY DO SELECT 1', ("db", "e")),
    ("CREATE DEFINER=`app user`@`%` EVENT IF NOT EXISTS x.y ON SCHEDULE EVERY 1 DAY DO SELECT 1",
     ("x", "y")),
    ("CREATE TABLE event (a INT)", None),
    ("CREATE DEFINER=u@h PROCEDURE event() SELECT 1", None),
    ("CREATE EVENT évt ON SCHEDULE EVERY 1 DAY DO SELECT 1", ("db", "évt")),
    ("ALTER EVENT e RENAME TO", ("db", "e")),  # (cut short: no server logs it)
])
def test_the_event_a_statement_leaves(text: str, want: tuple[str, str] | None) -> None:
    got = event_ddl(text, "db")
    assert (None if got is None else (got.schema, got.table)) == want


def test_an_event_in_another_character_set_is_made_replica_side_disabled() -> None:
    """A statement of a latin1 session is read as UTF-8 with its other bytes kept as escapes:
    edited alike in text and bytes, not left to run enabled (nor raising)."""
    raw = "CREATE EVENT `é` ON SCHEDULE EVERY 1 HOUR ENABLE DO DELETE FROM t".encode("latin-1")
    text = raw.decode("utf-8", "surrogateescape")
    got_text, got_raw = serial._replica_side(text, raw)
    assert b" ".join(got_raw.split()) == ("CREATE EVENT `é` ON SCHEDULE EVERY 1 HOUR DISABLE"
                                         " ON SLAVE DO DELETE FROM t").encode("latin-1")
    assert got_text.encode("utf-8", "surrogateescape") == got_raw
