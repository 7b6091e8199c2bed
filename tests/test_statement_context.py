"""Statement context on bytes: Query status variables, INTVAR, RAND, USER_VAR (hand-built and
from the MySQL captures), the sql_mode tables, and the SET statements built from them.

The same things against a real MariaDB (parsed values, round trip onto a second server):
test_statement_replay.py.
"""

from __future__ import annotations

import contextlib
import struct
from decimal import Decimal, localcontext

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binrelay.apply.statement_sql import (
    context_statements,
    reset_statements,
    runs_as_logged,
    sql_string,
)
from binrelay.binlog import statement as s
from binrelay.binlog.events import IntvarEvent, QueryEvent, RandEvent, UserVarEvent
from binrelay.binlog.statement import QueryStatus, UserVar
from binrelay.errors import ApplyError, BinlogFormatError
from binrelay.rows import EventDecoder, iter_file_events
from binrelay.rows.decimal import decode_decimal
from captures import MYSQL_CAPTURES, capture_binlogs

FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


def sv(code: int, payload: bytes) -> bytes:
    return bytes([code]) + payload


# --- status variables: every code, both flavours ---------------------------------------------

COMMON = (
    sv(0, struct.pack("<I", 0x0C084000))
    + sv(1, struct.pack("<Q", 0x100004))
    + sv(6, b"\x03std")
    + sv(3, struct.pack("<HH", 5, 3))
    + sv(4, struct.pack("<HHH", 8, 31, 45))
    + sv(5, b"\x06+05:30")
    + sv(7, struct.pack("<H", 4))
    + sv(8, struct.pack("<H", 33))
    + sv(9, struct.pack("<Q", 6))
    + sv(10, struct.pack("<I", 1234))
    + sv(11, b"\x04root\x09localhost")
)


def test_common_codes_parse_the_same_in_both_flavours() -> None:
    for mariadb in (False, True):
        st_ = s.parse_status_vars(COMMON, mariadb=mariadb)
        assert st_ == QueryStatus(
            flags2=0x0C084000, sql_mode=0x100004, catalog="std", auto_increment=(5, 3),
            charset=(8, 31, 45), time_zone="+05:30", lc_time_names=4, collation_database=33,
            table_map_for_update=6, master_data_written=1234, invoker=("root", "localhost"))


def test_mysql_codes() -> None:
    block = (sv(12, b"\x02db1\x00d\xc3\xa9\x00") + sv(13, (123456).to_bytes(3, "little"))
             + sv(16, b"\x01") + sv(17, struct.pack("<Q", 77)) + sv(18, struct.pack("<H", 255))
             + sv(19, b"\x01") + sv(20, b"\x00") + sv(21, b"\x01"))
    st_ = s.parse_status_vars(block, mariadb=False)
    assert st_ == QueryStatus(
        updated_db_names=("db1", "dé"), microseconds=123456, explicit_defaults_for_timestamp=1,
        ddl_xid=77, default_collation_for_utf8mb4=255, sql_require_primary_key=1,
        default_table_encryption=0, enable_cascade_triggers=1)
    # More than 16 databases: the count says so (254) and no names follow.
    over = s.parse_status_vars(sv(12, b"\xfe") + sv(16, b"\x00"), mariadb=False)
    assert over.updated_dbs_over_max and over.updated_db_names is None
    assert over.explicit_defaults_for_timestamp == 0


