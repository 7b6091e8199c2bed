"""Whether the downstream may take two of the upstream's key values for one row
(``apply.key_collation.lenient_key``): a key column compared more leniently downstream
than upstream sends its table to be replayed in order."""

from __future__ import annotations

import pytest

from binrelay.apply.catalog import DownstreamColumn, TableColumns
from binrelay.apply.key_collation import lenient_key, loose_key, pads
from binrelay.rows import coltypes as t
from binrelay.rows.tablemap import COLUMN_CHARSET, COLUMN_NAME, SIGNEDNESS, Column, TableMap

GENERAL_CI, BIN, NOPAD_BIN, LATIN1_BIN, UNICODE_CI = 45, 46, 1070, 47, 224
MYSQL_0900_AI_CI, UCA1400_AI_CI, UCA1400_NOPAD_AI_CI = 255, 2304, 2308


def table_map(collation: int | None, *, logged: bool = True, name: str = "k",
              key: tuple[int, ...] = ()) -> TableMap:
    fields = (SIGNEDNESS, COLUMN_CHARSET, COLUMN_NAME) if logged else (SIGNEDNESS,)
    return TableMap(1, "app", "t", (
        Column(0, t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VARCHAR, 32, False, name=name,
               collation=collation),
        Column(1, t.MYSQL_TYPE_LONG, t.MYSQL_TYPE_LONG, 0, True, name="v")),
        primary_key=key, has_names=True, metadata_fields=fields)


def downstream(collation: str, collation_id: int | None, *, charset: str = "utf8mb4",
               unique: tuple[frozenset[str], ...] = (frozenset({"k"}),),
               data_type: str = "varchar") -> TableColumns:
    return TableColumns((
        DownstreamColumn("k", data_type, charset=charset, collation=collation,
                         collation_id=collation_id),
        DownstreamColumn("v", "int")), (0,), (0,), 0, unique)


@pytest.mark.parametrize("upstream, there, lenient", [
    # The same collation: the upstream's key is the downstream's.
    (GENERAL_CI, downstream("utf8mb4_general_ci", GENERAL_CI), False),
    # Case told apart upstream, not downstream: 'a' and 'A' would be one row.
    (BIN, downstream("utf8mb4_general_ci", GENERAL_CI), True),
    (BIN, downstream("utf8mb4_uca1400_ai_ci", UCA1400_AI_CI), True),
    # Stricter downstream: what the upstream keeps apart stays apart.
    (GENERAL_CI, downstream("utf8mb4_bin", BIN), False),
    (UNICODE_CI, downstream("utf8mb4_nopad_bin", NOPAD_BIN), False),
    (LATIN1_BIN, downstream("utf8mb4_bin", BIN), False),
    # Trailing spaces: NO PAD upstream, PAD SPACE downstream: 'a' and 'a ' would be one.
    (NOPAD_BIN, downstream("utf8mb4_bin", BIN), True),
    (MYSQL_0900_AI_CI, downstream("utf8mb4_bin", BIN), True),
    (UCA1400_NOPAD_AI_CI, downstream("utf8mb4_bin", BIN), True),
    (UCA1400_AI_CI, downstream("utf8mb4_bin", BIN), False),
    # Two lenient collations of their own (unicode_ci folds 'ß' and 'ss', general_ci not).
    (GENERAL_CI, downstream("utf8mb4_unicode_ci", UNICODE_CI), True),
    (MYSQL_0900_AI_CI, downstream("utf8mb4_general_ci", GENERAL_CI), True),
    # A downstream name the server's list lacks an id for: compared by its name.
    (GENERAL_CI, downstream("utf8mb4_general_ci", None), True),
    (GENERAL_CI, downstream("utf8mb4_bin", None), False),
    # Not in a unique key downstream: any collation.
    (BIN, downstream("utf8mb4_general_ci", GENERAL_CI, unique=()), False),
    (BIN, downstream("utf8mb4_general_ci", GENERAL_CI, unique=(frozenset({"v"}),)), False),
    # A key part on a prefix of the column compares the same way.
    (BIN, downstream("utf8mb4_general_ci", GENERAL_CI, unique=(frozenset({"k(4)"}),)), True),
    # ENUM values are written as their members' numbers.
    (BIN, downstream("utf8mb4_general_ci", GENERAL_CI, data_type="enum"), False),
])
def test_a_key_compared_more_leniently_downstream(upstream: int, there: TableColumns,
                                                  lenient: bool) -> None:
    why = lenient_key(table_map(upstream), there)
    assert (why is not None) == lenient, why
    if lenient:
        assert "'k'" in why and there.columns[0].collation in why


