"""Bytes behind the upstream, counted from SHOW BINARY LOGS (pure)."""

from __future__ import annotations

from binrelay.relay.lag import bytes_behind

FILES = [("mysql-bin.000001", 1000), ("mysql-bin.000002", 500), ("mysql-bin.000003", 300)]


def test_same_file() -> None:
    assert bytes_behind(FILES, ("mysql-bin.000003", 300), ("mysql-bin.000003", 120)) == 180
    assert bytes_behind(FILES, ("mysql-bin.000003", 300), ("mysql-bin.000003", 300)) == 0


def test_across_files() -> None:
    # the rest of 000001, all of 000002, 000003 up to 300
    assert bytes_behind(FILES, ("mysql-bin.000003", 300), ("mysql-bin.000001", 900)) == \
        100 + 500 + 300
    # a rotation relayed: at 4 of the next file, the upstream there too
    assert bytes_behind(FILES, ("mysql-bin.000002", 4), ("mysql-bin.000002", 4)) == 0


def test_not_comparable() -> None:
    assert bytes_behind(FILES, ("mysql-bin.000003", 300), ("mysql-bin.000000", 4)) is None
    assert bytes_behind(FILES, ("mysql-bin.000003", 300), ("bogus", 4)) is None


def test_relay_ahead_counts_as_caught_up() -> None:
    assert bytes_behind(FILES, ("mysql-bin.000002", 500), ("mysql-bin.000003", 4)) == 0
