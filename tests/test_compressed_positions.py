"""Every row change inside a MySQL compressed transaction (TRANSACTION_PAYLOAD) has a
position of its own: the rows events inside share the payload's offset, so their rows keep
counting (issue 11: a keyless table touched twice in one payload collided)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from binrelay.apply.changes import DELETE
from binrelay.relay.txnscan import transaction_ends
from binrelay.spark.compact import KEYED, RAW, compact_segment, segment_changes
from binrelay.spark.decode import numbered_changes
from binrelay.spark.planning import Segment
from captures import MYSQL_CAPTURES

PAYLOADS = ["mysql-binlog-connector-rust/mysql-bin.000057",
            "mysql-binlog-connector-java/mysql-bin.compressed",
            "rust_mysql_common/transaction_compression.000001"]


@pytest.mark.parametrize("name", PAYLOADS)
def test_changes_in_a_payload_have_unique_positions(name: str, tmp_path: Path) -> None:
    source = MYSQL_CAPTURES / name
    assert source.is_file(), f"{source} is missing (../shared/mysql-captures)"
    _path, ends, segment = _relayed(source, tmp_path)
    assert ends
    positions = [(pos, row) for _c, _ts, pos, row in numbered_changes(tmp_path, segment)]
    assert positions, "no row change decoded"
    assert len(set(positions)) == len(positions)
    assert positions == sorted(positions)
    # These captures (MySQL's default binlog_row_metadata = MINIMAL) name no columns, which
    # only a write by name needs.
    changes = list(segment_changes(str(tmp_path), segment, by_name=False))
    assert len({c.position for c in changes}) == len(changes)


@pytest.mark.parametrize("name", PAYLOADS)
def test_compaction_keeps_the_last_change_of_every_key(name: str, tmp_path: Path) -> None:
    """The read task's compaction (rows events walked without an object per change) keeps,
    per key, the image and position of the last of the partition's changes on it, as the
    change stream numbers them; a table it cannot compact keeps every change."""
    source = MYSQL_CAPTURES / name
    assert source.is_file(), f"{source} is missing (../shared/mysql-captures)"
    # These captures (MySQL's default binlog_row_metadata = MINIMAL) name no columns, which
    # only a write by name needs.
    assert_compaction_matches_the_changes(source, tmp_path, by_name=False)


def test_compaction_of_a_mariadb_binlog(mariadb, tmp_path: Path) -> None:
    """The same on MariaDB row events: integer, composite and text keys, key changes, rows
    touched many times in multi-row events, a keyless table."""
    for sql in [
        "CREATE DATABASE c",
        "CREATE TABLE c.i (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE c.m (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))",
        "CREATE TABLE c.t (k VARCHAR(10) COLLATE utf8mb4_bin PRIMARY KEY, v INT)",
        "CREATE TABLE c.n (x INT, y INT)",
        "INSERT INTO c.i SELECT seq, CONCAT('r', seq) FROM c.seq_1_to_3000",
        "INSERT INTO c.m SELECT seq % 7, CHAR(65 + seq % 5), seq FROM c.seq_1_to_35",
        "INSERT INTO c.t VALUES ('a', 1), ('b', 2), ('é', 3)",
        "INSERT INTO c.n VALUES (1, 1), (1, 1), (2, 2)",
        "UPDATE c.i SET v = 'u' WHERE id % 3 = 0",
        "UPDATE c.i SET id = id + 5000 WHERE id % 100 = 7",
        "DELETE FROM c.i WHERE id % 5 = 0",
        "UPDATE c.m SET b = 'Z', v = v + 1 WHERE a = 3 AND b = 'A'",
        "UPDATE c.t SET k = 'c' WHERE k = 'a'",
        "DELETE FROM c.t WHERE k = 'b'",
        "UPDATE c.n SET y = 3 WHERE x = 1 LIMIT 1",
        "INSERT INTO c.i VALUES (5, 'again')",
    ]:
        mariadb.execute(sql)
    name, _ = mariadb.binlog_files()[-1]
    assert_compaction_matches_the_changes(mariadb.binlog_path(name), tmp_path)


def _relayed(source: Path, tmp_path: Path) -> tuple[Path, list[Any], Segment]:
    """``source`` as the one file of a relay subdir: its path, its transactions' ends and
    the partition of all of them."""
    subdir = tmp_path / "0-1.000001"
    subdir.mkdir()
    path = subdir / "mysql-bin.000001"
    shutil.copyfile(source, path)
    ends = transaction_ends(path, _first_event_after_header(path), path.stat().st_size)
    segment = Segment("0-1.000001", "mysql-bin.000001", ends[0].start, ends[-1].end, "dml")
    return path, ends, segment


def assert_compaction_matches_the_changes(source: Path, tmp_path: Path, *,
                                          by_name: bool = True) -> None:
    _path, _ends, segment = _relayed(source, tmp_path)
    want: dict[tuple[object, ...], tuple[object, ...]] = {}
    raw_want = []
    for ch in segment_changes(str(tmp_path), segment, by_name=by_name):
        if not ch.key:
            raw_want.append((ch.table, ch.position))
            continue
        image = ch.before if ch.op == DELETE else ch.after
        k = tuple(image[i] for i in ch.key)
        want[(ch.table, k)] = (ch.position[:4], None if ch.op == DELETE else ch.after)
    keyed, raw = {}, []
    for _task, record in compact_segment(str(tmp_path), segment, 3, by_name=by_name):
        if record[0] == KEYED:
            _kind, shape, k, position, row = record
            assert (shape[0], k) not in keyed
            keyed[(shape[0], k)] = (position, row)
        elif record[0] == RAW:
            raw.append((record[1].table, record[1].position))
    assert keyed or raw, "nothing compacted"
    assert len(keyed) <= len(want)
    assert keyed == want
    assert sorted(raw) == sorted(raw_want)


def _first_event_after_header(path: Path) -> int:
    data = path.read_bytes()
    return 4 + int.from_bytes(data[4 + 9:4 + 13], "little")


def test_a_partition_past_the_end_of_its_file(tmp_path: Path) -> None:
    """A read task maps its relay file: a partition whose end is not an event's end, or a
    file cut since the partition was planned (even at a transaction's end), is one clear
    error naming the file and offsets, never the changes that are there and no more."""
    from binrelay.errors import RelayDirError
    from binrelay.spark.decode import iter_segment_runs

    source = MYSQL_CAPTURES / PAYLOADS[0]
    assert source.is_file(), f"{source} is missing (../shared/mysql-captures)"
    path, ends, whole = _relayed(source, tmp_path)
    assert len(ends) >= 2
    assert [run[1] for run in iter_segment_runs(tmp_path, whole)]
    askew = Segment(whole.subdir, whole.file, whole.start, ends[-1].end - 3, "dml")
    with pytest.raises(RelayDirError, match="falls inside an event"):
        list(iter_segment_runs(tmp_path, askew))
    for cut in (ends[0].end, ends[0].end - 3):  # a transaction's end, inside an event
        with open(path, "r+b") as f:
            f.truncate(cut)
        with pytest.raises(RelayDirError, match=f"ends at {cut}, before the partition's end"):
            list(iter_segment_runs(tmp_path, whole))
