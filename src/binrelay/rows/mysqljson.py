"""MySQL's binary JSON (the JSON column type of MySQL 5.7+) and partial-update diffs.

MariaDB's JSON is plain text (LONGTEXT) and never comes here.

A document decodes to a small tree: ``dict`` (members in storage order), ``list``, ``str``,
``int``, ``float``, ``bool``, ``None``, ``Decimal`` and :class:`JsonOpaque` / temporal values for
MySQL's opaque scalars.  :func:`to_text` prints the tree as MySQL prints JSON (``CAST(j AS
CHAR)``): ``", "`` and ``": "`` separators, members sorted by key length then bytes, doubles as
the shortest text that reads back to the same double, dates and times as quoted strings.

Layout (``json_binary.h``): a type byte, then the value.  Objects and arrays come in a small
form (2-byte counts and offsets) and a large one (4-byte); both hold a count, the byte size,
key entries (objects), value entries (type + offset, or the value itself when it fits: literals
and 16-bit integers always, 32-bit integers in the large form), then keys and values.  A
corrupt document raises ``ValueError``; the row decoder turns that into our error.
"""

from __future__ import annotations

import base64
import datetime as _dt
import struct
from dataclasses import dataclass
from decimal import Decimal

from binrelay.binlog.bytes import LenencError, read_lenenc
from binrelay.rows.decimal import decode_decimal
from binrelay.rows.temporal import MysqlDate, MysqlDateTime, make_date, make_datetime

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0, 1, 2, 3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING = 4, 5, 6, 7, 8, 9, 10, 11, 12
OPAQUE = 15
LITERAL_NULL, LITERAL_TRUE, LITERAL_FALSE = 0, 1, 2

# Field types of opaque scalars that MySQL prints as something other than base64.
_OPAQUE_DECIMAL = 246
_OPAQUE_DATE, _OPAQUE_TIME, _OPAQUE_DATETIME, _OPAQUE_TIMESTAMP = 10, 11, 12, 7

MAX_DEPTH = 100  # MySQL refuses deeper documents

_S_I16, _S_U16, _S_I32, _S_U32 = (struct.Struct(f) for f in ("<h", "<H", "<i", "<I"))
_S_I64, _S_U64, _S_F64 = (struct.Struct(f) for f in ("<q", "<Q", "<d"))


@dataclass(frozen=True, slots=True)
class JsonOpaque:
    """An opaque scalar MySQL keeps as (field type, bytes), printed as base64."""

    field_type: int
    data: bytes


@dataclass(frozen=True, slots=True)
class JsonTime:
    """A TIME inside JSON (``timedelta`` would lose nothing, but keeps the sign apart)."""

    value: _dt.timedelta


JsonValue = object


class _Budget:
    """Caps the work on one document: a corrupt document whose offsets point back into
    itself must fail, not recurse forever or explode exponentially."""

    __slots__ = ("left",)

    def __init__(self, size: int) -> None:
        self.left = size + 16

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ValueError("JSON document references itself")


def parse(data: bytes) -> JsonValue:
    """Decode a whole binary JSON document.  An empty value is JSON null (MySQL's rule)."""
    if not data:
        return None
    return _value(data[0], data, 1, len(data), _Budget(len(data)), 0)


def _value(t: int, data: bytes, start: int, end: int, budget: _Budget, depth: int) -> JsonValue:
    budget.spend()
    if t <= LARGE_ARRAY:
        if depth >= MAX_DEPTH:
            raise ValueError("JSON document nested too deeply")
        return _container(t, data, start, end, budget, depth + 1)
    if t == LITERAL:
        return _literal(_byte(data, start, end))
    if t == INT16:
        return _unpack(_S_I16, data, start, end)
    if t == UINT16:
        return _unpack(_S_U16, data, start, end)
    if t == INT32:
        return _unpack(_S_I32, data, start, end)
    if t == UINT32:
        return _unpack(_S_U32, data, start, end)
    if t == INT64:
        return _unpack(_S_I64, data, start, end)
    if t == UINT64:
        return _unpack(_S_U64, data, start, end)
    if t == DOUBLE:
        return _unpack(_S_F64, data, start, end)
    if t == STRING:
        length, pos = _varlen(data, start, end)
        if pos + length > end:
            raise ValueError("JSON string truncated")
        return data[pos:pos + length].decode("utf-8", "surrogateescape")
    if t == OPAQUE:
        field_type = _byte(data, start, end)
        length, pos = _varlen(data, start + 1, end)
        if pos + length > end:
            raise ValueError("JSON opaque value truncated")
        return _opaque(field_type, data[pos:pos + length])
    raise ValueError(f"unknown JSON value type {t}")


