"""Statements against a real MariaDB: hostile identifiers, values, DDL replayed, and survivors
loaded by LOAD DATA LOCAL (what REPLACE writes, or REPLACE's result where a load's cannot be
taken)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from binrelay.apply import (
    DELETE,
    INSERT,
    UPDATE,
    Change,
    Downstream,
    TableRef,
    TaskLedger,
    apply_ddl,
    apply_plan_part,
    create_checkpoint_table,
    plan_batch,
)
from binrelay.apply.applier import LoadKinds, part_statements
from binrelay.apply.catalog import read_rules
from binrelay.apply.sql import quote_ident, quote_table
from binrelay.errors import ApplyError, DownstreamDdlError, UnfaithfulApplyError
from binrelay.testing.sandbox import MariaDBServer, ServerFactory


@pytest.fixture(scope="module")
def server(mariadb_template: Path, mariadb_socket_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    factory = ServerFactory(tmp_path_factory.mktemp("apply-sql"), template=mariadb_template,
                            socket_dir=mariadb_socket_dir)
    try:
        yield factory(server_id=1, extra_args=["--skip-log-bin"])
    finally:
        factory.close()


@pytest.fixture
def conn(server: MariaDBServer) -> Iterator[Any]:
    connection = Downstream(server.host, server.port).connect()
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture(params=[False, True], ids=["plain", "scripts"])
def ddl_conn(server: MariaDBServer, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A plain apply session, and the driver's (USE, context and DDL in one round trip)."""
    connection = Downstream(server.host, server.port, scripts=request.param).connect()
    try:
        yield connection
    finally:
        connection.close()


HOSTILE_SCHEMAS = ["we`ird", "quo'te\"s", "pct%s%%", "ünï 表", "semi;colon--"]
HOSTILE_COLUMNS = ("id`", "c'q", 'c"d', "c%s", "c 5", "列\\", "select")


@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS)
def test_hostile_identifiers_round_trip(conn: Any, schema: str) -> None:
    keyed = TableRef(schema, "t`%s'")
    keyless = TableRef(schema, "nokey \"`")
    cols = HOSTILE_COLUMNS
    col_ddl = ", ".join(f"{quote_ident(c)} {'INT NOT NULL' if i < 2 else 'VARBINARY(20)'}"
                        for i, c in enumerate(cols))
    key_ddl = f"PRIMARY KEY ({quote_ident(cols[0])}, {quote_ident(cols[1])})"
    # Passed through as the upstream would send it, with the schema as default database.
    assert apply_ddl(conn, None, f"CREATE DATABASE {quote_ident(schema)}").applied
    assert apply_ddl(conn, schema, f"CREATE TABLE {quote_ident(keyed.table)}"
                                   f" ({col_ddl}, {key_ddl})").applied
    assert apply_ddl(conn, schema, f"CREATE TABLE {quote_ident(keyless.table)} ({col_ddl})"
                     ).applied
    create_checkpoint_table(conn)

    def row(a: int, b: int, fill: bytes) -> tuple[Any, ...]:
        return (a, b, fill, b"'\\\x00", b"%s", None, b"`")[: len(cols)]

    key = (0, 1)
    changes = [
        Change(keyed, INSERT, cols, key, None, row(1, 1, b"a"), (1,)),
        Change(keyed, INSERT, cols, key, None, row(2, 1, b"b"), (2,)),
        Change(keyed, UPDATE, cols, key, row(2, 1, b"b"), row(3, 1, b"c"), (3,)),
        Change(keyed, INSERT, cols, key, None, row(4, 4, b"d"), (4,)),
        Change(keyed, DELETE, cols, key, row(4, 4, b"d"), None, (5,)),
        Change(keyless, INSERT, cols, (), None, row(1, 1, b"x"), (6,)),
        Change(keyless, INSERT, cols, (), None, row(1, 1, b"x"), (7,)),
        Change(keyless, UPDATE, cols, (), row(1, 1, b"x"), row(1, 1, b"y"), (8,)),
        Change(keyless, INSERT, cols, (), None, row(2, 2, b"z"), (9,)),
        Change(keyless, DELETE, cols, (), row(2, 2, b"z"), None, (10,)),
    ]
    plan = plan_batch(changes)
    for part in plan.parts(2):
        apply_plan_part(conn, part, ledger=TaskLedger(schema, 1))
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {quote_table(keyed)} ORDER BY 1")
        assert cur.fetchall() == (row(1, 1, b"a"), row(3, 1, b"c"))
        cur.execute(f"SELECT * FROM {quote_table(keyless)} ORDER BY 3")
        assert cur.fetchall() == (row(1, 1, b"x"), row(1, 1, b"y"))
        cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s"
                    " AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, keyed.table))
        assert tuple(r[0] for r in cur.fetchall()) == cols
    conn.commit()
    assert not apply_ddl(conn, None, f"CREATE DATABASE {quote_ident(schema)}").applied
    assert apply_ddl(conn, None, f"DROP DATABASE {quote_ident(schema)}").applied


