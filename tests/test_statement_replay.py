"""Statement context against a real MariaDB: statements run upstream in statement format
under unusual session settings, their Query / Intvar / Rand / User_var events decoded and
checked (against what the sessions set, and against ``mariadb-binlog``'s own printout), then
replayed on a second server (``context_statements`` + ``raw_query`` + ``reset_statements``,
on an applier session) and both servers' tables compared.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from binrelay.apply.downstream import Downstream
from binrelay.apply.statement_sql import context_statements, reset_statements
from binrelay.binlog import constants as c
from binrelay.binlog import statement as s
from binrelay.binlog.events import (
    FormatDescriptionEvent,
    IntvarEvent,
    QueryEvent,
    RandEvent,
    UserVarEvent,
    XidEvent,
)
from binrelay.binlog.statement import UserVar
from binrelay.rows import EventDecoder, RowsEvent, iter_file_events
from binrelay.testing.sandbox import MariaDBServer, ServerFactory

pytestmark = pytest.mark.timeout(300)

SETUP = [
    "CREATE DATABASE app CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
    "CREATE TABLE app.ids (id INT AUTO_INCREMENT PRIMARY KEY, src VARCHAR(20),"
    " v VARCHAR(100))",
    "CREATE TABLE app.vals (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(40),"
    " s VARCHAR(100), l VARCHAR(100) CHARACTER SET latin1, b VARBINARY(20), i BIGINT,"
    " u BIGINT UNSIGNED, r DOUBLE, d DECIMAL(20,6), n INT, txt TEXT)",
    "CREATE TABLE app.times (id INT AUTO_INCREMENT PRIMARY KEY, ts TIMESTAMP(6) NULL,"
    " dt DATETIME(6), names VARCHAR(100), note VARCHAR(40))",
    "CREATE TABLE app.parent (id INT PRIMARY KEY)",
    "CREATE TABLE app.child (id INT PRIMARY KEY, parent_id INT,"
    " FOREIGN KEY (parent_id) REFERENCES app.parent (id))",
    "CREATE TABLE app.checked (id INT PRIMARY KEY, v INT, CONSTRAINT positive CHECK (v > 0))",
    "CREATE TABLE app.rnd (id INT AUTO_INCREMENT PRIMARY KEY, r DOUBLE)",
    "CREATE TABLE app.cascaded (id INT PRIMARY KEY, parent_id INT,"
    " FOREIGN KEY (parent_id) REFERENCES app.parent (id) ON DELETE CASCADE)",
    "INSERT INTO app.parent VALUES (1), (2)",
    "INSERT INTO app.cascaded VALUES (20, 2), (21, 1)",
]
TABLES = ("ids", "vals", "times", "parent", "child", "cascaded", "checked", "rnd", "ddl_a")

# Session A: everything unusual.  Its statements are latin1 bytes (SET NAMES latin1).
SESSION_A = [
    "SET SESSION binlog_format = STATEMENT",
    "USE app",
    "SET SESSION sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT,STRICT_ALL_TABLES'",
    "SET SESSION time_zone = '+05:30'",
    "SET NAMES latin1",
    "SET SESSION auto_increment_increment = 5, auto_increment_offset = 3",
    "SET SESSION lc_time_names = 'de_DE'",
    "SET SESSION foreign_key_checks = 0, check_constraint_checks = 0, unique_checks = 0",
    "SET SESSION explicit_defaults_for_timestamp = 0",
    "SET SESSION collation_server = 'latin1_german2_ci'",
    "SET SESSION timestamp = 1700000000.123456",
]
# Session B: the server's defaults (utf8mb4, no time zone of its own, en_US ...).
SESSION_B = ["SET SESSION binlog_format = STATEMENT", "USE app"]

UTF8_TEXT = "héllo ✓ 😀".encode()
VARS_A = (
    b"SET @n = NULL, @s = _utf8mb4 X'" + UTF8_TEXT.hex().encode() + b"',"
    b" @l = _latin1 'M\xfcller' COLLATE latin1_german2_ci, @b = _binary X'00ff10',"
    b" @i = -9007199254740993, @u = 18446744073709551615, @r = 1 / 3e0, @d = -123.4500"
)
ROLLED_BACK = b"INSERT INTO ids (src, v) VALUES ('B', 'rolled back')"
# (session, statement bytes).
WORKLOAD: list[tuple[str, bytes]] = [
    ("A", b"INSERT INTO ids (src, v) VALUES ('A', 'caf\xe9 ' || 'ok'), ('A', 'a\\b')"),
    ("B", b"INSERT INTO ids (src, v) VALUES ('B', 'plain')"),
    ("A", b"INSERT INTO \"times\" (\"ts\", \"dt\", \"names\", \"note\")"
          b" VALUES ('2024-01-01 12:00:00', NOW(6), DATE_FORMAT('2024-03-04', '%W %M'), 'A')"),
    ("B", b"INSERT INTO times (ts, dt, names, note)"
          b" VALUES ('2024-01-01 12:00:00', NOW(), DATE_FORMAT('2024-03-04', '%W %M'), 'B')"),
    ("A", b"INSERT INTO child VALUES (10, 999)"),
    ("A", b"INSERT INTO checked VALUES (1, -5)"),
    ("A", b"INSERT INTO ids (src, v) VALUES ('A', LAST_INSERT_ID())"),
    ("B", b"INSERT INTO ids (src, v) VALUES ('B', LAST_INSERT_ID())"),
    ("A", VARS_A),
    ("A", b"INSERT INTO vals (note, s, l, b, i, u, r, d, n, txt) VALUES"
          b" ('vars', @s, @l, @b, @i, @u, @r, @d, @n,"
          b" CONCAT_WS('|', @l = 'Mueller', @r * 3, @d * 2, @r / 7, @u))"),
    ("B", b"INSERT INTO vals (note, s, txt) VALUES ('B', '1' || '0', @s)"),
    ("A", b"INSERT INTO rnd (r) VALUES (RAND()), (RAND())"),
    ("A", b"BEGIN"),
    ("A", b"INSERT INTO child VALUES (12, 998)"),
    ("A", b"INSERT INTO ids (src, v) VALUES ('A', 'in a transaction')"),
    ("A", b"COMMIT"),
    ("A", b"CREATE TABLE \"ddl_a\" (\"id\" INT PRIMARY KEY, \"t\" TIMESTAMP)"),
    ("A", b"CREATE DATABASE other_a"),
    ("B", b"INSERT INTO child VALUES (11, 1)"),
    # Foreign key checks on (session B): the delete cascades, which the applier's own
    # session (checks off) would not do.
    ("B", b"DELETE FROM parent WHERE id = 2"),
    # An id the upstream used up without logging it: only INSERT_ID gives the next one.
    ("B", b"BEGIN"),
    ("B", ROLLED_BACK),
    ("B", b"ROLLBACK"),
    ("B", b"INSERT INTO ids (src, v) VALUES ('B', 'after a gap')"),
]


@dataclass
class Group:
    """One logged statement and the context events before it."""

    query: QueryEvent
    start: int  # offset of its first context event (or of the Query event)
    end: int
    intvars: list[IntvarEvent] = field(default_factory=list)
    rand: RandEvent | None = None
    user_vars: list[UserVarEvent] = field(default_factory=list)


@pytest.fixture
def servers(mariadb_factory: ServerFactory) -> tuple[MariaDBServer, MariaDBServer]:
    up = mariadb_factory(server_id=1)
    down = mariadb_factory(server_id=2)
    for server in (up, down):
        for sql in SETUP:
            server.execute(sql)
    return up, down


def run_workload(up: MariaDBServer) -> dict[str, Any]:
    sessions = {"A": up.connect(charset="latin1"), "B": up.connect(charset="utf8mb4")}
    facts: dict[str, Any] = {}
    try:
        for name, setup in (("A", SESSION_A), ("B", SESSION_B)):
            with sessions[name].cursor() as cur:
                for sql in setup:
                    cur.execute(sql)
        for name, sql in WORKLOAD:
            with sessions[name].cursor() as cur:
                cur.execute(sql)
        with sessions["A"].cursor() as cur:
            cur.execute("SELECT @@sql_mode, @@lc_time_names")
            facts["sql_mode"], facts["lc_time_names"] = cur.fetchone()
    finally:
        for conn in sessions.values():
            conn.close()
    return facts


def statement_groups(up: MariaDBServer, file: str, start: int) -> tuple[list[Group], str]:
    path = up.binlog_path(file)
    dec = EventDecoder(path=str(path))
    groups: list[Group] = []
    pending = Group(None, -1, -1)  # type: ignore[arg-type]
    version = ""
    for offset, raw in iter_file_events(path):
        ev = dec.decode(raw, offset)
        if isinstance(ev, FormatDescriptionEvent):
            version = ev.fde.server_version
        if offset < start:
            continue
        assert not isinstance(ev, RowsEvent), "the workload is logged in statement format"
        if isinstance(ev, IntvarEvent | RandEvent | UserVarEvent):
            if pending.start < 0:
                pending.start = offset
            if isinstance(ev, IntvarEvent):
                pending.intvars.append(ev)
            elif isinstance(ev, RandEvent):
                pending.rand = ev
            else:
                pending.user_vars.append(ev)
        elif isinstance(ev, QueryEvent | XidEvent):
            if isinstance(ev, QueryEvent):
                pending.query = ev
                pending.start = offset if pending.start < 0 else pending.start
                pending.end = offset + len(raw)
                groups.append(pending)
            pending = Group(None, -1, -1)  # type: ignore[arg-type]
    return groups, version


def replay(down: MariaDBServer, groups: list[Group], version: str) -> None:
    conn = Downstream(host=down.host, port=down.port).connect()  # an applier session
    try:
        with conn.cursor() as cur:
            for g in groups:
                q = g.query
                if q.raw_query == b"BEGIN":
                    continue
                if q.raw_query == b"COMMIT":
                    conn.commit()
                    continue
                for sql in context_statements(
                        q.status, schema=q.schema, timestamp=q.header.timestamp,
                        thread_id=q.thread_id, intvars=g.intvars, rand=g.rand,
                        user_vars=g.user_vars, mariadb_upstream=True,
                        upstream_version=version,
                        suppress_use=bool(q.header.flags & c.LOG_EVENT_SUPPRESS_USE_F)):
                    cur.execute(sql)
                cur.execute(q.raw_query)
                for sql in reset_statements(user_vars=g.user_vars):
                    cur.execute(sql)
                conn.commit()  # what the XID after a transactional statement does
    finally:
        conn.close()


def table_state(server: MariaDBServer) -> dict[str, Any]:
    state: dict[str, Any] = {}
    with server.connect(charset="utf8mb4", database="app") as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for table in TABLES:
            cur.execute(f"SELECT * FROM {table} ORDER BY id")
            state[table] = cur.fetchall()
            cur.execute(f"CHECKSUM TABLE {table}")
            state[table + " checksum"] = cur.fetchone()[1]
        cur.execute("SHOW CREATE TABLE ddl_a")
        state["ddl_a ddl"] = cur.fetchone()[1]
        cur.execute("SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA"
                    " WHERE SCHEMA_NAME = 'other_a'")
        state["other_a collation"] = cur.fetchone()
    return state


def collation_id(server: MariaDBServer, name: str) -> int:
    return int(server.scalar("SELECT ID FROM information_schema.COLLATIONS"
                             " WHERE COLLATION_NAME = %s", (name,)))


def test_statement_context_round_trip(servers: tuple[MariaDBServer, MariaDBServer]) -> None:
    up, down = servers
    file, start = up.master_status()
    facts = run_workload(up)
    groups, version = statement_groups(up, file, start)
    by_text = {g.query.raw_query: g for g in groups}
    # With GTIDs, MariaDB logs no BEGIN, and an XID event ends an InnoDB transaction.
    assert [g.query.raw_query for g in groups] == [
        sql for _, sql in WORKLOAD
        if sql.split()[0] not in (b"SET", b"BEGIN", b"COMMIT", b"ROLLBACK")
        and sql != ROLLED_BACK]

    # --- what session A's first statement carries --------------------------------------
    first = by_text[WORKLOAD[0][1]]
    st_ = first.query.status
    assert first.query.mariadb and first.query.schema == "app"
    assert st_.sql_mode == s.sql_mode_bits(facts["sql_mode"], mariadb=True)
    assert {"ANSI_QUOTES", "NO_BACKSLASH_ESCAPES", "PIPES_AS_CONCAT"} <= set(
        s.sql_mode_names(st_.sql_mode, mariadb=True))
    latin1 = collation_id(up, "latin1_swedish_ci")
    assert st_.charset == (latin1, latin1, collation_id(up, "latin1_german2_ci"))
    assert st_.auto_increment == (5, 3)
    assert st_.lc_time_names == 4 and facts["lc_time_names"] == "de_DE"  # my_locale_de_DE
    assert st_.flags2 is not None
    for bit in (s.OPTION_NO_FOREIGN_KEY_CHECKS, s.OPTION_RELAXED_UNIQUE_CHECKS,
                s.OPTION_NO_CHECK_CONSTRAINT_CHECKS):
        assert st_.flags2 & bit
    assert not st_.flags2 & s.OPTION_EXPLICIT_DEF_TIMESTAMP
    assert first.query.header.timestamp == 1700000000
    assert [(e.kind, e.value) for e in first.intvars] == [(s.INSERT_ID_EVENT, 3)]

    times_a = by_text[WORKLOAD[2][1]].query
    assert (times_a.status.time_zone, times_a.status.microseconds) == ("+05:30", 123456)
    last_a = by_text[WORKLOAD[6][1]]
    assert (s.LAST_INSERT_ID_EVENT, 3) in [(e.kind, e.value) for e in last_a.intvars]
    b_first = by_text[WORKLOAD[1][1]].query.status
    assert b_first.auto_increment is None and b_first.lc_time_names is None
    assert b_first.charset is not None and b_first.charset[0] == collation_id(
        up, "utf8mb4_general_ci")

    # --- user variables of every type ------------------------------------------------------
    vars_ = {e.name: e.var for e in by_text[WORKLOAD[9][1]].user_vars}
    assert vars_ == {
        "n": UserVar("n", None),
        "s": UserVar("s", UTF8_TEXT, s.STRING_RESULT, collation_id(up, "utf8mb4_general_ci")),
        "l": UserVar("l", b"M\xfcller", s.STRING_RESULT, collation_id(up, "latin1_german2_ci")),
        "b": UserVar("b", b"\x00\xff\x10", s.STRING_RESULT, 63),
        "i": UserVar("i", -9007199254740993, s.INT_RESULT, vars_["i"].charset),
        "u": UserVar("u", 2**64 - 1, s.INT_RESULT, vars_["u"].charset, unsigned=True),
        "r": UserVar("r", 1 / 3, s.REAL_RESULT, vars_["r"].charset),
        "d": UserVar("d", "-123.4500", s.DECIMAL_RESULT, vars_["d"].charset),
    }
    assert by_text[WORKLOAD[11][1]].rand is not None  # RAND() logs its seeds
    create_db = by_text[b"CREATE DATABASE other_a"].query
    assert create_db.header.flags & c.LOG_EVENT_SUPPRESS_USE_F

    # --- the same values as mariadb-binlog prints them -----------------------------------
    for g in groups:
        if g.query.raw_query not in (b"BEGIN", b"COMMIT"):
            check_against_mariadb_binlog(up.binlog_path(file), g, version)

    # --- the round trip ------------------------------------------------------------------------
    replay(down, groups, version)
    upstream, downstream = table_state(up), table_state(down)
    assert downstream == upstream
    # The context mattered: these differ from what default settings would give.
    ids = {row[2]: row[0] for row in upstream["ids"]}
    assert ids["café ok"] == 3 and ids["a\\b"] == 8  # increment 5, offset 3
    assert ids["3"] % 5 == 3  # LAST_INSERT_ID() of session A, in its auto_increment steps
    assert [row[3] for row in upstream["times"]] == ["Montag März", "Monday March"]
    assert upstream["child"] == ((10, 999), (11, 1), (12, 998))
    assert upstream["checked"] == ((1, -5),)
    assert upstream["cascaded"] == ((21, 1),)
    gap = {row[2]: row[0] for row in upstream["ids"]}["after a gap"]
    assert gap - 1 not in {row[0] for row in upstream["ids"]}
    vals = {row[1]: row for row in upstream["vals"]}
    assert vals["vars"][10].startswith("1|1|")  # latin1_german2_ci: ü = ue
    assert vals["B"][2] == "1"  # no PIPES_AS_CONCAT in session B: OR
    assert "DEFAULT current_timestamp() ON UPDATE current_timestamp()" in upstream["ddl_a ddl"]
    assert upstream["other_a collation"] == ("latin1_german2_ci",)


def _sets(text: str) -> Iterator[tuple[str, str]]:
    """``(variable, value)`` of every SET in ``text`` but user variables'."""
    for line in text.splitlines():
        if not line.startswith("SET "):
            continue
        body = line[4:].split("/*!*/;")[0]
        for part in re.split(r",\s*(?=@|INSERT_ID|LAST_INSERT_ID)", body):
            if part.startswith("@`"):
                continue
            name, _, value = part.partition("=")
            name = name.strip().lower().replace("@@session.", "")
            yield name.rstrip(":"), value.strip()


