"""The catalog's write rules read again after a DDL for the tables it names only
(``catalog.reread_rules``) equal a read of the whole catalog (``read_rules``), after every
DDL kind that takes the narrow read, on a real server: generated columns, system
versioning (timestamp and transaction id), sequences, foreign keys added, dropped and
following a renamed parent, across schemas, with names quoted, keywords and ANSI quotes."""

from __future__ import annotations

import pytest

from binrelay.apply.catalog import NARROW_KINDS, TableRules, read_rules, reread_rules
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
]


def test_the_narrow_read_after_each_ddl_equals_a_full_read(mariadb) -> None:
    conn = mariadb.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')")
            for sql in SETUP:
                cur.execute(sql)
        rules = read_rules(conn, exclude_schemas=("binrelay",))
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
            full = read_rules(conn, exclude_schemas=("binrelay",))
            assert narrow == full, ddl
            rules = full
        assert seen == NARROW_KINDS
        # The rules moved with the DDL (the test would pass on rules that never change).
        assert TableRef("s1", "g2") in rules.generated
        assert TableRef("other", "trx") in rules.versioned_by_trx
        assert TableRef("s1", "select") in rules.versioned
        assert rules.group_of(TableRef("s1", "kid")) == rules.group_of(TableRef("s1", "child"))
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
            read_rules(conn, exclude_schemas=("binrelay",))
    finally:
        conn.close()


def test_a_narrow_read_of_nothing_keeps_the_rules(mariadb) -> None:
    conn = mariadb.connect(autocommit=True)
    try:
        rules = TableRules(max_allowed_packet=1234)
        assert reread_rules(conn, rules, [("CREATE TABLE nowhere.t (id INT)", None)]) == rules
    finally:
        conn.close()