def test_the_upstream_key_counts_where_the_downstream_has_none_on_it() -> None:
    """Rows are deleted by the upstream's key before their INSERT when the downstream has
    no key within it: a lenient collation there deletes every row equal to the key."""
    for unique in ((), (frozenset({"v"}),)):
        there = downstream("utf8mb4_general_ci", GENERAL_CI, unique=unique)
        assert lenient_key(table_map(BIN, key=(0,)), there) is not None
        assert lenient_key(table_map(GENERAL_CI, key=(0,)), there) is None
        assert lenient_key(table_map(BIN), there) is None


def test_a_char_key_under_no_pad_fits_a_pad_bin_downstream() -> None:
    """A CHAR is stored without its trailing spaces: NO PAD upstream tells no two of its
    values apart that a PAD SPACE ``_bin`` downstream takes for one."""
    char = TableMap(1, "app", "t", (Column(0, t.MYSQL_TYPE_STRING, t.MYSQL_TYPE_STRING, 0,
                                           False, name="k", collation=NOPAD_BIN),),
                    has_names=True, metadata_fields=(COLUMN_CHARSET, COLUMN_NAME))
    assert lenient_key(char, downstream("utf8mb4_bin", BIN)) is None
    assert lenient_key(char, downstream("utf8mb4_general_ci", GENERAL_CI)) is not None


def test_collations_not_logged_are_taken_as_the_downstreams() -> None:
    there = downstream("utf8mb4_general_ci", GENERAL_CI)
    assert lenient_key(table_map(BIN, logged=False), there) is None
    assert lenient_key(table_map(None), there) is None


def test_a_column_the_table_map_does_not_log() -> None:
    there = downstream("utf8mb4_general_ci", GENERAL_CI)
    assert lenient_key(table_map(BIN, name="other"), there) is None


@pytest.mark.parametrize("collation_id, pad", [
    (GENERAL_CI, True), (BIN, True), (NOPAD_BIN, False), (1069, False), (MYSQL_0900_AI_CI,
                                                                         False),
    (323, False), (UCA1400_AI_CI, True), (UCA1400_NOPAD_AI_CI, False), (2312, True), (63, False),
    (5000, None)])
def test_pads(collation_id: int, pad: bool | None) -> None:
    assert pads(collation_id) is pad


@pytest.mark.parametrize("collation, charset, data_type, loose", [
    ("utf8mb4_general_ci", "utf8mb4", "varchar", True),
    ("utf8mb4_uca1400_ai_ci", "utf8mb4", "varchar", True),
    ("latin1_swedish_ci", "latin1", "char", True),
    # Exact, or trailing spaces only (which fold_key folds).
    ("utf8mb4_bin", "utf8mb4", "varchar", False),
    ("utf8mb4_nopad_bin", "utf8mb4", "varchar", False),
    (None, "binary", "varbinary", False),
    (None, None, "int", False),
    ("utf8mb4_general_ci", "utf8mb4", "enum", False),
    # -0 and 0 are one DOUBLE key.
    (None, None, "double", True),
    (None, None, "float", True),
])
def test_a_key_two_logged_values_may_be_one_of(collation: str | None, charset: str | None,
                                               data_type: str, loose: bool) -> None:
    info = TableColumns((DownstreamColumn("id", "int"),
                         DownstreamColumn("K", data_type, charset=charset,
                                          collation=collation)), (0, 1), (0, 0), 0,
                        (frozenset({"id", "k"}),))
    assert (loose_key(info, ("id", "k")) == "K") is loose
    assert loose_key(info, ("id",)) is None
