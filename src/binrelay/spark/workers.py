"""The sync's Python workers: started before the first batch with the apply modules
imported, and their start-up heap kept out of the garbage collector's walks.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

from binrelay.spark.failures import task_errors

_heap_frozen = False


def freeze_heap() -> None:
    """Once per Python worker: move what is alive (modules, pyspark's and ours) out of the
    collector's reach.

    PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker, and
    with pyspark, PyMySQL and our decoder loaded that walk costs ~20 ms of CPU (measured),
    most of a small streaming batch's worker time.  Frozen objects are still freed by
    reference counting; only cycles among them would stay, and they are the modules.
    What tasks create later is collected as before.
    """
    global _heap_frozen
    if not _heap_frozen:
        gc.collect()
        gc.freeze()
        _heap_frozen = True



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
    import binrelay.apply.applier
    import binrelay.spark.compact  # noqa: F401

    freeze_heap()
    # Held a moment so that the tasks overlap and each gets a worker of its own.
    time.sleep(0.2)
    yield True
