"""TABLE_MAP events: the column schema every row image is decoded with.

The event carries the column types and their metadata (lengths, precision, fsp ...), which
columns may be NULL and, with ``binlog_row_metadata=MINIMAL``/``FULL`` (MySQL 8.0.1+,
MariaDB 10.5+), optional metadata: signedness, collations, names, ENUM/SET values, geometry
types, primary key, visibility, vector dimensions.  It describes the table as it was when the
event was written, which is exactly what decoding needs: no server queries, no drift after DDL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from binrelay.binlog.bytes import LenencError, read_lenenc
from binrelay.rows import coltypes as t
from binrelay.rows.charsets import BINARY_COLLATION, charset_of, decoder_for
from binrelay.rows.decimal import decimal_size

# Optional metadata field types (Table_map_event::Optional_metadata_field_type).
SIGNEDNESS = 1
DEFAULT_CHARSET = 2
COLUMN_CHARSET = 3
COLUMN_NAME = 4
SET_STR_VALUE = 5
ENUM_STR_VALUE = 6
GEOMETRY_TYPE = 7
SIMPLE_PRIMARY_KEY = 8
PRIMARY_KEY_WITH_PREFIX = 9
ENUM_AND_SET_DEFAULT_CHARSET = 10
ENUM_AND_SET_COLUMN_CHARSET = 11
COLUMN_VISIBILITY = 12
VECTOR_DIMENSIONALITY = 13

GEOMETRY_TYPE_NAMES = ("GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT",
                       "MULTILINESTRING", "MULTIPOLYGON", "GEOMETRYCOLLECTION")


class MetadataError(ValueError):
    """Raised for a malformed TABLE_MAP; the event decoder adds file and offset."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column as the TABLE_MAP describes it.

    ``type`` is the real type (CHAR/ENUM/SET resolved from MYSQL_TYPE_STRING's metadata);
    ``binlog_type`` is the byte in the event.  Fields that do not apply to the type are 0,
    None or empty.  ``unsigned``, ``collation``, ``name``, ``enum_values``/``set_values``,
    ``geometry_type``, ``visible`` and ``vector_dimensions`` come from optional metadata and
    keep their defaults when the server did not log it.
    """

    index: int
    type: int
    binlog_type: int
    meta: int
    nullable: bool
    name: str | None = None
    unsigned: bool = False
    collation: int | None = None
    #: Bytes of the longest value (CHAR/VARCHAR/BINARY), of the length prefix (BLOB, TEXT,
    #: JSON, GEOMETRY, VECTOR), of the stored value (ENUM/SET pack length, FLOAT/DOUBLE).
    length: int = 0
    precision: int = 0
    scale: int = 0
    fsp: int = 0
    bits: int = 0
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    geometry_type: int | None = None
    visible: bool = True
    vector_dimensions: int | None = None

    @property
    def charset(self) -> str | None:
        """Character set name (``utf8mb4``, ``latin1``, ``binary`` ...), None if not logged."""
        return charset_of(self.collation)

    @property
    def is_binary(self) -> bool:
        return self.collation == BINARY_COLLATION

    @property
    def type_name(self) -> str:
        return t.type_name(self.type)

    @property
    def label(self) -> str:
        """The name, or ``@N`` (1-based, like mysqlbinlog) when names were not logged."""
        return self.name if self.name is not None else f"@{self.index + 1}"


@dataclass(frozen=True, slots=True)
class TableMap:
    table_id: int
    schema: str
    table: str
    columns: tuple[Column, ...]
    flags: int = 0
    #: Column indexes of the primary key, in key order (empty when not logged or no key).
    primary_key: tuple[int, ...] = ()
    #: Prefix length per primary key part (0 = the whole column), same order.
    primary_key_prefixes: tuple[int, ...] = ()
    has_names: bool = False
    #: Optional metadata field types present, in order (for diagnostics and dump).
    metadata_fields: tuple[int, ...] = ()
    #: Compiled row decoders, filled lazily by ``binrelay.rows.compiler``.
    decoders: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False,
                                     hash=False)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.label for c in self.columns)

    @property
    def json_column_count(self) -> int:
        return sum(1 for c in self.columns if c.type == t.MYSQL_TYPE_JSON)


# --- parsing --------------------------------------------------------------------------------


class _Buf:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise MetadataError("TABLE_MAP_EVENT truncated")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def u8(self) -> int:
        if self.pos >= self.end:
            raise MetadataError("TABLE_MAP_EVENT truncated")
        self.pos += 1
        return self.data[self.pos - 1]

    def packed(self) -> int:
        try:
            value, self.pos = read_lenenc(self.data, self.pos, self.end)
        except LenencError as exc:
            if exc.truncated:
                raise MetadataError("TABLE_MAP_EVENT truncated") from None
            raise MetadataError(
                f"bad length-encoded integer 0x{exc.first:02x} in TABLE_MAP_EVENT") from None
        return value

    def string(self) -> bytes:
        return self.take(self.packed())


def parse_table_map(body: bytes, *, table_id_len: int = 6, mariadb: bool = False,
                    start: int = 0, end: int | None = None) -> TableMap:
    """Parse a TABLE_MAP body (after the 19-byte header, without the checksum).

    ``table_id_len`` is 4 for post-header length 6 (5.0 era), else 6.  ``mariadb`` matters
    for one counting rule: MariaDB lists GEOMETRY columns among the character columns of the
    charset fields, MySQL does not.
    """
    b = _Buf(body, start, len(body) if end is None else end)
    table_id = int.from_bytes(b.take(table_id_len), "little")
    flags = int.from_bytes(b.take(2), "little")
    schema = b.take(b.u8()).decode("utf-8", "surrogateescape")
    b.take(1)
    table = b.take(b.u8()).decode("utf-8", "surrogateescape")
    b.take(1)
    ncols = b.packed()
    if ncols > 4096 or ncols > b.end - b.pos:
        raise MetadataError(f"TABLE_MAP_EVENT claims {ncols} columns")
    types = b.take(ncols)
    meta_len = b.packed()
    meta_end = b.pos + meta_len
    if meta_end > b.end:
        raise MetadataError("TABLE_MAP_EVENT metadata truncated")
    cols: list[dict[str, Any]] = []
    for i, bt in enumerate(types):
        cols.append(_column_metadata(i, bt, b))
    if b.pos != meta_end:
        raise MetadataError(
            f"TABLE_MAP_EVENT metadata is {meta_len} bytes, the column types need "
            f"{meta_len - (meta_end - b.pos)}")
    nulls = int.from_bytes(b.take((ncols + 7) // 8), "little")
    for i, col in enumerate(cols):
        col["nullable"] = bool(nulls >> i & 1)
    extra = _parse_optional(b, cols, mariadb)
    columns = tuple(Column(**col) for col in cols)
    return TableMap(table_id=table_id, schema=schema, table=table, columns=columns, flags=flags,
                    **extra)


def _column_metadata(index: int, bt: int, b: _Buf) -> dict[str, Any]:
    col: dict[str, Any] = {"index": index, "type": bt, "binlog_type": bt, "meta": 0}
    n = t.METADATA_LENGTHS.get(bt, 0)
    raw = b.take(n)
    if n == 1:
        col["meta"] = raw[0]
    elif n == 2:
        col["meta"] = raw[0] << 8 | raw[1]
    if bt in (t.MYSQL_TYPE_STRING, t.MYSQL_TYPE_ENUM, t.MYSQL_TYPE_SET):
        b0, b1 = raw
        if b0 & 0x30 != 0x30:
            # CHAR longer than 255 bytes: two high bits of the length hide in the type byte.
            col["length"] = b1 | (((b0 & 0x30) ^ 0x30) << 4)
            col["type"] = b0 | 0x30
        else:
            col["length"] = b1
            col["type"] = b0
        if col["type"] not in (t.MYSQL_TYPE_STRING, t.MYSQL_TYPE_ENUM, t.MYSQL_TYPE_SET):
            raise MetadataError(f"column {index + 1}: bad real type {col['type']} of a STRING")
    elif bt in (t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VAR_STRING, t.MYSQL_TYPE_VARCHAR_COMPRESSED):
        col["length"] = raw[0] | raw[1] << 8
    elif bt == t.MYSQL_TYPE_BIT:
        col["bits"] = raw[1] * 8 + raw[0]
        col["length"] = raw[1] + (1 if raw[0] else 0)
        if raw[0] > 7 or col["bits"] > 64 or col["bits"] == 0:
            raise MetadataError(f"column {index + 1}: bad BIT metadata {raw.hex()}")
    elif bt == t.MYSQL_TYPE_NEWDECIMAL:
        col["precision"], col["scale"] = raw[0], raw[1]
        if not 0 < raw[0] <= 65 or raw[1] > 30 or raw[1] > raw[0]:
            raise MetadataError(f"column {index + 1}: bad DECIMAL({raw[0]},{raw[1]})")
        col["length"] = decimal_size(raw[0], raw[1])
    elif bt in (t.MYSQL_TYPE_TIME2, t.MYSQL_TYPE_DATETIME2, t.MYSQL_TYPE_TIMESTAMP2):
        col["fsp"] = raw[0]
        if raw[0] > 6:
            raise MetadataError(f"column {index + 1}: fractional precision {raw[0]} > 6")
    elif n == 1:
        col["length"] = raw[0]
        if bt in (t.MYSQL_TYPE_FLOAT, t.MYSQL_TYPE_DOUBLE):
            if raw[0] not in (4, 8):
                raise MetadataError(f"column {index + 1}: bad float size {raw[0]}")
        elif not 1 <= raw[0] <= 4:
            raise MetadataError(f"column {index + 1}: bad length-prefix size {raw[0]}")
    return col


def _is_character(col: dict[str, Any], mariadb: bool) -> bool:
    return col["type"] in t.CHARACTER_TYPES or (mariadb and col["type"] == t.MYSQL_TYPE_GEOMETRY)


def _bits_msb_first(raw: bytes, count: int) -> list[bool]:
    return [bool(raw[i // 8] & (0x80 >> (i % 8))) for i in range(min(count, 8 * len(raw)))]


def _parse_optional(b: _Buf, cols: list[dict[str, Any]], mariadb: bool) -> dict[str, Any]:
    numeric = [c for c in cols if c["type"] in t.NUMERIC_TYPES]
    character = [c for c in cols if _is_character(c, mariadb)]
    enum_set = [c for c in cols if c["type"] in (t.MYSQL_TYPE_ENUM, t.MYSQL_TYPE_SET)]
    enums = [c for c in cols if c["type"] == t.MYSQL_TYPE_ENUM]
    sets = [c for c in cols if c["type"] == t.MYSQL_TYPE_SET]
    geoms = [c for c in cols if c["type"] == t.MYSQL_TYPE_GEOMETRY]
    vectors = [c for c in cols if c["type"] == t.MYSQL_TYPE_VECTOR]
    extra: dict[str, Any] = {}
    fields: list[int] = []
    enum_raw: list[list[bytes]] | None = None
    set_raw: list[list[bytes]] | None = None
    while b.pos < b.end:
        ftype = b.u8()
        length = b.packed()
        if b.pos + length > b.end:
            raise MetadataError(f"TABLE_MAP_EVENT optional metadata field {ftype} truncated")
        fields.append(ftype)
        f = _Buf(b.data, b.pos, b.pos + length)
        b.pos += length
        if ftype == SIGNEDNESS:
            for col, unsigned in zip(numeric, _bits_msb_first(f.take(length), len(numeric)),
                                     strict=False):
                col["unsigned"] = unsigned
        elif ftype in (DEFAULT_CHARSET, ENUM_AND_SET_DEFAULT_CHARSET):
            targets = character if ftype == DEFAULT_CHARSET else enum_set
            default = f.packed()
            for col in targets:
                col["collation"] = default
            while f.pos < f.end:
                idx, coll = f.packed(), f.packed()
                if idx >= len(targets):
                    raise MetadataError("TABLE_MAP_EVENT charset for a column that is not there")
                targets[idx]["collation"] = coll
        elif ftype in (COLUMN_CHARSET, ENUM_AND_SET_COLUMN_CHARSET):
            targets = character if ftype == COLUMN_CHARSET else enum_set
            for col in targets:
                if f.pos >= f.end:
                    break
                col["collation"] = f.packed()
        elif ftype == COLUMN_NAME:
            for col in cols:
                col["name"] = f.string().decode("utf-8", "surrogateescape")
            extra["has_names"] = True
        elif ftype in (SET_STR_VALUE, ENUM_STR_VALUE):
            lists: list[list[bytes]] = []
            while f.pos < f.end:
                lists.append([f.string() for _ in range(f.packed())])
            if ftype == SET_STR_VALUE:
                set_raw = lists
            else:
                enum_raw = lists
        elif ftype == GEOMETRY_TYPE:
            for col in geoms:
                if f.pos >= f.end:
                    break
                col["geometry_type"] = f.packed()
        elif ftype == SIMPLE_PRIMARY_KEY:
            pk: list[int] = []
            while f.pos < f.end:
                pk.append(f.packed())
            extra["primary_key"] = tuple(pk)
            extra["primary_key_prefixes"] = (0,) * len(pk)
        elif ftype == PRIMARY_KEY_WITH_PREFIX:
            pk, prefixes = [], []
            while f.pos < f.end:
                pk.append(f.packed())
                prefixes.append(f.packed())
            extra["primary_key"] = tuple(pk)
            extra["primary_key_prefixes"] = tuple(prefixes)
        elif ftype == COLUMN_VISIBILITY:
            for col, visible in zip(cols, _bits_msb_first(f.take(length), len(cols)),
                                    strict=False):
                col["visible"] = visible
        elif ftype == VECTOR_DIMENSIONALITY:
            for col in vectors:
                if f.pos >= f.end:
                    break
                col["vector_dimensions"] = f.packed()
        # Unknown field types are skipped: newer servers add fields, never change old ones.
    if any(i >= len(cols) for i in extra.get("primary_key", ())):
        raise MetadataError("TABLE_MAP_EVENT primary key names a column that is not there")
    # Values are in the column's charset; decode them once the collations are known.
    for raw_lists, targets, key in ((enum_raw, enums, "enum_values"),
                                    (set_raw, sets, "set_values")):
        if raw_lists is None:
            continue
        if len(raw_lists) != len(targets):
            raise MetadataError(f"TABLE_MAP_EVENT has {len(raw_lists)} value lists for "
                                f"{len(targets)} {key.split('_')[0].upper()} columns")
        for col, values in zip(targets, raw_lists, strict=True):
            col[key] = tuple(_decode_name(v, col.get("collation")) for v in values)
    extra["metadata_fields"] = tuple(fields)
    return extra


def _decode_name(raw: bytes, collation: int | None) -> str:
    decode = decoder_for(charset_of(collation) or "utf8mb4")
    return decode(raw) if decode is not None else raw.decode("utf-8", "surrogateescape")
