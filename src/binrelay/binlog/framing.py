"""Event framing, once: a binlog's bytes cut into whole events.

:class:`EventFramer` is sans-IO (h11's receive buffer is the model): ``feed`` it bytes, ask
it for the next whole event (:meth:`~EventFramer.next_event`) or for all whole events it
holds (:meth:`~EventFramer.events`).  When it holds no whole event it answers
:class:`NeedData`, naming how many more bytes it needs at least.  It checks each event as it
cuts it: the size is at least a header, the header's ``log_pos`` is where the event ends
(``log_pos`` is 32 bits: it wraps past 4 GiB; 0 is not checked), and, with CRC32 on, the
checksum (a FORMAT_DESCRIPTION_EVENT's ignores its in-use flag).  Errors carry the path and
the offset of the event: :class:`~binrelay.errors.BinlogFormatError`, and
:class:`~binrelay.errors.ChecksumMismatchError` for a CRC32.

A consumer that walks a buffer of events itself (the row scanner and its C walker) takes
the bytes held with :meth:`~EventFramer.run` and says how far it got with
:meth:`~EventFramer.consume`: no per-event step here.

:func:`feed_from` is the one loop that reads a byte range of a file into a framer, in
bounded chunks (one chunk plus the largest event); :func:`iter_events` is it with the events
cut: ``(offset, event bytes)``.  The file is opened by the caller (this package opens
nothing), so a file's own rules (the magic, what a torn tail means, a file that grows) stay
with the caller.  When the range ends inside an event they raise
:class:`~binrelay.errors.IncompleteEventError` with the file and the offset of that event,
unless told that a torn tail is the end (``torn_tail_ok``) or given the caller's own error
(``incomplete``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO
from zlib import crc32

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import TYPE_SIZE as _TYPE_SIZE
from binrelay.binlog.bytes import U32 as _U32
from binrelay.binlog.parse import verify_checksum
from binrelay.errors import BinlogFormatError, IncompleteEventError

CHUNK = 1 << 20
_HEADER_LEN = c.EVENT_HEADER_LEN
_U32_MASK = 0xFFFFFFFF


#: What a reader raises when its input stops inside an event (None: stop there quietly).
Incomplete = Callable[["EventFramer"], BaseException | None]


class NeedData:
    """The framer's answer when it holds no whole event: ``need`` more bytes at least."""

    __slots__ = ("need",)

    def __init__(self, need: int) -> None:
        self.need = need

    def __repr__(self) -> str:
        return f"NeedData({self.need})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NeedData) and other.need == self.need

    def __hash__(self) -> int:
        return hash((NeedData, self.need))


