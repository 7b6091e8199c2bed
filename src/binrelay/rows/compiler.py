"""Row image decoders, generated once per (table map, columns bitmap) and cached.

A row image is: a NULL bitmap over the columns present in the image, then each non-NULL
present column's value in its binlog encoding.  Interpreting that column by column with a
type switch per value is what makes pure-Python decoders slow.  Here, the first time a table
map meets a given columns bitmap, :func:`row_decoder` writes the Python source of a function
specialised to it — every offset, struct format, charset and converter fixed in advance,
neighbouring fixed-width columns read by one ``struct.unpack_from`` when none of them is NULL —
and compiles it.  The function is kept on the TableMap (which the event decoder caches by its
bytes), so a busy table pays for compilation once.

How each type is read is chosen from :data:`SPECS`, a table keyed by the column's real type;
each entry returns either a fixed-width read (a struct code plus an optional converter) or
the source lines of a variable-width read.

Generated functions never trust lengths: they may read past the image (a short slice, or a
``struct.error``), but check ``p <= end`` before returning a row, and the caller turns any
exception into ``BinlogFormatError``.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from binrelay.binlog.bytes import LenencError, read_lenenc
from binrelay.rows import coltypes as t
from binrelay.rows import mysqljson, temporal
from binrelay.rows.charsets import (
    WIDE_CODECS,
    exact_single_byte,
    lossy_bytes,
    python_codec,
    single_byte_table,
    wide_text,
)
from binrelay.rows.decimal import decode_decimal
from binrelay.rows.mariadb_types import uncompressed
from binrelay.rows.tablemap import Column, TableMap


class _AbsentType:
    """The value of a column that is not in a row image (partial images: MINIMAL/NOBLOB)."""

    __slots__ = ()
    _instance: _AbsentType | None = None

    def __new__(cls) -> _AbsentType:
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT = _AbsentType()


class RowTruncated(ValueError):
    """A row image runs past the end of its event."""


class UnsupportedColumnType(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class JsonTree:
    """A MySQL JSON value kept as a tree (PARTIAL_UPDATE_ROWS images), until the diffs of the
    after image are applied to it."""

    value: Any


RowDecoder = Callable[[bytes, int, int], tuple[tuple[Any, ...], int]]


@dataclass(frozen=True, slots=True)
class Fixed:
    """A fixed-width value: ``code`` is a struct format item, ``convert`` an expression of
    ``{v}`` (the raw unpacked value), or None when the raw value is the value."""

    code: str
    convert: str | None = None


@dataclass(frozen=True, slots=True)
class Var:
    """A variable-width value: source lines that read at ``p``, set ``{v}`` and advance ``p``."""

    lines: tuple[str, ...]


class _Ctx:
    """Names bound in the generated function's namespace."""

    def __init__(self, *, json_tree: bool = False) -> None:
        self.json_tree = json_tree
        self.ns: dict[str, Any] = {
            "_fb": int.from_bytes, "_Truncated": RowTruncated, "ABSENT": ABSENT,
        }
        self._ids: dict[int, str] = {}

    def const(self, obj: Any, hint: str = "k") -> str:
        key = id(obj)
        name = self._ids.get(key)
        if name is None:
            name = f"_{hint}{len(self.ns)}"
            self.ns[name] = obj
            self._ids[key] = name
        return name


# --- per-type specs ----------------------------------------------------------------------

_INT_CODES = {
    t.MYSQL_TYPE_TINY: "b", t.MYSQL_TYPE_SHORT: "h", t.MYSQL_TYPE_LONG: "i",
    t.MYSQL_TYPE_LONGLONG: "q",
}


def _spec_int(col: Column, ctx: _Ctx) -> Fixed:
    code = _INT_CODES[col.type]
    return Fixed(code.upper() if col.unsigned else code)


def _spec_int24(col: Column, ctx: _Ctx) -> Fixed:
    signed = "False" if col.unsigned else "True"
    return Fixed("3s", f"_fb({{v}}, 'little', signed={signed})")


def _spec_float(col: Column, ctx: _Ctx) -> Fixed:
    if col.type == t.MYSQL_TYPE_FLOAT and col.length in (0, 4):
        return Fixed("f")
    return Fixed("d" if col.length in (0, 8) else "f")


def _spec_year(col: Column, ctx: _Ctx) -> Fixed:
    return Fixed("B", "({v} + 1900 if {v} else 0)")


