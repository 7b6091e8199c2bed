"""The read task's per-event loop in C (``_speedups.fold_events``, through ``KeyFold``) gives
exactly what the Python loop it shortcuts gives (``compact_segment`` with it off: the
scanner and the compaction in Python, the specification): the same records in the same
order, or the same error, on real binlogs, on every way of cutting them into partitions,
on damaged copies whose checksums still hold, and on the MySQL captures."""

from __future__ import annotations

import itertools
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binrelay.apply.catalog import DownstreamColumn, TableColumns, TableRules
from binrelay.apply.changes import TableRef
from binrelay.apply.plan import DOWNSTREAM_COLUMNS, NO_KEY, PARTIAL_IMAGE
from binrelay.binlog import constants as c
from binrelay.binlog.build import with_crc
from binrelay.relay.txnscan import transaction_ends
from binrelay.rows import scanner
from binrelay.rows.coltypes import MYSQL_TYPE_LONG
from binrelay.spark import compact
from binrelay.spark.planning import Segment
from captures import capture_binlogs

SUBDIR, FILE = "0-1.000001", "mysql-bin.000001"

#: Keyed tables the C loop takes (integer, composite, text keys; key moves; multi-row
#: events split over several rows events), and what it must leave to Python: a keyless
#: table, a DECIMAL key, a JSON column, 260 columns, images without every column
#: (MINIMAL, NOBLOB) arriving after full ones of the same table, table ids renumbered by
#: FLUSH TABLES, a multi-table UPDATE (two table maps in one statement).
WORKLOAD = [
    "CREATE DATABASE f",
    "CREATE TABLE f.i (id INT PRIMARY KEY, v VARCHAR(20), b BLOB)",
    "CREATE TABLE f.m (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))",
    "CREATE TABLE f.t (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
    "CREATE TABLE f.n (x INT, y INT)",
    "CREATE TABLE f.k (id INT PRIMARY KEY, v VARCHAR(10))",
    "CREATE TABLE f.p (v INT, id INT PRIMARY KEY)",
    "INSERT INTO f.p SELECT seq, seq FROM f.seq_1_to_40",
    "CREATE TABLE f.d (id DECIMAL(10,2) PRIMARY KEY, v INT)",
    "CREATE TABLE f.j (id INT PRIMARY KEY, doc JSON)",
    "CREATE TABLE f.w (id INT PRIMARY KEY, "
    + ", ".join(f"c{k} TINYINT DEFAULT {k % 100}" for k in range(259)) + ")",
    "INSERT INTO f.i SELECT seq, CONCAT('r', seq), REPEAT('b', seq % 50) FROM f.seq_1_to_3000",
    "INSERT INTO f.m SELECT seq % 7, CHAR(65 + seq % 5), seq FROM f.seq_1_to_35",
    "INSERT INTO f.t VALUES ('a', 1), ('b', 2), ('é', 3), ('Zz', 4)",
    "INSERT INTO f.n VALUES (1, 1), (1, 1), (2, 2)",
    "INSERT INTO f.d VALUES (1.50, 1), (2.25, 2)",
    "INSERT INTO f.j VALUES (1, '{\"a\": 1}'), (2, '[1, 2]')",
    "INSERT INTO f.w (id) SELECT seq FROM f.seq_1_to_20",
    "UPDATE f.i SET v = 'u' WHERE id % 3 = 0",
    "UPDATE f.i SET id = id + 5000 WHERE id % 100 = 7",
    "DELETE FROM f.i WHERE id % 5 = 0",
    "UPDATE f.m SET b = 'Z', v = v + 1 WHERE a = 3 AND b = 'A'",
    "UPDATE f.t SET k = 'c' WHERE k = 'a'",
    "UPDATE f.t SET v = v + 1",
    "DELETE FROM f.t WHERE k = 'b'",
    "UPDATE f.n SET y = 3 WHERE x = 1 LIMIT 1",
    "UPDATE f.d SET v = 9 WHERE id = 1.50",
    "UPDATE f.j SET doc = '{\"b\": 2}' WHERE id = 1",
    "UPDATE f.w SET c7 = 1 WHERE id < 5",
    # Single-row transactions, as most workloads log them: the loop's common case.
    "INSERT INTO f.k SELECT seq, 'k' FROM f.seq_1_to_300",
    *[f"UPDATE f.k SET v = 'x{k}' WHERE id = {k}" for k in range(1, 200)],
    *[f"DELETE FROM f.m WHERE a = {k % 7} AND b = 'B'" for k in range(1, 8)],
    "FLUSH TABLES",
    *[f"INSERT INTO f.k VALUES ({k}, 'new')" for k in range(10001, 10100)],
    "INSERT INTO f.i VALUES (5, 'again', NULL)",
    "UPDATE f.i JOIN f.m ON f.i.id = f.m.v SET f.i.v = 'joined', f.m.v = f.m.v + 100",
    "SET SESSION binlog_row_image = 'NOBLOB'",
    "UPDATE f.i SET v = 'noblob' WHERE id BETWEEN 10 AND 20",
    "UPDATE f.p SET v = 1 WHERE id = 40",  # (full images: the loop takes f.p from here)
    "SET SESSION binlog_row_image = 'MINIMAL'",
    # Nine images of 5 bytes (the key alone) read as five of 9 by the table's full plan:
    # what the loop must not do (it takes only images with every column).
    "DELETE FROM f.p WHERE id <= 9",
    "UPDATE f.m SET v = 0 WHERE a = 1",
    "DELETE FROM f.m WHERE a = 2",
    "SET SESSION binlog_row_image = 'FULL'",
    "UPDATE f.m SET v = 1 WHERE a = 4",
    "BEGIN",
    "INSERT INTO f.i VALUES (90001, 'in trx', NULL)",
    "UPDATE f.i SET v = 'in trx too' WHERE id = 90001",
    "DELETE FROM f.t WHERE k = 'Zz'",
    "COMMIT",
]


