"""threadtimes: the calling thread's CPU and run-queue wait, from the kernel."""

from __future__ import annotations

import threading
import time

from binrelay.threadtimes import ThreadTimes, thread_times


def test_a_busy_thread_counts_cpu_and_a_sleeping_one_does_not() -> None:
    before = thread_times()
    deadline = time.thread_time() + 0.2
    while time.thread_time() < deadline:
        pass
    busy = thread_times().since(before)
    assert busy.cpu >= 0.15
    # Linux says how long the thread waited for a CPU (CI runs Linux: never None here).
    assert busy.waited is not None and busy.waited >= 0.0
    before, t0 = thread_times(), time.monotonic()
    time.sleep(0.3)
    asleep, wall = thread_times().since(before), time.monotonic() - t0
    assert asleep.cpu < 0.1
    # A sleeper is not runnable: what it waited for a CPU came after it woke (on a busy
    # machine, some), never during the 0.3 s it slept.
    assert asleep.waited is not None and asleep.waited <= wall - 0.28


def test_the_times_are_the_calling_threads() -> None:
    mine = thread_times()
    seen: list[ThreadTimes] = []
    worker = threading.Thread(target=lambda: seen.append(thread_times()))
    worker.start()
    worker.join()
    # A thread just started has used next to nothing; this one has run the test so far.
    assert seen[0].cpu < mine.cpu


def test_without_the_kernels_wait_figure_the_difference_has_none() -> None:
    assert ThreadTimes(2.0, None).since(ThreadTimes(1.5, 0.1)) == ThreadTimes(0.5, None)
    assert ThreadTimes(2.0, 0.4).since(ThreadTimes(1.5, 0.1)) == ThreadTimes(0.5, 0.4 - 0.1)
