"""Several statements in one round trip (``apply.downstream.run_script``), on a real server:
each runs as if sent alone, the first failure says which, and an upstream statement's own
end (a comment, a semicolon) cannot swallow what follows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binrelay.apply.ddl import apply_ddl
from binrelay.apply.ddl_journal import DdlJournal
from binrelay.apply.downstream import (
    Downstream,
    ScriptError,
    run_queries,
    run_script,
    runs_scripts,
)
from binrelay.apply.sql import quote_ident
from binrelay.errors import DownstreamError
from binrelay.testing.sandbox import MariaDBServer, ServerFactory


@pytest.fixture(scope="module")
def server(mariadb_template: Path, mariadb_socket_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    factory = ServerFactory(tmp_path_factory.mktemp("scripts"), template=mariadb_template,
                            socket_dir=mariadb_socket_dir)
    try:
        server = factory(server_id=1, extra_args=["--skip-log-bin"])
        server.execute("CREATE DATABASE s")
        yield server
    finally:
        factory.close()


@pytest.fixture
def conn(server: MariaDBServer) -> Iterator[Any]:
    connection = Downstream(server.host, server.port, scripts=True).connect()
    try:
        yield connection
    finally:
        connection.close()


def test_each_statements_rows_and_the_first_failure(conn: Any, server: MariaDBServer) -> None:
    assert runs_scripts(conn)
    with conn.cursor() as cur:
        assert run_script(cur, ["SELECT 1, 'a'", "DO 0", "SELECT 2 UNION ALL SELECT 3"]) == [
            ((1, "a"),), (), ((2,), (3,))]
        cur.execute("CREATE TABLE s.f (id INT PRIMARY KEY)")
        with pytest.raises(ScriptError) as info:
            run_script(cur, ["INSERT INTO s.f VALUES (1)", "COMMIT",
                             "INSERT INTO s.f VALUES (1)", "INSERT INTO s.f VALUES (2)"])
    assert info.value.index == 2 and info.value.error.args[0] == 1062
    conn.rollback()
    # Those before the failure stand; none after it ran.
    assert server.execute("SELECT id FROM s.f") == ((1,),)


def test_queries_run_alike_with_or_without_scripts(server: MariaDBServer, conn: Any) -> None:
    plain = Downstream(server.host, server.port).connect()
    try:
        assert not runs_scripts(plain)
        queries = [("SELECT %s, %s", ("x%s", 5)), "SELECT 'y%'", ("SELECT 1 FROM s.nope", None),
                   "SELECT 3"]
        for c in (plain, conn):
            with c.cursor() as cur:
                assert run_queries(cur, queries[:2]) == [(("x%s", 5),), (("y%",),)]
                with pytest.raises(ScriptError) as info:
                    run_queries(cur, queries)
                assert info.value.index == 2 and info.value.error.args[0] == 1146
    finally:
        plain.close()


@pytest.mark.parametrize("ending", [b"", b";", b"; ;", b" -- the end", b" # the end",
                                    b" /* the end */", b"\n"])
def test_an_upstream_statement_ends_the_script(conn: Any, server: MariaDBServer,
                                               ending: bytes) -> None:
    name = f"e{abs(hash(ending)) % 10**6}"
    with conn.cursor() as cur:
        assert run_script(cur, ["USE s", b"CREATE TABLE " + name.encode() + b" (a INT)"
                                + ending]) == [(), ()]
    assert server.execute("SELECT COUNT(*) FROM information_schema.TABLES"
                          " WHERE TABLE_SCHEMA = 's' AND TABLE_NAME = %s", (name,)) == ((1,),)


def test_a_character_set_set_in_the_script_reads_the_next_statement(
        conn: Any, server: MariaDBServer) -> None:
    """GBK's 0xD5 0x5C is one character whose second byte is a backslash: read as UTF-8 the
    backslash would escape the quote after it."""
    ddl = "CREATE TABLE s.g (a VARCHAR(10) DEFAULT '誠') CHARSET gbk".encode("gbk")
    assert b"\xd5\x5c" in ddl
    with conn.cursor() as cur:
        run_script(cur, ["SET character_set_client = gbk, collation_connection = 28", ddl])
        run_script(cur, ["SET NAMES utf8mb4"])
    assert server.execute("SELECT COLUMN_DEFAULT FROM information_schema.COLUMNS"
                          " WHERE TABLE_SCHEMA = 's' AND TABLE_NAME = 'g'") == (("'誠'",),)


def test_a_statement_that_was_two_is_refused(conn: Any) -> None:
    with conn.cursor() as cur, pytest.raises(DownstreamError, match="more than"):
        run_script(cur, ["DO 1", "DO 2; DO 3"])


@pytest.mark.parametrize("schema", ["semi;colon--", "pct%s%%", "quo'te\"s`"])
@pytest.mark.parametrize("statement", ["CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(9))",
                                       "CREATE TABLE t (id INT PRIMARY KEY) COMMENT '%s;'"])
def test_a_journaled_ddl_in_one_round_trip(conn: Any, server: MariaDBServer, schema: str,
                                           statement: str) -> None:
    """The journal row, its commit, USE, the context and the DDL: one script, on names and
    text that quoting, ``%`` formatting and statement ends could break."""
    journal = DdlJournal("binrelay", "p%s", batch_id=1)
    server.execute("CREATE DATABASE IF NOT EXISTS binrelay")
    server.execute(f"DROP DATABASE IF EXISTS {quote_ident(schema)}")
    server.execute(f"CREATE DATABASE {quote_ident(schema)}")
    with conn.cursor() as cur:
        journal.create(cur)
        journal.clear(cur)
    conn.commit()
    setup = ("SET @@session.timestamp = 1700000000, @@session.character_set_client = 33",)
    done = apply_ddl(conn, schema, statement, position=(1, 2, 3), setup=setup,
                     raw=statement.encode(), journal=journal)
    assert done.applied
    assert server.execute(f"SHOW TABLES FROM {quote_ident(schema)}") == (("t",),)
    assert server.execute("SELECT pipeline, position, statement FROM binrelay.ddl_journal") \
        == (("p%s", "1.2.3", statement),)
    with conn.cursor() as cur:  # the session is the applier's again
        cur.execute("SELECT @@session.timestamp > 1750000000, @@character_set_client")
        assert cur.fetchone() == (1, "utf8mb4")