@pytest.fixture(scope="module")
def binlog(tmp_path_factory, mariadb_template, mariadb_socket_dir) -> bytes:
    from binrelay.testing.sandbox import MariaDBServer

    server = MariaDBServer(tmp_path_factory.mktemp("fold") / "s", template=mariadb_template,
                           socket_dir=mariadb_socket_dir).start()
    try:
        conn = server.connect()
        with conn.cursor() as cur:
            for sql in WORKLOAD:
                cur.execute(sql)
        conn.close()
        name, _ = server.binlog_files()[-1]
        return server.binlog_path(name).read_bytes()
    finally:
        server.stop()
        server.cleanup()


def _relay(data: bytes, root: Path) -> tuple[Path, list[Any]]:
    subdir = root / SUBDIR
    if subdir.exists():
        shutil.rmtree(subdir)
    subdir.mkdir(parents=True)
    path = subdir / FILE
    path.write_bytes(data)
    first = 4 + struct.unpack_from("<I", data, 4 + 9)[0]
    return path, transaction_ends(path, first, len(data))


def _outcome(root: Path, segment: Segment, by_name: bool, rules: TableRules | None) -> Any:
    try:
        return list(compact.compact_segment(str(root), segment, 3, rules, by_name=by_name))
    except Exception as exc:  # the same error both ways, whatever it is
        return type(exc), str(exc)


class _Counting:
    """The C loop, counting the events it took."""

    def __init__(self) -> None:
        self.real = scanner.fold_events_c
        self.taken = 0

    def __call__(self, buf: Any, events: list[Any], i: int, *args: Any) -> Any:
        out = self.real(buf, events, i, *args)
        self.taken += out[0] - i
        return out


