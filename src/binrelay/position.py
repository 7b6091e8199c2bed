"""Where a byte of the relay log is: the one position type, its names and orders.

A position is (subdir, binlog file, offset).  Subdirs (``<identity>.<NNNNNN>``) order by
their sequence suffix, the order of ``server-uuid.index``; binlog files by number
(``mysql-bin.999999 < mysql-bin.1000000``); then offsets.  Relay files keep the upstream's
names and offsets, so a position also names the upstream's binlog position.

One text form, DM's checkpoint spelling with the subdir after it,
``mysql-bin|000002.000003:1234 (0-1.000002)``; one dict form, the ``relaylog`` source's
offset ``{"subdir": "0-1.000002", "file": "mysql-bin.000003", "pos": 1234}``, used by Spark
offsets, consumer files and ``status --json`` alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from binrelay.errors import RelayDirError

_SUBDIR_RE = re.compile(r"^(?P<identity>.+)\.(?P<seq>\d{6})$")
_BINLOG_RE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d+)$")
#: The dict form's spelling, as an operator would write it (error hints).
DICT_EXAMPLE = '{"subdir": "0-1.000001", "file": "mysql-bin.000001", "pos": 4}'
# Consumer files written before the dict form was one spelled the file and offset so.
_OLD_KEYS = {"binlog-name": "file", "binlog-pos": "pos"}


@dataclass(frozen=True, order=True)
class SubdirName:
    seq: int
    identity: str

    @classmethod
    def parse(cls, name: str) -> SubdirName:
        m = _SUBDIR_RE.match(name)
        if not m:
            raise RelayDirError(f"{name!r} is not a relay subdir name (<uuid>.<6 digits>)")
        return cls(seq=int(m["seq"]), identity=m["identity"])

    def __str__(self) -> str:
        return f"{self.identity}.{self.seq:06d}"


def binlog_seq(name: str) -> int:
    return binlog_sort_key(name)[1]


def is_binlog_name(name: str) -> bool:
    return bool(_BINLOG_RE.match(name))


def binlog_sort_key(name: str) -> tuple[str, int]:
    """Binlog names compare by number, so mysql-bin.999999 < mysql-bin.1000000."""
    m = _BINLOG_RE.match(name)
    if not m:
        raise RelayDirError(f"{name!r} is not a binlog file name (<base>.<number>)")
    return m["base"], int(m["seq"])


@dataclass(frozen=True)
class Position:
    subdir: SubdirName
    binlog_name: str
    binlog_pos: int

    @property
    def sort_key(self) -> tuple[int, tuple[str, int], int]:
        return self.subdir.seq, binlog_sort_key(self.binlog_name), self.binlog_pos

    def __lt__(self, other: Position) -> bool:
        return self.sort_key < other.sort_key

    def __le__(self, other: Position) -> bool:
        return self.sort_key <= other.sort_key

    def file_key(self) -> tuple[int, tuple[str, int]]:
        return self.subdir.seq, binlog_sort_key(self.binlog_name)

    def __str__(self) -> str:
        base, num = self.binlog_name.rsplit(".", 1)
        return f"{base}|{self.subdir.seq:06d}.{num}:{self.binlog_pos} ({self.subdir})"

    def to_dict(self) -> dict[str, Any]:
        return {"subdir": str(self.subdir), "file": self.binlog_name, "pos": self.binlog_pos}

    @classmethod
    def from_dict(cls, data: Any) -> Position:
        """The dict form back; anything else is a RelayDirError saying what a position
        looks like."""
        def bad(why: str) -> RelayDirError:
            return RelayDirError(f"not a relay position: {data!r} ({why})",
                                 hint=f"a position looks like {DICT_EXAMPLE}")

        if not isinstance(data, dict):
            raise bad("not a mapping")
        if any(old in data and new in data for old, new in _OLD_KEYS.items()):
            raise bad("both spellings of a key")
        data = {_OLD_KEYS.get(k, k): v for k, v in data.items()}
        missing = [k for k in ("subdir", "file", "pos") if k not in data]
        if missing:
            raise bad(f"no {', '.join(missing)}")
        pos = data["pos"]
        if isinstance(pos, str) and pos.isascii() and pos.isdigit():
            pos = int(pos)
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise bad("pos must be an integer >= 0")
        try:
            subdir = SubdirName.parse(str(data["subdir"]))
            binlog_sort_key(str(data["file"]))
        except RelayDirError as exc:
            raise bad(exc.message) from exc
        return cls(subdir, str(data["file"]), pos)
