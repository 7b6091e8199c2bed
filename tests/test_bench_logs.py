"""The benchmarks read the sync's own log lines: the pattern must match what the sync writes."""

from __future__ import annotations

import logging

from bench.sync_catchup import _BATCH_LINE, _SPARK_UP

from binrelay.logfmt import LogfmtFormatter
from binrelay.position import Position, SubdirName


def test_the_batch_line_pattern_reads_a_real_batch_record() -> None:
    sub = SubdirName.parse("0-1.000001")
    start, end = Position(sub, "mysql-bin.000001", 15316959), Position(sub, "mysql-bin.000002", 4)
    record = logging.LogRecord("binrelay.spark.sync", logging.INFO, __file__, 1,
                               "batch applied", None, None)
    for key, value in {"pipeline": "sync", "batch": 3, "kind": "dml", "start": str(start),
                       "end": str(end), "rows": 10}.items():
        setattr(record, key, value)
    line = LogfmtFormatter().format(record)
    found = _BATCH_LINE.findall(line)
    assert [(int(a), int(b)) for _ts, a, b in found] == [(15316959, 4)], line


def test_the_spark_up_pattern_reads_a_real_record() -> None:
    record = logging.LogRecord("binrelay.spark.sync", logging.INFO, __file__, 1,
                               "spark driver started", None, None)
    record.master = "local[2]"
    record.driver = "127.0.0.1:40111"
    line = LogfmtFormatter().format(record)
    assert _SPARK_UP.search(line) is not None, line
