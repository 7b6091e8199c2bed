"""Bring a subdir back to a clean state after a crash, before relaying resumes.

The last file may end with a torn event or a transaction cut in two, and relay.meta may lag
the data (normal: meta is written after the data's fsync) or, on a disk that lies, lead it.
Recovery truncates the last file to the end of its last complete transaction and sets meta to
that position.  Bytes up to the meta position were durable: damage there is corruption, an
error, and nothing is touched.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from binrelay.errors import RelayDirError
from binrelay.position import binlog_sort_key
from binrelay.relay.layout import RelayMeta, list_binlogs, write_meta
from binrelay.relay.scan import scan_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovery:
    meta: RelayMeta
    truncated_bytes: int = 0
    removed_file: str | None = None
    meta_rewound: bool = False


def recover_subdir(subdir: Path, meta: RelayMeta | None, *, flavor: str | None) -> Recovery:
    """Check and repair ``subdir``; write and return the meta to resume from."""
    files = list_binlogs(subdir)
    if not files:
        if meta is None:
            raise RelayDirError(f"{subdir} has neither relay files nor relay.meta",
                                hint="remove the empty subdir and its line in server-uuid.index")
        if meta.binlog_pos > 4:
            log.warning("%s: relay.meta points at %s:%d but the file is missing; rewinding to 4",
                        subdir, meta.binlog_name, meta.binlog_pos)
            meta = RelayMeta(meta.binlog_name, 4, meta.binlog_gtid)
            write_meta(subdir, meta)
            return Recovery(meta, meta_rewound=True)
        return Recovery(meta)

    last = files[-1]
    path = subdir / last
    if meta is not None and meta.binlog_name and meta.binlog_name not in files and \
            binlog_sort_key(meta.binlog_name) > binlog_sort_key(last) and meta.binlog_pos <= 4:
        # Meta moved to the next file at a Rotate and that file was not created yet.
        return Recovery(meta)

    gtids = meta.binlog_gtid if meta is not None else ""
    result = scan_file(path, flavor=flavor, start_gtids=gtids)
    meta_pos = meta.binlog_pos if meta is not None and meta.binlog_name == last else None

    if result.fde is None:
        if meta_pos is not None and 4 < meta_pos <= result.size:
            # The header lies within bytes relay.meta says were durable: it is damaged, not torn.
            raise RelayDirError(
                f"relay file {path} has no readable binlog header ({result.stop_reason}), "
                f"but relay.meta records it as relayed up to {meta_pos}",
                hint="move the file (and later ones) out of the subdir and set relay.meta to the "
                     "file's start; the relay will fetch it again",
            )
        # Only the magic (or nothing) was written: the file holds no transaction.
        os.unlink(path)
        new = RelayMeta(last, 4, gtids)
        write_meta(subdir, new)
        log.warning("%s: removed %s, which had no complete event; it will be fetched again",
                    subdir, last)
        return Recovery(new, removed_file=last, meta_rewound=bool(meta_pos and meta_pos > 4))

    # A file that merely ends early (cut mid-event) lost its tail: fetch it again.  Bytes that
    # are there but wrong, before what meta says is durable, are corruption.  So is an event
    # before meta's position that seems to run past the end of a file that holds all of those
    # bytes: its size field is damaged.
    if meta_pos is not None and result.stop_reason and result.stop_pos < meta_pos \
            and (not result.torn_tail or result.size >= meta_pos):
        raise RelayDirError(
            f"relay file {path} is corrupt at offset {result.stop_pos} ({result.stop_reason}), "
            f"before the position {meta_pos} that relay.meta records as relayed",
            hint="move the file (and later ones) out of the subdir and set relay.meta to the "
                 "file's start; the relay will fetch it again",
        )

    truncated = 0
    if result.size > result.safe_pos:
        truncated = result.size - result.safe_pos
        with open(path, "r+b") as f:
            f.truncate(result.safe_pos)
            f.flush()
            os.fsync(f.fileno())
        log.info("%s: truncated %d bytes after the last complete transaction at %d",
                 path, truncated, result.safe_pos)

    safe_gtids = result.safe_gtids or gtids
    rewound = meta_pos is not None and meta_pos > result.safe_pos
    if rewound:
        log.warning("%s: relay.meta said %s:%d but the data ends at %d; rewinding",
                    subdir, last, meta_pos, result.safe_pos)
        # Meta's GTID set counts transactions the disk lost; only the file itself (its
        # GTID_LIST or Previous_gtids, then its commits) says what it holds.
        safe_gtids = scan_file(path, flavor=flavor).safe_gtids
    if result.rotated_to:
        new = RelayMeta(result.rotated_to, 4, safe_gtids)
    else:
        new = RelayMeta(last, result.safe_pos, safe_gtids)
    if new != meta:
        write_meta(subdir, new)
    return Recovery(new, truncated_bytes=truncated, meta_rewound=rewound)
