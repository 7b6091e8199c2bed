"""Plans for the C image readers of ``binrelay._speedups``: per column of a row image, how
the compiled Python decoder (``rows.compiler``) reads it, as a kind, flags, a width and an
argument, so that C can read the same values.

``json_rows`` (``dump --json``, :mod:`binrelay.rows.jsondump`) prints them as JSON, and
``image_tuples`` (:func:`binrelay.rows.events.row_images`) makes the decoder's tuples of
them; each gives up on what it cannot read and leaves it to the Python path.
"""

from __future__ import annotations

import struct
from json.encoder import encode_basestring as _encode_basestring

from binrelay.rows import coltypes as t
from binrelay.rows.charsets import python_codec, single_byte_table
from binrelay.rows.compiler import Fixed, _Ctx, enum_zero, spec_for
from binrelay.rows.tablemap import Column, TableMap
from binrelay.rows.temporal import FRAC_BYTES

# Column kinds and flags, as _speedups.c reads them.
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


def json_bytes(value: str) -> bytes | None:
    """``json.dumps(value, ensure_ascii=False)`` as UTF-8; None when that has surrogates."""
    try:
        return _encode_basestring(value).encode("utf-8")  # what json.dumps does for a str
    except UnicodeEncodeError:
        return None


def _names(col: Column) -> bytes | None:
    """An ENUM's or SET's names for json_rows: a count, then each as JSON text without its
    quotes behind its length (an ENUM's index 0 is the empty string of an invalid value)."""
    if col.enum_values is not None and enum_zero(col.enum_values) != "":
        return None  # (its index 0 is the number 0: Python prints it)
    names = ("", *col.enum_values) if col.enum_values is not None else col.set_values
    assert names is not None
    parts = [struct.pack("<H", len(names))]
    for name in names:
        text = json_bytes(name)
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
        key = json_bytes(col.label)
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


#: What ``image_tuples`` reads (the others make objects of their own: Python does).
_TUPLE_KINDS = frozenset({_K_INT, _K_YEAR, _K_FLOAT, _K_DOUBLE, _K_UTF8, _K_ASCII, _K_HEX,
                          _K_BITS})


def tuple_plan(table: TableMap, present: int) -> bytes | None:
    """image_tuples's plan for images of the columns in ``present``: json_plan's, when
    every column is of a kind it reads."""
    for col in table.columns:
        if present >> col.index & 1:
            item = _column_item(col)
            if item is None or item[0] not in _TUPLE_KINDS:
                return None
    return json_plan(table, present)