def _spec_decimal(col: Column, ctx: _Ctx) -> Fixed:
    fn = ctx.const(decode_decimal, "dec")
    return Fixed(f"{col.length}s", f"{fn}({{v}}, {col.precision}, {col.scale})")


def _spec_bit(col: Column, ctx: _Ctx) -> Fixed:
    return Fixed(f"{col.length}s", "_fb({v}, 'big')")


def _spec_date(col: Column, ctx: _Ctx) -> Fixed:
    fn = ctx.const(temporal.date_from_int, "date")
    return Fixed("3s", f"{fn}(_fb({{v}}, 'little'))")


def _spec_time2(col: Column, ctx: _Ctx) -> Fixed:
    fb = temporal.FRAC_BYTES[col.fsp]
    fn = ctx.const(temporal.time2_from_bytes, "time")
    return Fixed(f"{3 + fb}s", f"{fn}({{v}}, {fb})")


def _spec_datetime2(col: Column, ctx: _Ctx) -> Fixed:
    fb = temporal.FRAC_BYTES[col.fsp]
    fn = ctx.const(temporal.datetime2_from_bytes, "dt")
    return Fixed(f"{5 + fb}s", f"{fn}({{v}}, {fb})")


def _spec_timestamp2(col: Column, ctx: _Ctx) -> Fixed:
    fb = temporal.FRAC_BYTES[col.fsp]
    fn = ctx.const(temporal.timestamp2_from_bytes, "ts")
    return Fixed(f"{4 + fb}s", f"{fn}({{v}}, {fb})")


def _spec_timestamp(col: Column, ctx: _Ctx) -> Fixed:
    fn = ctx.const(temporal.timestamp_from_seconds, "ts")
    return Fixed("I", f"{fn}({{v}})")


def _spec_datetime(col: Column, ctx: _Ctx) -> Fixed:
    fn = ctx.const(temporal.datetime_from_int, "dt")
    return Fixed("Q", f"{fn}({{v}})")


def _spec_time(col: Column, ctx: _Ctx) -> Fixed:
    fn = ctx.const(temporal.time_from_int, "time")
    return Fixed("3s", f"{fn}(_fb({{v}}, 'little', signed=True))")


def _spec_enum(col: Column, ctx: _Ctx) -> Fixed:
    code = {1: "B", 2: "H"}.get(col.length)
    if code is None:
        raise UnsupportedColumnType(f"ENUM with a {col.length}-byte value")
    if col.enum_values is None:
        return Fixed(code)
    # Index 0 is the error value MySQL stores for an invalid one, which reads as ''.  Written
    # back as '' it is stored as index 0 again, unless '' is a member, which '' then names:
    # there it is the number 0, which the server stores as index 0 (with a warning).
    names = ctx.const((enum_zero(col.enum_values), *col.enum_values), "enum")
    return Fixed(code, f"{names}[{{v}}]")


def enum_zero(members: tuple[str, ...]) -> str | int:
    """What an ENUM's index 0 (the error value) decodes to: '' or, when '' is a member,
    0."""
    return 0 if "" in members else ""


_SET_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _set_text(names: tuple[str, ...], value: int) -> str:
    if value >> len(names):
        raise ValueError(f"SET value 0x{value:x} has bits beyond its {len(names)} members")
    return ",".join([name for i, name in enumerate(names) if value >> i & 1])


def _spec_set(col: Column, ctx: _Ctx) -> Fixed:
    if not 1 <= col.length <= 8:
        raise UnsupportedColumnType(f"SET with a {col.length}-byte value")
    code = _SET_CODES.get(col.length)
    raw = "{v}" if code else "_fb({v}, 'little')"
    if col.set_values is None:
        return Fixed(code or f"{col.length}s", None if code else raw)
    fn = ctx.const(partial(_set_text, col.set_values), "set")
    return Fixed(code or f"{col.length}s", f"{fn}({raw})")