def test_mariadb_codes() -> None:
    block = (sv(128, (4500).to_bytes(3, "little")) + sv(129, struct.pack("<Q", 19))
             + sv(130, b"\x02") + sv(131, b"\x02" + struct.pack("<HHHH", 45, 2304, 33, 83)))
    st_ = s.parse_status_vars(block, mariadb=True)
    assert st_ == QueryStatus(microseconds=4500, ddl_xid=19, gtid_flags3=2,
                              character_set_collations=((45, 2304), (33, 83)))
    # COMMIT ALTER / ROLLBACK ALTER carry the START ALTER's sequence number.
    for flags in (4, 8):
        done = s.parse_status_vars(sv(130, bytes([flags]) + struct.pack("<Q", 99)), mariadb=True)
        assert (done.gtid_flags3, done.start_alter_seq_no) == (flags, 99)
    # Q_DUMMY: the rest is padding (a GTID event rewritten as BEGIN for an old replica).
    padded = s.parse_status_vars(sv(0, b"\0" * 4) + b"\xff" * 7, mariadb=True)
    assert padded.flags2 == 0
    assert s.parse_status_vars(b"\x02\x03std\x00", mariadb=True).catalog == "std"  # 5.0.0-3


@pytest.mark.parametrize(("block", "mariadb", "words"), [
    (sv(128, b"\0\0\0"), False, "unknown MySQL Query status variable code 128"),
    (sv(12, b"\x01a\0"), True, "unknown MariaDB Query status variable code 12"),
    (sv(0, b"\0" * 4) + bytes([200, 1, 2]), True, "code 200 at byte 5"),
    (sv(14, b"\0" * 8), False, "Q_COMMIT_TS (14)"),
    (sv(15, b"\0" * 8), False, "Q_COMMIT_TS2 (15)"),
    (b"\xff\x00", False, "code 255"),
])
def test_an_unknown_code_raises_naming_it(block: bytes, mariadb: bool, words: str) -> None:
    with pytest.raises(BinlogFormatError, match=words.replace("(", r"\(").replace(")", r"\)")):
        s.parse_status_vars(block, mariadb=mariadb)


def test_malformed_values() -> None:
    with pytest.raises(BinlogFormatError, match="Q_UPDATED_DB_NAMES lists zero"):
        s.parse_status_vars(sv(12, b"\x00"), mariadb=False)
    with pytest.raises(BinlogFormatError, match="microseconds"):
        s.parse_status_vars(sv(128, (10**6).to_bytes(3, "little")), mariadb=True)
    with pytest.raises(BinlogFormatError, match="not UTF-8"):
        s.parse_status_vars(sv(5, b"\x02\xff\xfe"), mariadb=True)
    with pytest.raises(BinlogFormatError, match="trailing NUL"):
        s.parse_status_vars(b"\x02\x03stdX", mariadb=False)


ALL_MYSQL = COMMON + (
    sv(12, b"\x01db\x00") + sv(13, b"\x01\x02\x03") + sv(16, b"\x01") + sv(17, b"\x01" * 8)
    + sv(18, b"\xff\x00") + sv(19, b"\x00") + sv(20, b"\x00") + sv(21, b"\x00"))
ALL_MARIADB = COMMON + (sv(128, b"\x01\x02\x03") + sv(129, b"\x07" * 8)
                        + sv(130, b"\x04" + b"\x01" * 8) + sv(131, b"\x01\x2d\x00\x00\x09"))


@pytest.mark.parametrize(("block", "mariadb"), [(ALL_MYSQL, False), (ALL_MARIADB, True)])
def test_every_truncation_raises_binlog_format_error(block: bytes, mariadb: bool) -> None:
    s.parse_status_vars(block, mariadb=mariadb)
    # Cutting inside a value is always detected: no code's value can end early.
    boundaries = set()
    pos = 0
    while pos < len(block):
        boundaries.add(pos)
        pos += 1 + _value_len(block, pos, mariadb)
    for cut in range(len(block)):
        if cut in boundaries:
            s.parse_status_vars(block[:cut], mariadb=mariadb)
        else:
            with pytest.raises(BinlogFormatError, match="truncated"):
                s.parse_status_vars(block[:cut], mariadb=mariadb)


def _value_len(block: bytes, pos: int, mariadb: bool) -> int:
    code = block[pos]
    fixed = (s._MARIADB_SIZES if mariadb else s._MYSQL_SIZES)[code]
    if fixed is not None:
        return fixed
    if code in (5, 6):
        return 1 + block[pos + 1]
    if code == 11:
        n = block[pos + 1]
        return 2 + n + block[pos + 2 + n]
    if code == 12:
        return block.index(b"\0", pos + 2) - pos
    if code == 130:
        return 9 if block[pos + 1] & 12 else 1
    assert code == 131
    return 1 + 4 * block[pos + 1]


