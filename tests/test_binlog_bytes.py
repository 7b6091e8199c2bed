"""binrelay.binlog.bytes: the header struct, length-encoded integers and a UUID's text, against
independent encodings (struct.pack, hand-written bytes, Python's uuid module)."""

from __future__ import annotations

import os
import random
import struct
import uuid

import pytest

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import (
    HEADER,
    MARIA_GTID,
    TYPE_SIZE,
    U32,
    LenencError,
    lenenc_bytes,
    read_lenenc,
    uuid_text,
)


def _lenenc(value: int) -> bytes:
    """MySQL's encoding, written out by hand (the shortest form, as the server writes)."""
    if value < 0xFB:
        return bytes([value])
    if value <= 0xFFFF:
        return b"\xfc" + value.to_bytes(2, "little")
    if value <= 0xFFFFFF:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


# --- structs ---------------------------------------------------------------------------------


def test_header_is_the_19_byte_event_header() -> None:
    assert HEADER.size == c.EVENT_HEADER_LEN == 19
    raw = struct.pack("<IBIIIH", 1_700_000_000, c.WRITE_ROWS_EVENT, 7, 123, 4567, 0x20)
    assert HEADER.unpack(raw) == (1_700_000_000, c.WRITE_ROWS_EVENT, 7, 123, 4567, 0x20)
    assert HEADER.pack(*HEADER.unpack(raw)) == raw


def test_type_size_reads_type_and_size_from_offset_4() -> None:
    raw = HEADER.pack(1, c.QUERY_EVENT, 2, 0x01020304, 5, 6)
    assert TYPE_SIZE.unpack_from(raw, 4) == (c.QUERY_EVENT, 0x01020304)
    assert TYPE_SIZE.size == 9


def test_u32_is_little_endian() -> None:
    assert U32.unpack(b"\x01\x02\x03\x04") == (0x04030201,)
    assert U32.size == 4


# --- length-encoded integers -----------------------------------------------------------------


@pytest.mark.parametrize(("value", "width"), [
    (0, 1), (1, 1), (250, 1),                                # one byte: below 0xFB
    (251, 3), (252, 3), (0xFFFF, 3),                         # 0xFC + 2 bytes
    (0x10000, 4), (0xFFFFFF, 4),                             # 0xFD + 3 bytes
    (0x1000000, 9), (2**32, 9), (2**63, 9), (2**64 - 1, 9),  # 0xFE + 8 bytes
])
def test_read_lenenc_every_width(value: int, width: int) -> None:
    raw = _lenenc(value)
    assert len(raw) == width
    for prefix, suffix in ((b"", b""), (b"xyz", b""), (b"", b"tail"), (b"ab", b"\xff\xfe")):
        buf = prefix + raw + suffix
        want = (value, len(prefix) + width)
        assert read_lenenc(buf, len(prefix)) == want
        assert read_lenenc(buf, len(prefix), len(buf)) == want
        assert read_lenenc(buf, len(prefix), len(prefix) + width) == want  # ends right at end
        assert read_lenenc(bytearray(buf), len(prefix), len(buf)) == want
        assert read_lenenc(memoryview(buf), len(prefix), len(buf)) == want


@pytest.mark.parametrize("value", [0, 250, 251, 0xFFFF, 0x10000, 0xFFFFFF, 0x1000000, 2**64 - 1])
def test_lenenc_bytes_is_the_servers_shortest_form(value: int) -> None:
    assert lenenc_bytes(value) == _lenenc(value)
    assert read_lenenc(lenenc_bytes(value), 0) == (value, len(_lenenc(value)))


def test_read_lenenc_longer_forms_than_needed() -> None:
    # The server writes the shortest form, but a reader takes any.
    assert read_lenenc(b"\xfc\x05\x00", 0, 3) == (5, 3)
    assert read_lenenc(b"\xfd\x00\x00\x00", 0, 4) == (0, 4)
    assert read_lenenc(b"\xfe" + (300).to_bytes(8, "little"), 0, 9) == (300, 9)


