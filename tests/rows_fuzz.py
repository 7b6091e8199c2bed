"""Shared fuzzing machinery: corrupt one event of a real binlog, decode everything.

The only acceptable outcomes are a clean decode or a ``BinlogFormatError``: never another
exception, never a hang (the tests using this run under pytest-timeout).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from binrelay.binlog.events import TransactionPayloadEvent
from binrelay.errors import BinlogFormatError
from binrelay.rows import EventDecoder, RowsEvent, iter_file_events
from binrelay.rows.scanner import ChangeScanner


def load_events(path: Path) -> list[tuple[int, bytes]]:
    return list(iter_file_events(path))


@st.composite
def corrupted(draw: st.DrawFn, events: list[tuple[int, bytes]]) -> tuple[int, bytes]:
    """(index of the event to replace, its corrupted bytes)."""
    index = draw(st.integers(0, len(events) - 1))
    raw = bytearray(events[index][1])
    how = draw(st.sampled_from(["truncate", "flip", "splice", "grow", "size"]))
    if how == "truncate":
        raw = raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
    elif how == "flip":
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(19 if len(raw) > 19 else 0, len(raw) - 1))
            raw[pos] ^= draw(st.integers(1, 255))
    elif how == "splice":
        pos = draw(st.integers(19, max(19, len(raw))))
        raw[pos:pos + draw(st.integers(0, 8))] = draw(st.binary(max_size=8))
    elif how == "grow":
        raw += draw(st.binary(min_size=1, max_size=16))
    else:  # a body that does not match its header's size
        raw[9:13] = draw(st.integers(0, 2 * len(raw) + 40)).to_bytes(4, "little")
    if how != "size" and len(raw) >= 13:
        # Keep the header consistent so the corruption reaches the body parsers.
        raw[9:13] = len(raw).to_bytes(4, "little")
    return index, bytes(raw)


def decode_with(events: list[tuple[int, bytes]], index: int, bad: bytes) -> None:
    """Decode ``events`` with event ``index`` replaced by ``bad``, both ways; checksums off so
    that the corrupted bytes reach the parsers."""
    decoder = EventDecoder(verify_checksums=False, path="fuzz")
    try:
        for i, (offset, raw) in enumerate(events):
            for event in decoder.feed(bad if i == index else raw, offset):
                if isinstance(event, RowsEvent):
                    for _ in event.rows():
                        pass
                if isinstance(event, TransactionPayloadEvent):
                    pass
    except BinlogFormatError:
        pass
    scanner = ChangeScanner(verify_checksums=False, path="fuzz")
    buf = b"".join(bad if i == index else raw for i, (_, raw) in enumerate(events))
    try:
        for _ in scanner.scan(buf, 0, len(buf), file_offset=4):
            pass
    except BinlogFormatError:
        pass
