"""The byte-level pieces every binlog reader needs: the event header, MySQL's length-encoded
integers, a MariaDB GTID's fields, and the text of a 16-byte UUID.

Pure and at the bottom: imports only the standard library.
"""

from __future__ import annotations

import struct

#: The 19-byte event header: timestamp, event type, server id, event size, end position
#: (``log_pos``), flags.
HEADER = struct.Struct("<IBIIIH")
#: The header's event type and event size, read from offset 4 (after the timestamp).
TYPE_SIZE = struct.Struct("<BxxxxI")
#: A little-endian unsigned 32-bit field (the CRC32 after an event, a timestamp).
U32 = struct.Struct("<I")
#: The start of a MariaDB GTID_EVENT's body: sequence number, domain id, flags.
MARIA_GTID = struct.Struct("<QIB")

#: Bytes after the first byte of a length-encoded integer, by its first byte.
_LENENC_WIDTH = {0xFC: 2, 0xFD: 3, 0xFE: 8}


class LenencError(ValueError):
    """A length-encoded integer that does not read.

    ``first``: its first byte, None when there is none (the position is at the end);
    ``truncated``: it runs past the end (False: the first byte, 0xFB or 0xFF, starts none).
    Callers with their own wording for these cases raise their error from these two.
    """

    def __init__(self, message: str, *, first: int | None, truncated: bool) -> None:
        super().__init__(message)
        self.first = first
        self.truncated = truncated


def read_lenenc(buf: bytes | bytearray | memoryview, pos: int,
                end: int | None = None) -> tuple[int, int]:
    """MySQL's length-encoded integer (``net_field_length``) at ``pos``: (value, next position).

    A first byte below 0xFB is the value; 0xFC, 0xFD and 0xFE are followed by a 2-, 3- and
    8-byte little-endian value.  Raises :class:`LenencError` for 0xFB and 0xFF, and, with
    ``end``, for one that does not end by ``end``.  Without ``end`` nothing is checked but
    the first byte (an ``IndexError`` past the buffer), as for readers that check their
    position once afterwards: a value cut short by the buffer's end reads what is there and
    the position still moves past its full width.
    """
    if end is not None and pos >= end:
        raise LenencError("length-encoded integer truncated", first=None, truncated=True)
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = _LENENC_WIDTH.get(first)
    if width is None:
        raise LenencError(f"bad length-encoded integer (first byte 0x{first:02x})",
                          first=first, truncated=False)
    nxt = pos + 1 + width
    if end is not None and nxt > end:
        raise LenencError("length-encoded integer truncated", first=first, truncated=True)
    return int.from_bytes(buf[pos + 1:nxt], "little"), nxt


def lenenc_bytes(n: int) -> bytes:
    """``n`` as a length-encoded integer (the inverse of :func:`read_lenenc`)."""
    if n < 0xFB:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def uuid_text(raw: bytes | bytearray | memoryview) -> str:
    """A UUID's 16 bytes as its text: lower-case hex, dashed 8-4-4-4-12."""
    if len(raw) != 16:
        raise ValueError(f"a UUID is 16 bytes, not {len(raw)}")
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