@pytest.mark.parametrize("first", [0xFB, 0xFF])
def test_read_lenenc_bad_first_byte(first: int) -> None:
    buf = bytes([first]) + bytes(8)
    for end in (None, len(buf), 1):
        with pytest.raises(LenencError) as info:
            read_lenenc(buf, 0, end)
        assert info.value.first == first
        assert not info.value.truncated
        assert f"0x{first:02x}" in str(info.value)
        assert isinstance(info.value, ValueError)


def test_read_lenenc_nothing_left() -> None:
    for buf, pos, end in ((b"", 0, 0), (b"\x05", 1, 1), (b"\x05\x06", 1, 1), (b"\x05", 0, 0)):
        with pytest.raises(LenencError) as info:
            read_lenenc(buf, pos, end)
        assert info.value.first is None
        assert info.value.truncated
        assert str(info.value) == "length-encoded integer truncated"


@pytest.mark.parametrize("value", [0xFFFF, 0xFFFFFF, 2**64 - 1])
def test_read_lenenc_cut_short(value: int) -> None:
    raw = _lenenc(value)
    for cut in range(1, len(raw)):
        # By ``end`` inside a longer buffer, and by the buffer's own end.
        for buf, end in ((raw + b"more", cut), (raw[:cut], cut)):
            with pytest.raises(LenencError) as info:
                read_lenenc(buf, 0, end)
            assert info.value.first == raw[0]
            assert info.value.truncated


def test_read_lenenc_unchecked_without_end() -> None:
    # No ``end``: only the first byte must be there; the caller checks its position after.
    with pytest.raises(IndexError):
        read_lenenc(b"", 0)
    with pytest.raises(IndexError):
        read_lenenc(b"\x01", 1)
    assert read_lenenc(b"\xfc\x01", 0) == (1, 3)  # one byte short: what is there, full width
    assert read_lenenc(b"\xfe", 0) == (0, 9)


def test_read_lenenc_round_trips_random_values() -> None:
    rng = random.Random(13)
    values = [rng.randrange(2**bits) for bits in range(1, 65) for _ in range(20)]
    buf = b"".join(_lenenc(v) for v in values)
    pos, got = 0, []
    while pos < len(buf):
        v, pos = read_lenenc(buf, pos, len(buf))
        got.append(v)
    assert got == values
    assert pos == len(buf)


# --- UUID text -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    bytes(16), b"\xff" * 16, bytes(range(16)), bytes(range(0xF0, 0x100)),
    *(os.urandom(16) for _ in range(20)),
])
def test_uuid_text_matches_python_uuid(raw: bytes) -> None:
    want = str(uuid.UUID(bytes=raw))
    assert uuid_text(raw) == want
    assert uuid_text(bytearray(raw)) == want
    assert uuid_text(memoryview(b"pad" + raw + b"pad")[3:19]) == want


def test_uuid_text_known_value() -> None:
    assert uuid_text(bytes(range(16))) == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    raw = bytes.fromhex("3E11FA4771CA11E19E33C80AA9429562")
    assert uuid_text(raw) == "3e11fa47-71ca-11e1-9e33-c80aa9429562"  # lower case


@pytest.mark.parametrize("n", [0, 1, 15, 17, 32])
def test_uuid_text_wants_16_bytes(n: int) -> None:
    with pytest.raises(ValueError, match=f"a UUID is 16 bytes, not {n}"):
        uuid_text(bytes(n))


def test_the_copies_are_gone() -> None:
    """The modules that had their own copies now share these objects."""
    from binrelay.binlog import framing, parse
    from binrelay.relay import chain, hotloop, progress, scan, txnscan, writer
    from binrelay.rows import decoder, mariadb_types, scanner, walk
    from binrelay.spark import decode

    for mod in (parse, framing, decoder, hotloop, chain, writer):
        assert mod._HEADER is HEADER, mod.__name__
    for mod in (scan, decode):  # they frame through binlog.framing: no header of their own
        assert getattr(mod, "_HEADER", HEADER) is HEADER, mod.__name__
    for mod in (walk, scanner):
        assert mod._TYPE_SIZE is TYPE_SIZE, mod.__name__
    # txnscan frames through binlog.framing: no header struct of its own.
    assert getattr(txnscan, "_TYPE_SIZE", TYPE_SIZE) is TYPE_SIZE
    assert mariadb_types.uuid_text is uuid_text
    assert progress.MARIA_GTID is parse.MARIA_GTID is MARIA_GTID