@FUZZ
@given(block=st.binary(max_size=80), mariadb=st.booleans())
def test_fuzz_random_blocks_parse_or_raise_binlog_format_error(block: bytes,
                                                                mariadb: bool) -> None:
    with contextlib.suppress(BinlogFormatError):
        s.parse_status_vars(block, mariadb=mariadb)


@FUZZ
@given(data=st.data(), mariadb=st.booleans())
def test_fuzz_corrupted_real_blocks(data: st.DataObject, mariadb: bool) -> None:
    block = bytearray(ALL_MARIADB if mariadb else ALL_MYSQL)
    for _ in range(data.draw(st.integers(1, 3))):
        block[data.draw(st.integers(0, len(block) - 1))] ^= data.draw(st.integers(1, 255))
    block = block[:data.draw(st.integers(0, len(block)))]
    with contextlib.suppress(BinlogFormatError):
        s.parse_status_vars(bytes(block), mariadb=mariadb)


# --- INTVAR, RAND, USER_VAR --------------------------------------------------------------------


def test_intvar_and_rand() -> None:
    assert s.parse_intvar(b"\x02" + struct.pack("<Q", 2**64 - 1)) == (2, 2**64 - 1)
    assert s.parse_intvar(b"\x01" + struct.pack("<Q", 7)) == (s.LAST_INSERT_ID_EVENT, 7)
    assert s.parse_rand(struct.pack("<QQ", 965185823, 168746272)) == (965185823, 168746272)
    for bad in (b"", b"\x02" + b"\0" * 7, b"\x02" + b"\0" * 9, b"\x00" + b"\0" * 8):
        with pytest.raises(BinlogFormatError):
            s.parse_intvar(bad)
    for bad in (b"\0" * 15, b"\0" * 17):
        with pytest.raises(BinlogFormatError):
            s.parse_rand(bad)


def uv(name: bytes, vtype: int | None, charset: int = 0, value: bytes = b"",
       tail: bytes = b"") -> bytes:
    head = struct.pack("<I", len(name)) + name
    if vtype is None:
        return head + b"\x01"
    return head + b"\x00" + bytes([vtype]) + struct.pack("<II", charset, len(value)) + value + tail


def test_user_var_values_as_mariadb_10_11_writes_them() -> None:
    # Bodies read off a MariaDB 10.11 binlog (SET @a = NULL, @b = 'héllo', @c = 1.5e0,
    # @d = -7, @e = 18446744073709551615, @f = 12.345).
    bodies = {
        "010000006101": UserVar("a", None),
        "010000006200002d0000000600000068c3a96c6c6f": UserVar("b", "héllo".encode(), 0, 45),
        "010000006300010800000008000000000000000000f83f": UserVar("c", 1.5, 1, 8),
        "010000006400020800000008000000f9ffffffffffffff00": UserVar("d", -7, 2, 8),
        "010000006500020800000008000000ffffffffffffffff01":
            UserVar("e", 2**64 - 1, 2, 8, unsigned=True),
        "01000000660004080000000500000005038c0159": UserVar("f", "12.345", 4, 8),
        "0200000064640004080000000400000003028132": UserVar("dd", "1.50", 4, 8),
    }
    for hexed, want in bodies.items():
        assert s.parse_user_var(bytes.fromhex(hexed)) == want


