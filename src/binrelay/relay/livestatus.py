"""``<relay-dir>/relay.status``: what a running relay knows that no other file says.

relay.meta is the persisted position; this file is the relay process's live view (its pid,
state, last error, the upstream position last seen, seconds behind, where its metrics are),
rewritten about once a second by atomic rename, mode 0600.  It is not fsynced: after a crash
it may be stale or missing, which is why readers check whether ``pid`` is still alive.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from binrelay.relay.layout import write_atomic

STATUS_FILENAME = "relay.status"

#: Process states written to the file.
CONNECTING, RELAYING, RECONNECTING, STOPPED = "connecting", "relaying", "reconnecting", "stopped"
#: The relay dir's file system is full: the relay waits for space (``disk_full_since``).
DISK_FULL = "disk-full"


@dataclass(frozen=True)
class RelayLiveStatus:
    pid: int
    state: str
    started_at: float
    updated_at: float
    #: Where the relay writes now (its file and offset, which may be past relay.meta).
    subdir: str = ""
    binlog_file: str = ""
    binlog_pos: int = 0
    #: The upstream's position last seen by the relay (heartbeat or probe), or "" / 0.
    upstream_file: str = ""
    upstream_pos: int = 0
    seconds_behind: float | None = None
    bytes_behind: int | None = None
    last_error: str = ""
    last_error_at: float | None = None
    metrics_addr: str = ""
    disk_full_since: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RelayLiveStatus:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_status(relay_dir: Path, status: RelayLiveStatus) -> None:
    write_atomic(relay_dir / STATUS_FILENAME,
                 json.dumps(asdict(status), sort_keys=True).encode() + b"\n", durable=False)


def read_status(relay_dir: Path) -> RelayLiveStatus | None:
    """The file's content, or None when it is missing or unreadable (a torn write cannot
    happen: it is replaced whole; a foreign or damaged file is treated as missing)."""
    try:
        data = json.loads((relay_dir / STATUS_FILENAME).read_text())
        return RelayLiveStatus.from_dict(data)
    except (OSError, ValueError, TypeError):
        return None


def pid_alive(pid: int | None) -> bool:
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    # A zombie (exited, not yet reaped by its parent) answers kill 0 but is not running.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True
