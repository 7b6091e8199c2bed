"""Transaction ends from event types: tables per flavour, MySQL captures, a real MariaDB."""

from __future__ import annotations

from pathlib import Path

import pytest

import binlog_builder as bb
from binrelay.binlog import constants as c
from binrelay.binlog.parse import parse_format_description, parse_mysql_gtid
from binrelay.binlog.txn import TxnTracker, needs_query_prefix, savepoint_action
from binrelay.gtid import MysqlGtidSet
from binrelay.relay.progress import Progress
from binrelay.testing.sandbox import MariaDBServer
from captures import MYSQL_CAPTURES, capture, capture_binlogs

# One step: (event type, MariaDB GTID flags or query text, expected "ends a transaction").
Step = tuple[int, int | bytes | None, bool]

TRX = c.FL_TRANSACTIONAL | c.FL_ALLOW_PARALLEL
DDL = c.FL_STANDALONE | c.FL_ALLOW_PARALLEL | c.FL_DDL
G, Q, X = c.GTID_EVENT, c.QUERY_EVENT, c.XID_EVENT
MG, AG = c.GTID_LOG_EVENT, c.ANONYMOUS_GTID_LOG_EVENT
TM, WR1, WR2 = c.TABLE_MAP_EVENT, c.WRITE_ROWS_EVENT_V1, c.WRITE_ROWS_EVENT
ANN, RQ = c.ANNOTATE_ROWS_EVENT, c.ROWS_QUERY_LOG_EVENT

MARIADB_CASES: dict[str, list[Step]] = {
    "standalone DDL": [(G, DDL, False), (Q, b"CREATE TABLE t (id INT)", True)],
    "DDL without the DDL flag": [(G, c.FL_STANDALONE, False), (Q, b"DROP TABLE t", True)],
    "rows + XID": [(G, TRX, False), (ANN, None, False), (TM, None, False), (WR1, None, False),
                   (X, None, True)],
    "two statements": [(G, TRX, False), (ANN, None, False), (TM, None, False),
                       (WR1, None, False), (ANN, None, False), (TM, None, False),
                       (c.UPDATE_ROWS_EVENT_V1, None, False), (X, None, True)],
    "MyISAM: Query COMMIT": [(G, c.FL_ALLOW_PARALLEL, False), (ANN, None, False),
                             (TM, None, False), (WR1, None, False), (Q, b"COMMIT", True)],
    "rolled back mixed trx": [(G, 0, False), (TM, None, False), (WR1, None, False),
                              (Q, b"ROLLBACK", True)],
    "statement-based": [(G, TRX, False), (c.INTVAR_EVENT, None, False),
                        (Q, b"INSERT INTO t VALUES (NULL)", False), (c.RAND_EVENT, None, False),
                        (c.USER_VAR_EVENT, None, False), (Q, b"UPDATE t SET v = @v", False),
                        (X, None, True)],
    "savepoint and ROLLBACK TO": [(G, TRX, False), (TM, None, False), (WR1, None, False),
                                  (Q, b"SAVEPOINT `s1`", False), (TM, None, False),
                                  (WR1, None, False), (Q, b"ROLLBACK TO `s1`", False),
                                  (TM, None, False), (WR1, None, False), (X, None, True)],
    "XA PREPARE": [(G, TRX | c.FL_PREPARED_XA, False), (ANN, None, False), (TM, None, False),
                   (WR1, None, False), (Q, b"XA END X'7832',X'',1", False),
                   (c.XA_PREPARE_LOG_EVENT, None, True)],
    "empty XA PREPARE": [(G, c.FL_ALLOW_PARALLEL | c.FL_PREPARED_XA, False),
                         (Q, b"XA END X'63',X'',1", False), (c.XA_PREPARE_LOG_EVENT, None, True)],
    "XA COMMIT": [(G, c.FL_STANDALONE | TRX | c.FL_COMPLETED_XA, False),
                  (Q, b"XA COMMIT X'7832',X'',1", True)],
    "XA ROLLBACK": [(G, c.FL_STANDALONE | TRX | c.FL_COMPLETED_XA, False),
                    (Q, b"XA ROLLBACK X'62',X'',1", True)],
    "compressed rows": [(G, TRX, False), (TM, None, False),
                        (c.WRITE_ROWS_COMPRESSED_EVENT_V1, None, False), (X, None, True)],
    "compressed DDL": [(G, DDL, False), (c.QUERY_COMPRESSED_EVENT, b"x\x9c...", True)],
}

