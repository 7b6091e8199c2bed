"""Catch-up progress bars: drawn on a terminal only, and only for a real catch-up."""

from __future__ import annotations

import io
from dataclasses import dataclass

from binrelay.cli.bars import RELAY_BAR_MIN_BYTES, RelayCatchUpBar, SyncCatchUpBar, wanted
from binrelay.relay.livestatus import RelayLiveStatus


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def live(behind: int | None) -> RelayLiveStatus:
    return RelayLiveStatus(pid=1, state="relaying", started_at=0.0, updated_at=0.0,
                           bytes_behind=behind)


def test_only_on_a_terminal() -> None:
    assert wanted(Tty()) and not wanted(io.StringIO())


def test_relay_bar_from_far_behind_to_caught_up() -> None:
    out = Tty()
    done = {"n": 0}
    bar = RelayCatchUpBar(lambda: done["n"], stream=out)
    bar(live(None))  # lag not known yet: nothing
    assert out.getvalue() == ""
    bar(live(RELAY_BAR_MIN_BYTES * 2))
    done["n"] = RELAY_BAR_MIN_BYTES * 2
    bar(live(0))
    text = out.getvalue()
    assert "relay catch-up" in text and "100%" in text
    size = len(text)
    bar(live(RELAY_BAR_MIN_BYTES * 3))  # after the catch-up: no new bar
    assert len(out.getvalue()) == size


def test_relay_bar_not_for_a_relay_close_behind() -> None:
    out = Tty()
    bar = RelayCatchUpBar(lambda: 0, stream=out)
    bar(live(1000))
    bar(live(RELAY_BAR_MIN_BYTES * 2))
    bar.close()
    assert out.getvalue() == ""


@dataclass(frozen=True)
class Report:
    relay_bytes: int


def test_sync_bar_counts_applied_bytes() -> None:
    out = Tty()
    lags = iter([3000, 1000, 0])
    bar = SyncCatchUpBar(lambda _r: next(lags), stream=out)
    for _ in range(3):
        bar(Report(1000))
    bar.close()
    assert "sync catch-up" in out.getvalue() and "100%" in out.getvalue()
