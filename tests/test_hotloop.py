"""The C hot loop does exactly what its Python specification does, on real binlog bytes."""

from __future__ import annotations

import random
import struct

import pytest

from binrelay.binlog import constants as c
from binrelay.binlog.txn import AFTER_GTID, IDLE, IN_TRX
from binrelay.relay import hotloop
from binrelay.relay.progress import Progress, TxnRun
from binrelay.testing.sandbox import run_sysbench


def _packets(events: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e) + 1)[:3] + b"\x01\x00" + e for e in events)


def _events(binlog: bytes) -> list[bytes]:
    out, pos = [], 4
    while pos < len(binlog):
        size = struct.unpack_from("<I", binlog, pos + 9)[0]
        out.append(binlog[pos : pos + size])
        pos += size
    return out


@pytest.fixture(scope="module")
def real_events(tmp_path_factory, mariadb_template, mariadb_socket_dir) -> list[bytes]:
    from binrelay.testing.sandbox import MariaDBServer

    server = MariaDBServer(tmp_path_factory.mktemp("hot") / "s", template=mariadb_template,
                           socket_dir=mariadb_socket_dir).start()
    try:
        run_sysbench(server, tables=2, table_size=500, events=300)
        name, _ = server.binlog_files()[-1]
        return _events(server.binlog_path(name).read_bytes())
    finally:
        server.stop()
        server.cleanup()


def _run(impl, data: bytes, pos: int, offset: int, check: bool) -> tuple:
    out = bytearray(b"prefix")
    result = impl(data, pos, offset, check, hotloop.BORING, out)
    return (*result[:3], bool(result[3]), bytes(out))


def test_c_matches_python_on_real_events(real_events: list[bytes]) -> None:
    # dev/setup builds it (gcc and the Python headers are on every supported machine).
    assert hotloop.take_run_c is not None, "binrelay._speedups was not built"
    data = _packets(real_events[1:])  # after the FDE, as the stream sends them
    rng = random.Random(3)
    offset = 4 + len(real_events[0])
    pos = 0
    runs = 0
    while pos < len(data):
        a = _run(hotloop.take_run_python, data, pos, offset, True)
        b = _run(hotloop.take_run_c, data, pos, offset, True)
        assert a == b
        new_pos, offset, _count, _bad, _out = a
        runs += 1
        if new_pos == pos:  # an event that needs a decision: step over it as the writer would
            length = int.from_bytes(data[pos : pos + 3], "little")
            event = data[pos + 5 : pos + 4 + length]
            offset = struct.unpack_from("<I", event, 13)[0]
            new_pos = pos + 4 + length
        pos = new_pos
    assert runs > 100
    # Cut anywhere, misaligned offsets, corrupted bytes: both stop at the same place.
    for _ in range(300):
        cut = rng.randrange(len(data))
        broken = bytearray(data[:cut])
        if broken and rng.random() < 0.5:
            broken[rng.randrange(len(broken))] ^= 1 << rng.randrange(8)
        off = 4 + len(real_events[0]) + rng.choice([0, 0, 1, -1])
        for check in (True, False):
            assert _run(hotloop.take_run_python, bytes(broken), 0, off, check) == \
                _run(hotloop.take_run_c, bytes(broken), 0, off, check)


def test_python_loop_stops_at_decisions(real_events: list[bytes]) -> None:
    data = _packets(real_events[1:])
    pos, _offset, count, bad, out = _run(hotloop.take_run_python, data, 0,
                                         4 + len(real_events[0]), True)
    # The first event after the FDE is a GTID_LIST: not ordinary, so nothing is taken.
    assert real_events[1][4] == c.GTID_LIST_EVENT
    assert (pos, count, bad, out) == (0, 0, False, b"prefix")


def test_bad_checksum_is_reported(real_events: list[bytes]) -> None:
    rows = next(e for e in real_events if e[4] in (c.WRITE_ROWS_EVENT, c.UPDATE_ROWS_EVENT,
                                                   c.WRITE_ROWS_EVENT_V1))
    broken = bytearray(rows)
    broken[25] ^= 0xFF
    end = struct.unpack_from("<I", rows, 13)[0]
    for impl in filter(None, (hotloop.take_run_python, hotloop.take_run_c)):
        pos, _off, count, bad, _ = _run(impl, _packets([bytes(broken)]), 0, end - len(rows),
                                        True)
        assert (pos, count, bad) == (0, 0, True)


