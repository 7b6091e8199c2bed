"""A relay dir with a gap is refused by every read path, with one line naming the gap; an
upstream that restarted (no ROTATE at the end of its file) is not a gap."""

from __future__ import annotations

import re
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from binlog_builder import BinlogBuilder
from binrelay.config import load_config
from binrelay.errors import BinrelayError, RelayDirError
from binrelay.relay.chain import check_handover
from binrelay.relay.layout import list_binlogs, read_index
from binrelay.relay.purge import read_state
from binrelay.relay.reader import RelayReader
from binrelay.spark.sync import SyncPipeline
from binrelay.testing.sandbox import ServerFactory
from relay_helpers import relay_until_caught_up, run_binrelay, write_config

FILES = 5


@pytest.fixture(scope="module")
def whole(tmp_path_factory, mariadb_template, mariadb_socket_dir) -> Iterator[Path]:
    """A real relay dir of FILES binlog files, each holding row changes."""
    tmp = tmp_path_factory.mktemp("gaps")
    factory = ServerFactory(tmp / "mariadb", template=mariadb_template,
                            socket_dir=mariadb_socket_dir)
    try:
        yield make_relay(factory(server_id=1), tmp)
    finally:
        factory.close()


def make_relay(upstream, tmp: Path) -> Path:
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v INT)")
    for i in range(FILES):
        upstream.execute(f"INSERT INTO d.t VALUES ({i}, {i})")
        if i < FILES - 1:
            upstream.execute("FLUSH BINARY LOGS")
    relay_dir = tmp / "relay"
    config = write_config(tmp / "relay.toml", upstream, relay_dir)
    relay_until_caught_up(config, upstream, relay_dir, tmp / "relay.log")
    (subdir,) = read_index(relay_dir)
    assert len(list_binlogs(relay_dir / str(subdir))) == FILES
    return relay_dir


@pytest.fixture
def relay(whole: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "relay"
    shutil.copytree(whole, copy)
    return copy


def subdir_of(relay_dir: Path) -> Path:
    return relay_dir / str(read_index(relay_dir)[0])


def readers(relay_dir: Path, tmp_path: Path, spark) -> dict[str, object]:
    """Every read path, each a function that reads the whole relay dir."""

    def dump() -> None:
        proc = run_binrelay("dump", str(relay_dir))
        lines = proc.stderr.splitlines()
        assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-2000:]
        raise RelayDirError(lines[0])

    def source() -> None:
        # Spark wraps what the source raises (AnalysisException); the line is in its text.
        try:
            spark.read.format("relaylog").option("relay_dir", str(relay_dir)).load().collect()
        except Exception as exc:
            found = re.search(r"\[BR\d{4}\] [^\n]*", str(exc))
            assert found, str(exc)[-2000:]
            raise RelayDirError(found.group(0)) from None

    def planning() -> None:  # what sync and recover plan batches with
        from binrelay.relay.relaydir import durable_end, earliest
        from binrelay.spark.planning import plan_partitions
        plan_partitions(relay_dir, earliest(relay_dir), durable_end(relay_dir),
                        target_bytes=1 << 20)

    return {
        "reader": lambda: list(RelayReader(relay_dir)),
        "dump": dump,
        "source": source,
        "sync": planning,
        "purge": lambda: read_state(relay_dir),
    }


PATHS = ["reader", "dump", "source", "sync", "purge"]


def assert_refused(relay_dir: Path, tmp_path: Path, spark, match: str,
                   paths=PATHS) -> None:
    for name in paths:
        with pytest.raises(BinrelayError, match=match):
            readers(relay_dir, tmp_path, spark)[name]()


def test_a_whole_relay_dir_reads(relay: Path, tmp_path: Path, spark) -> None:
    events = list(RelayReader(relay))
    assert events
    for name in ("source", "sync", "purge"):
        readers(relay, tmp_path, spark)[name]()


def test_a_missing_middle_file(relay: Path, tmp_path: Path, spark) -> None:
    (subdir_of(relay) / "mysql-bin.000003").unlink()
    assert_refused(relay, tmp_path, spark, r"mysql-bin\.000003 is missing")


@pytest.mark.parametrize("cut", [1, 20, "rotate"])
def test_a_file_cut_short(relay: Path, tmp_path: Path, spark, cut) -> None:
    path = subdir_of(relay) / "mysql-bin.000002"
    data = path.read_bytes()
    # The whole ROTATE (an event boundary), or bytes of it.
    size = len(data) - (len(b"mysql-bin.000003") + 19 + 8 + 4 if cut == "rotate" else cut)
    path.write_bytes(data[:size])
    assert_refused(relay, tmp_path, spark, r"mysql-bin\.000002 (ends without the ROTATE|"
                   r"ends inside an event at offset \d+: it was cut short)")


def test_a_file_renamed_into_a_gap(relay: Path, tmp_path: Path, spark) -> None:
    sub = subdir_of(relay)
    (sub / "mysql-bin.000004").unlink()
    (sub / "mysql-bin.000003").rename(sub / "mysql-bin.000004")
    assert_refused(relay, tmp_path, spark, r"mysql-bin\.000003 is missing")


