"""The sync's Python workers: started before the first batch with the task modules
imported (unpickling the warm-up function imports this module, hence ``tasks`` and all it
imports) and their start-up heap frozen out of the garbage collector's walks; then kept
(:class:`WarmKeeper`) while the driver applies batches itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from binrelay.spark.failures import task_errors
from binrelay.spark.tasks import freeze_heap

log = logging.getLogger(__name__)

#: PySpark closes every idle Python worker of an executor once none has started or
#: finished a task for a minute (``PythonWorkerFactory``'s idle timeout, not a setting).
#: A streaming sync whose batches stay on the driver runs no task for minutes; the first
#: batch that needs Spark then forks and imports its workers again (0.5 s on an idle
#: machine, measured; seconds under load, with the collector walking their whole heap
#: after every task until they are frozen again) just when the sync is behind.  A task of
#: nothing within the minute keeps them all.
KEEP_WARM_AFTER = 30.0
KEEP_WARM_CHECK = 5.0


def warm_up(sc: Any) -> None:
    """Start a Python worker per executor core before the first batch, modules imported.

    A worker starts only when a task first needs it, and its start (fork, imports) costs
    seconds on a busy machine: without this the first batch big enough for several tasks
    pays it, in the middle of a catch-up or while lag builds up.
    """
    n = max(1, int(sc.defaultParallelism))
    sc.parallelize(range(n), n).mapPartitions(_import_apply_modules).collect()


@task_errors
def _import_apply_modules(_items: Iterator[int]) -> Iterator[bool]:
    freeze_heap()
    # Held a moment so that the tasks overlap and each gets a worker of its own.
    time.sleep(0.2)
    yield True


class WarmKeeper:
    """A thread that runs a task of nothing on every executor core once Spark has run no
    job for ``after`` seconds (looked at every ``check`` seconds), so that the Python
    workers :func:`warm_up` started outlive PySpark's idle timeout.  Any job counts,
    whoever runs it: the keeper reads Spark's own job ids (those of no job group), and a
    caller whose jobs have a group of their own says when it ran one (:meth:`used`)."""

    def __init__(self, sc: Any, *, after: float = KEEP_WARM_AFTER,
                 check: float = KEEP_WARM_CHECK) -> None:
        self._sc = sc
        self._after = after
        self._check = check
        self._stop = threading.Event()
        self._used = time.monotonic()
        self.touches = 0
        self._thread = threading.Thread(target=self._loop, name="spark-keep-warm",
                                        daemon=True)
        self._thread.start()

    def used(self) -> None:
        """A job of a job group just ran (the keeper does not see those)."""
        self._used = time.monotonic()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        tracker = self._sc.statusTracker()
        newest: int | None = None
        since = time.monotonic()
        while not self._stop.wait(self._check):
            try:
                seen = max(tracker.getJobIdsForGroup(), default=None)
                if seen != newest or tracker.getActiveJobsIds():
                    newest, since = seen, time.monotonic()
                elif self._used > since:
                    since = self._used
                elif time.monotonic() - since >= self._after:
                    n = max(1, int(self._sc.defaultParallelism))
                    self._sc.parallelize(range(n), n).mapPartitions(_nothing).collect()
                    self.touches += 1
            except Exception:  # Spark stopping or failing: the next batch reports it
                if self._stop.is_set():
                    return
                log.debug("keeping Spark's Python workers failed", exc_info=True)


def _nothing(_items: Iterator[int]) -> Iterator[bool]:
    yield True
