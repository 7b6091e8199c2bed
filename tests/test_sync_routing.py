"""How sync turns Spark rows into apply changes and routes them to tasks (no Spark)."""

from __future__ import annotations

from binrelay.apply.changes import ABSENT, TableRef
from binrelay.apply.plan import batch_ordered_tables, fold_key, partition_of
from binrelay.spark.changes import decode_image
from binrelay.spark.sync import route, row_changes

T = TableRef("db", "t")


def _row(op: str, before, after, key=(0,), pos=100, row=0) -> dict:
    def enc(image):
        if image is None:
            return None, None
        values, kinds = [], ""
        for v in image:
            if v is None:
                values.append(None)
                kinds += "n"
            elif v is ABSENT:
                values.append(None)
                kinds += "a"
            elif isinstance(v, int):
                values.append(str(v).encode())
                kinds += "i"
            else:
                values.append(v.encode())
                kinds += "s"
        return values, kinds

    b, bk = enc(before)
    a, ak = enc(after)
    return {"schema": "db", "table": "t", "columns": ["id", "v"], "key": list(key),
            "before": b, "before_kinds": bk, "after": a, "after_kinds": ak, "op": op,
            "subdir": "0-1.000002", "file": "mysql-bin.000003", "pos": pos, "row": row}


def test_images_decode_back_to_parameters() -> None:
    assert decode_image([b"1", None, b"x", None, b"\x00"], "insab") == (1, None, "x", ABSENT,
                                                                        b"\x00")


def test_an_update_that_moves_the_key_becomes_delete_and_insert() -> None:
    changes = list(row_changes(_row("update", (1, "a"), (2, "a"))))
    assert [c.op for c in changes] == ["delete", "insert"]
    assert changes[0].position < changes[1].position
    assert changes[0].position[:4] == (2, 3, 100, 0)
    same_key = list(row_changes(_row("update", (1, "a"), (1, "b"))))
    assert [c.op for c in same_key] == ["update"]
    partial = list(row_changes(_row("update", (1, "a"), (2, ABSENT))))
    assert [c.op for c in partial] == ["update"]  # a partial image cannot be re-inserted


def test_routing_keeps_folded_keys_and_ordered_tables_together() -> None:
    ins_a = next(row_changes(_row("insert", None, (1, "x"), key=(1,))))
    ins_b = next(row_changes(_row("insert", None, (2, "X"), key=(1,), pos=200)))
    assert route(ins_a, 8) == route(ins_b, 8) == partition_of(T, fold_key(("x",)), 8)
    assert route(ins_a, 8, frozenset({T})) == partition_of(T, (), 8)
    assert batch_ordered_tables([ins_a, ins_b]) == {T: batch_ordered_tables([ins_a, ins_b])[T]}
    keyless = next(row_changes(_row("insert", None, (1, "x"), key=())))
    assert route(keyless, 8) == partition_of(T, (), 8)
