"""RelayWriter on generated streams: the decisions DM's writer makes, one by one.

The server's side of a session is simulated from a file made by ``BinlogBuilder``: a fake
Rotate, the FDE, then the events, as bytes, whole or as packets for the hot loop.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import pytest

from binlog_builder import (
    ROTATE,
    BinlogBuilder,
    event,
    rotate_body,
)
from binrelay.binlog import constants as c
from binrelay.errors import ChecksumMismatchError, RelayConflictError, RelayDirError
from binrelay.relay.layout import RelayMeta, read_meta
from binrelay.relay.writer import RelayWriter


def _events(data: bytes) -> list[bytes]:
    out, pos = [], 4
    while pos < len(data):
        size = struct.unpack_from("<I", data, pos + 9)[0]
        out.append(data[pos : pos + size])
        pos += size
    return out


def _fake_rotate(name: str, checksum: bool, position: int = 4) -> bytes:
    return event(ROTATE, rotate_body(name, position), log_pos=0, checksum=checksum, timestamp=0,
                 flags=c.LOG_EVENT_ARTIFICIAL_F)


def _heartbeat(name: str, pos: int, checksum: bool) -> bytes:
    return event(c.HEARTBEAT_LOG_EVENT, name.encode(), log_pos=pos, checksum=checksum,
                 timestamp=0, flags=c.LOG_EVENT_ARTIFICIAL_F)


def _with_log_pos_zero(fde: bytes) -> bytes:
    """The FDE a server sends when a dump starts past offset 4: log_pos 0, checksum redone."""
    raw = bytearray(fde[:-4])
    raw[13:17] = b"\x00\x00\x00\x00"
    return bytes(raw) + struct.pack("<I", zlib.crc32(bytes(raw)))


def _packets(events: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e) + 1)[:3] + b"\x00\x00" + e for e in events)


def _sample(flavor: str = "mariadb", checksum: bool = True) -> BinlogBuilder:
    b = BinlogBuilder(flavor=flavor, checksum=checksum)
    if flavor == "mariadb":
        b.gtid_list([])
        b.checkpoint()
    else:
        b.previous_gtids({})
    b.ddl()
    for i in range(6):
        b.trx([i, i + 1], statements=2)
    return b


def _writer(tmp_path: Path, flavor: str | None = None, name: str = "mysql-bin.000001",
            pos: int = 4) -> RelayWriter:
    subdir = tmp_path / "0-1.000001"
    subdir.mkdir(exist_ok=True)
    return RelayWriter(subdir, RelayMeta(name, pos, ""), flavor=flavor, sync_interval=0)


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("via", ["handle", "packets"])
def test_a_whole_stream_is_copied_byte_for_byte(tmp_path: Path, flavor: str, checksum: bool,
                                                via: str) -> None:
    b = _sample(flavor, checksum)
    events = [_fake_rotate("mysql-bin.000001", checksum), *_events(b.bytes())]
    events.insert(5, _heartbeat("mysql-bin.000001", b.events[3].end, checksum))
    w = _writer(tmp_path)
    if via == "handle":
        for e in events:
            w.handle(e)
    else:
        data = _packets(events)
        assert w.consume_packets(data, 0) == len(data)
    w.close()
    assert (w.subdir / "mysql-bin.000001").read_bytes() == b.bytes()
    meta = read_meta(w.subdir)
    assert meta == RelayMeta("mysql-bin.000001", b.boundaries[-1], b.gtid_text())


def test_a_hole_is_filled_with_one_dummy_event_of_its_size(tmp_path: Path) -> None:
    b = _sample()
    events = _events(b.bytes())
    # The server skips the third transaction (as GTID auto-positioning does).
    skipped = [e for e in b.events if e.pos >= b.boundaries[3] and e.end <= b.boundaries[4]]
    keep = [e for e in events if not any(
        struct.unpack_from("<I", e, 13)[0] == s.end for s in skipped)]
    w = _writer(tmp_path)
    for e in [_fake_rotate("mysql-bin.000001", True), *keep]:
        w.handle(e)
    w.close()
    data = (w.subdir / "mysql-bin.000001").read_bytes()
    assert len(data) == len(b.bytes())
    hole = slice(b.boundaries[3], b.boundaries[4])
    assert data[: hole.start] == b.bytes()[: hole.start]
    assert data[hole.stop :] == b.bytes()[hole.stop :]
    dummy = data[hole]
    assert struct.unpack_from("<I", dummy, 9)[0] == hole.stop - hole.start  # one event
    assert struct.unpack_from("<I", dummy, 13)[0] == hole.stop
    assert dummy[4] in (c.QUERY_EVENT, c.USER_VAR_EVENT)
    assert w.holes_filled == 1


def test_duplicates_are_dropped_and_conflicts_refused(tmp_path: Path) -> None:
    b = _sample()
    events = _events(b.bytes())
    w = _writer(tmp_path)
    for e in [_fake_rotate("mysql-bin.000001", True), *events]:
        w.handle(e)
    for e in events[3:8]:  # sent again, as after a GTID-mode reconnect
        w.handle(e)
    assert w.duplicates_skipped == 5
    changed = bytearray(events[6])
    changed[-5] ^= 1  # different bytes, valid checksum: a different binlog at that position
    changed[-4:] = struct.pack("<I", zlib.crc32(bytes(changed[:-4])))
    with pytest.raises(RelayConflictError, match="different bytes"):
        w.handle(bytes(changed))
    w.close()
    assert (w.subdir / "mysql-bin.000001").read_bytes() == b.bytes()


def test_bad_checksum_is_an_error_and_nothing_past_meta_stays(tmp_path: Path) -> None:
    b = _sample()
    events = _events(b.bytes())
    w = _writer(tmp_path)
    for e in [_fake_rotate("mysql-bin.000001", True), *events[:6]]:
        w.handle(e)
    bad = bytearray(events[6])
    bad[20] ^= 0xFF
    with pytest.raises(ChecksumMismatchError):
        w.consume_packets(_packets([bytes(bad)]), 0)
    w.close()
    meta = read_meta(w.subdir)
    assert meta is not None
    assert (w.subdir / "mysql-bin.000001").stat().st_size == meta.binlog_pos


def test_real_rotate_closes_the_file_and_moves_meta(tmp_path: Path) -> None:
    b = _sample()
    b.rotate("mysql-bin.000002")
    nxt = BinlogBuilder()
    nxt.gtid_list([(0, 1, 7)])
    nxt.trx([1])
    w = _writer(tmp_path)
    for e in [_fake_rotate("mysql-bin.000001", True), *_events(b.bytes())]:
        w.handle(e)
    assert read_meta(w.subdir) == RelayMeta("mysql-bin.000002", 4, b.gtid_text())
    for e in _events(nxt.bytes()):
        w.handle(e)
    w.close()
    assert (w.subdir / "mysql-bin.000001").read_bytes() == b.bytes()
    assert (w.subdir / "mysql-bin.000002").read_bytes() == nxt.bytes()
    assert read_meta(w.subdir) == RelayMeta("mysql-bin.000002", nxt.boundaries[-1], "0-1-8")


def test_close_cuts_a_transaction_in_flight(tmp_path: Path) -> None:
    b = _sample()
    events = _events(b.bytes())
    w = _writer(tmp_path)
    for e in [_fake_rotate("mysql-bin.000001", True), *events[:-2]]:
        w.handle(e)
    w.close()
    assert (w.subdir / "mysql-bin.000001").read_bytes() == b.bytes()[: b.boundaries[-2]]
    assert read_meta(w.subdir) == RelayMeta("mysql-bin.000001", b.boundaries[-2],
                                            b.gtid_at[b.boundaries[-2]])


def test_resume_appends_and_ignores_the_resent_fde(tmp_path: Path) -> None:
    b = _sample()
    events = _events(b.bytes())
    cut = b.boundaries[3]
    w = _writer(tmp_path)
    for e in [_fake_rotate("mysql-bin.000001", True), *events]:
        if struct.unpack_from("<I", e, 13)[0] <= cut:
            w.handle(e)
    w.close()
    # A resumed dump: fake rotate at the position, the FDE with log_pos 0, then the rest.
    fde = _with_log_pos_zero(events[0])
    w = _writer(tmp_path, pos=cut)
    w.handle(_fake_rotate("mysql-bin.000001", True, cut))
    w.handle(fde)
    for e in events:
        if struct.unpack_from("<I", e, 13)[0] > cut:
            w.handle(e)
    w.close()
    assert (w.subdir / "mysql-bin.000001").read_bytes() == b.bytes()


def test_a_file_never_starts_mid_file(tmp_path: Path) -> None:
    b = _sample()
    fde = _with_log_pos_zero(_events(b.bytes())[0])
    w = _writer(tmp_path)
    w.handle(_fake_rotate("mysql-bin.000001", True, 500))
    with pytest.raises(RelayDirError, match="never start mid-file"):
        w.handle(fde)
    assert not (w.subdir / "mysql-bin.000001").exists()


def test_a_file_past_4_gib_still_takes_its_events(tmp_path: Path) -> None:
    """One huge transaction carries a file past 4 GiB; the header's log_pos is then the end
    position modulo 2**32, and the next events still belong at the file's end (before: a
    RelayConflictError).  The file is sparse: nothing of its 4 GiB is written."""
    b = _sample()
    first = b.bytes()[: b.events[0].end]  # magic + FDE
    subdir = tmp_path / "0-1.000001"
    subdir.mkdir()
    path = subdir / "mysql-bin.000001"
    path.write_bytes(first)
    big = (1 << 32) + 1000
    os.truncate(path, big)
    w = RelayWriter(subdir, RelayMeta("mysql-bin.000001", big, ""), flavor="mariadb",
                    sync_interval=0)
    xid = event(c.XID_EVENT, struct.pack("<Q", 7), log_pos=(big + 31) % (1 << 32),
                checksum=True)
    assert len(xid) == 31
    w.handle(xid)
    w.close()
    assert path.stat().st_size == big + 31
    with path.open("rb") as f:
        f.seek(big)
        assert f.read() == xid



def test_a_move_within_a_file_leaves_the_directory_for_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """relay.meta's moves within one file fsync the meta, not its directory; a new file, a
    move to another file and a clean stop do.  A crash that loses unsettled moves brings back
    an older meta of the file, and recovery moves it to the data's last transaction end."""
    from binrelay.relay import layout, writer
    from binrelay.relay.recovery import recover_subdir

    settled: list[RelayMeta | None] = []

    def fsync_dir(path: Path) -> None:
        settled.append(read_meta(path))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)

    monkeypatch.setattr(layout, "fsync_dir", fsync_dir)
    monkeypatch.setattr(writer, "fsync_dir", fsync_dir)
    b = _sample()
    events = _events(b.bytes())
    w = _writer(tmp_path)
    layout.write_meta(w.subdir, RelayMeta("mysql-bin.000001", 4, ""))  # as the relay does
    settled.clear()
    w.handle(_fake_rotate("mysql-bin.000001", True))
    older = None
    for e in events:
        w.handle(e)
        meta = read_meta(w.subdir)
        if older is None and meta.binlog_pos > 4:
            older = (w.subdir / "relay.meta").read_bytes()
    last = RelayMeta("mysql-bin.000001", b.boundaries[-1], b.gtid_text())
    assert read_meta(w.subdir) == last
    # The file's entry before the first move; none for the moves within it.
    assert settled == [RelayMeta("mysql-bin.000001", 4, "")]
    w.close()
    assert settled[1:] == [last]  # a clean stop settles

    # A crash that lost the renames since the first: the older meta is back.
    (w.subdir / "relay.meta").write_bytes(older)
    assert read_meta(w.subdir) != last
    got = recover_subdir(w.subdir, read_meta(w.subdir), flavor="mariadb")
    assert got.meta == last == read_meta(w.subdir)

    b.rotate("mysql-bin.000002")
    (tmp_path / "again").mkdir()
    w = _writer(tmp_path / "again")
    layout.write_meta(w.subdir, RelayMeta("mysql-bin.000001", 4, ""))
    settled.clear()
    for e in [_fake_rotate("mysql-bin.000001", True), *_events(b.bytes())]:
        w.handle(e)
    assert settled[-1] == RelayMeta("mysql-bin.000002", 4, b.gtid_text())