MYSQL_CASES: dict[str, list[Step]] = {
    "GTID + BEGIN + rows + XID": [(MG, None, False), (Q, b"BEGIN", False), (RQ, None, False),
                                  (TM, None, False), (WR2, None, False), (X, None, True)],
    "GTID + DDL": [(MG, None, False), (Q, b"CREATE TABLE t (id INT)", True)],
    "anonymous GTID + rows": [(AG, None, False), (Q, b"BEGIN", False), (TM, None, False),
                              (WR2, None, False), (X, None, True)],
    "anonymous GTID + DDL": [(AG, None, False), (Q, b"DROP TABLE `t` /* generated */", True)],
    "tagged GTID + rows": [(c.GTID_TAGGED_LOG_EVENT, None, False), (Q, b"BEGIN", False),
                           (TM, None, False), (WR2, None, False), (X, None, True)],
    "no GTID, BEGIN .. COMMIT": [(Q, b"BEGIN", False), (TM, None, False), (WR2, None, False),
                                 (Q, b"COMMIT", True)],
    "no GTID, BEGIN .. XID": [(Q, b"BEGIN", False), (TM, None, False), (WR2, None, False),
                              (X, None, True)],
    "no GTID, DDL": [(Q, b"CREATE DATABASE d", True)],
    "no GTID, MyISAM autocommit statement": [(c.INTVAR_EVENT, None, False),
                                             (Q, b"INSERT INTO m VALUES (NULL)", True)],
    "statement-based trx": [(MG, None, False), (Q, b"BEGIN", False), (c.INTVAR_EVENT, None, False),
                            (Q, b"INSERT INTO t VALUES (NULL)", False),
                            (Q, b"commit", True)],
    "LOAD DATA": [(MG, None, False), (Q, b"BEGIN", False), (c.BEGIN_LOAD_QUERY_EVENT, None, False),
                  (c.EXECUTE_LOAD_QUERY_EVENT, b"LOAD DATA INFILE 'x' INTO TABLE t", False),
                  (X, None, True)],
    "savepoint": [(MG, None, False), (Q, b"BEGIN", False), (Q, b"SAVEPOINT `a`", False),
                  (TM, None, False), (WR2, None, False), (Q, b"ROLLBACK TO `a`", False),
                  (X, None, True)],
    "XA PREPARE": [(MG, None, False), (Q, b"XA START X'78',X'',1", False), (TM, None, False),
                   (WR2, None, False), (Q, b"XA END X'78',X'',1", False),
                   (c.XA_PREPARE_LOG_EVENT, None, True)],
    "XA COMMIT": [(MG, None, False), (Q, b"XA COMMIT X'78',X'',1", True)],
    "XA ONE PHASE": [(MG, None, False), (Q, b"XA START X'79',X'',1", False), (TM, None, False),
                     (WR2, None, False), (Q, b"XA END X'79',X'',1", False),
                     (Q, b"XA COMMIT X'79',X'',1 ONE PHASE", True)],
    "compressed transaction": [(MG, None, False), (c.TRANSACTION_PAYLOAD_EVENT, None, True)],
    "partial JSON update": [(AG, None, False), (Q, b"BEGIN", False), (TM, None, False),
                            (c.PARTIAL_UPDATE_ROWS_EVENT, None, False), (X, None, True)],
    "lower case and blanks": [(MG, None, False), (Q, b"  begin", False), (TM, None, False),
                              (WR2, None, False), (Q, b"\n rollback", True)],
    "transaction context inside": [(MG, None, False), (Q, b"BEGIN", False),
                                   (c.TRANSACTION_CONTEXT_EVENT, None, False),
                                   (c.IGNORABLE_LOG_EVENT, None, False), (X, None, True)],
}


