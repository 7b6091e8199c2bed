"""Read a relay dir's events in order, from a position or a GTID set, optionally following.

Concurrency: one reader per consumer, single-threaded; the relay may write (another process)
and purge may delete meanwhile.  What the reader delivers is durable and complete:

* in each subdir, ``relay.meta`` marks the durable end: files before its file are read whole,
  its file up to its position, files after it (meta lags after a crash) not at all;
* a subdir that is not the last in ``server-uuid.index`` is finished: the relay wrote its
  final meta before opening the next one;
* every event's header must match its position and its CRC32 must match; a file that ends
  inside an event it should hold, or that shrinks under the reader, is an error naming the
  file and the offset.

Each file is read from its FORMAT_DESCRIPTION_EVENT on (it is delivered first even when
reading starts later in the file), so a consumer can always decode what follows.  In follow
mode the reader sleeps until the relay replaces ``relay.meta`` or ``server-uuid.index``
(inotify on Linux), so new transactions arrive within milliseconds of their fsync.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from binrelay.binlog import constants as c
from binrelay.binlog.framing import iter_events
from binrelay.binlog.parse import (
    parse_format_description,
    parse_maria_gtid,
    parse_maria_gtid_list,
    parse_mysql_gtid,
    query_text_prefix,
)
from binrelay.binlog.txn import TxnTracker, needs_query_prefix
from binrelay.errors import BinlogFormatError, GtidError, IncompleteEventError, RelayDirError
from binrelay.gtid import GtidSet, MariaGtid, MariaGtidSet, MysqlGtidSet, parse_gtid_set
from binrelay.position import Position, SubdirName, binlog_sort_key
from binrelay.relay.chain import GAP_HINT, check_handover, check_subdirs
from binrelay.relay.layout import RelayMeta, list_binlogs, read_index, read_meta
from binrelay.relay.relaydir import earliest
from binrelay.relay.scan import read_fde
from binrelay.relay.watch import ChangeWaiter


class RelayPurgedError(RelayDirError):
    code = "BR3003"
    hint = ("the relay no longer has that position: purge removed it; start the consumer "
            "from a later position")


@dataclass(frozen=True, slots=True)
class RelayEvent:
    subdir: SubdirName
    file: str
    pos: int  # where the event starts in the file (= the upstream position)
    raw: bytes  # the whole event, checksum included

    @property
    def end(self) -> int:
        return self.pos + len(self.raw)

    @property
    def event_type(self) -> int:
        return self.raw[4]

    def position_after(self) -> Position:
        return Position(self.subdir, self.file, self.end)


class RelayReader:
    def __init__(self, relay_dir: Path, start: Position | None = None, *,
                 follow: bool = False, wait_timeout: float = 1.0,
                 should_stop: Callable[[], bool] | None = None,
                 use_inotify: bool = True) -> None:
        self.relay_dir = relay_dir
        self.use_inotify = use_inotify
        self.start = start
        self.follow = follow
        self.wait_timeout = wait_timeout
        self.should_stop = should_stop or (lambda: False)
        self._waiter: ChangeWaiter | None = None
        #: The file whose FDE this reader delivered last: resuming it needs no second FDE.
        self._fde_delivered: tuple[SubdirName, str] | None = None

    # --- where things are ------------------------------------------------------------------

    def _index(self) -> list[SubdirName]:
        index = read_index(self.relay_dir)
        if index is None:
            raise RelayDirError(f"{self.relay_dir} has no server-uuid.index",
                                hint="start the relay first, or check relay-dir")
        return index

    def _meta(self, subdir: SubdirName) -> RelayMeta:
        meta = read_meta(self.relay_dir / str(subdir))
        if meta is None:
            raise RelayDirError(f"{self.relay_dir / str(subdir)} has no relay.meta")
        return meta

    # --- reading ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[RelayEvent]:
        return self.events()

    def close(self) -> None:
        if self._waiter is not None:
            self._waiter.close()
            self._waiter = None

    def _wait(self, *dirs: Path) -> bool:
        """Sleep until the relay may have written more; False when told to stop."""
        if self.should_stop():
            return False
        fresh = self._waiter is None
        if self._waiter is None:
            self._waiter = ChangeWaiter(self.relay_dir, use_inotify=self.use_inotify)
        for d in dirs:
            fresh = self._waiter.watch(d) or fresh
        if not fresh:  # (a watch just started: the caller looks again first)
            self._waiter.wait(self.wait_timeout)
        return not self.should_stop()

    def events(self) -> Iterator[RelayEvent]:
        check_subdirs(self.relay_dir)
        pos = self.start or earliest(self.relay_dir)
        subdir, name, offset = pos.subdir, pos.binlog_name, pos.binlog_pos
        try:
            while True:
                index = self._index()
                if subdir not in index:
                    if index and subdir.seq < index[0].seq:
                        raise RelayPurgedError(f"relay subdir {subdir} was purged")
                    raise RelayDirError(f"{subdir} is not in {self.relay_dir}/server-uuid.index")
                last_subdir = subdir == index[-1]
                sub_path = self.relay_dir / str(subdir)
                meta = self._meta(subdir)
                files = list_binlogs(sub_path)
                key = binlog_sort_key(name)
                meta_key = binlog_sort_key(meta.binlog_name)
                if name not in files and key < meta_key:
                    if not files or key < binlog_sort_key(files[0]):
                        raise RelayPurgedError(f"relay file {sub_path / name} was purged")
                    raise RelayDirError(f"relay file {sub_path / name} is missing")
                if key < meta_key:
                    end: int | None = None  # complete: read it whole
                elif key == meta_key:
                    end = meta.binlog_pos
                else:
                    end = 4  # not durable yet
                if name in files and (end is None or end > 4):
                    tail = self.follow and last_subdir and key == meta_key
                    offset = yield from self._read_file(subdir, name, offset, end, tail=tail)
                # Where next?
                if key < meta_key:
                    later = [f for f in files if binlog_sort_key(f) > key]
                    if later:
                        check_handover(sub_path, name, later[0])
                    name = later[0] if later else meta.binlog_name
                    offset = 4
                    continue
                if not last_subdir:
                    nxt = index[index.index(subdir) + 1]
                    nxt_files = list_binlogs(self.relay_dir / str(nxt))
                    subdir = nxt
                    name = nxt_files[0] if nxt_files else self._meta(nxt).binlog_name
                    offset = 4
                    continue
                if not self.follow or not self._wait(sub_path):
                    return
        finally:
            self.close()

    def _read_file(self, subdir: SubdirName, name: str, offset: int,
                   end: int | None, *, tail: bool = False) -> Iterator[RelayEvent]:
        """Deliver events of one file from ``offset`` up to ``end`` (None: the whole file).

        With ``tail`` (the file the relay is writing), keep the file open and go on as
        relay.meta advances in it; return when it moves elsewhere or a subdir is added.
        That path costs two stat calls a wake-up, not a directory listing.  Returns the
        offset reached.
        """
        path = self.relay_dir / str(subdir) / name
        try:
            f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed below, generator-held
        except FileNotFoundError as exc:
            raise RelayPurgedError(f"relay file {path} was purged") from exc
        with f:
            size = os.fstat(f.fileno()).st_size
            limit = size if end is None else end
            if limit > size:
                raise RelayDirError(
                    f"relay file {path} is {size} bytes but relay.meta says {limit} are relayed",
                    hint="the file shrank or lost data: restart the relay to recover it")
            if offset > limit:
                if end is None or offset > size:
                    raise RelayDirError(f"relay file {path} shrank to {size} bytes under the "
                                        f"reader at offset {offset}",
                                        hint="restart the consumer from its checkpoint")
                return offset
            fde = read_fde(path)
            if fde is None:
                raise RelayDirError(f"relay file {path} has no valid binlog header")
            if offset <= 4:
                offset = 4
            elif self._fde_delivered != (subdir, name):
                # The FDE first, so that the consumer can decode what follows.
                for at, raw in iter_events(f, 4, limit, checksum_alg=fde.checksum_alg,
                                           path=str(path)):
                    yield RelayEvent(subdir, name, at, raw)
                    break
            self._fde_delivered = (subdir, name)
            sub_path = path.parent
            while True:
                try:
                    for at, raw in iter_events(f, offset, limit, checksum_alg=fde.checksum_alg,
                                               path=str(path)):
                        yield RelayEvent(subdir, name, at, raw)
                        offset = at + len(raw)
                except IncompleteEventError as exc:
                    if end is None:  # a finished file: the relay will not rewrite it
                        raise RelayDirError(
                            f"relay file {path} ends inside an event at offset {exc.offset}:"
                            " it was cut short or damaged", hint=GAP_HINT) from exc
                    raise RelayDirError(
                        f"relay file {path} ends inside an event at offset {exc.offset}, "
                        f"before its durable end {limit}",
                        hint="restart the relay to recover the file") from exc
                if not tail:
                    return offset
                # File times are too coarse to tell two quick relay.meta writes apart, so
                # every wake-up reads the two small files again (never the directory).
                index = read_index(self.relay_dir)
                while True:
                    if not self._wait(sub_path):
                        return offset
                    meta = read_meta(sub_path)
                    if read_index(self.relay_dir) != index or meta is None or \
                            meta.binlog_name != name or meta.binlog_pos < offset:
                        return offset  # elsewhere now: the caller works out where
                    if meta.binlog_pos > limit:
                        break
                limit = meta.binlog_pos
                if os.fstat(f.fileno()).st_size < limit:
                    return offset  # the caller reports it with the whole picture


# --- starting from a GTID set ------------------------------------------------------------------


def position_for_gtids(relay_dir: Path, gtids: str, flavor: str) -> Position:
    """The start of the relay file from which reading must begin to see every transaction
    not in ``gtids``: the last file whose starting GTID set (its GTID_LIST / Previous_gtids,
    seen through the first events) is contained in ``gtids``."""
    wanted = parse_gtid_set(gtids, flavor)
    index = read_index(relay_dir) or []
    best: Position | None = None
    for subdir in index:
        for name in list_binlogs(relay_dir / str(subdir)):
            start = _file_start_gtids(relay_dir / str(subdir) / name)
            if start is None or _contains(wanted, start):
                best = Position(subdir, name, 4)
    if best is None:
        raise RelayPurgedError(f"no relay file starts at or before GTID set {gtids!r}")
    return best


def _file_start_gtids(path: Path) -> GtidSet | None:
    fde = read_fde(path)
    if fde is None:
        return None
    with open(path, "rb") as f, contextlib.suppress(BinlogFormatError, GtidError):
        size = os.fstat(f.fileno()).st_size
        for _at, raw in iter_events(f, 4, size, checksum_alg=fde.checksum_alg, path=str(path)):
            etype = raw[4]
            body = raw[c.EVENT_HEADER_LEN : len(raw) - fde.checksum_len]
            if etype == c.GTID_LIST_EVENT:
                triples = parse_maria_gtid_list(raw, fde.checksum_len)
                # GTID_LIST may name a domain more than once; the highest seq_no counts.
                last: dict[int, MariaGtid] = {}
                for d, s, n in triples:
                    if d not in last or n >= last[d].seq_no:
                        last[d] = MariaGtid(d, s, n)
                return MariaGtidSet(tuple(last.values()))
            if etype == c.PREVIOUS_GTIDS_LOG_EVENT:
                return MysqlGtidSet.decode(bytes(body))
            if etype not in (c.FORMAT_DESCRIPTION_EVENT, c.BINLOG_CHECKPOINT_EVENT):
                return None
    return None


def _contains(wanted: GtidSet, start: GtidSet) -> bool:
    if type(wanted) is not type(start):
        return False
    return wanted.issuperset(start)  # type: ignore[arg-type]


class GtidFilter:
    """Drops whole transactions whose GTID is already in a set.  Pure; feed events in order."""

    def __init__(self, gtids: GtidSet) -> None:
        self.gtids = gtids
        self._tracker = TxnTracker()
        self._skipping = False
        self._checksum_len = 0

    def keep(self, event: RelayEvent) -> bool:
        raw = event.raw
        etype = raw[4]
        if etype == c.FORMAT_DESCRIPTION_EVENT:
            self._checksum_len = parse_format_description(raw).checksum_len
            self._skipping = False
            return True
        if etype == c.GTID_EVENT and isinstance(self.gtids, MariaGtidSet):
            g = parse_maria_gtid(raw)
            self._skipping = self.gtids.contains(MariaGtid(g.domain_id, g.server_id, g.seq_no))
            self._tracker.reset()
            self._tracker.feed(etype, maria_flags=g.flags)
            return not self._skipping
        if etype == c.GTID_LOG_EVENT and isinstance(self.gtids, MysqlGtidSet):
            m = parse_mysql_gtid(raw)
            self._skipping = self.gtids.contains(m.uuid, m.gno)
            self._tracker.reset()
            self._tracker.feed(etype)
            return not self._skipping
        if not self._skipping:
            return True
        prefix = query_text_prefix(raw, self._checksum_len) if needs_query_prefix(etype) else b""
        if self._tracker.feed(etype, query_prefix=prefix):
            self._skipping = False
        return False
