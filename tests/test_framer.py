"""The event framer (sans-IO) and the file-range reader on top of it, h11-style: every input
is fed whole, byte by byte, in random chunk sizes, and followed by the first bytes of a next
event; the answer must not depend on how the bytes arrived."""

from __future__ import annotations

import io
import random
import struct
import zlib

import pytest

from binlog_builder import MAGIC, BinlogBuilder, walk
from binrelay.binlog import build, framing
from binrelay.binlog import constants as c
from binrelay.binlog.framing import EventFramer, NeedData, feed_from, iter_events, iter_frames
from binrelay.binlog.parse import parse_format_description
from binrelay.errors import BinlogFormatError, ChecksumMismatchError, IncompleteEventError
from captures import capture_binlogs

CRC32 = c.BINLOG_CHECKSUM_ALG_CRC32
OFF = c.BINLOG_CHECKSUM_ALG_OFF


def _splits(data: bytes, seed: int = 0) -> list[list[bytes]]:
    """``data`` whole, byte by byte, and in random chunks (a few seeds)."""
    out = [[data], [data[i : i + 1] for i in range(len(data))]]
    for s in range(3):
        rnd = random.Random(seed * 7 + s)
        chunks, i = [], 0
        while i < len(data):
            n = rnd.choice((1, 2, 5, 18, 19, 20, 64, 333, 4096))
            chunks.append(data[i : i + n])
            i += n
        out.append(chunks)
    return out


def _frame(chunks: list[bytes], offset: int, *, one_by_one: bool, **kw
           ) -> tuple[list[tuple[int, bytes]], EventFramer]:
    framer = EventFramer(offset, **kw)
    got: list[tuple[int, bytes]] = []
    for chunk in chunks:
        framer.feed(chunk)
        if one_by_one:
            while not isinstance(ev := framer.next_event(), NeedData):
                got.append(ev)
        else:
            while evs := framer.events():
                got += evs
    return got, framer


def tr(data: bytes, expected: list[tuple[int, bytes]], *, offset: int = 4, **kw) -> None:
    """h11's ``tr()``: ``data`` frames to ``expected`` however it is fed, with and without
    trailing bytes of a next event, through both ways of asking."""
    next_event = build.event(c.XID_EVENT, b"\x07" + bytes(7), log_pos=0, checksum=False)
    for tail in (b"", next_event[:1], next_event[:19], next_event[:-1]):
        for chunks in _splits(data + tail, seed=len(data)):
            for one_by_one in (True, False):
                got, framer = _frame(chunks, offset, one_by_one=one_by_one, **kw)
                assert got == expected
                assert framer.buffered == len(tail)
                assert framer.offset == offset + len(data)
                assert framer.end == offset + len(data) + len(tail)
                want = (19 - len(tail)) if len(tail) < 19 else len(next_event) - len(tail)
                assert framer.next_event() == NeedData(want)
                assert framer.need() == want


def _stream(flavor: str = "mariadb", checksum: bool = True) -> BinlogBuilder:
    b = BinlogBuilder(flavor=flavor, checksum=checksum).header()
    b.trx([1, 2, 3])
    b.ddl()
    b.trx(list(range(40)), statements=3)
    b.rotate()
    return b


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
@pytest.mark.parametrize("checksum", [True, False])
def test_built_binlogs_frame_however_they_are_fed(flavor: str, checksum: bool) -> None:
    data = _stream(flavor, checksum).bytes()
    expected = list(walk(data))
    assert len(expected) > 10
    tr(data[4:], expected, checksum_alg=CRC32 if checksum else OFF)


def test_sizes_only_frame_the_same() -> None:
    """Without CRC32 and log_pos checks (the readers that leave them to the decoder) the
    framer cuts the same events, and still refuses a size smaller than a header."""
    data = _stream().bytes()
    tr(data[4:], list(walk(data)), checksum_alg=OFF, check_log_pos=False)
    bad = bytearray(build.event(c.XID_EVENT, bytes(8), log_pos=0, checksum=False))
    bad[9:13] = struct.pack("<I", 0)
    for chunks in _splits(data[4:] + bytes(bad))[2:]:
        with pytest.raises(BinlogFormatError, match="event size 0 is smaller than its header"):
            _frame(chunks, 4, one_by_one=False, check_log_pos=False)