def _feed(t: TxnTracker, event_type: int, arg: int | bytes | None) -> bool:
    if isinstance(arg, int):
        return t.feed(event_type, maria_flags=arg)
    if isinstance(arg, bytes):
        return t.feed(event_type, query_prefix=arg[:32])
    return t.feed(event_type)


def _run(steps: list[Step], t: TxnTracker | None = None) -> None:
    t = t or TxnTracker()
    for i, (event_type, arg, expected) in enumerate(steps):
        assert _feed(t, event_type, arg) is expected, (i, c.event_type_name(event_type), arg)
        if expected:
            assert not t.in_transaction, i


@pytest.mark.parametrize("case", sorted(MARIADB_CASES))
def test_mariadb(case: str) -> None:
    _run(MARIADB_CASES[case])


@pytest.mark.parametrize("case", sorted(MYSQL_CASES))
def test_mysql(case: str) -> None:
    _run(MYSQL_CASES[case])


@pytest.mark.parametrize(("flavor", "case"), [("mariadb", n) for n in sorted(MARIADB_CASES)]
                         + [("mysql", n) for n in sorted(MYSQL_CASES)])
def test_groups_back_to_back(flavor: str, case: str) -> None:
    # The tracker is back to idle after each group: the same groups in a row behave the same.
    cases = MARIADB_CASES if flavor == "mariadb" else MYSQL_CASES
    t = TxnTracker()
    for other in sorted(cases):
        _run(cases[other], t)
        _run(cases[case], t)


OUTSIDE_GROUPS = [c.FORMAT_DESCRIPTION_EVENT, c.ROTATE_EVENT, c.STOP_EVENT,
                  c.PREVIOUS_GTIDS_LOG_EVENT, c.GTID_LIST_EVENT, c.BINLOG_CHECKPOINT_EVENT,
                  c.INCIDENT_EVENT, c.HEARTBEAT_LOG_EVENT, c.VIEW_CHANGE_EVENT,
                  c.START_ENCRYPTION_EVENT, 100, 255, c.TRANSACTION_PAYLOAD_EVENT, c.XID_EVENT]


@pytest.mark.parametrize("event_type", OUTSIDE_GROUPS, ids=c.event_type_name)
def test_events_outside_groups_are_boundaries(event_type: int) -> None:
    t = TxnTracker()
    assert t.feed(event_type)
    assert not t.in_transaction
    assert t.feed(event_type)


@pytest.mark.parametrize("event_type", [c.GTID_LIST_EVENT, c.BINLOG_CHECKPOINT_EVENT, 100,
                                        c.PREVIOUS_GTIDS_LOG_EVENT, c.INCIDENT_EVENT])
def test_unknown_or_header_events_inside_a_group_belong_to_it(event_type: int) -> None:
    t = TxnTracker()
    t.feed(c.GTID_EVENT, maria_flags=TRX)
    assert not t.feed(event_type)
    assert t.in_transaction
    assert t.feed(c.XID_EVENT)


@pytest.mark.parametrize("event_type", [c.FORMAT_DESCRIPTION_EVENT, c.ROTATE_EVENT,
                                        c.STOP_EVENT])
@pytest.mark.parametrize("opening", [
    [(G, TRX)], [(G, DDL)], [(G, TRX), (TM, None), (WR1, None)],
    [(MG, None)], [(MG, None), (Q, b"BEGIN"), (TM, None)], [(Q, b"BEGIN")],
])
def test_fde_rotate_stop_reset_an_open_group(
        event_type: int, opening: list[tuple[int, int | bytes | None]]) -> None:
    t = TxnTracker()
    for et, arg in opening:
        assert not _feed(t, et, arg)
    assert t.in_transaction
    assert t.feed(event_type)
    assert not t.in_transaction
    # What follows is read from scratch: a bare DDL is a transaction of its own.
    assert t.feed(c.QUERY_EVENT, query_prefix=b"CREATE TABLE u (id INT)")