def test_values_survive_unchanged(conn: Any) -> None:
    """Text, binary, zero dates, NULLs and UTC timestamps come back as they went in."""
    ref = TableRef("vals", "v")
    apply_ddl(conn, None, "CREATE DATABASE vals CHARACTER SET utf8mb4")
    apply_ddl(conn, "vals", "CREATE TABLE v (id INT PRIMARY KEY, t TEXT, b BLOB, d DATE,"
                            " dt DATETIME(6), ts TIMESTAMP(3) NULL, dec1 DECIMAL(10,3),"
                            " bits BIT(10), ai INT NOT NULL AUTO_INCREMENT, UNIQUE KEY (ai))")
    cols = ("id", "t", "b", "d", "dt", "ts", "dec1", "bits", "ai")
    rows = [
        (1, "quote ' backslash \\ nul \x00 emoji 😀", bytes(range(256)), "0000-00-00",
         "2024-02-31 23:59:59.123456", "1970-01-01 00:00:01.000", "-1234567.890", 1023, 0),
        (2, "", b"", "2024-02-00", "0000-00-00 00:00:00.000000", "2038-01-19 03:14:07.999",
         "0.000", 0, 5),
        (3, None, None, None, None, None, None, None, 6),
    ]
    changes = [Change(ref, INSERT, cols, (0,), None, r, (i,)) for i, r in enumerate(rows)]
    for part in plan_batch(changes).parts(1):
        apply_plan_part(conn, part)
    with conn.cursor() as cur:
        cur.execute("SELECT id, t, b, CAST(d AS CHAR), CAST(dt AS CHAR), CAST(ts AS CHAR),"
                    " CAST(dec1 AS CHAR), bits + 0, ai FROM vals.v ORDER BY id")
        got = cur.fetchall()
        # The session is UTC: the TIMESTAMP is stored as the instant the text names.
        cur.execute("SELECT UNIX_TIMESTAMP(ts) FROM vals.v WHERE id = 1")
        assert int(cur.fetchone()[0]) == 1
    conn.commit()
    # ai = 0 stays 0 (NO_AUTO_VALUE_ON_ZERO), as on a replica.
    assert [tuple(r) for r in got] == rows


# ---- DDL replay -------------------------------------------------------------------------------


def _schema_snapshot(server: MariaDBServer, schema: str) -> dict[str, str]:
    with contextlib.closing(server.connect()) as c, c.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                    (schema,))
        out = {}
        for (name,) in cur.fetchall():
            cur.execute(f"SHOW CREATE TABLE {quote_ident(schema)}.{quote_ident(name)}")
            out[name] = cur.fetchone()[1]
            cur.execute(f"SELECT COUNT(*) FROM {quote_ident(schema)}.{quote_ident(name)}")
            out[name + " rows"] = cur.fetchone()[0]
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                    (schema,))
        out[""] = cur.fetchone()[0]
        return out


DDL_SEQUENCE = [
    (None, "CREATE DATABASE ddl", 1007),
    ("ddl", "CREATE TABLE t (id INT PRIMARY KEY, a INT)", 1050),
    ("ddl", "INSERT INTO t VALUES (1, 1), (2, 2)", None),  # data, to see TRUNCATE work
    ("ddl", "ALTER TABLE t ADD COLUMN b INT AFTER a", 1060),
    ("ddl", "ALTER TABLE t ADD INDEX ib (b)", 1061),
    ("ddl", "CREATE INDEX ia ON t (a)", 1061),
    ("ddl", "ALTER TABLE t DROP COLUMN a", 1091),
    ("ddl", "ALTER TABLE t CHANGE COLUMN b c BIGINT", 1054),
    ("ddl", "ALTER TABLE t RENAME COLUMN c TO d", 1054),
    ("ddl", "RENAME TABLE t TO t2", 1146),
    ("ddl", "ALTER TABLE t2 RENAME TO `t 3`", 1146),
    ("ddl", "TRUNCATE TABLE `t 3`", 0),
    ("ddl", "DROP INDEX ib ON `t 3`", 1091),
    ("ddl", "CREATE TABLE u LIKE `t 3`", 1050),
    ("ddl", "DROP TABLE `t 3`, u", 1051),
    (None, "DROP DATABASE ddl", 1008),
]


def test_ddl_replay_is_idempotent(ddl_conn: Any, server: MariaDBServer) -> None:
    conn = ddl_conn
    for schema, statement, replay_errno in DDL_SEQUENCE:
        if replay_errno is None:
            server.execute(f"{statement.replace('INTO t', 'INTO ddl.t')}")
            continue
        first = apply_ddl(conn, schema, statement)
        assert first.applied, statement
        after_first = _schema_snapshot(server, "ddl")
        again = apply_ddl(conn, schema, statement)
        assert again.applied == (replay_errno == 0), statement
        assert (again.errno or 0) == replay_errno, statement
        assert _schema_snapshot(server, "ddl") == after_first, statement
    assert _schema_snapshot(server, "ddl") == {"": 0}


