"""MariaDB's UUID, INET4 and INET6 types, and its COMPRESSED columns' values.

The binlog does not name them: TABLE_MAP shows BINARY(16), BINARY(4) and BINARY(16), so the
row decoder returns their bytes (padded back to full length: the server drops trailing zero
bytes of BINARY values when it logs them, which turns INET4 ``0.0.0.0`` into an empty
string).  The bytes are in the order of the text form (as ``HEX(CAST(col AS BINARY))``
shows them).  A caller that knows a column's declared type (from its DDL) turns them into
the server's text with these functions.
"""

from __future__ import annotations

import zlib

from binrelay.binlog.bytes import uuid_text as uuid_text  # the text of a UUID column


def inet4_text(raw: bytes) -> str:
    if len(raw) != 4:
        raise ValueError(f"an INET4 value is 4 bytes, not {len(raw)}")
    return ".".join(str(b) for b in raw)


def inet6_text(raw: bytes) -> str:
    """The server's text: lower-case hex words, the first longest run of zero words as
    ``::`` — even a run of one word (``2001:2::1:0:1:0:1``, where RFC 5952 would keep the
    zero) — and the embedded IPv4 forms ``::ffff:1.2.3.4`` (mapped) and ``::1.2.3.4``
    (compatible, not for ``::`` or ``::1``)."""
    if len(raw) != 16:
        raise ValueError(f"an INET6 value is 16 bytes, not {len(raw)}")
    words = [raw[i] << 8 | raw[i + 1] for i in range(0, 16, 2)]
    # The longest run of zero words (the first one on a tie) becomes "::".
    best_start, best_len, i = -1, 0, 0
    while i < 8:
        if words[i] == 0:
            j = i
            while j < 8 and words[j] == 0:
                j += 1
            if j - i > best_len:
                best_start, best_len = i, j - i
            i = j
        else:
            i += 1
    embedded_v4 = best_start == 0 and (best_len == 6 or (best_len == 5 and words[5] == 0xFFFF))
    parts: list[str] = []
    i = 0
    while i < 8:
        if i == best_start:
            parts.append("" if i else ":")
            i += best_len
            if i == 8:
                parts.append("")
            continue
        if embedded_v4 and i == 6:
            parts.append(inet4_text(raw[12:]))
            break
        parts.append(f"{words[i]:x}")
        i += 1
    return ":".join(parts)


def uncompressed(stored: bytes, longest: int | None = None) -> bytes:
    """A COMPRESSED column's value as the server stores (and logs) it, uncompressed: empty
    for an empty value; else a header byte whose high nibble is the method: 0, the value
    as it is follows; 8, zlib (the only one): the value's length in the header's low 3 bits
    of bytes, big-endian, then its deflate stream (raw when bit 0x08 is set, the server's
    default ``column_compression_zlib_wrap = OFF``; zlib-wrapped otherwise).  ``longest``:
    the column's most bytes, which a length past is corrupt (as the server says too)."""
    if not stored:
        return b""
    head = stored[0]
    method = head >> 4
    if method == 0:
        return bytes(stored[1:])
    if method != 8:
        raise ValueError(f"compressed value with an unknown method (header 0x{head:02x})")
    width = head & 0x07
    if not 1 <= width <= 4 or len(stored) < 1 + width:
        raise ValueError(f"compressed value with a bad header 0x{head:02x}")
    length = int.from_bytes(stored[1:1 + width], "big")
    if longest is not None and length > longest:
        raise ValueError(f"compressed value of {length} bytes in a column of {longest}")
    inflate = zlib.decompressobj(-zlib.MAX_WBITS if head & 0x08 else zlib.MAX_WBITS)
    value = inflate.decompress(bytes(stored[1 + width:]), length + 1)
    if len(value) != length or not inflate.eof:
        raise ValueError(f"compressed value does not inflate to its {length} bytes")
    return value
