"""Table maps logged without column names, completed from the downstream's catalog
(``apply.positional.complete``): what the upstream logged wins, the rest comes from the
downstream's table, and a table that does not fit is refused."""

from __future__ import annotations

import pytest

from binrelay.apply.catalog import DownstreamColumn, TableColumns, TableRules
from binrelay.apply.changes import TableRef
from binrelay.apply.positional import complete
from binrelay.errors import NamelessRowsError, UnfaithfulApplyError
from binrelay.rows import coltypes as t
from binrelay.rows.tablemap import SIGNEDNESS, Column, TableMap

COLUMNS = (
    Column(0, t.MYSQL_TYPE_LONG, t.MYSQL_TYPE_LONG, 0, False),
    Column(1, t.MYSQL_TYPE_TINY, t.MYSQL_TYPE_TINY, 0, True),
    Column(2, t.MYSQL_TYPE_STRING, t.MYSQL_TYPE_STRING, 0, True, length=4),
    Column(3, t.MYSQL_TYPE_VARCHAR, t.MYSQL_TYPE_VARCHAR, 0, True, length=40),
)
DOWNSTREAM = TableColumns((
    DownstreamColumn("id", "int", True),
    DownstreamColumn("small", "tinyint", True),
    DownstreamColumn("k", "binary", False, "binary"),
    DownstreamColumn("name", "varchar", False, "latin1"),
    DownstreamColumn("extra", "int"),
), (0,), (0,))
RULES = TableRules(positional=True, columns={TableRef("app", "t"): DOWNSTREAM})


def nameless(**kwargs) -> TableMap:
    return TableMap(table_id=7, schema="app", table="t", columns=COLUMNS, **kwargs)


def test_names_signedness_charsets_and_key_come_from_the_downstream() -> None:
    tm = nameless()
    done = complete(tm, RULES)
    assert done.has_names and done.column_names == ("id", "small", "k", "name")
    assert [c.unsigned for c in done.columns] == [True, True, False, False]
    assert done.columns[2].is_binary and done.columns[3].charset == "latin1"
    assert done.primary_key == (0,)
    assert complete(tm, RULES) is done  # completed once, its decoders compiled once
    named = done
    assert complete(named, RULES) is named


def test_what_the_upstream_logged_wins() -> None:
    """MINIMAL logs signedness and charsets: the downstream's say nothing then."""
    cols = tuple(c if c.index != 3 else Column(3, c.type, c.binlog_type, 0, True, length=40,
                                               collation=33) for c in COLUMNS)
    tm = TableMap(table_id=8, schema="app", table="t", columns=cols,
                  metadata_fields=(SIGNEDNESS,), primary_key=(1,), primary_key_prefixes=(0,))
    signed = TableColumns((DownstreamColumn("id", "int"), DownstreamColumn("small", "tinyint"),
                           *DOWNSTREAM.columns[2:3],
                           DownstreamColumn("name", "varchar", False, "utf8mb4")), (0,), (0,))
    done = complete(tm, TableRules(positional=True, columns={TableRef("app", "t"): signed}))
    assert [c.unsigned for c in done.columns] == [False] * 4
    assert done.columns[3].charset == "utf8mb3"
    assert done.primary_key == (0,)  # a key is logged only with a key field: the downstream's
    keyed = TableMap(table_id=9, schema="app", table="t", columns=COLUMNS,
                     metadata_fields=(8,), primary_key=(1,), primary_key_prefixes=(0,))
    assert complete(keyed, RULES).primary_key == (1,)
    # Logged signed, UNSIGNED downstream: a negative value would be clipped to 0.
    with pytest.raises(UnfaithfulApplyError, match="UNSIGNED downstream"):
        complete(tm, RULES)


def test_a_sync_without_columns_reads_them_first() -> None:
    with pytest.raises(NamelessRowsError):
        complete(nameless(), TableRules())


