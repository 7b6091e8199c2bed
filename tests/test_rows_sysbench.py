"""A whole sysbench binlog decodes to the row changes ``mariadb-binlog -v`` reports."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter

from binrelay.rows import EventDecoder, RowsEvent, iter_file_events
from binrelay.rows.reader import iter_changes
from binrelay.testing.sandbox import MariaDBServer, run_sysbench
from rows_helpers import count_ops

MARIADB_BINLOG = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")

_VERB = {"INSERT INTO": "insert", "UPDATE": "update", "DELETE FROM": "delete"}
_LINE = re.compile(rb"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]*)`\.`([^`]*)`$", re.M)


def _reference_counts(path: str) -> Counter[tuple[str, str, str]]:
    assert MARIADB_BINLOG is not None
    out = subprocess.run([MARIADB_BINLOG, "-v", path], capture_output=True, check=True).stdout
    return Counter((schema.decode(), table.decode(), _VERB[verb.decode()])
                   for verb, schema, table in _LINE.findall(out))


def test_sysbench_binlog_row_counts_match_mariadb_binlog(mariadb: MariaDBServer) -> None:
    run_sysbench(mariadb, tables=2, table_size=1000, threads=2, events=1500)
    mariadb.flush_logs()
    files = [mariadb.binlog_path(name) for name, _ in mariadb.binlog_files()]

    expected: Counter[tuple[str, str, str]] = Counter()
    for path in files:
        expected.update(_reference_counts(str(path)))
    assert expected[("sbtest", "sbtest1", "update")] > 100  # a real workload happened

    started = time.perf_counter()
    changes = list(iter_changes(files))
    elapsed = time.perf_counter() - started
    assert count_ops(changes) == dict(expected)

    typed: Counter[tuple[str, str, str]] = Counter()
    for path in files:
        decoder = EventDecoder(path=str(path))
        for offset, raw in iter_file_events(path):
            for event in decoder.feed(raw, offset):
                if isinstance(event, RowsEvent):
                    for change in event.rows():
                        typed[(change.schema, change.table_name, change.op)] += 1
    assert typed == expected
    print(f"\n{len(changes)} row changes in {elapsed:.3f}s "
          f"({len(changes) / elapsed:,.0f} rows/s, fast path)")
