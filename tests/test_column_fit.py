"""Whether a downstream column holds every value a logged column can carry
(``apply.column_fit.misfit``): the same type or a wider one of its kind fits, a narrower one,
another type, another character set that cannot hold the text, do not."""

from __future__ import annotations

import pytest

from binrelay.apply.catalog import DownstreamColumn
from binrelay.apply.column_fit import misfit, upstream_type
from binrelay.rows import coltypes as t
from binrelay.rows import temporal
from binrelay.rows.tablemap import Column

LATIN1, UTF8MB3, UTF8MB4, BINARY, GBK = 8, 33, 45, 63, 28


def col(kind: int, *, nullable: bool = True, **kw) -> Column:
    return Column(0, kind, kind, 0, nullable, name="c", **kw)


def down(data_type: str, column_type: str = "", **kw) -> DownstreamColumn:
    return DownstreamColumn("c", data_type, column_type=column_type or data_type, **kw)


INT = col(t.MYSQL_TYPE_LONG)
UINT = col(t.MYSQL_TYPE_LONG, unsigned=True)


@pytest.mark.parametrize("logged, there, why", [
    # Integers: wider fits, narrower does not; UNSIGNED into signed needs a byte more.
    (INT, down("int"), None),
    (INT, down("bigint"), None),
    (INT, down("tinyint"), "narrower"),
    (INT, down("int", unsigned=True), "UNSIGNED downstream"),
    (UINT, down("int"), "narrower"),
    (UINT, down("bigint"), None),
    (UINT, down("int", unsigned=True), None),
    (INT, down("decimal", precision=20, scale=0), "another type"),
    # The map's null bit says "may be NULL here" (an outer join's inner table): values
    # are checked instead (test_fidelity).
    (INT, down("int", nullable=False), None),
    (INT, down("varchar", char_length=20), "another type"),
    # DECIMAL: digits on either side of the point.
    (col(t.MYSQL_TYPE_NEWDECIMAL, precision=10, scale=4), down("decimal", precision=12, scale=4),
     None),
    (col(t.MYSQL_TYPE_NEWDECIMAL, precision=10, scale=4), down("decimal", precision=10, scale=2),
     "after the point"),
    (col(t.MYSQL_TYPE_NEWDECIMAL, precision=10, scale=4), down("decimal", precision=9, scale=4),
     "before the point"),
    (col(t.MYSQL_TYPE_FLOAT), down("double"), None),
    (col(t.MYSQL_TYPE_DOUBLE), down("float"), "another type"),
    (col(t.MYSQL_TYPE_DOUBLE), down("double", unsigned=True), "UNSIGNED downstream"),
    (col(t.MYSQL_TYPE_JSON, length=4), down("varchar", char_length=5), "another type"),
    (col(t.MYSQL_TYPE_JSON, length=4), down("json"), None),
    (col(t.MYSQL_TYPE_GEOMETRY, length=4), down("blob"), "another type"),
    (col(t.MYSQL_TYPE_BIT, bits=9), down("bit", precision=8), "narrower"),
    (col(t.MYSQL_TYPE_BIT, bits=9), down("bit", precision=64), None),
    # Temporal types: their fractional digits.
    (col(t.MYSQL_TYPE_DATETIME2, fsp=6), down("datetime", fsp=3), "fractional"),
    (col(t.MYSQL_TYPE_DATETIME2, fsp=3), down("datetime", fsp=6), None),
    (col(t.MYSQL_TYPE_TIMESTAMP2, fsp=0), down("datetime", fsp=0), "another type"),
    (col(t.MYSQL_TYPE_TIME, fsp=0), down("time", fsp=0), None),
    # The pre-5.6 format has no fractional digits; MariaDB 5.3-10.0's columns with them log
    # its type code in a layout of their own: a downstream column with fractions stops.
    (col(t.MYSQL_TYPE_DATETIME), down("datetime", fsp=0), None),
    (col(t.MYSQL_TYPE_DATETIME), down("datetime", fsp=6), "pre-5.6 format"),
    (col(t.MYSQL_TYPE_TIME), down("time", fsp=3), "pre-5.6 format"),
    (col(t.MYSQL_TYPE_TIMESTAMP), down("timestamp", fsp=6), "pre-5.6 format"),
    (col(t.MYSQL_TYPE_DATE), down("datetime"), "another type"),
    # ENUM and SET: every logged member (values are written by name).
    (col(t.MYSQL_TYPE_ENUM, enum_values=("a", "b")), down("enum", members=("b", "a", "c")),
     None),
    (col(t.MYSQL_TYPE_ENUM, enum_values=("a", "it's")), down("enum", members=("a",)),
     "no member \"it's\""),
    (col(t.MYSQL_TYPE_SET, set_values=("x",)), down("set", members=("X",)), "no member 'x'"),
    (col(t.MYSQL_TYPE_ENUM), down("enum", members=("a",)), None),  # an index: not checked
    # CHAR and VARCHAR count characters, the table map bytes.
    (col(t.MYSQL_TYPE_VARCHAR, length=80, collation=UTF8MB4),
     down("varchar", charset="utf8mb4", char_length=20), None),
    (col(t.MYSQL_TYPE_VARCHAR, length=80, collation=UTF8MB4),
     down("varchar", charset="utf8mb4", char_length=19), "narrower"),
    (col(t.MYSQL_TYPE_VARCHAR, length=60, collation=UTF8MB3),
     down("varchar", charset="utf8mb4", char_length=20), None),
    (col(t.MYSQL_TYPE_VARCHAR, length=20, collation=LATIN1),
     down("varchar", charset="utf8mb4", char_length=20), None),
    (col(t.MYSQL_TYPE_VARCHAR, length=80, collation=UTF8MB4),
     down("varchar", charset="latin1", char_length=80), "utf8mb4 upstream, latin1 downstream"),
    # gbk, sjis, cp932... travel as their bytes: into a column of their own set only.
    (col(t.MYSQL_TYPE_VARCHAR, length=40, collation=GBK),
     down("varchar", charset="gbk", char_length=20), None),
    (col(t.MYSQL_TYPE_VARCHAR, length=40, collation=GBK),
     down("varchar", charset="utf8mb4", char_length=20), "writes gbk values as their bytes"),
    (col(t.MYSQL_TYPE_VARCHAR, length=20, collation=BINARY),
     down("varchar", charset="latin1", char_length=20), "bytes upstream, text downstream"),
    (col(t.MYSQL_TYPE_STRING, length=20, collation=LATIN1),
     down("binary", charset="binary", char_length=20), "text upstream, bytes downstream"),
    (col(t.MYSQL_TYPE_STRING, length=16, collation=BINARY),
     down("binary", charset="binary", char_length=16), None),
    # Not logged: read as the downstream's set, so its bytes count.
    (col(t.MYSQL_TYPE_VARCHAR, length=40), down("varchar", charset="utf8mb4", char_length=10),
     None),
    (col(t.MYSQL_TYPE_VARCHAR, length=40), down("varchar", charset="utf8mb4", char_length=9),
     "narrower"),
    (col(t.MYSQL_TYPE_STRING, length=16, collation=BINARY), down("inet6"), None),
    (col(t.MYSQL_TYPE_STRING, length=4, collation=BINARY), down("inet4"), None),
    (col(t.MYSQL_TYPE_STRING, length=40, collation=LATIN1), down("inet6"), "another type"),
    (col(t.MYSQL_TYPE_STRING, length=16, collation=LATIN1), down("uuid"), "another type"),
    (col(t.MYSQL_TYPE_VARCHAR, length=16, collation=BINARY), down("uuid"), "another type"),
    # CHAR into VARCHAR keeps the value as read; VARCHAR into CHAR drops trailing spaces,
    # VARBINARY into BINARY pads with zeros.
    (col(t.MYSQL_TYPE_STRING, length=20, collation=LATIN1),
     down("varchar", charset="latin1", char_length=20), None),
    (col(t.MYSQL_TYPE_VARCHAR, length=20, collation=LATIN1),
     down("char", charset="latin1", char_length=20), "another type"),
    (col(t.MYSQL_TYPE_VARCHAR, length=20, collation=BINARY),
     down("binary", charset="binary", char_length=20), "another type"),
    # A character set without supplementary characters into a BMP one; not utf8mb4.
    (col(t.MYSQL_TYPE_VARCHAR, length=20, collation=LATIN1),
     down("varchar", charset="utf8mb3", char_length=20), None),
    (col(t.MYSQL_TYPE_VARCHAR, length=80, collation=UTF8MB4),
     down("varchar", charset="utf8mb3", char_length=20), "utf8mb4 upstream, utf8mb3"),
    # A collation binrelay does not know: its bytes pass as the downstream's set's.
    (col(t.MYSQL_TYPE_VARCHAR, length=20, collation=1124),
     down("varchar", charset="latin1", char_length=20), None),
    # TEXT and BLOB count bytes.
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=UTF8MB4),
     down("text", charset="utf8mb4", octet_length=65535), None),
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=UTF8MB4),
     down("tinytext", charset="utf8mb4", octet_length=255), "narrower"),
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=LATIN1),
     down("text", charset="utf8mb4", octet_length=65535), "narrower"),
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=LATIN1),
     down("mediumtext", charset="utf8mb4", octet_length=16777215), None),
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=UTF8MB3),
     down("text", charset="utf8mb4", octet_length=65535), None),
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=11),  # ascii: its bytes, twice in utf16
     down("text", charset="utf16", octet_length=65535), "narrower"),
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=11),
     down("text", charset="latin1", octet_length=65535), None),
    (col(t.MYSQL_TYPE_BLOB, length=4, collation=BINARY),
     down("longtext", charset="utf8mb4", octet_length=4294967295), "bytes upstream"),
    (col(t.MYSQL_TYPE_BLOB, length=4, collation=UTF8MB4), down("json"), None),
    (col(t.MYSQL_TYPE_BLOB, length=2, collation=UTF8MB4), down("varchar", char_length=9),
     "another type"),
    # Never written: the downstream computes it.
    (INT, down("tinyint", generated=True), None),
])
def test_misfit(logged: Column, there: DownstreamColumn, why: str | None) -> None:
    found = misfit(logged, there, signedness_logged=True)
    if why is None:
        assert found is None
    else:
        assert found is not None and why in found