def test_user_var_attribute_chunks_and_errors() -> None:
    typed = uv(b"x", 0, 63, b"\x01\x02", tail=b"\x02\x05inet6")
    assert s.parse_user_var(typed) == UserVar("x", b"\x01\x02", 0, 63, False, "inet6")
    # MariaDB's chunks extend MySQL's single flags byte: 1 = unsigned, then 0 = signed again.
    assert s.parse_user_var(uv(b"i", 2, 8, b"\xff" * 8, tail=b"\x01\x00")).value == -1
    for bad, words in [
        (b"\x00\x00\x00\x00\x01", "empty name"),
        (uv(b"x", 3, 8, b"\0" * 8), "unknown value type 3"),
        (uv(b"x", 2, 8, b"\0" * 4), "INT value of 4 bytes"),
        (uv(b"x", 1, 8, b"\0" * 9), "REAL value of 9 bytes"),
        (uv(b"x", 2, 8, b"\0" * 8, tail=b"\x07"), "unknown attribute chunk 7"),
        (uv(b"x", 0, 8, b"ab", tail=b"\x02\x09abc"), "data type name truncated"),
        (uv(b"x", None) + b"\x00", "bytes after a NULL"),
        (uv(b"x", 4, 8, b"\x42\x00"), r"bad DECIMAL\(66,0\)"),
        (uv(b"x", 4, 8, b"\x05\x06"), r"bad DECIMAL\(5,6\)"),
        (uv(b"x", 4, 8, b"\x05\x03\x8c"), "DECIMAL value truncated"),
        (uv(b"x", 4, 8, b"\x02\x00\xe4"), "digit group 100"),
    ]:
        with pytest.raises(BinlogFormatError, match=words):
            s.parse_user_var(bad)


@FUZZ
@given(body=st.binary(max_size=40))
def test_fuzz_user_var_bodies(body: bytes) -> None:
    for parse in (s.parse_user_var, s.parse_intvar, s.parse_rand):
        with contextlib.suppress(BinlogFormatError):
            parse(body)


def _encode_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """A reference encoder (decimal2bin), independent of both decoders."""
    sign, digits, _exp = value.as_tuple()
    text = "".join(map(str, digits)).rjust(precision, "0")[-precision:]
    int_digits, frac_digits = text[:precision - scale], text[precision - scale:]
    out = b""
    lead = len(int_digits) % 9
    groups = ([int_digits[:lead]] if lead else []) + [
        int_digits[i:i + 9] for i in range(lead, len(int_digits), 9)]
    for g in groups:
        out += int(g).to_bytes(s._DIG2BYTES[len(g)], "big")
    for i in range(0, len(frac_digits), 9):
        g = frac_digits[i:i + 9]
        out += int(g).to_bytes(s._DIG2BYTES[len(g)], "big")
    raw = bytearray(out)
    if sign:
        raw = bytearray(b ^ 0xFF for b in raw)
    raw[0] ^= 0x80
    return bytes(raw)


@FUZZ
@given(data=st.data())
def test_decimal_text_agrees_with_the_row_decoder(data: st.DataObject) -> None:
    precision = data.draw(st.integers(1, 65))
    scale = data.draw(st.integers(0, min(precision, 30)))
    digits = data.draw(st.integers(0, 10**precision - 1))
    with localcontext() as ctx:
        ctx.prec = 100
        value = Decimal(data.draw(st.sampled_from([-1, 1])) * digits).scaleb(-scale)
    packed = _encode_decimal(value, precision, scale)
    text = s._decimal_text(bytes([precision, scale]) + packed)
    assert Decimal(text) == decode_decimal(packed, precision, scale) == value
    assert len(text.split(".")[1]) == scale if scale else "." not in text


# --- the decoder's typed events --------------------------------------------------------------



def _decoded(rel: str) -> list[object]:
    path = MYSQL_CAPTURES / rel
    dec = EventDecoder(path=str(path))
    return [ev for off, raw in iter_file_events(path) for ev in dec.feed(raw, off)]


