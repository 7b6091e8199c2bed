"""Writes the events of one upstream into one relay subdir, byte for byte.

Concurrency: one writer per subdir, single-threaded.  Readers in other processes may read the
files at any time; every byte up to the position in ``relay.meta`` is complete, durable and
ends a transaction.  Bytes after it may be a transaction still being written, or (after a
crash) a torn tail that recovery truncates.

Durability order: data is fsynced at transaction ends, grouped (at most ``sync_interval``
seconds late while the stream is busy, at once when it goes idle); ``relay.meta`` is then
replaced atomically (its directory fsynced only when it names another file).  Meta may lag
the data, never lead it.

After a failed write or fsync (a full disk most often) the writer is broken: ``close`` cuts
the file back to what relay.meta records and writes nothing more.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.binlog.bytes import U32 as _U32_LE
from binrelay.binlog.dummy import dummy_event
from binrelay.binlog.parse import parse_format_description, parse_rotate_lenient, verify_checksum
from binrelay.errors import (
    BinlogFormatError,
    ChecksumMismatchError,
    RelayConflictError,
    RelayDirError,
)
from binrelay.position import binlog_sort_key
from binrelay.relay.decide import SPECIAL_TYPES, Action, decide
from binrelay.relay.hotloop import BORING, take_run
from binrelay.relay.layout import FILE_MODE, RelayMeta, fsync_dir, read_meta, write_meta
from binrelay.relay.progress import Progress
from binrelay.relay.scan import read_fde
from binrelay.upstream.packets import MAX_PACKET as _MAX_PACKET

log = logging.getLogger(__name__)

_FLUSH_BYTES = 1 << 20
#: Event types that open or close a MariaDB transaction (the hot loop's txn mode).
_TXN_EDGES = frozenset({c.GTID_EVENT, c.XID_EVENT})
_U32 = 1 << 32



class RelayWriter:
    def __init__(self, subdir: Path, meta: RelayMeta, *, flavor: str | None,
                 sync_interval: float = 0.1) -> None:
        self.subdir = subdir
        self.file_name = meta.binlog_name
        self.sync_interval = sync_interval
        self.progress = Progress(flavor=flavor, gtid_text=meta.binlog_gtid,
                                 position=meta.binlog_pos)
        self._pending_gtid_text = meta.binlog_gtid
        self._fd: int | None = None
        self._checksum_alg = c.BINLOG_CHECKSUM_ALG_OFF
        self._checksum_len = 0
        self._pending = bytearray()
        self._dir_dirty = False
        self._meta = meta
        #: relay.meta was last replaced without fsyncing the subdir (``sync``).
        self._unsettled = False
        self._unsynced = False
        self._last_sync = time.monotonic()
        #: A write or fsync failed: what is past relay.meta's position cannot be trusted.
        self._broken = False
        self.offset = 4
        # Counters for status and metrics.
        self.events_written = 0
        self.bytes_written = 0
        self.holes_filled = 0
        self.duplicates_skipped = 0
        self.fsyncs = 0
        #: Last position the upstream reported in a heartbeat: (file, end position).
        self.upstream_pos: tuple[str, int] | None = None
        #: Header timestamp of the last event handled one by one (transaction ends are):
        #: how old the newest relayed data is, for seconds-behind.
        self.last_event_ts = 0
        self._open_existing(meta.binlog_pos)

    # --- files -------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self.subdir / self.file_name

    def _open_existing(self, position: int) -> None:
        path = self.path
        if not self.file_name or not path.exists():
            self.offset = 4
            return
        fde = read_fde(path)
        size = path.stat().st_size
        if fde is None:
            raise RelayDirError(f"{path} has no valid binlog header",
                                hint="recovery should have removed it; move the file away")
        if size != position:
            raise RelayDirError(
                f"{path} is {size} bytes but relay.meta says {position}",
                hint="recovery should have reconciled them; this is a bug",
            )
        self._set_checksum(fde.checksum_alg)
        self.progress.set_flavor("mariadb" if fde.is_mariadb else "mysql",
                                 self._pending_gtid_text)
        self._fd = self._open(path, create=False)
        self.offset = size

    def _open(self, path: Path, *, create: bool) -> int:
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            return os.open(path, flags, FILE_MODE)
        except OSError as exc:
            raise RelayDirError(f"cannot open relay file {path}: {exc.strerror}",
                                hint="check the relay dir's permissions and free space") from exc

    def _set_checksum(self, alg: int) -> None:
        self._checksum_alg = alg
        self._checksum_len = c.CHECKSUM_LEN if alg == c.BINLOG_CHECKSUM_ALG_CRC32 else 0

    def _close_file(self) -> None:
        if self._fd is not None:
            self._flush()
            self._fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Persist what is complete and close.  Safe to call more than once.

        A transaction cut short (the upstream went away mid-transaction) is cut off the file:
        the next session resumes at the last transaction end, which is what relay.meta says.
        """
        if self._fd is None:
            return
        if self._broken:
            self._cut_back()
            return
        self.sync()
        if self._unsettled:
            self._fsync_subdir()  # a clean stop leaves relay.meta as it says
        if self.offset > self.progress.boundary_pos:
            os.ftruncate(self._fd, self.progress.boundary_pos)
            self._fsync(self._fd)
            self.offset = self.progress.boundary_pos
        os.close(self._fd)
        self._fd = None

    def _cut_back(self) -> None:
        """After a failed write or fsync: keep only what relay.meta records as relayed.

        Past it the file may end inside an event, or hold bytes that are not durable (after
        a failed fsync the page cache may show data the disk lost), so they go, and the next
        session fetches them again from relay.meta's position.  Shrinking needs no space.
        """
        fd, self._fd = self._fd, None
        assert fd is not None
        self._pending.clear()
        try:
            durable = read_meta(self.subdir) or self._meta
        except RelayDirError:
            durable = self._meta
        try:
            if durable.binlog_name == self.file_name:
                # min(): a file cut short by the failed write must not grow back with zeros.
                keep = min(os.fstat(fd).st_size, durable.binlog_pos)
                os.ftruncate(fd, keep)
                self.offset = keep
                os.fsync(fd)
        except OSError as exc:
            # Recovery trims the tail when the relay resumes or restarts.
            log.warning("cannot cut %s back to relay.meta's position: %s", self.path,
                        exc.strerror)
        finally:
            os.close(fd)

    # --- writing -------------------------------------------------------------------------------

    def _append(self, data: bytes) -> None:
        self._pending += data
        self.offset += len(data)
        self.bytes_written += len(data)
        self._unsynced = True
        if len(self._pending) >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending or self._fd is None:
            return
        view = memoryview(self._pending)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            self._broken = True
            raise RelayDirError(
                f"cannot write relay file {self.path}: {exc.strerror}",
                hint="free space or fix the disk, then restart the relay: it resumes from "
                     "relay.meta and loses nothing",
            ) from exc
        finally:
            view.release()
        self._pending.clear()

    def _fsync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            self._broken = True
            raise RelayDirError(f"fsync of {self.path} failed: {exc.strerror}",
                                hint="check the disk; restart the relay to resume") from exc
        self.fsyncs += 1

    def sync(self) -> None:
        """Make everything written durable and move relay.meta to the last transaction end."""
        if self._fd is not None:
            self._flush()
            self._fsync(self._fd)
        if self._dir_dirty:
            self._fsync_subdir()
            self._dir_dirty = False
        meta = RelayMeta(self.file_name, self.progress.boundary_pos, self.progress.gtid_text())
        if meta != self._meta:
            # A crash that loses a move within one file brings back an older relay.meta of
            # that file: it lags the data, which recovery mends (it reads the file to its last
            # complete transaction), and readers only ever saw positions fsynced before.  A
            # move to another file is settled: recovery reads the last file in its light.
            settle = meta.binlog_name != self._meta.binlog_name
            try:
                write_meta(self.subdir, meta, settle=settle)
            except OSError as exc:
                self._broken = True
                raise RelayDirError(f"cannot write {self.subdir}/relay.meta: {exc.strerror}",
                                    hint="free space or fix the disk, then restart the relay"
                                    ) from exc
            self._meta = meta
            self._unsettled = not settle
        self._unsynced = False
        self._last_sync = time.monotonic()

    def _fsync_subdir(self) -> None:
        try:
            fsync_dir(self.subdir)
        except OSError as exc:
            # Not an OSError any more: the stream would take that for a lost connection.
            self._broken = True
            raise RelayDirError(f"fsync of {self.subdir} failed: {exc.strerror}",
                                hint="check the disk; restart the relay to resume") from exc
        self._unsettled = False

    @property
    def meta(self) -> RelayMeta:
        """What relay.meta holds now (persisted)."""
        return self._meta

    def on_idle(self) -> None:
        """The stream has nothing more for now: make what arrived durable."""
        if self._unsynced:
            self.sync()

    # --- events --------------------------------------------------------------------------------

    def consume_packets(self, data: bytes, pos: int) -> int:
        """Relay the ``0x00 + event`` packets in ``data`` from ``pos``; return where it stopped.

        Runs of ordinary events go through the hot loop (``hotloop.take_run``), the events
        between them through ``handle``.  Stops before a partial packet or a packet that is
        not an event, which the stream deals with.
        """
        n = len(data)
        pending = self._pending
        progress = self.progress
        while True:
            if self._fd is not None and not progress.awaiting_body:
                before = self.offset
                crc = self._checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32
                # The transaction state goes along only when the run starts at a GTID or
                # XID event (lending it costs more than a streamed packet's whole run); a
                # run started so goes on through every transaction the buffer holds.
                txn = progress.run_state() if n - pos > 9 and data[pos + 9] in _TXN_EDGES \
                    else None
                pos, self.offset, count, bad_crc = take_run(data, pos, before, crc, BORING,
                                                            pending, txn)
                if count:
                    self.events_written += count
                    self.bytes_written += self.offset - before
                    self._unsynced = True
                    # What _take does per event, once per run: the run's transaction ends
                    # count, and the last one is made durable when a sync is due.
                    if txn is not None:
                        if txn.last_ts is not None:
                            self.last_event_ts = txn.last_ts
                        if progress.after_run(txn) and \
                                time.monotonic() - self._last_sync >= self.sync_interval:
                            self.sync()
                if bad_crc:
                    raise ChecksumMismatchError(
                        f"CRC32 mismatch in an event from the upstream for {self.file_name}",
                        offset=self.offset)
            # A whole 0x00 + event packet, or leave it to the stream (the packet test of
            # binrelay.upstream.packets, inlined as in the hot loop: this runs per event).
            if n - pos < 5:
                break
            length = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            end = pos + 4 + length
            if end > n or length >= _MAX_PACKET or data[pos + 4] != 0:
                break
            self.handle(data[pos + 5 : end])
            pos = end
        if len(pending) >= _FLUSH_BYTES:
            self._flush()
        return pos

    def handle(self, event: bytes) -> None:
        """Relay one event as received from the upstream (checksum included): what to do is
        :func:`~binrelay.relay.decide.decide`'s; this carries it out."""
        if len(event) < c.EVENT_HEADER_LEN:
            raise BinlogFormatError(f"event of {len(event)} bytes from the upstream")
        _ts, etype, _sid, size, log_pos, flags = _HEADER.unpack_from(event)
        if size != len(event):
            raise BinlogFormatError(
                f"event header says {size} bytes, the upstream sent {len(event)}")
        # The common case, a transaction's end in place: decide()'s WRITE, tested inline as
        # decide.plainly_in_place spells it (the hot loop does the same for runs).
        if etype not in SPECIAL_TYPES and not flags & c.LOG_EVENT_ARTIFICIAL_F and \
                self._fd is not None and log_pos and log_pos - size == self.offset:
            if self._checksum_alg and \
                    zlib.crc32(event[:-4]) != _U32_LE.unpack_from(event, size - 4)[0]:
                verify_checksum(event, self._checksum_alg, offset=log_pos - size)
            self._take(event, _ts)
            return
        rotate = parse_rotate_lenient(event) if etype == c.ROTATE_EVENT else None
        decision = decide(etype, flags, size, log_pos, self.offset, self._fd is not None,
                          rotate is not None and rotate.fake, self.file_name)
        action = decision.action
        if action is Action.DROP:
            return
        if action is Action.NOTE_UPSTREAM:
            name = event[c.EVENT_HEADER_LEN : len(event) - self._checksum_len]
            self.upstream_pos = (name.decode("utf-8", "replace"), log_pos)
            return
        if action in (Action.OPEN_FILE, Action.TAKE_FORMAT):
            self._handle_fde(event, log_pos)
            return
        if action is Action.SWITCH_FILE:
            assert rotate is not None
            self._switch_file(rotate.next_file, rotate.position)
            return
        if rotate is not None:
            if self._checksum_alg:
                verify_checksum(event, self._checksum_alg, offset=log_pos - size)
        elif self._checksum_alg and \
                zlib.crc32(event[:-4]) != _U32_LE.unpack_from(event, size - 4)[0]:
            verify_checksum(event, self._checksum_alg, offset=log_pos - size)  # raises
        if action is Action.FILL_THEN_WRITE:
            self._fill_hole(decision.gap, event)
        elif action is Action.CHECK_REPEAT and self._is_repeat(event, decision.gap):
            return
        if rotate is None:
            self._take(event, _ts)
            return
        self._append(event)
        self.events_written += 1
        self.progress.feed(event, self.offset, self._checksum_len)
        self._close_file()
        self.file_name = rotate.next_file
        self.offset = 4
        self.progress.new_file(4)
        self.sync()

    def _take(self, event: bytes, timestamp: int) -> None:
        """Append an event that is not a ROTATE; sync at a transaction end when due."""
        self._append(event)
        self.events_written += 1
        self.last_event_ts = timestamp
        if self.progress.feed(event, self.offset, self._checksum_len) and \
                time.monotonic() - self._last_sync >= self.sync_interval:
            self.sync()

    def _fill_hole(self, size: int, event: bytes) -> None:
        dummy = dummy_event(size=size, end_pos=(self.offset + size) % _U32,
                            server_id=int.from_bytes(event[5:9], "little"),
                            checksum_len=self._checksum_len)
        log.info("filling a hole of %d bytes at %s:%d", size, self.file_name, self.offset)
        self._append(dummy)
        self.holes_filled += 1

    def _is_repeat(self, event: bytes, start: int) -> bool:
        """An event that starts before the file's end is one the upstream sent again (after
        a reconnect): True when the file holds exactly its bytes there; anything else is a
        conflict."""
        self._flush()
        with open(self.path, "rb") as f:
            f.seek(start)
            on_disk = f.read(len(event))
        if on_disk == event:
            self.duplicates_skipped += 1
            return True
        if len(on_disk) < len(event):
            raise RelayConflictError(
                f"{self.path}: an event from {start} to {start + len(event)} overlaps the end "
                f"of the file at {self.offset}")
        raise RelayConflictError(
            f"{self.path}: the upstream sent different bytes for the event at {start}")

    def _switch_file(self, name: str, position: int) -> None:
        if not name or name == self.file_name:
            return
        if self.file_name and binlog_sort_key(name) < binlog_sort_key(self.file_name):
            raise RelayConflictError(
                f"the upstream went back from {self.file_name} to {name}")
        self._close_file()
        self.sync()
        self.file_name = name
        self.offset = 4
        self.progress.new_file(4)
        if position > 4:
            log.warning("the upstream starts %s at %d, not at its beginning", name, position)

    def _handle_fde(self, event: bytes, log_pos: int) -> None:
        fde = parse_format_description(event)
        verify_checksum(event, fde.checksum_alg)
        self._set_checksum(fde.checksum_alg)
        self.progress.set_flavor("mariadb" if fde.is_mariadb else "mysql",
                                 self._pending_gtid_text)
        if self._fd is not None:
            return  # the file already starts with this FDE (a resumed dump resends it)
        if log_pos == 0 or log_pos != 4 + len(event):
            raise RelayDirError(
                f"the upstream starts {self.file_name} at a position past its beginning, and "
                f"the relay has no such file",
                hint="relay files never start mid-file; start from the beginning of a file")
        if not self.file_name:
            raise BinlogFormatError("FORMAT_DESCRIPTION_EVENT before the upstream named its file")
        self._fd = self._open(self.path, create=True)
        self._dir_dirty = True
        self.offset = 0
        self._append(c.BINLOG_MAGIC + event)
        self.events_written += 1
        self.progress.new_file(self.offset)
