"""Where transactions end, from event types alone (no row decoding).

A relay position is only worth persisting at a transaction end: resuming there never cuts a
transaction in two.  The rules, per flavour:

* MariaDB: a GTID event opens every event group.  With ``FL_STANDALONE`` the group is one
  statement (DDL) and ends after its Query event; otherwise it ends at XID, at an
  XA_PREPARE event, or at a Query ``COMMIT``/``ROLLBACK``/``XA ...`` (non-transactional engines).
* MySQL: a GTID (or anonymous GTID) event precedes either ``BEGIN`` ... XID/COMMIT, or one
  DDL Query that commits on its own.  Binlogs without GTID events use BEGIN ... COMMIT/XID.
* Any event outside a group (FDE, Rotate, Previous_gtids, GTID_LIST, checkpoints, Stop,
  Incident, a bare DDL Query) is itself a boundary.
"""

from __future__ import annotations

import re
import unicodedata

from binrelay.binlog import constants as c

#: A tracker's states (``TxnTracker.state``): outside a group, after a MySQL GTID event,
#: inside a transaction, inside a MariaDB standalone group (one statement).
IDLE, AFTER_GTID, IN_TRX, STANDALONE = range(4)

# Not "XA END": an XA transaction's "XA END" Query is followed by its XA_PREPARE event (or by
# "XA COMMIT ... ONE PHASE"), which is what ends the group.
_ENDING_QUERY_PREFIXES = (b"COMMIT", b"ROLLBACK", b"XA COMMIT", b"XA ROLLBACK", b"XA PREPARE")

#: Event types that may sit inside an event group without ending it.
IN_GROUP_TYPES = frozenset({
    c.TABLE_MAP_EVENT, c.WRITE_ROWS_EVENT_V1, c.UPDATE_ROWS_EVENT_V1, c.DELETE_ROWS_EVENT_V1,
    c.WRITE_ROWS_EVENT, c.UPDATE_ROWS_EVENT, c.DELETE_ROWS_EVENT, c.PARTIAL_UPDATE_ROWS_EVENT,
    c.WRITE_ROWS_COMPRESSED_EVENT_V1, c.UPDATE_ROWS_COMPRESSED_EVENT_V1,
    c.DELETE_ROWS_COMPRESSED_EVENT_V1, c.WRITE_ROWS_COMPRESSED_EVENT,
    c.UPDATE_ROWS_COMPRESSED_EVENT, c.DELETE_ROWS_COMPRESSED_EVENT,
    c.ANNOTATE_ROWS_EVENT, c.ROWS_QUERY_LOG_EVENT, c.INTVAR_EVENT, c.RAND_EVENT,
    c.USER_VAR_EVENT, c.BEGIN_LOAD_QUERY_EVENT, c.APPEND_BLOCK_EVENT,
    c.TRANSACTION_CONTEXT_EVENT, c.IGNORABLE_LOG_EVENT,
})


def _is_begin(prefix: bytes) -> bool:
    return prefix.lstrip().upper().startswith(b"BEGIN") or prefix.upper().startswith(b"XA START")


def _is_end(prefix: bytes) -> bool:
    upper = prefix.lstrip().upper()
    if upper.startswith(b"ROLLBACK TO"):
        # "ROLLBACK TO `sp`" (a savepoint) is logged inside the transaction it belongs to.
        return False
    return any(upper.startswith(p) for p in _ENDING_QUERY_PREFIXES)


class TxnTracker:
    """Feed event types in order; ``feed`` returns True when the event ends a transaction.

    Not thread-safe; one tracker per stream.  ``in_transaction`` is True between the first
    event of a group and its end.
    """

    #: One of the states above (the relay's hot loop reads and sets it too).
    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = IDLE

    @property
    def in_transaction(self) -> bool:
        return self.state != IDLE

    @property
    def awaiting_body(self) -> bool:
        """After a MySQL GTID event, before the group's first event: BEGIN or a DDL may follow."""
        return self.state == AFTER_GTID

    def reset(self) -> None:
        self.state = IDLE

    def feed(self, event_type: int, *, maria_flags: int = 0, query_prefix: bytes = b"") -> bool:
        """``maria_flags``: the MariaDB GTID event's flags; ``query_prefix``: a Query's start."""
        state = self.state
        if event_type in IN_GROUP_TYPES:
            if state == AFTER_GTID:
                self.state = IN_TRX
            return False
        if event_type == c.XID_EVENT or event_type == c.XA_PREPARE_LOG_EVENT:
            self.state = IDLE
            return True
        if event_type == c.GTID_EVENT:
            self.state = STANDALONE if maria_flags & c.FL_STANDALONE else IN_TRX
            return False
        if event_type in (c.GTID_LOG_EVENT, c.ANONYMOUS_GTID_LOG_EVENT, c.GTID_TAGGED_LOG_EVENT):
            self.state = AFTER_GTID
            return False
        if event_type in (c.QUERY_EVENT, c.QUERY_COMPRESSED_EVENT, c.EXECUTE_LOAD_QUERY_EVENT):
            if state == IN_TRX:
                if _is_end(query_prefix):
                    self.state = IDLE
                    return True
                return False
            if _is_begin(query_prefix):
                self.state = IN_TRX
                return False
            # A DDL (after a GTID, standalone, or in a binlog without GTIDs) commits by itself.
            self.state = IDLE
            return True
        if event_type == c.TRANSACTION_PAYLOAD_EVENT:
            # MySQL's compressed transaction holds a whole transaction, XID included.
            self.state = IDLE
            return True
        if event_type in (c.FORMAT_DESCRIPTION_EVENT, c.ROTATE_EVENT, c.STOP_EVENT):
            # A group never spans files: whatever was open was cut off upstream.
            self.state = IDLE
            return True
        # An unknown event inside a group belongs to it; outside, it stands alone.
        return state == IDLE


