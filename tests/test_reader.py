"""RelayReader on relay dirs built from generated binlogs: order, durable end, errors."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from binrelay.binlog import constants as c
from binrelay.errors import ChecksumMismatchError, RelayDirError
from binrelay.gtid import MariaGtidSet
from binrelay.position import Position, SubdirName
from binrelay.relay.layout import RelayMeta, read_meta, write_meta
from binrelay.relay.reader import (
    GtidFilter,
    RelayPurgedError,
    RelayReader,
    position_for_gtids,
)
from relaydir_builder import make_relay_dir

LAYOUT = [("0-1.000001", [3, 4]), ("0-2.000002", [2, 5, 3])]


def _by_file(events) -> dict[tuple[str, str], bytes]:
    out: dict[tuple[str, str], bytearray] = {}
    for e in events:
        buf = out.setdefault((str(e.subdir), e.file), bytearray(b"\xfebin"))
        assert len(buf) == e.pos, f"{e.file}: event at {e.pos} after {len(buf)} bytes"
        buf += e.raw
    return {k: bytes(v) for k, v in out.items()}


def test_reads_every_file_of_every_subdir_in_order(tmp_path: Path) -> None:
    files = make_relay_dir(tmp_path, LAYOUT)
    got = _by_file(RelayReader(tmp_path))
    assert list(got) == list(files)
    assert got == files


def test_never_past_relay_meta(tmp_path: Path) -> None:
    files = make_relay_dir(tmp_path, LAYOUT, active_partial=2)
    meta = read_meta(tmp_path / "0-2.000002")
    assert meta is not None
    got = _by_file(RelayReader(tmp_path))
    last = ("0-2.000002", meta.binlog_name)
    assert got[last] == files[last][: meta.binlog_pos]
    # A torn tail after the durable end is not an error: it is not read at all.
    with open(tmp_path / "0-2.000002" / meta.binlog_name, "ab") as f:
        f.write(b"\x01\x02\x03")
    assert _by_file(RelayReader(tmp_path))[last] == files[last][: meta.binlog_pos]


def test_start_mid_file_delivers_the_fde_first(tmp_path: Path) -> None:
    files = make_relay_dir(tmp_path, LAYOUT)
    data = files[("0-1.000001", "mysql-bin.000002")]
    # Start at the second transaction end of the second file.
    events = list(RelayReader(tmp_path, Position(SubdirName.parse("0-1.000001"),
                                                      "mysql-bin.000002", 0)))
    xids = [e.end for e in events if e.event_type == c.XID_EVENT and e.file == "mysql-bin.000002"
            and str(e.subdir) == "0-1.000001"]
    start = Position(SubdirName.parse("0-1.000001"), "mysql-bin.000002", xids[1])
    got = list(RelayReader(tmp_path, start))
    assert got[0].event_type == c.FORMAT_DESCRIPTION_EVENT and got[0].pos == 4
    assert got[1].pos == xids[1]
    assert b"".join(e.raw for e in got[1:] if e.file == "mysql-bin.000002"
                    and str(e.subdir) == "0-1.000001") == data[xids[1]:]


def test_follow_sees_new_transactions_and_a_new_subdir(tmp_path: Path) -> None:
    files = make_relay_dir(tmp_path, LAYOUT, active_partial=3)
    sub = tmp_path / "0-2.000002"
    meta = read_meta(sub)
    assert meta is not None
    stop = threading.Event()
    seen: list = []
    # No polling in the test's time: only inotify can wake the reader before its deadline.
    reader = RelayReader(tmp_path, follow=True, wait_timeout=120, should_stop=stop.is_set)
    thread = threading.Thread(target=lambda: seen.extend(reader), daemon=True)
    thread.start()
    name = meta.binlog_name
    full = files[("0-2.000002", name)]

    def delivered_up_to(end: int) -> bool:
        return any(e.file == name and e.end == end for e in seen)

    deadline = time.monotonic() + 10
    while not delivered_up_to(meta.binlog_pos) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert delivered_up_to(meta.binlog_pos)
    # The relay makes the rest durable: the reader wakes up without polling.
    write_meta(sub, RelayMeta(name, len(full), ""))
    deadline = time.monotonic() + 30
    while not delivered_up_to(len(full)) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert delivered_up_to(len(full)), "not woken by inotify"
    stop.set()
    write_meta(sub, RelayMeta(name, len(full), ""))  # a wake-up to see the stop by
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert _by_file(seen) == files


def test_purged_and_missing_files_are_clear_errors(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, LAYOUT)
    os.unlink(tmp_path / "0-1.000001" / "mysql-bin.000001")
    start = Position(SubdirName.parse("0-1.000001"), "mysql-bin.000001", 4)
    with pytest.raises(RelayPurgedError, match=r"mysql-bin.000001 was purged"):
        list(RelayReader(tmp_path, start))
    gone = Position(SubdirName.parse("0-0.000000"), "mysql-bin.000001", 4)
    with pytest.raises(RelayPurgedError, match="was purged"):
        list(RelayReader(tmp_path, gone))


def test_corruption_and_shrinking_are_errors_naming_file_and_offset(tmp_path: Path) -> None:
    files = make_relay_dir(tmp_path, LAYOUT)
    path = tmp_path / "0-1.000001" / "mysql-bin.000002"
    data = bytearray(files[("0-1.000001", "mysql-bin.000002")])
    data[300] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError, match=r"mysql-bin.000002 at offset \d+"):
        list(RelayReader(tmp_path))
    path.write_bytes(files[("0-1.000001", "mysql-bin.000002")][:200])
    with pytest.raises(RelayDirError, match=r"mysql-bin.000002 is 200 bytes but relay.meta says"):
        list(RelayReader(tmp_path))


def test_start_from_a_gtid_set(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, LAYOUT)
    # Transactions are numbered 0-1-1 .. 0-1-17 across all files; 0-1-8 is in the third file
    # (0-2.000002/mysql-bin.000001 holds 8 and 9).
    pos = position_for_gtids(tmp_path, "0-1-8", "mariadb")
    assert (str(pos.subdir), pos.binlog_name, pos.binlog_pos) == \
        ("0-2.000002", "mysql-bin.000001", 4)
    flt = GtidFilter(MariaGtidSet.parse("0-1-8"))
    kept = [e for e in RelayReader(tmp_path, pos) if flt.keep(e)]
    from binrelay.binlog.parse import parse_maria_gtid

    seqs = [parse_maria_gtid(e.raw).seq_no for e in kept if e.event_type == c.GTID_EVENT]
    assert seqs == list(range(9, 18))
    # Nothing of transaction 8 leaks through: every kept group is whole.
    xids = sum(1 for e in kept if e.event_type == c.XID_EVENT)
    assert xids == len(seqs)
