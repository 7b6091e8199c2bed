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
(a FLOAT's ``(M,D)``, which the downstream's may round to; a geometry's subtype, which the
server refuses to store in another; an ENUM's members when they are not logged, whose index
is stored, as a replica stores it) is not checked.  Nor is NULL: the table map's null bit
says a column *may* be NULL in this statement (every column of the inner table of an outer
join is), not that the upstream's column allows it; a NULL value into a NOT NULL column is
stopped where it is met (``spark.compact.table_shape``).

Pure: a :class:`~binrelay.rows.tablemap.Column` and a
:class:`~binrelay.apply.catalog.DownstreamColumn` in, the reason it does not fit out.
"""

from __future__ import annotations

from binrelay.apply.catalog import DownstreamColumn
from binrelay.rows import coltypes as t
from binrelay.rows.charsets import (
    MBMAXLEN,
    MBMINLEN,
    MULTI_BYTE_KEPT,
    canonical_charset,
    charset_of,
)
from binrelay.rows.tablemap import Column

__all__ = ["ANOTHER_TYPE", "OLD_TEMPORAL", "misfit", "upstream_type"]

#: What :func:`misfit` says of a column of another kind than the logged one's.
ANOTHER_TYPE = "another type"
#: What it says of a temporal logged in the pre-5.6 format (no fractional seconds) whose
#: downstream column has fractional seconds: MariaDB 5.3-10.0's columns with fractional
#: seconds (``/* mariadb-5.3 */`` in SHOW CREATE TABLE) log that type code too, in a layout
#: the binlog does not describe (its length follows from the precision it does not log).
#: Unlike other wider columns, then, such a one is not accepted: a MySQL 5.5 DATETIME into
#: a DATETIME(6) stops too, where the rows cannot tell the two apart.
OLD_TEMPORAL = ("logged in the pre-5.6 format, as MariaDB 5.3-10.0's columns with fractional"
                " seconds are, in a layout the binlog does not describe")

_INT_BYTES = {t.MYSQL_TYPE_TINY: 1, t.MYSQL_TYPE_SHORT: 2, t.MYSQL_TYPE_INT24: 3,
              t.MYSQL_TYPE_LONG: 4, t.MYSQL_TYPE_LONGLONG: 8}
_INT_NAMES = {1: "tinyint", 2: "smallint", 3: "mediumint", 4: "int", 8: "bigint"}
_DOWN_INT_BYTES = {name: size for size, name in _INT_NAMES.items()}

_TEXT_BYTES = {1: 255, 2: 65535, 3: 16777215, 4: 4294967295}
_TEXT_NAMES = {1: "tinytext", 2: "text", 3: "mediumtext", 4: "longtext"}
_BLOB_NAMES = {1: "tinyblob", 2: "blob", 3: "mediumblob", 4: "longblob"}
_TEXT = frozenset(_TEXT_NAMES.values()) | frozenset(_BLOB_NAMES.values())
_BLOBS = frozenset({t.MYSQL_TYPE_BLOB, t.MYSQL_TYPE_TINY_BLOB, t.MYSQL_TYPE_MEDIUM_BLOB,
                    t.MYSQL_TYPE_LONG_BLOB})
_VARYING = frozenset({t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VAR_STRING})
_GEOMETRY = frozenset({"geometry", "point", "linestring", "polygon", "multipoint",
                       "multilinestring", "multipolygon", "geometrycollection"})
_TEMPORAL = {t.MYSQL_TYPE_TIME: "time", t.MYSQL_TYPE_TIME2: "time",
             t.MYSQL_TYPE_DATETIME: "datetime", t.MYSQL_TYPE_DATETIME2: "datetime",
             t.MYSQL_TYPE_TIMESTAMP: "timestamp", t.MYSQL_TYPE_TIMESTAMP2: "timestamp"}
_TEMPORAL_FSP = frozenset({t.MYSQL_TYPE_TIME2, t.MYSQL_TYPE_DATETIME2,
                           t.MYSQL_TYPE_TIMESTAMP2})
#: MariaDB's data types stored as fixed-length binary strings, and their lengths.
_OWN_STRING_TYPES = {"inet4": 4, "inet6": 16, "uuid": 16}

#: The downstream types a column logged with each binlog type may have at all (the rest
#: of :func:`misfit` says whether one is wide enough).  A VARCHAR does not go into a CHAR
#: (which drops trailing spaces) nor a VARBINARY into a BINARY (which pads with zeros).
FAMILIES: dict[int, frozenset[str]] = {
    **{kind: frozenset(_DOWN_INT_BYTES) for kind in _INT_BYTES},
    t.MYSQL_TYPE_FLOAT: frozenset({"float", "double"}),
    t.MYSQL_TYPE_DOUBLE: frozenset({"double"}),
    t.MYSQL_TYPE_DECIMAL: frozenset({"decimal"}),
    t.MYSQL_TYPE_NEWDECIMAL: frozenset({"decimal"}),
    t.MYSQL_TYPE_BIT: frozenset({"bit"}),
    t.MYSQL_TYPE_YEAR: frozenset({"year"}),
    t.MYSQL_TYPE_DATE: frozenset({"date"}),
    t.MYSQL_TYPE_NEWDATE: frozenset({"date"}),
    **{kind: frozenset({name}) for kind, name in _TEMPORAL.items()},
    t.MYSQL_TYPE_VARCHAR: frozenset({"varchar", "varbinary"}),
    t.MYSQL_TYPE_VAR_STRING: frozenset({"varchar", "varbinary"}),
    t.MYSQL_TYPE_STRING: frozenset({"char", "binary", "varchar", "varbinary",
                                    *_OWN_STRING_TYPES}),
    t.MYSQL_TYPE_VARCHAR_COMPRESSED: frozenset({"varchar", "varbinary"}),
    t.MYSQL_TYPE_BLOB_COMPRESSED: _TEXT,
    t.MYSQL_TYPE_ENUM: frozenset({"enum"}),
    t.MYSQL_TYPE_SET: frozenset({"set"}),
    # MariaDB's JSON is a LONGTEXT (logged as a BLOB); MySQL's JSON into MariaDB too.
    **{kind: _TEXT | {"json"} for kind in _BLOBS},
    t.MYSQL_TYPE_JSON: frozenset({"json", "longtext"}),
    t.MYSQL_TYPE_GEOMETRY: _GEOMETRY,
    t.MYSQL_TYPE_VECTOR: frozenset({"vector"}),
}

#: Character sets that hold every character (supplementary ones too) / every character of
#: the Basic Multilingual Plane: text of any other set, or of one without supplementary
#: characters, converts into them unchanged.
_UNICODE = frozenset({"utf8mb4", "utf16", "utf16le", "utf32"})
_BMP = frozenset({"utf8mb3", "ucs2"})
_SUPPLEMENTARY = _UNICODE | {"gb18030"}


def misfit(col: Column, down: DownstreamColumn, *, signedness_logged: bool) -> str | None:
    """Why ``down`` cannot hold every value of ``col`` (as logged), or None when it can.
    ``signedness_logged``: whether the table map says which numeric columns are UNSIGNED
    (else the downstream's word is taken, as a replica takes it)."""
    if down.generated:
        return None  # never written: the downstream computes it
    kind, dtype = col.type, down.data_type
    family = FAMILIES.get(kind)
    if family is None:
        return None  # a type binrelay does not know: its decoder says so
    if dtype not in family:
        return ANOTHER_TYPE
    if signedness_logged and kind in t.NUMERIC_TYPES and not col.unsigned \
            and down.unsigned:
        return "UNSIGNED downstream: negative values do not fit"
    if kind in _INT_BYTES:
        size, up = _DOWN_INT_BYTES[dtype], _INT_BYTES[kind]
        if signedness_logged and col.unsigned and not down.unsigned:
            up += 1  # into a signed column: one byte more for the same range
        return None if size >= up else "narrower"
    if kind == t.MYSQL_TYPE_NEWDECIMAL:
        if down.precision is None or down.scale is None:
            return None
        if down.scale < col.scale:
            return "fewer digits after the point"
        if down.precision - down.scale < col.precision - col.scale:
            return "fewer digits before the point"
        return None
    if kind == t.MYSQL_TYPE_BIT:
        return None if down.precision is None or down.precision >= col.bits else "narrower"
    if kind in _TEMPORAL:
        if kind not in _TEMPORAL_FSP:
            return OLD_TEMPORAL if down.fsp else None
        return None if (down.fsp or 0) >= col.fsp else "fewer fractional digits"
    if kind in (t.MYSQL_TYPE_ENUM, t.MYSQL_TYPE_SET):
        logged = col.enum_values if kind == t.MYSQL_TYPE_ENUM else col.set_values
        if logged is None or down.members is None:
            return None  # an index, as a replica stores it
        missing = [v for v in logged if v not in down.members]
        if not missing or any("?" in m for m in down.members):
            # (information_schema shows a 4-byte character as '?': not told apart.)
            return None
        return f"no member {missing[0]!r}"
    if dtype in _OWN_STRING_TYPES:
        binary = col.collation is None or charset_of(col.collation) in (None, "binary")
        return None if binary and col.length == _OWN_STRING_TYPES[dtype] else ANOTHER_TYPE
    if kind in _VARYING or kind == t.MYSQL_TYPE_STRING:
        return _string_misfit(col, down)
    if kind in _BLOBS and dtype != "json":
        return _text_misfit(col, down)
    return None  # JSON, geometry, vector, compressed: their kind is all the map tells


def _charsets(col: Column, down: DownstreamColumn) -> tuple[str, str, str | None]:
    """(upstream's set, downstream's set, why they do not go together): the upstream's as
    logged, else the downstream's (rows logged without it are read as the downstream's;
    so are those of a collation binrelay does not know, whose bytes it passes on)."""
    there = canonical_charset(down.charset) or "binary"
    here = canonical_charset(charset_of(col.collation)) or there
    if here == there:
        return here, there, None
    if "binary" in (here, there):
        return here, there, ("bytes upstream, text downstream" if here == "binary"
                             else "text upstream, bytes downstream")
    if here in MULTI_BYTE_KEPT:
        # Its values travel as their bytes (the rows decoder's reading of such text is not
        # the server's), which a column of another set would store unconverted.
        return here, there, (f"{here} upstream, {there} downstream: binrelay writes {here}"
                             " values as their bytes, into a column of that set only")
    if there in _UNICODE or here == "ascii" or (there in _BMP and here not in _SUPPLEMENTARY):
        return here, there, None
    return here, there, f"{here} upstream, {there} downstream"


def _string_misfit(col: Column, down: DownstreamColumn) -> str | None:
    if col.length <= 0 or down.char_length is None:
        return None
    here, _there, wrong = _charsets(col, down)
    if wrong is not None:
        return wrong
    # CHAR and VARCHAR count characters; the table map gives the bytes of the longest value.
    chars = col.length // MBMAXLEN.get(here, 1)
    return None if down.char_length >= chars else "narrower"


def _text_misfit(col: Column, down: DownstreamColumn) -> str | None:
    longest = _TEXT_BYTES.get(col.length)
    if longest is None or down.octet_length is None:
        return None
    here, there, wrong = _charsets(col, down)
    if wrong is not None:
        return wrong
    # TEXT and BLOB count bytes: the most characters upstream, in the downstream's bytes
    # (the same bytes where one set's encoding is the other's: ascii into any set of
    # single-byte ASCII, utf8mb3 into utf8mb4).
    same_bytes = here == there or (here == "ascii" and MBMINLEN.get(there, 1) == 1) or \
        (here, there) == ("utf8mb3", "utf8mb4")
    if not same_bytes:
        longest = longest // MBMINLEN.get(here, 1) * MBMAXLEN.get(there, 1)
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
        return f"{_TEMPORAL[kind]}({col.fsp})" if col.fsp else _TEMPORAL[kind]
    if kind in _VARYING or kind == t.MYSQL_TYPE_STRING:
        name = "char" if kind == t.MYSQL_TYPE_STRING else "varchar"
        if charset == "binary":
            return ("binary" if name == "char" else "varbinary") + f"({col.length})"
        if charset is None:
            return f"{name} of {col.length} bytes"
        return f"{name}({col.length // MBMAXLEN.get(canonical_charset(charset) or '', 1)})" \
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