@pytest.mark.parametrize(("schema", "statement", "errno"), [
    ("ddl2", "RENAME TABLE nope TO other", 1146),        # the target does not exist either
    ("ddl2", "ALTER TABLE nope ADD COLUMN x INT", 1146),  # not a rename
    ("ddl2", "CREATE TABLE broken (", 1064),
    ("ddl2", "DROP TABLE keep", None),                   # fine the first time
    ("missing_db", "CREATE TABLE t (a INT)", 1049),
])
def test_ddl_errors_that_are_not_replays(ddl_conn: Any, server: MariaDBServer, schema: str,
                                         statement: str, errno: int | None) -> None:
    conn = ddl_conn
    server.execute("CREATE DATABASE IF NOT EXISTS ddl2")
    server.execute("CREATE TABLE IF NOT EXISTS ddl2.keep (a INT)")
    if errno is None:
        assert apply_ddl(conn, schema, statement).applied
        return
    with pytest.raises(DownstreamDdlError) as info:
        apply_ddl(conn, schema, statement, position=(3, 77))
    assert info.value.errno == errno
    assert "position 3.77" in str(info.value) and "\n" not in str(info.value)


def test_ddl_not_a_replay_is_strict(conn: Any, server: MariaDBServer) -> None:
    server.execute("CREATE DATABASE IF NOT EXISTS ddl3")
    assert apply_ddl(conn, "ddl3", "CREATE TABLE t (a INT)", replay=False).applied
    with pytest.raises(DownstreamDdlError, match="already exists"):
        apply_ddl(conn, "ddl3", "CREATE TABLE t (a INT)", replay=False)


# ---- survivors loaded (LOAD DATA LOCAL) --------------------------------------------------------


_COLUMNS = (
    "id BIGINT UNSIGNED NOT NULL PRIMARY KEY, i INT, ti TINYINT UNSIGNED, dec1 DECIMAL(40,12),"
    " f FLOAT, d DOUBLE, c CHAR(12), v VARCHAR(40) CHARACTER SET latin1, t TEXT,"
    " u VARCHAR(20) COLLATE utf8mb4_bin, bn BINARY(4), vb VARBINARY(20), bl BLOB, dt DATE,"
    " dtt DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(2), g INT AS (i + 1) VIRTUAL")
_NAMES = ("id", "i", "ti", "dec1", "f", "d", "c", "v", "t", "u", "bn", "vb", "bl", "dt",
          "dtt", "ts", "tm")


def _rows(salt: int) -> list[tuple[Any, ...]]:
    """Values a load could read otherwise than a statement: every escape, text spelling a
    NULL, the ends of the ranges, zero and invalid dates (the session allows them)."""
    hostile = "tab\t nl\n cr\r nul\x00 bs\\ \\N q' dq\" é 🙂"
    return [
        (1, salt, 255, Decimal("-1234567890123456789012345678.123456789012"), "1.5e-07",
         "-1.7976931348623157e308", "  lead", "café", hostile, "\\N", b"\x00\t\n\\",
         bytes(range(256))[:20], bytes(range(256)) * 3, "0000-00-00", "2024-02-31 23:59:59.5",
         "1970-01-01 00:00:01.000", "-838:59:59.99"),
        (2, -(2**31), 0, Decimal("0"), "0", "3.14", "", "", "", "NULL", b"", b"", b"",
         "2024-02-00", "0000-00-00 00:00:00.000000", "2038-01-19 03:14:07.999", "00:00:00.00"),
        (2**64 - 1, None, None, None, None, None, None, None, None, None, None, None, None,
         None, None, None, None),
        (4 + salt, 2**31 - 2, 7, Decimal("1E-12"), "-0", "1e300", "x" * 12, "ÿ" * 40,
         "\\\\\\t", "\t", b"\xff\xfe\xfd\xfc", b"\\N", b"\r\n", "9999-12-31",
         "9999-12-31 23:59:59.999999", None, "838:59:59"),
    ]


def _write(conn: Any, table: TableRef, rows: list[tuple[Any, ...]], *, loads: bool,
           at: int) -> None:
    changes = [Change(table, INSERT, _NAMES, (0,), None, row, (at, i))
               for i, row in enumerate(rows)]
    rules = read_rules(conn) if loads else None
    for part in plan_batch(changes).parts(1):
        apply_plan_part(conn, part, rules=rules)