def test_large_events_take_the_zlib_path() -> None:
    # Events of 1 KiB and more are checksummed with zlib's crc32 in the C loop.
    import zlib

    events, offset = [], 1000
    for size in (1023, 1024, 5000, 70000):
        raw = struct.pack("<IBIIIH", 1, c.WRITE_ROWS_EVENT, 1, size, offset + size, 0)
        raw += bytes(range(256)) * (size // 256 + 1)
        raw = raw[: size - 4]
        events.append(raw + struct.pack("<I", zlib.crc32(raw)))
        offset += size
    data = _packets(events)
    for impl in filter(None, (hotloop.take_run_python, hotloop.take_run_c)):
        assert _run(impl, data, 0, 1000, True)[:4] == (len(data), offset, 4, False)
    broken = bytearray(data)
    broken[len(data) - 3000] ^= 1
    for impl in filter(None, (hotloop.take_run_python, hotloop.take_run_c)):
        _pos, off, count, bad, _ = _run(impl, bytes(broken), 0, 1000, True)
        assert (count, bad) == (3, True) and off == offset - 70000


# --- MariaDB transactions taken whole: GTID and XID events too ---------------------------------


def _txn_run(impl, data: bytes, pos: int, offset: int, check: bool, state: int,
             pending, maria: dict) -> tuple:
    txn = TxnRun(state, pending, dict(maria))
    out = bytearray(b"prefix")
    result = impl(data, pos, offset, check, hotloop.BORING, out, txn)
    return (*result[:3], bool(result[3]), bytes(out), txn.state, txn.pending, txn.maria,
            txn.boundary, txn.last_ts)


def test_c_takes_transactions_as_python_does(real_events: list[bytes]) -> None:
    assert hotloop.take_run_c is not None, "binrelay._speedups was not built"
    data = _packets(real_events[1:])
    start = 4 + len(real_events[0])
    # Whole: every transaction of the sysbench stream is taken, one run per DDL between.
    pos, offset, state, pending, maria = 0, start, IDLE, None, {0: (9, 0)}
    while pos < len(data):
        a = _txn_run(hotloop.take_run_python, data, pos, offset, True, state, pending, maria)
        b = _txn_run(hotloop.take_run_c, data, pos, offset, True, state, pending, maria)
        assert a == b
        new_pos, offset, _count, bad, _out, state, pending, maria, _boundary, _ts = a
        assert not bad
        if new_pos == pos:  # what the writer decides about (FDE, GTID_LIST, DDL ...)
            length = int.from_bytes(data[pos : pos + 3], "little")
            event = data[pos + 5 : pos + 4 + length]
            offset = struct.unpack_from("<I", event, 13)[0]
            new_pos = pos + 4 + length
            state, pending = IDLE, None
        pos = new_pos
    # The set ends at the stream's last GTID, as Progress.feed would have it.
    progress = Progress(flavor="mariadb")
    for event in real_events:
        progress.feed(event, struct.unpack_from("<I", event, 13)[0], 4)
    assert maria == {**{0: (9, 0)}, **progress._maria}
    # Cut anywhere, misaligned, corrupted, in any state: both stop alike and leave the same.
    rng = random.Random(5)
    for _ in range(300):
        cut = rng.randrange(len(data))
        broken = bytearray(data[:cut])
        if broken and rng.random() < 0.5:
            broken[rng.randrange(len(broken))] ^= 1 << rng.randrange(8)
        off = start + rng.choice([0, 0, 1, -1])
        state = rng.choice([IDLE, IN_TRX, AFTER_GTID])
        pending = rng.choice([None, (0, 1, 7), (3, 2, 10**12)])
        maria = rng.choice([{}, {0: (1, 10**9)}, {3: (5, 5)}])
        for check in (True, False):
            assert _txn_run(hotloop.take_run_python, bytes(broken), 0, off, check, state,
                            pending, maria) == \
                _txn_run(hotloop.take_run_c, bytes(broken), 0, off, check, state, pending,
                         maria)


def _gtid_event(seq: int, domain: int, flags: int, offset: int, server_id: int = 1) -> bytes:
    import zlib

    body = struct.pack("<QIB", seq, domain, flags) + bytes(6)
    size = 19 + len(body) + 4
    raw = struct.pack("<IBIIIH", 100 + seq, c.GTID_EVENT, server_id, size, offset + size, 0)
    raw += body
    return raw + struct.pack("<I", zlib.crc32(raw))


def _xid_event(xid: int, offset: int) -> bytes:
    import zlib

    size = 19 + 8 + 4
    raw = struct.pack("<IBIIIH", 200 + xid, c.XID_EVENT, 1, size, offset + size, 0)
    raw += struct.pack("<Q", xid)
    return raw + struct.pack("<I", zlib.crc32(raw))


def test_transactions_taken_and_where_they_stop() -> None:
    for impl in filter(None, (hotloop.take_run_python, hotloop.take_run_c)):
        # Two transactions of two domains; the second's seq_no is below what the set has:
        # the set keeps the higher (as Progress does).
        events, off = [], 1000
        for ev in (lambda o: _gtid_event(5, 0, 0, o, 7), lambda o: _xid_event(1, o),
                   lambda o: _gtid_event(3, 2, 0, o, 8), lambda o: _xid_event(2, o),
                   lambda o: _gtid_event(6, 0, 0, o, 7)):
            events.append(ev(off))
            off += len(events[-1])
        got = _txn_run(impl, _packets(events), 0, 1000, True, IDLE, None, {2: (1, 9)})
        pos, end, count, bad, _out, state, pending, maria, boundary, ts = got
        assert (pos, end, count, bad) == (len(_packets(events)), off, 5, False)
        assert (state, pending, maria) == (IN_TRX, (0, 7, 6), {0: (7, 5), 2: (1, 9)})
        assert boundary == off - len(events[-1]) and ts == 106
        # A standalone GTID (a DDL's) stops the run before it: its Query needs a decision.
        standalone = _packets([_gtid_event(9, 0, c.FL_STANDALONE, 1000)])
        assert _txn_run(impl, standalone, 0, 1000, True, IDLE, None, {})[:3] == (0, 1000, 0)
        # Without a txn state the GTID and XID stop the run, as they always did.
        out = bytearray()
        assert impl(_packets(events), 0, 1000, True, hotloop.BORING, out)[2] == 0