def test_every_query_event_of_the_mysql_captures_has_parsable_status_vars() -> None:
    seen = 0
    fields: set[str] = set()
    for path in capture_binlogs():
        if "truncated" in path.name:
            continue
        dec = EventDecoder(path=str(path))
        for off, raw in iter_file_events(path):
            for ev in dec.feed(raw, off):
                if isinstance(ev, QueryEvent):
                    assert not ev.mariadb
                    status = ev.status
                    assert status == s.parse_status_vars(ev.status_vars, mariadb=False)
                    fields |= {f for f in QueryStatus.__slots__
                               if getattr(status, f) is not None
                               and getattr(status, f) is not False}
                    # The raw bytes are what the text was decoded from.
                    assert ev.raw_query.decode("utf-8", "surrogateescape") == ev.query
                    seen += 1
    assert seen >= 190
    # The captures exercise these (5.0 catalogs up to 8.0's utf8mb4 default collation).
    assert {"flags2", "sql_mode", "charset", "catalog", "time_zone", "microseconds",
            "invoker", "updated_db_names", "table_map_for_update",
            "default_collation_for_utf8mb4", "sql_require_primary_key",
            "default_table_encryption"} <= fields


def test_mysql_statement_context_events() -> None:
    events = _decoded("boxercrab/14_user_var/log.bin")
    typed = [e for e in events if isinstance(e, IntvarEvent | UserVarEvent)]
    assert [(e.kind, e.value) if isinstance(e, IntvarEvent) else e.var for e in typed] == [
        (s.INSERT_ID_EVENT, 1),
        UserVar("val_s", b"test blog", s.STRING_RESULT, 33),
        UserVar("val_i", 100, s.INT_RESULT, 33),
        UserVar("val_d", "1.00", s.DECIMAL_RESULT, 33),
    ]
    (rand,) = [e for e in _decoded("boxercrab/13_rand/log.bin") if isinstance(e, RandEvent)]
    assert (rand.seed1, rand.seed2) == (694882935, 292094996)
    (intvar,) = [e for e in _decoded("boxercrab/05_intvar/log.bin")
                 if isinstance(e, IntvarEvent)]
    assert (intvar.kind, intvar.value) == (s.LAST_INSERT_ID_EVENT, 0)
    # MySQL 8.0: utf8mb4_0900_ai_ci (255) everywhere, microseconds on the first DDL.
    (first, *_) = [e for e in _decoded("rust_mysql_common/json.binlog.000001")
                   if isinstance(e, QueryEvent)]
    assert first.status.charset == (255, 255, 255)
    assert first.status.default_collation_for_utf8mb4 == 255
    assert (first.status.time_zone, first.status.microseconds) == ("SYSTEM", 669125)
    assert s.sql_mode_names(first.status.sql_mode, mariadb=False) == (
        "ONLY_FULL_GROUP_BY", "STRICT_TRANS_TABLES", "NO_ZERO_IN_DATE", "NO_ZERO_DATE",
        "ERROR_FOR_DIVISION_BY_ZERO", "NO_ENGINE_SUBSTITUTION")


def test_a_bad_status_block_raises_from_the_event_with_its_offset() -> None:
    from binlog_builder import QUERY, event, fde_event

    dec = EventDecoder()
    dec.decode(fde_event(flavor="mariadb", checksum=True))
    status = sv(12, b"\x01a\x00")  # a MySQL code, in a MariaDB file
    body = struct.pack("<IIBHH", 1, 0, 1, 0, len(status)) + status + b"d\x00CREATE TABLE t (a INT)"
    ev = dec.decode(event(QUERY, body, log_pos=500, checksum=True))
    assert isinstance(ev, QueryEvent) and ev.mariadb and ev.schema == "d"
    assert ev.raw_query == b"CREATE TABLE t (a INT)"
    with pytest.raises(BinlogFormatError, match="unknown MariaDB Query status variable code 12"
                       ) as err:
        ev.status  # noqa: B018
    assert err.value.offset == 500 - len(event(QUERY, body, log_pos=500, checksum=True))


# --- sql_mode ----------------------------------------------------------------------------------


