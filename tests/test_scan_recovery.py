"""scan_file and recover_subdir: whole files, torn tails at every byte, corruption, captures."""

from __future__ import annotations

import bisect
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import binlog_builder as bb
from binrelay.binlog import constants as c
from binrelay.errors import RelayDirError
from binrelay.relay.layout import RelayMeta, read_meta, write_meta
from binrelay.relay.recovery import Recovery, recover_subdir
from binrelay.relay.scan import read_fde, scan_file
from captures import MYSQL_CAPTURES, capture_binlogs

NAME = "mysql-bin.000001"
U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
TORN = "partial event at the end"
COMBOS = [("mariadb", True), ("mariadb", False), ("mysql", True), ("mysql", False)]
IDS = [f"{f}-{'crc32' if k else 'none'}" for f, k in COMBOS]


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    # Durability is not under test here, and the exhaustive loops below recover a directory
    # thousands of times: without this, fsync dominates their run time.
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def standard(flavor: str, checksum: bool, *, rotate: bool = False) -> bb.BinlogBuilder:
    """A file with every kind of group, a non-trivial starting GTID set, and a last
    transaction of several statements."""
    b = bb.BinlogBuilder(flavor=flavor, checksum=checksum)
    if flavor == "mariadb":
        # The binlog state as MariaDB writes it: domain 0 under two server ids, latest last.
        b.gtid_list([(1, 2, 40), (0, 2, 7), (0, 1, 9)])
        b.checkpoint()
        b.ddl()
        b.trx([1, 2])
        b.nontrx([3])
        b.ddl("CREATE TABLE app.u (id INT)", domain=1)
        b.trx(statements=3)
    else:
        b.previous_gtids({U1: [(1, 5)], U2: [(1, 3), (7, 7)]})
        b.ddl()
        b.trx([1, 2])
        b.trx([3], uuid=None)
        b.ddl("CREATE TABLE app.u (id INT)", uuid=U2, gno=8)
        b.trx(statements=3)
    if rotate:
        b.rotate("mysql-bin.000002")
    return b


def test_standard_gtid_sets() -> None:
    # Pin the builder's bookkeeping that the tests below trust.
    assert standard("mariadb", True).gtid_text() == "0-1-13,1-1-41"
    assert standard("mysql", True).gtid_text() == f"{U1}:1-8,{U2}:1-3:7-8"
    maria = standard("mariadb", True)
    assert maria.gtid_at[maria.boundaries[1]] == "0-1-9,1-2-40"


def event_starts(b: bb.BinlogBuilder) -> list[int]:
    return [e.pos for e in b.events]


def expected_safe(b: bb.BinlogBuilder, upto: int) -> int:
    """End of the last transaction that lies wholly within the first ``upto`` bytes."""
    bounds = b.boundaries
    return bounds[bisect.bisect_right(bounds, upto) - 1]


def fde_end(b: bb.BinlogBuilder) -> int:
    return b.events[0].end


def write(subdir: Path, data: bytes, name: str = NAME) -> Path:
    subdir.mkdir(exist_ok=True)
    path = subdir / name
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------------- scan


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
@pytest.mark.parametrize("rotate", [False, True])
def test_scan_whole_file(tmp_path: Path, flavor: str, checksum: bool, rotate: bool) -> None:
    b = standard(flavor, checksum, rotate=rotate)
    path = write(tmp_path, b.bytes())
    r = scan_file(path, flavor=None)
    assert r.fde is not None and r.fde.checksum_len == b.checksum_len
    assert r.fde.is_mariadb == (flavor == "mariadb")
    assert (r.size, r.safe_pos, r.stop_pos, r.stop_reason) == (b.pos, b.pos, b.pos, "")
    assert not r.torn_tail
    assert r.safe_gtids == b.gtid_text()
    assert r.rotated_to == ("mysql-bin.000002" if rotate else None)
    # Naming the flavour changes nothing when it is the file's own.
    assert scan_file(path, flavor=flavor) == r


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
def test_scan_every_cut_point(tmp_path: Path, flavor: str, checksum: bool) -> None:
    b = standard(flavor, checksum, rotate=True)
    data = b.bytes()
    ends = {e.end for e in b.events}
    path = tmp_path / NAME
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        r = scan_file(path, flavor=None)
        assert r.size == cut
        if cut < fde_end(b):
            assert (r.fde, r.safe_pos, r.safe_gtids) == (None, 0, ""), cut
            assert r.stop_reason == ("empty file" if cut == 0 else "no binlog header")
            continue
        safe = expected_safe(b, cut)
        assert (r.safe_pos, r.safe_gtids) == (safe, b.gtid_at[safe]), cut
        whole = cut in ends
        assert r.stop_reason == ("" if whole else TORN), cut
        assert r.torn_tail is not whole
        assert r.stop_pos == max(e for e in ends if e <= cut)
        assert r.rotated_to == ("mysql-bin.000002" if cut == len(data) else None)


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
def test_scan_from_a_boundary_with_its_gtids(tmp_path: Path, flavor: str,
                                             checksum: bool) -> None:
    b = standard(flavor, checksum)
    path = write(tmp_path, b.bytes())
    full = scan_file(path, flavor=None)
    for start in b.boundaries:
        r = scan_file(path, flavor=flavor, start=start, start_gtids=b.gtid_at[start])
        assert (r.safe_pos, r.safe_gtids, r.stop_reason) == (full.safe_pos, full.safe_gtids, "")
    # A start inside the FDE is read as "after the FDE".
    assert scan_file(path, flavor=None, start=10).safe_pos == b.pos


