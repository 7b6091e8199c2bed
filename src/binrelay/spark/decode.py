"""Executor side of the ``relaylog`` source: one partition's bytes to Arrow record batches.

Runs where Spark puts the task: it opens the relay file itself, reads the file's FDE (needed
to decode anything) and then exactly the partition's byte range, which starts and ends at
transaction ends, so every table map its rows need is inside.  Memory: one read chunk plus
one Arrow batch.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from binrelay.apply.statement_sql import runs_as_logged
from binrelay.binlog.bytes import U32
from binrelay.binlog.events import MariadbGtidEvent, MysqlGtidEvent, QueryEvent
from binrelay.binlog.framing import iter_events
from binrelay.binlog.txn import (
    is_rollback,
    is_savepoint_statement,
    is_transaction_control,
    savepoint_action,
)
from binrelay.errors import BinlogFormatError, RelayDirError
from binrelay.relay.relaydir import RelayView
from binrelay.relay.scan import read_fde, read_fde_event
from binrelay.rows.decoder import EventDecoder
from binrelay.rows.scanner import ChangeScanner, KeyFold, RowsRun
from binrelay.spark.changes import RowBuilder
from binrelay.spark.planning import Segment, xa_outcome

_BATCH_ROWS = 8192


def fde_bytes(path: Path) -> bytes:
    event = read_fde_event(path)
    if event is None:
        raise RelayDirError(f"relay file {path} has no valid binlog header")
    return event


def decode_segment(relay_dir: Path, segment: Segment) -> Iterator[Any]:
    path = relay_dir / segment.subdir / segment.file
    if not path.exists():
        raise RelayDirError(f"relay file {path} is gone (purged?) but a batch still needs it",
                            hint="register the pipeline as a relay consumer so purge keeps it")
    if segment.kind == "incident":
        raise BinlogFormatError("an INCIDENT event: the upstream lost events here",
                                path=str(path), offset=segment.start,
                                hint="the changes around it are incomplete; resynchronise "
                                     "from the upstream past this position")
    if segment.kind == "xa" and not xa_committed(relay_dir, segment):
        return  # rolled back upstream: none of it happened
    undone = NOTHING_UNDONE
    if segment.kind != "dml":
        # DDL, and the statements of a transaction replayed as it is (statement-format
        # DML, CREATE ... SELECT), as "ddl" rows; its row changes follow.
        statements, undone = _statements(path, segment)
        if statements:
            rows = RowBuilder(segment.subdir, segment.file)
            for statement in statements:
                rows.add_ddl(**statement, rolled_back=undone(statement["pos"]))
            yield rows.flush()
        if segment.kind == "ddl":
            return
    rows = RowBuilder(segment.subdir, segment.file)
    spans = undone.spans  # (per change only where a ROLLBACK TO undid some)
    for change, ts, pos, row in numbered_changes(relay_dir, segment):
        rows.add_change(change, ts, row, undone(pos) if spans else undone.whole)
        if len(rows) >= _BATCH_ROWS:
            yield rows.flush()
    if len(rows):
        yield rows.flush()


@dataclass(frozen=True, slots=True)
class Undone:
    """What the upstream undid of one transaction: all of it (it ended in ROLLBACK), or the
    changes between a SAVEPOINT and a ROLLBACK TO it (``spans``, event offsets).  Such a
    group is logged when it also changed a non-transactional table (or made a temporary
    one), whose changes the rollback could not undo: the source shows every change, each
    with ``rolled_back``, and only the reader knows which tables are transactional."""

    whole: bool = False
    spans: tuple[tuple[int, int], ...] = ()

    def __call__(self, pos: int) -> bool:
        return self.whole or any(start < pos < end for start, end in self.spans)


NOTHING_UNDONE = Undone()


def xa_committed(relay_dir: Path, segment: Segment) -> bool:
    """Whether the prepared XA transaction of an "xa" segment was committed upstream;
    refuses to guess while its outcome is not relayed."""
    after = segment.position(segment.stop)
    view = RelayView(relay_dir)
    outcome = xa_outcome(view, after, view.end, segment.xid)
    if outcome is None:
        raise RelayDirError(
            f"XA transaction {segment.xid} prepared at {segment.subdir}/{segment.file}:"
            f"{segment.start} has no outcome in the relay log yet",
            hint="read up to a position before it, or again once the relay has its "
                 "XA COMMIT / XA ROLLBACK")
    return outcome


def numbered_changes(relay_dir: Path, segment: Segment
                     ) -> Iterator[tuple[Any, int, int, int]]:
    """``(change, timestamp, event offset, row)``: (file, offset, row) is unique per change
    and increases in relay order."""
    last_where = None
    last_pos = -1
    row = 0
    for change, ts in iter_segment_changes(relay_dir, segment):
        where = change.where
        if where is last_where:
            row += 1
        else:
            pos = where.pos if where is not None else 0
            # Rows events inside one MySQL TRANSACTION_PAYLOAD share the payload's offset:
            # their rows keep counting.
            row = row + 1 if pos == last_pos else 0
            last_where, last_pos = where, pos
        yield change, ts, last_pos, row


def iter_segment_changes(relay_dir: Path, segment: Segment) -> Iterator[tuple[Any, int]]:
    """The row changes of a DML partition with their event's timestamp, in relay order."""
    for change, buf, base in _walk(relay_dir, segment, False):
        where = change.where
        yield change, U32.unpack_from(buf, where.pos - base)[0] if where is not None else 0


