"""``binrelay dump [--json] FILE|RELAY-DIR``: what a binlog or relay log holds, decoded."""

from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from binrelay import rows
from binrelay.binlog import constants as c
from binrelay.binlog import events as ev
from binrelay.cli.failing import reports_errors
from binrelay.relay.chain import relay_dir_files
from binrelay.rows.jsondump import write_json_lines
from binrelay.rows.reader import Located, decode_files
from binrelay.rows.tablemap import TableMap
from binrelay.rows.text import sql_literal


def input_files(target: Path | str) -> list[Path]:
    """A binlog file, or every file of a relay directory."""
    target = Path(target)
    if target.is_dir():
        return relay_dir_files(target)
    return [target]


@click.command()
@click.argument("target", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per row change instead of the event listing")
@click.option("--no-verify-checksums", is_flag=True, help="do not check event CRC32s")
@reports_errors
def dump(target: Path, as_json: bool, no_verify_checksums: bool) -> None:
    """Print the events and row changes of a binlog FILE or of a RELAY-DIR (every subdir in
    server-uuid.index order), decoded, like ``mariadb-binlog -v``."""
    files = input_files(target)
    verify = not no_verify_checksums
    out = sys.stdout
    try:
        if as_json:
            # UTF-8 bytes in large writes, straight to the binary stream under sys.stdout.
            out.flush()
            write_json_lines(files, out.buffer, verify_checksums=verify)
        else:
            for line in text_lines(decode_files(files, verify_checksums=verify)):
                out.write(line + "\n")
        out.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, with SIGPIPE's status as cat
        # would; stdout goes to /dev/null so that the interpreter's last flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(128 + signal.SIGPIPE) from None


# --- text ---------------------------------------------------------------------------------

_OPS = {rows.INSERT: ("INSERT INTO", "SET", None), rows.DELETE: ("DELETE FROM", "WHERE", None),
        rows.UPDATE: ("UPDATE", "WHERE", "SET")}


def _ts(timestamp: int) -> str:
    return _dt.datetime.fromtimestamp(timestamp, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _qname(table: TableMap) -> str:
    return f"`{table.schema}`.`{table.table}`"


def _summary(event: Any) -> str:
    if isinstance(event, ev.FormatDescriptionEvent):
        f = event.fde
        alg = "CRC32" if f.checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32 else "NONE"
        return f"Start: binlog v{f.binlog_version}, server v{f.server_version}, checksum {alg}"
    if isinstance(event, ev.RotateEvent):
        return f"Rotate to {event.next_file} pos {event.position}" + (
            " (fake)" if event.fake else "")
    if isinstance(event, ev.QueryEvent):
        schema = f" `{event.schema}`" if event.schema else ""
        return f"Query{schema} thread_id={event.thread_id}: {event.query}"
    if isinstance(event, ev.XidEvent):
        return f"Xid = {event.xid}"
    if isinstance(event, ev.MariadbGtidEvent):
        kind = "" if event.standalone else " trans"
        return f"GTID {event.gtid}{kind}"
    if isinstance(event, ev.MariadbGtidListEvent):
        return f"Gtid list [{event.gtid_list}]"
    if isinstance(event, ev.BinlogCheckpointEvent):
        return f"Binlog checkpoint {event.file}"
    if isinstance(event, ev.AnnotateRowsEvent | ev.RowsQueryEvent):
        return "Annotate_rows: " + event.query
    if isinstance(event, ev.MysqlGtidEvent):
        return f"GTID {event.gtid}"
    if isinstance(event, ev.PreviousGtidsEvent):
        return f"Previous-GTIDs [{event.gtid_set}]"
    if isinstance(event, rows.TableMapEvent):
        t = event.table
        cols = ", ".join(f"{col.label} {col.type_name}" for col in t.columns)
        return f"Table_map: {_qname(t)} mapped to number {t.table_id} ({cols})"
    if isinstance(event, rows.RowsEvent):
        flags = " flags: STMT_END_F" if event.stmt_end else ""
        name = c.event_type_name(event.header.event_type)
        return f"{name}: {_qname(event.table)} table id {event.table.table_id}{flags}"
    if isinstance(event, ev.TransactionPayloadEvent):
        return (f"Transaction_payload: compression {event.compression_type}, "
                f"{event.payload_size} -> {event.uncompressed_size} bytes")
    if isinstance(event, ev.StopEvent):
        return "Stop"
    return c.event_type_name(event.header.event_type)


def text_lines(located: Iterator[Located]) -> Iterator[str]:
    current_file = None
    for loc in located:
        if loc.file != current_file:
            current_file = loc.file
            yield f"# file {loc.file}"
        event = loc.event
        h = event.header
        yield f"# at {loc.pos}"
        yield (f"#{_ts(h.timestamp)} server id {h.server_id}  end_log_pos {h.log_pos}  "
               f"{_summary(event)}")
        if isinstance(event, rows.RowsEvent):
            yield from _row_lines(event)


def _row_lines(event: rows.RowsEvent) -> Iterator[str]:
    table = event.table
    verb, first, second = _OPS[event.op]
    for change in event.rows():
        yield f"### {verb} {_qname(table)}"
        images = [(first, change.before if event.op != rows.INSERT else change.after)]
        if second is not None:
            images.append((second, change.after))
        for clause, image in images:
            yield f"### {clause}"
            assert image is not None
            for col, value in zip(table.columns, image, strict=True):
                if value is rows.ABSENT:
                    continue
                yield f"###   {col.label}={sql_literal(value, col)}"