def test_sql_mode_tables() -> None:
    assert len(s.MARIADB_SQL_MODES) == 35 and s.MARIADB_SQL_MODES[34] == "TIME_ROUND_FRACTIONAL"
    assert len(s.MYSQL_SQL_MODES) == 34 and s.MYSQL_SQL_MODES[32] == "TIME_TRUNCATE_FRACTIONAL"
    # The shared low bits have the same names where MySQL still uses them.
    for i, name in enumerate(s.MYSQL_SQL_MODES[:32]):
        assert name.startswith("NOT_USED") or s.MARIADB_SQL_MODES[i] == name, name
    bits = s.sql_mode_bits("ANSI_QUOTES,NO_BACKSLASH_ESCAPES", mariadb=True)
    assert bits == 0x100004
    assert s.sql_mode_names(bits, mariadb=False) == ("ANSI_QUOTES", "NO_BACKSLASH_ESCAPES")
    with pytest.raises(ValueError, match="does not define"):
        s.sql_mode_names(1 << 35, mariadb=True)
    with pytest.raises(ValueError, match="does not define"):
        s.sql_mode_names(1 << 34, mariadb=False)


def test_mysql_sql_mode_on_mariadb() -> None:
    mysql8_default = s.sql_mode_bits(
        "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
        "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION", mariadb=False)
    mapped = s.mysql_sql_mode_on_mariadb(mysql8_default, "8.0.40")
    # MySQL rounds fractional seconds by default; MariaDB needs TIME_ROUND_FRACTIONAL for it.
    assert mapped.names == (*s.sql_mode_names(mysql8_default, mariadb=True),
                            "TIME_ROUND_FRACTIONAL")
    assert mapped.unmapped == ()
    truncating = s.mysql_sql_mode_on_mariadb(mysql8_default | 1 << 32, "8.0.40")
    assert truncating.bits == mysql8_default and truncating.unmapped == ()
    assert s.mysql_sql_mode_on_mariadb(0, "5.5.62").bits == 0  # no fractional seconds yet
    odd = s.mysql_sql_mode_on_mariadb(1 << 4 | 1 << 9 | 1 << 33 | 1 << 40 | 1 << 8, "5.7.30")
    assert odd.unmapped == ("NOT_USED", "ORACLE", "INTERPRET_UTF8_AS_UTF8MB4", "bit 40")
    assert odd.names == ("POSTGRESQL", "TIME_ROUND_FRACTIONAL")


def test_options_written_to_binlog() -> None:
    base = s.options_written_to_binlog("8.0.40", mariadb=False)
    assert not base & (s.OPTION_IF_EXISTS | s.OPTION_EXPLICIT_DEF_TIMESTAMP)
    assert s.options_written_to_binlog("10.4.30-MariaDB", mariadb=True) == base
    assert s.options_written_to_binlog("10.5.16-MariaDB", mariadb=True) == \
        base | s.OPTION_IF_EXISTS
    for version in ("10.5.17-MariaDB", "10.6.9-MariaDB", "10.10.1-MariaDB",
                    "10.11.19-MariaDB-0+deb12u1-log", "11.4.2-MariaDB", None):
        assert s.options_written_to_binlog(version, mariadb=True) == \
            base | s.OPTION_IF_EXISTS | s.OPTION_EXPLICIT_DEF_TIMESTAMP, version


# --- SET statements ----------------------------------------------------------------------------


