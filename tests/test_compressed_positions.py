"""Every row change inside a MySQL compressed transaction (TRANSACTION_PAYLOAD) has a
position of its own: the rows events inside share the payload's offset, so their rows keep
counting (issue 11: a keyless table touched twice in one payload collided)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from binrelay.relay.txnscan import transaction_ends
from binrelay.spark.compact import segment_changes
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
    subdir = tmp_path / "0-1.000001"
    subdir.mkdir()
    path = subdir / "mysql-bin.000001"
    shutil.copyfile(source, path)
    ends = transaction_ends(path, _first_event_after_header(path), path.stat().st_size)
    assert ends
    segment = Segment("0-1.000001", "mysql-bin.000001", ends[0].start, ends[-1].end, "dml")
    positions = [(pos, row) for _c, _ts, pos, row in numbered_changes(tmp_path, segment)]
    assert positions, "no row change decoded"
    assert len(set(positions)) == len(positions)
    assert positions == sorted(positions)
    changes = list(segment_changes(str(tmp_path), segment))
    assert len({c.position for c in changes}) == len(changes)


def _first_event_after_header(path: Path) -> int:
    data = path.read_bytes()
    return 4 + int.from_bytes(data[4 + 9:4 + 13], "little")
