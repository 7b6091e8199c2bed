"""The README's first command runs the demo: relay, apply on Spark, CHECKSUM TABLE equal on
both sides, a report, and nothing left behind."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from relay_helpers import run_binrelay

pytestmark = pytest.mark.server  # the demo starts its own servers and Spark


def _processes_under(paths: set[Path]) -> list[str]:
    """Command lines of live processes that mention one of ``paths`` (a leaked mariadbd)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(str(p) in text for p in paths):
            found.append(text)
    return found


def test_demo_runs_and_cleans_up() -> None:
    proc = run_binrelay("demo", "--seconds", "3", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-5000:]
    out = proc.stdout
    assert "byte-identical" in out
    assert "kill -9 of the relay" in out
    # `binrelay status` after the sync: consistent, caught up, with the labels of SPEC §3.
    assert re.search(r"^ +Consistent: Yes$", out, re.MULTILINE), out
    assert re.search(r"^ +Caught_Up: Yes$", out, re.MULTILINE), out
    assert "(persisted: downstream" in out and "relay.meta" in out, out
    report = out[out.index("\nreport\n"):]
    workload = re.search(r"workload .* (\d+) transactions, (\d+) DDL statements", report)
    assert workload and int(workload.group(1)) > 0 and int(workload.group(2)) == 5, report
    sync = re.search(r"sync\s+(\d+) batches \((\d+) ddl, (\d+) dml(?:, (\d+) empty)?\), "
                     r"(\d+) row changes .*, (\d+) DDL statements in", report)
    assert sync, report
    batches, ddl_batches, dml_batches, empty, rows, ddl = (int(g or 0) for g in sync.groups())
    assert batches == ddl_batches + dml_batches + empty and dml_batches > 0
    # sysbench prepare (2 x 5000 rows) is replayed too: the downstream starts empty.
    assert rows > 10000
    # CREATE DATABASE, sysbench's CREATE TABLE and CREATE INDEX, and the demo's own DDL.
    assert ddl >= 5 + 5
    checks = re.search(r"checksums\s+(\d+) tables, CHECKSUM TABLE equal on both sides: OK",
                       report)
    assert checks and int(checks.group(1)) == 3, report
    assert out.rstrip().endswith("result: OK")
    # Cleanup: its own directory (named in the output; other runs may have theirs) is gone,
    # and no process runs from it.
    base = re.search(r"^relay dir\s+(\S+)/relay$", out, re.MULTILINE)
    assert base, out
    demo_dir = Path(base.group(1))
    assert demo_dir.parent == Path(tempfile.gettempdir())
    assert demo_dir.name.startswith("binrelay-demo-")
    assert not demo_dir.exists()
    assert not _processes_under({demo_dir})