def _byte(data: bytes, pos: int, end: int) -> int:
    if pos >= end:
        raise ValueError("JSON value truncated")
    return data[pos]


def _unpack(s: struct.Struct, data: bytes, pos: int, end: int) -> int | float:
    if pos + s.size > end:
        raise ValueError("JSON value truncated")
    return s.unpack_from(data, pos)[0]


def _literal(code: int) -> bool | None:
    if code == LITERAL_NULL:
        return None
    if code == LITERAL_TRUE:
        return True
    if code == LITERAL_FALSE:
        return False
    raise ValueError(f"unknown JSON literal {code}")


def _varlen(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Lengths of strings and opaque values: 7 bits a byte, low group first, at most 5 bytes."""
    value = 0
    for i in range(5):
        b = _byte(data, pos + i, end)
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos + i + 1
    raise ValueError("JSON length field too long")


def _container(t: int, data: bytes, start: int, end: int, budget: _Budget,
               depth: int) -> JsonValue:
    large = t in (LARGE_OBJECT, LARGE_ARRAY)
    is_object = t in (SMALL_OBJECT, LARGE_OBJECT)
    off = _S_U32 if large else _S_U16
    w = off.size
    count = _unpack(off, data, start, end)
    size = _unpack(off, data, start + w, end)
    if start + size > end:
        raise ValueError("JSON container larger than its space")
    cend = start + size
    header = 2 * w
    key_entry = w + 2
    value_entry = 1 + w
    needed = header + count * ((key_entry if is_object else 0) + value_entry)
    if needed > size:
        raise ValueError("JSON container too small for its entries")
    ventries = start + header + (count * key_entry if is_object else 0)
    values = []
    for i in range(count):
        e = ventries + i * value_entry
        vt = data[e]
        if vt == LITERAL:
            values.append(_literal(data[e + 1]))
        elif vt == INT16:
            values.append(_S_I16.unpack_from(data, e + 1)[0])
        elif vt == UINT16:
            values.append(_S_U16.unpack_from(data, e + 1)[0])
        elif large and vt == INT32:
            values.append(_S_I32.unpack_from(data, e + 1)[0])
        elif large and vt == UINT32:
            values.append(_S_U32.unpack_from(data, e + 1)[0])
        else:
            voff = off.unpack_from(data, e + 1)[0]
            if voff < needed or start + voff >= cend:
                raise ValueError("JSON value offset out of its container")
            values.append(_value(vt, data, start + voff, cend, budget, depth))
    if not is_object:
        return values
    members: dict[str, JsonValue] = {}
    for i in range(count):
        e = start + header + i * key_entry
        koff = off.unpack_from(data, e)[0]
        klen = _S_U16.unpack_from(data, e + w)[0]
        if koff < needed or start + koff + klen > cend:
            raise ValueError("JSON key out of its container")
        key = data[start + koff:start + koff + klen].decode("utf-8", "surrogateescape")
        members[key] = values[i]
    return members


def _opaque(field_type: int, raw: bytes) -> JsonValue:
    if field_type == _OPAQUE_DECIMAL:
        if len(raw) < 2:
            raise ValueError("JSON decimal truncated")
        return decode_decimal(raw[2:], raw[0], raw[1])
    if field_type in (_OPAQUE_DATE, _OPAQUE_DATETIME, _OPAQUE_TIMESTAMP, _OPAQUE_TIME):
        if len(raw) < 8:
            raise ValueError("JSON temporal value truncated")
        packed = int.from_bytes(raw[:8], "little", signed=True)
        if field_type == _OPAQUE_TIME:
            return JsonTime(_time_from_packed(packed))
        value = _datetime_from_packed(packed)
        if field_type == _OPAQUE_DATE:
            return make_date(value.year, value.month, value.day)
        return value
    return JsonOpaque(field_type, bytes(raw))


def _datetime_from_packed(packed: int) -> _dt.datetime | MysqlDateTime:
    packed = abs(packed)
    ymdhms, frac = packed >> 24, packed & 0xFFFFFF
    ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
    ym = ymd >> 5
    return make_datetime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, frac)


def _time_from_packed(packed: int) -> _dt.timedelta:
    sign = -1 if packed < 0 else 1
    packed = abs(packed)
    hms, frac = packed >> 24, packed & 0xFFFFFF
    seconds = ((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)
    return _dt.timedelta(seconds=sign * seconds, microseconds=sign * frac)


# --- text ---------------------------------------------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
            "\t": "\\t"}
_ESCAPE_TABLE = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPE_TABLE.update({ord(k): v for k, v in _ESCAPES.items()})


def quote(text: str) -> str:
    return '"' + text.translate(_ESCAPE_TABLE) + '"'


def format_double(d: float) -> str:
    """Shortest text that reads back to ``d``; exponents as MySQL writes them (``1e300``)."""
    text = repr(d)
    if "e" in text:
        mantissa, exp = text.split("e")
        text = f"{mantissa}e{int(exp)}"
    return text


def _key_order(item: tuple[str, JsonValue]) -> tuple[int, bytes]:
    raw = item[0].encode("utf-8", "surrogateescape")
    return len(raw), raw


def to_text(value: JsonValue) -> str:
    """``value`` as MySQL prints a JSON value."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def _write(value: JsonValue, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(quote(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(format_double(value))
    elif isinstance(value, dict):
        out.append("{")
        for i, (k, v) in enumerate(sorted(value.items(), key=_key_order)):
            if i:
                out.append(", ")
            out.append(quote(k))
            out.append(": ")
            _write(v, out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(", ")
            _write(v, out)
        out.append("]")
    elif isinstance(value, Decimal):
        out.append(format(value, "f"))
    elif isinstance(value, JsonTime):
        out.append(quote(_time_text(value.value)))
    elif isinstance(value, _dt.datetime | MysqlDateTime):
        out.append(quote(_datetime_text(value)))
    elif isinstance(value, _dt.date | MysqlDate):
        out.append(quote(f"{value.year:04d}-{value.month:02d}-{value.day:02d}"))
    elif isinstance(value, JsonOpaque):
        data = base64.b64encode(value.data).decode("ascii")
        out.append(quote(f"base64:type{value.field_type}:{data}"))
    else:  # pragma: no cover - the decoder builds no other types
        raise TypeError(f"not a JSON value: {value!r}")


def _datetime_text(v: _dt.datetime | MysqlDateTime) -> str:
    return (f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:"
            f"{v.second:02d}.{v.microsecond:06d}")


def _time_text(v: _dt.timedelta) -> str:
    total = v.days * 86400_000000 + v.seconds * 1_000000 + v.microseconds
    sign = "-" if total < 0 else ""
    seconds, micro = divmod(abs(total), 1_000000)
    return f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micro:06d}"


def binary_to_text(data: bytes) -> str:
    return to_text(parse(data))


# --- partial updates (PARTIAL_UPDATE_ROWS_EVENT, binlog_row_value_options=PARTIAL_JSON) ---

REPLACE, INSERT, REMOVE = 0, 1, 2
OPERATION_NAMES = ("REPLACE", "INSERT", "REMOVE")


@dataclass(frozen=True, slots=True)
class JsonDiff:
    """One logical change: ``operation`` at ``path``; ``value`` is None for REMOVE."""

    operation: int
    path: str
    value: JsonValue = None

    @property
    def operation_name(self) -> str:
        return OPERATION_NAMES[self.operation]

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"op": self.operation_name, "path": self.path}
        if self.operation != REMOVE:
            out["value"] = to_text(self.value)
        return out