def _loads(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Com_load'")
        return int(cur.fetchone()[1])


def _content(conn: Any, table: str) -> tuple[Any, ...]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM load_db.{table} ORDER BY id")
        rows = cur.fetchall()
        cur.execute(f"CHECKSUM TABLE load_db.{table}")
        (_, checksum), = cur.fetchall()
    conn.commit()
    return rows, checksum


def test_a_load_writes_what_replace_writes(conn: Any) -> None:
    """The same survivors, loaded into one table and written by REPLACE into its twin,
    first into empty tables, then over their rows: equal row for row, and by checksum."""
    apply_ddl(conn, None, "CREATE DATABASE load_db CHARACTER SET utf8mb4")
    for name in ("loaded", "replaced"):
        apply_ddl(conn, "load_db", f"CREATE TABLE {name} ({_COLUMNS})")
    loaded, replaced = TableRef("load_db", "loaded"), TableRef("load_db", "replaced")
    before = _loads(conn)
    for at, salt in enumerate((1, 2)):
        _write(conn, loaded, _rows(salt), loads=True, at=at)
        _write(conn, replaced, _rows(salt), loads=False, at=at)
    assert _loads(conn) == before + 2, "the survivors were not loaded"
    got, checksum = _content(conn, "loaded")
    assert len(got) == 5
    assert (got, checksum) == _content(conn, "replaced")


def test_only_the_types_a_load_reads_alike(conn: Any) -> None:
    """YEAR ('0' loads as 2000), BIT, ENUM, SET and JSON-like types go by REPLACE; so do
    rows whose values are not of their column's kind (bytes for a text column)."""
    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS load_db CHARACTER SET utf8mb4")
    apply_ddl(conn, "load_db", "CREATE TABLE kinds (id INT PRIMARY KEY, y YEAR, b BIT(3),"
                               " e ENUM('a'), s SET('a'), v VARCHAR(5), bl BLOB,"
                               " u INET6)")
    rules = read_rules(conn)
    kinds_of = LoadKinds(rules)
    table = TableRef("load_db", "kinds")
    # (In upper case where NULL is not taken: a load stores a NOT NULL column's default.)
    assert kinds_of(table, ("id", "v", "bl")) == "Isb"
    for other in ("y", "b", "e", "s", "u", "missing"):
        assert kinds_of(table, ("id", other)) is None
    # Not a table whose rollback would leave the load (MyISAM), nor one with an
    # AUTO_INCREMENT column while a load holds its AUTO-INC lock to its end.
    apply_ddl(conn, "load_db", "CREATE TABLE myisam (id INT PRIMARY KEY) ENGINE=MyISAM")
    apply_ddl(conn, "load_db", "CREATE TABLE counted (id INT AUTO_INCREMENT PRIMARY KEY)")
    rules = read_rules(conn)
    assert LoadKinds(rules)(TableRef("load_db", "myisam"), ("id",)) is None
    assert LoadKinds(rules)(TableRef("load_db", "counted"), ("id",)) is None
    # (Unless the other apply tasks write other tables meanwhile: test_loads_take_turns.)
    assert LoadKinds(rules)(TableRef("load_db", "counted"), ("id",), spread=True) == "I"
    interleaved = dataclasses.replace(rules, autoinc_interleaved=True)
    assert LoadKinds(interleaved)(TableRef("load_db", "counted"), ("id",)) == "I"
    # Not when the server makes the values (it reserves them in blocks for a load).
    apply_ddl(conn, "load_db", "CREATE TABLE made (k INT PRIMARY KEY, id INT AUTO_INCREMENT,"
                               " UNIQUE KEY (id))")
    made = TableRef("load_db", "made")
    assert LoadKinds(dataclasses.replace(read_rules(conn), autoinc_interleaved=True))(
        made, ("k",)) is None
    plan = plan_batch([Change(table, INSERT, ("id", "v"), (0,), None, (i, v), (1, i))
                       for i, v in enumerate(("a", b"\xff"))])
    [part] = plan.parts(1)
    assert [st.sql.split()[0] for st in part_statements(part, rules=rules)] == ["REPLACE"]
    plan = plan_batch([Change(table, INSERT, ("id", "v"), (0,), None, (i, v), (1, i))
                       for i, v in enumerate(("a", "b"))])
    [part] = plan.parts(1)
    assert [st.sql.split()[0] for st in part_statements(part, rules=rules)] == ["LOAD"]
    apply_ddl(conn, "load_db", "CREATE TABLE stamped (id INT PRIMARY KEY, ts TIMESTAMP NOT"
                               " NULL DEFAULT CURRENT_TIMESTAMP)")
    plan = plan_batch([Change(TableRef("load_db", "stamped"), INSERT, ("id", "ts"), (0,), None,
                              (1, None), (1, 0))])
    [part] = plan.parts(1)
    assert [st.sql.split()[0] for st in part_statements(part, rules=read_rules(conn))] == \
        ["REPLACE"]


def _counted_part(rows: dict[str, range], at: int = 0, task: tuple[int, int] = (0, 1)
                  ) -> Any:
    """A part writing ``rows`` (table -> ids; those of ``task[0]``, ids modulo ``task[1]``)."""
    changes = [Change(TableRef("turns_db", name), INSERT, ("id", "v"), (0,), None,
                      (i, f"{name}-{i}-{at}"), (at, n * 100_000 + i))
               for n, (name, ids) in enumerate(rows.items()) for i in ids
               if i % task[1] == task[0]]
    [part] = plan_batch(changes).parts(1)
    return part


def _first_verbs(statements: list[Any]) -> list[tuple[str, str]]:
    """Per table, in the order first written: the verb of its first statement."""
    out: dict[str, str] = {}
    for st in statements:
        out.setdefault(st.table.table, st.sql.split()[0])
    return list(out.items())


def test_loads_take_turns(conn: Any) -> None:
    """Tables with an AUTO_INCREMENT column, at lock mode 1 (a load holds the table's
    AUTO-INC lock to its end): loaded, each task starting on another table, unless one
    holds much more than its share of their rows (``applier._turns``); then by REPLACE.
    What the loads leave (rows, checksum, the next AUTO_INCREMENT value) is what REPLACE
    leaves."""
    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS turns_db CHARACTER SET utf8mb4")
    names = ["t1", "t2", "t3", "t4"]
    eight = [f"e{i}" for i in range(8)]
    for name in [*names, *(f"r{name}" for name in names), *eight]:
        apply_ddl(conn, "turns_db", f"CREATE TABLE {name} (id INT AUTO_INCREMENT PRIMARY KEY,"
                                    " v VARCHAR(20) NOT NULL)")
    rules = read_rules(conn)
    assert not rules.autoinc_interleaved  # MariaDB's default, the sandbox's
    part = _counted_part(dict.fromkeys(names, range(1, 6)))
    for index in range(4):
        verbs = _first_verbs(part_statements(part, rules=rules, lane=(index, 4)))
        # Every table loaded, in the order rotated: each task starts on the next table.
        assert verbs == [(name, "LOAD") for name in names[index:] + names[:index]]
    # Eight tables for four tasks: each starts two tables further.
    part = _counted_part(dict.fromkeys(eight, range(1, 3)))
    assert [_first_verbs(part_statements(part, rules=rules, lane=(i, 4)))[0]
            for i in range(4)] == [(name, "LOAD") for name in eight[::2]]
    # Three for four tasks: two start on the first (its loads take 4/3 of its share).
    three = _counted_part(dict.fromkeys(names[:3], range(1, 6)))
    assert [_first_verbs(part_statements(three, rules=rules, lane=(i, 4)))[0]
            for i in range(4)] == [("t1", "LOAD"), ("t1", "LOAD"), ("t2", "LOAD"),
                                   ("t3", "LOAD")]
    # Two for four tasks (twice their share), or one with most of the rows: REPLACE.
    few = _counted_part(dict.fromkeys(names[:2], range(1, 6)))
    assert {v for _t, v in _first_verbs(part_statements(few, rules=rules, lane=(1, 4)))} == \
        {"REPLACE"}
    lopsided = _counted_part({**dict.fromkeys(names, range(1, 6)), "t1": range(1, 40)})
    assert {v for _t, v in _first_verbs(part_statements(lopsided, rules=rules,
                                                        lane=(0, 4)))} == {"REPLACE"}
    # A table the part deletes from (its gap locks) goes by REPLACE; the others take turns.
    [deleting] = plan_batch([
        Change(TableRef("turns_db", "t1"), DELETE, ("id", "v"), (0,), (9, "x"), None, (1, 0)),
        *(Change(TableRef("turns_db", n), INSERT, ("id", "v"), (0,), None, (i, "v"),
                 (2, k * 10 + i)) for k, n in enumerate(names) for i in range(1, 6))]).parts(1)
    assert _first_verbs(part_statements(deleting, rules=rules, lane=(0, 4))) == [
        ("t1", "DELETE"), ("t2", "LOAD"), ("t3", "LOAD"), ("t4", "LOAD")]
    assert [st.sql.split()[0] for st in part_statements(deleting, rules=rules, lane=(0, 4))
            if st.table.table == "t1"] == ["DELETE", "REPLACE"]
    # A table that is never loaded (an ENUM column) counts for nothing, however big.
    apply_ddl(conn, "turns_db", "CREATE TABLE en (id INT AUTO_INCREMENT PRIMARY KEY,"
                                " v ENUM('v') NOT NULL)")
    rules = read_rules(conn)
    [with_enum] = plan_batch([
        Change(TableRef("turns_db", n), INSERT, ("id", "v"), (0,), None, (i, "v"),
               (k, i)) for k, (n, ids) in enumerate(
                   [("en", range(1, 100)), *((n, range(1, 6)) for n in names)])
        for i in ids]).parts(1)
    assert _first_verbs(part_statements(with_enum, rules=rules, lane=(1, 4))) == [
        ("en", "REPLACE"), ("t2", "LOAD"), ("t3", "LOAD"), ("t4", "LOAD"), ("t1", "LOAD")]
    # One task alone takes turns with no one.
    assert {v for _t, v in _first_verbs(part_statements(few, rules=rules))} == {"LOAD"}

    # On the server: four tasks at once, each on its own connection, against the same
    # rows written by REPLACE into the twins (one part, one task).
    rows = range(1, 3001)
    before = _loads(conn)
    apply_plan_part(conn, _counted_part({f"r{name}": rows for name in names}))
    assert _loads(conn) == before
    conns = [Downstream(conn.host, conn.port).connect() for _ in range(4)]
    try:
        loads_before = [_loads(c) for c in conns]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: apply_plan_part(
                conns[i], _counted_part(dict.fromkeys(names, rows), task=(i, 4)),
                rules=rules, lane=(i, 4)), range(4)))
        assert all(_loads(c) > n for c, n in zip(conns, loads_before, strict=True))
    finally:
        for c in conns:
            c.close()
    with conn.cursor() as cur:
        for name in names:
            got = []
            for table in (name, f"r{name}"):
                cur.execute(f"SELECT id, SUBSTRING_INDEX(v, '-', -2) FROM turns_db.{table}"
                            " ORDER BY id")
                content = cur.fetchall()
                cur.execute("SELECT AUTO_INCREMENT FROM information_schema.TABLES"
                            " WHERE TABLE_SCHEMA = 'turns_db' AND TABLE_NAME = %s", (table,))
                got.append((content, cur.fetchone()[0]))
            assert got[0] == got[1] and len(got[0][0]) == len(rows)
            assert got[0][1] == len(rows) + 1
    conn.commit()


