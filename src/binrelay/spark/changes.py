"""The change schema of the ``relaylog`` source: one row per row change or DDL statement.

| column | type | meaning |
|---|---|---|
| subdir, file | string | relay subdir and binlog file of the event |
| pos, end_pos | bigint | the event's start and end offsets (upstream positions) |
| row | int | index of the row within its event: (subdir, file, pos, row) orders all changes |
| gtid | string | the transaction's GTID (``0-1-5`` or ``uuid:n``), null without GTIDs |
| commit_ts | bigint | the event's timestamp, seconds since the epoch (UTC) |
| schema, table | string | the table (for DDL: the default schema, table null) |
| op | string | ``insert``, ``update``, ``delete`` or ``ddl`` |
| columns | array<string> | column names (``@1``, ``@2``... when the upstream logs no names) |
| key | array<int> | indexes of the primary key columns (empty: none logged) |
| before, after | array<binary> | the images, one value per column; null = SQL NULL or absent |
| before_kinds, after_kinds | string | a letter per column: ``i`` integer, ``s`` text, |
| | | ``b`` bytes, ``n`` NULL, ``a`` absent from the image |
| query | string | the statement, for ``ddl`` rows |
| rolled_back | boolean | the upstream rolled back the change's transaction (it ended in |
| | | ``ROLLBACK``), or a ``ROLLBACK TO`` undid it: it stayed only in a |
| | | non-transactional table (MyISAM, Aria...), and a CREATE or DROP |
| | | TEMPORARY TABLE stayed |

Values are lossless: integers as their decimal text, text columns as UTF-8, binary columns
and geometry as their bytes, and every other type (DECIMAL, FLOAT, DOUBLE, dates and times,
JSON, ENUM, SET) as the server's own text (TIMESTAMP in UTC), which the server reads back
exactly; a MySQL partial JSON update logged without its document as its diffs
(``{"json_diff": [...]}``, as ``binrelay dump --json`` prints them).  ``kinds`` says how
to hand each value back to a server: ``i`` as an integer (BIT columns need one), ``s`` as
text, ``b`` as bytes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from binrelay.errors import UnfaithfulApplyError
from binrelay.rows import coltypes as t
from binrelay.rows.compiler import ABSENT
from binrelay.rows.events import RowChange
from binrelay.rows.mysqljson import JsonPartialUpdate
from binrelay.rows.tablemap import TableMap
from binrelay.rows.text import json_value, value_text

SCHEMA_DDL = (
    "subdir string, file string, pos bigint, end_pos bigint, row int, gtid string, "
    "commit_ts bigint, schema string, table string, op string, columns array<string>, "
    "key array<int>, before array<binary>, before_kinds string, after array<binary>, "
    "after_kinds string, query string, rolled_back boolean"
)

FIELDS = ("subdir", "file", "pos", "end_pos", "row", "gtid", "commit_ts", "schema",
          "table", "op", "columns", "key", "before", "before_kinds", "after", "after_kinds",
          "query", "rolled_back")

Encoder = Callable[[tuple[Any, ...] | None], tuple[list[bytes | None] | None, str | None]]


def arrow_schema():
    import pyarrow as pa

    return pa.schema([
        ("subdir", pa.string()), ("file", pa.string()), ("pos", pa.int64()),
        ("end_pos", pa.int64()), ("row", pa.int32()), ("gtid", pa.string()),
        ("commit_ts", pa.int64()), ("schema", pa.string()), ("table", pa.string()),
        ("op", pa.string()), ("columns", pa.list_(pa.string())), ("key", pa.list_(pa.int32())),
        ("before", pa.list_(pa.binary())), ("before_kinds", pa.string()),
        ("after", pa.list_(pa.binary())), ("after_kinds", pa.string()),
        ("query", pa.string()), ("rolled_back", pa.bool_()),
    ])


def to_param(value: Any, col: Any, table: str | None = None) -> Any:
    """A decoded value as a SQL parameter: None, ABSENT, int, str, bytes or Decimal (the
    server's text for floats, dates and times); what the applier hands to the server.

    DECIMAL stays a number, written bare (``sql.sql_literal``, PyMySQL's own escaping): as
    quoted text, a list of them (``DELETE ... WHERE k IN ('1.000000000000000001', ...)``)
    is compared as doubles when the server scans, and meets every row a double cannot tell
    apart.  A VECTOR is its bytes (text is no value of the type).  A MySQL partial JSON
    update whose before image has no document (``MINIMAL`` or ``NOBLOB`` images) has
    nothing to apply its diffs to here: the sync stops."""
    if value is None or value is ABSENT or isinstance(value, bytes | int | str | Decimal):
        return value
    if isinstance(value, tuple):  # VECTOR: its float32s, as the server stores them
        return struct.pack(f"<{len(value)}f", *value)
    if isinstance(value, JsonPartialUpdate):
        raise UnfaithfulApplyError(
            "a MySQL partial JSON update (binlog_row_value_options = PARTIAL_JSON) logged"
            " without the document it changes" + (f", column {col.name}" if col.name else ""),
            table=table,
            hint="log full row images upstream (binlog_row_image = FULL) or no partial JSON"
                 " (binlog_row_value_options = ''), and resynchronise this table from the"
                 " upstream")
    return value_text(value, col)


#: Column types whose decoded values are SQL parameters as they are (int, str, bytes; None
#: or ABSENT): integers, bits, years, ENUM and SET (names, or numbers without metadata),
#: text and bytes.  Not JSON (a tree in partial-update images), floats, DECIMAL, temporals.
_PLAIN_TYPES = frozenset({
    t.MYSQL_TYPE_TINY, t.MYSQL_TYPE_SHORT, t.MYSQL_TYPE_LONG, t.MYSQL_TYPE_LONGLONG,
    t.MYSQL_TYPE_INT24, t.MYSQL_TYPE_YEAR, t.MYSQL_TYPE_BIT, t.MYSQL_TYPE_ENUM,
    t.MYSQL_TYPE_SET, t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VAR_STRING, t.MYSQL_TYPE_STRING,
    t.MYSQL_TYPE_BLOB, t.MYSQL_TYPE_TINY_BLOB, t.MYSQL_TYPE_MEDIUM_BLOB,
    t.MYSQL_TYPE_LONG_BLOB, t.MYSQL_TYPE_GEOMETRY, t.MYSQL_TYPE_VARCHAR_COMPRESSED,
    t.MYSQL_TYPE_BLOB_COMPRESSED,
})


def _as_is(image: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    return image


def image_params(table: TableMap) -> Callable[[tuple[Any, ...] | None], tuple[Any, ...] | None]:
    """``to_param`` over a whole image of ``table``; built once per table map."""
    columns = table.columns
    if all(col.type in _PLAIN_TYPES for col in columns):
        return _as_is  # (a read task converts every survivor: not even a look at types)
    plain = (type(None), bytes, int, str, Decimal)
    exact = frozenset(plain)
    name = f"{table.schema}.{table.table}"

    def convert(image: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        if image is None:
            return None
        if exact.issuperset(map(type, image)):
            return image  # the common case, checked without a Python loop
        return tuple(v if isinstance(v, plain) or v is ABSENT else to_param(v, col, name)
                     for v, col in zip(image, columns, strict=True))

    return convert


def _encode_value(value: Any, col: Any) -> tuple[bytes | None, str]:
    if value is None:
        return None, "n"
    if value is ABSENT:
        return None, "a"
    if isinstance(value, bytes):
        return value, "b"
    if isinstance(value, int):
        return str(value).encode(), "i"
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass"), "s"
    if isinstance(value, JsonPartialUpdate):
        # The diffs, as ``dump --json`` prints them: no document to show.
        return json.dumps(json_value(value, col), ensure_ascii=False).encode(), "s"
    return value_text(value, col).encode(), "s"


def image_encoder(table: TableMap) -> Encoder:
    """Encode one row image of ``table``; built once per table map."""
    columns = table.columns
    pairs = tuple(zip(range(len(columns)), columns, strict=True))

    def encode(image: tuple[Any, ...] | None) -> tuple[list[bytes | None] | None, str | None]:
        if image is None:
            return None, None
        values: list[bytes | None] = []
        kinds = []
        for i, col in pairs:
            value, kind = _encode_value(image[i], col)
            values.append(value)
            kinds.append(kind)
        return values, "".join(kinds)

    return encode


def decode_image(values: list[bytes | None] | None, kinds: str | None) -> tuple[Any, ...] | None:
    """Back to SQL parameters: int, str, bytes, None; ``ABSENT`` where the image had none."""
    if values is None or kinds is None:
        return None
    out: list[Any] = []
    for value, kind in zip(values, kinds, strict=True):
        if kind == "n":
            out.append(None)
        elif kind == "a":
            out.append(ABSENT)
        elif kind == "i":
            out.append(int(value))  # type: ignore[arg-type]
        elif kind == "s":
            out.append(bytes(value).decode("utf-8", "surrogatepass"))  # type: ignore[arg-type]
        else:
            out.append(bytes(value))  # type: ignore[arg-type]
    return tuple(out)


class RowBuilder:
    """Accumulates change rows column by column (what Arrow wants) for one partition."""

    def __init__(self, subdir: str, file: str) -> None:
        self.subdir = subdir
        self.file = file
        self.cols: dict[str, list[Any]] = {name: [] for name in FIELDS}
        self._encoders: dict[int, tuple[TableMap, Encoder, list[str], list[int]]] = {}

    def __len__(self) -> int:
        return len(self.cols["pos"])

    def _encoder(self, table: TableMap) -> tuple[Encoder, list[str], list[int]]:
        cached = self._encoders.get(id(table))
        if cached is None or cached[0] is not table:
            cached = (table, image_encoder(table), list(table.column_names),
                      list(table.primary_key))
            self._encoders[id(table)] = cached
        return cached[1], cached[2], cached[3]

    def add_change(self, change: RowChange, commit_ts: int, row: int,
                   rolled_back: bool = False) -> None:
        encode, names, key = self._encoder(change.table)
        before, before_kinds = encode(change.before)
        after, after_kinds = encode(change.after)
        where = change.where
        c = self.cols
        c["subdir"].append(self.subdir)
        c["file"].append(self.file)
        c["pos"].append(where.pos if where else 0)
        c["end_pos"].append(where.end_pos if where else 0)
        c["row"].append(row)
        c["gtid"].append(where.gtid if where else None)
        c["commit_ts"].append(commit_ts)
        c["schema"].append(change.table.schema)
        c["table"].append(change.table.table)
        c["op"].append(change.op)
        c["columns"].append(names)
        c["key"].append(key)
        c["before"].append(before)
        c["before_kinds"].append(before_kinds)
        c["after"].append(after)
        c["after_kinds"].append(after_kinds)
        c["query"].append(None)
        c["rolled_back"].append(rolled_back)

    def add_ddl(self, *, pos: int, end_pos: int, gtid: str | None, commit_ts: int, schema: str,
                query: str, rolled_back: bool = False) -> None:
        c = self.cols
        for name, value in (("subdir", self.subdir), ("file", self.file), ("pos", pos),
                            ("end_pos", end_pos), ("row", 0), ("gtid", gtid),
                            ("commit_ts", commit_ts), ("schema", schema), ("table", None),
                            ("op", "ddl"), ("columns", []), ("key", []), ("before", None),
                            ("before_kinds", None), ("after", None), ("after_kinds", None),
                            ("query", query), ("rolled_back", rolled_back)):
            c[name].append(value)

    def flush(self):
        import pyarrow as pa

        batch = pa.RecordBatch.from_pydict(self.cols, schema=arrow_schema())
        self.cols = {name: [] for name in FIELDS}
        return batch
