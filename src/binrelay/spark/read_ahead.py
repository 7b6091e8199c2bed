"""A batch's read stage, and starting it before the batch's turn.

The read stage (decode and compact the batch's partitions, write the shuffle: ``tasks.
compacted``) needs no downstream, and a barrier batch before it (a run of DDL, replayed on
the driver) leaves Spark's slots idle: a catch-up's ``CREATE INDEX`` runs ~2.5 s with the
downstream using under a core.  So while the driver replays such a batch the next batch's
read stage may already run, as Spark's own map stage of the shuffle the apply job then
reads: that job finds the stage done (or running, and waits for it), not a copy.

What a read stage writes depends only on the partitions, the task count and the catalog's
rules (``compact_segment``), all in :class:`ReadAhead`; a DDL of the barrier batch may
change the rules, so a read stage started ahead is used only when they still read alike
(``TableRules.reads_alike``: equal, or only the columns of tables the DDL made added), and
otherwise cancelled and run again.

After a batch of rows that Spark applies, the next batch's read stage is started too, once
that batch's apply job is submitted: Spark runs jobs first come, first served, so the read
tasks take the slots its apply tasks leave (a lane done early, the batch's commit and
checkpoint), never ahead of them.  Warm, on a 2-core host: 17.46 s against 18.55 s
(BENCHMARKS.md, session 30).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from binrelay.apply.catalog import TableRules
from binrelay.spark.planning import Segment
from binrelay.spark.tasks import compacted, identity, lanes

log = logging.getLogger(__name__)


def read_stage(sc: Any, relay_dir: str, segments: list[Segment], tasks: int,
               rules: TableRules) -> tuple[Any, Any]:
    """The batch's partitions as an RDD, and its records compacted and keyed by apply task
    (``tasks.packed``), partitioned over the apply stage's Spark tasks (``tasks.lanes``)."""
    source = sc.parallelize(segments, len(segments))
    width = lanes(tasks, sc.defaultParallelism)
    shuffled = (source.mapPartitions(lambda segs: compacted(relay_dir, segs, tasks, rules))
                .partitionBy(width, identity))
    return source, shuffled


@dataclass(frozen=True)
class ReadAhead:
    """A read stage started before its batch's turn: what it was made of, its RDDs, and the
    JVM's future of its map stage."""

    segments: tuple[Segment, ...]
    tasks: int
    rules: TableRules
    source: Any
    shuffled: Any
    job: Any

    def serves(self, segments: list[Segment], tasks: int, rules: TableRules) -> bool:
        return self.segments == tuple(segments) and self.tasks == tasks and \
            self.rules.reads_alike(rules)

    def cancel(self) -> None:
        try:
            if not self.job.isCompleted():
                self.job.cancel()
        except Exception:  # the session may be stopping: nothing is lost either way
            log.debug("cancelling a read stage started ahead", exc_info=True)


def start_read(sc: Any, relay_dir: str, segments: list[Segment], tasks: int,
               rules: TableRules) -> ReadAhead | None:
    """Start the batch's read stage now (Spark's ``submitMapStage``), returning at once;
    None when Spark would not take it (then the apply job runs the stage, as always)."""
    source, shuffled = read_stage(sc, relay_dir, segments, tasks, rules)
    try:
        job = sc._jsc.sc().submitMapStage(_shuffle_dependency(shuffled))
    except Exception:  # a Spark without the call: only slower
        log.debug("could not start a read stage ahead", exc_info=True)
        return None
    return ReadAhead(tuple(segments), tasks, rules, source, shuffled, job)


def _shuffle_dependency(shuffled: Any) -> Any:
    """The ShuffleDependency under a ``partitionBy`` result (PySpark wraps the JVM's
    ShuffledRDD in one or two narrow RDDs)."""
    jrdd = shuffled._jrdd.rdd()
    for _ in range(4):
        dependency = jrdd.dependencies().head()
        if dependency.getClass().getSimpleName() == "ShuffleDependency":
            return dependency
        jrdd = dependency.rdd()
    raise LookupError("no shuffle dependency under the RDD")