def _text_expr(col: Column, ctx: _Ctx, x: str) -> str:
    """Expression turning the bytes expression ``x`` into the column's value."""
    codec = python_codec(col.charset)
    if codec in WIDE_CODECS:
        fn = ctx.const(_WIDE_TEXT[codec], "wide")
        return f"{fn}({x})"
    if codec == "utf-8":
        return f"{x}.decode({codec!r}, 'surrogateescape')"
    if codec is not None:
        # The other multi-byte sets (cp932, sjis, eucjpms, gbk, big5...) keep their bytes:
        # Python's codecs are not the server's tables (shift_jis reads 0x815F as U+FF3C,
        # which the server's sjis does not hold; cp932 reads 0x8790 and 0x81E0 as one
        # character; euc_jp lacks eucjpms's extensions), so their text would reach the
        # downstream changed; a binary string is stored into a column of the set as is.
        return f"bytes({x})"
    table = single_byte_table(col.charset)
    if table is not None:
        decode = _SINGLE_BYTE.get(table)
        if decode is None:
            lossy = lossy_bytes(table)
            decode = _SINGLE_BYTE[table] = partial(_single_byte, table) if lossy is None \
                else partial(exact_single_byte, table, lossy)
        fn = ctx.const(decode, "sb")
        if table[:128] == _IDENTITY_ASCII:
            # Most text is ASCII, and the C ascii decoder is twice as fast as a charmap;
            # inline, without a Python call per value (``x`` is a name: read twice).
            return f"({x}.decode('ascii') if {x}.isascii() else {fn}({x}))"
        return f"{fn}({x})"
    return x  # binary, or no charset logged: keep the bytes


_WIDE_TEXT = {codec: partial(wide_text, codec) for codec in WIDE_CODECS}


def _wide_char(codec: str, data: bytes) -> str | bytes:
    """A CHAR value in UTF-16/UTF-32: its trailing spaces dropped, as text or bytes."""
    value = wide_text(codec, data)
    if isinstance(value, str):
        return value.rstrip(" ")
    space = " ".encode(codec)
    if len(value) % len(space):
        return value  # a cut unit: where the padding starts is anyone's guess
    end = len(value)
    while end >= len(space) and value[end - len(space):end] == space:
        end -= len(space)
    return value[:end]


_WIDE_CHAR = {codec: partial(_wide_char, codec) for codec in WIDE_CODECS}


def _strip_spaces(value: str | bytes) -> str | bytes:
    return value.rstrip(" ") if isinstance(value, str) else value.rstrip(b" ")


def _single_byte(table: str, data: bytes) -> str:
    return codecs.charmap_decode(data, "strict", table)[0]


_IDENTITY_ASCII = "".join(chr(i) for i in range(128))
_SINGLE_BYTE: dict[str, Callable[[bytes], str]] = {}  # one decoder per table, shared


def _prefixed(width: int, *exprs: Callable[[str], str]) -> Var:
    """A value behind a little-endian length prefix of ``width`` bytes; each of ``exprs`` in
    turn makes the value from the name holding the one before (its bytes first)."""
    if width == 1:
        head = "n = p + 1 + b[p]"
    elif width == 2:
        head = "n = p + 2 + (b[p] | b[p + 1] << 8)"
    else:
        head = f"n = p + {width} + _fb(b[p:p + {width}], 'little')"
    values = (expr("{v}") for expr in exprs)
    convert = tuple("{v} = " + value for value in values if value != "{v}")
    return Var((head, f"{{v}} = b[p + {width}:n]", *convert, "p = n"))


def _spec_varchar(col: Column, ctx: _Ctx) -> Var:
    return _prefixed(1 if col.length < 256 else 2, lambda x: _text_expr(col, ctx, x))


def _spec_char(col: Column, ctx: _Ctx) -> Var:
    width = 1 if col.length < 256 else 2
    if python_codec(col.charset) is None and single_byte_table(col.charset) is None:
        if col.is_binary:
            # BINARY(n): the server drops the trailing 0x00 padding when it logs the value.
            return _prefixed(width, lambda x: f"{x}.ljust({col.length}, b'\\x00')")
        return _prefixed(width, lambda x: x)
    # CHAR: trailing spaces are not part of the value (the server strips them on read; a NO
    # PAD collation may log them).
    codec = python_codec(col.charset)
    if codec in WIDE_CODECS:
        fn = ctx.const(_WIDE_CHAR[codec], "wide")
        return _prefixed(width, lambda x: f"{fn}({x})")
    if codec == "utf-8" or (codec is None and lossy_bytes(single_byte_table(col.charset)
                                                          or "") is None):
        return _prefixed(width, lambda x: _text_expr(col, ctx, x) + ".rstrip(' ')")
    # Text or bytes (see _text_expr): a space is the byte 0x20 in these sets, never a part
    # of a multi-byte character.
    strip = ctx.const(_strip_spaces, "strip")
    return _prefixed(width, lambda x: f"{strip}({_text_expr(col, ctx, x)})")


