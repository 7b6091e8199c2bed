"""Dummy events that fill holes: exact size, valid header and CRC, readable by mariadb-binlog."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

import binlog_builder as bb
from binrelay.binlog import constants as c
from binrelay.binlog.dummy import dummy_event, min_dummy_size
from binrelay.binlog.parse import crc32_ok, parse_header, query_text_prefix, verify_checksum
from binrelay.binlog.txn import TxnTracker
from binrelay.errors import BinlogFormatError
from binrelay.relay.progress import Progress
from binrelay.relay.scan import scan_file

MARIADB_BINLOG = shutil.which("mariadb-binlog") or "/usr/bin/mariadb-binlog"
# Smallest Query dummy: header, post-header, db terminator and one byte of comment.
QUERY_MIN = 19 + 13 + 1 + 1


def test_min_size() -> None:
    # MariaDB's own floor: the smallest event it ever replaces with a dummy is 25 bytes + CRC.
    assert min_dummy_size(0) == 25
    assert min_dummy_size(4) == 29


@pytest.mark.parametrize("checksum_len", [0, 4])
def test_every_size(checksum_len: int) -> None:
    for size in range(min_dummy_size(checksum_len), 301):
        end_pos = 10_000 + size
        ev = dummy_event(size=size, end_pos=end_pos, server_id=77, checksum_len=checksum_len,
                         timestamp=1_700_000_123)
        assert len(ev) == size
        h = parse_header(ev)
        assert (h.event_size, h.log_pos, h.start_pos) == (size, end_pos, 10_000)
        assert (h.server_id, h.timestamp) == (77, 1_700_000_123)
        assert not h.is_artificial  # an artificial event would be skipped by appliers' checks
        if checksum_len:
            assert crc32_ok(ev), size
            verify_checksum(ev, c.BINLOG_CHECKSUM_ALG_CRC32)
        payload = ev[19 : size - checksum_len]
        if size - checksum_len >= QUERY_MIN:
            assert h.event_type == c.QUERY_EVENT, size
            _thread, _exec, db_len, error, status_len = struct.unpack_from("<IIBHH",
                                                                          payload)
            assert (db_len, error, status_len) == (0, 0, 0)
            assert payload[13] == 0  # empty db name, NUL-terminated
            comment = payload[14:]
            assert len(comment) == size - checksum_len - QUERY_MIN + 1
            assert comment.startswith(b"#") and b"\0" not in comment
            assert query_text_prefix(ev, checksum_len) == comment[:32]
        else:
            assert h.event_type == c.USER_VAR_EVENT, size
            name_len = struct.unpack_from("<I", payload)[0]
            assert name_len == len(payload) - 5 >= 1
            name = payload[4 : 4 + name_len]
            assert name == (b"!dummyvar" + b"_" * 20)[:name_len]
            assert payload[-1] == 1  # is_null: no value follows


@pytest.mark.parametrize("checksum_len", [0, 4])
def test_type_switches_where_a_query_first_fits(checksum_len: int) -> None:
    kinds = {size: dummy_event(size=size, end_pos=size + 4, server_id=1,
                               checksum_len=checksum_len, timestamp=0)[4]
             for size in (QUERY_MIN - 1 + checksum_len, QUERY_MIN + checksum_len)}
    assert kinds == {QUERY_MIN - 1 + checksum_len: c.USER_VAR_EVENT,
                     QUERY_MIN + checksum_len: c.QUERY_EVENT}


@pytest.mark.parametrize("size", [65_536, 1 << 20])
def test_large_holes(size: int) -> None:
    ev = dummy_event(size=size, end_pos=size + 4, server_id=1, checksum_len=4, timestamp=0)
    assert len(ev) == size and crc32_ok(ev) and parse_header(ev).event_size == size


@pytest.mark.parametrize("checksum_len", [0, 4])
@pytest.mark.parametrize("delta", [1, 2, 10])
def test_too_small(checksum_len: int, delta: int) -> None:
    size = min_dummy_size(checksum_len) - delta
    with pytest.raises(BinlogFormatError, match=f"hole of {size} bytes before position 500"):
        dummy_event(size=size, end_pos=500, server_id=1, checksum_len=checksum_len)


@pytest.mark.parametrize("size", [0, -5, 19])
def test_absurd_sizes(size: int) -> None:
    with pytest.raises(BinlogFormatError):
        dummy_event(size=size, end_pos=500, server_id=1, checksum_len=4)


def test_default_timestamp_is_now() -> None:
    before = int(time.time())
    ev = dummy_event(size=40, end_pos=44, server_id=1, checksum_len=4)
    assert before <= parse_header(ev).timestamp <= int(time.time())


def test_dummies_keep_transaction_tracking_intact() -> None:
    # A dummy stands for skipped events outside any group: it is a boundary there and harmless
    # inside a group (a comment is neither BEGIN nor COMMIT).
    query = dummy_event(size=100, end_pos=104, server_id=1, checksum_len=4, timestamp=0)
    user_var = dummy_event(size=30, end_pos=34, server_id=1, checksum_len=4, timestamp=0)
    t = TxnTracker()
    assert t.feed(c.QUERY_EVENT, query_prefix=query_text_prefix(query, 4))
    t.feed(c.GTID_EVENT, maria_flags=c.FL_TRANSACTIONAL)
    assert not t.feed(c.QUERY_EVENT, query_prefix=query_text_prefix(query, 4))
    assert not t.feed(user_var[4])
    assert t.in_transaction
    assert t.feed(c.XID_EVENT)


def _builder_with_dummies(checksum: bool,
                          sizes: list[int]) -> tuple[bb.BinlogBuilder, list[int]]:
    b = bb.BinlogBuilder(flavor="mariadb", checksum=checksum).header()
    b.ddl("CREATE TABLE app.t (id INT)")
    starts = []
    for size in sizes:
        starts.append(b.pos)
        b.data += dummy_event(size=size, end_pos=b.pos + size, server_id=1,
                              checksum_len=b.checksum_len, timestamp=b.timestamp)
    b.trx([1, 2])
    b.rotate()
    return b, starts


@pytest.mark.parametrize("checksum", [True, False])
def test_mariadb_binlog_reads_dummies(tmp_path: Path, checksum: bool) -> None:
    cl = 4 if checksum else 0
    sizes = [min_dummy_size(cl), min_dummy_size(cl) + 3, QUERY_MIN - 1 + cl, QUERY_MIN + cl,
             QUERY_MIN + cl + 1, 120, 300, 5000]
    b, starts = _builder_with_dummies(checksum, sizes)
    data = b.bytes()
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(data)

    proc = subprocess.run([MARIADB_BINLOG, str(path)], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "ERROR" not in out + proc.stderr
    listed = [int(p) for p in re.findall(r"^# at (\d+)$", out, flags=re.M)]
    for start, size in zip(starts, sizes, strict=True):
        assert start in listed, (start, size)
        assert f"end_log_pos {start + size} " in out
    user_vars = sum(1 for s in sizes if s - cl < QUERY_MIN)
    assert out.count("User_var") == user_vars
    assert out.count("SET @`!") == user_vars
    assert out.count(":=NULL") >= user_vars
    # Dummy queries are the only ones with thread id 0; each prints as its comment.
    assert out.count("\tQuery\tthread_id=0\t") == len(sizes) - user_vars
    assert out.count("\n# dummy event written by binrelay") >= 2
    assert "Rotate to mysql-bin.000002" in out

    # The relay's own scan takes the file as whole, dummies included.
    result = scan_file(path, flavor=None)
    assert (result.safe_pos, result.stop_reason) == (len(data), "")
    assert result.safe_gtids == "0-1-2"


@pytest.mark.parametrize("checksum", [True, False])
def test_progress_over_dummies(checksum: bool) -> None:
    cl = 4 if checksum else 0
    b, starts = _builder_with_dummies(checksum, [min_dummy_size(cl), 200])
    p = Progress(flavor="mariadb")
    ends = []
    for pos, ev in bb.walk(b.bytes()):
        if p.feed(ev, pos + len(ev), cl):
            ends.append(pos + len(ev))
    # A Query dummy ends a "transaction" of its own.  A User_var dummy outside a group looks
    # like the first event of a statement (User_var + Query), so its end is no boundary: a
    # crash right after it only costs re-relaying the hole.
    assert ends == sorted([*b.boundaries, starts[1] + 200])
    assert p.gtid_text() == "0-1-2"
