"""Compressed events: MariaDB's zlib-compressed Query/Rows events, MySQL's zstd payloads.

MariaDB (``log_bin_compress=ON``): the statement text of a QUERY_COMPRESSED_EVENT, or the row
images of a *_ROWS_COMPRESSED_EVENT, are replaced by one header byte ``0x80 | n``, the
uncompressed length in ``n`` big-endian bytes, and a zlib stream.

MySQL (``binlog_transaction_compression=ON``, 8.0.20+): a TRANSACTION_PAYLOAD_EVENT holds a
whole transaction.  Its body is a list of (type, length, value) fields with length-encoded
integers, ended by type 0, then the compressed events.  The inner events are whole events
(19-byte header) without checksums; they are streamed out of the decompressor one at a time
so memory stays bounded by the largest inner event, not the transaction.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import IO

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import LenencError, read_lenenc

# TRANSACTION_PAYLOAD fields.
OTW_PAYLOAD_HEADER_END_MARK = 0
OTW_PAYLOAD_SIZE_FIELD = 1
OTW_PAYLOAD_COMPRESSION_TYPE_FIELD = 2
OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD = 3

COMPRESSION_ZSTD = 0
COMPRESSION_NONE = 255

#: Refuse to inflate a MariaDB event beyond this: its real limit is max_allowed_packet (1 GiB).
MAX_UNCOMPRESSED = 1 << 30


class CompressionError(ValueError):
    pass


def maria_uncompress(data: bytes | memoryview) -> bytes:
    """Inflate MariaDB's compressed block (header byte, big-endian length, zlib data)."""
    if not data:
        raise CompressionError("compressed block is empty")
    head = data[0]
    if head & 0xE0 != 0x80:
        raise CompressionError(f"bad compressed block header 0x{head:02x}")
    n = head & 0x07
    if not 1 <= n <= 4 or len(data) < 1 + n:
        raise CompressionError("bad compressed block length field")
    size = int.from_bytes(data[1:1 + n], "big")
    if size > MAX_UNCOMPRESSED:
        raise CompressionError(f"compressed block claims {size} bytes")
    d = zlib.decompressobj()
    try:
        out = d.decompress(bytes(data[1 + n:]), size + 1)
    except zlib.error as exc:
        raise CompressionError(f"zlib: {exc}") from None
    if len(out) != size or not d.eof:
        raise CompressionError(
            f"compressed block inflates to {len(out)} bytes, its header says {size}")
    return out


def _net_length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_lenenc(data, pos, end)
    except LenencError:
        raise CompressionError("TRANSACTION_PAYLOAD_EVENT header truncated") from None


def parse_payload_header(data: bytes, pos: int, end: int) -> tuple[dict[int, int], int]:
    """The header fields and the offset where the compressed payload starts."""
    fields: dict[int, int] = {}
    while True:
        ftype, pos = _net_length(data, pos, end)
        if ftype == OTW_PAYLOAD_HEADER_END_MARK:
            return fields, pos
        length, pos = _net_length(data, pos, end)
        if pos + length > end:
            raise CompressionError("TRANSACTION_PAYLOAD_EVENT header field truncated")
        value, _ = _net_length(data, pos, pos + length) if length else (0, pos)
        fields[ftype] = value
        pos += length


def iter_payload_events(payload: bytes, compression_type: int,
                        uncompressed_size: int) -> Iterator[bytes]:
    """The raw inner events of a transaction payload, one at a time."""
    if compression_type == COMPRESSION_NONE:
        stream: IO[bytes] = _BytesStream(payload)
    elif compression_type == COMPRESSION_ZSTD:
        import zstandard

        stream = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
    else:
        raise CompressionError(f"unknown transaction compression type {compression_type}")
    total = 0
    try:
        while True:
            header = _read_exact(stream, c.EVENT_HEADER_LEN, allow_eof=True)
            if not header:
                break
            size = int.from_bytes(header[9:13], "little")
            if size < c.EVENT_HEADER_LEN:
                raise CompressionError(f"inner event size {size} is smaller than a header")
            total += size
            if uncompressed_size and total > uncompressed_size:
                raise CompressionError("inner events exceed the payload's uncompressed size")
            yield header + _read_exact(stream, size - c.EVENT_HEADER_LEN)
    except CompressionError:
        raise
    except Exception as exc:  # zstd.ZstdError and friends
        raise CompressionError(f"zstd: {exc}") from None
    if uncompressed_size and total != uncompressed_size:
        raise CompressionError(
            f"payload holds {total} bytes of events, its header says {uncompressed_size}")


def _read_exact(stream: IO[bytes], n: int, *, allow_eof: bool = False) -> bytes:
    parts: list[bytes] = []
    need = n
    while need:
        chunk = stream.read(need)
        if not chunk:
            if allow_eof and need == n:
                return b""
            raise CompressionError("TRANSACTION_PAYLOAD_EVENT payload ends inside an event")
        parts.append(chunk)
        need -= len(chunk)
    return b"".join(parts)


class _BytesStream:
    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def read(self, n: int) -> bytes:
        out = self._data[self._pos:self._pos + n]
        self._pos += len(out)
        return out
