"""Row decoding: raw binlog events in, typed events and row changes out (pure, no I/O).

Two ways in, sharing table maps and compiled row decoders:

* :class:`EventDecoder` — feed it whole events (as relay files hold them), get one typed
  event each (:mod:`binrelay.binlog.events`, and TABLE_MAP and rows events from
  :mod:`binrelay.rows.events`); ``RowsEvent.rows()`` yields the row changes.
* :class:`ChangeScanner` — the fast path for bulk row extraction: give it buffers of whole
  events, get located :class:`RowChange` objects (file, offsets, GTID) without a typed object
  per event.  :func:`iter_changes` runs it over files.

The I/O edge is :mod:`binrelay.rows.reader` (binlog and relay files).  Value types and their
Arrow counterparts are documented in ``docs/types.md``.

May import: binlog, errors, gtid, _speedups.
"""

from binrelay.rows.compiler import ABSENT
from binrelay.rows.decoder import EventDecoder
from binrelay.rows.events import (
    DELETE,
    INSERT,
    UPDATE,
    Event,
    Location,
    RowChange,
    RowsEvent,
    TableMapEvent,
)
from binrelay.rows.mysqljson import JsonDiff, JsonOpaque, JsonPartialUpdate
from binrelay.rows.reader import (
    Located,
    decode_files,
    iter_changes,
    iter_file_changes,
    iter_file_events,
)
from binrelay.rows.scanner import ChangeScanner
from binrelay.rows.tablemap import Column, TableMap, parse_table_map
from binrelay.rows.temporal import MysqlDate, MysqlDateTime

__all__ = [
    "ABSENT",
    "DELETE",
    "INSERT",
    "UPDATE",
    "ChangeScanner",
    "Column",
    "Event",
    "EventDecoder",
    "JsonDiff",
    "JsonOpaque",
    "JsonPartialUpdate",
    "Located",
    "Location",
    "MysqlDate",
    "MysqlDateTime",
    "RowChange",
    "RowsEvent",
    "TableMap",
    "TableMapEvent",
    "decode_files",
    "iter_changes",
    "iter_file_changes",
    "iter_file_events",
    "parse_table_map",
]
