"""The relay directory as a whole: its index of subdirs, opened, checked and extended; where
its readable range begins (``earliest``) and ends (``durable_end``).

Order of a new subdir's creation (each step atomic): mkdir, write its relay.meta, rewrite
server-uuid.index.  A crash before the index names the subdir leaves an orphan directory
without relay files, which ``open`` removes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from binrelay.errors import RelayDirError
from binrelay.position import Position, SubdirName
from binrelay.relay.chain import check_subdirs
from binrelay.relay.layout import (
    META_FILENAME,
    RelayMeta,
    index_lock,
    list_binlogs,
    make_dir,
    read_index,
    read_meta,
    write_index,
    write_meta,
)

log = logging.getLogger(__name__)


class RelayDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.subdirs: list[SubdirName] = []

    def open(self) -> None:
        """Create the directory if needed, check it is writable, read and check the index."""
        make_dir(self.root)
        probe = self.root / ".binrelay-write-test"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.close(fd)
            probe.unlink()
        except OSError as exc:
            raise RelayDirError(f"relay dir {self.root} is not writable: {exc.strerror}",
                                hint="fix relay-dir or its permissions") from exc
        with index_lock(self.root):
            self.subdirs = read_index(self.root) or []
            self._check()

    def _check(self) -> None:
        for name in self.subdirs:
            if not (self.root / str(name)).is_dir():
                raise RelayDirError(
                    f"{self.root}/server-uuid.index lists {name} but the directory is missing",
                    hint="restore the directory, or remove its line from server-uuid.index",
                )
        self._remove_orphans()

    def _remove_orphans(self) -> None:
        listed = {str(n) for n in self.subdirs}
        for entry in os.listdir(self.root):
            path = self.root / entry
            if entry in listed or not path.is_dir():
                continue
            try:
                SubdirName.parse(entry)
            except RelayDirError:
                continue
            if list_binlogs(path):
                raise RelayDirError(
                    f"{path} holds relay files but server-uuid.index does not list it",
                    hint="add it to server-uuid.index in order, or move it away",
                )
            log.info("removing %s, a subdir whose creation was interrupted", path)
            shutil.rmtree(path)

    @property
    def current(self) -> SubdirName | None:
        return self.subdirs[-1] if self.subdirs else None

    def path(self, name: SubdirName) -> Path:
        return self.root / str(name)

    def meta(self, name: SubdirName) -> RelayMeta | None:
        return read_meta(self.path(name))

    def refresh(self) -> None:
        """Re-read the index (purge may have removed subdirs from it)."""
        self.subdirs = read_index(self.root) or []

    def add_subdir(self, identity: str, meta: RelayMeta) -> SubdirName:
        with index_lock(self.root):
            self.refresh()
            seq = self.subdirs[-1].seq + 1 if self.subdirs else 1
            name = SubdirName(seq=seq, identity=identity)
            path = self.path(name)
            make_dir(path)
            with contextlib.suppress(FileNotFoundError):
                (path / META_FILENAME).unlink()
            write_meta(path, meta)
            write_index(self.root, [*self.subdirs, name])
            self.subdirs.append(name)
        log.info("relaying upstream %s into new subdir %s", identity, name)
        return name


class RelayView:
    """The relay dir as read at one moment, for readers: its index (subdirs checked), each
    subdir's files and relay.meta (read when first asked, then kept), its durable end and
    its earliest position.  A reader plans from one view, and takes a new one to see what
    the relay has written since.  ``of`` accepts a view or a relay dir's path."""

    def __init__(self, root: Path) -> None:
        index = read_index(root)
        if not index:
            raise RelayDirError(f"{root} holds no relay log (no server-uuid.index)",
                                hint="start `binrelay relay` first, or check relay-dir")
        check_subdirs(root, index)
        self.root = root
        self.index: tuple[SubdirName, ...] = tuple(index)
        self._files: dict[SubdirName, list[str]] = {}
        # The last subdir's relay.meta before any file list: files listed after it hold
        # every file it names, whatever the relay does meanwhile.
        self._metas: dict[SubdirName, RelayMeta | None] = {
            index[-1]: read_meta(root / str(index[-1]))}

    @classmethod
    def of(cls, where: RelayView | Path) -> RelayView:
        return where if isinstance(where, RelayView) else cls(Path(where))

    def path(self, subdir: SubdirName, name: str = "") -> Path:
        return self.root / str(subdir) / name if name else self.root / str(subdir)

    def files(self, subdir: SubdirName) -> list[str]:
        found = self._files.get(subdir)
        if found is None:
            found = self._files[subdir] = list_binlogs(self.path(subdir))
        return found

    def meta(self, subdir: SubdirName) -> RelayMeta | None:
        if subdir not in self._metas:
            self._metas[subdir] = read_meta(self.path(subdir))
        return self._metas[subdir]

    @property
    def end(self) -> Position:
        """The end of what the relay has made durable, the last subdir's relay.meta:
        readers stop there, a sync applies up to it, purge never passes it."""
        last = self.index[-1]
        meta = self.meta(last)
        if meta is None:
            raise RelayDirError(f"{self.path(last)} has no relay.meta",
                                hint="start the relay once to repair the relay dir")
        return Position(last, meta.binlog_name, meta.binlog_pos)

    @property
    def earliest(self) -> Position:
        """The first position the relay dir still holds: its oldest file's first event."""
        for subdir in self.index:
            files = self.files(subdir)
            if files:
                return Position(subdir, files[0], 4)
        return self.end


def durable_end(root: Path) -> Position:
    """:attr:`RelayView.end` of the relay dir as it is now."""
    return RelayView(root).end


def earliest(root: Path) -> Position:
    """:attr:`RelayView.earliest` of the relay dir as it is now."""
    return RelayView(root).earliest