def _both(root: Path, segment: Segment, monkeypatch: pytest.MonkeyPatch, *,
          by_name: bool = True, rules: TableRules | None = None, run: int = 1024
          ) -> tuple[Any, int]:
    """The partition's outcome with the C loop (``run`` events a call at most) and
    without; how many events C took."""
    assert scanner.fold_events_c is not None, "binrelay._speedups was not built"
    counting = _Counting()
    with monkeypatch.context() as m:
        m.setattr(scanner, "fold_events_c", counting)
        m.setattr(scanner, "_FOLD_RUN", run)
        fast = _outcome(root, segment, by_name, rules)
    with monkeypatch.context() as m:
        m.setattr(compact, "fold_events_c", None)
        m.setattr(scanner, "fold_events_c", None)
        slow = _outcome(root, segment, by_name, rules)
    assert fast == slow
    return fast, counting.taken


def test_the_c_loop_compacts_a_real_binlog_as_python_does(binlog: bytes, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    _path, ends = _relay(binlog, tmp_path)
    whole = Segment(SUBDIR, FILE, ends[0].start, ends[-1].end, "dml")
    for by_name, run in ((True, 1024), (False, 1024), (True, 2)):
        records, taken = _both(tmp_path, whole, monkeypatch, by_name=by_name, run=run)
        assert isinstance(records, list) and records, records
        # Not vacuous: C took most events, and the tables it must leave reached Python.
        assert taken >= 3 * 290
        reasons = {(str(r[1].table), r[2]) for _task, r in records if r[0] == compact.RAW}
        # f.i and f.m were compacted until images without every column came.
        assert reasons == {("f.n", NO_KEY), ("f.i", PARTIAL_IMAGE), ("f.m", PARTIAL_IMAGE)}
        tables = {str(r[1][0]) for _task, r in records if r[0] == compact.KEYED}
        assert tables == {"f.k", "f.p", "f.t", "f.d", "f.j", "f.w"}


def test_the_downstreams_own_columns_keep_a_table_in_python(binlog: bytes, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """f.k has a column only the downstream has: its updates are replayed in order (a
    REPLACE would reset that column), so its events are never the C loop's."""
    _path, ends = _relay(binlog, tmp_path)
    whole = Segment(SUBDIR, FILE, ends[0].start, ends[-1].end, "dml")
    rules = TableRules(columns={TableRef("f", "k"): TableColumns((
        DownstreamColumn("id", "int"), DownstreamColumn("v", "varchar", False, "utf8mb4"),
        DownstreamColumn("extra", "int")), (0,), (0,))})
    records, _taken = _both(tmp_path, whole, monkeypatch, rules=rules)
    assert isinstance(records, list), records
    reasons = {(str(r[1].table), r[2]) for _task, r in records if r[0] == compact.RAW}
    assert ("f.k", DOWNSTREAM_COLUMNS) in reasons, reasons


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_partitioning_compacts_alike(binlog: bytes, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          data: st.DataObject) -> None:
    _path, ends = _relay(binlog, tmp_path)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(ends) - 1), max_size=6)))
    bounds = [0, *cuts, len(ends)]
    for a, b in itertools.pairwise(bounds):
        _both(tmp_path, Segment(SUBDIR, FILE, ends[a].start, ends[b - 1].end, "dml"),
              monkeypatch)


def _event_starts(data: bytes, types: set[int]) -> list[int]:
    out, pos = [], 4
    while pos < len(data):
        size = struct.unpack_from("<I", data, pos + 9)[0]
        if data[pos + 4] in types:
            out.append(pos)
        pos += size
    return out


_TAKEN = {c.GTID_EVENT, c.TABLE_MAP_EVENT, c.WRITE_ROWS_EVENT_V1, c.UPDATE_ROWS_EVENT_V1,
          c.DELETE_ROWS_EVENT_V1}


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_events_fail_alike(binlog: bytes, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch,
                                   data: st.DataObject) -> None:
    """A damaged GTID, table map or rows event whose checksum was made to match: the same
    records, or the same error, both ways (the C loop leaves what it cannot read to
    Python, which says what is wrong)."""
    _path, ends = _relay(binlog, tmp_path)
    whole = Segment(SUBDIR, FILE, ends[0].start, ends[-1].end, "dml")
    starts = _event_starts(binlog, _TAKEN)
    at = data.draw(st.sampled_from(starts))
    size = struct.unpack_from("<I", binlog, at + 9)[0]
    event = bytearray(binlog[at:at + size - 4])
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.integers(19, len(event) - 1))
        event[k] = data.draw(st.sampled_from([0, 0xFF, event[k] ^ 1, event[k] ^ 0x80]))
    damaged = binlog[:at] + with_crc(event) + binlog[at + size:]
    _relay(damaged, tmp_path)
    _both(tmp_path, whole, monkeypatch)


