"""The sync's Python workers stay up while its batches stay on the driver.

PySpark closes every idle Python worker of an executor once no task has started or ended
there for a minute (measured on this Spark: after 70 s idle a job ran in new processes,
0.5 s instead of 0.08 s on an idle machine); :class:`WarmKeeper` runs a task of nothing
before that.
"""

from __future__ import annotations

import os
import time

from binrelay.spark.workers import KEEP_WARM_AFTER, KEEP_WARM_CHECK, WarmKeeper


def _worker_pids(sc) -> set[int]:
    n = max(1, int(sc.defaultParallelism))
    # A lambda: pickled by value (the workers cannot import this test module).
    return set(sc.parallelize(range(n), n).mapPartitions(lambda _items: [os.getpid()])
               .collect())


def _wait_for(predicate, timeout: float) -> bool:
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_the_keeper_runs_a_task_once_spark_is_idle(spark):
    sc = spark.sparkContext
    before = max(sc.statusTracker().getJobIdsForGroup(), default=-1)
    keeper = WarmKeeper(sc, after=0.5, check=0.1)
    try:
        assert _wait_for(lambda: keeper.touches >= 2, 30), "no task ran while Spark idled"
    finally:
        keeper.close()
    assert max(sc.statusTracker().getJobIdsForGroup()) >= before + 2
    touched = keeper.touches
    time.sleep(0.8)
    assert keeper.touches == touched, "the keeper ran on after close()"


def test_the_keeper_leaves_a_busy_spark_alone(spark):
    sc = spark.sparkContext
    keeper = WarmKeeper(sc, after=2.0, check=0.1)
    try:
        ends = time.monotonic() + 4.0
        while time.monotonic() < ends:
            _worker_pids(sc)
            time.sleep(0.2)
    finally:
        keeper.close()
    assert keeper.touches == 0


def test_the_keeper_is_told_of_a_job_groups_jobs(spark):
    """Jobs of a job group (the sync's apply jobs) are not among the ids the keeper reads:
    their caller says when one ran."""
    sc = spark.sparkContext
    keeper = WarmKeeper(sc, after=1.0, check=0.4)
    try:
        ends = time.monotonic() + 5.0
        while time.monotonic() < ends:
            sc.setJobGroup("binrelay-test", "grouped")
            try:
                _worker_pids(sc)
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
            keeper.used()
            time.sleep(0.5)
    finally:
        keeper.close()
    assert keeper.touches == 0


def test_workers_outlive_pysparks_idle_timeout(spark):
    """The minute PySpark waits before it closes idle workers is not a setting: this test
    idles past it (75 s) with the keeper's own timings."""
    assert KEEP_WARM_AFTER + KEEP_WARM_CHECK < 60
    sc = spark.sparkContext
    keeper = WarmKeeper(sc)
    try:
        first = _worker_pids(sc)
        time.sleep(75)
        assert keeper.touches >= 1
        assert _worker_pids(sc) == first
    finally:
        keeper.close()
