"""Consumers' safe positions, kept in the relay dir so that purge sees them from any process.

``<relay-dir>/consumers/<name>.toml`` holds the oldest relay position a consumer may still
need (for the Spark pipeline: the start of its last uncommitted batch).  Purge never removes
the file holding that position or anything after it.  A consumer that stops or stalls keeps
protecting its files until it is unregistered explicitly: losing relay data silently is
worse than a full disk, which at least says so.
"""

from __future__ import annotations

import os
import re
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import tomli_w

from binrelay.errors import RelayDirError
from binrelay.position import Position
from binrelay.relay.layout import make_dir, write_atomic

CONSUMERS_DIRNAME = "consumers"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Consumer:
    name: str
    position: Position
    updated: datetime
    pid: int | None = None
    #: The last error the consumer rode out (e.g. a lost downstream), and when.
    last_error: str = ""
    last_error_at: datetime | None = None

    def describe(self) -> str:
        age = time.time() - self.updated.timestamp()
        return (f"consumer {self.name!r} at {self.position} "
                f"(updated {age:.0f} s ago{'' if self.pid is None else f', pid {self.pid}'})")


def _dir(relay_dir: Path) -> Path:
    return relay_dir / CONSUMERS_DIRNAME


def check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise RelayDirError(f"consumer name {name!r} is not allowed",
                            hint="use 1-64 letters, digits, '_', '.' or '-'")
    return name


def register(relay_dir: Path, name: str, position: Position, *,
             last_error: tuple[str, float] | None = None) -> Consumer:
    """Record (or move) ``name``'s safe position durably; ``last_error``: the last error it
    rode out (text, epoch seconds), shown by ``status``."""
    check_name(name)
    make_dir(_dir(relay_dir))
    consumer = Consumer(name, position, datetime.now(UTC), os.getpid())
    data: dict[str, object] = {"name": name, **position.to_dict(), "updated": consumer.updated,
                               "pid": consumer.pid}
    if last_error is not None:
        at = datetime.fromtimestamp(last_error[1], UTC)
        consumer = Consumer(name, position, consumer.updated, consumer.pid, last_error[0], at)
        data.update({"last_error": last_error[0], "last_error_at": at})
    write_atomic(_dir(relay_dir) / f"{name}.toml", tomli_w.dumps(data).encode())
    return consumer


def note_error(relay_dir: Path, name: str, error: tuple[str, float]) -> None:
    """Add ``error`` to ``name``'s registration, its position unchanged."""
    for consumer in list_consumers(relay_dir):
        if consumer.name == name:
            register(relay_dir, name, consumer.position, last_error=error)


def unregister(relay_dir: Path, name: str) -> bool:
    path = _dir(relay_dir) / f"{check_name(name)}.toml"
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def list_consumers(relay_dir: Path) -> list[Consumer]:
    directory = _dir(relay_dir)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".toml"))
    except FileNotFoundError:
        return []
    out = []
    for file in names:
        path = directory / file
        try:
            data = tomllib.loads(path.read_text())
            updated = data["updated"]
            if not isinstance(updated, datetime):
                raise TypeError("updated must be a date-time")
            if updated.tzinfo is None:
                updated = updated.replace(tzinfo=UTC)
            pid = data.get("pid")
            error_at = data.get("last_error_at")
            out.append(Consumer(str(data["name"]), Position.from_dict(data), updated,
                                pid if isinstance(pid, int) else None,
                                str(data.get("last_error", "")),
                                error_at if isinstance(error_at, datetime) else None))
        except FileNotFoundError:
            continue  # unregistered meanwhile
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError,
                RelayDirError) as exc:
            # An unreadable registration still stands for a consumer: refuse to guess.
            raise RelayDirError(f"consumer registration {path} is damaged: {exc}",
                                hint="fix it, or remove it if that consumer is gone") from exc
    return out


def oldest(consumers: list[Consumer]) -> Consumer | None:
    return min(consumers, key=lambda c: c.position.sort_key, default=None)