@pytest.mark.parametrize("path", capture_binlogs(), ids=lambda p: p.name)
def test_the_mysql_captures_compact_alike(path: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data = path.read_bytes()
    try:
        _path, ends = _relay(data, tmp_path)
    except Exception as exc:  # a capture the planner cannot cut
        pytest.fail(f"{path}: {exc}")
    if not ends:
        return
    # MySQL's default binlog_row_metadata = MINIMAL names no columns: read by position.
    _both(tmp_path, Segment(SUBDIR, FILE, ends[0].start, ends[-1].end, "dml"), monkeypatch,
          by_name=False)


# --- built binlogs: what real servers do not log, but a damaged or foreign one may ------------

def _lenenc_str(s: str) -> bytes:
    return bytes([len(s)]) + s.encode()


def _keyed_map(table_id: int) -> bytes:
    """TABLE_MAP of ``f.p (v INT, id INT PRIMARY KEY)`` with names and key logged."""
    names = _lenenc_str("v") + _lenenc_str("id")
    return (table_id.to_bytes(6, "little") + struct.pack("<H", 1)
            + _lenenc_str("f") + b"\0" + _lenenc_str("p") + b"\0"
            + b"\x02" + bytes([MYSQL_TYPE_LONG, MYSQL_TYPE_LONG]) + b"\x00" + b"\x01"
            + bytes([4, len(names)]) + names + bytes([8, 1, 1]))


def _map_with_odd_column(table_id: int) -> bytes:
    """TABLE_MAP of ``f.u (v INT, id INT PRIMARY KEY, d <type 0: pre-5.0 DECIMAL>)``."""
    names = _lenenc_str("v") + _lenenc_str("id") + _lenenc_str("d")
    return (table_id.to_bytes(6, "little") + struct.pack("<H", 1)
            + _lenenc_str("f") + b"\0" + _lenenc_str("u") + b"\0"
            + b"\x03" + bytes([MYSQL_TYPE_LONG, MYSQL_TYPE_LONG, 0]) + b"\x00" + b"\x07"
            + bytes([4, len(names)]) + names + bytes([8, 1, 1]))


def _rows(etype: int, table_id: int, present: int, images: bytes, *, end: bool = True,
          columns: int = 2) -> bytes:
    head = table_id.to_bytes(6, "little") + struct.pack("<H", 1 if end else 0)
    bitmaps = bytes([present]) * (2 if etype == c.UPDATE_ROWS_EVENT_V1 else 1)
    return head + bytes([columns]) + bitmaps + images


def _full(v: int, k: int) -> bytes:
    return b"\x00" + struct.pack("<ii", v, k)


def _built(transactions: list[list[tuple[int, bytes]]]) -> bytes:
    from binrelay.binlog.build import event, fde_event, maria_gtid_body, xid_body

    out = bytearray(b"\xfebin" + fde_event(flavor="mariadb", checksum=True))
    for n, events in enumerate(transactions, 1):
        if events[0][0] != c.GTID_EVENT:
            events = [(c.GTID_EVENT, maria_gtid_body(n)), *events]
        for etype, body in [*events, (c.XID_EVENT, xid_body(n))]:
            size = 19 + len(body) + 4
            out += event(etype, body, log_pos=len(out) + size, checksum=True)
    return bytes(out)


def test_built_binlogs_the_loop_must_leave_to_python(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    first = [(c.TABLE_MAP_EVENT, _keyed_map(7)),
             (c.WRITE_ROWS_EVENT_V1, _rows(c.WRITE_ROWS_EVENT_V1, 7, 3,
                                           b"".join(_full(k, k) for k in range(1, 20)))),
             (c.TABLE_MAP_EVENT, _keyed_map(7)),
             (c.UPDATE_ROWS_EVENT_V1, _rows(c.UPDATE_ROWS_EVENT_V1, 7, 3,
                                            _full(1, 1) + _full(2, 100)))]
    cases = {
        # The key alone (column 2), nine images of 5 bytes: the table's full plan would
        # read them as five of 9 bytes, with other keys.
        "key-only images": [(c.TABLE_MAP_EVENT, _keyed_map(7)),
                            (c.DELETE_ROWS_EVENT_V1, _rows(
                                c.DELETE_ROWS_EVENT_V1, 7, 2,
                                b"".join(b"\x00" + struct.pack("<i", k) for k in range(1, 10))))],
        # A statement's table ids end with it: once the next statement maps its tables, a
        # rows event naming the last statement's id is an error, not that table.
        "stale table id": [(c.TABLE_MAP_EVENT, _keyed_map(8)),
                           (c.DELETE_ROWS_EVENT_V1, _rows(c.DELETE_ROWS_EVENT_V1, 7, 3,
                                                          _full(3, 3)))],
        # Two columns logged as three.
        "columns": [(c.TABLE_MAP_EVENT, _keyed_map(7)),
                    (c.DELETE_ROWS_EVENT_V1, _rows(c.DELETE_ROWS_EVENT_V1, 7, 3, _full(3, 3))
                     .replace(b"\x02\x03", b"\x03\x07", 1))],
        # A GTID event too short for its fields.
        "short GTID": [(c.GTID_EVENT, b"\x02" * 12), (c.TABLE_MAP_EVENT, _keyed_map(7)),
                       (c.DELETE_ROWS_EVENT_V1, _rows(c.DELETE_ROWS_EVENT_V1, 7, 3,
                                                      _full(3, 3)))],
        # Key-only images (the key alone) of a table one of whose other columns binrelay
        # cannot read: read as logged, never through a decoder of every column.
        "odd column": [(c.TABLE_MAP_EVENT, _map_with_odd_column(9)),
                       (c.DELETE_ROWS_EVENT_V1, _rows(c.DELETE_ROWS_EVENT_V1, 9, 2,
                                                      b"\x00" + struct.pack("<i", 5),
                                                      columns=3)),
                       (c.TABLE_MAP_EVENT, _map_with_odd_column(9)),
                       (c.DELETE_ROWS_EVENT_V1, _rows(c.DELETE_ROWS_EVENT_V1, 9, 2,
                                                      b"\x00" + struct.pack("<i", 6),
                                                      columns=3))],
        # An image cut short.
        "short image": [(c.TABLE_MAP_EVENT, _keyed_map(7)),
                        (c.DELETE_ROWS_EVENT_V1, _rows(c.DELETE_ROWS_EVENT_V1, 7, 3,
                                                       _full(3, 3)[:-1]))],
    }
    for name, events in cases.items():
        data = _built([first, events])
        _relay(data, tmp_path)
        segment = Segment(SUBDIR, FILE, 4 + struct.unpack_from("<I", data, 13)[0], len(data),
                          "dml")
        outcome, taken = _both(tmp_path, segment, monkeypatch)
        assert taken >= 2, name  # the first transaction's second map and update
        if name == "key-only images":
            keys = sorted(r[2] for _t, r in outcome if r[0] == compact.KEYED)
            assert keys == [(k,) for k in range(1, 20)] + [(100,)], keys
        elif name == "odd column":
            assert isinstance(outcome, list), outcome
            keys = sorted(r[2] for _t, r in outcome
                          if r[0] == compact.KEYED and r[1][0] == TableRef("f", "u"))
            assert keys == [(5,), (6,)], outcome
        else:
            assert not isinstance(outcome, list), (name, outcome)