def test_scan_without_magic(tmp_path: Path) -> None:
    data = bytearray(standard("mariadb", True).bytes())
    data[0] = 0
    r = scan_file(write(tmp_path, bytes(data)), flavor=None)
    assert (r.fde, r.safe_pos, r.stop_pos, r.stop_reason) == (None, 0, 0, "no binlog header")
    assert read_fde(tmp_path / NAME) is None


def test_scan_gtid_list_keeps_each_domains_latest(tmp_path: Path) -> None:
    # A server-id change in a domain puts two entries for it in the next file's GTID_LIST.
    b = bb.BinlogBuilder(flavor="mariadb")
    b.gtid_list([(5, 1, 1), (0, 2, 2), (0, 1, 3)])
    b.ddl(server_id=2)
    r = scan_file(write(tmp_path, b.bytes()), flavor=None)
    assert r.safe_gtids == "0-2-4,5-1-1" == b.gtid_text()


def test_scan_stops_at_a_corrupt_previous_gtids(tmp_path: Path) -> None:
    # Without checksums nothing catches a damaged body early: the decoder must report it as a
    # format error (scan's stop reason), not as a GTID parse error escaping the scan.
    b = bb.BinlogBuilder(flavor="mysql", checksum=False)
    b.add(c.PREVIOUS_GTIDS_LOG_EVENT, b"\x05" + b"\0" * 7, boundary=True)
    b.ddl()
    r = scan_file(write(tmp_path, b.bytes()), flavor=None)
    assert r.safe_pos == b.events[0].end
    assert "PREVIOUS_GTIDS" in r.stop_reason


# ----------------------------------------------------------------------------- recovery


def recover(subdir: Path, meta: RelayMeta | None, flavor: str | None = None) -> Recovery:
    if meta is not None:
        write_meta(subdir, meta)
    return recover_subdir(subdir, meta, flavor=flavor)


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
def test_recover_whole_file_changes_nothing(tmp_path: Path, flavor: str, checksum: bool) -> None:
    b = standard(flavor, checksum)
    path = write(tmp_path, b.bytes())
    meta = RelayMeta(NAME, b.pos, b.gtid_text())
    rec = recover(tmp_path, meta)
    assert (rec.meta, rec.truncated_bytes, rec.removed_file, rec.meta_rewound) == (
        meta, 0, None, False)
    assert path.read_bytes() == b.bytes()
    assert read_meta(tmp_path) == meta


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
def test_recover_torn_last_transaction_at_every_byte(tmp_path: Path, flavor: str,
                                                     checksum: bool) -> None:
    b = standard(flavor, checksum)
    data = b.bytes()
    prev_end = b.boundaries[-2]
    lagging = b.boundaries[-4]  # meta is written after the data, so it may lag behind
    path = tmp_path / NAME
    for cut in range(prev_end, len(data) + 1):
        path.write_bytes(data[:cut])
        (tmp_path / "relay.meta").unlink(missing_ok=True)
        meta = None if cut % 3 == 0 else RelayMeta(NAME, lagging, b.gtid_at[lagging])
        rec = recover(tmp_path, meta, flavor if cut % 2 else None)
        safe = len(data) if cut == len(data) else prev_end
        want = RelayMeta(NAME, safe, b.gtid_at[safe])
        assert path.read_bytes() == data[:safe], cut
        assert rec.meta == want == read_meta(tmp_path), cut
        assert rec.truncated_bytes == cut - safe
        assert not rec.meta_rewound and rec.removed_file is None


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
def test_recover_meta_gtids_come_from_the_file(tmp_path: Path, flavor: str,
                                               checksum: bool) -> None:
    b = standard(flavor, checksum)
    path = write(tmp_path, b.bytes()[: b.boundaries[-1] - 1])
    rec = recover(tmp_path, None)
    assert path.stat().st_size == b.boundaries[-2]
    if flavor == "mariadb":
        # The GTID_LIST's state (domain 1 from server 2) plus the GTIDs committed since.
        assert rec.meta.binlog_gtid == "0-1-12,1-1-41"
    else:
        assert rec.meta.binlog_gtid == f"{U1}:1-7,{U2}:1-3:7-8"
    assert rec.meta.binlog_gtid == b.gtid_at[b.boundaries[-2]]


