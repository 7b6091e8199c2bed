"""The calling thread's CPU time and its time runnable but not running: what tells a batch
slowed by a busy host (its thread waited for a CPU) from one slowed by its own work or by
the downstream (its thread ran, or slept on a socket)."""

from __future__ import annotations

import time
from typing import NamedTuple

#: Linux's per-thread scheduler statistics: "<on-CPU ns> <run-queue wait ns> <slices>".
_SCHEDSTAT = "/proc/thread-self/schedstat"


class ThreadTimes(NamedTuple):
    cpu: float  #: seconds on a CPU
    waited: float | None  #: seconds runnable, waiting for a CPU (None: the kernel does not say)

    def since(self, earlier: ThreadTimes) -> ThreadTimes:
        waited = None if self.waited is None or earlier.waited is None \
            else self.waited - earlier.waited
        return ThreadTimes(self.cpu - earlier.cpu, waited)


def thread_times() -> ThreadTimes:
    """This thread's times so far (one small read of /proc where it has them)."""
    try:
        with open(_SCHEDSTAT, "rb") as f:
            on_cpu, waited, _slices = f.read().split()
    except (OSError, ValueError):
        return ThreadTimes(time.thread_time(), None)
    return ThreadTimes(int(on_cpu) / 1e9, int(waited) / 1e9)