def test_a_subdir_listed_but_missing(relay: Path, tmp_path: Path, spark) -> None:
    sub = subdir_of(relay)
    sub.rename(relay / "elsewhere")
    assert_refused(relay, tmp_path, spark, "server-uuid.index lists", paths=PATHS)


def test_a_subdir_present_but_not_listed(relay: Path, tmp_path: Path, spark) -> None:
    sub = subdir_of(relay)
    stray = relay / (sub.name[:-6] + "000002")
    shutil.copytree(sub, stray)
    assert_refused(relay, tmp_path, spark, "does not list it")


def test_a_sync_stops_at_the_gap(relay: Path, tmp_path: Path, spark, mariadb) -> None:
    """Nothing after the gap is applied (the check comes when the batch is planned)."""
    (subdir_of(relay) / "mysql-bin.000004").unlink()
    config = write_config(tmp_path / "sync.toml", mariadb, relay, to={
        "host": mariadb.host, "port": mariadb.port, "user": "root", "password": ""},
        sync={"master": "local[1]", "batch-bytes": 1024})
    with pytest.raises(RelayDirError, match=r"mysql-bin\.000004 is missing"):
        SyncPipeline(load_config(config), spark=spark).run(until_caught_up=True)
    applied = mariadb.execute("SELECT TABLE_NAME FROM information_schema.TABLES"
                              " WHERE TABLE_SCHEMA = 'd'")
    if applied:
        assert mariadb.scalar("SELECT COUNT(*) FROM d.t WHERE id = 4") == 0


def test_an_upstream_restart_is_not_a_gap(mariadb_factory, tmp_path: Path, spark) -> None:
    upstream = mariadb_factory(server_id=1)
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
    upstream.execute("INSERT INTO d.t VALUES (1)")
    upstream.kill()  # its binlog ends without a ROTATE
    upstream.start()
    upstream.execute("INSERT INTO d.t VALUES (2)")
    upstream.restart()  # a clean stop: a STOP event
    upstream.execute("INSERT INTO d.t VALUES (3)")
    relay_dir = tmp_path / "relay"
    config = write_config(tmp_path / "relay.toml", upstream, relay_dir)
    relay_until_caught_up(config, upstream, relay_dir, tmp_path / "relay.log")
    assert len(list_binlogs(subdir_of(relay_dir))) == 3
    assert list(RelayReader(relay_dir))
    for name in ("source", "sync", "purge"):
        readers(relay_dir, tmp_path, spark)[name]()


# --- each hand-over rule on built files (no server) -----------------------------------------


def built_file(*, rotate_to: str | None = None, stop: bool = False,
               after_restart: bool = True) -> bytes:
    b = BinlogBuilder().header()
    b.trx([1])
    if rotate_to:
        b.rotate(rotate_to)
    if stop:
        b.stop()
    data = b.bytes()
    if not after_restart:  # a file opened by a rotation: its FDE's ``created`` is 0
        size = int.from_bytes(data[4 + 9:4 + 13], "little")
        fde = bytearray(data[4:4 + size])
        fde[19 + 2 + 50:19 + 2 + 50 + 4] = bytes(4)
        fde[-4:] = zlib.crc32(bytes(fde[:-4])).to_bytes(4, "little")
        data = data[:4] + bytes(fde) + data[4 + size:]
    return data


@pytest.mark.parametrize("first, second, name, problem", [
    (dict(rotate_to="mysql-bin.000002"), dict(after_restart=False), "mysql-bin.000002", None),
    (dict(rotate_to="mysql-bin.000009"), dict(after_restart=False), "mysql-bin.000002",
     r"rotates to mysql-bin\.000009, but the next file present is mysql-bin\.000002"),
    (dict(rotate_to="mysql-bin.000002"), dict(after_restart=False), "mysql-bin.000003",
     r"mysql-bin\.000002 is missing \(mysql-bin\.000001 rotates to it"),
    (dict(stop=True), dict(after_restart=True), "mysql-bin.000002", None),
    (dict(), dict(after_restart=True), "mysql-bin.000002", None),  # a crash, then a restart
    (dict(stop=True), dict(after_restart=True), "mysql-bin.000004",
     r"relay files are missing between"),
    (dict(), dict(after_restart=False), "mysql-bin.000002", r"ends without the ROTATE"),
])
def test_hand_over_rules(tmp_path: Path, first, second, name, problem) -> None:
    (tmp_path / "mysql-bin.000001").write_bytes(built_file(**first))
    (tmp_path / name).write_bytes(built_file(**second))
    if problem is None:
        check_handover(tmp_path, "mysql-bin.000001", name)
    else:
        with pytest.raises(RelayDirError, match=problem):
            check_handover(tmp_path, "mysql-bin.000001", name)


def test_a_missing_start_file_is_not_stepped_over(relay: Path) -> None:
    """A consumer positioned at the very start of a file that is gone (while later files are
    there) must not begin at the next one."""
    from binrelay.position import Position
    from binrelay.relay.relaydir import durable_end
    from binrelay.spark.planning import spans

    sub = subdir_of(relay)
    (sub / "mysql-bin.000003").unlink()
    start = Position(read_index(relay)[0], "mysql-bin.000003", 4)
    with pytest.raises(RelayDirError, match=r"mysql-bin\.000003 is missing"):
        spans(relay, start, durable_end(relay))