@pytest.mark.parametrize("data", [b"", bb.MAGIC, bb.MAGIC + b"\x00" * 10,
                                  bb.MAGIC + bb.REAL_MARIADB_10_11["fde"][:-1]],
                         ids=["empty", "magic", "magic+header", "torn-fde"])
@pytest.mark.parametrize("meta_pos", [None, 4, 250, 4000])
def test_recover_file_without_a_whole_fde_is_removed(tmp_path: Path, data: bytes,
                                                     meta_pos: int | None) -> None:
    path = write(tmp_path, data)
    meta = None if meta_pos is None else RelayMeta(NAME, meta_pos, "0-1-5")
    if meta_pos is not None and 4 < meta_pos <= len(data):
        # Meta says bytes past the FDE were durable, yet the FDE is unreadable: damage.
        with pytest.raises(RelayDirError, match="no readable binlog header"):
            recover(tmp_path, meta)
        assert path.read_bytes() == data
        return
    rec = recover(tmp_path, meta)
    assert not path.exists()
    want = RelayMeta(NAME, 4, "" if meta is None else "0-1-5")
    assert rec.meta == want == read_meta(tmp_path)
    assert rec.removed_file == NAME
    assert rec.meta_rewound == (meta_pos is not None and meta_pos > 4)


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
def test_recover_file_ending_with_rotate_moves_on(tmp_path: Path, flavor: str,
                                                  checksum: bool) -> None:
    b = standard(flavor, checksum, rotate=True)
    path = write(tmp_path, b.bytes())
    meta = RelayMeta(NAME, b.boundaries[-2], b.gtid_at[b.boundaries[-2]])
    rec = recover(tmp_path, meta)
    want = RelayMeta("mysql-bin.000002", 4, b.gtid_text())
    assert rec.meta == want == read_meta(tmp_path)
    assert path.read_bytes() == b.bytes()
    # Recovering again (meta now names the next file, not created yet) leaves it all alone.
    again = recover_subdir(tmp_path, want, flavor=None)
    assert again.meta == want and again.truncated_bytes == 0
    assert path.read_bytes() == b.bytes()


def test_recover_only_scans_the_last_file(tmp_path: Path) -> None:
    first = standard("mariadb", True, rotate=True)
    second = bb.BinlogBuilder(flavor="mariadb")
    second.gtid_list([(0, 1, 12), (1, 1, 41)])
    second.checkpoint(NAME)
    second.trx(seq_no=13)
    second.trx(seq_no=14)
    write(tmp_path, first.bytes())
    torn = second.bytes()[:-3]
    write(tmp_path, torn, "mysql-bin.000002")
    rec = recover(tmp_path, RelayMeta("mysql-bin.000002", 4, first.gtid_text()))
    assert (tmp_path / NAME).read_bytes() == first.bytes()
    assert (tmp_path / "mysql-bin.000002").stat().st_size == second.boundaries[-2]
    assert rec.meta == RelayMeta("mysql-bin.000002", second.boundaries[-2], "0-1-13,1-1-41")