class EventFramer:
    """Whole events out of the bytes fed to it, which start at file offset ``offset`` (an
    event boundary).

    ``checksum_alg``: CRC32 checks each event (OFF: none); ``check_log_pos``: each header's
    end position must match (off for readers that leave all checks to the decoder).
    """

    __slots__ = ("_base", "_buf", "_check_log_pos", "_checksum_alg", "_crc", "_pos", "path")

    def __init__(self, offset: int = 4, *, checksum_alg: int = c.BINLOG_CHECKSUM_ALG_OFF,
                 check_log_pos: bool = True, path: str = "") -> None:
        self.path = path or None
        self._checksum_alg = checksum_alg
        self._crc = checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32
        self._check_log_pos = check_log_pos
        self._buf = b""
        self._pos = 0  # index in _buf of the next event
        self._base = offset  # file offset of _buf[0]

    # --- the buffer ----------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Append the next bytes of the file."""
        pos = self._pos
        self._base += pos
        self._buf = data if pos == len(self._buf) else self._buf[pos:] + data
        self._pos = 0

    @property
    def offset(self) -> int:
        """The file offset of the next event (where framing stands)."""
        return self._base + self._pos

    @property
    def end(self) -> int:
        """The file offset after the last byte fed."""
        return self._base + len(self._buf)

    @property
    def buffered(self) -> int:
        """Bytes fed and not yet handed out."""
        return len(self._buf) - self._pos

    def need(self) -> int:
        """How many more bytes the next whole event needs at least; 0 when one is held (or its
        header is bad, which taking it raises)."""
        have = len(self._buf) - self._pos
        if have < _HEADER_LEN:
            return _HEADER_LEN - have
        size = _U32.unpack_from(self._buf, self._pos + 9)[0]
        return size - have if size > have else 0

    # --- events --------------------------------------------------------------------------

    def next_event(self) -> tuple[int, bytes] | NeedData:
        """The next whole event as ``(offset, event bytes)``, or :class:`NeedData`."""
        need = self.need()
        if need:
            return NeedData(need)
        buf = self._buf
        p = self._pos
        size = self._check(buf, p)
        self._pos = p + size
        return self._base + p, buf[p : p + size]

    def events(self) -> list[tuple[int, bytes]]:
        """Every whole event held, in order, as ``(offset, event bytes)``; what is left is the
        start of an event (:meth:`need` says how much more it wants).

        A bad event ends the list before it; asked again, the framer raises its error (so a
        caller sees every good event before the error, as with :meth:`next_event`).
        """
        buf = self._buf
        p = self._pos
        n = len(buf)
        base = self._base
        check_log_pos = self._check_log_pos
        crc = self._crc
        out: list[tuple[int, bytes]] = []
        append = out.append
        if not check_log_pos and not crc:
            # Sizes only (the decoder checks the rest): the same cut, a third cheaper.
            size_at = _U32.unpack_from
            while n - p >= _HEADER_LEN:
                size = size_at(buf, p + 9)[0]
                if size < _HEADER_LEN or n - p < size:
                    self._stop_at(p, size, out)
                    break
                end = p + size
                append((base + p, buf[p:end]))
                p = end
            self._pos = p
            return out
        unpack = _HEADER.unpack_from
        while n - p >= _HEADER_LEN:
            _ts, etype, _sid, size, log_pos, _flags = unpack(buf, p)
            if size < _HEADER_LEN or n - p < size:
                self._stop_at(p, size, out)
                break
            end = p + size
            if check_log_pos and log_pos and log_pos != (base + end) & _U32_MASK:
                if out:
                    break
                self._pos = p
                self._bad_log_pos(etype, log_pos, base + p, size)
            event = buf[p:end]
            if crc and (etype == c.FORMAT_DESCRIPTION_EVENT or size < _HEADER_LEN + 4 or
                        crc32(event[:-4]) != _U32.unpack_from(event, size - 4)[0]):
                # The slow, general check: FDEs ignore their in-use flag; the rest raise.
                try:
                    verify_checksum(event, self._checksum_alg, offset=base + p, path=self.path)
                except BinlogFormatError:
                    if out:
                        break
                    self._pos = p
                    raise
            append((base + p, event))
            p = end
        self._pos = p
        return out

    def _check(self, buf: bytes, p: int) -> int:
        """Check the whole event at ``buf[p:]``; its size."""
        _ts, etype, _sid, size, log_pos, _flags = _HEADER.unpack_from(buf, p)
        offset = self._base + p
        if size < _HEADER_LEN:
            self._bad_size(size, offset)
        if self._check_log_pos and log_pos and log_pos != (offset + size) & _U32_MASK:
            self._bad_log_pos(etype, log_pos, offset, size)
        if self._crc:
            event = buf[p : p + size]
            if etype == c.FORMAT_DESCRIPTION_EVENT or size < _HEADER_LEN + 4 or \
                    crc32(event[:-4]) != _U32.unpack_from(event, size - 4)[0]:
                verify_checksum(event, self._checksum_alg, offset=offset, path=self.path)
        return size

    def _stop_at(self, p: int, size: int, out: list[tuple[int, bytes]]) -> None:
        """``events()`` stops at ``buf[p]``: an incomplete event, or a bad size, which raises
        when no good event comes before it."""
        if size < _HEADER_LEN and not out:
            self._pos = p
            self._bad_size(size, self._base + p)

    def _bad_size(self, size: int, offset: int) -> None:
        raise BinlogFormatError(f"event size {size} is smaller than its header",
                                path=self.path, offset=offset)

    def _bad_log_pos(self, etype: int, log_pos: int, offset: int, size: int) -> None:
        raise BinlogFormatError(
            f"{c.event_type_name(etype)} event header does not match its position (it says it "
            f"ends at {log_pos}, it ends at {offset + size})", path=self.path, offset=offset)

    # --- runs, for a consumer that walks the events itself -------------------------------

    def run(self) -> tuple[bytes, int, int]:
        """The bytes held: ``(buffer, index of the next event, file offset of buffer[0])``.
        The consumer checks what it walks; it reports how far with :meth:`consume`."""
        return self._buf, self._pos, self._base

    def consume(self, index: int) -> None:
        """The consumer of :meth:`run` took the events up to ``index`` (of the buffer)."""
        if not self._pos <= index <= len(self._buf):
            raise ValueError(f"consume({index}) outside [{self._pos}, {len(self._buf)}]")
        self._pos = index

    def incomplete(self, message: str = "the file ends inside an event"
                   ) -> IncompleteEventError:
        """The error for input that stops here: at the offset of the event it cuts."""
        if self.buffered:
            message = f"{message} ({self.buffered} bytes of it)"
        return IncompleteEventError(message, path=self.path, offset=self.offset)