def iter_segment_runs(relay_dir: Path, segment: Segment, fold: KeyFold | None = None
                      ) -> Iterator[RowsRun]:
    """The rows events of a DML partition in relay order, their images not decoded
    (``ChangeScanner.scan_events``): for a reader that needs no object per row; with
    ``fold``, those :class:`KeyFold` takes are folded there instead."""
    for run, _buf, _base in _walk(relay_dir, segment, True, fold):
        yield run


def _walk(relay_dir: Path, segment: Segment, runs: bool, fold: KeyFold | None = None
          ) -> Iterator[tuple[Any, bytes, int]]:
    """What the scanner yields for the partition (changes, or rows events with ``runs``),
    each with the buffer it came from and that buffer's file offset."""
    path = relay_dir / segment.subdir / segment.file
    scanner = ChangeScanner(path=str(path))
    for _ in scanner.scan(fde_bytes(path), file_offset=4):
        pass
    scan = partial(scanner.scan_events, fold=fold) if runs else scanner.scan

    with open(path, "rb") as f:
        _check_whole(f, path, segment)
        if segment.stop <= segment.start:
            return
        # Mapped, not read: the scanner walks the page cache itself (CRC32 checked), with
        # no copy into a buffer and none of a chunk's tail into the next.
        with mmap.mmap(f.fileno(), segment.stop, access=mmap.ACCESS_READ) as buf:
            for item in scan(buf, segment.start, segment.stop, file_offset=0):
                yield item, buf, 0
            if scanner.stopped_at != segment.stop:
                raise RelayDirError(f"relay file {path}: the partition's end {segment.stop}"
                                    f" falls inside an event at {scanner.stopped_at}")


def _check_whole(f: Any, path: Path, segment: Segment) -> None:
    """The partition was planned over whole transactions the file held: if the file is
    shorter now, it was cut since, and the partition's events are not all there."""
    size = os.fstat(f.fileno()).st_size
    if size < segment.stop:
        raise RelayDirError(f"relay file {path} ends at {size}, before the partition's end"
                            f" {segment.stop}",
                            hint="the file was cut after this batch was planned (relay-log-"
                                 "recovery?); run the sync again: it plans from its "
                                 "checkpoint over the relay as it now is")


def _statements(path: Path, segment: Segment) -> tuple[list[dict[str, Any]], Undone]:
    """The statements of a DDL or serial partition, as ``RowBuilder.add_ddl`` takes them,
    and what its ROLLBACK or ROLLBACK TO statements undid."""
    fde = read_fde(path)
    if fde is None:
        raise RelayDirError(f"relay file {path} has no valid binlog header")
    decoder = EventDecoder(path=str(path))
    decoder.decode(fde_bytes(path), 4)
    gtid: str | None = None
    statements: list[dict[str, Any]] = []
    savepoints: dict[str, int] = {}
    spans: list[tuple[int, int]] = []
    whole = False
    with open(path, "rb") as f:
        for pos, raw in iter_events(f, segment.start, segment.stop,
                                    checksum_alg=fde.checksum_alg, path=str(path)):
            ev = decoder.decode(raw, pos)
            if isinstance(ev, MariadbGtidEvent | MysqlGtidEvent):
                gtid = ev.gtid
            elif not isinstance(ev, QueryEvent) or not runs_as_logged(ev.status):
                continue
            elif not is_transaction_control(ev.raw_query[:32]):
                statements.append({"pos": pos, "end_pos": pos + len(raw), "gtid": gtid,
                                   "commit_ts": ev.header.timestamp, "schema": ev.schema,
                                   "query": ev.query})
            elif (action := savepoint_action(ev.query)) is None:
                if is_rollback(ev.raw_query[:32]):
                    whole = True
                elif is_savepoint_statement(ev.raw_query[:32]):
                    raise BinlogFormatError(
                        f"a savepoint statement whose savepoint cannot be read: "
                        f"{ev.query[:80]!r}", path=str(path), offset=pos,
                        hint="the changes it undid cannot be told apart; read the relay "
                             "log from a position after this transaction")
            else:
                what, name = action
                if what == "set":
                    savepoints[name] = pos
                elif what == "rollback":
                    start = savepoints.get(name)
                    if start is None:
                        raise BinlogFormatError(
                            f"ROLLBACK TO a savepoint its transaction did not set: "
                            f"{ev.query[:80]!r}", path=str(path), offset=pos)
                    spans.append((start, pos))
                    # (The savepoints set after it are gone, as upstream.)
                    savepoints = {n: p for n, p in savepoints.items() if p <= start}
    return statements, Undone(whole, tuple(spans))