@pytest.mark.parametrize(("flavor", "checksum"), COMBOS, ids=IDS)
def test_recover_meta_ahead_of_the_data_is_rewound(tmp_path: Path, flavor: str,
                                                   checksum: bool) -> None:
    b = standard(flavor, checksum)
    data = b.bytes()
    path = write(tmp_path, data)
    rec = recover(tmp_path, RelayMeta(NAME, len(data) + 100, b.gtid_text()))
    assert rec.meta_rewound
    assert rec.meta == RelayMeta(NAME, len(data), b.gtid_text()) == read_meta(tmp_path)
    assert path.read_bytes() == data
    # The disk lost the tail that meta had already counted: back to the last whole transaction.
    path.write_bytes(data[:-5])
    rec = recover(tmp_path, RelayMeta(NAME, len(data), b.gtid_at[b.boundaries[-3]]))
    prev = b.boundaries[-2]
    assert rec.meta_rewound and rec.truncated_bytes == len(data) - 5 - prev
    assert rec.meta == RelayMeta(NAME, prev, b.gtid_at[prev]) == read_meta(tmp_path)
    assert path.read_bytes() == data[:prev]


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
def test_recover_meta_ahead_does_not_keep_lost_gtids(tmp_path: Path, flavor: str) -> None:
    b = standard(flavor, True)
    data = b.bytes()
    write(tmp_path, data[:-5])
    rec = recover(tmp_path, RelayMeta(NAME, len(data), b.gtid_text()))
    prev = b.boundaries[-2]
    assert rec.meta.binlog_pos == prev
    # The last transaction is gone from the file, so its GTID must not be claimed.
    assert rec.meta.binlog_gtid == b.gtid_at[prev]


def test_recover_without_files(tmp_path: Path) -> None:
    with pytest.raises(RelayDirError, match=r"neither relay files nor relay\.meta"):
        recover_subdir(tmp_path, None, flavor=None)
    meta = RelayMeta(NAME, 4, "0-1-5")
    assert recover_subdir(tmp_path, meta, flavor=None).meta == meta
    rec = recover(tmp_path, RelayMeta(NAME, 1234, "0-1-5"))
    assert rec.meta_rewound and rec.meta == meta == read_meta(tmp_path)


def _corrupt_one_byte_at_a_time(data: bytes, offsets: range) -> Iterator[tuple[int, bytes]]:
    for i in offsets:
        bad = bytearray(data)
        bad[i] ^= 0xFF  # a CRC32 catches any burst of up to 32 bits
        yield i, bytes(bad)


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
def test_recover_corruption_before_meta_is_an_error(tmp_path: Path, flavor: str) -> None:
    b = standard(flavor, True)
    data = b.bytes()
    meta = RelayMeta(NAME, b.boundaries[-2], b.gtid_at[b.boundaries[-2]])
    write_meta(tmp_path, meta)
    meta_bytes = (tmp_path / "relay.meta").read_bytes()
    path = tmp_path / NAME
    for i, bad in _corrupt_one_byte_at_a_time(data, range(meta.binlog_pos)):
        path.write_bytes(bad)
        with pytest.raises(RelayDirError, match=r"corrupt|no readable binlog header"):
            recover_subdir(tmp_path, meta, flavor=None)
        assert path.read_bytes() == bad, i
        assert (tmp_path / "relay.meta").read_bytes() == meta_bytes, i


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
def test_recover_header_corruption_before_meta_without_checksums(tmp_path: Path,
                                                                  flavor: str) -> None:
    # No CRC: only the size and end-position fields of an event header give damage away.
    b = standard(flavor, False)
    data = b.bytes()
    meta = RelayMeta(NAME, b.boundaries[-2], b.gtid_at[b.boundaries[-2]])
    write_meta(tmp_path, meta)
    path = tmp_path / NAME
    for start in event_starts(b)[1:]:
        if start >= meta.binlog_pos:
            break
        for i, bad in _corrupt_one_byte_at_a_time(data, range(start + 9, start + 17)):
            path.write_bytes(bad)
            with pytest.raises(RelayDirError, match="corrupt"):
                recover_subdir(tmp_path, meta, flavor=None)
            assert path.read_bytes() == bad, i


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
def test_recover_corruption_after_meta_is_a_torn_tail(tmp_path: Path, flavor: str) -> None:
    b = standard(flavor, True)
    data = b.bytes()
    meta_pos = b.boundaries[-4]
    meta = RelayMeta(NAME, meta_pos, b.gtid_at[meta_pos])
    starts = event_starts(b)
    path = tmp_path / NAME
    for i, bad in _corrupt_one_byte_at_a_time(data, range(meta_pos, len(data))):
        path.write_bytes(bad)
        rec = recover(tmp_path, meta)
        damaged_event = starts[bisect.bisect_right(starts, i) - 1]
        safe = expected_safe(b, damaged_event)
        assert safe >= meta_pos
        assert path.read_bytes() == data[:safe], i
        assert rec.meta == RelayMeta(NAME, safe, b.gtid_at[safe]) == read_meta(tmp_path), i
        assert not rec.meta_rewound


