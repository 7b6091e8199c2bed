"""``binlog.parse.parse``: the one entry point from bytes to an event, against every real
MySQL capture and real MariaDB events, and against the rows decoder reading the same files."""

from __future__ import annotations

from pathlib import Path

import pytest

import binlog_builder as bb
from binlog_builder import REAL_MARIADB_10_11 as REAL
from binrelay.binlog import constants as c
from binrelay.binlog import events as ev
from binrelay.binlog.parse import Context, parse
from binrelay.errors import BinlogFormatError, ChecksumMismatchError, IncompleteEventError
from binrelay.rows import EventDecoder, RowsEvent, TableMapEvent
from captures import capture_binlogs

#: The dataclass each event type is read into by this layer.
EXPECTED = {
    c.FORMAT_DESCRIPTION_EVENT: ev.FormatDescriptionEvent, c.ROTATE_EVENT: ev.RotateEvent,
    c.QUERY_EVENT: ev.QueryEvent, c.XID_EVENT: ev.XidEvent, c.GTID_EVENT: ev.MariadbGtidEvent,
    c.GTID_LIST_EVENT: ev.MariadbGtidListEvent,
    c.BINLOG_CHECKPOINT_EVENT: ev.BinlogCheckpointEvent,
    c.ANNOTATE_ROWS_EVENT: ev.AnnotateRowsEvent, c.ROWS_QUERY_LOG_EVENT: ev.RowsQueryEvent,
    c.GTID_LOG_EVENT: ev.MysqlGtidEvent, c.ANONYMOUS_GTID_LOG_EVENT: ev.MysqlGtidEvent,
    c.GTID_TAGGED_LOG_EVENT: ev.MysqlGtidEvent,
    c.PREVIOUS_GTIDS_LOG_EVENT: ev.PreviousGtidsEvent,
    c.TRANSACTION_PAYLOAD_EVENT: ev.TransactionPayloadEvent, c.STOP_EVENT: ev.StopEvent,
    c.INTVAR_EVENT: ev.IntvarEvent, c.RAND_EVENT: ev.RandEvent,
    c.USER_VAR_EVENT: ev.UserVarEvent, c.EXECUTE_LOAD_QUERY_EVENT: ev.ExecuteLoadQueryEvent,
    c.BEGIN_LOAD_QUERY_EVENT: ev.LoadBlockEvent, c.APPEND_BLOCK_EVENT: ev.LoadBlockEvent,
    c.DELETE_FILE_EVENT: ev.DeleteFileEvent,
}

FILES = capture_binlogs()


def _comparable(event: object) -> object:
    # A payload's inner events are produced differently by the two readers (raw bytes here,
    # decoded events there); the rest must be equal field by field.
    if isinstance(event, ev.TransactionPayloadEvent):
        return (event.header, event.compression_type, event.payload_size,
                event.uncompressed_size)
    return event


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_captured_event_parses_as_the_decoder_reads_it(path: Path) -> None:
    data = path.read_bytes()
    context, decoder, seen = Context(), EventDecoder(path=str(path)), 0
    for offset, raw in bb.walk(data):
        event = parse(raw, context, path=str(path), offset=offset)
        decoded = decoder.decode(raw, offset)
        assert type(event) is EXPECTED.get(raw[4], ev.OtherEvent), (path, offset)
        assert event.header.event_size == len(raw)
        if isinstance(decoded, TableMapEvent | RowsEvent):
            assert event.body == raw[19:len(raw) - context.checksum_len]  # type: ignore[union-attr]
        else:
            assert _comparable(event) == _comparable(decoded), (path, offset)
        seen += 1
    assert seen and context.fde is not None


def test_mariadb_events_and_the_fde_moving_the_context_on() -> None:
    context = Context()
    assert context.checksum_len == 0 and context.fde is None
    fde = parse(REAL["fde"], context)
    assert isinstance(fde, ev.FormatDescriptionEvent) and fde.fde.is_mariadb
    assert context.fde == fde.fde and context.checksum_len == 4 and context.mariadb
    gtid = parse(REAL["gtid_ddl"], context)
    assert isinstance(gtid, ev.MariadbGtidEvent) and gtid.gtid == "0-1-1"
    commit = parse(REAL["query_commit"], context)
    assert isinstance(commit, ev.QueryEvent) and commit.query == "COMMIT" and commit.mariadb
    assert parse(REAL["gtid_list_3"], context).gtids == ((5, 1, 1), (0, 2, 2), (0, 1, 3))


def test_before_any_fde_a_matching_crc_means_a_checksum() -> None:
    fake = bb.event(c.ROTATE_EVENT, bb.rotate_body("mysql-bin.000007", 4), log_pos=0,
                    checksum=True, timestamp=0)
    rotate = parse(fake)
    assert isinstance(rotate, ev.RotateEvent)
    assert (rotate.next_file, rotate.position, rotate.fake) == ("mysql-bin.000007", 4, True)
    plain = bb.event(c.ROTATE_EVENT, bb.rotate_body("mysql-bin.000007", 4), log_pos=0,
                     checksum=False, timestamp=0)
    assert parse(plain).next_file == "mysql-bin.000007"


def test_bad_bytes_are_errors_naming_the_event_file_and_offset() -> None:
    context = Context()
    parse(REAL["fde"], context)
    flipped = bytearray(REAL["query_commit"])
    flipped[-6] ^= 0xFF
    with pytest.raises(ChecksumMismatchError, match="QUERY_EVENT") as info:
        parse(bytes(flipped), context, path="f", offset=77)
    assert (info.value.path, info.value.offset) == ("f", 77)
    with pytest.raises(IncompleteEventError):
        parse(REAL["query_commit"][:-1], context, offset=5)
    short = bb.event(c.XID_EVENT, b"\x01\x02", log_pos=0, checksum=True)
    with pytest.raises(BinlogFormatError, match="XID_EVENT: truncated"):
        parse(short, context, verify_checksums=False)
    with pytest.raises(BinlogFormatError, match="truncated"):
        parse(b"\0" * 10, context)


def test_a_captured_load_data_reads_as_its_file_and_statement() -> None:
    """MySQL's statement-format LOAD DATA: the file's bytes in BEGIN_LOAD_QUERY (and
    APPEND_BLOCK) events, then the statement, whose file-name part a replayer replaces."""
    path = next(p for p in FILES if p.parent.name == "17_18_load")
    context = Context()
    events = [parse(raw, context) for _offset, raw in bb.walk(path.read_bytes())]
    blocks = [e for e in events if isinstance(e, ev.LoadBlockEvent)]
    (load,) = [e for e in events if isinstance(e, ev.ExecuteLoadQueryEvent)]
    assert blocks and blocks[0].begins and {b.file_id for b in blocks} == {load.file_id}
    part = load.raw_query[load.fn_start:load.fn_end]
    assert part.lstrip().upper().startswith((b"INFILE", b"LOCAL")), part
    assert part.rstrip().upper().endswith(b"INTO"), part
    assert load.raw_query[:load.fn_start].strip().upper() == b"LOAD DATA"