@pytest.mark.parametrize("columns, said", [
    (DOWNSTREAM.columns[:3], "the upstream logged 4 columns without their names, the"
                             " downstream's table has 3"),
    ((DOWNSTREAM.columns[0], DownstreamColumn("small", "varchar"), *DOWNSTREAM.columns[2:]),
     "column 2 is TINYINT in the binlog, the downstream's column 'small' in that place is"
     " VARCHAR"),
    ((*DOWNSTREAM.columns[:3], DownstreamColumn("name", "text")),
     "column 4 is VARCHAR in the binlog, the downstream's column 'name' in that place is TEXT"),
    # Of its type, but narrower: 40 bytes of latin1 (read as the downstream's set).
    ((*DOWNSTREAM.columns[:3], DownstreamColumn("name", "varchar", False, "latin1",
                                                "varchar(39)", char_length=39)),
     r"column 'name' is varchar of 40 bytes in the binlog and varchar\(39\) downstream"
     r" \(narrower\)"),
])
def test_a_downstream_table_that_does_not_fit_is_refused(columns, said) -> None:
    rules = TableRules(positional=True,
                       columns={TableRef("app", "t"): TableColumns(tuple(columns))})
    with pytest.raises(UnfaithfulApplyError, match=said):
        complete(nameless(), rules)
    with pytest.raises(UnfaithfulApplyError, match="a table the downstream does not have"):
        complete(TableMap(table_id=7, schema="app", table="gone", columns=COLUMNS), rules)


def test_the_downstreams_own_columns_come_before_its_hidden_hashes() -> None:
    """The server keeps a long unique key's hidden hash last, after a column only the
    downstream has: the logged hash pairs with the downstream's hash, not that column."""
    logged = (*COLUMNS[:2], Column(2, t.MYSQL_TYPE_LONGLONG, t.MYSQL_TYPE_LONGLONG, 0, True))
    info = TableColumns((DownstreamColumn("id", "int"), DownstreamColumn("small", "tinyint"),
                         DownstreamColumn("extra", "varchar"),
                         DownstreamColumn("DB_ROW_HASH_1", "bigint")), (0,), (0,), hashes=1)
    rules = TableRules(positional=True, columns={TableRef("app", "h"): info},
                       hashes={TableRef("app", "h"): 1})
    done = complete(TableMap(table_id=3, schema="app", table="h", columns=logged), rules)
    assert done.column_names == ("id", "small", "DB_ROW_HASH_1")
    assert rules.writable(TableRef("app", "h"), done.column_names) == (0, 1)


def test_a_long_unique_key_only_downstream_leaves_the_logged_columns_in_place() -> None:
    """The binlog logs no hash where the upstream has no long unique key: the logged
    columns pair with the downstream's in order, its hash left over (after them)."""
    info = TableColumns((*DOWNSTREAM.columns[:4], DownstreamColumn("DB_ROW_HASH_1", "bigint")),
                        (0,), (0,), hashes=1)
    rules = TableRules(positional=True, columns={TableRef("app", "t"): info})
    done = complete(TableMap(table_id=11, schema="app", table="t", columns=COLUMNS), rules)
    assert done.column_names == ("id", "small", "k", "name") and done.primary_key == (0,)


def test_bigint_columns_that_may_be_hashes_or_columns_are_refused() -> None:
    """The downstream has a column more and a long unique key; the binlog's last column is
    a BIGINT: the upstream's hash, or a column of its own where it has no such key.  Either
    reading fits the types: the sync stops rather than drop the value of one."""
    logged = (*COLUMNS[:2], Column(2, t.MYSQL_TYPE_LONGLONG, t.MYSQL_TYPE_LONGLONG, 0, True))
    info = TableColumns((DownstreamColumn("id", "int"), DownstreamColumn("small", "tinyint"),
                         DownstreamColumn("big", "bigint"),
                         DownstreamColumn("DB_ROW_HASH_1", "bigint")), (0,), (0,), hashes=1)
    rules = TableRules(positional=True, columns={TableRef("app", "b"): info})
    with pytest.raises(UnfaithfulApplyError, match="may be the upstream's long unique keys"):
        complete(TableMap(table_id=12, schema="app", table="b", columns=logged), rules)
