"""Whether the downstream's column can hold every value the upstream's column logs.

A replica's SQL thread compares each table map with its own table before it applies a row
(``table_def::compatible_with``): a column of another type, or of the same type but
narrower (``VARCHAR(20)`` into ``VARCHAR(5)``, ``INT`` into ``TINYINT``, ``DECIMAL(10,4)``
into ``DECIMAL(10,2)``), stops it with error 1677 unless ``slave_type_conversions`` allows
the conversion.  binrelay writes rows with SQL under a lenient sql_mode (a replica stores
values as logged, whatever its mode), where such a value would be truncated, rounded or
clipped with only a warning: the data would differ and the checkpoint say consistent.  So
the sync stops where the replica stops, when a logged column does not fit.

It goes as far as the replica's ``ALL_NON_LOSSY`` conversions: a wider downstream column
of the same kind (``INT`` into ``BIGINT``, ``VARCHAR(5)`` into ``VARCHAR(20)``, ``utf8mb3``
into ``utf8mb4``, more fractional digits) holds every value unchanged, and is accepted, as
an operator who widens a column downstream expects.  What the table map does not tell
(a FLOAT's ``(M,D)``, a geometry's subtype, an ENUM's members when they are not logged) is
not checked: the server refuses what it cannot store there.

Pure: a :class:`~binrelay.rows.tablemap.Column` and a
:class:`~binrelay.apply.catalog.DownstreamColumn` in, the reason it does not fit out.
"""

from __future__ import annotations

from binrelay.apply.catalog import DownstreamColumn
from binrelay.rows import coltypes as t
from binrelay.rows.charsets import charset_of
from binrelay.rows.tablemap import Column

__all__ = ["misfit", "upstream_type"]

_INT_BYTES = {t.MYSQL_TYPE_TINY: 1, t.MYSQL_TYPE_SHORT: 2, t.MYSQL_TYPE_INT24: 3,
              t.MYSQL_TYPE_LONG: 4, t.MYSQL_TYPE_LONGLONG: 8}
_INT_NAMES = {1: "tinyint", 2: "smallint", 3: "mediumint", 4: "int", 8: "bigint"}
_DOWN_INT_BYTES = {name: size for size, name in _INT_NAMES.items()}

_TEXT_BYTES = {1: 255, 2: 65535, 3: 16777215, 4: 4294967295}
_TEXT_NAMES = {1: "tinytext", 2: "text", 3: "mediumtext", 4: "longtext"}
_BLOB_NAMES = {1: "tinyblob", 2: "blob", 3: "mediumblob", 4: "longblob"}
_BLOBS = frozenset({t.MYSQL_TYPE_BLOB, t.MYSQL_TYPE_TINY_BLOB, t.MYSQL_TYPE_MEDIUM_BLOB,
                    t.MYSQL_TYPE_LONG_BLOB})
_STRINGS = frozenset({t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VAR_STRING, t.MYSQL_TYPE_STRING})
_TEMPORAL_FSP = frozenset({t.MYSQL_TYPE_TIME2, t.MYSQL_TYPE_DATETIME2,
                           t.MYSQL_TYPE_TIMESTAMP2})
#: Downstream types whose values are not the binlog's string bytes (MariaDB's data types
#: stored as fixed-length strings): the server refuses what is not one of them.
_OWN_STRING_TYPES = frozenset({"inet4", "inet6", "uuid"})

#: Bytes of a character at most and at least, per character set (the server's mbmaxlen,
#: mbminlen); a set not listed takes one byte per character.
_MBMAXLEN = {"big5": 2, "cp932": 2, "sjis": 2, "ujis": 3, "eucjpms": 3, "euckr": 2,
             "gb2312": 2, "gbk": 2, "gb18030": 4, "ucs2": 2, "utf16": 4, "utf16le": 4,
             "utf32": 4, "utf8mb3": 3, "utf8mb4": 4}