def test_a_load_with_warnings_is_written_by_replace(conn: Any) -> None:
    """LOCAL makes warnings of errors: a row a trigger refuses would be skipped, a value too
    long cut.  Such a load is rolled back and its rows written by REPLACE, which stops
    as before; nothing of the part stays."""
    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS load_db CHARACTER SET utf8mb4")
    apply_ddl(conn, "load_db", "CREATE TABLE guarded (id INT PRIMARY KEY, v VARCHAR(3))")
    apply_ddl(conn, "load_db", "CREATE TRIGGER no_bad BEFORE INSERT ON guarded FOR EACH ROW"
                               " BEGIN IF NEW.v = 'bad' THEN SIGNAL SQLSTATE '45000'"
                               " SET MESSAGE_TEXT = 'refused'; END IF; END")
    table = TableRef("load_db", "guarded")
    rules = read_rules(conn)

    def part(values: list[str]) -> Any:
        [p] = plan_batch([Change(table, INSERT, ("id", "v"), (0,), None, (i, v), (1, i))
                          for i, v in enumerate(values)]).parts(1)
        return p

    with pytest.raises(ApplyError, match="refused"):
        apply_plan_part(conn, part(["ok", "bad", "ok"]), rules=rules)
    with pytest.raises(UnfaithfulApplyError, match="changed a value"):
        apply_plan_part(conn, part(["ok", "toolong"]), rules=rules)
    assert _content(conn, "guarded")[0] == ()
    # A table whose load was not taken is written by REPLACE on that connection from then on.
    assert table in conn.refused_loads and not conn.loads_refused
    before = _loads(conn)
    apply_plan_part(conn, part(["ok", "ok2"]), rules=rules)
    assert _content(conn, "guarded")[0] == ((0, "ok"), (1, "ok2"))
    assert _loads(conn) == before


