"""The relaylog source on real relays of a real MariaDB, in batch and streaming mode."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from binrelay.relay import consumers
from binrelay.relay.layout import list_binlogs, read_meta
from binrelay.spark.changes import decode_image
from binrelay.testing.sandbox import run_sysbench
from relay_helpers import RelayProcess, current_subdir, wait_caught_up, write_config


@pytest.fixture(scope="module")
def relayed(tmp_path_factory, mariadb_template, mariadb_socket_dir):
    """A relay dir holding sysbench traffic, DDL and a table of awkward values."""
    from binrelay.testing.sandbox import MariaDBServer

    base = tmp_path_factory.mktemp("spark-source")
    server = MariaDBServer(base / "up", server_id=1, max_binlog_size=256 * 1024,
                           template=mariadb_template, socket_dir=mariadb_socket_dir).start()
    try:
        run_sysbench(server, tables=2, table_size=1000, events=1500)
        server.execute("SET GLOBAL sql_mode = ''")
        server.execute(
            "CREATE TABLE sbtest.odd (id INT PRIMARY KEY, d DATE, ts TIMESTAMP(3) NULL, "
            "j JSON, b VARBINARY(10), bt BIT(5), dec1 DECIMAL(30,10), f DOUBLE, "
            "t TEXT CHARACTER SET utf8mb4, "
            "e ENUM('a','b'), tm TIME(6))")
        server.execute(
            "INSERT INTO sbtest.odd VALUES (1, '0000-00-00', '2021-03-04 05:06:07.891', "
            "'{\"a\": [1, 2.5]}', 0x00ff00, b'10101', -12345678901234567890.0123456789, "
            "0.1, _utf8mb4'zw\u00f6lf \U0001f600', 'b', '-838:59:59.000001')")
        server.execute("ALTER TABLE sbtest.odd ADD COLUMN extra INT")
        server.execute("UPDATE sbtest.odd SET extra = 7, d = '2024-02-29'")
        server.execute("DELETE FROM sbtest.odd")
        relay_dir = base / "relay"
        config = write_config(base / "relay.toml", server, relay_dir)
        relay = RelayProcess(config, base / "relay.log")
        try:
            wait_caught_up(relay_dir, server, process=relay)
        finally:
            assert relay.stop() == 0
        expected = _mariadb_binlog_counts(current_subdir(relay_dir))
        yield relay_dir, expected
    finally:
        server.stop()


def _mariadb_binlog_counts(subdir: Path) -> dict[tuple[str, str], int]:
    """Row changes per (table, op) as mariadb-binlog -v prints them: a check we did not write."""
    counts: dict[tuple[str, str], int] = {}
    ops = {"INSERT INTO": "insert", "UPDATE": "update", "DELETE FROM": "delete"}
    for name in list_binlogs(subdir):
        out = subprocess.run(["mariadb-binlog", "-v", str(subdir / name)], check=True,
                             capture_output=True).stdout.decode("utf-8", "replace")
        for m in re.finditer(r"^### (INSERT INTO|UPDATE|DELETE FROM) `[^`]+`\.`([^`]+)`", out,
                             re.M):
            key = (m.group(2), ops[m.group(1)])
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_batch_read_counts_match_mariadb_binlog(spark, relayed) -> None:
    relay_dir, expected = relayed
    df = spark.read.format("relaylog").option("relay_dir", str(relay_dir)).load()
    got = {(r["table"], r["op"]): r["count"]
           for r in df.where("op != 'ddl'").groupBy("table", "op").count().collect()}
    assert got == expected
    assert df.rdd.getNumPartitions() > 1
    ddl = [r["query"] for r in df.where("op = 'ddl'").orderBy("file", "pos").collect()]
    assert any(q.startswith("ALTER TABLE sbtest.odd ADD COLUMN") for q in ddl)
    # No duplicate positions: every change once.
    assert df.select("file", "pos", "row").distinct().count() == df.count()


def test_values_are_lossless(spark, relayed) -> None:
    relay_dir, _ = relayed
    df = spark.read.format("relaylog").option("relay_dir", str(relay_dir)).load()
    ins = df.where("table = 'odd' AND op = 'insert'").collect()
    assert len(ins) == 1
    row = ins[0]
    values = dict(zip(row["columns"], decode_image(row["after"], row["after_kinds"]),
                      strict=True))
    assert values == {
        "id": 1, "d": "0000-00-00", "ts": "2021-03-04 05:06:07.891", "j": '{"a": [1, 2.5]}',
        "b": b"\x00\xff\x00", "bt": 0b10101, "dec1": "-12345678901234567890.0123456789",
        "f": "0.1", "t": "zw\u00f6lf \U0001f600", "e": "b", "tm": "-838:59:59.000001"}
    upd = df.where("table = 'odd' AND op = 'update'").collect()[0]
    after = dict(zip(upd["columns"], decode_image(upd["after"], upd["after_kinds"]),
                     strict=True))
    assert after["extra"] == 7 and after["d"] == "2024-02-29"
    assert upd["key"] == [0]


def test_stream_with_limits_delivers_everything_once(spark, relayed, tmp_path) -> None:
    relay_dir, expected = relayed
    seen: list[tuple] = []
    batches: list[dict] = []

    def collect(batch_df, batch_id: int) -> None:
        rows = batch_df.select("file", "pos", "row", "op", "table").collect()
        ops = {r["op"] for r in rows}
        assert "ddl" not in ops or ops == {"ddl"}, f"batch {batch_id} mixes DDL: {ops}"
        batches.append({"id": batch_id, "rows": len(rows)})
        seen.extend(tuple(r) for r in rows)

    query = (spark.readStream.format("relaylog").option("relay_dir", str(relay_dir))
             .option("maxBytesPerTrigger", str(512 * 1024)).option("consumerName", "test-stream")
             .load().writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert len(batches) > 5
    assert len(seen) == len(set(seen))
    counts: dict[tuple[str, str], int] = {}
    for _file, _pos, _row, op, table in seen:
        if op != "ddl":
            counts[(table, op)] = counts.get((table, op), 0) + 1
    assert counts == expected
    # The consumer's safe position followed the batches Spark committed (Spark commits a
    # batch to the source when it plans the next one, so it trails by the last batch).
    (consumer,) = consumers.list_consumers(relay_dir)
    meta = read_meta(current_subdir(relay_dir))
    assert meta is not None
    files = list_binlogs(current_subdir(relay_dir))
    assert consumer.position.binlog_name in files[-2:]
    assert consumer.position.sort_key <= (consumer.position.subdir.seq,
                                          (files[-1].rsplit(".", 1)[0], int(files[-1][-6:])),
                                          meta.binlog_pos)
    consumers.unregister(relay_dir, "test-stream")
    progress = query.lastProgress
    assert progress is not None and progress["sources"][0]["description"]