_MBMINLEN = {"ucs2": 2, "utf16": 2, "utf16le": 2, "utf32": 4}
#: Character sets that hold every character of any other: text converts into them.
_UNICODE = frozenset({"utf8mb4", "utf16", "utf16le", "utf32"})
_ALIASES = {"utf8": "utf8mb3"}


def misfit(col: Column, down: DownstreamColumn, *, signedness_logged: bool) -> str | None:
    """Why ``down`` cannot hold every value of ``col`` (as logged), or None when it can.
    ``signedness_logged``: whether the table map says which numeric columns are UNSIGNED
    (else the downstream's word is taken, as a replica takes it)."""
    kind = col.type
    dtype = down.data_type
    if down.generated:
        return None  # never written: the downstream computes it
    if kind in _INT_BYTES:
        size = _DOWN_INT_BYTES.get(dtype)
        if size is None:
            return "another type"
        up = _INT_BYTES[kind]
        if not signedness_logged or col.unsigned == down.unsigned:
            return None if size >= up else "narrower"
        if col.unsigned:  # into a signed column: one more byte for the same range
            return None if size > up else "narrower"
        return "UNSIGNED downstream: negative values do not fit"
    if kind == t.MYSQL_TYPE_NEWDECIMAL:
        if dtype != "decimal":
            return "another type"
        if down.precision is None or down.scale is None:
            return None
        if signedness_logged and not col.unsigned and down.unsigned:
            return "UNSIGNED downstream: negative values do not fit"
        if down.scale < col.scale:
            return "fewer digits after the point"
        if down.precision - down.scale < col.precision - col.scale:
            return "fewer digits before the point"
        return None
    if kind == t.MYSQL_TYPE_FLOAT:
        return None if dtype in ("float", "double") else "another type"
    if kind == t.MYSQL_TYPE_DOUBLE:
        return None if dtype == "double" else "another type"
    if kind == t.MYSQL_TYPE_BIT:
        if dtype != "bit":
            return "another type"
        return None if down.precision is None or down.precision >= col.bits else "narrower"
    if kind in _TEMPORAL_FSP or kind in (t.MYSQL_TYPE_TIME, t.MYSQL_TYPE_DATETIME,
                                         t.MYSQL_TYPE_TIMESTAMP):
        family = {t.MYSQL_TYPE_TIME: "time", t.MYSQL_TYPE_TIME2: "time",
                  t.MYSQL_TYPE_DATETIME: "datetime", t.MYSQL_TYPE_DATETIME2: "datetime",
                  t.MYSQL_TYPE_TIMESTAMP: "timestamp", t.MYSQL_TYPE_TIMESTAMP2: "timestamp"}
        if dtype != family[kind]:
            return "another type"
        fsp = col.fsp if kind in _TEMPORAL_FSP else 0
        return None if (down.fsp or 0) >= fsp else "fewer fractional digits"
    if kind in (t.MYSQL_TYPE_DATE, t.MYSQL_TYPE_NEWDATE):
        return None if dtype == "date" else "another type"
    if kind == t.MYSQL_TYPE_YEAR:
        return None if dtype == "year" else "another type"
    if kind in (t.MYSQL_TYPE_ENUM, t.MYSQL_TYPE_SET):
        if dtype != ("enum" if kind == t.MYSQL_TYPE_ENUM else "set"):
            return "another type"
        logged = col.enum_values if kind == t.MYSQL_TYPE_ENUM else col.set_values
        if logged is None or down.members is None:
            return None  # an index, as a replica stores it
        missing = [v for v in logged if v not in down.members]
        return None if not missing else f"no member {missing[0]!r}"
    if kind in _STRINGS:
        if dtype in _OWN_STRING_TYPES:
            return None
        if dtype not in ("char", "varchar", "binary", "varbinary"):
            return "another type"
        return _string_misfit(col, down)
    if kind in _BLOBS:
        if dtype == "json":
            return None
        if dtype not in _TEXT_NAMES.values() and dtype not in _BLOB_NAMES.values():
            return "another type"
        return _text_misfit(col, down)
    return None  # JSON, geometry, vector, compressed: the type family is the replica's check


