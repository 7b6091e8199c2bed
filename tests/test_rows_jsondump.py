"""``dump --json``'s lines: the fast writer (rows/jsondump.py, _speedups.json_rows) prints
what the specification (json_line over the change scanner's row changes) does, byte for byte.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binrelay.errors import BinlogFormatError
from binrelay.rows import coltypes as t
from binrelay.rows import jsondump
from binrelay.rows.compiler import row_decoder
from binrelay.rows.decimal import _DIG2BYTES as DIG2BYTES
from binrelay.rows.decimal import decimal_size
from binrelay.rows.events import DELETE, INSERT, UPDATE, Location, iter_rows
from binrelay.rows.jsondump import json_line, json_lines, json_plan, write_json_lines
from binrelay.rows.reader import iter_file_changes, iter_file_rows_runs
from binrelay.rows.scanner import row_error
from binrelay.rows.tablemap import Column, TableMap
from binrelay.rows.temporal import FRAC_BYTES
from captures import capture, capture_binlogs

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
    for (etype, offset, where, table, op, partial_json, _pr, _pa, data, p, stop, first,
         second) in iter_file_rows_runs(path):
        try:
            yield from iter_rows(table, op, partial_json, data, p, stop, first, second, where)
        except BinlogFormatError:
            raise
        except Exception as exc:
            raise row_error(where.file, etype, offset, exc) from exc


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_scan_events_decoded_are_scan(path: Path) -> None:
    assert _outcome(_runs_decoded(path)) == _outcome(iter_file_changes(path))


# --- the writer against the specification -----------------------------------------------------


def _written(paths: list[Path]) -> tuple[bytes, str | None]:
    out = io.BytesIO()
    try:
        write_json_lines(paths, out)
    except BinlogFormatError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


def _specified(paths: list[Path]) -> tuple[bytes, str | None]:
    lines, error = _outcome(json_lines(paths))
    return "".join(line + "\n" for line in lines).encode(), error


def test_writer_prints_the_specification_on_every_capture(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fast = {"events": 0}
    real = jsondump.json_rows_c
    assert real is not None, "binrelay._speedups was not built"

    def counting(*args):  # type: ignore[no-untyped-def]
        done = real(*args)
        fast["events"] += done >= 0
        return done

    monkeypatch.setattr(jsondump, "json_rows_c", counting)
    for path in CAPTURES:
        assert _written([path]) == _specified([path]), path
    assert _written(CAPTURES[:5]) == _specified(CAPTURES[:5])
    # Most captures' tables are of the common types: their lines came from the C writer.
    assert fast["events"] >= 40


def test_writer_without_speedups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsondump, "json_rows_c", None)
    assert _written(CAPTURES) == _specified(CAPTURES)


def test_an_error_comes_after_the_lines_before_it(tmp_path: Path) -> None:
    # A rows event cut short: the lines of the events before it, then the scanner's error.
    source = capture("mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    cut = tmp_path / "cut.000001"
    cut.write_bytes(source[:len(source) * 2 // 3])
    written, error = _written([cut])
    assert error is not None and (written, error) == _specified([cut])
    assert written.count(b"\n") > 3


# --- json_rows on made-up tables and images ----------------------------------------------------

UTF8MB4, LATIN1, BINARY, UCS2 = 45, 8, 63, 35


def _col(i: int, typ: int, **kw: Any) -> Column:
    return Column(index=i, type=typ, binlog_type=typ, meta=0, nullable=True,
                  name=f"{kw.pop('name', 'c')}{i}", **kw)


def _text(draw: st.DrawFn) -> bytes:
    """Mostly UTF-8 text with what JSON escapes and trailing spaces; sometimes any bytes."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=40))
    chars = st.one_of(st.characters(codec="utf-8"),
                      st.sampled_from('"\\\n\r\t\b\f\x00\x1f\x7f é€😀\u2028'))
    text = draw(st.text(chars, max_size=30)) + " " * draw(st.integers(0, 2))
    return text.encode("utf-8")


