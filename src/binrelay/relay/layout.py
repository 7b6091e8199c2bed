"""The relay directory's layout (TiDB DM's, exactly) and its small files.

```
<relay-dir>/
  server-uuid.index            one subdir name a line, in creation order
  <identity>.<NNNNNN>/         one subdir per upstream identity change, NNNNNN counts from 1
    mysql-bin.000001 ...       byte-identical copies of the upstream's binlog files
    relay.meta                 TOML: binlog-name, binlog-pos, binlog-gtid (relayed so far)
```

Everything written here is written atomically (temp file, fsync, rename, fsync of the
directory), files 0600 and directories 0700.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from binrelay.errors import RelayDirError
from binrelay.position import SubdirName, binlog_sort_key, is_binlog_name

INDEX_FILENAME = "server-uuid.index"
META_FILENAME = "relay.meta"
FILE_MODE = 0o600
DIR_MODE = 0o700

# --- durable file operations ---------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, durable: bool = True,
                 settle: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, and
    (``durable``) so that a crash leaves one of them too: the new one, unless ``settle`` is
    False (the directory is not fsynced, so a crash may bring back the old one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        remove_quietly(tmp)  # half written (a full disk): it would only hold on to space
        raise
    os.replace(tmp, path)
    if durable and settle:
        fsync_dir(path.parent)


def make_dir(path: Path) -> None:
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        raise RelayDirError(
            f"cannot create relay directory {path}: {exc.strerror}",
            hint="check relay-dir and its permissions",
        ) from exc


# --- relay.meta --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RelayMeta:
    binlog_name: str
    binlog_pos: int
    binlog_gtid: str = ""

    def to_toml(self) -> bytes:
        return tomli_w.dumps({
            "binlog-name": self.binlog_name,
            "binlog-pos": self.binlog_pos,
            "binlog-gtid": self.binlog_gtid,
        }).encode()


def read_meta(subdir: Path) -> RelayMeta | None:
    path = subdir / META_FILENAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RelayDirError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(raw.decode())
        name = data["binlog-name"]
        pos = data["binlog-pos"]
        gtid = data.get("binlog-gtid", "")
        if not isinstance(name, str) or not isinstance(pos, int) or not isinstance(gtid, str):
            raise TypeError("wrong value types")
        if isinstance(pos, bool) or pos < 0:
            raise TypeError("binlog-pos must be a non-negative integer")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise RelayDirError(
            f"{path} is damaged: {exc}",
            hint="restore it, or remove the subdir's relay.meta to have it rebuilt from the files",
        ) from exc
    return RelayMeta(binlog_name=name, binlog_pos=pos, binlog_gtid=gtid)


def write_meta(subdir: Path, meta: RelayMeta, *, settle: bool = True) -> None:
    write_atomic(subdir / META_FILENAME, meta.to_toml(), settle=settle)


# --- server-uuid.index -------------------------------------------------------------------------


def read_index(relay_dir: Path) -> list[SubdirName] | None:
    """The subdirs listed in the index, or None when there is no index yet."""
    path = relay_dir / INDEX_FILENAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RelayDirError(f"cannot read {path}: {exc}") from exc
    names = [SubdirName.parse(line.strip()) for line in text.splitlines() if line.strip()]
    for prev, cur in itertools.pairwise(names):
        if cur.seq != prev.seq + 1:
            raise RelayDirError(
                f"{path} is damaged: subdir {cur} follows {prev} (suffixes must count up by one)"
            )
    return names


def write_index(relay_dir: Path, names: list[SubdirName]) -> None:
    write_atomic(relay_dir / INDEX_FILENAME, "".join(f"{n}\n" for n in names).encode())


LOCK_FILENAME = ".binrelay.lock"


@contextlib.contextmanager
def index_lock(relay_dir: Path) -> Iterator[None]:
    """Serialise changes to server-uuid.index and the set of subdirs across processes.

    The relay takes it to add a subdir, purge to remove them: each re-reads the index while
    holding it, so neither undoes the other.
    """
    fd = os.open(relay_dir / LOCK_FILENAME, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def list_binlogs(subdir: Path) -> list[str]:
    try:
        entries = os.listdir(subdir)
    except FileNotFoundError:
        return []
    return sorted((n for n in entries if is_binlog_name(n) and not n.startswith(".")),
                  key=binlog_sort_key)


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
