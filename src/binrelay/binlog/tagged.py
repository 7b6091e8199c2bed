"""GTID_TAGGED_LOG_EVENT (MySQL 8.4+), written in MySQL's serialization library format.

Body: format version (1 byte), payload size and last non-ignorable field id (varlen), then
fields, each a varlen field id and a value.  Varlen unsigned integers put the number of extra
bytes in the trailing one-bits of the first byte (``x << 1`` for x < 128, ``(x << 2) | 1`` for
x < 2**14, ... ``0xFF`` + 8 bytes); signed ones are zig-zag encoded on top.  The source UUID is
16 varlen-encoded bytes, the tag a varlen length and its characters.
"""

from __future__ import annotations

from typing import Any

from binrelay.binlog.bytes import uuid_text

_UINT, _INT, _SID, _STRING = range(4)
#: field id -> (name, kind); from mysql/binlog/event/control_events.h (Gtid_event).
_FIELDS = {
    0: ("flags", _UINT),
    1: ("uuid", _SID),
    2: ("gno", _INT),
    3: ("tag", _STRING),
    4: ("last_committed", _INT),
    5: ("sequence_number", _INT),
    6: ("immediate_commit_timestamp", _UINT),
    7: ("original_commit_timestamp", _UINT),
    8: ("transaction_length", _UINT),
    9: ("immediate_server_version", _UINT),
    10: ("original_server_version", _UINT),
    11: ("commit_group_ticket", _UINT),
}


def _uint(data: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(data):
        raise ValueError("tagged GTID truncated")
    first = data[pos]
    extra = 0
    while extra < 8 and first >> extra & 1:
        extra += 1
    if pos + 1 + extra > len(data):
        raise ValueError("tagged GTID truncated")
    if extra == 8:
        return int.from_bytes(data[pos + 1:pos + 9], "little"), pos + 9
    raw = int.from_bytes(data[pos:pos + 1 + extra], "little")
    return raw >> (extra + 1), pos + 1 + extra


def _int(data: bytes, pos: int) -> tuple[int, int]:
    value, pos = _uint(data, pos)
    return (-(value >> 1) - 1 if value & 1 else value >> 1), pos


def parse_tagged_gtid(body: bytes) -> dict[str, Any]:
    """The fields of a tagged GTID event body (header and checksum removed)."""
    if not body:
        raise ValueError("tagged GTID truncated")
    out: dict[str, Any] = {"version": body[0]}
    size, pos = _uint(body, 1)
    if size > len(body) or size < pos:
        raise ValueError(f"tagged GTID claims {size} bytes, has {len(body)}")
    end = size
    _lnif, pos = _uint(body, pos)
    data = body[:end]
    while pos < end:
        fid, pos = _uint(data, pos)
        spec = _FIELDS.get(fid)
        if spec is None:
            break  # a newer field we cannot size: what we need comes first anyway
        name, kind = spec
        if kind == _UINT:
            out[name], pos = _uint(data, pos)
        elif kind == _INT:
            out[name], pos = _int(data, pos)
        elif kind == _SID:
            raw = bytearray()
            for _ in range(16):
                b, pos = _uint(data, pos)
                if b > 255:
                    raise ValueError("tagged GTID source id byte out of range")
                raw.append(b)
            out[name] = uuid_text(raw)
        else:
            n, pos = _uint(data, pos)
            if pos + n > end:
                raise ValueError("tagged GTID truncated")
            out[name] = data[pos:pos + n].decode("ascii", "replace")
            pos += n
    if "uuid" not in out or "gno" not in out:
        raise ValueError("tagged GTID without source id or transaction number")
    return out