def check_against_mariadb_binlog(path: Any, g: Group, version: str) -> None:
    """``mariadb-binlog`` prints a Query event's context as SET statements (all of it for the
    first event it prints): ours must say the same."""
    out = subprocess.run(["mariadb-binlog", f"--start-position={g.start}",
                          f"--stop-position={g.end}", str(path)],
                         capture_output=True, check=True).stdout.decode("utf-8", "replace")
    theirs = dict(_sets(out))
    q = g.query
    ours = dict(_sets("\n".join(context_statements(
        q.status, schema=q.schema, timestamp=q.header.timestamp, thread_id=q.thread_id,
        intvars=g.intvars, rand=g.rand, user_vars=g.user_vars, mariadb_upstream=True,
        upstream_version=version, autocommit=True, pseudo_thread=True,
        suppress_use=bool(q.header.flags & c.LOG_EVENT_SUPPRESS_USE_F)))))
    ours["sql_mode"] = str(s.sql_mode_bits(ours["sql_mode"].strip("'"), mariadb=True))
    # A name there, an id here.
    assert q.status.charset is not None
    assert ours["character_set_client"] == str(q.status.charset[0])
    del theirs["character_set_client"]
    assert theirs, out
    for name, value in theirs.items():
        if name == "collation_database" and value == "DEFAULT":
            continue  # we leave it to USE, which gives the database's
        assert ours.get(name) == value, (name, value, out)
