"""Named places where a test kills this process with SIGKILL, to check crash safety at
exactly that place (TiDB's failpoints, reduced to the one action a crash test needs).

``BINRELAY_FAILPOINTS=ddl-applied`` arms a point; with ``BINRELAY_FAILPOINT_DIR`` set, it
fires once per key (a marker file per key is written there first), so a test can rerun the
same command until it gets through, crashing once at every place.  Unarmed points cost one
set look-up.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

__all__ = ["armed", "hit"]

_ARMED = frozenset(filter(None, os.environ.get("BINRELAY_FAILPOINTS", "").split(",")))


def armed(name: str) -> bool:
    """Whether a test arms ``name`` (code that would do two steps in one may then keep them
    apart, so the point between them exists)."""
    return name in _ARMED


def hit(name: str, key: str = "") -> None:
    if name not in _ARMED:
        return
    marks = os.environ.get("BINRELAY_FAILPOINT_DIR")
    if marks:
        mark = Path(marks) / hashlib.sha256(f"{name}:{key}".encode()).hexdigest()[:32]
        if mark.exists():
            return
        mark.write_text(f"{name} {key}\n")
    os.kill(os.getpid(), signal.SIGKILL)
