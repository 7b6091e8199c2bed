"""What the relay does with one event from the upstream, decided before anything is written.

Like DM's ``relay/transformer`` in front of its writer: a pure function of the event's
header and where the current relay file ends returns a :class:`Decision` with a named
reason, and :class:`~binrelay.relay.writer.RelayWriter` carries it out.  The hot loop
(``relay/hotloop.py``) takes the runs of events whose decision is plainly :data:`WRITE`
without asking; every other event comes here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from binrelay.binlog import constants as c
from binrelay.errors import BinlogFormatError

_U32 = 1 << 32


class Action(Enum):
    WRITE = "write"  #: append it where the file ends
    FILL_THEN_WRITE = "fill-then-write"  #: a hole first (a dummy event of ``gap`` bytes)
    CHECK_REPEAT = "check-repeat"  #: it starts before the end: must equal what is on disk
    OPEN_FILE = "open-file"  #: the FDE that starts a new relay file
    TAKE_FORMAT = "take-format"  #: an FDE already written: its checksum setting, no bytes
    SWITCH_FILE = "switch-file"  #: a fake ROTATE naming the file the upstream sends next
    NOTE_UPSTREAM = "note-upstream"  #: a heartbeat: how far the upstream is, nothing written
    DROP = "drop"  #: nothing to write


#: Named reasons, for logs and tests.
ARTIFICIAL = "artificial: made up by the server for this session, not in its binlog file"
HEARTBEAT = "heartbeat: the upstream's position while it has nothing to send"
FDE_RESENT = "format description resent at the start of a resumed dump"
FAKE_ROTATE = "fake rotate: names the file the dump continues in"
FIRST_FDE = "format description: starts a relay file"
IN_PLACE = "starts where the relay file ends"
HOLE = "starts past the relay file's end: the upstream skipped events"
REPEAT = "starts before the relay file's end: sent again after a reconnect"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    #: FILL_THEN_WRITE: the hole's size; CHECK_REPEAT: where the event starts.
    gap: int = 0
    #: The event is a real ROTATE: after writing it, the file is finished.
    ends_file: bool = False


#: The event types whose decision depends on more than their position.
SPECIAL_TYPES = frozenset({c.FORMAT_DESCRIPTION_EVENT, c.ROTATE_EVENT, c.HEARTBEAT_LOG_EVENT,
                           c.HEARTBEAT_LOG_EVENT_V2})


def plainly_in_place(event_type: int, flags: int, size: int, log_pos: int, file_end: int,
                     file_open: bool) -> bool:
    """The case :func:`decide` answers with :data:`WRITE` that the writer tests inline (its
    common case, a transaction's end): keep the two in step (a test checks it)."""
    return (event_type not in SPECIAL_TYPES and not flags & c.LOG_EVENT_ARTIFICIAL_F
            and file_open and log_pos != 0 and log_pos - size == file_end)


# The common answers, made once (decide runs for every transaction end the relay writes);
# WRITE is public so that the writer's common case is one identity test.
WRITE = Decision(Action.WRITE, IN_PLACE)
_WRITE = WRITE
_WRITE_ROTATE = Decision(Action.WRITE, IN_PLACE, ends_file=True)
_TAKE_FORMAT = Decision(Action.TAKE_FORMAT, FDE_RESENT)
_OPEN_FILE = Decision(Action.OPEN_FILE, FIRST_FDE)
_NOTE_UPSTREAM = Decision(Action.NOTE_UPSTREAM, HEARTBEAT)
_SWITCH_FILE = Decision(Action.SWITCH_FILE, FAKE_ROTATE)
_DROP_ARTIFICIAL = Decision(Action.DROP, ARTIFICIAL)


def decide(event_type: int, flags: int, size: int, log_pos: int, file_end: int,
           file_open: bool, fake_rotate: bool = False, file_name: str = "") -> Decision:
    """The decision for one event (header fields; ``fake_rotate`` for a ROTATE whose
    ``log_pos`` is 0) given where the open relay file ends.  Raises
    :class:`~binrelay.errors.BinlogFormatError` for an event that cannot come yet."""
    if event_type == c.FORMAT_DESCRIPTION_EVENT:
        return _TAKE_FORMAT if file_open else _OPEN_FILE
    if event_type in (c.HEARTBEAT_LOG_EVENT, c.HEARTBEAT_LOG_EVENT_V2):
        return _NOTE_UPSTREAM
    if event_type == c.ROTATE_EVENT and fake_rotate:
        return _SWITCH_FILE
    rotate = event_type == c.ROTATE_EVENT
    if not rotate and flags & c.LOG_EVENT_ARTIFICIAL_F:
        return _DROP_ARTIFICIAL
    if not file_open:
        raise BinlogFormatError(
            f"{c.event_type_name(event_type)} event before any FORMAT_DESCRIPTION_EVENT "
            f"for {file_name or 'an unnamed file'}")
    # MariaDB 11.4+ may send log_pos 0; the event then belongs right here.
    start = log_pos - size if log_pos else file_end
    # The header holds positions modulo 2**32: compare there, so that a file past 4 GiB
    # still finds its events in place.
    delta = (start - file_end) % _U32
    if delta >= _U32 // 2:
        delta -= _U32
    if delta == 0:
        return _WRITE_ROTATE if rotate else _WRITE
    if delta > 0:
        return Decision(Action.FILL_THEN_WRITE, HOLE, gap=delta, ends_file=rotate)
    return Decision(Action.CHECK_REPEAT, REPEAT, gap=file_end + delta, ends_file=rotate)
