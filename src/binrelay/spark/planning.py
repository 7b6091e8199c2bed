"""Offsets and partitions over a relay dir, for the ``relaylog`` source's driver side.

An offset is a relay position at a transaction end (or a file start), as a plain dict
``{"subdir": "0-1.000001", "file": "mysql-bin.000003", "pos": 1234}``.  Offsets never pass the
durable end (the last subdir's relay.meta).  A range between two offsets is cut into
partitions: byte ranges of one relay file whose both ends are transaction ends, so any
executor decodes one on its own (ROW transactions carry their own table maps).  A DDL
transaction is always a partition of its own, and with the DDL barrier a batch holding a DDL
holds nothing else (but, when the caller allows, the DDL right after it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from binrelay.binlog.framing import iter_events
from binrelay.errors import ConfigError, GtidError, RelayDirError
from binrelay.gtid import GtidSet, parse_gtid_set
from binrelay.position import Position, SubdirName, binlog_sort_key
from binrelay.relay.chain import check_handover
from binrelay.relay.progress import Progress
from binrelay.relay.relaydir import RelayView
from binrelay.relay.scan import read_fde
from binrelay.relay.txnscan import (
    BARRIERS,
    DDL,
    DML,
    INCIDENT,
    OTHER,
    SERIAL,
    XA_END,
    XA_PREPARE,
    TxnEnd,
    scan_transactions,
    transaction_ends,
)


@dataclass(frozen=True)
class Span:
    """The part of one relay file between two positions."""

    subdir: SubdirName
    file: str
    start: int
    stop: int
    #: The span reaches the end of a file the relay has finished (bytes after its last
    #: transaction end, if any, belong to a transaction the upstream never completed).
    finished: bool

    @property
    def path_parts(self) -> tuple[str, str]:
        return str(self.subdir), self.file


def spans(relay: RelayView | Path, start: Position, end: Position) -> list[Span]:
    """The relay files from ``start`` to ``end``, each proven to follow the one before it
    (``relay.chain``): a gap in the relay stops the reader instead of being stepped over."""
    return list(iter_spans(relay, start, end))


def iter_spans(relay: RelayView | Path, start: Position, end: Position) -> Iterator[Span]:
    """:func:`spans` one by one, each file's hand-over checked just before it is yielded (a
    batch that ends early has not paid for the files behind it)."""
    view = RelayView.of(relay)
    for subdir in view.index:
        if subdir.seq < start.subdir.seq or subdir.seq > end.subdir.seq:
            continue
        sub = view.path(subdir)
        meta = view.meta(subdir)
        files = view.files(subdir)
        # A start file that is gone while later ones are there: reading on would skip it.
        if subdir == start.subdir and start.binlog_name not in files \
                and any(binlog_sort_key(f) > binlog_sort_key(start.binlog_name) for f in files):
            raise RelayDirError(f"relay file {sub / start.binlog_name} is missing",
                                hint="restore it; binrelay does not read past a gap")
        previous: str | None = None
        for name in files:
            here = (subdir.seq, binlog_sort_key(name))
            if previous is not None and (subdir.seq, binlog_sort_key(previous)) >= \
                    start.file_key() and here <= end.file_key():
                check_handover(sub, previous, name)
            previous = name
            if here < start.file_key() or here > end.file_key():
                continue
            size = (sub / name).stat().st_size
            is_meta_file = meta is not None and name == meta.binlog_name
            finished = not is_meta_file and (
                meta is None or binlog_sort_key(name) < binlog_sort_key(meta.binlog_name))
            stop = size if finished else (meta.binlog_pos if meta is not None else 4)
            if here == end.file_key():
                finished = finished and end.binlog_pos >= size
                stop = min(stop, end.binlog_pos)
            first = start.binlog_pos if here == start.file_key() else 4
            if stop > first or finished:
                yield Span(subdir, name, max(first, 4), stop, finished)


def relay_bytes(relay: RelayView | Path, start: Position, end: Position, *,
                at_most: int | None = None) -> int:
    """The relay's bytes from ``start`` to ``end``; once past ``at_most``, the sum so far
    (the files further on are not looked at)."""
    total = 0
    for span in iter_spans(relay, start, end):
        total += span.stop - span.start
        if at_most is not None and total > at_most:
            break
    return total


def advance(relay: RelayView | Path, start: Position, end: Position, *,
            max_bytes: int | None = None, max_transactions: int | None = None,
            ddl_barrier: bool = True) -> Position:
    """The furthest offset after ``start`` and not past ``end`` within the limits.

    With ``ddl_barrier`` a batch stops before a DDL, or holds only that DDL when it comes
    first.  Limits never leave a batch empty: one transaction always fits.
    """
    return next_batch(relay, start, end, max_bytes=max_bytes,
                      max_transactions=max_transactions, ddl_barrier=ddl_barrier)[0]


def next_batch(relay: RelayView | Path, start: Position, end: Position, *,
               max_bytes: int | None = None, max_transactions: int | None = None,
               ddl_barrier: bool = True, target_bytes: int = 16 << 20,
               gtids: list[str] | None = None, ddl_run: int = 1, run_rows: int = 0,
               ) -> tuple[Position, list[Segment]]:
    """:func:`advance` and :func:`plan_partitions` of its range in one scan of the relay.

    ``gtids``, when given, receives the GTIDs of the batch's transactions in relay order.

    Barriers (DDL, transactions holding statements, prepared XA transactions) are a batch
    of their own; a batch that starts with a DDL also takes up to ``ddl_run`` - 1 DDL
    transactions right after it (a migration's run of DDL: one checkpoint commit serves
    them all), and with them the row transactions between them, up to ``run_rows`` bytes
    in all (a migration's backfills: applied in relay order on the driver, each committed
    with the next DDL's journal row).  Rows after the run's last DDL in its file are left
    to the next batch, compacted: taken along they would be a statement per row, and a
    streaming sync's DDL batch would wait on them.

    A prepared XA transaction whose outcome (``XA COMMIT``/``XA ROLLBACK``)
    is not relayed yet cannot be applied nor passed: the batch then ends before it, and
    when it comes first the batch is empty (``start`` is returned).
    """
    view = RelayView.of(relay)
    last = start
    moved = False  # last != start (kept as a flag: the loop below runs per transaction)
    taken_bytes = 0
    taken = 0
    run = 0  # DDL transactions taken, when the batch is a run of them
    rows_left = run_rows  # bytes of row transactions the run may still take
    out: list[Segment] = []
    for span in iter_spans(view, start, end):
        path = view.path(span.subdir, span.file)
        budget = None if max_bytes is None else span.start + max(0, max_bytes - taken_bytes)
        accepted: list[TxnEnd] = []
        prev = span.start
        done = False
        # How many of this span's accepted transactions end with the run's last DDL: the
        # row transactions after it are the run's only if another DDL follows them.
        through_ddl: int | None = None
        # Lazily: the scan reads the file only as far as this batch goes (up to a barrier,
        # the byte budget or a limit), so planning costs what the batch holds, not the
        # look-ahead window.
        with closing(scan_transactions(path, span.start, span.stop)) as scan:
            for txn in scan:
                if ddl_barrier and (txn.kind in BARRIERS or run):
                    if run < ddl_run and ((txn.kind == DDL and (run or not moved))
                                          or (run and txn.kind == OTHER)):  # e.g. a rotation
                        run += txn.kind == DDL
                        accepted.append(txn)
                        prev = txn.end
                        moved = True
                        if txn.kind == DDL:
                            through_ddl = len(accepted)
                        continue
                    if run and txn.kind == DML and txn.end - prev <= rows_left:
                        rows_left -= txn.end - prev
                        accepted.append(txn)
                        prev = txn.end
                        continue
                    if through_ddl is not None:
                        del accepted[through_ddl:]
                    if not moved:
                        if txn.kind == XA_PREPARE and xa_outcome(
                                view, Position(span.subdir, span.file, txn.end), end,
                                txn.xid) is None:
                            return start, []
                        accepted.append(txn)
                        moved = True
                    done = True
                    break
                size = txn.end - prev
                if max_bytes is not None and moved and taken_bytes + size > max_bytes:
                    done = True
                    break
                taken_bytes += size
                prev = txn.end
                accepted.append(txn)
                moved = True
                if txn.kind == DML:
                    taken += 1
                    if max_transactions is not None and taken >= max_transactions:
                        done = True
                        break
                if budget is not None and budget <= txn.end < span.stop:
                    done = True  # the byte budget ran out inside this file
                    break
        if not done and not span.finished and through_ddl is not None:
            del accepted[through_ddl:]  # the relay's end: nothing follows the rows yet
        if accepted:
            last = Position(span.subdir, span.file, accepted[-1].end)
        out += _cut(span, span.start, accepted, target_bytes)
        if gtids is not None:
            gtids += [t.gtid for t in accepted if t.gtid is not None]
        if done:
            return last, out
        if span.finished:
            last = Position(span.subdir, span.file, span.stop)
            moved = last != start
    return last, out


def gtid_set_at(relay_dir: Path, pos: Position) -> str:
    """The GTID set of the relay at ``pos`` (a transaction end): the file's starting set
    (GTID_LIST / PREVIOUS_GTIDS) plus the GTIDs of its transactions before ``pos``."""
    path = relay_dir / str(pos.subdir) / pos.binlog_name
    fde = read_fde(path)
    if fde is None:
        return ""
    progress = Progress(flavor="mariadb" if fde.is_mariadb else "mysql")
    with open(path, "rb") as f:
        for at, event in iter_events(f, 4, pos.binlog_pos, checksum_alg=fde.checksum_alg,
                                     path=str(path)):
            progress.feed(event, at + len(event), fde.checksum_len)
    return progress.gtid_text()


def position_of_gtid_set(relay: RelayView | Path, wanted: str) -> Position:
    """The first relay position (a transaction end, or a file start) where the GTID set
    applied is exactly ``wanted``: where a downstream that holds ``wanted`` (restored from a
    backup, loaded from a dump) starts.  MariaDB sets compare by domain and sequence number,
    as MariaDB compares positions."""
    view = RelayView.of(relay)
    want: GtidSet | None = None
    seen = ""
    first_set: str | None = None  # what the relay starts from
    for span in spans(view, view.earliest, view.end):
        path = view.path(span.subdir, span.file)
        fde = read_fde(path)
        if fde is None:
            continue
        flavor = "mariadb" if fde.is_mariadb else "mysql"
        if want is None:
            want = _gtid_set(wanted, flavor)
        progress = Progress(flavor=flavor)
        in_header = True
        first_file = first_set is None
        if first_file:
            first_set = ""
        with open(path, "rb") as f:
            for at, event in iter_events(f, 4, span.stop, checksum_alg=fde.checksum_alg,
                                         path=str(path)):
                boundary = progress.feed(event, at + len(event), fde.checksum_len)
                in_header = in_header and not progress.in_transaction
                if first_file and in_header:
                    first_set = progress.gtid_text()
                if boundary and _same(progress, want, flavor):
                    # Inside the file's header (its starting set): the file's start.
                    return Position(span.subdir, span.file,
                                         4 if in_header else at + len(event))
        seen = progress.gtid_text()
    if want is not None and not _contained(first_set or "", want, flavor):
        raise RelayDirError(
            f"the relay starts after GTID set {wanted} (at {first_set}): the transactions"
            " the downstream lacks are not in the relay",
            hint="relay from an earlier position (relay-binlog-gtid), or load the downstream"
                 " from a newer backup")
    if want is not None and _contained(seen, want, flavor):
        raise RelayDirError(
            f"the relay has not reached GTID set {wanted} yet (it ends at {seen or 'nothing'})",
            hint="start the sync once the relay has caught up with the upstream")
    raise RelayDirError(
        f"the relay never holds exactly GTID set {wanted} (it ends at {seen or 'nothing'})",
        hint="give binlog-gtid as the upstream wrote it when the downstream's copy was "
             "taken (@@gtid_binlog_pos, gtid_executed, the backup's binlog info)")


def _gtid_set(text: str, flavor: str) -> GtidSet:
    try:
        return parse_gtid_set(text, flavor)
    except GtidError as exc:
        raise ConfigError(f"[sync] binlog-gtid: {exc.message} (the relay holds a {flavor} "
                          "binlog)", hint="give the downstream's GTID set in the upstream's "
                          "form") from None


def _same(progress: Progress, want: GtidSet, flavor: str) -> bool:
    """Whether the set applied so far is ``want``."""
    have = parse_gtid_set(progress.gtid_text(), flavor)
    return have.issuperset(want) and want.issuperset(have)  # type: ignore[arg-type]


def _contained(text: str, want: GtidSet, flavor: str) -> bool:
    """Whether the set ``text`` is part of ``want`` (the relay has not got past it)."""
    return want.issuperset(parse_gtid_set(text, flavor))  # type: ignore[arg-type]


def xa_outcome(relay: RelayView | Path, after: Position, end: Position,
               xid: str | None) -> bool | None:
    """Whether the XA transaction ``xid`` prepared before ``after`` was committed (True) or
    rolled back (False) in the relay up to ``end``; None when its outcome is not there yet."""
    view = RelayView.of(relay)
    for span in iter_spans(view, after, end):
        path = view.path(span.subdir, span.file)
        with closing(scan_transactions(path, span.start, span.stop)) as scan:
            for txn in scan:
                if txn.kind == XA_END and txn.xid == xid:
                    return txn.committed
    return None


@dataclass(frozen=True)
class Segment:
    """One partition: relay file bytes [start, stop), whole transactions only."""

    subdir: str
    file: str
    start: int
    stop: int
    #: "dml" (row changes only), "ddl" (one statement), "serial" (a transaction replayed as
    #: it is: statements, CREATE ... SELECT) or "xa" (a prepared XA transaction: applied,
    #: in order, only if its outcome is a commit).
    kind: str
    #: The XA transaction id of an "xa" segment.
    xid: str | None = None

    def position(self, offset: int) -> Position:
        return Position(SubdirName.parse(self.subdir), self.file, offset)


def plan_partitions(relay: RelayView | Path, start: Position, end: Position, *,
                    target_bytes: int = 16 << 20) -> list[Segment]:
    view = RelayView.of(relay)
    out: list[Segment] = []
    for span in spans(view, start, end):
        path = view.path(span.subdir, span.file)
        out += _cut(span, span.start, transaction_ends(path, span.start, span.stop),
                    target_bytes)
    return out


_SEGMENT_KIND = {DDL: "ddl", SERIAL: "serial", XA_PREPARE: "xa", INCIDENT: "incident"}


def _cut(span: Span, first: int, ends: list[TxnEnd], target_bytes: int) -> list[Segment]:
    """Segments of ``span`` from ``first`` over these transactions: barriers alone, the
    rest in runs of about ``target_bytes``."""
    out: list[Segment] = []
    seg_start = prev = first
    for txn in ends:
        if txn.kind in BARRIERS:
            if prev > seg_start:
                out.append(Segment(*span.path_parts, seg_start, prev, DML))
            out.append(Segment(*span.path_parts, prev, txn.end, _SEGMENT_KIND[txn.kind],
                               txn.xid))
            seg_start = prev = txn.end
            continue
        prev = txn.end
        if prev - seg_start >= target_bytes:
            out.append(Segment(*span.path_parts, seg_start, prev, DML))
            seg_start = prev
    if prev > seg_start:
        out.append(Segment(*span.path_parts, seg_start, prev, DML))
    return out