def is_transaction_control(prefix: bytes) -> bool:
    """BEGIN, COMMIT, ROLLBACK, XA ...: a Query that is not itself a change."""
    upper = prefix.lstrip().upper()
    return upper.startswith((b"BEGIN", b"COMMIT", b"ROLLBACK", b"XA ", b"SAVEPOINT",
                             b"RELEASE SAVEPOINT"))


def is_savepoint_statement(prefix: bytes) -> bool:
    """SAVEPOINT, ROLLBACK TO, RELEASE SAVEPOINT: control inside a transaction that a
    replay must repeat (rows before a ROLLBACK TO are logged when the transaction also
    changed a non-transactional table, and only the rollback undoes them)."""
    upper = prefix.lstrip().upper()
    return upper.startswith((b"SAVEPOINT", b"RELEASE SAVEPOINT")) or (
        upper.startswith(b"ROLLBACK") and upper[8:].lstrip().startswith(b"TO"))


def ends_transaction(prefix: bytes) -> bool:
    """COMMIT or ROLLBACK (not ROLLBACK TO a savepoint) ending a BEGIN ... group."""
    upper = prefix.lstrip().upper()
    return upper.startswith((b"COMMIT", b"ROLLBACK")) and not is_savepoint_statement(prefix)


def is_rollback(prefix: bytes) -> bool:
    """ROLLBACK ending a BEGIN ... group: the upstream undid its transactional changes (it
    logs the group when the group also changed a non-transactional or temporary table)."""
    return ends_transaction(prefix) and prefix.lstrip().upper().startswith(b"ROLLBACK")


_NAME = r'(`(?:[^`]|``)+`|"(?:[^"]|"")+"|[^\s`";]+)'
_SAVEPOINT_ACTIONS = (
    ("set", re.compile(r"\s*SAVEPOINT\s+" + _NAME + r"\s*;?\s*$", re.I)),
    ("release", re.compile(r"\s*RELEASE\s+SAVEPOINT\s+" + _NAME + r"\s*;?\s*$", re.I)),
    ("rollback", re.compile(r"\s*ROLLBACK\s+(?:WORK\s+)?TO\s+(?:SAVEPOINT\s+)?" + _NAME
                            + r"\s*;?\s*$", re.I)),
)


def savepoint_action(text: str) -> tuple[str, str] | None:
    """Of a logged SAVEPOINT, RELEASE SAVEPOINT or ROLLBACK TO statement: what it does
    ("set", "release", "rollback") and the savepoint's name as the server compares it
    (:func:`savepoint_key`, quotes undone: backticks, or double quotes under ANSI_QUOTES);
    None for any other statement."""
    for action, pattern in _SAVEPOINT_ACTIONS:
        m = pattern.match(text)
        if m is not None:
            name = m.group(1)
            if name[0] in "`\"":
                name = name[1:-1].replace(name[0] * 2, name[0])
            return action, savepoint_key(name)
    return None


def savepoint_key(name: str) -> str:
    """A savepoint name as the server compares names (utf8mb3_general_ci, close enough:
    case and accents ignored, trailing spaces too)."""
    bare = "".join(ch for ch in unicodedata.normalize("NFD", name)
                   if not unicodedata.combining(ch))
    return "".join(ch.upper() if len(ch.upper()) == 1 else ch for ch in bare).rstrip(" ")


#: Events whose statement text (its start) the tracker needs.
QUERY_TYPES = frozenset({c.QUERY_EVENT, c.QUERY_COMPRESSED_EVENT, c.EXECUTE_LOAD_QUERY_EVENT})


def needs_query_prefix(event_type: int) -> bool:
    return event_type in QUERY_TYPES
