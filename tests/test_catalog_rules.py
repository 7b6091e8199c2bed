"""The catalog's write rules read again after a DDL for the tables it names only
(``catalog.reread_rules``) equal a read of the whole catalog (``read_rules``), after every
DDL kind that takes the narrow read, on a real server: generated columns, system
versioning (timestamp and transaction id), sequences, foreign keys added, dropped and
following a renamed parent, across schemas, with names quoted, keywords and ANSI quotes."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from binrelay.apply.catalog import (
    NARROW_KINDS,
    DownstreamColumn,
    TableColumns,
    TableRules,
    _members,
    keeps_rules,
    leaves_rules,
    read_rules,
    reread_rules,
)
from binrelay.apply.changes import TableRef
from binrelay.apply.sql import ddl_kind

pytestmark = pytest.mark.server

SETUP = [
    "CREATE DATABASE s1",
    "CREATE DATABASE s2",
    "CREATE DATABASE other",
    "CREATE TABLE s1.parent (id INT PRIMARY KEY)",
    "CREATE TABLE s1.child (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES s1.parent (id))",
    "CREATE TABLE s2.grandchild (id INT PRIMARY KEY, c INT,"
    " FOREIGN KEY (c) REFERENCES s1.child (id) ON DELETE CASCADE)",
    "CREATE TABLE other.g (a INT PRIMARY KEY, b INT AS (a * 2) STORED)",
    "CREATE SEQUENCE other.seq",
    "CREATE TABLE other.v (id INT PRIMARY KEY) WITH SYSTEM VERSIONING",
    # Made with foreign key checks off: it references a table not yet there.
    "SET foreign_key_checks = 0",
    "CREATE TABLE s1.early (id INT PRIMARY KEY, l INT, FOREIGN KEY (l) REFERENCES s1.later (id))",
    "SET foreign_key_checks = 1",
]

# (default schema, DDL): each of the kinds that take the narrow read, in every shape whose
# effect reaches past its own words: renamed parents, cross-schema moves, FKs both ways.
STEPS = [
    ("s1", "CREATE TABLE t1 (id INT PRIMARY KEY, x INT, y INT AS (x + 1) VIRTUAL)"),
    ("s1", "CREATE TABLE later (id INT PRIMARY KEY)"),
    ("s1", "ALTER TABLE t1 ADD COLUMN z INT AS (x * 3) PERSISTENT, DROP COLUMN y"),
    ("s1", "ALTER TABLE t1 ADD CONSTRAINT fk_t1 FOREIGN KEY (x) REFERENCES parent (id)"),
    ("s1", "RENAME TABLE parent TO parent2"),
    ("s2", "RENAME TABLE s1.parent2 TO s2.parent, s1.child TO s2.`child 2`"),
    ("s1", "ALTER TABLE t1 DROP FOREIGN KEY fk_t1"),
    ("s2", "ALTER TABLE `child 2` RENAME TO s1.child"),
    ("s1", "CREATE TABLE `select` LIKE other.g"),
    ("s1", 'CREATE TABLE "ansi" (id INT PRIMARY KEY) WITH SYSTEM VERSIONING'),
    ("s1", "ALTER TABLE `select` ADD SYSTEM VERSIONING"),
    ("s1", "ALTER TABLE ansi DROP SYSTEM VERSIONING"),
    ("other", "CREATE TABLE trx (id INT PRIMARY KEY, s BIGINT UNSIGNED AS ROW START INVISIBLE,"
              " e BIGINT UNSIGNED AS ROW END INVISIBLE, PERIOD FOR SYSTEM_TIME (s, e))"
              " ENGINE=InnoDB WITH SYSTEM VERSIONING"),
    ("other", "ALTER TABLE g RENAME TO s1.g2"),
    ("s1", "CREATE TABLE IF NOT EXISTS t1 (id INT)"),
    ("s2", "CREATE TABLE s1.kid (id INT PRIMARY KEY, g INT,"
           " FOREIGN KEY (g) REFERENCES s2.grandchild (id))"),
    ("s2", "RENAME TABLE grandchild TO gc, gc TO grandchild2"),
    (None, "CREATE TABLE other.plain (id INT PRIMARY KEY)"),
    # Long unique keys (a hidden hash column each), made and dropped by index DDL too.
    ("s1", "CREATE TABLE lu (id INT PRIMARY KEY, b BLOB, t TEXT, UNIQUE (b))"),
    ("s1", "CREATE UNIQUE INDEX ut ON lu (t)"),
    ("s1", "DROP INDEX ut ON lu"),
    ("s1", "CREATE INDEX plain ON lu (id, b(8))"),
    ("s1", "DROP INDEX `PRIMARY` ON lu"),
    ("other", "CREATE TABLE mem (id INT, u VARCHAR(10), UNIQUE (u)) ENGINE=MEMORY"),
]


@pytest.mark.parametrize("positional", [False, True], ids=["by-name", "positional"])
def test_the_narrow_read_after_each_ddl_equals_a_full_read(mariadb, positional: bool) -> None:
    """(The rules hold every table's columns and primary key, which ``positional`` names
    rows logged without column names by.)"""
    conn = mariadb.connect(autocommit=True)
    read = partial(read_rules, positional=positional)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')")
            for sql in SETUP:
                cur.execute(sql)
        rules = read(conn, exclude_schemas=("binrelay",))
        assert rules.columns and rules.positional is positional
        assert rules.fk_group and rules.generated and rules.versioned and rules.sequences
        assert (TableRef("s1", "early"), TableRef("s1", "later")) in rules.links
        seen: set[str] = set()
        for schema, ddl in STEPS:
            kind = ddl_kind(ddl).name
            assert kind in NARROW_KINDS, ddl
            seen.add(kind)
            with conn.cursor() as cur:
                cur.execute("USE " + (schema or "mysql"))
                cur.execute(ddl)
            narrow = reread_rules(conn, rules, [(ddl, schema)], exclude_schemas=("binrelay",))
            full = read(conn, exclude_schemas=("binrelay",))
            assert narrow == full, ddl
            rules = full
        assert seen == NARROW_KINDS
        # The rules moved with the DDL (the test would pass on rules that never change).
        assert TableRef("s1", "g2") in rules.generated
        assert TableRef("other", "trx") in rules.versioned_by_trx
        assert TableRef("s1", "select") in rules.versioned
        assert rules.group_of(TableRef("s1", "kid")) == rules.group_of(TableRef("s1", "child"))
        g2 = rules.columns_of(TableRef("S1", "G2"))
        assert g2 == TableColumns(
            (DownstreamColumn("a", "int", column_type="int(11)", precision=10, scale=0,
                              nullable=False),
             DownstreamColumn("b", "int", column_type="int(11)", precision=10, scale=0,
                              generated=True)), (0,), (0,), unique=(frozenset({"a"}),),
            innodb=True)
        # An implicit period's columns, invisible to the catalog, follow the others.
        assert [c.name for c in rules.columns[TableRef("s1", "select")].columns] == \
            ["a", "b", "row_start", "row_end"]
        assert TableRef("s1", "t1") in rules.columns
        assert [c.name for c in rules.columns[TableRef("s1", "lu")].columns] == \
            ["id", "b", "t", "DB_ROW_HASH_1"]
        assert rules.columns[TableRef("s1", "lu")].primary_key == ()
        assert rules.hashes == {TableRef("s1", "lu"): 1}
        assert rules.writable(TableRef("s1", "lu"), ("id", "b", "t", "DB_ROW_HASH_1")) == \
            (0, 1, 2)
        # Several DDL read again at once, from rules read before all of them.
        before = rules
        ddls = [("s1", "CREATE TABLE m1 (id INT PRIMARY KEY, g INT AS (id) STORED)"),
                ("s1", "RENAME TABLE m1 TO m2"),
                ("s1", "ALTER TABLE m2 ADD FOREIGN KEY (id) REFERENCES later (id)")]
        with conn.cursor() as cur:
            cur.execute("USE s1")
            for _schema, ddl in ddls:
                cur.execute(ddl)
        assert reread_rules(conn, before, [(ddl, schema) for schema, ddl in ddls],
                                  exclude_schemas=("binrelay",)) == \
            read(conn, exclude_schemas=("binrelay",))
    finally:
        conn.close()


def test_a_narrow_read_of_nothing_keeps_the_rules(mariadb) -> None:
    conn = mariadb.connect(autocommit=True)
    try:
        rules = TableRules(max_allowed_packet=1234)
        assert reread_rules(conn, rules, [("CREATE TABLE nowhere.t (id INT)", None)]) == rules
    finally:
        conn.close()


# (default schema, DDL, whether the rules before it stay exact: no read needed).
PLAIN = [
    ("s1", "CREATE TABLE p1 (id INT PRIMARY KEY, v DATETIME COMMENT 'AS x, CHAR') ENGINE=InnoDB",
     True),
    # Text or floating point columns: a key of them may fold (key_collation), read.
    ("s1", "CREATE TABLE p0 (k VARCHAR(9) PRIMARY KEY, v INT)", False),
    ("s1", "CREATE TABLE p01 (k INT PRIMARY KEY, d DOUBLE)", False),
    ("s1", "CREATE TABLE `p 2` (id INT, KEY (id)) /* AS (1) */ COMMENT 'GENERATED'", True),
    ("s2", "CREATE TABLE s1.p3 (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY)", True),
    ("s1", "ALTER TABLE p1 ADD COLUMN w INT DEFAULT 3, ADD INDEX iw (w)", True),
    ("s1", "ALTER TABLE `p 2` ADD COLUMN `as` INT AFTER id", True),
    ("s1", "ALTER TABLE p1 ADD COLUMN g INT AS (w + 1) VIRTUAL", False),
    ("s1", "ALTER TABLE p1 ADD COLUMN x INT, DROP COLUMN g", False),
    ("s1", "ALTER TABLE p1 ADD COLUMN y INT, ADD FOREIGN KEY (y) REFERENCES parent (id)", False),
    ("s1", "ALTER TABLE p1 ADD COLUMN z INT, RENAME TO p4", False),
    ("s1", "CREATE TABLE q1 (a INT, b INT GENERATED ALWAYS AS (a) STORED)", False),
    ("s1", "CREATE TABLE q2 (a INT PRIMARY KEY) WITH SYSTEM VERSIONING", False),
    ("s1", "CREATE TABLE q3 (a INT, FOREIGN KEY (a) REFERENCES parent (id))", False),
    ("s1", "CREATE TABLE q4 LIKE other.g", False),
    ("s1", "CREATE TABLE q5 SELECT 1 AS a", False),
    ("s1", "CREATE TABLE IF NOT EXISTS q6 (a INT)", False),
    ("s1", "CREATE TABLE q7 (next_not_cached_value BIGINT(21) NOT NULL, minimum_value"
           " BIGINT(21) NOT NULL, maximum_value BIGINT(21) NOT NULL, start_value BIGINT(21)"
           " NOT NULL, increment BIGINT(21) NOT NULL, cache_size BIGINT(21) UNSIGNED NOT"
           " NULL, cycle_option TINYINT(1) UNSIGNED NOT NULL, cycle_count BIGINT(21) NOT"
           " NULL) sequence=1", False),
    ("s1", "ALTER TABLE s1.p4 ADD COLUMN v2 INT", True),
    ("s1", "ALTER TABLE `s1` . `p4` ADD COLUMN v3 INT", True),
    # Tables the rules know the columns of: read again (their columns follow the name).
    ("s1", "RENAME TABLE s1.p3 TO s2.p3, `p 2` TO p6", False),
    # Rules follow a renamed table: a known one (or a known name) is read again.
    ("s1", "RENAME TABLE p4 TO p5", False),  # its foreign key, added above
    ("s1", "RENAME TABLE p5 TO p4", False),
    ("other", "RENAME TABLE v TO v2", False),
    ("s1", "RENAME TABLE child TO child9", False),
    # The name of a table whose rules were kept after its DROP: read again.
    ("other", "DROP TABLE g", True),
    ("other", "CREATE TABLE g (a INT PRIMARY KEY, b INT)", False),
    # Names the words of which a plain reading would take for others.
    ("s1", 'CREATE TABLE "ansi2" (a INT)', False),
    ("s1", "ALTER TABLE p4 ADD COLUMN u VARCHAR(9) DEFAULT '\\\\', DROP COLUMN w", False),
    # A unique key may be a long one, with a hidden column.
    ("s1", "CREATE TABLE p9 (id INT PRIMARY KEY, b BLOB, UNIQUE (b))", False),
    ("s1", "CREATE INDEX pi ON p9 (id)", True),
    ("s1", "CREATE UNIQUE INDEX pu ON p9 (b(20), id)", False),
]


def test_what_a_plain_ddl_leaves_the_rules(mariadb) -> None:
    """Each DDL said to leave the rules as they are does (a whole read after it equals
    the rules before it, but for the columns it adds); the others are read again."""
    conn = mariadb.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            for sql in SETUP:
                cur.execute(sql)
        rules = read_rules(conn, exclude_schemas=("binrelay",))
        for schema, ddl, expected in PLAIN:
            left = leaves_rules(rules, ddl, schema) or keeps_rules(ddl)
            assert left is expected, ddl
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')"
                            if '"' in ddl else "SET SESSION sql_mode = DEFAULT")
                cur.execute("USE " + schema)
                cur.execute(ddl)
            after = read_rules(conn, exclude_schemas=("binrelay",))
            if left and ddl_kind(ddl).name != "drop table":
                assert replace(after, columns={}) == replace(rules, columns={}), ddl
                # The columns the rules hold stay true (a table made, a column added, are
                # not there: they are the upstream's own, by the DDL replayed).
                for ref, held in rules.columns.items():
                    now = after.columns.get(ref)
                    assert now is None or (set(held.columns) <= set(now.columns)
                                           and held.primary_key == now.primary_key), ddl
            elif not left:
                rules = after
    finally:
        conn.close()


def test_rules_with_columns_are_read_again_after_every_ddl_that_changes_them() -> None:
    """Rules holding the tables' columns (rows logged without names) are read again after a
    DDL that adds, moves or renames a column or table; other rules stay after those.  Any
    rules are read again after a DROP INDEX and a change of engine."""
    positional = TableRules(positional=True)
    for ddl in ("CREATE TABLE s1.new (id INT)", "ALTER TABLE s1.t ADD COLUMN c INT",
                "RENAME TABLE s1.a TO s1.b"):
        assert leaves_rules(TableRules(), ddl, "s1")
        assert not leaves_rules(positional, ddl, "s1")
    # A DROP INDEX may take a primary key or a long unique key's hidden column away.
    assert not keeps_rules("DROP INDEX `PRIMARY` ON s1.t")
    assert keeps_rules("TRUNCATE s1.t")
    # An engine's key length limit makes or unmakes long unique keys.
    assert not leaves_rules(TableRules(), "ALTER TABLE s1.t ADD COLUMN x INT, ENGINE=MyISAM",
                            "s1")


def test_enum_members_as_column_type_spells_them() -> None:
    assert _members("enum('a','it''s','b\\\\c','x\\ny','',',')") == \
        ("a", "it's", "b\\c", "x\ny", "", ",")


def test_a_replace_is_unsafe_where_a_downstream_unique_key_lacks_a_key_column() -> None:
    def rules(*unique: set[str]) -> TableRules:
        info = TableColumns((), unique=tuple(frozenset(k) for k in unique))
        return TableRules(columns={TableRef("App", "Users"): info})
    assert not rules({"id"}).replace_unsafe(TableRef("App", "Users"), ("ID",))
    assert not rules({"id"}, {"id", "email"}).replace_unsafe(TableRef("App", "Users"), ("id",))
    assert rules({"id"}, {"email"}).replace_unsafe(TableRef("App", "Users"), ("id",))
    # Found in any spelling (a downstream with lower_case_table_names).
    assert rules({"id"}, {"email"}).replace_unsafe(TableRef("app", "users"), ("id",))
    # A narrower primary key, or one on a prefix of the key's column.
    assert rules({"id"}).replace_unsafe(TableRef("App", "Users"), ("id", "region"))
    assert rules({"name(10)"}).replace_unsafe(TableRef("App", "Users"), ("name",))
    # No key downstream, or a wider one: a REPLACE would keep the row's old version.
    assert rules().replace_unsafe(TableRef("App", "Users"), ("id",))
    assert rules({"id", "region"}).replace_unsafe(TableRef("App", "Users"), ("id",))
    assert not rules({"id", "region"}).replace_unsafe(TableRef("App", "Users"),
                                                      ("region", "id"))
    assert not TableRules().replace_unsafe(TableRef("App", "Users"), ("id",))


def test_rules_read_again_after_a_create_table_read_alike() -> None:
    """A read stage made before a DDL serves after it when the rules read again only know
    the columns of a table the DDL made, with one unique key at most."""
    old = TableRules(columns={TableRef("s", "a"): TableColumns((), unique=(frozenset({"id"}),))})
    made = TableColumns((), unique=(frozenset({"id"}),))
    assert old.reads_alike(old)
    assert old.reads_alike(replace(old, columns={**old.columns, TableRef("s", "b"): made}))
    two_keys = TableColumns((), unique=(frozenset({"id"}), frozenset({"email"})))
    assert not old.reads_alike(replace(old, columns={**old.columns,
                                                     TableRef("s", "b"): two_keys}))
    assert not old.reads_alike(replace(old, columns={TableRef("s", "a"): two_keys}))
    assert not old.reads_alike(replace(old, columns={}))
    assert not old.reads_alike(replace(old, positional=True))
    # A key a collation may compare loosely: routed to one task while the rules knew
    # nothing of the table, by its collation now.
    for data_type, key in (("varchar", "k"), ("double", "k"), ("varchar", "k(4)"),
                           ("uuid", "k"), ("inet6", "k"), ("binary", "k")):
        text = TableColumns((DownstreamColumn("id", "int"), DownstreamColumn("k", data_type)),
                            unique=(frozenset({"id", key}),))
        assert not old.reads_alike(replace(old, columns={**old.columns,
                                                         TableRef("s", "b"): text}))
    not_keyed = TableColumns((DownstreamColumn("id", "int"), DownstreamColumn("k", "varchar")),
                             unique=(frozenset({"id"}),))
    assert old.reads_alike(replace(old, columns={**old.columns, TableRef("s", "b"): not_keyed}))
    # By position a new table's columns name its rows.
    by_position = replace(old, positional=True)
    assert not by_position.reads_alike(replace(by_position, columns={
        **old.columns, TableRef("s", "b"): made}))


def test_text_columns_carry_their_collation_and_the_id_a_table_map_logs(mariadb) -> None:
    """Names as the column shows them (MariaDB 10.10+ spells its UCA 14 ones in full, with
    ids of their own), ids as the server numbers them; none for other types."""
    conn = mariadb.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE coll")
            cur.execute("CREATE TABLE coll.t (a VARCHAR(4) COLLATE utf8mb4_bin PRIMARY KEY,"
                        " b CHAR(2) COLLATE latin1_swedish_ci, c TEXT COLLATE"
                        " utf8mb4_uca1400_nopad_ai_ci, d VARBINARY(4), e INT)")
            cur.execute("SELECT FULL_COLLATION_NAME, ID FROM"
                        " information_schema.COLLATION_CHARACTER_SET_APPLICABILITY")
            ids = dict(cur.fetchall())
        rules = read_rules(conn, exclude_schemas=("binrelay",))
        info = rules.columns_of(TableRef("coll", "t"))
        assert info is not None
        got = [(c.name, c.collation, c.collation_id) for c in info.columns]
        assert got == [("a", "utf8mb4_bin", 46), ("b", "latin1_swedish_ci", 8),
                       ("c", "utf8mb4_uca1400_nopad_ai_ci",
                        ids["utf8mb4_uca1400_nopad_ai_ci"]),
                       ("d", None, None), ("e", None, None)]
        assert ids["utf8mb4_uca1400_nopad_ai_ci"] >= 2048
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS coll")
        conn.close()
