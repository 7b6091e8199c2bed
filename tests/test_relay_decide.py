"""relay/decide.py: every kind of event from the upstream gets its action and named reason."""

from __future__ import annotations

import random

import pytest

from binrelay.binlog import constants as c
from binrelay.errors import BinlogFormatError
from binrelay.relay import decide as d
from binrelay.relay.decide import Action, decide


def _decide(event_type: int = c.XID_EVENT, *, flags: int = 0, size: int = 31,
            log_pos: int = 1031, file_end: int = 1000, file_open: bool = True,
            fake_rotate: bool = False) -> d.Decision:
    return decide(event_type, flags, size, log_pos, file_end, file_open, fake_rotate,
                  "mysql-bin.000001")


def test_an_event_where_the_file_ends_is_written() -> None:
    got = _decide()
    assert (got.action, got.reason, got.ends_file) == (Action.WRITE, d.IN_PLACE, False)
    assert got is d.WRITE  # the writer's fast path tests identity


def test_log_pos_zero_means_right_here() -> None:  # MariaDB 11.4+
    assert _decide(log_pos=0).action is Action.WRITE


def test_a_real_rotate_is_written_and_ends_the_file() -> None:
    got = _decide(c.ROTATE_EVENT)
    assert (got.action, got.ends_file) == (Action.WRITE, True)


def test_a_fake_rotate_switches_files() -> None:
    got = _decide(c.ROTATE_EVENT, log_pos=0, flags=c.LOG_EVENT_ARTIFICIAL_F, fake_rotate=True)
    assert (got.action, got.reason) == (Action.SWITCH_FILE, d.FAKE_ROTATE)
    assert _decide(c.ROTATE_EVENT, fake_rotate=True, file_open=False).action is \
        Action.SWITCH_FILE


@pytest.mark.parametrize("file_open,action,reason", [
    (False, Action.OPEN_FILE, d.FIRST_FDE), (True, Action.TAKE_FORMAT, d.FDE_RESENT)])
def test_a_format_description_opens_a_file_or_only_sets_the_format(
        file_open: bool, action: Action, reason: str) -> None:
    got = _decide(c.FORMAT_DESCRIPTION_EVENT, file_open=file_open)
    assert (got.action, got.reason) == (action, reason)


@pytest.mark.parametrize("etype", [c.HEARTBEAT_LOG_EVENT, c.HEARTBEAT_LOG_EVENT_V2])
def test_heartbeats_are_noted_not_written(etype: int) -> None:
    got = _decide(etype, log_pos=5000, file_open=False)
    assert (got.action, got.reason) == (Action.NOTE_UPSTREAM, d.HEARTBEAT)


def test_artificial_events_are_dropped() -> None:
    got = _decide(c.GTID_LIST_EVENT, flags=c.LOG_EVENT_ARTIFICIAL_F, log_pos=0)
    assert (got.action, got.reason) == (Action.DROP, d.ARTIFICIAL)


def test_a_hole_is_filled_first() -> None:
    got = _decide(log_pos=1231)  # starts at 1200, the file ends at 1000
    assert (got.action, got.reason, got.gap) == (Action.FILL_THEN_WRITE, d.HOLE, 200)


def test_an_event_before_the_end_is_checked_as_a_repeat() -> None:
    got = _decide(log_pos=931)  # starts at 900
    assert (got.action, got.reason, got.gap) == (Action.CHECK_REPEAT, d.REPEAT, 900)


def test_positions_past_4_gib_wrap_in_the_header() -> None:
    """A file past 4 GiB (one huge transaction): the header's log_pos is the end position
    modulo 2**32, and the event is still in place, a hole or a repeat by that arithmetic."""
    end = (1 << 32) + 1000
    assert _decide(log_pos=1031, file_end=end).action is Action.WRITE
    hole = _decide(log_pos=1231, file_end=end)
    assert (hole.action, hole.gap) == (Action.FILL_THEN_WRITE, 200)
    repeat = _decide(log_pos=931, file_end=end)
    assert (repeat.action, repeat.gap) == (Action.CHECK_REPEAT, end - 100)


def test_an_ordinary_event_before_any_format_description_is_an_error() -> None:
    with pytest.raises(BinlogFormatError, match="before any FORMAT_DESCRIPTION_EVENT"):
        _decide(file_open=False)


def test_a_real_rotate_before_any_format_description_is_an_error() -> None:
    """Before decide.py the writer appended it to no file (its bytes would have gone in
    front of the next file's magic); now it is refused like any event before the FDE."""
    with pytest.raises(BinlogFormatError, match="ROTATE_EVENT event before any"):
        _decide(c.ROTATE_EVENT, file_open=False)


def test_the_writers_inline_case_is_decides_write() -> None:
    """plainly_in_place (the writer's inline test) implies decide() says WRITE, over every
    event type, flag, position and state around the file's end."""
    rng = random.Random(5)
    seen = 0
    for _ in range(20_000):
        etype = rng.randrange(256)
        flags = rng.choice([0, c.LOG_EVENT_ARTIFICIAL_F, c.LOG_EVENT_SUPPRESS_USE_F])
        size = rng.randrange(19, 200)
        file_end = rng.choice([4, 1000, (1 << 32) - 10, (1 << 32) + 1000])
        log_pos = rng.choice([0, file_end + size, file_end + size + 1, file_end + size - 1,
                              (file_end + size) % (1 << 32)])
        file_open = rng.random() < 0.9
        if d.plainly_in_place(etype, flags, size, log_pos, file_end, file_open):
            seen += 1
            assert decide(etype, flags, size, log_pos, file_end, file_open) is d.WRITE
    assert seen > 1000
