"""MySQL 8.0.21+ logs ``CREATE TABLE … SELECT`` as one transaction: BEGIN, the CREATE with a
``START TRANSACTION`` table option, the rows, XID.  (No capture holds one and MySQL cannot be
installed here: the binlog is built event by event, as MySQL writes it — pingcap/tidb#52477
and mysql/mysql-server#347 show the sequence.)  The sync applies it to a MariaDB downstream,
which does not know that option: the table, then its rows, replayable after a crash."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from binlog_builder import (
    QUERY,
    TABLE_MAP,
    WRITE_ROWS,
    XID,
    BinlogBuilder,
    query_body,
    write_rows_body,
    xid_body,
)
from binrelay.apply.sql import start_transaction_clause
from binrelay.config import load_config
from binrelay.position import SubdirName
from binrelay.relay.layout import RelayMeta, write_index, write_meta
from binrelay.spark.sync import SyncPipeline
from fidelity import sync_with_crashes
from relay_helpers import write_config

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
TABLE_ID = 90


def named_table_map(table_id: int, db: str, table: str, column: str) -> bytes:
    """TABLE_MAP of ``db.table(column INT NULL)`` with its column name (row metadata FULL)."""
    names = bytes([len(column)]) + column.encode()
    return (table_id.to_bytes(6, "little") + (1).to_bytes(2, "little")
            + bytes([len(db)]) + db.encode() + b"\0" + bytes([len(table)]) + table.encode()
            + b"\0" + b"\x01" + b"\x03" + b"\x00" + b"\x01"
            + bytes([4, len(names)]) + names)  # optional metadata: COLUMN_NAME


def create_select_relay(root: Path) -> Path:
    b = BinlogBuilder(flavor="mysql").header()
    b.ddl("CREATE DATABASE app", uuid=UUID)
    b._mysql_group(UUID, 2, [
        (QUERY, query_body("BEGIN", db="app")),
        (QUERY, query_body("CREATE TABLE `t` (\n  `id` int DEFAULT NULL\n) START TRANSACTION",
                           db="app")),
        (TABLE_MAP, named_table_map(TABLE_ID, "app", "t", "id")),
        (WRITE_ROWS, write_rows_body(TABLE_ID, [1, 2, 3], v2=True)),
        (XID, xid_body(24)),
    ])
    b._mysql_group(UUID, 3, [
        (QUERY, query_body("BEGIN", db="app")),
        (TABLE_MAP, named_table_map(TABLE_ID + 1, "app", "t", "id")),
        (WRITE_ROWS, write_rows_body(TABLE_ID + 1, [4], v2=True)),
        (XID, xid_body(25)),
    ])
    relay = root / "relay"
    subdir = relay / f"{UUID}.000001"
    subdir.mkdir(parents=True)
    (subdir / "binlog.000001").write_bytes(b.bytes())
    write_meta(subdir, RelayMeta("binlog.000001", b.pos, b.gtid_text()))
    write_index(relay, [SubdirName.parse(subdir.name)])
    return relay


def sync_config(tmp_path: Path, relay: Path, downstream) -> Path:
    return write_config(tmp_path / "sync.toml", downstream, relay, to={
        "host": downstream.host, "port": downstream.port, "user": "root", "password": ""},
        sync={"master": "local[1]", "batch-bytes": 1})


@pytest.mark.parametrize("crash", [False, True], ids=["straight", "crash-replayed"])
def test_mysql_single_transaction_create_select(mariadb, tmp_path: Path, spark, crash: bool,
                                                monkeypatch) -> None:
    relay = create_select_relay(tmp_path)
    config = load_config(sync_config(tmp_path, relay, mariadb))
    if crash:  # every batch dies once before its checkpoint, then is replayed
        env = SimpleNamespace(config=tmp_path / "sync.toml")
        assert sync_with_crashes(env, spark, monkeypatch) >= 2
    else:
        SyncPipeline(config, spark=spark).run(until_caught_up=True)
    assert mariadb.execute("SELECT id FROM app.t ORDER BY id") == ((1,), (2,), (3,), (4,))


@pytest.mark.parametrize("statement, cut", [
    (b"CREATE TABLE `t` (\n  `id` int\n) START TRANSACTION", len(b" START TRANSACTION")),
    (b"create table t (id int)\nstart  transaction", len(b"\nstart  transaction")),
    (b"CREATE TABLE t (id int)", 0),
    (b"INSERT INTO t VALUES ('x START TRANSACTION')", 0),
    (b"START TRANSACTION", 0),
])
def test_the_start_transaction_option_is_found(statement: bytes, cut: int) -> None:
    assert start_transaction_clause(statement) == cut