def _int(width: int, unsigned: bool) -> st.SearchStrategy[bytes]:
    lo, hi = (0, 2 ** (8 * width) - 1) if unsigned else (-(2 ** (8 * width - 1)),
                                                        2 ** (8 * width - 1) - 1)
    return st.integers(lo, hi).map(lambda v: v.to_bytes(width, "little", signed=not unsigned))


def _prefixed(width: int, data: bytes) -> bytes:
    return len(data).to_bytes(width, "little") + data


def _raw(size: int, draw: st.DrawFn) -> bytes:
    """Any bytes, mostly small values (ENUM indexes and SET bits within the names)."""
    if draw(st.booleans()):
        return draw(st.integers(0, 4)).to_bytes(size, "little")
    return draw(st.binary(min_size=size, max_size=size))


def _decimal(precision: int, scale: int, draw: st.DrawFn) -> bytes:
    """A DECIMAL as the binlog packs it (rows/decimal.py reads it); sometimes any bytes."""
    size = decimal_size(precision, scale)
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(min_size=size, max_size=size))
    intg = precision - scale
    digits = draw(st.text("0123456789", min_size=precision, max_size=precision))
    if draw(st.booleans()):
        digits = "0" * (precision - 1) + digits[-1]
    whole, frac = digits[:intg], digits[intg:]
    groups = ([whole[:intg % 9]] if intg % 9 else []) + [
        whole[i:i + 9] for i in range(intg % 9, intg, 9)]
    groups += [frac[i:i + 9] for i in range(0, scale, 9)]
    packed = bytearray(b"".join(int(g).to_bytes(DIG2BYTES[len(g)], "big") for g in groups))
    packed[0] |= 0x80
    return bytes(~x & 0xFF for x in packed) if draw(st.booleans()) else bytes(packed)