def test_a_downstream_without_local_infile_gets_replace(conn: Any, server: MariaDBServer
                                                         ) -> None:
    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS load_db CHARACTER SET utf8mb4")
    apply_ddl(conn, "load_db", "CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(9))")
    table = TableRef("load_db", "plain")
    rules = read_rules(conn)
    [part] = plan_batch([Change(table, INSERT, ("id", "v"), (0,), None, (i, "v"), (1, i))
                         for i in range(3)]).parts(1)
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = 0")
    try:
        apply_plan_part(conn, part, rules=rules)
        assert conn.loads_refused
        before = _loads(conn)
        apply_plan_part(conn, part, rules=rules)
        assert _loads(conn) == before  # not tried again on this connection
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 1")
    assert _content(conn, "plain")[0] == ((0, "v"), (1, "v"), (2, "v"))


def test_a_load_is_read_whatever_the_servers_language(server: MariaDBServer) -> None:
    """The load's result line is read in English, whatever the server's lc_messages."""
    admin = Downstream(server.host, server.port).connect()
    try:
        apply_ddl(admin, None, "CREATE DATABASE IF NOT EXISTS load_db CHARACTER SET utf8mb4")
        apply_ddl(admin, "load_db", "CREATE TABLE spoken (id INT PRIMARY KEY, v VARCHAR(9))")
        with admin.cursor() as cur:
            cur.execute("SET GLOBAL lc_messages = 'de_DE'")
        conn = Downstream(server.host, server.port).connect()
        try:
            table = TableRef("load_db", "spoken")
            [part] = plan_batch([Change(table, INSERT, ("id", "v"), (0,), None, (i, "v"),
                                        (1, i)) for i in range(3)]).parts(1)
            before = _loads(conn)
            apply_plan_part(conn, part, rules=read_rules(conn))
            assert _loads(conn) == before + 1 and not conn.refused_loads
        finally:
            conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute("SET GLOBAL lc_messages = DEFAULT")
        admin.close()


