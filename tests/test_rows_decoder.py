"""The event decoder on hand-built events: table id reuse, decoding from mid-file, partial
JSON applied to a full before image, MySQL's large JSON format, temporal encodings."""

from __future__ import annotations

import datetime as dt
import struct

import pytest

from binlog_builder import (
    TABLE_MAP,
    WRITE_ROWS,
    WRITE_ROWS_V1,
    event,
    fde_event,
    table_map_body,
    write_rows_body,
)
from binrelay.binlog.parse import parse_format_description
from binrelay.errors import BinlogFormatError, ChecksumMismatchError, IncompleteEventError
from binrelay.rows import EventDecoder, RowsEvent, TableMapEvent, mysqljson, temporal

# --- table ids ------------------------------------------------------------------------------


def _table_map(table_id: int, table: str, types: bytes, meta: bytes = b"") -> bytes:
    return (table_id.to_bytes(6, "little") + b"\x01\x00" + b"\x03app\x00"
            + bytes([len(table)]) + table.encode() + b"\x00" + bytes([len(types)]) + types
            + bytes([len(meta)]) + meta + b"\xff" * ((len(types) + 7) // 8))


def test_table_ids_mean_one_table_per_statement() -> None:
    dec = EventDecoder()
    dec.decode(fde_event(flavor="mariadb", checksum=True))
    dec.decode(event(TABLE_MAP, table_map_body(5, table="t1"), log_pos=0, checksum=True))
    first = dec.decode(event(WRITE_ROWS_V1, write_rows_body(5, [7]), log_pos=0, checksum=True))
    assert isinstance(first, RowsEvent) and first.stmt_end
    # The next statement reuses id 5 for another table, with other columns.
    tm = event(TABLE_MAP, _table_map(5, "t2", b"\x08\x01"), log_pos=0, checksum=True)
    assert isinstance(dec.decode(tm), TableMapEvent)
    rows = struct.pack("<6sHBBB", (5).to_bytes(6, "little"), 1, 2, 3, 0) + struct.pack(
        "<qb", 1 << 40, -1)
    second = dec.decode(event(WRITE_ROWS_V1, rows, log_pos=0, checksum=True))
    assert [(c.table_name, c.after) for c in second.rows()] == [("t2", (1 << 40, -1))]
    # The rows of the first event stay decodable with their own table map.
    assert [(c.table_name, c.after) for c in first.rows()] == [("t1", (7,))]
    # A statement whose rows name an id its table maps did not define is corrupt.
    dec.decode(event(TABLE_MAP, table_map_body(6, table="t3"), log_pos=0, checksum=True))
    with pytest.raises(BinlogFormatError, match="no TABLE_MAP for table id 5"):
        dec.decode(event(WRITE_ROWS_V1, write_rows_body(5, [1]), log_pos=0, checksum=True),
                   offset=1234)


def test_decoders_share_parsed_table_maps_and_their_row_decoders() -> None:
    # A Spark worker decodes every partition of every batch with a new decoder.
    def decoded(flavor: str) -> RowsEvent:
        dec = EventDecoder()
        dec.decode(fde_event(flavor=flavor, checksum=True))
        dec.decode(event(TABLE_MAP, table_map_body(5, table="shared"), log_pos=0,
                         checksum=True))
        ev = dec.decode(event(WRITE_ROWS_V1, write_rows_body(5, [7]), log_pos=0,
                              checksum=True))
        assert isinstance(ev, RowsEvent) and [c.after for c in ev.rows()] == [(7,)]
        return ev

    a, b = decoded("mariadb"), decoded("mariadb")
    assert a.table is b.table and a.decode_first is b.decode_first
    # Parsed under another format, the same bytes are parsed again.
    assert decoded("mysql").table is not a.table


def test_decoding_from_the_middle_of_a_file_with_a_known_fde() -> None:
    fde = parse_format_description(fde_event(flavor="mysql", checksum=True))
    dec = EventDecoder(fde=fde)
    dec.decode(event(TABLE_MAP, table_map_body(9), log_pos=0, checksum=True))
    ev = dec.decode(event(WRITE_ROWS, write_rows_body(9, [1, 2], v2=True), log_pos=0,
                          checksum=True))
    assert [c.after for c in ev.rows()] == [(1,), (2,)]


def test_bad_checksum_and_torn_events() -> None:
    dec = EventDecoder(path="f")
    dec.decode(fde_event(flavor="mariadb", checksum=True))
    raw = bytearray(event(TABLE_MAP, table_map_body(1), log_pos=0, checksum=True))
    raw[25] ^= 1
    with pytest.raises(ChecksumMismatchError):
        dec.decode(bytes(raw), 100)
    with pytest.raises(IncompleteEventError) as err:
        dec.decode(bytes(raw[:30]), 100)
    assert (err.value.path, err.value.offset) == ("f", 100)


# --- binary JSON: a reference encoder written from json_binary.h, for the large format ----


def _jsonb(value: object, large: bool = False) -> bytes:
    t, data = _jsonb_value(value, large)
    return bytes([t]) + data


def _jsonb_value(value: object, large: bool) -> tuple[int, bytes]:
    if value is None or isinstance(value, bool):
        return 4, bytes([{None: 0, True: 1, False: 2}[value]])
    if isinstance(value, int):
        return (9, struct.pack("<q", value)) if value < 0 else (10, struct.pack("<Q", value))
    if isinstance(value, float):
        return 11, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        n, head = len(raw), b""
        while True:
            head += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                break
        return 12, head + raw
    w = 4 if large else 2
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    is_obj = isinstance(value, dict)
    if is_obj:
        items.sort(key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
    header = 2 * w + len(items) * ((w + 2 if is_obj else 0) + 1 + w)
    keys = b"".join(k.encode() for k, _ in items) if is_obj else b""
    key_entries, value_entries, values = b"", b"", b""
    koff = header
    for k, _ in items if is_obj else []:
        key_entries += koff.to_bytes(w, "little") + len(k.encode()).to_bytes(2, "little")
        koff += len(k.encode())
    voff = header + len(keys)
    for _, v in items:
        if v is None or isinstance(v, bool):  # literals are always inlined
            value_entries += b"\x04" + _jsonb_value(v, large)[1].ljust(w, b"\0")
            continue
        if isinstance(v, int) and -(1 << 15) <= v < (1 << 15):
            value_entries += b"\x05" + (v & 0xFFFF).to_bytes(2, "little").ljust(w, b"\0")
            continue
        t, data = _jsonb_value(v, large)
        value_entries += bytes([t]) + voff.to_bytes(w, "little")
        values += data
        voff += len(data)
    size = header + len(keys) + len(values)
    body = (len(items).to_bytes(w, "little") + size.to_bytes(w, "little") + key_entries
            + value_entries + keys + values)
    return (1 if large else 0) if is_obj else (3 if large else 2), body


def test_large_json_documents() -> None:
    doc = {"k" * 60000: [1, -2, 3.5, None, True, "é" * 40000], "a": {"b": [-70000, 2**63]}}
    text = mysqljson.binary_to_text(_jsonb(doc, large=True))
    assert text.startswith('{"a": {"b": [-70000, 9223372036854775808]}, "kkk')
    assert text.endswith(': [1, -2, 3.5, null, true, "' + "é" * 40000 + '"]}')


def test_json_text_is_mysqls() -> None:
    doc = {"b": 1.0, "aa": "tab\t\"q\"\u0001", "a": [1e300, 1e-7, 0.1, -0.0]}
    assert mysqljson.binary_to_text(_jsonb(doc)) == (
        '{"a": [1e300, 1e-7, 0.1, -0.0], "b": 1.0, "aa": "tab\\t\\"q\\"\\u0001"}')


# --- partial JSON with a full before image --------------------------------------------------


def test_partial_json_update_is_applied_to_the_before_image() -> None:
    dec = EventDecoder()
    dec.decode(fde_event(flavor="mysql", checksum=True))
    dec.decode(event(TABLE_MAP, _table_map(3, "j", b"\x03\xf5", b"\x04"), log_pos=0,
                     checksum=True))
    before_doc = _jsonb({"a": 1, "list": [1, 2, 3], "gone": "x"})
    path_value = [(0, "$.a", _jsonb(True)), (1, '$."new key"', _jsonb([])),
                  (1, "$.list[1]", _jsonb("ins")), (2, "$.gone", None)]
    diffs = b""
    for op, path, value in path_value:
        diffs += bytes([op, len(path)]) + path.encode()
        if value is not None:
            diffs += bytes([len(value)]) + value
    rows = ((3).to_bytes(6, "little") + b"\x01\x00" + b"\x02\x00" + b"\x02\x03\x03"
            + b"\x00" + struct.pack("<i", 1) + struct.pack("<I", len(before_doc)) + before_doc
            + b"\x01\x01" + b"\x00" + struct.pack("<i", 1) + struct.pack("<I", len(diffs))
            + diffs)
    ev = dec.decode(event(39, rows, log_pos=0, checksum=True))
    (change,) = list(ev.rows())
    assert change.before == (1, '{"a": 1, "gone": "x", "list": [1, 2, 3]}')
    assert change.after == (1, '{"a": true, "list": [1, "ins", 2, 3], "new key": []}')


# --- temporal encodings, hand-packed -------------------------------------------------------


def test_temporal_encodings() -> None:
    # TIME2(6) -00:00:00.000001: the whole packed value is negated.
    raw = (0x800000000000 - 1).to_bytes(6, "big")
    assert temporal.time2_from_bytes(raw, 3) == -dt.timedelta(microseconds=1)
    # TIME2(2) -01:00:00.50: integer part -1h then fraction -50 centiseconds.
    packed = -(((1 << 12) << 8) + 50)
    raw = (packed + (0x800000 << 8)).to_bytes(4, "big")
    assert temporal.time2_from_bytes(raw, 1) == -dt.timedelta(hours=1, milliseconds=500)
    # DATETIME2(0) of a zero date, and of a partial one.
    assert str(temporal.datetime2_from_bytes((0x8000000000).to_bytes(5, "big"), 0)) == (
        "0000-00-00 00:00:00")
    ym = 2023 * 13 + 0
    v = (ym << 22) | (15 << 17) | (1 << 12) | (2 << 6) | 3
    value = temporal.datetime2_from_bytes((v + 0x8000000000).to_bytes(5, "big"), 0)
    assert isinstance(value, temporal.MysqlDateTime) and str(value) == "2023-00-15 01:02:03"
    assert temporal.timestamp2_from_bytes(b"\0\0\0\0", 0) == temporal.ZERO_DATETIME


# --- UTF-16 and UTF-32 values no text holds ------------------------------------------------


def test_wide_charsets_keep_the_bytes_of_units_that_do_not_decode() -> None:
    from binrelay.rows import coltypes as t
    from binrelay.rows.compiler import row_decoder
    from binrelay.rows.tablemap import Column, TableMap

    def col(i: int, typ: int, collation: int) -> Column:
        return Column(index=i, type=typ, binlog_type=typ, meta=0, nullable=True, name=f"c{i}",
                      collation=collation, length=40)

    ucs2, utf32 = 35, 60
    table = TableMap(9, "app", "w", (col(0, t.MYSQL_TYPE_VARCHAR, ucs2),
                                     col(1, t.MYSQL_TYPE_STRING, ucs2),
                                     col(2, t.MYSQL_TYPE_VARCHAR, utf32)))
    decode = row_decoder(table, 0b111)

    def image(*values: bytes) -> bytes:
        return b"\x00" + b"".join(bytes([len(v)]) + v for v in values)

    # Valid: text, CHAR's trailing spaces dropped.
    row, _ = decode(image("é".encode("utf-16-be"), "ab  ".encode("utf-16-be"),
                          "x".encode("utf-32-be")), 0, 1000)
    assert row == ("é", "ab", "x")
    # A lone surrogate in ucs2 (CHAR's encoded trailing spaces dropped all the same), U+D800
    # and a cut unit in utf32: their bytes.
    row, _ = decode(image(b"\xd8\x00", b"\xdc\x00\x00A\x00 \x00 ", b"\x00\x00\xd8\x00"), 0, 1000)
    assert row == (b"\xd8\x00", b"\xdc\x00\x00A", b"\x00\x00\xd8\x00")
    row, _ = decode(image(b"\x00A\x00", b"\x00 \xd8", b"\x00\x00\x00"), 0, 1000)
    assert row == (b"\x00A\x00", b"\x00 \xd8", b"\x00\x00\x00")