def _spec_blob(col: Column, ctx: _Ctx) -> Var:
    return _prefixed(col.length, lambda x: _text_expr(col, ctx, x))


def _compressed(width: int, longest: int, col: Column, ctx: _Ctx) -> Var:
    """A COMPRESSED column's value of at most ``longest`` bytes: uncompressed, then read as
    text (in two steps: a text expression may read its name twice)."""
    fn = ctx.const(partial(uncompressed, longest=longest), "unz")
    return _prefixed(width, lambda x: f"{fn}({x})", lambda x: _text_expr(col, ctx, x))


def _spec_varchar_compressed(col: Column, ctx: _Ctx) -> Var:
    return _compressed(1 if col.length < 256 else 2, col.length, col, ctx)


def _spec_blob_compressed(col: Column, ctx: _Ctx) -> Var:
    return _compressed(col.length, (1 << 8 * col.length) - 1, col, ctx)


def _spec_bytes_prefixed(col: Column, ctx: _Ctx) -> Var:
    return _prefixed(col.length, lambda x: x)


def _spec_json(col: Column, ctx: _Ctx) -> Var:
    if ctx.json_tree:
        fn = ctx.const(_json_tree, "jt")
    else:
        fn = ctx.const(mysqljson.binary_to_text, "json")
    return _prefixed(col.length, lambda x: f"{fn}({x})")


def _json_tree(raw: bytes) -> JsonTree:
    return JsonTree(mysqljson.parse(raw))


def _vector(raw: bytes) -> tuple[float, ...]:
    if len(raw) % 4:
        raise ValueError(f"VECTOR value of {len(raw)} bytes is not a whole number of floats")
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def _spec_vector(col: Column, ctx: _Ctx) -> Var:
    fn = ctx.const(_vector, "vec")
    return _prefixed(col.length, lambda x: f"{fn}({x})")


def _spec_null(col: Column, ctx: _Ctx) -> Var:
    return Var(("{v} = None",))


Spec = Fixed | Var
SpecBuilder = Callable[[Column, _Ctx], Spec]

#: How to read each column type (the real type: CHAR, ENUM, SET resolved).
SPECS: dict[int, SpecBuilder] = {
    t.MYSQL_TYPE_TINY: _spec_int,
    t.MYSQL_TYPE_SHORT: _spec_int,
    t.MYSQL_TYPE_LONG: _spec_int,
    t.MYSQL_TYPE_LONGLONG: _spec_int,
    t.MYSQL_TYPE_INT24: _spec_int24,
    t.MYSQL_TYPE_FLOAT: _spec_float,
    t.MYSQL_TYPE_DOUBLE: _spec_float,
    t.MYSQL_TYPE_YEAR: _spec_year,
    t.MYSQL_TYPE_NEWDECIMAL: _spec_decimal,
    t.MYSQL_TYPE_BIT: _spec_bit,
    t.MYSQL_TYPE_DATE: _spec_date,
    t.MYSQL_TYPE_TIME2: _spec_time2,
    t.MYSQL_TYPE_DATETIME2: _spec_datetime2,
    t.MYSQL_TYPE_TIMESTAMP2: _spec_timestamp2,
    t.MYSQL_TYPE_TIMESTAMP: _spec_timestamp,
    t.MYSQL_TYPE_DATETIME: _spec_datetime,
    t.MYSQL_TYPE_TIME: _spec_time,
    t.MYSQL_TYPE_ENUM: _spec_enum,
    t.MYSQL_TYPE_SET: _spec_set,
    t.MYSQL_TYPE_VARCHAR: _spec_varchar,
    t.MYSQL_TYPE_VAR_STRING: _spec_varchar,
    t.MYSQL_TYPE_STRING: _spec_char,
    t.MYSQL_TYPE_BLOB: _spec_blob,
    t.MYSQL_TYPE_TINY_BLOB: _spec_blob,
    t.MYSQL_TYPE_MEDIUM_BLOB: _spec_blob,
    t.MYSQL_TYPE_LONG_BLOB: _spec_blob,
    t.MYSQL_TYPE_VARCHAR_COMPRESSED: _spec_varchar_compressed,
    t.MYSQL_TYPE_BLOB_COMPRESSED: _spec_blob_compressed,
    t.MYSQL_TYPE_GEOMETRY: _spec_bytes_prefixed,
    t.MYSQL_TYPE_JSON: _spec_json,
    t.MYSQL_TYPE_VECTOR: _spec_vector,
    t.MYSQL_TYPE_NULL: _spec_null,
}


