"""The scanner's C event walk does exactly what its Python specification does, on real binlog
bytes and on damaged copies of them; and the scanner reports damage where it is."""

from __future__ import annotations

import random
import struct

import pytest

from binrelay.binlog import constants as c
from binrelay.errors import BinlogFormatError, ChecksumMismatchError
from binrelay.rows import walk
from binrelay.rows.scanner import _KEEP, ChangeScanner
from binrelay.testing.sandbox import run_sysbench


@pytest.fixture(scope="module")
def binlog(tmp_path_factory, mariadb_template, mariadb_socket_dir) -> bytes:
    from binrelay.testing.sandbox import MariaDBServer

    server = MariaDBServer(tmp_path_factory.mktemp("walk") / "s", template=mariadb_template,
                           socket_dir=mariadb_socket_dir).start()
    try:
        run_sysbench(server, tables=2, table_size=200, events=200)
        name, _ = server.binlog_files()[-1]
        return server.binlog_path(name).read_bytes()
    finally:
        server.stop()
        server.cleanup()


def _starts(data: bytes) -> list[int]:
    out, pos = [], 4
    while pos < len(data):
        out.append(pos)
        pos += struct.unpack_from("<I", data, pos + 9)[0]
    return out


def _both(data: bytes, pos: int, end: int, crc: bool, keep: bytes) -> walk.Walked:
    assert walk.walk_events_c is not None, "binrelay._speedups was not built"
    a = walk.walk_events_python(data, pos, end, crc, keep)
    b = walk.walk_events_c(data, pos, end, crc, keep)
    assert a == b
    return a


def test_c_matches_python_on_real_and_damaged_bytes(binlog: bytes) -> None:
    starts = _starts(binlog)
    rng = random.Random(5)
    keeps = [_KEEP, walk.keep_table((), ()), walk.keep_table(range(256), ()),
             walk.keep_table((c.TABLE_MAP_EVENT,), (c.XID_EVENT,))]
    for keep in keeps:
        for crc in (True, False):
            # From the first event after the FDE: an open binlog's FDE carries the in-use
            # flag its CRC32 does not cover (the decoder checks FDEs itself).
            events, stopped, status = _both(binlog, starts[1], len(binlog), crc, keep)
            assert status == walk.OK
    # The whole file with the scanner's table: every table map and rows event, no other.
    events, stopped, status = _both(binlog, starts[1], len(binlog), True, _KEEP)
    assert stopped == len(binlog) and status == walk.OK
    types = {t for t, _s, _e in events}
    assert c.TABLE_MAP_EVENT in types and c.XID_EVENT not in types
    # Cut anywhere (a tail, mid-header, mid-event) and from anywhere.
    for _ in range(200):
        pos = rng.choice(starts)
        end = rng.randrange(pos, len(binlog) + 1)
        events, stopped, status = _both(binlog, pos, end, True, _KEEP)
        assert status == walk.OK and stopped <= end
        # It stopped at the first event not wholly inside the range.
        assert end - stopped < 19 or \
            stopped + struct.unpack_from("<I", binlog, stopped + 9)[0] > end
    # Damage: a flipped byte (CRC), an impossible size.
    for _ in range(200):
        damaged = bytearray(binlog)
        at = rng.randrange(starts[1], len(binlog))
        damaged[at] ^= 1 << rng.randrange(8)
        _both(bytes(damaged), starts[1], len(damaged), rng.random() < 0.8,
              rng.choice(keeps))
    for start in rng.sample(starts[1:], 20):
        damaged = bytearray(binlog)
        struct.pack_into("<I", damaged, start + 9, rng.randrange(19))
        events, stopped, status = _both(bytes(damaged), starts[1], len(damaged), True, _KEEP)
        assert (stopped, status) == (start, walk.BAD_SIZE)


def test_c_rejects_bad_arguments() -> None:
    assert walk.walk_events_c is not None
    with pytest.raises(ValueError):
        walk.walk_events_c(b"x" * 40, 0, 40, True, b"\x00" * 10)
    with pytest.raises(ValueError):
        walk.walk_events_c(b"x" * 40, 0, 41, True, _KEEP)


def test_scanner_names_the_damaged_event(binlog: bytes, monkeypatch) -> None:
    starts = _starts(binlog)
    target = next(s for s in starts if binlog[s + 4] == c.XID_EVENT)
    damaged = bytearray(binlog)
    damaged[target + 20] ^= 0xFF
    scanner = ChangeScanner(path="x.bin")
    with pytest.raises(ChecksumMismatchError) as err:
        list(scanner.scan(bytes(damaged), 4, file_offset=0))
    assert err.value.offset == target and "XID_EVENT" in str(err.value)
    struct.pack_into("<I", damaged, target + 9, 7)
    with pytest.raises(BinlogFormatError, match="event size 7"):
        list(ChangeScanner(path="x.bin").scan(bytes(damaged), 4, file_offset=0))
    # Undamaged, both walks give the same changes.
    whole = list(ChangeScanner(path="x.bin").scan(binlog, 4))
    assert whole
    monkeypatch.setattr("binrelay.rows.scanner.walk_events", walk.walk_events_python)
    again = list(ChangeScanner(path="x.bin").scan(binlog, 4))
    assert [(ch.op, ch.before, ch.after, ch.where) for ch in whole] == \
        [(ch.op, ch.before, ch.after, ch.where) for ch in again]