def test_signedness_not_logged_takes_the_downstreams() -> None:
    assert misfit(INT, down("int", unsigned=True), signedness_logged=False) is None
    assert misfit(INT, down("smallint", unsigned=True), signedness_logged=False) == "narrower"


@pytest.mark.parametrize("logged, said", [
    (UINT, "int unsigned"),
    (col(t.MYSQL_TYPE_NEWDECIMAL, precision=10, scale=4), "decimal(10,4)"),
    (col(t.MYSQL_TYPE_VARCHAR, length=80, collation=UTF8MB4),
     "varchar(20) character set utf8mb4"),
    (col(t.MYSQL_TYPE_VARCHAR, length=80), "varchar of 80 bytes"),
    (col(t.MYSQL_TYPE_STRING, length=16, collation=BINARY), "binary(16)"),
    (col(t.MYSQL_TYPE_BLOB, length=3, collation=BINARY), "mediumblob"),
    (col(t.MYSQL_TYPE_DATETIME2, fsp=3), "datetime(3)"),
    (col(t.MYSQL_TYPE_ENUM, enum_values=("a", "it's")), "enum('a','it''s')"),
])
def test_the_logged_type_in_sql_words(logged: Column, said: str) -> None:
    assert upstream_type(logged) == said


@pytest.mark.parametrize("decode, value", [
    (temporal.datetime_from_int, 20240506070809),
    (temporal.datetime_from_int, 0),
    (temporal.time_from_int, -8385959),
])
def test_old_format_values_in_range_decode(decode, value) -> None:
    decode(value)


@pytest.mark.parametrize("decode, value", [
    # MariaDB 5.3's DATETIME(6) '2024-05-06 07:08:09.123456' read as the old format.
    (temporal.datetime_from_int, int.from_bytes(
        (((((2024 * 13 + 5) << 5 | 6) << 17 | (7 << 12 | 8 << 6 | 9)) << 24) | 123456)
        .to_bytes(8, "big"), "little")),
    (temporal.datetime_from_int, 20241306000000),
    (temporal.time_from_int, 126000),
])
def test_old_format_values_out_of_range_stop(decode, value) -> None:
    with pytest.raises(ValueError, match=r"pre-5\.6 format"):
        decode(value)