def feed_from(f: BinaryIO, framer: EventFramer, end: int | None = None, *,
              chunk: int = CHUNK, torn_tail_ok: bool = False,
              incomplete: Incomplete | None = None) -> Iterator[EventFramer]:
    """Read ``f`` into ``framer`` from its :attr:`~EventFramer.end` (where ``f`` must stand)
    up to file offset ``end`` (None: to the end of the file); yield the framer after each
    read, for the caller to take the whole events it holds then.

    Reads are ``chunk`` bytes, or what the next event needs when it is larger, and never go
    past ``end``.  Stops when the range is read and the framer holds nothing more.  When the
    input stops inside an event (or the file ends before ``end``), raises what
    ``incomplete(framer)`` returns (default: :meth:`EventFramer.incomplete`, an
    :class:`~binrelay.errors.IncompleteEventError` at the offset of that event) or stops
    quietly when it returns None; with ``torn_tail_ok`` a range that ends inside an event
    (or a file, when ``end`` is None) is a quiet stop before that event
    (:attr:`~EventFramer.offset`).
    """
    read = f.read
    while True:
        want = framer.need()
        if want < chunk:
            want = chunk
        if end is not None:
            left = end - framer.end
            if left <= 0:
                if not framer.buffered or torn_tail_ok:
                    return
                break
            if want > left:
                want = left
        more = read(want)
        if not more:
            if end is None and (not framer.buffered or torn_tail_ok):
                return
            break
        framer.feed(more)
        yield framer
    error = framer.incomplete() if incomplete is None else incomplete(framer)
    if error is not None:
        raise error


def iter_events(f: BinaryIO, start: int, end: int | None, *, checksum_alg: int,
                path: str = "", chunk: int = CHUNK, check_log_pos: bool = True,
                torn_tail_ok: bool = False, incomplete: Incomplete | None = None
                ) -> Iterator[tuple[int, bytes]]:
    """Events of ``f`` from offset ``start`` (an event boundary) up to ``end`` (None: the end
    of the file), checked as :class:`EventFramer` does; see :func:`feed_from`."""
    f.seek(start)
    framer = EventFramer(start, checksum_alg=checksum_alg, check_log_pos=check_log_pos,
                         path=path)
    for _ in feed_from(f, framer, end, chunk=chunk, torn_tail_ok=torn_tail_ok,
                       incomplete=incomplete):
        while events := framer.events():
            yield from events


#: ``hop_frames`` statuses: the walk needs bytes after the buffer (more to read, or a body
#: to skip); it reached ``stop`` or an event running past it; an event is smaller than a
#: header.
HOP_MORE, HOP_END, HOP_BAD_SIZE = 0, 1, 2

Hopped = tuple[list[tuple[int, int, int, int]], int, int, int]