def test_skipped_triggers_kept_by_an_older_release(conn: Any) -> None:
    """A skipped_trigger table an earlier release made gains the triggers' tables; the
    triggers it holds (their table unknown) still stop statements until dropped by name;
    one whose table a DROP TABLE dropped does not, nor one of a dropped schema; after a
    RENAME every trigger's table is unknown."""
    from binrelay.apply.ddl import LeftContext
    from binrelay.apply.replay import SkippedTriggers

    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS trig_meta")
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE trig_meta.skipped_trigger (pipeline VARCHAR(64) NOT NULL,"
                    " trigger_schema VARCHAR(64) NOT NULL, trigger_name VARCHAR(64) NOT NULL,"
                    " PRIMARY KEY (pipeline, trigger_schema, trigger_name)) ENGINE=InnoDB")
        cur.execute("INSERT INTO trig_meta.skipped_trigger VALUES ('p', 'app', 'old')")
        triggers = SkippedTriggers("trig_meta", "p")
        triggers.create(cur)
        triggers.create(cur)  # (again: nothing to add)
        assert triggers.any(cur) == "app.old"
        triggers.record(cur, "drop", TableRef("app", "old"))
    left = LeftContext()

    def after(statement: str) -> str | None:
        triggers.after_ddl(left, statement, "app")
        left.settle(conn)
        with conn.cursor() as cur:
            return triggers.any(cur)

    with conn.cursor() as cur:
        triggers.record(cur, "create", TableRef("app", "t1"), TableRef("app", "T"))
    assert after("DROP TABLE t") == "app.t1"  # (another table: names are bytes)
    assert after("DROP TABLE `T` /* generated by server */") is None
    with conn.cursor() as cur:
        triggers.record(cur, "create", TableRef("s2", "t2"), TableRef("s2", "x"))
    assert after("DROP DATABASE s3") == "s2.t2"
    assert after("DROP DATABASE s2") is None
    with conn.cursor() as cur:
        triggers.record(cur, "create", TableRef("app", "t3"), TableRef("app", "y"))
    assert after("ALTER TABLE y RENAME TO z") == "app.t3"
    assert after("DROP TABLE y, z") == "app.t3"  # its table unknown: kept
    assert after("DROP DATABASE app") is None  # (a trigger is in its table's schema)
    with conn.cursor() as cur:  # trigger names differ in case: two triggers
        triggers.record(cur, "create", TableRef("app", "tr"), TableRef("app", "a"))
        triggers.record(cur, "create", TableRef("app", "TR"), TableRef("app", "b"))
        triggers.record(cur, "drop", TableRef("app", "TR"))
        assert triggers.any(cur) == "app.tr"
    conn.commit()