def test_real_captures_frame_however_they_are_fed() -> None:
    files = capture_binlogs()
    assert files
    for path in files[:3]:
        data = path.read_bytes()
        alg = parse_format_description(data[4 : 4 + struct.unpack_from("<I", data, 13)[0]]
                                       ).checksum_alg
        expected = list(walk(data))
        assert expected and expected[-1][0] + len(expected[-1][1]) == len(data), path
        # Byte by byte is quadratic in our test helper only: keep it to the head.
        head = data[4 : min(len(data), 6000)]
        head_events = [e for e in expected if e[0] + len(e[1]) <= 4 + len(head)]
        cut = head_events[-1][0] + len(head_events[-1][1]) - 4
        tr(head[:cut], head_events, checksum_alg=alg)
        for chunks in _splits(data[4:])[2:]:
            got, framer = _frame(chunks, 4, one_by_one=False, checksum_alg=alg)
            assert got == expected and framer.buffered == 0
        with path.open("rb") as f:
            assert list(iter_events(f, 4, None, checksum_alg=alg, path=str(path),
                                    chunk=1000)) == expected


def test_need_data_names_the_bytes_missing() -> None:
    framer = EventFramer(4)
    assert framer.next_event() == NeedData(19)
    ev = build.event(c.QUERY_EVENT, bytes(81), log_pos=4 + 100, checksum=False)
    framer.feed(ev[:5])
    assert framer.next_event() == NeedData(14)
    framer.feed(ev[5:19])
    assert framer.next_event() == NeedData(81)
    assert framer.events() == []
    framer.feed(ev[19:99])
    assert framer.next_event() == NeedData(1)
    framer.feed(ev[99:])
    assert framer.next_event() == (4, ev)
    assert framer.next_event() == NeedData(19)
    assert repr(NeedData(3)) == "NeedData(3)"


def test_an_event_larger_than_every_chunk() -> None:
    big = build.event(c.QUERY_EVENT, bytes(range(256)) * 12_000, log_pos=4 + 19 + 3_072_000 + 4,
                      checksum=True)
    small = build.event(c.XID_EVENT, bytes(8), log_pos=4 + len(big) + 31, checksum=True)
    data = MAGIC + big + small
    reads: list[int] = []

    class Recording(io.BytesIO):
        def read(self, n: int = -1) -> bytes:  # type: ignore[override]
            reads.append(n)
            return super().read(n)

    got = list(iter_events(Recording(data), 4, len(data), checksum_alg=CRC32, chunk=4096))
    assert got == [(4, big), (4 + len(big), small)]
    # The first read is a chunk; the next asks for the rest of the big event in one go.
    assert reads[0] == 4096 and reads[1] == len(big) - 4096
    assert max(reads) <= len(big)
    for chunks in _splits(data[4:])[2:]:
        got2, _ = _frame(chunks, 4, one_by_one=False, checksum_alg=CRC32)
        assert got2 == got


def test_a_bad_size_is_an_error_after_the_good_events() -> None:
    data = _stream().bytes()
    good = list(walk(data))
    bad = bytearray(build.event(c.XID_EVENT, bytes(8), log_pos=0, checksum=True))
    bad[9:13] = struct.pack("<I", 18)
    at = len(data)
    for chunks in _splits(data[4:] + bytes(bad)):
        for one_by_one in (True, False):
            with pytest.raises(BinlogFormatError) as info:
                _frame(chunks, 4, one_by_one=one_by_one, checksum_alg=CRC32, path="f.bin")
            assert info.value.offset == at and info.value.path == "f.bin"
            assert info.value.reason == "event size 18 is smaller than its header"
    # A caller sees every good event before the error.
    framer = EventFramer(4, checksum_alg=CRC32)
    framer.feed(data[4:] + bytes(bad))
    assert framer.events() == good
    with pytest.raises(BinlogFormatError, match="smaller than its header"):
        framer.events()
    with pytest.raises(BinlogFormatError, match="smaller than its header"):
        framer.next_event()


def test_log_pos_must_be_where_the_event_ends() -> None:
    data = _stream().bytes()
    good = list(walk(data))
    wrong = build.event(c.XID_EVENT, bytes(8), log_pos=len(data) + 31 + 1, checksum=True)
    for chunks in _splits(data[4:] + wrong):
        with pytest.raises(BinlogFormatError) as info:
            _frame(chunks, 4, one_by_one=False, checksum_alg=CRC32)
        assert info.value.offset == len(data)
        assert info.value.reason == (
            f"XID_EVENT event header does not match its position (it says it ends at "
            f"{len(data) + 32}, it ends at {len(data) + 31})")
    # log_pos 0 (an artificial event) is not checked; nor anything without check_log_pos.
    zero = build.event(c.XID_EVENT, bytes(8), log_pos=0, checksum=True)
    tr(data[4:] + zero, [*good, (len(data), zero)], checksum_alg=CRC32)
    tr(data[4:] + wrong, [*good, (len(data), wrong)], checksum_alg=CRC32, check_log_pos=False)