def test_reset() -> None:
    t = TxnTracker()
    t.feed(c.QUERY_EVENT, query_prefix=b"BEGIN")
    assert t.in_transaction
    t.reset()
    assert not t.in_transaction
    assert t.feed(c.QUERY_EVENT, query_prefix=b"DROP TABLE t")


def test_rows_outside_a_group_wait_for_the_statement() -> None:
    # Statement events before a bare Query (no BEGIN) are part of that statement.
    t = TxnTracker()
    for et in (c.INTVAR_EVENT, c.RAND_EVENT, c.USER_VAR_EVENT, c.ANNOTATE_ROWS_EVENT):
        assert not t.feed(et)
    assert t.feed(c.QUERY_EVENT, query_prefix=b"INSERT INTO m VALUES (RAND())")


@pytest.mark.parametrize("event_type", [c.QUERY_EVENT, c.QUERY_COMPRESSED_EVENT,
                                        c.EXECUTE_LOAD_QUERY_EVENT])
def test_needs_query_prefix(event_type: int) -> None:
    assert needs_query_prefix(event_type)


@pytest.mark.parametrize("event_type", [c.XID_EVENT, c.GTID_EVENT, c.ROWS_QUERY_LOG_EVENT,
                                        c.ANNOTATE_ROWS_EVENT, c.BEGIN_LOAD_QUERY_EVENT])
def test_no_query_prefix_needed(event_type: int) -> None:
    assert not needs_query_prefix(event_type)


# ---------------------------------------------------------------------- real binlog files


def _oracle_mysql(data: bytes) -> list[tuple[int, int, bool | None]]:
    """(offset, end, must-be-boundary) per event of a MySQL file, from its own event sequence.

    ``True``: an XID, a statement outside BEGIN..end, a header event.  ``False``: anything
    from a GTID up to (not including) the event that ends its BEGIN group.  ``None``: no claim.
    """
    out: list[tuple[int, int, bool | None]] = []
    checksum_len = 0
    in_begin = False
    after_gtid = False
    for pos, ev in bb.walk(data):
        et = ev[4]
        end = pos + len(ev)
        if et == c.FORMAT_DESCRIPTION_EVENT:
            checksum_len = parse_format_description(ev).checksum_len
            in_begin = after_gtid = False
            out.append((pos, end, True))
        elif et in (c.GTID_LOG_EVENT, c.ANONYMOUS_GTID_LOG_EVENT, c.GTID_TAGGED_LOG_EVENT):
            after_gtid = True
            out.append((pos, end, False))
        elif et in (c.QUERY_EVENT, c.EXECUTE_LOAD_QUERY_EVENT):
            text = bb.query_text(ev, checksum_len).strip().upper()
            if in_begin:
                ends = text.startswith((b"COMMIT", b"ROLLBACK")) and not text.startswith(
                    b"ROLLBACK TO")
                in_begin = not ends
                out.append((pos, end, ends))
            elif text.startswith(b"BEGIN"):
                in_begin = True
                out.append((pos, end, False))
            else:
                out.append((pos, end, True))
            after_gtid = False
        elif et in (c.XID_EVENT, c.TRANSACTION_PAYLOAD_EVENT):
            in_begin = after_gtid = False
            out.append((pos, end, True))
        elif et in (c.ROTATE_EVENT, c.STOP_EVENT, c.PREVIOUS_GTIDS_LOG_EVENT):
            out.append((pos, end, None if in_begin or after_gtid else True))
        else:
            out.append((pos, end, False if in_begin or after_gtid else None))
    return out


def _progress_ends(data: bytes, flavor: str) -> tuple[dict[int, bool], Progress]:
    """end offset -> Progress.feed's verdict, for each whole event of ``data``."""
    progress = Progress(flavor=flavor)
    checksum_len = 0
    verdicts = {}
    for pos, ev in bb.walk(data):
        if ev[4] == c.FORMAT_DESCRIPTION_EVENT:
            checksum_len = parse_format_description(ev).checksum_len
            progress.new_file(pos)
        verdicts[pos + len(ev)] = progress.feed(ev, pos + len(ev), checksum_len)
    return verdicts, progress