def test_a_statement_stops_only_for_a_trigger_it_may_fire(conn: Any) -> None:
    """A statement-format DML is checked against the triggers skipped: one on a table it
    names, for an event of its kind; any, through a view or a stored function it names, or
    while a trigger's table is unknown.  A table made by an earlier release gains the
    events column (NULL: every event)."""
    from binrelay.apply.ddl import LeftContext
    from binrelay.apply.replay import SkippedTriggers

    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS trig_ev")
    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS trig_app")
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE trig_ev.skipped_trigger (pipeline VARCHAR(64) NOT NULL,"
                    " trigger_schema VARCHAR(64) NOT NULL, trigger_name VARCHAR(64) NOT NULL,"
                    " table_schema VARCHAR(64) NULL, table_name VARCHAR(64) NULL,"
                    " PRIMARY KEY (pipeline, trigger_schema, trigger_name)) ENGINE=InnoDB")
        cur.execute("INSERT INTO trig_ev.skipped_trigger VALUES ('p', 'trig_app', 'old',"
                    " 'trig_app', 'legacy')")
        triggers = SkippedTriggers("trig_ev", "p")
        triggers.create(cur)
        # Recorded before the events column: every event.
        assert triggers.fired_by(cur, "DELETE FROM trig_app.legacy") == "trig_app.old"
        assert triggers.fired_by(cur, "UPDATE trig_app.other SET a = 1") is None
        triggers.record(cur, "drop", TableRef("trig_app", "old"))
        triggers.record(cur, "create", TableRef("trig_app", "ins"), TableRef("trig_app", "t"),
                        frozenset({"INSERT"}))
        triggers.record(cur, "create", TableRef("trig_app", "del"), TableRef("trig_app", "d"),
                        frozenset({"DELETE"}))
        assert triggers.fired_by(cur, "UPDATE trig_app.t SET a = 1") is None
        assert triggers.fired_by(cur, "INSERT INTO t VALUES (1)") == "trig_app.ins"
        assert triggers.fired_by(cur, "INSERT INTO u SELECT * FROM t") == "trig_app.ins"
        assert triggers.fired_by(cur, "REPLACE INTO `T` VALUES (1)") == "trig_app.ins"
        assert triggers.fired_by(cur, "DELETE FROM trig_app.t") is None
        assert triggers.fired_by(cur, "DELETE t, d FROM t JOIN d") == "trig_app.del"
        assert triggers.fired_by(cur, "UPDATE u SET a = 1") is None
        cur.execute("CREATE TABLE trig_app.u (a INT)")
        cur.execute("CREATE VIEW trig_app.vu AS SELECT a FROM trig_app.u")
        cur.execute("CREATE FUNCTION trig_app.fu() RETURNS INT DETERMINISTIC RETURN 1")
    left = LeftContext()
    triggers.after_ddl(left, "CREATE VIEW vu AS SELECT a FROM u", "trig_app")
    left.settle(conn)
    with conn.cursor() as cur:
        found = triggers.fired_by(cur, "UPDATE vu SET a = 1")
        assert found == "trig_app.del, reachable through the view vu"
        found = triggers.fired_by(cur, "UPDATE u SET a = trig_app.FU()")
        assert found == "trig_app.del, reachable through the function fu"
        assert triggers.fired_by(cur, "UPDATE u SET a = fun()") is None
        # A CREATE TABLE ... SELECT: only what a view or a routine reaches.
        assert triggers.fired_by(cur, "CREATE TABLE n SELECT * FROM t", tables=False) is None
        assert triggers.fired_by(cur, "CREATE TABLE n SELECT fu()", tables=False) == \
            "trig_app.del, reachable through the function fu"
        # A CREATE ... IF NOT EXISTS of a trigger that was there changed nothing; where the
        # record says another table or events, it may have outlived its trigger: unknown.
        triggers.record(cur, "create if absent", TableRef("trig_app", "ins"),
                        TableRef("trig_app", "t"), frozenset({"INSERT"}))
        assert triggers.fired_by(cur, "UPDATE t SET a = 1") is None
        triggers.record(cur, "create if absent", TableRef("trig_app", "ins"),
                        TableRef("trig_app", "other"), frozenset({"DELETE"}))
        assert triggers.fired_by(cur, "UPDATE zz SET a = 1") == "trig_app.ins"
        assert triggers.fired_by(cur, "CREATE TABLE n SELECT 1", tables=False) is None
        triggers.record(cur, "drop", TableRef("trig_app", "ins"))
        # Names read from a statement in another character set (bytes kept as escapes):
        # recorded all the same, its table unknown.
        triggers.record(cur, "create", TableRef("trig_app", "x\udce9"),
                        TableRef("trig_app", "caf\udce9"), frozenset({"INSERT"}))
        assert triggers.fired_by(cur, "UPDATE zz SET a = 1") == "trig_app.x\\xe9"
        triggers.record(cur, "drop", TableRef("trig_app", "x\udce9"))
        assert triggers.fired_by(cur, "UPDATE zz SET a = 1") is None
        # A trigger whose table is unknown (after a RENAME): any statement.
        triggers.record(cur, "create", TableRef("trig_app", "lost"), None)
        assert triggers.fired_by(cur, "UPDATE u SET a = 1") == "trig_app.lost"
    conn.rollback()
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE trig_app")
        cur.execute("DROP DATABASE trig_ev")


def test_no_trigger_skipped_costs_no_round_trip(conn: Any) -> None:
    """With no trigger recorded for the pipeline (read when the table is made), a DDL's
    bookkeeping and a statement's check send nothing; the first trigger recorded turns
    both on again, and a new start reads the records again."""
    from binrelay.apply.ddl import LeftContext
    from binrelay.apply.replay import SkippedTriggers

    apply_ddl(conn, None, "CREATE DATABASE IF NOT EXISTS trig_none")
    with conn.cursor() as cur:
        triggers = SkippedTriggers("trig_none", "p")
        triggers.create(cur)
        cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
        before = int(cur.fetchone()[1])
        left = LeftContext()
        triggers.after_ddl(left, "DROP TABLE t", "app")
        assert not left.followups
        assert triggers.any(cur) is None
        cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
        assert int(cur.fetchone()[1]) == before + 1  # (the SHOW itself)
        triggers.record(cur, "create", TableRef("app", "tg"), TableRef("app", "t"))
        triggers.after_ddl(left, "ALTER TABLE app.t RENAME TO app.u", "app")
        assert len(left.followups) == 1
        assert triggers.any(cur) == "app.tg"
        again = SkippedTriggers("trig_none", "p")
        again.create(cur)
        assert again.any(cur) == "app.tg"
    conn.rollback()
