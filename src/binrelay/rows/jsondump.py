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
import struct
from collections.abc import Iterator
from json.encoder import encode_basestring as _encode_basestring
from pathlib import Path
from typing import Any, BinaryIO

from binrelay.errors import BinlogFormatError
from binrelay.rows import coltypes as t
from binrelay.rows.charsets import python_codec, single_byte_table
from binrelay.rows.compiler import Fixed, _Ctx, spec_for
from binrelay.rows.events import DELETE, INSERT, UPDATE, Location, iter_rows
from binrelay.rows.reader import iter_changes, iter_file_rows_runs
from binrelay.rows.scanner import RowsRun, row_error
from binrelay.rows.tablemap import Column, TableMap
from binrelay.rows.temporal import FRAC_BYTES
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


# --- plans ---------------------------------------------------------------------------------

# Column kinds and flags, as _speedups.c's json_rows reads them.
_K_INT, _K_YEAR, _K_FLOAT, _K_DOUBLE, _K_UTF8, _K_ASCII, _K_HEX = range(1, 8)
_K_DATE, _K_DATETIME2, _K_TIMESTAMP2, _K_TIME2, _K_DECIMAL, _K_ENUM, _K_SET, _K_BITS = range(
    8, 16)
#: Temporal types with a fraction: (kind, flags, bytes of the fraction, fsp).
_FRACTIONAL = {t.MYSQL_TYPE_DATETIME2: _K_DATETIME2, t.MYSQL_TYPE_TIMESTAMP2: _K_TIMESTAMP2,
               t.MYSQL_TYPE_TIME2: _K_TIME2}
_F_UNSIGNED, _F_RSTRIP = 1, 2
_ITEM = struct.Struct("<BBBHH")
_INT_CODES = {"b": 1, "h": 2, "i": 4, "q": 8}
_TEXT_TYPES = (t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VAR_STRING, t.MYSQL_TYPE_STRING,
               t.MYSQL_TYPE_BLOB, t.MYSQL_TYPE_TINY_BLOB, t.MYSQL_TYPE_MEDIUM_BLOB,
               t.MYSQL_TYPE_LONG_BLOB, t.MYSQL_TYPE_GEOMETRY)
_ASCII_IDENTITY = "".join(map(chr, range(128)))


def _text_kind(col: Column) -> int | None:
    """How the compiler's decoder turns the column's bytes into a value, as a kind: UTF-8
    text, text in a single-byte charset that is ASCII below 0x80, bytes (hex); None for
    other charsets."""
    codec = python_codec(col.charset)
    if codec is not None:
        return _K_UTF8 if codec == "utf-8" else None
    table = single_byte_table(col.charset)
    if table is not None:
        return _K_ASCII if table[:128] == _ASCII_IDENTITY else None
    return _K_HEX


