"""The replay session's temporary tables end where a replica's would
(``serial.SessionEnds``): at the upstream's first binlog after a restart (its header has a
creation time), and at another upstream's relay (a switch).  Relay files built here: only
their headers are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from binrelay.binlog import constants as c
from binrelay.binlog.build import fde_event
from binrelay.spark.planning import Segment
from binrelay.spark.serial import SessionEnds


def relay_file(relay: Path, subdir: str, name: str, created: int) -> Segment:
    (relay / subdir).mkdir(parents=True, exist_ok=True)
    (relay / subdir / name).write_bytes(
        c.BINLOG_MAGIC + fde_event(flavor="mariadb", checksum=True, create_timestamp=created))
    return Segment(subdir, name, 4, 200, "serial")


@pytest.mark.parametrize(("files", "ends"), [
    # Rotated files (no creation time): the sessions live on.
    ([("u.000001", "b.000001", 0), ("u.000001", "b.000002", 0)], [False, False]),
    # The upstream restarted between the two: its first binlog after the start.
    ([("u.000001", "b.000001", 0), ("u.000001", "b.000002", 1_700_000_100)], [False, True]),
    # A run's first file may be a restart file long past: nothing before it is in the
    # replay session, which its end therefore leaves alone.
    ([("u.000001", "b.000001", 1_700_000_000), ("u.000001", "b.000002", 0)], [True, False]),
    # Another upstream (a new relay subdir), its file a rotated one.
    ([("u.000001", "b.000001", 0), ("v.000002", "b.000007", 0)], [False, True]),
])
def test_where_the_upstream_sessions_end(tmp_path: Path, files, ends) -> None:
    follower = SessionEnds(tmp_path)
    got = []
    for subdir, name, created in files:
        segment = relay_file(tmp_path, subdir, name, created)
        reached = follower.reached([segment, segment])
        got.append(reached == tmp_path / subdir / name)
        assert follower.reached([segment]) is None  # each file once
    assert got == ends


def test_a_purged_file_is_left_to_the_batchs_own_read(tmp_path: Path) -> None:
    assert SessionEnds(tmp_path).reached([Segment("u.000001", "b.000001", 4, 9, "dml")]) is None
