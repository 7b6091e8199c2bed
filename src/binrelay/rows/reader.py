"""The I/O edge: whole events out of binlog and relay files (which files a relay directory
holds, in order, is :func:`binrelay.relay.chain.relay_dir_files`).

Files are read in chunks; an event is handed out as its own ``bytes`` (header, body,
checksum), so memory is bounded by the chunk size plus the largest event.  A file that ends
inside an event raises :class:`~binrelay.errors.IncompleteEventError` naming the file and the
offset where that event starts; a file that does not start with the binlog magic raises
:class:`~binrelay.errors.BinlogFormatError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.errors import BinlogFormatError, IncompleteEventError
from binrelay.rows.decoder import EventDecoder
from binrelay.rows.events import Event, RowChange
from binrelay.rows.scanner import ChangeScanner

CHUNK = 1 << 20


def iter_file_events(path: Path | str, *, start: int = 4,
                     chunk: int = CHUNK) -> Iterator[tuple[int, bytes]]:
    """``(offset, event bytes)`` for every event of the binlog file at ``path``."""
    path = Path(path)
    try:
        f = path.open("rb")
    except OSError as exc:
        raise BinlogFormatError(f"cannot open: {exc.strerror}", path=str(path)) from exc
    with f:
        magic = f.read(4)
        if magic != c.BINLOG_MAGIC:
            raise BinlogFormatError("not a binlog file (bad magic)", path=str(path), offset=0)
        if start != 4:
            f.seek(start)
        buf = b""
        pos = 0
        offset = start  # file offset of buf[pos]
        eof = False
        need = c.EVENT_HEADER_LEN
        while True:
            avail = len(buf) - pos
            if avail < need:
                if eof:
                    break
                more = f.read(max(chunk, need - avail))
                eof = not more
                buf = buf[pos:] + more
                pos = 0
                continue
            size = int.from_bytes(buf[pos + 9:pos + 13], "little")
            if size < c.EVENT_HEADER_LEN:
                raise BinlogFormatError(
                    f"event size {size} is smaller than the {c.EVENT_HEADER_LEN}-byte header",
                    path=str(path), offset=offset)
            if avail < size:
                need = size
                continue
            yield offset, buf[pos:pos + size]
            pos += size
            offset += size
            need = c.EVENT_HEADER_LEN
        if len(buf) - pos:
            raise IncompleteEventError(
                f"file ends inside an event ({len(buf) - pos} bytes of it)", path=str(path),
                offset=offset)


@dataclass(frozen=True, slots=True)
class Located:
    """A decoded event and where it is: ``pos`` is the event's offset in ``file``."""

    file: Path
    pos: int
    event: Event

    @property
    def end_pos(self) -> int:
        return self.pos + self.event.header.event_size


def decode_files(files: list[Path], *, verify_checksums: bool = True) -> Iterator[Located]:
    """Decode every event of ``files`` in order (payload contents follow their payload)."""
    for path in files:
        decoder = EventDecoder(verify_checksums=verify_checksums, path=str(path))
        for offset, raw in iter_file_events(path):
            for event in decoder.feed(raw, offset):
                yield Located(path, offset, event)


def iter_file_changes(path: Path | str, *, verify_checksums: bool = True,
                      chunk: int = CHUNK) -> Iterator[RowChange]:
    """Every row change of one binlog file, located (file, offsets, GTID): the fast path."""
    path = Path(path)
    scanner = ChangeScanner(verify_checksums=verify_checksums, path=str(path))
    try:
        f = path.open("rb")
    except OSError as exc:
        raise BinlogFormatError(f"cannot open: {exc.strerror}", path=str(path)) from exc
    with f:
        if f.read(4) != c.BINLOG_MAGIC:
            raise BinlogFormatError("not a binlog file (bad magic)", path=str(path), offset=0)
        base = 4  # file offset of buf[0]
        buf = b""
        while True:
            more = f.read(chunk)
            if not more:
                break
            buf = buf + more if buf else more
            yield from scanner.scan(buf, 0, len(buf), file_offset=base)
            done = scanner.stopped_at
            if done:
                base += done
                buf = buf[done:]
            elif len(buf) >= c.EVENT_HEADER_LEN:
                # One event larger than the buffer: read the rest of it in one go.
                size = int.from_bytes(buf[9:13], "little")
                if size > len(buf):
                    rest = f.read(size - len(buf))
                    buf += rest
                    if len(rest):
                        yield from scanner.scan(buf, 0, len(buf), file_offset=base)
                        base += scanner.stopped_at
                        buf = buf[scanner.stopped_at:]
        if buf:
            raise IncompleteEventError(
                f"file ends inside an event ({len(buf)} bytes of it)", path=str(path),
                offset=base)


def iter_changes(files: list[Path], *, verify_checksums: bool = True) -> Iterator[RowChange]:
    """Every row change of ``files`` in order (see :func:`iter_file_changes`)."""
    for path in files:
        yield from iter_file_changes(path, verify_checksums=verify_checksums)
