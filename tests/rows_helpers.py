"""Helpers for the row decoding tests: decode a server's binlog from a position, both ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from binrelay.rows import EventDecoder, RowChange, RowsEvent, iter_file_events
from binrelay.rows.scanner import ChangeScanner
from binrelay.testing.sandbox import MariaDBServer


def changes_from(path: Path, pos: int) -> list[RowChange]:
    """Row changes of the events at ``pos`` and after, decoded by the fast scanner and by the
    typed decoder; the two must agree, and the scanner's (located) changes are returned."""
    data = path.read_bytes()
    fde_size = int.from_bytes(data[4 + 9:4 + 13], "little")
    fde = data[4:4 + fde_size]

    scanner = ChangeScanner(path=str(path))
    list(scanner.scan(fde, 0, len(fde), file_offset=4))
    fast = list(scanner.scan(data, pos, len(data)))
    assert scanner.stopped_at == len(data)

    decoder = EventDecoder(path=str(path))
    decoder.decode(fde, 4)
    typed: list[RowChange] = []
    for offset, raw in iter_file_events(path, start=pos):
        for ev in decoder.feed(raw, offset):
            if isinstance(ev, RowsEvent):
                typed.extend(ev.rows())
    assert [(c.op, c.table.table, c.before, c.after) for c in fast] == [
        (c.op, c.table.table, c.before, c.after) for c in typed]
    return fast


def server_changes_since(server: MariaDBServer, file: str, pos: int,
                         table: str | None = None) -> list[RowChange]:
    changes = changes_from(server.binlog_path(file), pos)
    if table is not None:
        changes = [c for c in changes if c.table.table == table]
    return changes


def count_ops(changes: list[RowChange]) -> dict[tuple[str, str, str], int]:
    out: dict[tuple[str, str, str], int] = {}
    for c in changes:
        key = (c.table.schema, c.table.table, c.op)
        out[key] = out.get(key, 0) + 1
    return out


def as_dicts(changes: list[RowChange]) -> list[tuple[str, Any, Any]]:
    return [(c.op, c.before_dict(), c.after_dict()) for c in changes]