def _charset(name: str | None) -> str | None:
    return None if name is None else _ALIASES.get(name.lower(), name.lower())


def _charsets(col: Column, down: DownstreamColumn) -> tuple[str, str, str | None]:
    """(upstream's set, downstream's set, why they do not go together): the upstream's as
    logged, else the downstream's (rows logged without it are read as the downstream's)."""
    there = _charset(down.charset) or "binary"
    here = _charset(charset_of(col.collation)) if col.collation is not None else there
    if here is None:
        return there, there, "a character set binrelay does not know"
    if here == there:
        return here, there, None
    if "binary" in (here, there):
        return here, there, ("bytes upstream, text downstream" if here == "binary"
                             else "text upstream, bytes downstream")
    if there in _UNICODE or (here == "ascii") or (here, there) == ("utf8mb3", "utf8mb4"):
        return here, there, None
    return here, there, f"{here} upstream, {there} downstream"


def _string_misfit(col: Column, down: DownstreamColumn) -> str | None:
    if col.length <= 0 or down.char_length is None:
        return None
    here, _there, wrong = _charsets(col, down)
    if wrong is not None:
        return wrong
    # CHAR and VARCHAR count characters; the table map gives the bytes of the longest value.
    chars = col.length // _MBMAXLEN.get(here, 1)
    return None if down.char_length >= chars else "narrower"


def _text_misfit(col: Column, down: DownstreamColumn) -> str | None:
    longest = _TEXT_BYTES.get(col.length)
    if longest is None or down.octet_length is None:
        return None
    here, there, wrong = _charsets(col, down)
    if wrong is not None:
        return wrong
    # TEXT and BLOB count bytes: the most characters upstream, in the downstream's bytes.
    if here != there and not (here == "ascii" or (here, there) == ("utf8mb3", "utf8mb4")):
        longest = longest // _MBMINLEN.get(here, 1) * _MBMAXLEN.get(there, 1)
    return None if down.octet_length >= longest else "narrower"


def upstream_type(col: Column) -> str:
    """The logged column's type in SQL words, as far as the table map tells it."""
    kind = col.type
    charset = charset_of(col.collation) if col.collation is not None else None
    if kind in _INT_BYTES:
        return _INT_NAMES[_INT_BYTES[kind]] + (" unsigned" if col.unsigned else "")
    if kind == t.MYSQL_TYPE_NEWDECIMAL:
        return f"decimal({col.precision},{col.scale})" + (" unsigned" if col.unsigned else "")
    if kind == t.MYSQL_TYPE_BIT:
        return f"bit({col.bits})"
    if kind in _TEMPORAL_FSP:
        name = {t.MYSQL_TYPE_TIME2: "time", t.MYSQL_TYPE_DATETIME2: "datetime",
                t.MYSQL_TYPE_TIMESTAMP2: "timestamp"}[kind]
        return f"{name}({col.fsp})" if col.fsp else name
    if kind in _STRINGS:
        name = "char" if kind == t.MYSQL_TYPE_STRING else "varchar"
        if charset == "binary":
            return ("binary" if name == "char" else "varbinary") + f"({col.length})"
        if charset is None:
            return f"{name} of {col.length} bytes"
        return f"{name}({col.length // _MBMAXLEN.get(_charset(charset) or '', 1)})" \
               f" character set {charset}"
    if kind in _BLOBS:
        if charset == "binary":
            return _BLOB_NAMES.get(col.length, "blob")
        name = _TEXT_NAMES.get(col.length, "text")
        return name if charset is None else f"{name} character set {charset}"
    if kind in (t.MYSQL_TYPE_ENUM, t.MYSQL_TYPE_SET) and \
            (col.enum_values or col.set_values) is not None:
        values = col.enum_values if kind == t.MYSQL_TYPE_ENUM else col.set_values
        word = "enum" if kind == t.MYSQL_TYPE_ENUM else "set"
        return word + "(" + ",".join("'" + v.replace("'", "''") + "'"
                                     for v in values or ()) + ")"
    return col.type_name.lower()