def _column_item(col: Column) -> tuple[int, int, int, int] | None:
    """(kind, flags, width, arg) of one column, or None when json_rows cannot print it:
    width is the bytes of an integer, a length prefix, a fraction or a DECIMAL; arg BINARY's
    padded length, a temporal column's fsp or a DECIMAL's precision << 8 | scale."""
    typ = col.type
    if typ in _TEXT_TYPES:
        if typ == t.MYSQL_TYPE_GEOMETRY:
            kind: int | None = _K_HEX
        else:
            kind = _text_kind(col)
        if kind is None:
            return None
        if typ in (t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VAR_STRING, t.MYSQL_TYPE_STRING):
            width = 1 if col.length < 256 else 2
        else:
            width = col.length  # the length prefix's bytes
        if not 1 <= width <= 4:
            return None
        if typ != t.MYSQL_TYPE_STRING:
            return kind, 0, width, 0
        if kind != _K_HEX:
            return kind, _F_RSTRIP, width, 0  # CHAR: trailing spaces are not the value's
        # BINARY(n): padded back to n bytes with 0x00 (the server drops them when logging).
        pad = col.length if col.is_binary else 0
        return (kind, 0, width, pad) if pad <= 0xFFFF else None
    if typ in _FRACTIONAL:
        if not 0 <= col.fsp < len(FRAC_BYTES):
            return None
        return _FRACTIONAL[typ], 0, FRAC_BYTES[col.fsp], col.fsp
    if typ == t.MYSQL_TYPE_DATE:
        return _K_DATE, 0, 0, 0
    if typ == t.MYSQL_TYPE_NEWDECIMAL:
        if not (1 <= col.precision <= 65 and 0 <= col.scale <= col.precision
                and col.length <= 0xFF):
            return None
        return _K_DECIMAL, 0, col.length, col.precision << 8 | col.scale
    if typ == t.MYSQL_TYPE_BIT:
        return (_K_BITS, 0, col.length, 0) if 1 <= col.length <= 8 else None
    if typ == t.MYSQL_TYPE_ENUM:
        if col.length not in (1, 2):
            return None
        return (_K_INT, _F_UNSIGNED, col.length, 0) if col.enum_values is None else (
            _K_ENUM, 0, col.length, 0)
    if typ == t.MYSQL_TYPE_SET:
        if not 1 <= col.length <= 8:
            return None
        return (_K_INT, _F_UNSIGNED, col.length, 0) if col.set_values is None else (
            _K_SET, 0, col.length, 0)
    if typ == t.MYSQL_TYPE_INT24:
        return _K_INT, _F_UNSIGNED if col.unsigned else 0, 3, 0
    if typ == t.MYSQL_TYPE_YEAR:
        return _K_YEAR, 0, 1, 0
    if typ in (t.MYSQL_TYPE_TINY, t.MYSQL_TYPE_SHORT, t.MYSQL_TYPE_LONG,
               t.MYSQL_TYPE_LONGLONG, t.MYSQL_TYPE_FLOAT, t.MYSQL_TYPE_DOUBLE):
        spec = spec_for(col, _Ctx())  # the struct code the decoder reads the value with
        assert isinstance(spec, Fixed) and spec.convert is None
        if spec.code in ("f", "d"):
            return (_K_FLOAT if spec.code == "f" else _K_DOUBLE), 0, 0, 0
        code = spec.code.lower()
        return _K_INT, _F_UNSIGNED if spec.code != code else 0, _INT_CODES[code], 0
    return None


def _json_bytes(value: str) -> bytes | None:
    """``json.dumps(value, ensure_ascii=False)`` as UTF-8; None when that has surrogates."""
    try:
        return _encode_basestring(value).encode("utf-8")  # what json.dumps does for a str
    except UnicodeEncodeError:
        return None


def _names(col: Column) -> bytes | None:
    """An ENUM's or SET's names for json_rows: a count, then each as JSON text without its
    quotes behind its length (an ENUM's index 0 is the empty string of an invalid value)."""
    names = ("", *col.enum_values) if col.enum_values is not None else col.set_values
    assert names is not None
    parts = [struct.pack("<H", len(names))]
    for name in names:
        text = _json_bytes(name)
        if text is None or len(text) - 2 > 0xFFFF or len(names) > 0xFFFF:
            return None
        parts.append(struct.pack("<H", len(text) - 2) + text[1:-1])
    return b"".join(parts)


def json_plan(table: TableMap, present: int) -> bytes | None:
    """json_rows's plan for an image of the columns in ``present`` (bit i = column i), or
    None when it cannot print one of them."""
    cols = [col for col in table.columns if present >> col.index & 1]
    if not cols:
        return None
    parts = [struct.pack("<H", len(cols))]
    for col in cols:
        item = _column_item(col)
        key = _json_bytes(col.label)
        if item is None or key is None:
            return None
        key += b": "
        parts.append(_ITEM.pack(*item, len(key)) + key)
        if item[0] in (_K_ENUM, _K_SET):
            names = _names(col)
            if names is None:
                return None
            parts.append(names)
    return b"".join(parts)


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
