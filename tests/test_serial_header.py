"""A barrier batch's replay reads each relay file's header once (``spark.serial._reader``
with the replay's ``headers``) and decodes its segments with one decoder, and clear errors
for a file gone or garbled."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from binlog_builder import BinlogBuilder
from binrelay.apply.catalog import TableRules
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
])
def test_which_statements_commit_by_themselves(statement: str, ddl: bool) -> None:
    assert serial.commits_implicitly(statement) is ddl


@pytest.mark.parametrize(("statement", "own"), [
    ("CREATE TEMPORARY TABLE t (id INT)", True),
    ("/* job */ create or replace temporary table t AS SELECT 1", True),
    ("CREATE TEMPORARY SEQUENCE s", True),
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
        assert got_text == want
        assert got_raw == (want.encode("utf-8") if raw == text.encode("utf-8")
                           else want.encode("latin-1"))
