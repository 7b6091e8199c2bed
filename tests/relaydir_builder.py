"""Build relay dirs on disk from generated binlog files, for reader and purge tests."""

from __future__ import annotations

from pathlib import Path

from binlog_builder import BinlogBuilder
from binrelay.position import SubdirName
from binrelay.relay.layout import RelayMeta, write_index, write_meta


def binlog_file(n_trx: int, *, next_file: str | None, seq_start: int = 1) -> BinlogBuilder:
    b = BinlogBuilder()
    b.gtid_list([(0, 1, seq_start - 1)] if seq_start > 1 else [])
    for i in range(n_trx):
        b.trx([i], seq_no=seq_start + i)
    if next_file:
        b.rotate(next_file)
    return b


def make_relay_dir(root: Path, layout: list[tuple[str, list[int]]],
                   *, active_partial: int = 0) -> dict[tuple[str, str], bytes]:
    """``layout``: (subdir name, [transactions per file]).  Files are mysql-bin.000001.. in
    each subdir; within a subdir all but the last end with a Rotate.  The last subdir's meta
    points at the end of its last file, minus ``active_partial`` trailing transactions that
    are written but not yet durable.  Returns the bytes of every file."""
    root.mkdir(parents=True, exist_ok=True)
    names = [SubdirName.parse(s) for s, _ in layout]
    out: dict[tuple[str, str], bytes] = {}
    seq = 1
    for (subdir, counts), name in zip(layout, names, strict=True):
        path = root / subdir
        path.mkdir(mode=0o700)
        meta = RelayMeta("mysql-bin.000001", 4, "")
        for i, count in enumerate(counts):
            fname = f"mysql-bin.{i + 1:06d}"
            nxt = f"mysql-bin.{i + 2:06d}" if i + 1 < len(counts) else None
            b = binlog_file(count, next_file=nxt, seq_start=seq)
            seq += count
            (path / fname).write_bytes(b.bytes())
            out[(subdir, fname)] = b.bytes()
            end = b.boundaries[-1 - active_partial] if nxt is None and name == names[-1] \
                else b.boundaries[-1]
            meta = RelayMeta(fname, end, b.gtid_at[end])
        write_meta(path, meta)
    write_index(root, names)
    return out
