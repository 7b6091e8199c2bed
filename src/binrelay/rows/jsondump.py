"""``dump --json``'s lines: one JSON object per row change, written as UTF-8 in large blocks.

A row change's line is ``json.dumps`` of ``{"file", "pos", "end_pos", "gtid", "schema",
"table", "op", "before", "after"}`` with the images as :func:`~binrelay.rows.text.image_json`
gives them (docs/types.md lists the value forms), escaped to ASCII as a whole when it holds
text that is not valid Unicode (bytes invalid in their charset decode to lone surrogates).
:func:`json_line` is that specification, and :func:`json_lines` the lines of whole files.

:func:`write_json_lines` prints the same bytes faster: ``binrelay._speedups.json_rows`` (C,
built when a compiler is there) writes the lines of a whole rows event straight from its
images for the common column types (integers, YEAR, FLOAT and DOUBLE, DECIMAL, BIT, ENUM,
SET, DATE, DATETIME, TIMESTAMP and TIME (MySQL 5.6+ forms), text in UTF-8 or in an
ASCII-compatible single-byte charset, binary strings), following a plan made once per row
decoder (:func:`json_plan`: per column of the image, how to read it and its key as JSON).
Everything else goes through :func:`json_line`, event by event: other column types,
PARTIAL_UPDATE_ROWS events, text that is not valid in its charset or not ASCII in a
single-byte one, a value that runs past the image (whose error the Python path raises), and a
file path, schema or table name that is not valid Unicode.  A test compares both paths.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from binrelay.errors import BinlogFormatError
from binrelay.rows.events import DELETE, INSERT, UPDATE, Location, iter_rows
from binrelay.rows.plans import json_bytes as _json_bytes
from binrelay.rows.plans import json_plan
from binrelay.rows.reader import iter_changes, iter_file_rows_runs
from binrelay.rows.scanner import RowsRun, row_error
from binrelay.rows.tablemap import TableMap
from binrelay.rows.text import image_json

try:
    from binrelay._speedups import json_rows as json_rows_c
except ImportError:  # pragma: no cover - depends on the build
    json_rows_c = None

#: Bytes buffered before a write.
BLOCK = 1 << 20


def json_line(where: Location, table: TableMap, op: str, before: tuple[Any, ...] | None,
              after: tuple[Any, ...] | None) -> str:
    """The JSON text of one row change (without the newline)."""
    cols = table.columns
    obj = {
        "file": where.file, "pos": where.pos, "end_pos": where.end_pos, "gtid": where.gtid,
        "schema": table.schema, "table": table.table, "op": op,
        "before": image_json(cols, before), "after": image_json(cols, after),
    }
    try:
        text = json.dumps(obj, ensure_ascii=False)
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Bytes invalid in their charset decode to lone surrogates; escape them.
        text = json.dumps(obj, ensure_ascii=True)
    return text


def json_lines(files: list[Path], *, verify_checksums: bool = True) -> Iterator[str]:
    """The line of every row change of ``files``: the specification of
    :func:`write_json_lines`."""
    for change in iter_changes(files, verify_checksums=verify_checksums):
        assert change.where is not None
        yield json_line(change.where, change.table, change.op, change.before, change.after)


# --- writing -------------------------------------------------------------------------------

_OPS = {INSERT: (0, b"insert"), UPDATE: (1, b"update"), DELETE: (2, b"delete")}
_MAX_PLANS = 4096


def write_json_lines(files: list[Path], out: BinaryIO, *,
                     verify_checksums: bool = True) -> None:
    """Write the line of every row change of ``files`` to ``out``, as :func:`json_lines`
    gives them, each followed by a newline, in UTF-8.  What was printed before an error is
    written before it is raised."""
    fast = json_rows_c
    ops = _OPS
    # Per row decoder (a table map and image columns): its plan and the table's JSON.
    plans: dict[Any, tuple[bytes | None, bytes | None]] = {}
    buf = bytearray()
    try:
        for path in files:
            file_json = _json_bytes(str(path))
            head = None if file_json is None else b'{"file": ' + file_json + b', "pos": '
            gtid: Any = ()  # no GTID seen yet (None is a GTID-less transaction)
            gtid_json: bytes | None = b"null"
            for run in iter_file_rows_runs(path, verify_checksums=verify_checksums):
                (_etype, _offset, where, table, op, partial, present, present_after, data, p,
                 stop, first, second) = run
                done = False
                if fast is not None and head is not None and not partial:
                    entry = plans.get(first)
                    if entry is None:
                        entry = _plan_entry(plans, first, table, present)
                    plan, table_json = entry
                    plan_after = None
                    if second is not None:
                        after_entry = plans.get(second)
                        if after_entry is None:
                            after_entry = _plan_entry(plans, second, table, present_after)
                        plan_after = after_entry[0]
                        if plan_after is None:
                            plan = None
                    if where.gtid != gtid:
                        gtid = where.gtid
                        gtid_json = b"null" if gtid is None else _json_bytes(gtid)
                    if plan is not None and table_json is not None and gtid_json is not None:
                        code, name = ops[op]
                        prefix = b'%s%d, "end_pos": %d, "gtid": %s, %s"op": "%s", "before": ' % (
                            head, where.pos, where.end_pos, gtid_json, table_json, name)
                        done = fast(buf, data, p, stop, code, prefix, plan, plan_after) >= 0
                if not done:
                    _slow_lines(buf, run)
                if len(buf) >= BLOCK:
                    out.write(buf)
                    buf.clear()
    finally:
        if buf:
            out.write(buf)
        out.flush()


def _plan_entry(plans: dict[Any, tuple[bytes | None, bytes | None]], decoder: Any,
                table: TableMap, present: int) -> tuple[bytes | None, bytes | None]:
    if len(plans) >= _MAX_PLANS:
        plans.clear()
    schema, name = _json_bytes(table.schema), _json_bytes(table.table)
    table_json = None if schema is None or name is None else (
        b'"schema": ' + schema + b', "table": ' + name + b", ")
    entry = plans[decoder] = (json_plan(table, present), table_json)
    return entry


def _slow_lines(buf: bytearray, run: RowsRun) -> None:
    """The lines of one rows event through :func:`json_line`."""
    (etype, offset, where, table, op, partial, _pr, _pa, data, p, stop, first, second) = run
    try:
        for change in iter_rows(table, op, partial, data, p, stop, first, second, where):
            buf += (json_line(where, table, op, change.before, change.after) + "\n").encode()
    except BinlogFormatError:
        raise
    except Exception as exc:
        raise row_error(where.file, etype, offset, exc) from exc