CAPTURE_FILES = capture_binlogs()


def test_there_are_captures() -> None:
    assert len(CAPTURE_FILES) >= 40


@pytest.mark.parametrize("path", CAPTURE_FILES,
                         ids=lambda p: str(p.relative_to(MYSQL_CAPTURES)))
def test_captures_never_end_a_transaction_inside_begin_xid(path: Path) -> None:
    data = path.read_bytes()
    verdicts, progress = _progress_ends(data, "mysql")
    oracle = _oracle_mysql(data)
    assert len(oracle) == len(verdicts)
    for pos, end, expected in oracle:
        if expected is not None:
            assert verdicts[end] is expected, (pos, end)
    # The last XID or DDL of the file ends a transaction (the file's last transaction end).
    last = [end for pos, end, expected in oracle if expected
            and data[pos + 4] in (c.XID_EVENT, c.QUERY_EVENT, c.TRANSACTION_PAYLOAD_EVENT)]
    if last:
        assert verdicts[last[-1]]
        assert progress.boundary_pos >= last[-1]


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: str(p.relative_to(MYSQL_CAPTURES)))
def test_captures_gtid_set_holds_every_committed_gtid(path: Path) -> None:
    data = path.read_bytes()
    _, progress = _progress_ends(data, "mysql")
    expected = MysqlGtidSet()
    checksum_len = 0
    for _, ev in bb.walk(data):
        if ev[4] == c.FORMAT_DESCRIPTION_EVENT:
            checksum_len = parse_format_description(ev).checksum_len
        if ev[4] == c.PREVIOUS_GTIDS_LOG_EVENT:
            expected = expected.union(MysqlGtidSet.decode(ev[19 : len(ev) - checksum_len]))
    final = MysqlGtidSet.parse(progress.gtid_text())
    gtids = [parse_mysql_gtid(ev) for _, ev in bb.walk(data) if ev[4] == c.GTID_LOG_EVENT]
    assert final.issuperset(expected)
    # Every GTID whose transaction ended before the last boundary is in the set.
    for g in gtids:
        assert final.contains(g.uuid, g.gno), (g.uuid, g.gno)


def test_truncated_capture_stops_at_the_torn_event() -> None:
    data = capture("rust_mysql_common/binlog_truncated_prev_gtid_event.000001").read_bytes()
    verdicts, progress = _progress_ends(data, "mysql")
    assert list(verdicts) == [120]
    assert progress.boundary_pos == 120 < len(data)


def test_aurora_capture_ends_inside_a_transaction() -> None:
    # Anonymous GTID, Aurora's type-100 padding, then BEGIN with nothing after it.
    data = (MYSQL_CAPTURES / "mysql-binlog-connector-java/mysql-bin.aurora-padding").read_bytes()
    verdicts, progress = _progress_ends(data, "mysql")
    assert [e for e, v in verdicts.items() if v] == [185, 216]
    assert progress.in_transaction
    assert progress.boundary_pos == 216


# ------------------------------------------------------------------------ real MariaDB


def _maria_groups(data: bytes) -> set[int]:
    """Ends of MariaDB event groups: a group runs from a GTID event to the event before the
    next GTID or header event; every event outside a group is a group of its own."""
    ends: set[int] = set()
    group_last: int | None = None
    for pos, ev in bb.walk(data):
        et = ev[4]
        if et == c.GTID_EVENT or et in (c.ROTATE_EVENT, c.STOP_EVENT, c.GTID_LIST_EVENT,
                                        c.BINLOG_CHECKPOINT_EVENT, c.FORMAT_DESCRIPTION_EVENT):
            if group_last is not None:
                ends.add(group_last)
            group_last = None
        if et == c.GTID_EVENT or group_last is not None:
            group_last = pos + len(ev)
        else:
            ends.add(pos + len(ev))
    if group_last is not None:
        ends.add(group_last)
    return ends