@dataclass(frozen=True, slots=True)
class JsonPartialUpdate:
    """An after-image JSON value given only as diffs against a before image we do not have
    (``binlog_row_image=MINIMAL``); with the before image the decoder applies the diffs and
    returns the whole document instead."""

    diffs: tuple[JsonDiff, ...]


def _net_length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """MySQL's length-encoded integer (``net_field_length``)."""
    try:
        return read_lenenc(data, pos, end)
    except LenencError as exc:
        raise ValueError("length truncated" if exc.first is None
                         else "bad length-encoded integer") from None


def parse_diffs(data: bytes) -> tuple[JsonDiff, ...]:
    """The diff list of one partially updated column (its 4-byte length already removed)."""
    diffs: list[JsonDiff] = []
    pos, end = 0, len(data)
    while pos < end:
        op = data[pos]
        if op > REMOVE:
            raise ValueError(f"unknown JSON diff operation {op}")
        plen, pos = _net_length(data, pos + 1, end)
        if pos + plen > end:
            raise ValueError("JSON diff path truncated")
        path = data[pos:pos + plen].decode("utf-8", "surrogateescape")
        pos += plen
        value: JsonValue = None
        if op != REMOVE:
            vlen, pos = _net_length(data, pos, end)
            if pos + vlen > end:
                raise ValueError("JSON diff value truncated")
            value = parse(data[pos:pos + vlen])
            pos += vlen
        diffs.append(JsonDiff(op, path, value))
    return tuple(diffs)