def hop_frames_python(buf: bytes, off: int, stop: int, whole: bytes, marks: int) -> Hopped:
    """The planner's walk over one buffer: ``(frames, off, marks, status)``.

    From ``buf[off]`` (an event start) up to ``stop`` (relative to ``buf``; it may lie past
    the buffer's end): events whose ``whole[type]`` is 1 are listed as ``(offset, type, size,
    marks)`` when the buffer holds them whole; any other value is ORed into ``marks`` and the
    body hopped over, even past the buffer's end.  The walk stops where it needs bytes the
    buffer lacks (``HOP_MORE``: ``off`` is the next event, maybe past the buffer), at
    ``stop`` or an event running past it (``HOP_END``), or at an event smaller than a header
    (``HOP_BAD_SIZE``, ``off`` at it).  ``marks``: what was hopped since the last event
    listed, carried across calls.

    ``binrelay._speedups.hop_frames`` (C) does exactly the same; a test runs both.
    """
    frames: list[tuple[int, int, int, int]] = []
    unpack = _TYPE_SIZE.unpack_from
    have = len(buf)
    while off < stop:
        if have - off < _HEADER_LEN:
            return frames, off, marks, HOP_MORE
        etype, size = unpack(buf, off + 4)
        if size < _HEADER_LEN:
            return frames, off, marks, HOP_BAD_SIZE
        if off + size > stop:
            return frames, off, marks, HOP_END
        how = whole[etype]
        if how != 1:
            marks |= how
            off += size
            continue
        if off + size > have:
            return frames, off, marks, HOP_MORE
        frames.append((off, etype, size, marks))
        marks = 0
        off += size
    return frames, off, marks, HOP_END


try:
    from binrelay._speedups import hop_frames as hop_frames_c
except ImportError:  # pragma: no cover - depends on the build
    hop_frames_c = None

hop_frames = hop_frames_c or hop_frames_python


def iter_frames(f: BinaryIO, start: int, stop: int, *, whole: bytes, path: str = "",
                chunk: int = CHUNK,
                incomplete: Callable[[int, int], BaseException | None] | None = None,
                ) -> Iterator[tuple[int, int, int, bytes, int]]:
    """The events of ``f`` in [``start``, ``stop``) a planner looks at, read whole, and what it
    hopped over to get there: ``(offset, type, size, event, marks)``.

    ``whole[type]``: 1 reads an event of that type whole; any other value hops over its
    body unread and ORs the value into ``marks``, which the next event read whole carries
    (a transaction's row events are most of its bytes, and where it ends is in a few small
    events; say 2 for "an event inside a group", 6 for "a rows event").  Hops after the last
    event read whole are not reported.  Only sizes are checked: the bytes are durable relay
    data, and the readers that decode them check the rest.  The walk of each buffer is
    :func:`hop_frames` (C when built).

    An event running past ``stop`` ends the walk (a finished file's torn tail: a stop inside
    a file being written is a transaction end).  A file ending before ``stop`` ends it
    quietly when less than a header was left, else ``incomplete(offset, file end)`` says
    what to raise (default: IncompleteEventError).
    """
    f.seek(start)
    buf = b""
    base = pos = start  # base: the file offset of buf[0]
    marks = 0

    def short(at: int) -> BaseException | None:
        return (incomplete(at, base + len(buf)) if incomplete is not None else
                IncompleteEventError("the file ends inside an event", path=path or None,
                                     offset=at))

    while pos < stop:
        off = pos - base
        if off > len(buf):
            # Hopping over a body went past what was read: skip the rest of it unread.
            f.seek(pos)
            buf, base, off = b"", pos, 0
        if len(buf) - off < _HEADER_LEN:
            more = f.read(min(chunk, stop - base - len(buf)))
            if not more:
                if stop - pos < _HEADER_LEN:
                    return  # a torn header at the end of a finished file
                if (error := short(pos)) is not None:
                    raise error
                return
            buf = buf[off:] + more
            base = pos
            continue
        frames, off, marks, status = hop_frames(buf, off, stop - base, whole, marks)
        for at, etype, size, hopped in frames:
            yield base + at, etype, size, buf[at:at + size], hopped
        pos = base + off
        if status == HOP_END:
            return
        if status == HOP_BAD_SIZE:
            size = _TYPE_SIZE.unpack_from(buf, off + 4)[1]
            raise BinlogFormatError(f"event size {size} is smaller than its header",
                                    path=path or None, offset=pos)
        if off <= len(buf) - _HEADER_LEN:
            # An event to read whole that the buffer holds only part of.
            size = _TYPE_SIZE.unpack_from(buf, off + 4)[1]
            buf = buf[off:] + f.read(max(chunk, size - (len(buf) - off)))
            base = pos
            if len(buf) < size:
                if (error := short(pos)) is not None:
                    raise error
                return