def spec_for(col: Column, ctx: _Ctx) -> Spec:
    builder = SPECS.get(col.type)
    if builder is None:
        raise UnsupportedColumnType(
            f"column {col.label} has type {col.type_name} ({col.type}), which binrelay cannot "
            "decode")
    return builder(col, ctx)


# --- generation ---------------------------------------------------------------------------


def _bit(k: int) -> str:
    return hex(1 << k)


def _emit_fixed_run(run: list[tuple[int, int, Column, Fixed]], ctx: _Ctx,
                    out: list[str], ind: str) -> None:
    """Columns read with one struct when none is NULL, else one by one."""
    mask = sum(1 << k for _, k, _, _ in run)
    fmt = "<" + "".join(spec.code for _, _, _, spec in run)
    s = struct.Struct(fmt)
    name = ctx.const(s, "S")
    raws = [f"r{i}" for i, _, _, _ in run]
    out.append(f"{ind}if nb & {hex(mask)}:")
    for i, k, _col, spec in run:
        _emit_single_fixed(i, k, spec, ctx, out, ind + "    ")
    out.append(f"{ind}else:")
    # Unpack straight into the values when there is nothing to convert.
    targets = [raw if spec.convert else f"v{i}" for (i, _, _, spec), raw in zip(
        run, raws, strict=True)]
    out.append(f"{ind}    {', '.join(targets)} = {name}.unpack_from(b, p)")
    out.append(f"{ind}    p += {s.size}")
    for (i, _k, _col, spec), raw in zip(run, raws, strict=True):
        if spec.convert:
            out.append(f"{ind}    v{i} = {spec.convert.format(v=raw)}")


def _emit_single_fixed(i: int, k: int, spec: Fixed, ctx: _Ctx, out: list[str],
                       ind: str) -> None:
    s = struct.Struct("<" + spec.code)
    name = ctx.const(s, "S")
    out.append(f"{ind}if nb & {_bit(k)}:")
    out.append(f"{ind}    v{i} = None")
    out.append(f"{ind}else:")
    if spec.convert:
        out.append(f"{ind}    r{i} = {name}.unpack_from(b, p)[0]")
        out.append(f"{ind}    v{i} = {spec.convert.format(v=f'r{i}')}")
    else:
        out.append(f"{ind}    v{i} = {name}.unpack_from(b, p)[0]")
    out.append(f"{ind}    p += {s.size}")


def _emit_var(i: int, k: int, spec: Var, out: list[str], ind: str, *,
              partial_bit: int | None = None, ctx: _Ctx | None = None,
              col: Column | None = None) -> None:
    out.append(f"{ind}if nb & {_bit(k)}:")
    out.append(f"{ind}    v{i} = None")
    if partial_bit is not None:
        assert ctx is not None and col is not None
        fn = ctx.const(_partial_json_value, "pj")
        out.append(f"{ind}elif pb & {_bit(partial_bit)}:")
        out.extend(f"{ind}    {line.format(v=f'v{i}')}" for line in _prefixed(
            col.length, lambda x: f"{fn}({x})").lines)
    out.append(f"{ind}else:")
    for line in spec.lines:
        out.append(f"{ind}    {line.format(v=f'v{i}')}")


def _partial_json_value(raw: bytes) -> mysqljson.JsonPartialUpdate:
    return mysqljson.JsonPartialUpdate(mysqljson.parse_diffs(raw))


def _net_length(b: bytes, p: int) -> tuple[int, int]:
    # Unchecked, like the rest of a row decoder: its ``p <= end`` check catches a short one.
    try:
        return read_lenenc(b, p)
    except LenencError:
        raise ValueError("bad length-encoded integer in a row image") from None


