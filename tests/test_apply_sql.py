"""Statements against a real MariaDB: hostile identifiers, values, and DDL replayed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
from binrelay.apply.sql import quote_ident, quote_table
from binrelay.errors import DownstreamDdlError
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
