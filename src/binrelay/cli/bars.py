"""Progress bars (tqdm, on stderr) for long catch-ups; silent unless stderr is a terminal,
so logs, pipes and tests never see them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

from binrelay.relay.livestatus import RelayLiveStatus

#: A relay this close to the upstream at start is not "catching up": no bar.
RELAY_BAR_MIN_BYTES = 4 << 20


def wanted(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


def _bar(desc: str, stream: TextIO) -> tqdm:
    return tqdm(total=0, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                file=stream, dynamic_ncols=True, leave=True)


class RelayCatchUpBar:
    """Fed every relay.status the relay writes: a bar from the first time the relay is far
    behind until it has caught up; nothing after that."""

    def __init__(self, relayed_bytes: Callable[[], int], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.relayed_bytes = relayed_bytes
        self._bar: tqdm | None = None
        self._done = False

    def __call__(self, status: RelayLiveStatus) -> None:
        behind = status.bytes_behind
        if self._done or behind is None:
            return
        if self._bar is None:
            if behind < RELAY_BAR_MIN_BYTES:
                self._done = True
                return
            self._bar = _bar("relay catch-up", self.stream)
        done = self.relayed_bytes()
        self._bar.total = done + behind
        self._bar.n = done
        self._bar.refresh()
        if behind == 0:
            self.close()

    def close(self) -> None:
        self._done = True
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class SyncCatchUpBar:
    """A ``SyncPipeline`` listener: relay bytes applied of those there were to apply."""

    def __init__(self, lag_bytes: Callable[[Any], int], desc: str = "sync catch-up",
                 stream: TextIO | None = None) -> None:
        self.lag_bytes = lag_bytes
        self._bar = _bar(desc, stream or sys.stderr)

    def __call__(self, report: Any) -> None:
        self._bar.n += report.relay_bytes
        self._bar.total = self._bar.n + self.lag_bytes(report)
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()
