"""Is a relay dir whole?  The gaps that would make a reader skip transactions silently.

A relay dir is a chain: ``server-uuid.index`` lists its subdirs, each subdir holds binlog
files, and each file but the last of a subdir hands over to the next one.  A reader that
simply lists the files would step over a missing middle file, a file cut short, or a
subdir that is not where the index says, and lose their transactions without a word
(pingcap/dm#2080).  So every read path proves each hand-over before it crosses it:

* a file that ends with a ROTATE names its successor: it must be the next file present;
* a file that ends otherwise (a STOP, a crash, a cut) is followed legitimately only by the
  first binlog the upstream wrote after it restarted, whose FORMAT_DESCRIPTION says so (its
  ``created`` timestamp is set only in the first binlog after a start; both MySQL and
  MariaDB clear it in later files, replicas use it to drop temporary tables), and with the
  next binlog number;
* every subdir the index lists exists, and no directory with relay files is missing from
  the index.

Checks read a file's head and tail only; a proven hand-over is remembered (finished files
do not change), so following a live relay costs nothing.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.binlog.bytes import HEADER as _HEADER
from binrelay.errors import RelayDirError
from binrelay.position import SubdirName, binlog_sort_key
from binrelay.relay.layout import list_binlogs, read_index
from binrelay.relay.scan import read_fde

__all__ = ["GAP_HINT", "check_files", "check_handover", "check_relay_dir", "check_subdirs"]

#: A ROTATE's body: the position (8 bytes) and a file name; names stay short.
_TAIL_WINDOW = c.EVENT_HEADER_LEN + 8 + 512 + 4

#: Hand-overs proven: (subdir path, file, its size, successor).
_PROVEN: set[tuple[str, str, int, str]] = set()

GAP_HINT = ("restore the missing or damaged relay files (or relay again into a new relay dir"
            " from before the gap); binrelay does not read past a gap")


def check_subdirs(relay_dir: Path, index: list[SubdirName] | None = None) -> None:
    """Every subdir the index lists exists; no subdir holding relay files is unlisted."""
    listed = read_index(relay_dir) if index is None else index
    listed = listed or []
    for name in listed:
        if not (relay_dir / str(name)).is_dir():
            raise RelayDirError(
                f"{relay_dir}/server-uuid.index lists {name}, but {relay_dir / str(name)} is"
                " missing", hint=GAP_HINT)
    known = {str(n) for n in listed}
    try:
        entries = sorted(os.listdir(relay_dir))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry in known or not (relay_dir / entry).is_dir():
            continue
        try:
            SubdirName.parse(entry)
        except (RelayDirError, ValueError):
            continue  # not a subdir name (consumers/, ...)
        if list_binlogs(relay_dir / entry):
            raise RelayDirError(
                f"{relay_dir / entry} holds relay files but {relay_dir}/server-uuid.index does"
                " not list it", hint="add it to server-uuid.index in its place, or move it "
                "out of the relay dir")


def check_relay_dir(relay_dir: Path) -> None:
    """The whole chain: subdirs, and every hand-over in each."""
    index = read_index(relay_dir) or []
    check_subdirs(relay_dir, index)
    for name in index:
        check_files(relay_dir / str(name), list_binlogs(relay_dir / str(name)))


def check_files(subdir: Path, files: list[str]) -> None:
    """Every hand-over between consecutive ``files`` (as :func:`list_binlogs` orders them)."""
    for name, successor in itertools.pairwise(files):
        check_handover(subdir, name, successor)


def check_handover(subdir: Path, name: str, successor: str) -> None:
    """Prove that relay file ``name`` hands over to ``successor``, the next file present in
    ``subdir``: nothing lies between them."""
    path = subdir / name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise RelayDirError(f"relay file {path} is missing", hint=GAP_HINT) from None
    key = (str(subdir), name, size, successor)
    if key in _PROVEN:
        return
    fde = read_fde(path)
    if fde is None:
        raise RelayDirError(f"relay file {path} has no binlog header", hint=GAP_HINT)
    ending = _last_event(path, size, fde.checksum_len)
    if ending is not None and ending[0] == c.ROTATE_EVENT:
        named = ending[1]
        if named != successor:
            if binlog_sort_key(named) < binlog_sort_key(successor):
                raise RelayDirError(
                    f"relay file {subdir / named} is missing ({name} rotates to it; the next "
                    f"file present is {successor})", hint=GAP_HINT)
            raise RelayDirError(
                f"relay file {path} rotates to {named}, but the next file present is "
                f"{successor}", hint=GAP_HINT)
    else:
        following = read_fde(subdir / successor)
        if following is None:
            raise RelayDirError(f"relay file {subdir / successor} has no binlog header",
                                hint=GAP_HINT)
        if not following.create_timestamp:
            raise RelayDirError(
                f"relay file {path} ends without the ROTATE to {successor} ({size} bytes): it"
                " was cut short or damaged", hint=GAP_HINT)
        if not _consecutive(name, successor):
            raise RelayDirError(
                f"relay files are missing between {path} and {successor} (the upstream "
                "restarted after the first; its next binlog is not there)", hint=GAP_HINT)
    _PROVEN.add(key)


def _consecutive(name: str, successor: str) -> bool:
    base, number = binlog_sort_key(name)
    next_base, next_number = binlog_sort_key(successor)
    return next_base == base and next_number == number + 1


def _last_event(path: Path, size: int, checksum_len: int) -> tuple[int, str] | None:
    """The file's last event if it is a ROTATE (type, the file it names) or a STOP; None
    when the tail is neither (a crash, a cut)."""
    with open(path, "rb") as f:
        start = max(4, size - _TAIL_WINDOW)
        f.seek(start)
        tail = f.read(size - start)
    # The last event ends at the file's end and says so (its log_pos is that end).
    for at in range(len(tail) - c.EVENT_HEADER_LEN - checksum_len, -1, -1):
        _ts, etype, _sid, length, log_pos, _flags = _HEADER.unpack_from(tail, at)
        if length != len(tail) - at or log_pos != size:
            continue
        if etype == c.ROTATE_EVENT and length >= c.EVENT_HEADER_LEN + 8 + checksum_len:
            body = tail[at + c.EVENT_HEADER_LEN + 8 : len(tail) - checksum_len]
            return c.ROTATE_EVENT, body.decode("utf-8", "replace")
        if etype == c.STOP_EVENT:
            return c.STOP_EVENT, ""
    return None


def relay_dir_files(relay_dir: Path | str) -> list[Path]:
    """The relay files of a relay directory, in order: subdirs as ``server-uuid.index``
    lists them, files in each by binlog number."""
    relay_dir = Path(relay_dir)
    names = read_index(relay_dir)
    if names is None:
        raise RelayDirError(f"{relay_dir} has no server-uuid.index",
                            hint="give a relay directory or one binlog file")
    check_relay_dir(relay_dir)
    return [relay_dir / str(n) / f for n in names for f in list_binlogs(relay_dir / str(n))]