def test_context_statements_text() -> None:
    status = s.parse_status_vars(COMMON + sv(128, (4500).to_bytes(3, "little")), mariadb=True)
    got = context_statements(
        status, schema="we`ird", timestamp=1700000000, thread_id=5,
        intvars=[(s.INSERT_ID_EVENT, 11), (s.LAST_INSERT_ID_EVENT, 9)], rand=(1, 2),
        user_vars=[UserVar("s`1", b"M\xfcller", 0, 31), UserVar("n", None),
                   UserVar("b", b"\x00", 0, 63), UserVar("u", 5, 2, 8, unsigned=True),
                   UserVar("r", 1 / 3, 1, 8), UserVar("big", 1e300, 1, 8),
                   UserVar("d", "-0.50", 4, 8), UserVar("e", b"", 0, 45)],
        mariadb_upstream=True, upstream_version="10.11.19-MariaDB-log")
    assert got == [
        "USE `we``ird`",
        "SET @@session.collation_connection = 31",
        "SET @`s``1` := CAST(X'4dfc6c6c6572' AS CHAR)",
        "SET @@session.collation_connection = 45",
        "SET @`e` := CAST(X'' AS CHAR)",
        "SET @`n` := NULL, @`b` := _binary X'00', @`u` := CAST(5 AS UNSIGNED), "
        "@`r` := 0.3333333333333333e0, @`big` := 1e+300, @`d` := -0.50, INSERT_ID = 11, "
        "LAST_INSERT_ID = 9, @@RAND_SEED1 = 1, @@RAND_SEED2 = 2, "
        "@@session.timestamp = 1700000000.004500, @@session.foreign_key_checks = 0, "
        "@@session.sql_auto_is_null = 1, @@session.unique_checks = 0, "
        "@@session.check_constraint_checks = 1, @@session.sql_if_exists = 0, "
        "@@session.explicit_defaults_for_timestamp = 0, "
        "@@session.system_versioning_insert_history = 0, "
        "@@session.sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES', "
        "@@session.auto_increment_increment = 5, @@session.auto_increment_offset = 3, "
        "@@session.lc_time_names = 4, @@session.collation_database = 33, "
        "@@session.time_zone = '+05:30', @@session.character_set_client = 8, "
        "@@session.collation_connection = 31, @@session.collation_server = 45",
    ]


def test_context_defaults_for_what_was_not_logged() -> None:
    got = context_statements(QueryStatus(flags2=0, sql_mode=0), schema="", timestamp=1,
                             thread_id=1, mariadb_upstream=True, autocommit=True,
                             upstream_version="10.4.1-MariaDB")
    assert got == [
        "SET LAST_INSERT_ID = 0, @@session.timestamp = 1, @@session.foreign_key_checks = 1, "
        "@@session.sql_auto_is_null = 0, @@session.unique_checks = 1, "
        "@@session.autocommit = 1, @@session.check_constraint_checks = 1, "
        "@@session.sql_mode = '', @@session.auto_increment_increment = 1, "
        "@@session.auto_increment_offset = 1, @@session.lc_time_names = 0, "
        "@@session.collation_database = DEFAULT",
    ]
    # A DDL whose event logged no flags2 runs with autocommit on, as a replica's would.
    (ddl,) = context_statements(QueryStatus(), schema="", timestamp=1, thread_id=1,
                                mariadb_upstream=True, autocommit=True)
    assert "@@session.autocommit = 1" in ddl
    # The upstream session's thread id, when the downstream session may take it.
    (own,) = context_statements(QueryStatus(), schema="", timestamp=1, thread_id=4711,
                                mariadb_upstream=True, pseudo_thread=True)
    assert "@@session.pseudo_thread_id = 4711" in own
    assert "pseudo_thread_id" not in ddl
    # CREATE/DROP DATABASE (LOG_EVENT_SUPPRESS_USE_F): the database is not made the default.
    assert not context_statements(QueryStatus(), schema="d", timestamp=1, thread_id=1,
                                  mariadb_upstream=True, suppress_use=True)[0].startswith("USE")


def test_context_for_a_mysql_upstream() -> None:
    status = QueryStatus(flags2=s.OPTION_NOT_AUTOCOMMIT, sql_mode=1 << 21,
                         explicit_defaults_for_timestamp=1, default_collation_for_utf8mb4=255,
                         character_set_collations=None)
    (only,) = context_statements(status, schema="", timestamp=5, thread_id=1,
                                 mariadb_upstream=False, upstream_version="8.0.40")
    assert "@@session.sql_mode = 'STRICT_TRANS_TABLES,TIME_ROUND_FRACTIONAL'" in only
    assert "@@session.explicit_defaults_for_timestamp = 1" in only
    assert "autocommit" not in only and "sql_if_exists" not in only
    assert "utf8mb4" not in only  # MariaDB has no default_collation_for_utf8mb4
    with pytest.raises(ApplyError, match="no equivalent for: INTERPRET_UTF8_AS_UTF8MB4"):
        context_statements(QueryStatus(sql_mode=1 << 33), schema="", timestamp=5, thread_id=1,
                           mariadb_upstream=False)
    dropped = context_statements(QueryStatus(sql_mode=1 << 33 | 1 << 2), schema="",
                                 timestamp=5, thread_id=1, mariadb_upstream=False,
                                 drop_unmapped_sql_modes=True)
    assert "@@session.sql_mode = 'ANSI_QUOTES,TIME_ROUND_FRACTIONAL'" in dropped[-1]


