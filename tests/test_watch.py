"""ChangeWaiter: woken by a writer's renames of relay.meta / server-uuid.index, not by the
temporary files those renames publish."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from binrelay.relay.layout import INDEX_FILENAME, META_FILENAME, write_atomic
from binrelay.relay.watch import ChangeWaiter


def _later(seconds: float, action) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _timed_wait(waiter: ChangeWaiter, timeout: float) -> float:
    t0 = time.monotonic()
    waiter.wait(timeout)
    return time.monotonic() - t0


@pytest.mark.parametrize("use_inotify", [True, False])
@pytest.mark.parametrize("name", [META_FILENAME, INDEX_FILENAME])
def test_a_replaced_meta_or_index_wakes_the_waiter(tmp_path: Path, use_inotify: bool,
                                                   name: str) -> None:
    waiter = ChangeWaiter(tmp_path, use_inotify=use_inotify)
    try:
        writer = _later(0.1, lambda: write_atomic(tmp_path / name, b"x\n"))
        waited = _timed_wait(waiter, 20.0)
        writer.join()
    finally:
        waiter.close()
    assert waited < 10.0  # woken by the write, long before the timeout


def test_a_writers_temporary_file_alone_does_not_wake_it(tmp_path: Path) -> None:
    """What ``write_atomic`` does before its rename (create, write, fsync, close the
    ``.relay.meta.tmp``) announces nothing: the waiter sleeps on until the rename."""
    waiter = ChangeWaiter(tmp_path)
    tmp = tmp_path / f".{META_FILENAME}.tmp"
    try:
        writer = _later(0.05, lambda: tmp.write_bytes(b"half\n"))
        waited = _timed_wait(waiter, 0.8)
        writer.join()
        assert waited >= 0.75  # slept through the temporary file's events to the timeout
        publisher = _later(0.05, lambda: tmp.replace(tmp_path / META_FILENAME))
        waited = _timed_wait(waiter, 20.0)
        publisher.join()
        assert waited < 10.0  # the rename wakes it
    finally:
        waiter.close()


def test_a_watched_subdir_wakes_it_and_a_timeout_returns(tmp_path: Path) -> None:
    subdir = tmp_path / "0-1.000001"
    subdir.mkdir()
    waiter = ChangeWaiter(tmp_path)
    try:
        waiter.watch(subdir)
        assert _timed_wait(waiter, 0.3) >= 0.25  # nothing written: the timeout
        writer = _later(0.1, lambda: write_atomic(subdir / META_FILENAME, b"x\n"))
        waited = _timed_wait(waiter, 20.0)
        writer.join()
    finally:
        waiter.close()
    assert waited < 10.0
