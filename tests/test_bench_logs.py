"""The benchmarks read the sync's own log lines: the pattern must match what the sync writes."""

from __future__ import annotations

import logging

from bench.sync_catchup import _BATCH_LINE, _SPARK_UP

from binrelay.logfmt import LogfmtFormatter
from binrelay.position import Position, SubdirName


def _batch_record(**fields: object) -> str:
    record = logging.LogRecord("binrelay.spark.sync", logging.INFO, __file__, 1,
                               "batch applied", None, None)
    for key, value in fields.items():
        setattr(record, key, value)
    return LogfmtFormatter().format(record)


def test_the_batch_line_pattern_reads_a_real_batch_record() -> None:
    sub = SubdirName.parse("0-1.000001")
    start, end = Position(sub, "mysql-bin.000001", 15316959), Position(sub, "mysql-bin.000002", 4)
    fields = {"pipeline": "sync", "batch": 3, "kind": "dml", "start": str(start),
              "end": str(end), "rows": 10, "ddl": 0, "bytes": 99, "seconds": 0.25,
              "spark_seconds": 0.2, "plan_seconds": 0.01, "replayed": False}
    timed = _batch_record(**fields, cpu_seconds=0.03, cpu_wait_seconds=0.19)
    found = _BATCH_LINE.findall(timed)
    assert [(int(a), int(b), float(s), float(c), float(w)) for _ts, a, b, s, c, w in found] \
        == [(15316959, 4, 0.25, 0.03, 0.19)], timed
    # A log of a release before the thread's times: those fields absent.
    [(_ts, a, b, seconds, cpu, wait)] = _BATCH_LINE.findall(_batch_record(**fields))
    assert (int(a), int(b), float(seconds), cpu, wait) == (15316959, 4, 0.25, "", "")


def test_the_spark_up_pattern_reads_a_real_record() -> None:
    record = logging.LogRecord("binrelay.spark.sync", logging.INFO, __file__, 1,
                               "spark driver started", None, None)
    record.master = "local[2]"
    record.driver = "127.0.0.1:40111"
    line = LogfmtFormatter().format(record)
    assert _SPARK_UP.search(line) is not None, line
