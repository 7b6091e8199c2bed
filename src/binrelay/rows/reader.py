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
from typing import Any, BinaryIO

from binrelay.binlog import constants as c
from binrelay.binlog.framing import CHUNK, EventFramer, feed_from, iter_events
from binrelay.errors import BinlogFormatError
from binrelay.rows.decoder import EventDecoder
from binrelay.rows.events import Event, RowChange
from binrelay.rows.scanner import ChangeScanner, RowsRun


def iter_file_events(path: Path | str, *, start: int = 4,
                     chunk: int = CHUNK) -> Iterator[tuple[int, bytes]]:
    """``(offset, event bytes)`` for every event of the binlog file at ``path``."""
    path = Path(path)
    with _open(path) as f:
        _check_magic(f, path)
        # No checks but the framing: the decoder checks each event (CRC32 included).
        yield from iter_events(f, start, None, checksum_alg=c.BINLOG_CHECKSUM_ALG_OFF,
                               path=str(path), chunk=chunk, check_log_pos=False)


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise BinlogFormatError(f"cannot open: {exc.strerror}", path=str(path)) from exc


def _check_magic(f: BinaryIO, path: Path) -> None:
    if f.read(4) != c.BINLOG_MAGIC:
        raise BinlogFormatError("not a binlog file (bad magic)", path=str(path), offset=0)


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
    return _scan_file(path, verify_checksums, chunk, by_event=False)


def iter_file_rows_runs(path: Path | str, *, verify_checksums: bool = True,
                        chunk: int = CHUNK) -> Iterator[RowsRun]:
    """The rows events of one binlog file as :meth:`ChangeScanner.scan_events` gives them
    (the images undecoded, for the caller to decode)."""
    return _scan_file(path, verify_checksums, chunk, by_event=True)


def _scan_file(path: Path | str, verify_checksums: bool, chunk: int, *,
               by_event: bool) -> Iterator[Any]:
    path = Path(path)
    scanner = ChangeScanner(verify_checksums=verify_checksums, path=str(path))
    scan = scanner.scan_events if by_event else scanner.scan
    with _open(path) as f:
        _check_magic(f, path)
        # The scanner walks the buffer itself (CRC32 checked), the framer only holds it.
        framer = EventFramer(4, path=str(path))
        for fr in feed_from(f, framer, None, chunk=chunk):
            buf, pos, base = fr.run()
            yield from scan(buf, pos, len(buf), file_offset=base)
            fr.consume(scanner.stopped_at)


def iter_changes(files: list[Path], *, verify_checksums: bool = True) -> Iterator[RowChange]:
    """Every row change of ``files`` in order (see :func:`iter_file_changes`)."""
    for path in files:
        yield from iter_file_changes(path, verify_checksums=verify_checksums)
