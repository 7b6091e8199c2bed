"""Offsets, batch limits, DDL barriers and partitions over generated relay dirs (no Spark)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from binlog_builder import MARIA_GTID, QUERY, BinlogBuilder, maria_gtid_body, query_body
from binrelay.errors import BinlogFormatError
from binrelay.position import Position, SubdirName
from binrelay.relay.layout import RelayMeta, write_index, write_meta
from binrelay.relay.relaydir import RelayView, durable_end, earliest
from binrelay.relay.txnscan import DDL, DML, OTHER, SERIAL, transaction_ends
from binrelay.spark.decode import decode_segment
from binrelay.spark.planning import advance, next_batch, plan_partitions, relay_bytes
from relaydir_builder import make_relay_dir

SUB = SubdirName.parse("0-1.000001")


def _relay(root: Path, files: list[BinlogBuilder], *, meta_pos: int | None = None) -> None:
    sub = root / str(SUB)
    sub.mkdir(parents=True)
    for i, b in enumerate(files):
        (sub / f"mysql-bin.{i + 1:06d}").write_bytes(b.bytes())
    last = files[-1]
    write_meta(sub, RelayMeta(f"mysql-bin.{len(files):06d}",
                              meta_pos if meta_pos is not None else last.boundaries[-1], ""))
    write_index(root, [SUB])


def _file(trx: int, *, ddl_at: tuple[int, ...] = (), rotate: bool = True,
          torn_tail: bool = False) -> BinlogBuilder:
    b = BinlogBuilder()
    b.gtid_list([])
    for i in range(trx):
        if i in ddl_at:
            b.ddl(f"CREATE TABLE app.t{i} (id INT)")
        else:
            b.trx([i, i + 1], statements=2)
    if torn_tail:
        b.trx([99])
        del b.data[-10:]  # the upstream crashed inside this transaction
    elif rotate:
        b.rotate(f"mysql-bin.{2:06d}")
    return b


def test_transaction_ends_and_kinds(tmp_path: Path) -> None:
    b = _file(5, ddl_at=(2,))
    _relay(tmp_path, [b])
    ends = transaction_ends(tmp_path / str(SUB) / "mysql-bin.000001", 4, len(b.data))
    # Every transaction end, plus the FDE and the Rotate, which stand alone.
    assert [e.end for e in ends] == b.boundaries
    kinds = [e.kind for e in ends]
    assert kinds.count(DDL) == 1 and kinds.count(DML) == 4
    assert kinds[:2] == [OTHER, OTHER] and kinds[-1] == OTHER  # FDE, GTID_LIST, Rotate


def test_a_group_rolled_back_upstream_is_replayed_as_it_is(tmp_path: Path) -> None:
    """Rows in a group that ends in ROLLBACK (not ROLLBACK TO) are not a transaction to
    compact: a replica runs it and its ROLLBACK, which keeps only what no rollback undoes."""
    b = BinlogBuilder()
    b.gtid_list([])
    b.nontrx([1])
    b.nontrx([2], end="ROLLBACK")
    _relay(tmp_path, [b])
    ends = transaction_ends(tmp_path / str(SUB) / "mysql-bin.000001", 4, len(b.data))
    assert [e.kind for e in ends][-2:] == [DML, SERIAL]



def _group(b: BinlogBuilder, steps: list[int | str], end: str = "COMMIT") -> None:
    """A MariaDB group logged with its statements: a row (an int) or a Query."""
    seq = b._seq(0, None)
    b.add(MARIA_GTID, maria_gtid_body(seq, 0), flags=8)
    b.add(QUERY, query_body("BEGIN", db="app"), flags=8)
    for step in steps:
        for etype, body in ([(QUERY, query_body(step, db="app"))] if isinstance(step, str)
                            else b._rows([step])):
            b.add(etype, body, flags=8)
    b._commit_maria(0, b.server_id, seq)
    b.add(QUERY, query_body(end, db="app"), boundary=True, flags=8)


def _flags(relay: Path) -> list[tuple[int | None, bool]]:
    out = []
    for segment in plan_partitions(relay, earliest(relay), durable_end(relay)):
        for batch in decode_segment(relay, segment):
            for after, rolled_back in zip(batch.column("after").to_pylist(),
                                          batch.column("rolled_back").to_pylist(),
                                          strict=True):
                out.append((None if after is None else int(after[0]), rolled_back))
    return out


def test_the_source_flags_what_a_rollback_to_undid(tmp_path: Path) -> None:
    """A ROLLBACK TO undoes what followed the latest SAVEPOINT of that name (compared
    without case), and the savepoints set after it; a ROLLBACK the whole group."""
    b = BinlogBuilder()
    b.gtid_list([])
    _group(b, [1, "SAVEPOINT `a`", 2, "SAVEPOINT `b`", 3, "ROLLBACK TO `a`", 4,
               'SAVEPOINT "a"', 5, "ROLLBACK TO `A`", 6, "RELEASE SAVEPOINT `a`", 7])
    _group(b, [8, "SAVEPOINT `c`", 9], end="ROLLBACK")
    b.trx([10])
    _relay(tmp_path, [b])
    assert [f for f in _flags(tmp_path) if f[0] is not None] == [
        (1, False), (2, True), (3, True), (4, False), (5, True), (6, False), (7, False),
        (8, True), (9, True), (10, False)]


def test_a_rollback_to_an_unknown_savepoint_is_refused(tmp_path: Path) -> None:
    b = BinlogBuilder()
    b.gtid_list([])
    _group(b, [1, "SAVEPOINT `a`", 2, "SAVEPOINT `b`", "ROLLBACK TO `a`", 3,
               "ROLLBACK TO `b`"])
    _relay(tmp_path, [b])
    with pytest.raises(BinlogFormatError, match="did not set"):
        _flags(tmp_path)


def test_a_savepoint_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    b = BinlogBuilder()
    b.gtid_list([])
    _group(b, [1, "SAVEPOINT /* x */ `a`", 2, "ROLLBACK TO `a`", 3])
    _relay(tmp_path, [b])
    with pytest.raises(BinlogFormatError, match="cannot be read"):
        _flags(tmp_path)


def test_offsets_round_trip(tmp_path: Path) -> None:
    _relay(tmp_path, [_file(2)])
    start = earliest(tmp_path)
    assert start == Position(SUB, "mysql-bin.000001", 4)
    assert Position.from_dict(durable_end(tmp_path).to_dict()) == durable_end(tmp_path)


def test_batches_respect_limits_and_the_ddl_barrier(tmp_path: Path) -> None:
    first = _file(6, ddl_at=(3,))
    second = _file(4, rotate=False)
    _relay(tmp_path, [first, second])
    start, end = earliest(tmp_path), durable_end(tmp_path)
    batches = []
    pos = start
    while pos != end:
        nxt = advance(tmp_path, pos, end, max_transactions=2)
        assert nxt.sort_key > pos.sort_key
        batches.append((pos, nxt))
        pos = nxt
    ddl_batches = [b for b in batches if plan_partitions(tmp_path, *b)[0].kind == DDL]
    assert len(ddl_batches) == 1
    (ddl_start, ddl_end), = ddl_batches
    assert [s.kind for s in plan_partitions(tmp_path, ddl_start, ddl_end)] == [DDL]
    # Every DML transaction is in exactly one batch, and batches tile the range.
    assert batches[0][0] == start and batches[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(batches))
    # Without the barrier and limits, one batch takes everything.
    assert advance(tmp_path, start, end, ddl_barrier=False) == end


def _batch_kinds(relay: Path, **limits: int) -> list[list[str]]:
    """The kinds of each batch's segments, batch after batch from the relay's start."""
    out, pos, end = [], earliest(relay), durable_end(relay)
    while pos != end:
        nxt, segments = next_batch(relay, pos, end, **limits)
        assert nxt.sort_key > pos.sort_key
        out.append([s.kind for s in segments])
        pos = nxt
    return out


def test_a_run_of_ddl_is_one_batch_when_the_caller_allows(tmp_path: Path) -> None:
    # DDL at 1-3 (a run across nothing else), DML at 4, DDL at 5, then DDL 0-1 of the next
    # file: a run goes on across a rotation.
    first = _file(6, ddl_at=(1, 2, 3, 5))
    second = _file(3, ddl_at=(0, 1), rotate=False)
    _relay(tmp_path, [first, second])
    start, end = earliest(tmp_path), durable_end(tmp_path)

    def kinds(ddl_run: int) -> list[list[str]]:
        return _batch_kinds(tmp_path, ddl_run=ddl_run)

    # ("dml" segments inside a run hold the rotation, FDE and GTID list: nothing to apply.)
    rotation = [DML, DML]
    assert kinds(1) == [[DML], [DDL], [DDL], [DDL], [DML], [DDL], rotation, [DDL], [DDL],
                        [DML]]
    assert kinds(64) == [[DML], [DDL] * 3, [DML], [DDL, *rotation, DDL, DDL], [DML]]
    assert kinds(2) == [[DML], [DDL] * 2, [DDL], [DML], [DDL, *rotation, DDL], [DDL], [DML]]
    # A run never starts after rows in the same batch.
    end_of_rows, segments = next_batch(tmp_path, start, end, ddl_run=64)
    assert [s.kind for s in segments] == [DML]
    assert next_batch(tmp_path, end_of_rows, end, ddl_run=64)[0].sort_key \
        > end_of_rows.sort_key


def test_a_run_of_ddl_takes_the_rows_between_when_the_caller_allows(tmp_path: Path) -> None:
    # DDL at 1-3, DML at 4, DDL at 5, DML at 6-7, then DDL 0-1 of the next file and DML.
    first = _file(8, ddl_at=(1, 2, 3, 5))
    second = _file(3, ddl_at=(0, 1), rotate=False)
    _relay(tmp_path, [first, second])
    start, end = earliest(tmp_path), durable_end(tmp_path)

    def batches(run_rows: int) -> list[list[str]]:
        return _batch_kinds(tmp_path, ddl_run=64, run_rows=run_rows)

    # (The second "dml" segment of rows 6-7 holds the rotation and the next file's header.)
    assert batches(0) == [[DML], [DDL] * 3, [DML], [DDL], [DML, DML], [DDL] * 2, [DML]]
    # Rows never start a run, but a run takes those between its DDL; the rows after its last
    # DDL are a batch of their own (compacted, not a statement per row).
    assert batches(1 << 20) == [[DML], [DDL, DDL, DDL, DML, DDL, DML, DML, DDL, DDL], [DML]]
    # A budget smaller than a row transaction: the run stops before it, as without one.
    assert batches(10) == batches(0)
    # The GTIDs of a run with rows are every transaction's, in relay order.
    gtids: list[str] = []
    first_end, _ = next_batch(tmp_path, start, end, ddl_run=64)
    next_batch(tmp_path, first_end, end, ddl_run=64, run_rows=1 << 20, gtids=gtids)
    assert len(gtids) == 9


def test_a_run_of_ddl_leaves_the_rows_after_it(tmp_path: Path) -> None:
    # DDL at 1-2, then rows to the relay's end (a streaming sync's DDL, the writes after it
    # relayed already), or to the run's limit of DDL.
    _relay(tmp_path, [_file(6, ddl_at=(1, 2), rotate=False)])
    assert _batch_kinds(tmp_path, ddl_run=64, run_rows=1 << 20) == [[DML], [DDL] * 2, [DML]]
    assert _batch_kinds(tmp_path, ddl_run=2, run_rows=1 << 20) == [[DML], [DDL] * 2, [DML]]
    more = tmp_path / "more"
    _relay(more, [_file(6, ddl_at=(1, 2, 4), rotate=False)])
    assert _batch_kinds(more, ddl_run=2, run_rows=1 << 20) == [[DML], [DDL] * 2, [DML],
                                                               [DDL], [DML]]
    assert _batch_kinds(more, ddl_run=64, run_rows=1 << 20) == [[DML], [DDL, DDL, DML, DDL],
                                                                [DML]]


def test_byte_limit_keeps_at_least_one_transaction(tmp_path: Path) -> None:
    _relay(tmp_path, [_file(5, rotate=False)])
    start, end = earliest(tmp_path), durable_end(tmp_path)
    one = advance(tmp_path, start, end, max_bytes=1)
    assert start.sort_key < one.sort_key < end.sort_key


def test_partitions_are_transaction_aligned_and_tile_the_range(tmp_path: Path) -> None:
    first = _file(30, ddl_at=(7,))
    second = _file(30, rotate=False)
    _relay(tmp_path, [first, second])
    start, end = earliest(tmp_path), durable_end(tmp_path)
    parts = plan_partitions(tmp_path, start, end, target_bytes=1500)
    assert len(parts) > 4
    for f, b in (("mysql-bin.000001", first), ("mysql-bin.000002", second)):
        mine = [p for p in parts if p.file == f]
        cuts = {4, *b.boundaries}
        assert all(p.start in cuts and p.stop in cuts for p in mine)
        assert all(x.stop == y.start for x, y in itertools.pairwise(mine))
    assert [p.kind for p in parts].count(DDL) == 1


def test_a_torn_tail_of_a_finished_file_is_skipped(tmp_path: Path) -> None:
    first = _file(3, rotate=False, torn_tail=True)
    second = _file(2, rotate=False)
    _relay(tmp_path, [first, second])
    start, end = earliest(tmp_path), durable_end(tmp_path)
    assert advance(tmp_path, start, end) == end
    parts = plan_partitions(tmp_path, start, end)
    # The builder marked the cut transaction's end; the last whole one ends before it.
    assert max(p.stop for p in parts if p.file == "mysql-bin.000001") == first.boundaries[-2]


def test_transaction_ends_do_not_depend_on_read_sizes(tmp_path: Path, monkeypatch) -> None:
    """Events straddling read chunks (hopped over, or read whole) give the same ends."""
    import binrelay.relay.txnscan as txnscan

    b = _file(40, ddl_at=(5, 17, 31))
    _relay(tmp_path, [b])
    path = tmp_path / str(SUB) / "mysql-bin.000001"
    want = transaction_ends(path, 4, len(b.data))
    for chunk in (19, 20, 37, 64, 101, 333):
        monkeypatch.setattr(txnscan, "_CHUNK", chunk)
        assert transaction_ends(path, 4, len(b.data)) == want, chunk


def test_a_view_is_the_relay_dir_read_once(tmp_path: Path) -> None:
    _relay(tmp_path, [_file(2), _file(3, rotate=False)])
    view = RelayView(tmp_path)
    assert RelayView.of(view) is view and RelayView.of(tmp_path) is not view
    assert view.index == (SUB,) and view.earliest == Position(SUB, "mysql-bin.000001", 4)
    assert view.end == durable_end(tmp_path)
    assert (view.end.subdir, view.end.binlog_name) == (SUB, "mysql-bin.000002")
    planned = plan_partitions(view, view.earliest, view.end)
    # The relay writes on: a third file and relay.meta there.  The view does not move (a
    # plan made from it stays consistent); a new one sees the new end.
    (tmp_path / str(SUB) / "mysql-bin.000003").write_bytes(_file(1, rotate=False).bytes())
    write_meta(tmp_path / str(SUB), RelayMeta("mysql-bin.000003", 4, ""))
    assert view.files(SUB) == ["mysql-bin.000001", "mysql-bin.000002"]
    assert plan_partitions(view, view.earliest, view.end) == planned
    assert RelayView(tmp_path).end == Position(SUB, "mysql-bin.000003", 4)


def test_planning_reads_only_as_far_as_the_batch_goes(tmp_path: Path, monkeypatch) -> None:
    """A DDL-rich range planned batch by batch reads each byte of the relay about once: a
    batch that stops at a DDL does not scan the look-ahead window behind it (issue 14)."""
    import builtins

    import binrelay.relay.txnscan as txnscan
    from binrelay.spark.planning import next_batch

    ddl_at = tuple(range(0, 120, 3))  # a DDL every third transaction: 80 barrier batches
    files = [_file(120, ddl_at=ddl_at), _file(120, ddl_at=ddl_at, rotate=False)]
    _relay(tmp_path, files)
    chunk = 256
    monkeypatch.setattr(txnscan, "_CHUNK", chunk)
    read = [0]

    class Counting:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            data = self.f.read(n)
            read[0] += len(data)
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def counting_open(*args, **kwargs):
        return Counting(builtins.open(*args, **kwargs))  # Counting closes it

    monkeypatch.setattr(txnscan, "open", counting_open, raising=False)
    start, end = earliest(tmp_path), durable_end(tmp_path)
    pos, batches = start, 0
    while pos != end:
        pos, _segments = next_batch(tmp_path, pos, end, max_bytes=256 << 20)
        batches += 1
    total = sum(len(b.data) for b in files)
    assert batches >= 160
    # The whole range once, plus at most one read chunk and one event beyond each batch.
    biggest = max(e - s for b in files for s, e in itertools.pairwise([4, *b.boundaries]))
    assert read[0] <= total + batches * (chunk + biggest), (read[0], total, batches)


def test_relay_bytes_count_every_file_and_stop_past_the_limit(tmp_path: Path) -> None:
    files = make_relay_dir(tmp_path, [("0-1.000001", [3, 2, 4]), ("0-1.000002", [2])])
    view = RelayView(tmp_path)
    start = Position(SubdirName.parse("0-1.000001"), "mysql-bin.000001", 4)
    sizes = [len(data) - 4 for data in files.values()]
    assert relay_bytes(view, start, view.end) == sum(sizes)
    later = Position(SubdirName.parse("0-1.000001"), "mysql-bin.000002", 10)
    assert relay_bytes(view, later, view.end) == sum(sizes[1:]) - 6
    # Past the limit after the first file: the others are not looked at.
    assert relay_bytes(view, start, view.end, at_most=sizes[0] - 1) == sizes[0]
    assert relay_bytes(view, start, view.end, at_most=sum(sizes)) == sum(sizes)