# (column, how a value of it is stored)
KINDS: list[tuple[Callable[[int], Column], Callable[[st.DrawFn], bytes]]] = [
    *[(partial(_col, typ=typ, unsigned=u), partial(lambda w, u, d: d(_int(w, u)), w, u))
      for typ, w in ((t.MYSQL_TYPE_TINY, 1), (t.MYSQL_TYPE_SHORT, 2), (t.MYSQL_TYPE_INT24, 3),
                     (t.MYSQL_TYPE_LONG, 4), (t.MYSQL_TYPE_LONGLONG, 8)) for u in (False, True)],
    (partial(_col, typ=t.MYSQL_TYPE_YEAR), lambda d: d(st.binary(min_size=1, max_size=1))),
    (partial(_col, typ=t.MYSQL_TYPE_FLOAT, length=4),
     lambda d: struct.pack("<f", d(st.floats(width=32)))),
    (partial(_col, typ=t.MYSQL_TYPE_DOUBLE, length=8), lambda d: struct.pack("<d", d(st.floats()))),
    (partial(_col, typ=t.MYSQL_TYPE_VARCHAR, collation=UTF8MB4, length=200),
     lambda d: _prefixed(1, _text(d))),
    (partial(_col, typ=t.MYSQL_TYPE_VARCHAR, collation=UTF8MB4, length=1000, name="wide é"),
     lambda d: _prefixed(2, _text(d))),
    (partial(_col, typ=t.MYSQL_TYPE_STRING, collation=UTF8MB4, length=160),
     lambda d: _prefixed(1, _text(d))),
    (partial(_col, typ=t.MYSQL_TYPE_VARCHAR, collation=LATIN1, length=50, name='q"uote'),
     lambda d: _prefixed(1, _text(d))),
    (partial(_col, typ=t.MYSQL_TYPE_STRING, collation=LATIN1, length=50),
     lambda d: _prefixed(1, _text(d))),
    (partial(_col, typ=t.MYSQL_TYPE_VARCHAR, collation=BINARY, length=50),
     lambda d: _prefixed(1, d(st.binary(max_size=40)))),
    (partial(_col, typ=t.MYSQL_TYPE_STRING, collation=BINARY, length=8),
     lambda d: _prefixed(1, d(st.binary(max_size=8)))),
    (partial(_col, typ=t.MYSQL_TYPE_BLOB, collation=UTF8MB4, length=2),
     lambda d: _prefixed(2, _text(d))),
    (partial(_col, typ=t.MYSQL_TYPE_BLOB, collation=BINARY, length=3),
     lambda d: _prefixed(3, d(st.binary(max_size=40)))),
    *[(partial(_col, typ=t.MYSQL_TYPE_NEWDECIMAL, precision=prec, scale=scale,
                length=decimal_size(prec, scale)), partial(_decimal, prec, scale))
      for prec, scale in ((1, 0), (9, 9), (10, 2), (18, 9), (20, 10), (30, 0), (65, 30))],
    # BIT, ENUM and SET as any bytes of their size: indexes and bits past the names too.
    *[(partial(_col, typ=typ, length=n, **names), partial(_raw, n)) for typ, n, names in (
        (t.MYSQL_TYPE_BIT, 3, {}), (t.MYSQL_TYPE_ENUM, 2, {}), (t.MYSQL_TYPE_SET, 3, {}),
        (t.MYSQL_TYPE_ENUM, 1, {"enum_values": ("a", 'q"uote', "é", "x,y")}),
        (t.MYSQL_TYPE_SET, 1, {"set_values": ("a", "b\\", "é", "d", "\n")}),
        (t.MYSQL_TYPE_SET, 2, {"set_values": tuple("abcdefghi")}))],
    # Temporal values as any bytes of their size: zero, partial and invalid dates too.
    (partial(_col, typ=t.MYSQL_TYPE_DATE), lambda d: d(st.binary(min_size=3, max_size=3))),
    *[(partial(_col, typ=typ, fsp=fsp),
       partial(lambda n, d: d(st.binary(min_size=n, max_size=n)), size + FRAC_BYTES[fsp]))
      for typ, size in ((t.MYSQL_TYPE_DATETIME2, 5), (t.MYSQL_TYPE_TIMESTAMP2, 4),
                        (t.MYSQL_TYPE_TIME2, 3)) for fsp in range(7)],
    (partial(_col, typ=t.MYSQL_TYPE_VARCHAR, collation=UCS2, length=50),  # not in C: Python
     lambda d: _prefixed(1, d(st.text(st.characters(max_codepoint=0xFFFF,
                                                     exclude_categories=["Cs"]),
                                       max_size=10)).encode("utf-16-be"))),
    # UCS2 VARCHAR and CHAR as any bytes: lone surrogates and cut units stay bytes.
    *[(partial(_col, typ=typ, collation=UCS2, length=50),
       lambda d: _prefixed(1, d(st.binary(max_size=12))))
      for typ in (t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_STRING)],
]


@st.composite
def tables_and_events(draw: st.DrawFn, whole: bool = False, only: Any = None
                      ) -> tuple[TableMap, str, int, int, bytes]:
    """A table of the kinds above (``only``: those its column passes) and the images of one
    rows event of it (``whole``: images of every column)."""
    allowed = [k for k in range(len(KINDS)) if only is None or only(KINDS[k][0](0))]
    kinds = draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=10))
    columns = tuple(KINDS[k][0](i) for i, k in enumerate(kinds))
    table = TableMap(7, draw(st.sampled_from(["db", "dé", 'd"b'])), "t", columns)
    op = draw(st.sampled_from([INSERT, UPDATE, DELETE]))
    all_bits = (1 << len(columns)) - 1
    present = all_bits if whole else draw(st.integers(1, all_bits))
    present_after = (all_bits if whole else draw(st.integers(1, all_bits))) \
        if op == UPDATE else present

    def image(bits: int) -> bytes:
        cols = [i for i in range(len(columns)) if bits >> i & 1]
        nulls = draw(st.integers(0, (1 << len(cols)) - 1))
        values = b"".join(KINDS[kinds[i]][1](draw) for j, i in enumerate(cols)
                          if not nulls >> j & 1)
        return nulls.to_bytes((len(cols) + 7) // 8, "little") + values

    rows = draw(st.integers(1, 3))
    data = b"".join(image(present) + (image(present_after) if op == UPDATE else b"")
                    for _ in range(rows))
    return table, op, present, present_after, data


def _valid(table: TableMap, before: Any, after: Any) -> bool:
    """Whether every text value decoded without a surrogate (json_rows takes the rest)."""
    values = [v for image in (before, after) if image for v in image]
    return not any(isinstance(v, str) and not _encodes(v) for v in values)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=tables_and_events())
