"""How one key's value is checked: small validators, each raising :class:`Invalid` with
what the value should have been."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from binrelay.errors import GtidError
from binrelay.gtid import parse_gtid_set


class Invalid(Exception):
    """A value that a validator refuses; the caller adds the file and key to the message."""

    def __init__(self, expected: str, hint: str | None = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.hint = hint


def _unquote_hint(value: Any, looks_right: Callable[[str], bool]) -> str | None:
    # "3306" instead of 3306 is the commonest type mistake; name the fix rather than the rule.
    if isinstance(value, str) and looks_right(value.strip()):
        return "write numbers and true/false without quotes"
    return None


def _is_int_text(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text) is not None


def _is_float_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Str:
    nonempty: bool = False

    @property
    def expected(self) -> str:
        return "a non-empty string" if self.nonempty else "a string"

    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or (self.nonempty and not value):
            raise Invalid(self.expected)
        return value


@dataclass(frozen=True)
class PathText:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise Invalid("a non-empty path string")
        # Only "~" is expanded: the path is otherwise kept as written so that relative paths
        # can still be resolved against the config file's directory later.
        return os.path.expanduser(value)


@dataclass(frozen=True)
class Bool:
    def __call__(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise Invalid("true or false", _unquote_hint(value, lambda t: t in ("true", "false")))
        return value


@dataclass(frozen=True)
class Int:
    lo: int
    hi: int | None = None
    #: Extra advice when the value is an integer outside the range.
    range_hint: str | None = None

    @property
    def expected(self) -> str:
        if self.hi is not None:
            return f"an integer in {self.lo}..{self.hi}"
        return f"an integer >= {self.lo}"

    def __call__(self, value: Any) -> int:
        # bool is a subclass of int, so `port = true` would otherwise be read as port 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(self.expected, _unquote_hint(value, _is_int_text))
        if value < self.lo or (self.hi is not None and value > self.hi):
            raise Invalid(self.expected, self.range_hint)
        return value


@dataclass(frozen=True)
class Float:
    lo: float

    def __call__(self, value: Any) -> float:
        expected = f"a number >= {self.lo:g}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Invalid(expected, _unquote_hint(value, _is_float_text))
        # TOML allows inf and nan; neither is a usable interval.
        if not math.isfinite(value) or value < self.lo:
            raise Invalid(expected)
        return float(value)


@dataclass(frozen=True)
class Choice:
    choices: tuple[str, ...]

    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            hint = None
            if isinstance(value, str) and value.strip().lower() in self.choices:
                hint = "the values are lower case"
            raise Invalid("one of " + ", ".join(f'"{c}"' for c in self.choices), hint)
        return value


@dataclass(frozen=True)
class Addr:
    """``"host:port"`` (``"[v6]:port"`` for IPv6), port 0 = any free port; "" = off."""

    def __call__(self, value: Any) -> str:
        expected = 'a "host:port" address like "127.0.0.1:9150", or "" for off'
        if not isinstance(value, str):
            raise Invalid(expected)
        if value and split_addr(value) is None:
            raise Invalid(expected, "port 0 picks a free port; write IPv6 as \"[::1]:9150\"")
        return value


def split_addr(text: str) -> tuple[str, int] | None:
    """``"host:port"`` as (host, port), or None when it is not one."""
    m = re.fullmatch(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9_.-]+)):(\d{1,5})", text)
    if m is None or int(m[3]) > 65535:
        return None
    return (m[1] or m[2]), int(m[3])


# Spark's own master URL forms; anything else fails deep inside Spark with a JVM stack trace.
_SPARK_MASTER_RE = re.compile(
    r"local(?:\[(?:\*|[1-9]\d*)(?:,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]"
    r"|(?:spark|k8s|mesos)://\S+|yarn")


@dataclass(frozen=True)
class SparkMaster:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or not _SPARK_MASTER_RE.fullmatch(value):
            raise Invalid('a Spark master URL: "local[*]", "local[N]" or "spark://host:port"')
        return value


# <base>.<digits>, as MySQL and MariaDB name binlog files; a bare file name, never a path.
_BINLOG_NAME_RE = re.compile(r"[^/\\\s]+\.[0-9]+")


@dataclass(frozen=True)
class BinlogName:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str):
            raise Invalid("a string")
        if value and not _BINLOG_NAME_RE.fullmatch(value):
            raise Invalid('a binlog file name like "mysql-bin.000003"')
        return value


GTID_EXAMPLES = {
    "mysql": '"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"',
    "mariadb": '"0-1-100"',
}


def gtid_flavor(text: str) -> str | None:
    """Which flavor's GTID set ``text`` is (gtid.py's grammar), or None when it is neither
    (blank text is not a set: "" means none, and only "" does)."""
    if not text.strip():
        return None
    flavor = "mysql" if ":" in text else "mariadb"
    try:
        parse_gtid_set(text, flavor)
    except GtidError:
        return None
    return flavor


@dataclass(frozen=True)
class GtidSetText:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str):
            raise Invalid("a string")
        if value and gtid_flavor(value) is None:
            raise Invalid(
                f"a MySQL GTID set like {GTID_EXAMPLES['mysql']} "
                f"or a MariaDB GTID list like {GTID_EXAMPLES['mariadb']}"
            )
        return value