def generate_source(table: TableMap, present: int, *, partial_json: bool = False,
                    json_tree: bool = False) -> tuple[str, _Ctx]:
    """The source of the row decoder for ``present`` (bit i = column i is in the image).

    ``partial_json``: the after image of a PARTIAL_UPDATE_ROWS event (value options and
    partial JSON bits first); ``json_tree``: JSON values as :class:`JsonTree`, for those events.
    """
    ctx = _Ctx(json_tree=json_tree or partial_json)
    cols = [c for c in table.columns if present >> c.index & 1]
    nbytes = (len(cols) + 7) // 8
    out = ["def _row(b, p, end):"]
    ind = "    "
    if not cols and not partial_json:
        # An image of no columns takes no bytes: rows of it would never end.
        out.append(f"{ind}raise ValueError('row image with no columns')")
        return "\n".join(out) + "\n", ctx
    if partial_json:
        # PARTIAL_UPDATE_ROWS after-image: value options, then (with PARTIAL_JSON_UPDATES) one
        # bit per JSON column of the table, whether or not it is in the image.
        jbytes = (table.json_column_count + 7) // 8
        out.append(f"{ind}vo, p = {ctx.const(_net_length, 'nl')}(b, p)")
        out.append(f"{ind}if vo & 1:")
        out.append(f"{ind}    pb = _fb(b[p:p + {jbytes}], 'little')")
        out.append(f"{ind}    p += {jbytes}")
        out.append(f"{ind}else:")
        out.append(f"{ind}    pb = 0")
    if nbytes == 1:
        out.append(f"{ind}nb = b[p]")
    elif nbytes:
        out.append(f"{ind}nb = _fb(b[p:p + {nbytes}], 'little')")
    else:
        out.append(f"{ind}nb = 0")
    if nbytes:
        out.append(f"{ind}p += {nbytes}")
    json_index = {c.index: j for j, c in enumerate(
        c for c in table.columns if c.type == t.MYSQL_TYPE_JSON)}
    run: list[tuple[int, int, Column, Fixed]] = []

    def flush() -> None:
        if len(run) > 1:
            _emit_fixed_run(run, ctx, out, ind)
        elif run:
            i, k, _col, spec = run[0]
            _emit_single_fixed(i, k, spec, ctx, out, ind)
        run.clear()

    for k, col in enumerate(cols):
        spec = spec_for(col, ctx)
        if isinstance(spec, Fixed):
            run.append((col.index, k, col, spec))
            continue
        flush()
        pbit = json_index.get(col.index) if partial_json else None
        _emit_var(col.index, k, spec, out, ind, partial_bit=pbit, ctx=ctx, col=col)
    flush()
    out.append(f"{ind}if p > end:")
    out.append(f"{ind}    raise _Truncated('row image runs past the end of the event')")
    values = ", ".join(f"v{c.index}" if present >> c.index & 1 else "ABSENT"
                       for c in table.columns)
    out.append(f"{ind}return ({values}{',' if len(table.columns) == 1 else ''}), p")
    return "\n".join(out) + "\n", ctx


def compile_row_decoder(table: TableMap, present: int, *, partial_json: bool = False,
                        json_tree: bool = False) -> RowDecoder:
    source, ctx = generate_source(table, present, partial_json=partial_json,
                                  json_tree=json_tree)
    code = compile(source, f"<row decoder {table.schema}.{table.table}>", "exec")
    exec(code, ctx.ns)  # the source is ours, built from validated metadata only
    fn: RowDecoder = ctx.ns["_row"]
    return fn


def row_decoder(table: TableMap, present: int, *, partial_json: bool = False,
                json_tree: bool = False,
                planner: Callable[[TableMap, int], bytes | None] | None = None) -> RowDecoder:
    """The cached decoder of ``table`` for the columns bitmap ``present``.

    ``planner`` (``rows.plans.tuple_plan``) gives a new decoder of images of every column
    its ``plan``: how the C reader of ``rows.events.row_images`` reads the same images
    (None: it does not)."""
    key = (present, partial_json, json_tree)
    fn = table.decoders.get(key)
    if fn is None:
        fn = compile_row_decoder(table, present, partial_json=partial_json,
                                 json_tree=json_tree)
        whole = present == (1 << len(table.columns)) - 1
        fn.plan = planner(table, present) if (  # type: ignore[attr-defined]
            planner is not None and whole and not partial_json and not json_tree) else None
        table.decoders[key] = fn
    return fn
