"""The one position type: its order, its text form, its dict form (and the old spelling)."""

from __future__ import annotations

from pathlib import Path

import pytest

from binrelay.errors import RelayDirError
from binrelay.position import Position, SubdirName, binlog_seq, binlog_sort_key, is_binlog_name
from binrelay.relay import consumers

SUB1 = SubdirName.parse("0-1.000001")
SUB2 = SubdirName.parse("0-2.000002")


def test_order_is_subdir_then_file_number_then_offset() -> None:
    ordered = [Position(SUB1, "mysql-bin.999999", 4), Position(SUB1, "mysql-bin.999999", 500),
               Position(SUB1, "mysql-bin.1000000", 4), Position(SUB2, "mysql-bin.000001", 4)]
    assert sorted(reversed(ordered)) == ordered
    assert ordered[0] <= ordered[0] < ordered[1]
    assert binlog_sort_key("mysql-bin.1000000") == ("mysql-bin", 1000000)
    assert binlog_seq("mysql-bin.000042") == 42
    assert is_binlog_name("mysql-bin.000001") and not is_binlog_name("relay.meta")


def test_text_form_is_dms_with_the_subdir() -> None:
    assert str(Position(SUB2, "mysql-bin.000003", 1234)) == \
        "mysql-bin|000002.000003:1234 (0-2.000002)"


@pytest.mark.parametrize("position", [Position(SUB1, "mysql-bin.000001", 4),
                                      Position(SUB2, "db-bin.1000000", 2**32 + 7)])
def test_dict_form_round_trips(position: Position) -> None:
    data = position.to_dict()
    assert data == {"subdir": str(position.subdir), "file": position.binlog_name,
                    "pos": position.binlog_pos}
    assert Position.from_dict(data) == position


def test_old_consumer_spelling_is_read() -> None:
    old = {"subdir": "0-1.000001", "binlog-name": "mysql-bin.000002", "binlog-pos": 120}
    assert Position.from_dict(old) == Position(SUB1, "mysql-bin.000002", 120)
    assert Position.from_dict({"subdir": "0-1.000001", "file": "mysql-bin.000002",
                               "pos": "120"}).binlog_pos == 120


@pytest.mark.parametrize(("data", "why"), [
    ([1, 2], "not a mapping"),
    ({"subdir": "0-1.000001", "file": "mysql-bin.000001"}, "no pos"),
    ({"file": "mysql-bin.000001", "pos": 4}, "no subdir"),
    ({"subdir": "0-1.000001", "file": "mysql-bin.000001", "pos": -1}, "integer >= 0"),
    ({"subdir": "0-1.000001", "file": "mysql-bin.000001", "pos": True}, "integer >= 0"),
    ({"subdir": "0-1.000001", "file": "mysql-bin.000001", "pos": 4.5}, "integer >= 0"),
    ({"subdir": "0-1", "file": "mysql-bin.000001", "pos": 4}, "not a relay subdir name"),
    ({"subdir": "0-1.000001", "file": "mysql-bin", "pos": 4}, "not a binlog file name"),
    ({"subdir": "0-1.000001", "file": "mysql-bin.000001", "binlog-name": "mysql-bin.000002",
      "pos": 4}, "both spellings"),
])
def test_a_dict_that_is_not_a_position_says_what_one_looks_like(data: object, why: str
                                                                 ) -> None:
    with pytest.raises(RelayDirError, match=why) as info:
        Position.from_dict(data)
    assert '"file": "mysql-bin.000001"' in (info.value.hint or "")


def test_consumer_files_hold_the_dict_form(tmp_path: Path) -> None:
    where = Position(SUB1, "mysql-bin.000007", 991)
    consumers.register(tmp_path, "sync", where)
    text = (tmp_path / consumers.CONSUMERS_DIRNAME / "sync.toml").read_text()
    assert 'file = "mysql-bin.000007"' in text and "pos = 991" in text
    assert [c.position for c in consumers.list_consumers(tmp_path)] == [where]