def test_json_rows_prints_what_json_line_does(
        case: tuple[TableMap, str, int, int, bytes]) -> None:
    _check_json_rows(*case)


@pytest.mark.parametrize("fsp", range(7))
def test_json_rows_temporal_edges(fsp: int) -> None:
    # Zero TIMESTAMP with and without a fraction, a fraction past a second (carried), the
    # smallest and largest TIME, negative zero, the zero DATETIME.
    columns = tuple(_col(i, typ, fsp=fsp) for i, typ in enumerate(
        (t.MYSQL_TYPE_TIMESTAMP2, t.MYSQL_TYPE_TIME2, t.MYSQL_TYPE_DATETIME2)))
    fb = FRAC_BYTES[fsp]
    table = TableMap(7, "db", "t", columns)
    images = []
    for frac in (b"\x00" * fb, b"\xff" * fb, b"\x01" * fb):
        for secs, time, dt in ((0, 0x800000, 0x8000000000), (1, 0, 0),
                               (0, 0xFFFFFF, 0xFFFFFFFFFF), (2**32 - 1, 0x7FFFFF, 0)):
            images.append(b"\x00" + secs.to_bytes(4, "big") + frac
                          + time.to_bytes(3, "big") + frac + dt.to_bytes(5, "big") + frac)
    _check_json_rows(table, INSERT, 7, 7, b"".join(images))


def _check_json_rows(table: TableMap, op: str, present: int, present_after: int,
                     data: bytes) -> None:
    assert jsondump.json_rows_c is not None, "binrelay._speedups was not built"
    first = row_decoder(table, present)
    second = row_decoder(table, present_after) if op == UPDATE else None
    where = Location("/x/é.000001", 4, 99, "0-1-2", 0)
    try:
        changes = list(iter_rows(table, op, False, data, 0, len(data), first, second, where))
    except (ValueError, IndexError):  # a DECIMAL group with too many digits, an ENUM index
        # or SET bit past the names: json_rows leaves it to Python
        changes = None
    plan = json_plan(table, present)
    plan_after = json_plan(table, present_after) if op == UPDATE else None
    used = present | present_after
    in_c = all(c.collation != UCS2 for c in table.columns if used >> c.index & 1)
    assert (plan is not None and (op != UPDATE or plan_after is not None)) == in_c
    if not in_c:
        return
    prefix = (b'{"file": "/x/\xc3\xa9.000001", "pos": 4, "end_pos": 99, "gtid": "0-1-2", '
              b'"schema": ' + json.dumps(table.schema, ensure_ascii=False).encode()
              + b', "table": "t", "op": "' + op.encode() + b'", "before": ')
    out = bytearray(b"kept")
    done = jsondump.json_rows_c(out, data, 0, len(data), {INSERT: 0, UPDATE: 1, DELETE: 2}[op],
                                prefix, plan, plan_after)
    if changes is None:
        assert done == -1 and bytes(out) == b"kept"
        return
    want = "".join(json_line(where, table, op, ch.before, ch.after) + "\n"
                   for ch in changes).encode()
    valid = all(_valid(table, ch.before, ch.after) for ch in changes)
    # Latin-1 text that is not ASCII is left to Python too.
    ascii_only = all(v.isascii() for ch in changes for image in (ch.before, ch.after) if image
                     for c, v in zip(table.columns, image, strict=True)
                     if c.collation == LATIN1 and isinstance(v, str))
    if valid and ascii_only:
        assert done == len(data)
        assert bytes(out) == b"kept" + want
    else:
        assert done == -1 and bytes(out) == b"kept"