def test_a_crc_mismatch() -> None:
    data = _stream().bytes()
    good = list(walk(data))
    ev = bytearray(build.event(c.XID_EVENT, bytes(8), log_pos=len(data) + 31, checksum=True))
    ev[20] ^= 1
    for chunks in _splits(data[4:] + bytes(ev)):
        with pytest.raises(ChecksumMismatchError) as info:
            _frame(chunks, 4, one_by_one=True, checksum_alg=CRC32, path="x")
        assert info.value.offset == len(data) and info.value.path == "x"
        assert info.value.reason == "CRC32 mismatch in XID_EVENT event"
    # Without CRC32 (checksum_alg OFF) the bytes are not checked.
    tr(data[4:] + bytes(ev), [*good, (len(data), bytes(ev))], checksum_alg=OFF)
    # An event too short to hold a checksum fails it.
    short = build.event(c.XID_EVENT, b"", log_pos=len(data) + 19, checksum=False)
    with pytest.raises(ChecksumMismatchError):
        _frame([data[4:] + short], 4, one_by_one=False, checksum_alg=CRC32)


def test_an_fde_checksum_ignores_the_in_use_flag() -> None:
    for flavor in ("mariadb", "mysql"):
        fde = build.fde_event(flavor=flavor, checksum=True, in_use=True)
        assert fde[17] & c.LOG_EVENT_BINLOG_IN_USE_F
        assert zlib.crc32(fde[:-4]) != struct.unpack_from("<I", fde, len(fde) - 4)[0]
        tr(fde, [(4, fde)], checksum_alg=CRC32)
        broken = bytearray(fde)
        broken[30] ^= 0x20
        with pytest.raises(ChecksumMismatchError, match="FORMAT_DESCRIPTION_EVENT"):
            _frame([bytes(broken)], 4, one_by_one=False, checksum_alg=CRC32)


def test_offsets_past_4_gib_wrap_in_log_pos() -> None:
    start = (1 << 32) - 40
    events, pos = [], start
    for i in range(4):
        body = bytes([i]) * 30
        size = 19 + len(body) + 4
        ev = build.event(c.QUERY_EVENT, body, log_pos=(pos + size) & 0xFFFFFFFF, checksum=True)
        events.append((pos, ev))
        pos += size
    assert events[1][0] > 1 << 32 > events[0][0]
    data = b"".join(ev for _, ev in events)
    tr(data, events, offset=start, checksum_alg=CRC32)
    # A log_pos that does not wrap is wrong there.
    bad = build.event(c.QUERY_EVENT, b"", log_pos=(pos + 24) & 0xFFFFFFFF, checksum=True)
    with pytest.raises(BinlogFormatError, match=f"it ends at {pos + 23}\\)") as info:
        _frame([data + bad], start, one_by_one=False, checksum_alg=CRC32)
    assert info.value.offset == pos


def test_consume_runs() -> None:
    data = _stream().bytes()
    expected = list(walk(data))
    framer = EventFramer(4)
    framer.feed(data[4:300])
    buf, pos, base = framer.run()
    assert (buf, pos, base) == (data[4:300], 0, 4)
    first = len(expected[0][1])
    framer.consume(first)
    assert framer.offset == 4 + first
    framer.feed(data[300:])
    buf, pos, base = framer.run()
    assert base + pos == 4 + first and buf[pos:] == data[4 + first :]
    assert framer.events() == expected[1:]
    with pytest.raises(ValueError):
        framer.consume(0)


# --- the file-range reader ---------------------------------------------------------------------


def _file(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)


@pytest.mark.parametrize("chunk", [1, 7, 19, 64, 1 << 20])
def test_iter_events_reads_a_range(chunk: int) -> None:
    b = _stream()
    data = b.bytes()
    expected = list(walk(data))
    assert list(iter_events(_file(data), 4, len(data), checksum_alg=CRC32, chunk=chunk)) == \
        expected
    assert list(iter_events(_file(data), 4, None, checksum_alg=CRC32, chunk=chunk)) == expected
    # From a boundary to a boundary.
    lo, hi = b.boundaries[1], b.boundaries[-2]
    assert list(iter_events(_file(data), lo, hi, checksum_alg=CRC32, chunk=chunk)) == \
        [e for e in expected if lo <= e[0] < hi]