def test_context_errors_and_character_set_collations() -> None:
    with pytest.raises(ApplyError, match="does not define"):
        context_statements(QueryStatus(sql_mode=1 << 40), schema="", timestamp=1, thread_id=1,
                           mariadb_upstream=True)
    # A two-phase ALTER runs at its COMMIT ALTER (4), in that event's context.
    for flags3, runs in ((None, True), (2, False), (4, True), (8, False)):
        assert runs_as_logged(QueryStatus(gtid_flags3=flags3)) is runs
    with pytest.raises(ApplyError, match="two-phase ALTER"):
        context_statements(QueryStatus(gtid_flags3=2), schema="", timestamp=1, thread_id=1,
                           mariadb_upstream=True)
    assert context_statements(QueryStatus(gtid_flags3=4), schema="", timestamp=1, thread_id=1,
                              mariadb_upstream=True)
    # A replica keeps its own NO_DIR_IN_CREATE (the applier's: off).
    (sets,) = context_statements(QueryStatus(sql_mode=1 << 7 | 1 << 2), schema="",
                                   timestamp=1, thread_id=1, mariadb_upstream=True)
    assert "@@session.sql_mode = 'ANSI_QUOTES'" in sets
    with pytest.raises(ApplyError, match="of type inet6"):
        context_statements(QueryStatus(), schema="", timestamp=1, thread_id=1,
                           user_vars=[UserVar("a", b"", 0, 63, False, "inet6")],
                           mariadb_upstream=True)
    got = context_statements(QueryStatus(character_set_collations=((45, 2304),)), schema="",
                             timestamp=1, thread_id=1, mariadb_upstream=True)[-1]
    assert "@@session.character_set_collations = CONCAT_WS(',', (SELECT CONCAT(" in got
    assert "WHERE a.ID = 45 AND b.ID = 2304 LIMIT 1)" in got
    empty = context_statements(QueryStatus(character_set_collations=()), schema="",
                               timestamp=1, thread_id=1, mariadb_upstream=True)[-1]
    assert "@@session.character_set_collations = ''" in empty


def test_reset_statements_and_literals() -> None:
    from binrelay.apply.sql import REPLICA_SQL_MODE

    (sets,) = reset_statements()  # one statement: all ASCII
    assert sets.startswith("SET NAMES utf8mb4, @@session.timestamp = DEFAULT")
    assert f"@@session.sql_mode = '{REPLICA_SQL_MODE}'" in sets
    assert "@@session.foreign_key_checks = 0" in sets
    # A DDL's context sets autocommit: the applier's sessions run without it.
    assert "INSERT_ID = 0, LAST_INSERT_ID = 0, @@session.autocommit = 0" in sets
    names, sets = reset_statements(foreign_key_checks=True,
                                   user_vars=["a`b", UserVar("c", None)])
    assert names == "SET NAMES utf8mb4"  # first: the names are UTF-8
    assert "@@session.foreign_key_checks = 1" in sets
    assert sets.endswith("@@session.autocommit = 0, @`a``b` := NULL, @`c` := NULL")
    assert sql_string("Europe/Paris") == "'Europe/Paris'"
    assert sql_string("it's") == "'it''s'"
    assert sql_string("a\\b") == "_utf8mb4 X'615c62'"
    assert sql_string("é") == "_utf8mb4 X'c3a9'"
