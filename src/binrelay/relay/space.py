"""A full relay dir: telling it apart from other write errors, and the space kept to say so.

When the relay dir's file system is full (``ENOSPC``, or ``EDQUOT`` for a quota), the relay
does not exit: the writer cuts the relay file back to relay.meta's transaction boundary, the
service says so once (log, ``relay.status``, metrics), runs a purge check when ``[purge]`` is
on, and waits for space; then it resumes from relay.meta as after any reconnect.

Saying so needs a little space itself (relay.status and relay.meta are replaced through
temporary files), and a full file system has none.  So the running relay holds a small
reserve file, ``<relay-dir>/.binrelay-reserve``, allocated before each session and freed the
moment the disk fills.  It exists only while the relay runs.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from binrelay.errors import BinrelayError, RelayDirError
from binrelay.relay.layout import FILE_MODE

log = logging.getLogger(__name__)

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
RESERVE_FILENAME = ".binrelay-reserve"
#: Enough for many rewrites of relay.status and relay.meta (a page each on most file systems).
RESERVE_BYTES = 1 << 20
#: Free space wanted, more than when the wait began (and besides the reserve), before writing
#: is tried again.  It doubles each time writing fills the disk again before relay.meta moved
#: on: a transaction larger than the free space then waits for the operator instead of being
#: fetched and cut over and over.
FIRST_HEADROOM = 4 << 20
#: Free space may never grow while writing could go on (a quota raised, inodes freed, space
#: freed and taken again by another writer): writing is also tried after this long, doubling
#: at each fill-up of the same outage.
RETRY_FIRST, RETRY_CAP = 30.0, 600.0


class RelayDiskFullError(RelayDirError):
    """The relay dir's file system is full (or a quota is exhausted).  The relay waits for
    space instead of exiting; other commands stop with this one line."""

    code = "BR3004"
    hint = ("free space on the relay dir's file system (or let [purge] remove relay files): "
            "the relay waits and resumes by itself; nothing relayed is lost")


def disk_full_errno(exc: BaseException | None) -> int | None:
    """``ENOSPC``/``EDQUOT`` when ``exc``, or an error it was raised from, is a full disk."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return exc.errno
        exc = exc.__cause__
    return None


@contextlib.contextmanager
def disk_full_raised(relay_dir: Path) -> Iterator[None]:
    """Turn a full file system met anywhere below (a raw ``OSError``, or a ``RelayDirError``
    raised from one) into ``RelayDiskFullError``; every other error passes unchanged."""
    try:
        yield
    except RelayDiskFullError:
        raise
    except (OSError, BinrelayError) as exc:
        if disk_full_errno(exc) is None:
            raise
        what = exc.message if isinstance(exc, BinrelayError) else \
            f"cannot write {exc.filename or relay_dir}: {exc.strerror}"
        raise RelayDiskFullError(f"relay dir {relay_dir} is full: {what}") from exc


def free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


@dataclass(frozen=True)
class SpaceReserve:
    """The reserve file (see the module's doc)."""

    path: Path
    size: int = RESERVE_BYTES

    def take(self) -> None:
        """Allocate the reserve (a no-op when it is there).  A full disk raises ``OSError``;
        a file system that cannot allocate ahead is only logged: the reserve is a comfort,
        the relay does not depend on it."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
            try:
                os.posix_fallocate(fd, 0, self.size)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno in DISK_FULL_ERRNOS:
                raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
            log.debug("cannot allocate %s: %s", self.path, exc.strerror)

    def release(self) -> None:
        # Also where the relay dir itself is missing or unusable (a start that failed).
        with contextlib.suppress(OSError):
            self.path.unlink()


@dataclass(frozen=True)
class DiskFull:
    """One outage.  ``at`` is relay.meta's position when it began (subdir seq, file key,
    offset): writing that fills the disk again before passing it is the same outage, a
    ``refill``."""

    since: float
    at: tuple
    #: Try writing again once this much is free.
    want_free: int
    refills: int = 0

    @classmethod
    def begin(cls, since: float, at: tuple, free: int, reserve: SpaceReserve) -> DiskFull:
        return cls(since, at, max(reserve.size + FIRST_HEADROOM, free + FIRST_HEADROOM))

    def refilled(self, free: int) -> DiskFull:
        refills = self.refills + 1
        return replace(self, want_free=free + (FIRST_HEADROOM << refills), refills=refills)

    @property
    def retry_after(self) -> float:
        return min(RETRY_CAP, RETRY_FIRST * 2 ** self.refills)
