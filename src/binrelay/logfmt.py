"""Structured logging: one logfmt line per event of note, secrets masked.

A line looks like::

    ts=2024-05-01T12:00:00.123Z level=info logger=binrelay.relay.service msg="relaying ..." pid=42

``extra={"key": value}`` passed to a logging call adds ``key=value`` pairs after ``msg``.
Every configured password is registered with :func:`setup_logging` and replaced by ``***``
in the finished line, whichever way it got there (a message, an argument, an exception).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

__all__ = ["LEVELS", "LogfmtFormatter", "SecretMask", "logfmt_value", "setup_logging"]

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR}

_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn",
                logging.ERROR: "error", logging.CRITICAL: "error"}

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}

_BARE = re.compile(r"[A-Za-z0-9_.:/@+\-|,()]+")


def logfmt_value(value: Any) -> str:
    """``value`` as a logfmt value: bare when it is safe, else double-quoted and escaped."""
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if _BARE.fullmatch(text):
        return text
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{escaped}"'


class SecretMask:
    """The secrets a process holds; ``mask`` replaces each by ``***``."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()

    def add(self, secrets: Iterable[str]) -> None:
        # Very short strings would mask unrelated text and say little anyway.
        self._secrets.update(s for s in secrets if s and len(s) >= 3)

    def mask(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, "***")
        return text


class LogfmtFormatter(logging.Formatter):
    def __init__(self, mask: SecretMask | None = None) -> None:
        super().__init__()
        self.secrets = mask or SecretMask()

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        mask = self.secrets.mask

        def value(v: Any) -> str:
            # Masked before quoting: escaping could otherwise hide a secret from the mask.
            return logfmt_value(v if v is None or isinstance(v, bool) else mask(str(v)))

        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={_LEVEL_NAMES.get(record.levelno, 'info')}",
            f"logger={record.name}",
            f"msg={value(record.getMessage())}",
        ]
        for key, extra in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                parts.append(f"{key}={value(extra)}")
        if record.exc_info:
            parts.append(f"exc={value(self.formatException(record.exc_info))}")
        return mask(" ".join(parts))


class _Py4jOnRoot(logging.Filter):
    """py4j logs some failures on the root logger (``logging.info(..., exc_info=True)``:
    its finalizer thread once the JVM has ended, at exit): py4j's records, kept for debug
    level, where their tracebacks belong, never on an operator's terminal at info."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname:
            return self.level <= logging.DEBUG
        return True


def mask_secrets(text: str) -> str:
    """``text`` with the secrets the log masks (``setup_logging``'s) masked too."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, LogfmtFormatter):
            text = handler.formatter.secrets.mask(text)
    return text


def setup_logging(level: str, *, secrets: Iterable[str] = (),
                  stream: TextIO | None = None,
                  path: str | os.PathLike[str] | None = None) -> None:
    """Send every ``binrelay`` (and library) record at ``level`` or above to ``stream``
    (stderr), or appended to the file ``path``, as logfmt, masking ``secrets``.  Replaces
    handlers set up before.  Raises OSError when ``path`` cannot be opened."""
    handler: logging.Handler
    if path is not None:
        handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    else:
        handler = logging.StreamHandler(stream or sys.stderr)
    mask = SecretMask()
    mask.add(secrets)
    handler.setFormatter(LogfmtFormatter(mask))
    handler.addFilter(_Py4jOnRoot(LEVELS.get(level, logging.INFO)))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        if isinstance(old, logging.FileHandler):
            # Set up by an earlier call: it would keep its file open.
            old.close()
    root.addHandler(handler)
    root.setLevel(LEVELS.get(level, logging.INFO))
    # py4j logs every JVM round trip at DEBUG and INFO: noise, not events of note.
    logging.getLogger("py4j").setLevel(max(logging.WARNING, root.level))
