"""``dump --json``'s lines: the fast writer (rows/jsondump.py, _speedups.json_rows) prints
what the specification (json_line over the change scanner's row changes) does, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from binrelay.errors import BinlogFormatError
from binrelay.rows.events import iter_rows
from binrelay.rows.reader import iter_file_changes, iter_file_rows_runs
from binrelay.rows.scanner import row_error
from captures import capture_binlogs

pytestmark = pytest.mark.timeout(300)

CAPTURES = capture_binlogs()


def _outcome(it):  # type: ignore[no-untyped-def]
    """Everything ``it`` yields, and the error that ended it (as text), if any."""
    out = []
    try:
        out.extend(it)
    except BinlogFormatError as exc:
        return out, str(exc)
    return out, None


def _runs_decoded(path: Path):  # type: ignore[no-untyped-def]
    for (etype, offset, where, table, op, partial, _pr, _pa, data, p, stop, first,
         second) in iter_file_rows_runs(path):
        try:
            yield from iter_rows(table, op, partial, data, p, stop, first, second, where)
        except BinlogFormatError:
            raise
        except Exception as exc:
            raise row_error(where.file, etype, offset, exc) from exc


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_scan_events_decoded_are_scan(path: Path) -> None:
    assert _outcome(_runs_decoded(path)) == _outcome(iter_file_changes(path))
