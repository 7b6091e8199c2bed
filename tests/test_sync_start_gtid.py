"""``[sync] binlog-gtid``: a pipeline starts where a downstream loaded from a copy stands."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from binrelay.errors import RelayDirError
from binrelay.relay.relaydir import earliest
from binrelay.relay.txnscan import transaction_ends
from binrelay.spark.planning import gtid_set_at, position_of_gtid_set, spans
from fidelity import assert_converged, make_env

SCHEMA = [
    "CREATE DATABASE app",
    "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(10))",
    "INSERT INTO app.t VALUES (1, 'a'), (2, 'b')",
    "CREATE TABLE app.u (id INT AUTO_INCREMENT PRIMARY KEY, w INT)",
    "INSERT INTO app.u (w) VALUES (1), (2), (3)",
]
LATER = [
    "UPDATE app.t SET v = 'a2' WHERE id = 1",
    "INSERT INTO app.t VALUES (3, 'c')",
    "DELETE FROM app.u WHERE w = 2",
    "ALTER TABLE app.u ADD COLUMN z INT DEFAULT 7",
    "INSERT INTO app.u (w) VALUES (4)",
]


def copy_database(source, target, schema: str) -> None:
    """What an operator does: mariadb-dump of the upstream loaded into the downstream."""
    dump = subprocess.run(
        ["mariadb-dump", "-h", source.host, "-P", str(source.port), "-uroot",
         "--single-transaction", "--databases", schema],
        capture_output=True, check=True)
    subprocess.run(["mariadb", "-h", target.host, "-P", str(target.port), "-uroot"],
                   input=dump.stdout, capture_output=True, check=True)


def test_a_downstream_loaded_from_a_dump_continues_from_its_gtid_set(
        mariadb_factory, tmp_path: Path, spark) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(SCHEMA)
    copied_at = env.upstream.scalar("SELECT @@gtid_binlog_pos")
    copy_database(env.upstream, env.downstream, "app")
    env.run(LATER)
    env.relay()
    text = env.config.read_text().replace("[sync]", f'[sync]\nbinlog-gtid = "{copied_at}"', 1)
    env.config.write_text(text)
    stats = env.sync(spark)
    assert stats.changes == 4  # LATER's rows only: the copy's are not applied again
    assert_converged(env)


def test_the_start_is_where_exactly_that_set_is_applied(mariadb_factory, tmp_path: Path) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(SCHEMA + LATER)
    env.relay()
    start = earliest(env.relay_dir)
    assert position_of_gtid_set(env.relay_dir, "") == start
    checked = 0
    for span in spans(env.relay_dir, start, start.__class__(start.subdir, start.binlog_name,
                                                            1 << 40)):
        path = env.relay_dir / str(span.subdir) / span.file
        for txn in transaction_ends(path, span.start, span.stop):
            at = start.__class__(span.subdir, span.file, txn.end)
            found = position_of_gtid_set(env.relay_dir, gtid_set_at(env.relay_dir, at))
            # The first position with that set: ``at`` or the end of the last transaction
            # with a GTID before it (events between them carry none).
            assert found.sort_key <= at.sort_key
            assert gtid_set_at(env.relay_dir, found) == gtid_set_at(env.relay_dir, at)
            checked += 1
    assert checked >= len(SCHEMA + LATER)


@pytest.mark.parametrize("wanted, message", [
    ("0-1-99999", "has not reached"),
    ("7-1-3", "never holds exactly"),
    ("0-1-1,7-1-3", "never holds exactly"),
])
def test_a_set_the_relay_cannot_start_from_stops_with_one_line(
        mariadb_factory, tmp_path: Path, wanted: str, message: str) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(SCHEMA)
    env.relay()
    with pytest.raises(RelayDirError, match=message):
        position_of_gtid_set(env.relay_dir, wanted)


def test_a_relay_that_starts_after_the_set_stops_with_one_line(mariadb_factory,
                                                               tmp_path: Path) -> None:
    env = make_env(mariadb_factory, tmp_path)
    env.run(SCHEMA)
    relayed_from = env.upstream.scalar("SELECT @@gtid_binlog_pos")
    # The upstream has purged the binlog holding the first transactions.
    env.run(["FLUSH BINARY LOGS", *LATER])
    env.upstream.purge_logs_to("mysql-bin.000002")
    env.relay()
    with pytest.raises(RelayDirError, match="starts after"):
        position_of_gtid_set(env.relay_dir, "0-1-2")
    assert position_of_gtid_set(env.relay_dir, relayed_from) == earliest(env.relay_dir)