def test_real_mariadb_groups(mariadb: MariaDBServer) -> None:
    """XA, savepoints, MyISAM, mixed engines and server-id changes on a real MariaDB 10.11."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        for sql in [
            "CREATE DATABASE app",
            "CREATE TABLE app.t (id INT PRIMARY KEY) ENGINE=InnoDB",
            "CREATE TABLE app.m (id INT PRIMARY KEY) ENGINE=MyISAM",
            "INSERT INTO app.t VALUES (1)",
            "INSERT INTO app.m VALUES (1)",
            # Savepoint rolled back over a MyISAM change: ROLLBACK TO is logged in the trx.
            "BEGIN", "INSERT INTO app.t VALUES (2)", "SAVEPOINT s1", "INSERT INTO app.m VALUES (2)",
            "ROLLBACK TO SAVEPOINT s1", "INSERT INTO app.t VALUES (3)", "COMMIT",
            "BEGIN", "INSERT INTO app.t VALUES (4)", "SAVEPOINT s2", "COMMIT",
            "XA START 'a'", "INSERT INTO app.t VALUES (5)", "XA END 'a'", "XA PREPARE 'a'",
            "XA COMMIT 'a'",
            "XA START 'b'", "INSERT INTO app.t VALUES (6)", "XA END 'b'", "XA PREPARE 'b'",
            "XA ROLLBACK 'b'",
            "XA START 'c'", "INSERT INTO app.t VALUES (7)", "XA END 'c'", "XA COMMIT 'c' ONE PHASE",
            "XA START 'd'", "INSERT INTO app.m VALUES (8)", "XA END 'd'", "XA PREPARE 'd'",
            "XA COMMIT 'd'",
            "BEGIN", "INSERT INTO app.t VALUES (9)", "INSERT INTO app.m VALUES (9)", "ROLLBACK",
            "SET SESSION server_id = 2", "INSERT INTO app.t VALUES (10)",
            "SET SESSION server_id = 1", "SET SESSION gtid_domain_id = 3",
            "DROP TABLE app.m",
        ]:
            cur.execute(sql)
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos_before_flush,), = cur.fetchall()
        mariadb.flush_logs()
        cur.execute("SET SESSION gtid_domain_id = 0")
        cur.execute("INSERT INTO app.t VALUES (11)")
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos_after,), = cur.fetchall()
    conn.close()
    files = [mariadb.binlog_path(n).read_bytes() for n, _ in mariadb.binlog_files()]
    assert len(files) == 2

    for data, final in zip(files, [pos_before_flush, pos_after], strict=True):
        verdicts, progress = _progress_ends(data, "mariadb")
        assert {end for end, v in verdicts.items() if v} == _maria_groups(data)
        assert not progress.in_transaction
        # The second file starts with a GTID_LIST holding two server ids for domain 0.
        assert progress.gtid_text() == final
    assert files[0].count(b"ROLLBACK TO `s1`") == 1
    assert files[0].count(b"XA END") >= 3


@pytest.mark.parametrize("text, expected", [
    ("SAVEPOINT `s1`", ("set", "S1")),
    ("  savepoint S1", ("set", "S1")),
    ("ROLLBACK TO `s1`", ("rollback", "S1")),
    ("ROLLBACK WORK TO SAVEPOINT `a``b`", ("rollback", "A`B")),
    ('ROLLBACK TO "a""b "', ("rollback", 'A"B')),  # ANSI_QUOTES; trailing blanks ignored
    ("rollback to `two words`", ("rollback", "TWO WORDS")),
    ("SAVEPOINT `café`", ("set", "CAFE")),
    ("RELEASE SAVEPOINT `s1`", ("release", "S1")),
    ("ROLLBACK", None), ("COMMIT", None), ("SAVEPOINT a b", None),
    ("INSERT INTO t VALUES (1)", None), ("ROLLBACK TO", None),
])
def test_savepoint_statements(text: str, expected: tuple[str, str] | None) -> None:
    """What the source needs to tell the rows a ROLLBACK TO undid: the savepoint's name as
    the server compares it (case and accents aside), from the statements as logged."""
    assert savepoint_action(text) == expected