def parse_path(path: str) -> list[str | int]:
    """``$.a."b c"[3]`` -> ``["a", "b c", 3]``: the only legs MySQL writes in diffs."""
    if not path.startswith("$"):
        raise ValueError(f"bad JSON path {path!r}")
    legs: list[str | int] = []
    i, n = 1, len(path)
    while i < n:
        c = path[i]
        if c == ".":
            i += 1
            if i < n and path[i] == '"':
                j = i + 1
                chars: list[str] = []
                while j < n and path[j] != '"':
                    if path[j] == "\\" and j + 1 < n:
                        j += 1
                        chars.append({"b": "\b", "f": "\f", "n": "\n", "r": "\r",
                                      "t": "\t"}.get(path[j], path[j]))
                    else:
                        chars.append(path[j])
                    j += 1
                if j >= n:
                    raise ValueError(f"bad JSON path {path!r}")
                legs.append("".join(chars))
                i = j + 1
            else:
                j = i
                while j < n and path[j] not in '.["':
                    j += 1
                if j == i:
                    raise ValueError(f"bad JSON path {path!r}")
                legs.append(path[i:j])
                i = j
        elif c == "[":
            j = path.find("]", i)
            if j < 0 or not path[i + 1:j].strip().isdigit():
                raise ValueError(f"bad JSON path {path!r}")
            legs.append(int(path[i + 1:j]))
            i = j + 1
        elif c.isspace():
            i += 1
        else:
            raise ValueError(f"bad JSON path {path!r}")
    return legs


def apply_diffs(document: JsonValue, diffs: tuple[JsonDiff, ...]) -> JsonValue:
    """Apply diffs as MySQL's ``apply_json_diffs`` does (the root is never a target)."""
    for diff in diffs:
        legs = parse_path(diff.path)
        if not legs:
            raise ValueError("JSON diff targets the root")
        parent = document
        for leg in legs[:-1]:
            parent = _child(parent, leg)
        last = legs[-1]
        if diff.operation == REPLACE:
            if _has(parent, last):
                parent[last] = diff.value
            else:
                raise ValueError(f"JSON diff REPLACE of missing {diff.path}")
        elif diff.operation == INSERT:
            if isinstance(parent, list) and isinstance(last, int):
                parent.insert(min(last, len(parent)), diff.value)
            elif isinstance(parent, dict) and isinstance(last, str):
                parent[last] = diff.value
            else:
                raise ValueError(f"JSON diff INSERT at bad place {diff.path}")
        else:
            if _has(parent, last):
                del parent[last]
            else:
                raise ValueError(f"JSON diff REMOVE of missing {diff.path}")
    return document


def _has(node: JsonValue, leg: str | int) -> bool:
    if isinstance(node, list):
        return isinstance(leg, int) and leg < len(node)
    return isinstance(node, dict) and isinstance(leg, str) and leg in node


def _child(node: JsonValue, leg: str | int) -> JsonValue:
    if isinstance(node, dict) and isinstance(leg, str) and leg in node:
        return node[leg]
    if isinstance(node, list) and isinstance(leg, int) and leg < len(node):
        return node[leg]
    raise ValueError("JSON diff path does not exist in the document")
