"""Decoded values as text: SQL literals (for ``dump``) and JSON-ready values (``dump --json``).

Both are exact: a literal inserted into a column of the same type stores the same value, and
the JSON form keeps every digit (DECIMAL as a string, bytes as hex).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from binrelay.rows import coltypes as t
from binrelay.rows.compiler import ABSENT
from binrelay.rows.mysqljson import JsonPartialUpdate
from binrelay.rows.tablemap import Column
from binrelay.rows.temporal import (
    MysqlDate,
    MysqlDateTime,
    date_text,
    datetime_text,
    time_text,
)

_SQL_ESCAPES = {"\\": "\\\\", "'": "\\'", "\0": "\\0", "\n": "\\n", "\r": "\\r", "\x1a": "\\Z"}
_SQL_TABLE = {ord(k): v for k, v in _SQL_ESCAPES.items()}


def quote_sql(text: str) -> str:
    return "'" + text.translate(_SQL_TABLE) + "'"


def value_text(value: Any, col: Column) -> str:
    """The server's text of a non-NULL value (what ``CAST(col AS CHAR)`` shows for temporal
    and numeric types; the value itself for strings)."""
    if isinstance(value, _dt.timedelta):
        return time_text(value, col.fsp)
    if isinstance(value, _dt.datetime | MysqlDateTime):
        return datetime_text(value, col.fsp)
    if isinstance(value, _dt.date | MysqlDate):
        return date_text(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def sql_literal(value: Any, col: Column) -> str:
    if value is None:
        return "NULL"
    if value is ABSENT:
        return "/* not in image */"
    if isinstance(value, bool):  # pragma: no cover - the decoder builds no bools
        return "1" if value else "0"
    if isinstance(value, bytes):
        if col.type == t.MYSQL_TYPE_BIT:
            return "b'" + bin(int.from_bytes(value, "big"))[2:] + "'"
        return "X'" + value.hex().upper() + "'"
    if isinstance(value, str):
        return quote_sql(value)
    if isinstance(value, int):
        if col.type == t.MYSQL_TYPE_BIT:
            return "b'" + bin(value)[2:] + "'"
        return str(value)
    if isinstance(value, float | Decimal):
        return value_text(value, col)
    if isinstance(value, JsonPartialUpdate):
        diffs = ", ".join(f"{d.operation_name} {d.path}" for d in value.diffs)
        return f"/* partial JSON update: {diffs} */"
    if isinstance(value, tuple):  # VECTOR
        return "'[" + ",".join(repr(v) for v in value) + "]'"
    return quote_sql(value_text(value, col))


def _json_bytes(value: bytes, col: Column) -> Any:
    return {"hex": value.hex()}


_JSON_BY_TYPE: dict[type, Callable[[Any, Column], Any]] = {
    int: lambda v, c: v,
    float: lambda v, c: v,
    str: lambda v, c: v,
    bytes: _json_bytes,
    Decimal: lambda v, c: format(v, "f"),
    _dt.date: lambda v, c: date_text(v),
    MysqlDate: lambda v, c: date_text(v),
    _dt.datetime: lambda v, c: datetime_text(v, c.fsp),
    MysqlDateTime: lambda v, c: datetime_text(v, c.fsp),
    _dt.timedelta: lambda v, c: time_text(v, c.fsp),
    tuple: lambda v, c: list(v),
    JsonPartialUpdate: lambda v, c: {"json_diff": [d.to_dict() for d in v.diffs]},
}


def json_value(value: Any, col: Column) -> Any:
    """A JSON-serialisable form of a non-NULL, present value."""
    if value is None:
        return None
    fn = _JSON_BY_TYPE.get(type(value))
    if fn is None:  # pragma: no cover - the decoder builds no other types
        return str(value)
    return fn(value, col)


def image_json(columns: tuple[Column, ...], image: tuple[Any, ...] | None) -> Any:
    """``{column: value}`` for the columns in the image (absent ones left out)."""
    if image is None:
        return None
    return {col.label: json_value(v, col) for col, v in zip(columns, image, strict=True)
            if v is not ABSENT}
