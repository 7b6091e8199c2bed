"""The sync's Python workers: started before the first batch with the task modules
imported (unpickling the warm-up function imports this module, hence ``tasks`` and all it
imports) and their start-up heap frozen out of the garbage collector's walks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from binrelay.spark.failures import task_errors
from binrelay.spark.tasks import freeze_heap


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