@pytest.mark.parametrize("chunk", [1, 19, 1 << 20])
def test_a_torn_tail(chunk: int) -> None:
    data = _stream().bytes()
    expected = list(walk(data))
    last = expected[-1][0]
    for cut in (last + 1, last + 18, last + 19, len(data) - 1):
        torn = data[:cut]
        got: list[tuple[int, bytes]] = []
        with pytest.raises(IncompleteEventError) as info:
            got.extend(iter_events(_file(torn), 4, cut, checksum_alg=CRC32, path="p",
                                   chunk=chunk))
        assert got == expected[:-1]
        assert info.value.offset == last and info.value.path == "p"
        assert info.value.reason == \
            f"the file ends inside an event ({cut - last} bytes of it)"
        with pytest.raises(IncompleteEventError):
            list(iter_events(_file(torn), 4, None, checksum_alg=CRC32, chunk=chunk))
        # Told that a torn tail is the end, the reader stops before it.
        assert list(iter_events(_file(torn), 4, None, checksum_alg=CRC32, chunk=chunk,
                                torn_tail_ok=True)) == expected[:-1]
        assert list(iter_events(_file(data), 4, cut, checksum_alg=CRC32, chunk=chunk,
                                torn_tail_ok=True)) == expected[:-1]


def test_a_file_shorter_than_the_range() -> None:
    data = _stream().bytes()
    with pytest.raises(IncompleteEventError) as info:
        list(iter_events(_file(data), 4, len(data) + 100, checksum_alg=CRC32))
    assert info.value.offset == len(data)
    assert info.value.reason == "the file ends inside an event"


def test_feed_from_leaves_the_cutting_to_the_consumer() -> None:
    data = _stream().bytes()
    expected = list(walk(data))
    f = _file(data)
    f.seek(4)
    framer = EventFramer(4)
    seen = []
    for fr in feed_from(f, framer, None, chunk=50):
        buf, pos, base = fr.run()
        # A consumer that takes whole events only, as the row scanner does.
        while pos + 19 <= len(buf):
            size = struct.unpack_from("<I", buf, pos + 9)[0]
            if pos + size > len(buf):
                break
            seen.append((base + pos, buf[pos : pos + size]))
            pos += size
        fr.consume(pos)
    assert seen == expected


def test_the_incomplete_hook_names_the_error_or_stops() -> None:
    data = _stream().bytes()
    expected = list(walk(data))
    torn = data[: expected[-1][0] + 30]

    class Mine(Exception):
        pass

    seen: list[tuple[int, int]] = []

    def hook(framer: EventFramer) -> Exception | None:
        seen.append((framer.offset, framer.buffered))
        return Mine() if framer.buffered else None

    with pytest.raises(Mine):
        list(iter_events(_file(torn), 4, None, checksum_alg=CRC32, incomplete=hook))
    assert seen == [(expected[-1][0], 30)]
    # None: a quiet stop (here: a file that ends at a boundary before the range's end).
    assert list(iter_events(_file(data), 4, len(data) + 50, checksum_alg=CRC32,
                            incomplete=hook)) == expected
    assert seen[-1] == (len(data), 0)


# ---- the planner's walk: events read whole, bodies hopped over -----------------------------

_HOP = bytes(2 if t in (c.TABLE_MAP_EVENT, c.WRITE_ROWS_EVENT, c.UPDATE_ROWS_EVENT,
                        c.DELETE_ROWS_EVENT, c.WRITE_ROWS_EVENT_V1) else 1 for t in range(256))


def _frames(data: bytes, stop: int, chunk: int, **kw) -> list[tuple[int, int, int, bytes, int]]:
    return list(iter_frames(_file(data), 4, stop, whole=_HOP, chunk=chunk, **kw))


@pytest.fixture(params=["c", "python"])
def hop_walk(request, monkeypatch) -> None:
    """iter_frames over each implementation of its buffer walk."""
    if request.param == "python":
        monkeypatch.setattr(framing, "hop_frames", framing.hop_frames_python)
    else:
        assert framing.hop_frames_c is not None, "binrelay._speedups was not built"