def test_json_rows_leaves_a_short_image_to_python() -> None:
    assert jsondump.json_rows_c is not None, "binrelay._speedups was not built"
    table = TableMap(7, "db", "t", (_col(0, t.MYSQL_TYPE_LONG), _col(1, t.MYSQL_TYPE_VARCHAR,
                                                                     collation=UTF8MB4,
                                                                     length=20)))
    plan = json_plan(table, 3)
    assert plan is not None
    image = b"\x00" + (5).to_bytes(4, "little") + b"\x03abc"
    for cut in range(1, len(image)):
        out = bytearray()
        assert jsondump.json_rows_c(out, image, 0, cut, 0, b"{", plan, None) == -1
        assert out == b""
    out = bytearray()
    assert jsondump.json_rows_c(out, image, 0, len(image), 0, b"{", plan, None) == len(image)
    assert out == b'{null, "after": {"c0": 5, "c1": "abc"}}\n'


# --- the sync's reader of whole plain images (_speedups.image_tuples, events.row_images) ---

TUPLE_KINDS = {t.MYSQL_TYPE_TINY, t.MYSQL_TYPE_SHORT, t.MYSQL_TYPE_INT24, t.MYSQL_TYPE_LONG,
               t.MYSQL_TYPE_LONGLONG, t.MYSQL_TYPE_YEAR, t.MYSQL_TYPE_FLOAT,
               t.MYSQL_TYPE_DOUBLE, t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_STRING,
               t.MYSQL_TYPE_BLOB, t.MYSQL_TYPE_BIT}


def _tuple_kind(c: Column) -> bool:
    # (ENUM and SET as their numbers when no names are logged)
    return (c.type in TUPLE_KINDS and c.collation != UCS2) or (
        c.type in (t.MYSQL_TYPE_ENUM, t.MYSQL_TYPE_SET) and not c.enum_values
        and not c.set_values)


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=st.one_of(tables_and_events(whole=True, only=_tuple_kind),
                      tables_and_events(whole=True)))
def test_image_tuples_make_what_the_decoders_do(
        case: tuple[TableMap, str, int, int, bytes]) -> None:
    """C reads integers, floats, BIT, UTF-8 and ASCII text (CHAR's trailing spaces
    dropped) and bytes (BINARY padded) into the tuples the compiled decoders make; an
    event it cannot read whole (Latin-1 text that is not ASCII, an image past the event)
    is theirs; tables of other columns have no plan."""
    from binrelay.rows import events
    from binrelay.rows.events import row_images
    from binrelay.rows.plans import tuple_plan

    c_reader = events.image_tuples_c
    assert c_reader is not None, "binrelay._speedups was not built"
    table, op, present, present_after, data = case
    first = row_decoder(table, present, planner=tuple_plan)
    second = row_decoder(table, present_after, planner=tuple_plan) if op == UPDATE else None
    plain = all(_tuple_kind(c) for c in table.columns)
    assert (first.plan is not None) == plain  # type: ignore[attr-defined]
    if not plain:
        return
    events.image_tuples_c = None  # the compiled decoders
    try:
        want = row_images(table, op, False, data, 0, len(data), first, second)
    except (ValueError, IndexError, struct.error):
        want = None
    finally:
        events.image_tuples_c = c_reader
    got = c_reader(data, 0, len(data), {INSERT: 0, UPDATE: 1, DELETE: 2}[op],
                   first.plan, None if second is None else second.plan)  # type: ignore
    if got is not None:
        assert repr(got) == repr(want)  # (repr: a NaN is a NaN)
        return
    latin1 = [c.index for c in table.columns if c.collation == LATIN1]
    assert want is None or any(not image[i].isascii() for pair in want for image in pair
                               if image is not None for i in latin1 if image[i] is not None)
