"""Process helpers shared by the tooling that starts servers (MariaDB, Spark daemons):
loopback ports and children that die with their parent."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading
from collections.abc import Callable

LOOPBACK = "127.0.0.1"

_PR_SET_PDEATHSIG = 1
try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - non-glibc platforms
    _libc = None


def find_free_port() -> int:
    """A loopback port that was free a moment ago; callers must cope with losing a race."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` giving the child SIGKILL when this process dies, or None.

    atexit does not run when the parent is SIGKILLed or leaves via ``os._exit`` (as the
    pytest-timeout "thread" method does); the kernel's parent-death signal does.  It fires
    when the forking *thread* exits, so it is only set from the main thread, which lives as
    long as the process.
    """
    if _libc is None or threading.current_thread() is not threading.main_thread():
        return None
    libc, parent = _libc, os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec
