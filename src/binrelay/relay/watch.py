"""Waiting for the relay to write more, from any process, without busy-waiting.

The writer announces progress by replacing ``relay.meta`` (a rename into the subdir) and new
subdirs by replacing ``server-uuid.index`` (a rename into the relay dir).  On Linux the waiter
sleeps on inotify for those renames (a writer's temporary files wake nobody); elsewhere it
polls modification times.  Either way ``wait`` may return early (spurious wake-ups are
harmless: callers re-read the meta).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from binrelay.relay.layout import INDEX_FILENAME, META_FILENAME

try:
    from inotify_simple import INotify
    from inotify_simple import flags as _flags
except ImportError:  # pragma: no cover - non-Linux
    INotify = None  # type: ignore[assignment,misc]

_POLL = 0.02


class ChangeWaiter:
    """Not thread-safe; one per reader.  Close it when done."""

    def __init__(self, relay_dir: Path, *, use_inotify: bool = True) -> None:
        self.relay_dir = relay_dir
        self._inotify = None
        self._watched: dict[Path, int] = {}
        if INotify is not None and use_inotify:
            with contextlib.suppress(OSError):
                self._inotify = INotify()
        self._stamps: dict[Path, int] = {}
        self.watch(relay_dir)

    def watch(self, directory: Path) -> bool:
        """Wake up on relay.meta / server-uuid.index being replaced in ``directory``.  True
        when the watch starts now: a change made before it wakes nobody, so the caller reads
        the state again before it waits (the race a reader that read, then watched, lost)."""
        if directory in self._watched or directory in self._stamps:
            return False
        if self._inotify is not None:
            mask = _flags.MOVED_TO | _flags.CLOSE_WRITE | _flags.CREATE | _flags.DELETE_SELF
            try:
                self._watched[directory] = self._inotify.add_watch(str(directory), mask)
                return True
            except OSError:
                pass
        self._stamps[directory] = self._stamp(directory)
        return True

    def unwatch(self, directory: Path) -> None:
        wd = self._watched.pop(directory, None)
        if wd is not None and self._inotify is not None:
            with contextlib.suppress(OSError):
                self._inotify.rm_watch(wd)
        self._stamps.pop(directory, None)

    @staticmethod
    def _stamp(directory: Path) -> int:
        total = 0
        for name in (META_FILENAME, INDEX_FILENAME):
            with contextlib.suppress(OSError):
                total += os.stat(directory / name).st_mtime_ns
        return total

    def wait(self, timeout: float) -> None:
        """Block until something may have changed, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        if self._inotify is not None and not self._stamps:
            while True:
                left = max(0, int((deadline - time.monotonic()) * 1000))
                events = self._inotify.read(timeout=left)
                if not events or not left or _announces(events):
                    return  # the timeout, or news
        while time.monotonic() < deadline:
            if self._inotify is not None and _announces(self._inotify.read(timeout=0)):
                return
            for directory, old in list(self._stamps.items()):
                new = self._stamp(directory)
                if new != old:
                    self._stamps[directory] = new
                    return
            time.sleep(_POLL)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


def _announces(events: list[Any]) -> bool:
    """Whether inotify ``events`` may announce progress: any but those of a writer's
    temporary file (``layout.write_atomic``'s ``.relay.meta.tmp``: created, written and
    closed before the rename that announces it; waking for those made a streaming sync read
    the relay dir once more per relay.meta write, to find nothing new).  A nameless event (the
    watched directory itself; an overflowed queue) announces."""
    return any(not event.name.startswith(".") for event in events)