@pytest.mark.usefixtures("hop_walk")
@pytest.mark.parametrize("chunk", [1, 19, 100, 1 << 20])
def test_iter_frames_reads_the_rest_whole_and_marks_what_it_hopped(chunk: int) -> None:
    data = _stream().bytes()
    events = list(walk(data))
    want, marks = [], 0
    for pos, event in events:
        if _HOP[event[4]] != 1:
            marks |= _HOP[event[4]]
            continue
        want.append((pos, event[4], len(event), event, marks))
        marks = 0
    assert any(m for *_, m in want)
    assert _frames(data, len(data), chunk) == want
    # Read whole everything: every event, as iter_events cuts them.
    everything = list(iter_frames(_file(data), 4, len(data), whole=b"\x01" * 256, chunk=chunk))
    assert [(p, e) for p, _t, _s, e, _m in everything] == events


@pytest.mark.usefixtures("hop_walk")
@pytest.mark.parametrize("chunk", [1, 19, 1 << 20])
def test_iter_frames_stops_at_a_torn_tail_and_says_when_the_file_is_short(chunk: int) -> None:
    data = _stream().bytes()
    full = _frames(data, len(data), chunk)
    last = list(walk(data))[-1][0]
    # An event running past the stop (a finished file's torn tail) ends the walk.
    assert _frames(data, last + 20, chunk) == [f for f in full if f[0] < last]
    # The file ends before the stop: quietly when less than a header is left, else the
    # caller's error (or IncompleteEventError).
    assert _frames(data[:last + 5], last + 5 + 10, chunk) == [f for f in full if f[0] < last]
    with pytest.raises(IncompleteEventError) as info:
        _frames(data[:last], last + 100, chunk, path="p")
    assert (info.value.offset, info.value.path) == (last, "p")
    with pytest.raises(ValueError, match=f"ends at {last}"):
        _frames(data[:last], last + 100, chunk,
                incomplete=lambda at, end: ValueError(f"ends at {end}"))
    bad = bytearray(data)
    bad[last + 9:last + 13] = struct.pack("<I", 3)
    with pytest.raises(BinlogFormatError, match="event size 3 is smaller than its header"):
        _frames(bytes(bad), len(data), chunk)


def _hop_both(buf: bytes, off: int, stop: int, whole: bytes, marks: int):
    assert framing.hop_frames_c is not None, "binrelay._speedups was not built"
    a = framing.hop_frames_python(buf, off, stop, whole, marks)
    b = framing.hop_frames_c(buf, off, stop, whole, marks)
    assert a == b
    return a


def test_hop_frames_c_matches_python_on_real_torn_and_damaged_bytes() -> None:
    """The planner's walk in C (``_speedups.hop_frames``) against its Python specification:
    every cut of a real capture and of a built stream, every stop, a size below a header."""
    streams = [_stream().bytes(), _stream("mysql", False).bytes(),
               *(p.read_bytes() for p in capture_binlogs())]
    tables = [_HOP, b"\x01" * 256, bytes(6 if t % 3 else 1 for t in range(256))]
    rng = random.Random(7)
    for i, data in enumerate(streams):
        starts = [pos for pos, _e in walk(data)]
        for whole in tables:
            frames, off, _marks, status = _hop_both(data, 4, len(data), whole, 0)
            if i < 2:  # built whole (a capture may end torn)
                assert status == framing.HOP_END and off == len(data)
                assert [f[0] for f in frames] == [p for p in starts if whole[data[p + 4]] == 1]
            for _ in range(40):
                cut = rng.randrange(4, len(data) + 1)
                stop = rng.choice([len(data), cut + rng.randrange(0, 500), cut])
                at = rng.choice(starts)
                if at > cut:
                    continue
                _hop_both(data[:cut], at, stop - 0, whole, rng.choice([0, 2, 6]))
            if len(starts) < 2:
                continue
            bad = bytearray(data)
            at = rng.choice(starts[1:])
            bad[at + 9:at + 13] = struct.pack("<I", 7)
            result = _hop_both(bytes(bad), 4, len(data), whole, 0)
            assert result[3] == framing.HOP_BAD_SIZE and result[1] == at
    with pytest.raises(ValueError):
        framing.hop_frames_c(b"x" * 40, 0, 40, b"\x01" * 10, 0)
    with pytest.raises(ValueError):
        framing.hop_frames_c(b"x" * 40, 41, 80, _HOP, 0)
