"""How sync routes apply changes to tasks (no Spark)."""

from __future__ import annotations

from binrelay.apply.changes import ABSENT, Change, TableRef
from binrelay.apply.plan import batch_ordered_tables, fold_key, partition_of
from binrelay.spark.changes import decode_image
from binrelay.spark.sync import route

T = TableRef("db", "t")


def _insert(key: tuple[int, ...], values: tuple, pos: int) -> Change:
    return Change(T, "insert", ("id", "v"), key, None, values, (1, 3, pos, 0, 0))


def test_images_decode_back_to_parameters() -> None:
    assert decode_image([b"1", None, b"x", None, b"\x00"], "insab") == (1, None, "x", ABSENT,
                                                                        b"\x00")


def test_routing_keeps_folded_keys_and_ordered_tables_together() -> None:
    ins_a = _insert((1,), (1, "x"), 100)
    ins_b = _insert((1,), (2, "X"), 200)
    assert route(ins_a, 8) == route(ins_b, 8) == partition_of(T, fold_key(("x",)), 8)
    assert route(ins_a, 8, frozenset({T})) == partition_of(T, (), 8)
    assert T in batch_ordered_tables([ins_a, ins_b])  # 'x' and 'X' may be one key downstream
    keyless = _insert((), (1, "x"), 300)
    assert route(keyless, 8) == partition_of(T, (), 8)
