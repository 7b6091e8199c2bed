"""Positions in a relay dir: (subdir, binlog file, offset), ordered as the relay wrote them.

Subdirs order by their sequence suffix (the order of server-uuid.index), files by number
within a subdir, then offsets.  ``str()`` uses DM's checkpoint spelling,
``mysql-bin|000002.000003:1234`` (file ``mysql-bin.000003`` of the subdir with suffix 000002).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from binrelay.errors import RelayDirError
from binrelay.relay.layout import SubdirName, binlog_sort_key

_DM_FORM = re.compile(r"^(?P<base>.+)\|(?P<seq>\d{6})\.(?P<num>\d+):(?P<pos>\d+)$")


@dataclass(frozen=True)
class RelayPosition:
    subdir: SubdirName
    binlog_name: str
    binlog_pos: int

    @property
    def sort_key(self) -> tuple[int, tuple[str, int], int]:
        return self.subdir.seq, binlog_sort_key(self.binlog_name), self.binlog_pos

    def __lt__(self, other: RelayPosition) -> bool:
        return self.sort_key < other.sort_key

    def __le__(self, other: RelayPosition) -> bool:
        return self.sort_key <= other.sort_key

    def file_key(self) -> tuple[int, tuple[str, int]]:
        return self.subdir.seq, binlog_sort_key(self.binlog_name)

    def __str__(self) -> str:
        base, num = self.binlog_name.rsplit(".", 1)
        return f"{base}|{self.subdir.seq:06d}.{num}:{self.binlog_pos} ({self.subdir})"

    def to_dict(self) -> dict[str, Any]:
        return {"subdir": str(self.subdir), "binlog-name": self.binlog_name,
                "binlog-pos": self.binlog_pos}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RelayPosition:
        try:
            subdir = SubdirName.parse(str(data["subdir"]))
            name = str(data["binlog-name"])
            pos = data["binlog-pos"]
            binlog_sort_key(name)
        except KeyError as exc:
            raise RelayDirError(f"relay position {data!r} lacks {exc}") from exc
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise RelayDirError(f"relay position {data!r}: binlog-pos must be an integer >= 0")
        return cls(subdir, name, pos)
