"""Fuzz: truncated and corrupted events, table maps and JSON documents only ever raise
``BinlogFormatError`` (a ``ValueError`` for the pure JSON/TABLE_MAP parsers), never hang.

Inputs are the real MySQL captures (every event type they hold: v2 rows, payloads, partial
JSON, FULL metadata ...); the MariaDB side is fuzzed on a real server's binlog in
test_rows_mariadb_types.py.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binrelay.errors import BinlogFormatError
from binrelay.rows import EventDecoder, mysqljson
from binrelay.rows.tablemap import MetadataError, parse_table_map
from captures import MYSQL_CAPTURES
from rows_fuzz import corrupted, decode_with, load_events

pytestmark = pytest.mark.timeout(120)

FILES = [
    "zongji/binlog-mysql84-fullmeta.events.bin",
    "rust_mysql_common/json.binlog.000001",
    "rust_mysql_common/json-opaque.binlog",
    "rust_mysql_common/vector.binlog",
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001",
    "mysql-binlog-connector-rust/mysql-bin.000057",
    "mysql-binlog-connector-java/mysql-bin.compressed",
    "go-mysql/tcb-eval002c-bin.003320",
    "rust_mysql_common/mysql-enum-string-set.000001",
]
EVENTS = {name: load_events(MYSQL_CAPTURES / name) for name in FILES}

FUZZ = settings(max_examples=250, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", FILES)
@FUZZ
@given(data=st.data())
def test_corrupted_events_raise_only_our_error(name: str, data: st.DataObject) -> None:
    events = EVENTS[name]
    index, bad = data.draw(corrupted(events))
    decode_with(events, index, bad)


def _table_maps() -> list[bytes]:
    out = []
    for events in EVENTS.values():
        decoder = EventDecoder()
        for offset, raw in events:
            decoder.decode(raw, offset)
            if raw[4] == 19:
                out.append(raw[19:-4])
    return out


TABLE_MAPS = _table_maps()


@FUZZ
@given(data=st.data(), mariadb=st.booleans())
def test_corrupted_table_maps_raise_metadata_error(data: st.DataObject, mariadb: bool) -> None:
    body = bytearray(data.draw(st.sampled_from(TABLE_MAPS)))
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(body) - 1))
        body[pos] = data.draw(st.integers(0, 255))
    body = body[:data.draw(st.integers(0, len(body)))]
    try:
        table = parse_table_map(bytes(body), mariadb=mariadb)
    except MetadataError:
        return
    # A map that still parses must still compile into decoders that fail cleanly.
    from binrelay.rows.compiler import row_decoder

    try:
        decode = row_decoder(table, (1 << len(table.columns)) - 1)
    except ValueError:
        return
    junk = data.draw(st.binary(max_size=64))
    try:
        decode(junk, 0, len(junk))
    except Exception as exc:  # the rows iterator turns these into BinlogFormatError
        assert not isinstance(exc, BinlogFormatError | MemoryError | RecursionError)


@FUZZ
@given(doc=st.binary(max_size=300))
def test_random_json_documents_raise_value_error(doc: bytes) -> None:
    with contextlib.suppress(ValueError):
        mysqljson.binary_to_text(doc)


def test_shared_json_subtrees_fail_fast() -> None:
    # 50 nested arrays whose 100 entries all point at the same inner array: a DAG no server
    # writes, 100**50 paths to walk without the decoder's work budget.
    inner = (0).to_bytes(2, "little") + (4).to_bytes(2, "little")
    for _ in range(50):
        head = 4 + 3 * 100
        entries = (b"\x02" + head.to_bytes(2, "little")) * 100
        inner = (100).to_bytes(2, "little") + (head + len(inner)).to_bytes(2, "little") \
            + entries + inner
    with pytest.raises(ValueError, match=r"references itself|too deeply"):
        mysqljson.binary_to_text(b"\x02" + inner)


def test_truncated_file_reports_file_and_offset(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from binrelay.errors import IncompleteEventError
    from binrelay.rows.reader import iter_changes

    data = (MYSQL_CAPTURES / "zongji/binlog-mysql84-fullmeta.events.bin").read_bytes()
    for cut in (5, 30, 1460, len(data) - 1):
        path = tmp_path / f"cut{cut}"
        path.write_bytes(data[:cut])
        with pytest.raises(IncompleteEventError) as err:
            list(iter_changes([path]))
        assert err.value.path == str(path) and err.value.offset is not None
