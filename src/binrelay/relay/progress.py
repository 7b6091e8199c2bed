"""How far a binlog stream has got, at transaction granularity: position and GTID set.

Fed every event of one file in order (by the writer as it relays, by recovery as it rescans a
file), it knows the end of the last complete transaction and the GTID set relayed up to there.
GTIDs are committed to the set only when their transaction ends, so the set always describes
``boundary_pos``.  The set is kept in a plain mutable form (this runs once per transaction on
the relay's hot path) and turned into text only when asked.  Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import MARIA_GTID
from binrelay.binlog.parse import (
    mysql_gtid_fields,
    parse_maria_gtid_list,
    parse_previous_gtids,
    query_text_prefix,
)
from binrelay.binlog.txn import TxnTracker, needs_query_prefix
from binrelay.errors import BinlogFormatError
from binrelay.gtid import GtidSet, MariaGtidSet, MysqlGtidSet, parse_gtid_set


@dataclass(slots=True)
class TxnRun:
    """A MariaDB stream's transaction state, lent to the relay's hot loop
    (``hotloop.take_run``) so that it takes GTID and XID events too, with the effect
    :meth:`Progress.feed` would have: the tracker's ``state`` and the ``pending`` GTID
    (domain, server_id, seq_no) in and out; committed GTIDs merged into ``maria`` in place;
    out, the end of the last transaction taken (``boundary``, 0: none) and the header
    timestamp of the last GTID or XID event taken (None: none)."""

    state: int
    pending: tuple[int, int, int] | None
    maria: dict[int, tuple[int, int]]
    boundary: int = 0
    last_ts: int | None = None


def merge_maria(maria: dict[int, tuple[int, int]], domain: int, server: int, seq: int) -> None:
    """A committed MariaDB GTID into ``maria`` (domain -> (server_id, seq_no) of its last):
    the highest seq_no of each domain stays (the C hot loop does the same)."""
    old = maria.get(domain)
    if old is None or seq >= old[1]:
        maria[domain] = (server, seq)


class Progress:
    """Not thread-safe.  ``boundary_pos`` is the end of the last complete transaction."""

    __slots__ = ("_maria", "_mysql", "_mysql_added", "_pending", "_text", "_tracker",
                 "boundary_pos", "flavor")

    def __init__(self, *, flavor: str | None, gtid_text: str = "", position: int = 4) -> None:
        self.flavor = flavor
        #: MariaDB: domain -> (server_id, seq_no) of the domain's last GTID.
        self._maria: dict[int, tuple[int, int]] = {}
        #: MySQL: the set, plus GTIDs added since it was last folded in.
        self._mysql: MysqlGtidSet | None = None
        self._mysql_added: list[tuple[str, int]] = []
        self._text: str | None = gtid_text
        self._pending: tuple | None = None
        self._tracker = TxnTracker()
        self.boundary_pos = position
        if gtid_text and flavor:
            self._load(parse_gtid_set(gtid_text, flavor))

    # --- the GTID set --------------------------------------------------------------------

    def _load(self, gtids: GtidSet) -> None:
        if isinstance(gtids, MariaGtidSet):
            for g in gtids:
                self._merge_maria(g.domain_id, g.server_id, g.seq_no)
        else:
            self._mysql = gtids if self._mysql is None else self._mysql.union(gtids)
        self._text = None

    def _merge_maria(self, domain: int, server: int, seq: int) -> None:
        merge_maria(self._maria, domain, server, seq)

    def gtid_text(self) -> str:
        if self._text is None:
            if self._maria:
                self._text = ",".join(f"{d}-{s}-{q}" for d, (s, q) in sorted(self._maria.items()))
            elif self._mysql is not None or self._mysql_added:
                base = self._mysql or MysqlGtidSet()
                for uuid, gno in self._mysql_added:
                    base = base.add(uuid, gno)
                self._mysql, self._mysql_added = base, []
                self._text = str(base)
            else:
                self._text = ""
        return self._text

    def set_flavor(self, flavor: str, pending_text: str = "") -> None:
        """The flavour becomes known from the first FDE; parse what meta said then."""
        if self.flavor is None:
            self.flavor = flavor
            if pending_text:
                self._load(parse_gtid_set(pending_text, flavor))

    # --- events ----------------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        return self._tracker.in_transaction

    @property
    def awaiting_body(self) -> bool:
        return self._tracker.awaiting_body

    def run_state(self) -> TxnRun | None:
        """What the hot loop needs to take this stream's GTID and XID events itself (None
        for a MySQL stream: its transactions go through :meth:`feed`)."""
        if self.flavor != "mariadb":
            return None
        return TxnRun(self._tracker.state, self._pending, self._maria)

    def after_run(self, run: TxnRun) -> bool:
        """Take back what the hot loop did with ``run`` (``_maria`` it merged into already);
        True when a transaction ended in it."""
        self._tracker.state = run.state
        self._pending = run.pending
        if not run.boundary:
            return False
        self.boundary_pos = run.boundary
        self._text = None
        return True

    def new_file(self, position: int = 4) -> None:
        """A transaction never spans files: a new file starts at a boundary."""
        self._tracker.reset()
        self._pending = None
        self.boundary_pos = position

    def feed(self, event: bytes | bytearray | memoryview, end_pos: int, checksum_len: int) -> bool:
        """Account for one event ending at ``end_pos``; True when it ends a transaction."""
        event_type = event[4]
        if event_type == c.GTID_EVENT:
            if len(event) < c.EVENT_HEADER_LEN + 13:
                raise BinlogFormatError("GTID_EVENT truncated")
            seq, domain, flags = MARIA_GTID.unpack_from(event, c.EVENT_HEADER_LEN)
            self._pending = (domain, int.from_bytes(event[5:9], "little"), seq)
            boundary = self._tracker.feed(event_type, maria_flags=flags)
        elif event_type == c.GTID_LOG_EVENT:
            self._pending = mysql_gtid_fields(event)
            boundary = self._tracker.feed(event_type)
        elif needs_query_prefix(event_type):
            prefix = query_text_prefix(event, checksum_len)
            boundary = self._tracker.feed(event_type, query_prefix=prefix)
        elif event_type == c.GTID_LIST_EVENT:
            for domain, server, seq in parse_maria_gtid_list(event, checksum_len):
                self._merge_maria(domain, server, seq)
            self._text = None
            boundary = self._tracker.feed(event_type)
        elif event_type == c.PREVIOUS_GTIDS_LOG_EVENT:
            self._load(parse_previous_gtids(event, checksum_len))
            boundary = self._tracker.feed(event_type)
        else:
            boundary = self._tracker.feed(event_type)
        if boundary:
            pending = self._pending
            if pending is not None:
                self._pending = None
                if len(pending) == 3:
                    self._merge_maria(*pending)
                else:
                    self._mysql_added.append(pending)
                self._text = None
            self.boundary_pos = end_pos
        return boundary