# --------------------------------------------------------------------- real MySQL files


# Captures that are not one whole binlog file, and what a scan makes of them.
INCOMPLETE = {
    # Cut inside PREVIOUS_GTIDS on purpose.
    "rust_mysql_common/binlog_truncated_prev_gtid_event.000001": (120, TORN),
    # Ends with BEGIN: the capture stops inside a transaction.
    "mysql-binlog-connector-java/mysql-bin.aurora-padding": (216, ""),
    # Two files' events back to back: positions restart at the second FDE.
    "rust_mysql_common/rpl_unfiltered_hidden_gcol.000001": (203, "does not match"),
    # Events copied out of a replication stream: log_pos are the server file's positions.
    "zongji/binlog-mysql84.events.bin": (127, "does not match"),
    "zongji/binlog-mysql84-fullmeta.events.bin": (127, "does not match"),
}
ROTATED = {
    "boxercrab/02_query/log.bin": "mysql_bin.000002",
    "go-mysql/tcb-eval002c-bin.003320": "tcb-eval002c-bin.003321",
    "mysql-binlog-connector-java/mysql-bin.compressed": "mysql-bin.000005",
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001": "binlog.000005",
    "rust_mysql_common/transaction_compression.000001": "binlog.000043",
}
CAPTURE_FILES = capture_binlogs()


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: str(p.relative_to(MYSQL_CAPTURES)))
def test_scan_captures(path: Path) -> None:
    rel = str(path.relative_to(MYSQL_CAPTURES))
    r = scan_file(path, flavor=None)
    assert r.fde is not None and not r.fde.is_mariadb
    if rel in INCOMPLETE:
        safe, reason = INCOMPLETE[rel]
        assert r.safe_pos == safe < r.size
        assert reason in r.stop_reason if reason else r.stop_reason == ""
        assert r.rotated_to is None
        return
    assert (r.safe_pos, r.stop_pos, r.stop_reason) == (r.size, r.size, "")
    if rel in ROTATED:
        assert r.rotated_to == ROTATED[rel]
    if (path.parent / "dump.txt").exists():
        # GTIDs in mysqlbinlog's dump: the scan's set is exactly those (Previous-GTIDs empty).
        text = (path.parent / "dump.txt").read_text()
        assert "# [empty]" in text
        gnos = sorted({int(n) for n in _GTID_NEXT.findall(text)})
        uuids = set(_GTID_UUID.findall(text))
        if gnos:
            (uuid,) = uuids
            assert gnos == list(range(1, len(gnos) + 1))
            span = "1" if len(gnos) == 1 else f"1-{len(gnos)}"
            assert r.safe_gtids == f"{uuid}:{span}"
        else:
            assert r.safe_gtids == ""


_GTID_NEXT = re.compile(r"GTID_NEXT= '[0-9a-f-]{36}:(\d+)'")
_GTID_UUID = re.compile(r"GTID_NEXT= '([0-9a-f-]{36}):\d+'")


def test_recover_a_real_capture_cut_anywhere(tmp_path: Path) -> None:
    src = MYSQL_CAPTURES / "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    data = src.read_bytes()
    events = list(bb.walk(data))
    # Anonymous GTID, BEGIN, rows, XID per transaction: the ends are easy to list by type.
    assert all(bb.query_text(ev, 4) == b"BEGIN" for _, ev in events if ev[4] == c.QUERY_EVENT)
    bounds = [pos + len(ev) for pos, ev in events
              if ev[4] in (c.FORMAT_DESCRIPTION_EVENT, c.PREVIOUS_GTIDS_LOG_EVENT,
                           c.XID_EVENT, c.ROTATE_EVENT)]
    path = tmp_path / "mysql-bin.000001"
    for cut in [*range(bounds[0], len(data), 37), len(data) - 1, len(data)]:
        shutil.copyfile(src, path)
        with open(path, "r+b") as f:
            f.truncate(cut)
        (tmp_path / "relay.meta").unlink(missing_ok=True)
        rec = recover_subdir(tmp_path, None, flavor="mysql")
        safe = bounds[bisect.bisect_right(bounds, cut) - 1]
        assert path.stat().st_size == safe, cut
        # The file ends with a Rotate: once it is whole, meta moves to the next file.
        want = RelayMeta("mysql-bin.000002", 4, "") if safe == len(data) else RelayMeta(
            "mysql-bin.000001", safe, "")
        assert rec.meta == want, cut
