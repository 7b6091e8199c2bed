"""MySQL-only encodings, against real MySQL-generated binlogs (../shared/mysql-captures).

MySQL cannot be installed here, so these files (from other projects' test data, described in
the captures' README) are the ground truth for: v2 rows events, MySQL GTIDs (tagged too),
TRANSACTION_PAYLOAD (zstd), PARTIAL_UPDATE_ROWS with JSON diffs, binary JSON (opaque values
too), FULL and MINIMAL TABLE_MAP metadata, VECTOR, partial row images, checksum NONE.
Expected values come from the SQL that produced the files (capture.sql, ddsql.sql, sql.sql)
and from the README's event counts, which were taken by walking the files independently.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
from collections import Counter
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from pathlib import Path
from typing import Any

import pytest

from binrelay.binlog.events import MysqlGtidEvent, OtherEvent, PreviousGtidsEvent
from binrelay.errors import BinlogFormatError, IncompleteEventError, UnfaithfulApplyError
from binrelay.rows import (
    ABSENT,
    JsonPartialUpdate,
    RowChange,
    RowsEvent,
    TableMapEvent,
    decode_files,
)
from binrelay.rows.reader import iter_changes
from binrelay.spark.changes import image_encoder, image_params
from captures import MYSQL_CAPTURES, capture

UTC = dt.UTC

_README_TYPES = {
    "FDE": 15, "QUERY": 2, "STOP": 3, "ROTATE": 4, "INTVAR": 5, "RAND": 13, "USER_VAR": 14,
    "XID": 16, "BEGIN_LOAD_QUERY": 17, "EXECUTE_LOAD_QUERY": 18, "TABLE_MAP": 19,
    "ROWS_QUERY": 29, "WRITE_ROWS_V2": 30, "UPDATE_ROWS_V2": 31, "DELETE_ROWS_V2": 32,
    "GTID": 33, "ANONYMOUS_GTID": 34, "PREVIOUS_GTIDS": 35, "PARTIAL_UPDATE_ROWS": 39,
    "TRANSACTION_PAYLOAD": 40, "GTID_TAGGED": 42, "type 100": 100,
}


def _readme_counts() -> dict[str, Counter[int]]:
    """file (relative to the captures dir) -> event type counts, from the README tables."""
    out: dict[str, Counter[int]] = {}
    folder = ""
    for line in (MYSQL_CAPTURES / "README.md").read_text().splitlines():
        m = re.match(r"### `([^`]+)/`", line)
        if m:
            folder = m.group(1)
            continue
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 7 or not cells[1].startswith("`"):
            continue
        name = cells[1].strip("`")
        counts: Counter[int] = Counter()
        for part in re.split(r"[,;]", cells[5].replace("inside payload (ZSTD):", ",")):
            m = re.match(r"\s*(.+?) (\d+)\s*$", part)
            if m and m.group(1) in _README_TYPES:
                counts[_README_TYPES[m.group(1)]] += int(m.group(2))
        if counts:
            out[f"{folder}/{name}"] = counts
    return out


README_COUNTS = _readme_counts()


def _decode_all(path: Path) -> list[Any]:
    return [loc.event for loc in decode_files([path])]


def _changes(name: str) -> list[RowChange]:
    return list(iter_changes([MYSQL_CAPTURES / name]))


@pytest.mark.parametrize("name", sorted(README_COUNTS))
def test_every_capture_decodes_with_the_readme_event_counts(name: str) -> None:
    path = MYSQL_CAPTURES / name
    if "truncated" in name:
        with pytest.raises(IncompleteEventError) as err:
            _decode_all(path)
        assert err.value.offset == 120 and err.value.path == str(path)
        return
    events = _decode_all(path)
    assert Counter(e.header.event_type for e in events) == README_COUNTS[name]
    # Every row image decodes, by both paths, identically.
    typed = [(c.op, c.before, c.after) for e in events if isinstance(e, RowsEvent)
             for c in e.rows()]
    assert typed == [(c.op, c.before, c.after) for c in _changes(name)]


def test_readme_lists_the_captures() -> None:
    assert len(README_COUNTS) >= 45


# --- zongji: MySQL 8.4, every common type, FULL and MINIMAL metadata ----------------------

ZONGJI_ROW = {
    "id": 1, "i_big": 9223372036854775807, "u_big": 18446744073709551615,
    "dec_col": Decimal("-12345678901234567.0123456789"), "vc": "héllo wörld", "ch": "abc",
    "bin_col": bytes.fromhex("DEADBEEF"), "vb": b"\x01\x02", "txt": "text value",
    "blb": bytes.fromhex("CAFE"), "flt": 1.25, "dbl": -2.5,
    "dt": dt.datetime(2024, 6, 15, 12, 34, 56, 789000),
    "ts": dt.datetime(2024, 6, 15, 12, 34, 56, tzinfo=UTC), "d": dt.date(2024, 6, 15),
    "t": -dt.timedelta(hours=1, minutes=2, seconds=3, microseconds=500000), "y": 2024,
    "e": "b", "e2": "c'd", "s": "x,z", "bt": 0b1000000001,
    # MySQL sorts members by key length, then bytes.
    "js": '{"a": 1, "d": 1.5, "arr": ["x", true, null], "big": 9223372036854775807}',
    "geo": bytes.fromhex("00000000" "0101000000" "000000000000F03F" "0000000000000040"),
    "txt_latin1": "café ñ", "vc_latin1": "Ÿ€ señor", "vc_ucs2": "héllo",
}


def test_zongji_full_metadata_values() -> None:
    changes = _changes("zongji/binlog-mysql84-fullmeta.events.bin")
    assert [c.op for c in changes] == ["insert", "update", "delete", "insert"]
    ins, upd, dele, nulls = changes
    assert ins.after_dict() == ZONGJI_ROW
    table = ins.table
    assert table.primary_key == (0,)
    assert table.columns[2].unsigned and not table.columns[1].unsigned
    assert table.columns[18].enum_values == ("a,b", "c'd", "plain")
    assert table.columns[22].geometry_type == 0  # GEOMETRY
    assert [c.charset for c in table.columns[23:]] == ["latin1", "latin1", "ucs2"]
    # Later images leave out the TEXT/BLOB columns that were not set or changed.
    left_out = {"txt", "blb", "txt_latin1"}
    assert upd.before_dict() == {k: v for k, v in ZONGJI_ROW.items() if k not in left_out}
    assert upd.after_dict() == {**upd.before_dict(), "id": 2, "vc": "updated"}
    assert dele.before_dict() == upd.after_dict()
    assert nulls.after_dict() == {k: (3 if k == "id" else None) for k in ZONGJI_ROW
                                  if k not in left_out}
    assert ins.where is not None and ins.where.gtid == "75029619-787e-11f1-88ef-6acb2cd49b0e:106"


def test_zongji_minimal_metadata_values() -> None:
    changes = _changes("zongji/binlog-mysql84.events.bin")
    ins = changes[0]
    removed = {"e2", "txt_latin1", "vc_latin1", "vc_ucs2"}
    expected = [v for k, v in ZONGJI_ROW.items() if k not in removed]
    # MINIMAL: no names, no ENUM/SET values, but signedness and charsets are there.
    expected[17], expected[18] = 2, 0b101  # ENUM index of 'b', SET bits of 'x,z'
    assert list(ins.after) == expected
    assert not ins.table.has_names and ins.table.columns[0].label == "@1"


# --- DECIMAL matrix (go-mysql, MySQL 5.6) ----------------------------------------------------

def _mysql_decimal(text: str, p: int, s: int) -> Decimal:
    """What MySQL stores for ``text`` in DECIMAL(p, s): rounded half up, clamped to range."""
    with localcontext(Context(prec=100)):
        q = Decimal(text).quantize(Decimal(1).scaleb(-s), rounding=ROUND_HALF_UP)
        top = Decimal(10) ** (p - s) - Decimal(1).scaleb(-s)
        q = max(-top, min(top, q))
        return q.copy_abs() if q.is_zero() else q  # MySQL has no negative zero


def test_decimal_matrix() -> None:
    sql = (MYSQL_CAPTURES / "go-mysql" / "ddsql.sql").read_text()
    cols = [(int(p), int(s)) for p, s in re.findall(r"v\d+_\d+ decimal\((\d+),(\d+)\)", sql)]
    rows = re.findall(r'^\((".*?)\),?$', sql, re.M)
    changes = _changes("go-mysql/tcb-eval002c-bin.003320")
    assert len(changes) == len(rows) == 17
    for change, row in zip(changes, rows, strict=True):
        values = re.findall(r'"([^"]*)"', row)
        assert change.after is not None
        got = change.after[1:1 + len(cols)]
        want = tuple(_mysql_decimal(v, p, s) for v, (p, s) in zip(values, cols, strict=True))
        assert [format(g, "f") for g in got] == [format(w, "f") for w in want]


# --- JSON ---------------------------------------------------------------------------------

def test_partial_json_updates() -> None:
    changes = _changes("rust_mysql_common/json.binlog.000001")
    full = [c for c in changes if c.op == "update" and c.before and c.before[1] is not ABSENT]
    partial = [c for c in changes if c.op == "update" and c.before and c.before[1] is ABSENT]
    assert len(full) == 6 and len(partial) == 6
    assert full[0].before[1] == '{"age": 24, "data": "xxxxxxxxxx", "name": "Joe"}'
    assert full[0].after[1] == '{"age": 25, "data": "xxxxxxxxxx", "name": "Joe"}'
    ages = []
    for change in partial:
        # binlog_row_image=MINIMAL: the before image is the key only, so the diff stays a diff.
        assert change.before == (change.before[0], ABSENT, ABSENT, ABSENT)
        value = change.after[1]
        assert isinstance(value, JsonPartialUpdate)
        (diff,) = value.diffs
        assert (diff.operation_name, diff.path) == ("REPLACE", "$.age")
        assert diff.value == change.after[3]
        ages.append(diff.value)
    assert ages == [26, 34, 42, 26, 34, 42]


def test_a_partial_json_update_without_its_document_stops_the_apply() -> None:
    """A replica applies the diffs to the document it holds; the sync, which writes whole
    values, has none: it stops with one line rather than write the diff's description.
    With the document in the before image (FULL), the diffs were applied as decoded."""
    changes = [c for c in _changes("rust_mysql_common/json.binlog.000001") if c.op == "update"]
    for change in changes:
        convert = image_params(change.table)
        if change.before[1] is not ABSENT:
            assert convert(change.after)[1] == change.after[1]
            continue
        with pytest.raises(UnfaithfulApplyError, match="partial JSON update") as err:
            convert(change.after)
        assert "binlog_row_image = FULL" in str(err.value) and "\n" not in str(err.value)
        # The relaylog source shows the diffs, as dump --json prints them.
        values, _kinds = image_encoder(change.table)(change.after)
        assert values is not None and json.loads(values[1]) == {"json_diff": [
            {"op": "REPLACE", "path": "$.age", "value": json.dumps(change.after[3])}]}


def test_json_opaque_values() -> None:
    values = [c.after[0] for c in _changes("rust_mysql_common/json-opaque.binlog")]
    assert values == [
        '{"a": "base64:type15:VQ=="}', '{"b": "2012-03-18"}',
        '{"c": "2012-03-18 11:30:45.000000"}', '{"c": "87:31:46.654321"}', '{"d": 123.456}',
        '{"e": 9.00}', '{"e": [0, 1, true, false]}', '{"e": null}']


# --- compressed transactions, GTIDs, metadata ---------------------------------------------

def test_transaction_payloads() -> None:
    (change,) = _changes("rust_mysql_common/transaction_compression.000001")
    assert change.op == "insert" and change.after == (1,)
    assert change.where is not None and change.where.pos == 274
    (movie,) = _changes("mysql-binlog-connector-java/mysql-bin.compressed")
    assert movie.op == "update" and movie.before[1] == "Once Upon a Time in the West"
    rows = _changes("mysql-binlog-connector-rust/mysql-bin.000057")
    assert [c.op for c in rows] == ["insert", "update", "insert"]
    upd = rows[1]
    assert upd.before[9] == upd.after[9] == '{"c": 1}'  # JSON inside the payload
    assert upd.before[5] == dt.datetime(2022, 11, 20, 13, 40, 30, tzinfo=UTC)


def test_tagged_gtids() -> None:
    events = _decode_all(capture("rust_mysql_common/binlog_transaction_with_GTID_TAG.000001"))
    (prev,) = [e for e in events if isinstance(e, PreviousGtidsEvent)]
    assert prev.gtid_set == "55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-2"
    (gtid,) = [e for e in events if isinstance(e, MysqlGtidEvent)]
    assert (gtid.uuid, gtid.tag, gtid.gno) == ("55778904-0299-11f1-b1b8-4ef0c4956feb",
                                               "mytag", 3)
    assert gtid.gtid == "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"
    (change,) = _changes("rust_mysql_common/binlog_transaction_with_GTID_TAG.000001")
    assert change.after == (3, 100, Decimal("250.00"))
    assert change.where is not None and change.where.gtid == gtid.gtid


def test_enum_set_and_bit_with_metadata() -> None:
    ins, upd, dele = _changes("rust_mysql_common/mysql-enum-string-set.000001")
    assert ins.after[2:4] == ("var1", "one,three")
    assert upd.after[:4] == ("field1", "field_2", "variant2", "two,four")
    assert dele.before == upd.after
    (bits,) = _changes("rust_mysql_common/mysql_type_bit.000001")
    assert bits.after == (0b100, "foo", 0b100000)


def test_vector_time_and_partial_images() -> None:
    vectors = _changes("rust_mysql_common/vector.binlog")
    by_id = {c.after[0]: c.after for c in vectors if c.op == "insert" and len(c.after) == 4}
    assert by_id[2][1] == (1.0099999904632568, -1.0099999904632568)  # float32 values
    assert by_id[2][3] == (42.0, 43.0, 44.0, 45.0)
    # Written as the float32s the server stores (the decoded floats are exactly them).
    vector = [c for c in vectors if c.op == "insert" and len(c.after) == 4
              and c.after[0] == 2][-1]
    params = image_params(vector.table)(vector.after)
    assert params[1] == struct.pack("<2f", 1.01, -1.01)
    assert params[3] == struct.pack("<4f", 42, 43, 44, 45)
    (t,) = _changes("rust_mysql_common/time_issue.000001")
    assert t.after == (-dt.timedelta(hours=507, minutes=48, seconds=27),)
    (m,) = _changes("rust_mysql_common/minimal_row_metadata.000001")
    assert m.after == (1, ABSENT, "a", ABSENT, 3230202323)  # unsigned from SIGNEDNESS
    (h,) = _changes("rust_mysql_common/rpl_unfiltered_hidden_gcol.000001")
    assert h.after == (1, ABSENT, "1")  # the functional index's hidden column is left out


def test_invisible_columns() -> None:
    events = _decode_all(MYSQL_CAPTURES / "rust_mysql_common/binlog-invisible-columns.000001")
    table = next(e.table for e in events if isinstance(e, TableMapEvent))
    assert [c.visible for c in table.columns] == [False, False, True, True, True, False]
    changes = _changes("rust_mysql_common/binlog-invisible-columns.000001")
    assert changes[0].after == (1, 2, -3, "4", b"\x05", 6000000000)


def test_update_rows_v2_types() -> None:
    (change,) = _changes("boxercrab/31_update_rows_v2/log.bin")
    # DEFAULT CHARSET=utf8mb4 but a 5.7 server logs no charsets: text stays bytes.
    assert change.before == (1, b"abc", b"abc", b"abc", b"abc", b"abc", 1.0, 2.0,
                             Decimal("3.0000"))
    assert change.after == (1, b"xd", b"xd", b"xd", b"xd", b"xd", 4.0, 4.0, Decimal("4.0000"))


def test_checksum_none_and_unknown_event_types() -> None:
    assert len(_changes("mysql-binlog-connector-java/mysql-bin.checksum-none")) == 36
    events = _decode_all(MYSQL_CAPTURES / "mysql-binlog-connector-java/mysql-bin.aurora-padding")
    assert [e.header.event_type for e in events if isinstance(e, OtherEvent)] == [100]


def test_a_flipped_byte_is_a_checksum_error(tmp_path: Path) -> None:
    data = bytearray((MYSQL_CAPTURES / "zongji/binlog-mysql84-fullmeta.events.bin").read_bytes())
    data[1500] ^= 0x01
    bad = tmp_path / "bad.bin"
    bad.write_bytes(bytes(data))
    with pytest.raises(BinlogFormatError, match="CRC32") as err:
        _changes_path(bad)
    assert err.value.path == str(bad) and err.value.offset == 1453


def _changes_path(path: Path) -> list[RowChange]:
    return list(iter_changes([path]))
