"""How far a binlog stream has got, at transaction granularity: position and GTID set.

Fed every event of one file in order (by the writer as it relays, by recovery as it rescans a
file), it knows the end of the last complete transaction and the GTID set relayed up to there.
Pure: no I/O.
"""

from __future__ import annotations

from binrelay.binlog import constants as c
from binrelay.binlog.events import (
    parse_maria_gtid,
    parse_maria_gtid_list,
    parse_mysql_gtid,
    query_text_prefix,
)
from binrelay.binlog.txn import TxnTracker, needs_query_prefix
from binrelay.errors import BinlogFormatError, GtidError
from binrelay.gtid import GtidSet, MariaGtid, MariaGtidSet, MysqlGtidSet, parse_gtid_set


class Progress:
    """Not thread-safe.  ``boundary_pos``/``boundary_gtids`` describe the last transaction end."""

    __slots__ = ("_pending", "_tracker", "boundary_gtids", "boundary_pos", "flavor", "gtids")

    def __init__(self, *, flavor: str | None, gtid_text: str = "", position: int = 4) -> None:
        self.flavor = flavor
        self.gtids: GtidSet | None = None
        if gtid_text and flavor:
            self.gtids = parse_gtid_set(gtid_text, flavor)
        self.boundary_pos = position
        self.boundary_gtids = self.gtids
        self._tracker = TxnTracker()
        self._pending: tuple | None = None

    @property
    def in_transaction(self) -> bool:
        return self._tracker.in_transaction

    def gtid_text(self) -> str:
        return "" if self.boundary_gtids is None else str(self.boundary_gtids)

    def set_flavor(self, flavor: str, pending_text: str = "") -> None:
        if self.flavor is None:
            self.flavor = flavor
            if pending_text:
                self.gtids = parse_gtid_set(pending_text, flavor)
                self.boundary_gtids = self.gtids

    def new_file(self, position: int = 4) -> None:
        """A transaction never spans files: a new file starts at a boundary."""
        self._tracker.reset()
        self._pending = None
        self.boundary_pos = position
        self.boundary_gtids = self.gtids

    def feed(self, event: bytes | bytearray | memoryview, end_pos: int, checksum_len: int) -> bool:
        """Account for one event ending at ``end_pos``; True when it ends a transaction."""
        event_type = event[4]
        if event_type == c.GTID_EVENT:
            gtid = parse_maria_gtid(event)
            self._pending = ("maria", gtid)
            boundary = self._tracker.feed(event_type, maria_flags=gtid.flags)
        elif event_type == c.GTID_LOG_EVENT:
            self._pending = ("mysql", parse_mysql_gtid(event))
            boundary = self._tracker.feed(event_type)
        elif needs_query_prefix(event_type):
            prefix = query_text_prefix(memoryview(event)[: len(event)], checksum_len)
            boundary = self._tracker.feed(event_type, query_prefix=prefix)
        elif event_type == c.GTID_LIST_EVENT:
            triples = parse_maria_gtid_list(event, checksum_len)
            # The list is the binlog *state*: one entry per (domain, server_id), the domain's
            # latest last.  Keeping the last entry per domain gives the position.
            latest = {d: MariaGtid(d, s, n) for d, s, n in triples}
            listed = MariaGtidSet(tuple(latest.values()))
            self._union(listed)
            boundary = self._tracker.feed(event_type)
        elif event_type == c.PREVIOUS_GTIDS_LOG_EVENT:
            body = bytes(event[c.EVENT_HEADER_LEN : len(event) - checksum_len])
            try:
                previous = MysqlGtidSet.decode(body)
            except GtidError as exc:
                raise BinlogFormatError(f"bad PREVIOUS_GTIDS_LOG_EVENT: {exc.message}") from exc
            self._union(previous)
            boundary = self._tracker.feed(event_type)
        else:
            boundary = self._tracker.feed(event_type)
        if boundary:
            self._commit_pending()
            self.boundary_pos = end_pos
            self.boundary_gtids = self.gtids
        return boundary

    def _union(self, listed: GtidSet) -> None:
        if self.gtids is None:
            self.gtids = listed
        elif type(self.gtids) is type(listed):
            self.gtids = self.gtids.union(listed)  # type: ignore[arg-type]
        else:
            # The upstream's flavour changed under us (a MySQL set in a MariaDB stream):
            # the new server's own list is the only meaningful one.
            self.gtids = listed

    def _commit_pending(self) -> None:
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        kind, gtid = pending
        if kind == "maria":
            item = MariaGtid(gtid.domain_id, gtid.server_id, gtid.seq_no)
            base = self.gtids if isinstance(self.gtids, MariaGtidSet) else MariaGtidSet.parse("")
            self.gtids = base.add(item)
        else:
            base = self.gtids if isinstance(self.gtids, MysqlGtidSet) else MysqlGtidSet.parse("")
            self.gtids = base.add(gtid.uuid, gtid.gno)
