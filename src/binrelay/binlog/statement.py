"""The session context of statement events: Query status variables, INTVAR, RAND, USER_VAR.

A Query event (DDL, or DML logged in statement format) carries, besides its text, the
session state it ran under: the *status variables* block of its post-header (sql_mode,
character sets, time zone, auto_increment settings ...).  Inside a transaction, the events
just before it carry what the statement consumed: INTVAR (the first auto-generated id,
``LAST_INSERT_ID()``), RAND (the random seeds) and USER_VAR (the values of the user
variables it read).  A replica's SQL thread installs all of that before running the text.

Layouts come from the servers' own readers: MariaDB's ``Query_log_event::Query_log_event``
(sql/log_event.cc) and MySQL's ``Query_event::Query_event``
(libs/mysql/binlog/event/statement_events.cpp).  Each status variable is a one-byte code
followed by a value whose size depends on the code only, so an unknown code makes the rest
of the block unreadable: it raises :class:`~binrelay.errors.BinlogFormatError` (the servers
silently skip the rest; a replay that silently lost its sql_mode would be wrong instead).

Pure: bytes in, frozen dataclasses out; every malformed input raises ``BinlogFormatError``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from binrelay.errors import BinlogFormatError

__all__ = [
    "DECIMAL_RESULT",
    "INSERT_ID_EVENT",
    "INT_RESULT",
    "LAST_INSERT_ID_EVENT",
    "MARIADB_SQL_MODES",
    "MYSQL_SQL_MODES",
    "REAL_RESULT",
    "STRING_RESULT",
    "MysqlSqlModeOnMariadb",
    "QueryStatus",
    "UserVar",
    "mysql_sql_mode_on_mariadb",
    "options_written_to_binlog",
    "parse_intvar",
    "parse_rand",
    "parse_status_vars",
    "parse_user_var",
    "sql_mode_bits",
    "sql_mode_names",
    "status_var_name",
]

# --- status variable codes (log_event.h / statement_events.h) ------------------------------

Q_FLAGS2_CODE = 0
Q_SQL_MODE_CODE = 1
Q_CATALOG_CODE = 2  # MySQL 5.0.0-5.0.3 only: the catalog with its trailing NUL
Q_AUTO_INCREMENT = 3
Q_CHARSET_CODE = 4
Q_TIME_ZONE_CODE = 5
Q_CATALOG_NZ_CODE = 6
Q_LC_TIME_NAMES_CODE = 7
Q_CHARSET_DATABASE_CODE = 8
Q_TABLE_MAP_FOR_UPDATE_CODE = 9
Q_MASTER_DATA_WRITTEN_CODE = 10  # only in relay logs of pre-5.0 masters
Q_INVOKER = 11
# MySQL only.
Q_UPDATED_DB_NAMES = 12
Q_MICROSECONDS = 13
Q_COMMIT_TS = 14  # unreleased 5.7 milestones; no released reader knows its size
Q_COMMIT_TS2 = 15  # never written by a released server either
Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP = 16
Q_DDL_LOGGED_WITH_XID = 17
Q_DEFAULT_COLLATION_FOR_UTF8MB4 = 18
Q_SQL_REQUIRE_PRIMARY_KEY = 19
Q_DEFAULT_TABLE_ENCRYPTION = 20
Q_ENABLE_CASCADE_TRIGGERS = 21  # MySQL 9.x
# MariaDB only.
Q_HRNOW = 128
Q_XID = 129
Q_GTID_FLAGS3 = 130
Q_CHARACTER_SET_COLLATIONS = 131
Q_DUMMY = 255  # padding of a GTID event rewritten as BEGIN for old replicas

_NAMES = {value: name for name, value in list(globals().items())
          if name.startswith("Q_") and isinstance(value, int)}

# Q_UPDATED_DB_NAMES: more databases than this are logged as OVER_MAX_DBS_IN_EVENT_MTS with
# no names (MAX_DBS_IN_EVENT_MTS in MySQL's binlog_event.h).
_MAX_DBS_IN_EVENT_MTS = 16
# Gtid_log_event::FL_START_ALTER_E1, FL_COMMIT_ALTER_E1, FL_ROLLBACK_ALTER_E1 (Q_GTID_FLAGS3,
# binlog_alter_two_phase): the ALTER is logged when it starts, and again when it committed or
# was rolled back; with the last two Q_GTID_FLAGS3 is followed by the 8-byte sequence number
# of the START ALTER they complete.
FL_START_ALTER, FL_COMMIT_ALTER, FL_ROLLBACK_ALTER = 2, 4, 8
_FL_COMMIT_OR_ROLLBACK_ALTER = FL_COMMIT_ALTER | FL_ROLLBACK_ALTER
_MAX_SECOND_PART = 999_999


def status_var_name(code: int) -> str:
    return _NAMES.get(code, f"code {code}")


@dataclass(frozen=True, slots=True)
class QueryStatus:
    """The status variables of one Query event; ``None`` = not logged.

    What "not logged" means differs per variable (see ``apply.statement_sql``): an absent
    ``lc_time_names`` is en_US (0), an absent ``auto_increment`` is (1, 1), an absent
    ``time_zone`` means the statement did not depend on it.
    """

    flags2: int | None = None
    sql_mode: int | None = None
    #: (auto_increment_increment, auto_increment_offset).
    auto_increment: tuple[int, int] | None = None
    #: Collation ids of (character_set_client, collation_connection, collation_server).
    charset: tuple[int, int, int] | None = None
    time_zone: str | None = None
    lc_time_names: int | None = None
    collation_database: int | None = None
    #: The statement's start time below the second (MariaDB Q_HRNOW, MySQL Q_MICROSECONDS).
    microseconds: int | None = None
    #: MySQL Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP (MariaDB logs it as a flags2 bit instead).
    explicit_defaults_for_timestamp: int | None = None
    default_collation_for_utf8mb4: int | None = None
    #: (user, host) of CURRENT_USER() for account-management and DEFINER-less DDL.
    invoker: tuple[str, str] | None = None
    updated_db_names: tuple[str, ...] | None = None
    #: Q_UPDATED_DB_NAMES said "more than 16 databases" (and named none).
    updated_dbs_over_max: bool = False
    #: MySQL Q_DDL_LOGGED_WITH_XID, or MariaDB Q_XID: the XID of a crash-safe DDL.
    ddl_xid: int | None = None
    catalog: str | None = None
    table_map_for_update: int | None = None
    master_data_written: int | None = None
    sql_require_primary_key: int | None = None
    default_table_encryption: int | None = None
    enable_cascade_triggers: int | None = None
    #: MariaDB Q_GTID_FLAGS3 (the GTID event's extra flags: START/COMMIT/ROLLBACK ALTER).
    gtid_flags3: int | None = None
    #: With COMMIT/ROLLBACK ALTER: the sequence number of the START ALTER it completes.
    start_alter_seq_no: int | None = None
    #: MariaDB @@character_set_collations as (charset's default collation id, collation id).
    character_set_collations: tuple[tuple[int, int], ...] | None = None


def _truncated(code: int) -> BinlogFormatError:
    return BinlogFormatError(f"Query status variable {status_var_name(code)} truncated")


def _text(raw: bytes, code: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BinlogFormatError(
            f"Query status variable {status_var_name(code)} is not UTF-8: {raw!r}") from None


# Fixed sizes; None for the variable-length ones handled in the parser below.
_COMMON_SIZES: dict[int, int | None] = {
    Q_FLAGS2_CODE: 4, Q_SQL_MODE_CODE: 8, Q_CATALOG_CODE: None, Q_AUTO_INCREMENT: 4,
    Q_CHARSET_CODE: 6, Q_TIME_ZONE_CODE: None, Q_CATALOG_NZ_CODE: None,
    Q_LC_TIME_NAMES_CODE: 2, Q_CHARSET_DATABASE_CODE: 2, Q_TABLE_MAP_FOR_UPDATE_CODE: 8,
    Q_MASTER_DATA_WRITTEN_CODE: 4, Q_INVOKER: None,
}
_MYSQL_SIZES: dict[int, int | None] = {
    **_COMMON_SIZES, Q_UPDATED_DB_NAMES: None, Q_MICROSECONDS: 3,
    Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP: 1, Q_DDL_LOGGED_WITH_XID: 8,
    Q_DEFAULT_COLLATION_FOR_UTF8MB4: 2,
    # statement_events.h documents both as "2 byte integer"; the reader takes one byte.
    Q_SQL_REQUIRE_PRIMARY_KEY: 1, Q_DEFAULT_TABLE_ENCRYPTION: 1,
    Q_ENABLE_CASCADE_TRIGGERS: 1,
}
_MARIADB_SIZES: dict[int, int | None] = {
    **_COMMON_SIZES, Q_HRNOW: 3, Q_XID: 8, Q_GTID_FLAGS3: None,
    Q_CHARACTER_SET_COLLATIONS: None, Q_DUMMY: None,
}


def parse_status_vars(status: bytes | bytearray | memoryview, *, mariadb: bool) -> QueryStatus:
    """Parse a Query event's status-variables block (``status_vars_len`` bytes).

    ``mariadb`` selects the flavour's code table: the two share codes 0-11 and differ above
    (MySQL 12-21, MariaDB 128-131 and 255), and each server only writes its own.
    """
    data = bytes(status)
    sizes = _MARIADB_SIZES if mariadb else _MYSQL_SIZES
    end = len(data)
    pos = 0
    out: dict[str, object] = {}
    while pos < end:
        code = data[pos]
        pos += 1
        if code not in sizes:
            if code in (Q_COMMIT_TS, Q_COMMIT_TS2) and not mariadb:
                raise BinlogFormatError(
                    f"Query status variable {status_var_name(code)} ({code}) is an obsolete "
                    "code of unreleased MySQL 5.7 milestones whose size no released server "
                    "defines: the rest of the status variables cannot be read")
            flavour = "MariaDB" if mariadb else "MySQL"
            raise BinlogFormatError(
                f"unknown {flavour} Query status variable code {code} at byte {pos - 1} of "
                f"{end}: the rest of the status variables cannot be read")
        size = sizes[code]
        if size is not None:
            if pos + size > end:
                raise _truncated(code)
            value = data[pos:pos + size]
            pos += size
            _fixed(code, value, out)
            continue
        if code == Q_DUMMY:
            break  # everything after the first Q_DUMMY byte is padding
        pos = _variable(code, data, pos, end, out)
    return QueryStatus(**out)  # type: ignore[arg-type]


def _fixed(code: int, value: bytes, out: dict[str, object]) -> None:
    n = int.from_bytes(value, "little")
    if code == Q_FLAGS2_CODE:
        out["flags2"] = n
    elif code == Q_SQL_MODE_CODE:
        out["sql_mode"] = n
    elif code == Q_AUTO_INCREMENT:
        out["auto_increment"] = struct.unpack("<HH", value)
    elif code == Q_CHARSET_CODE:
        out["charset"] = struct.unpack("<HHH", value)
    elif code == Q_LC_TIME_NAMES_CODE:
        out["lc_time_names"] = n
    elif code == Q_CHARSET_DATABASE_CODE:
        out["collation_database"] = n
    elif code == Q_TABLE_MAP_FOR_UPDATE_CODE:
        out["table_map_for_update"] = n
    elif code == Q_MASTER_DATA_WRITTEN_CODE:
        out["master_data_written"] = n
    elif code in (Q_MICROSECONDS, Q_HRNOW):
        if n > _MAX_SECOND_PART:
            raise BinlogFormatError(
                f"Query status variable {status_var_name(code)} holds {n} microseconds")
        out["microseconds"] = n
    elif code == Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP:
        out["explicit_defaults_for_timestamp"] = n
    elif code in (Q_DDL_LOGGED_WITH_XID, Q_XID):
        out["ddl_xid"] = n
    elif code == Q_DEFAULT_COLLATION_FOR_UTF8MB4:
        out["default_collation_for_utf8mb4"] = n
    elif code == Q_SQL_REQUIRE_PRIMARY_KEY:
        out["sql_require_primary_key"] = n
    elif code == Q_DEFAULT_TABLE_ENCRYPTION:
        out["default_table_encryption"] = n
    elif code == Q_ENABLE_CASCADE_TRIGGERS:
        out["enable_cascade_triggers"] = n
    else:  # pragma: no cover - the size tables and this switch list the same codes
        raise AssertionError(code)


def _length_prefixed(code: int, data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    if pos >= end or pos + 1 + data[pos] > end:
        raise _truncated(code)
    n = data[pos]
    return data[pos + 1:pos + 1 + n], pos + 1 + n


def _variable(code: int, data: bytes, pos: int, end: int, out: dict[str, object]) -> int:
    if code == Q_TIME_ZONE_CODE:
        raw, pos = _length_prefixed(code, data, pos, end)
        out["time_zone"] = _text(raw, code)
    elif code == Q_CATALOG_NZ_CODE:
        raw, pos = _length_prefixed(code, data, pos, end)
        out["catalog"] = _text(raw, code)
    elif code == Q_CATALOG_CODE:
        # MariaDB's reader always skips the NUL; MySQL 8's skips nothing after an empty
        # catalog.  The 5.0.0-5.0.3 servers that wrote this code always had "std".
        raw, pos = _length_prefixed(code, data, pos, end)
        if pos >= end:
            raise _truncated(code)
        if data[pos] != 0:
            raise BinlogFormatError("Q_CATALOG_CODE: the catalog has no trailing NUL")
        out["catalog"] = _text(raw, code)
        pos += 1
    elif code == Q_INVOKER:
        user, pos = _length_prefixed(code, data, pos, end)
        host, pos = _length_prefixed(code, data, pos, end)
        out["invoker"] = (user.decode("utf-8", "surrogateescape"),
                          host.decode("utf-8", "surrogateescape"))
    elif code == Q_UPDATED_DB_NAMES:
        if pos >= end:
            raise _truncated(code)
        count = data[pos]
        pos += 1
        if count > _MAX_DBS_IN_EVENT_MTS:
            out["updated_dbs_over_max"] = True
            return pos
        if count == 0:
            raise BinlogFormatError("Q_UPDATED_DB_NAMES lists zero databases")
        names = []
        for _ in range(count):
            nul = data.find(b"\0", pos, end)
            if nul < 0:
                raise _truncated(code)
            names.append(data[pos:nul].decode("utf-8", "surrogateescape"))
            pos = nul + 1
        out["updated_db_names"] = tuple(names)
    elif code == Q_GTID_FLAGS3:
        if pos >= end:
            raise _truncated(code)
        flags = data[pos]
        pos += 1
        out["gtid_flags3"] = flags
        if flags & _FL_COMMIT_OR_ROLLBACK_ALTER:
            if pos + 8 > end:
                raise _truncated(code)
            out["start_alter_seq_no"] = int.from_bytes(data[pos:pos + 8], "little")
            pos += 8
    elif code == Q_CHARACTER_SET_COLLATIONS:
        if pos >= end:
            raise _truncated(code)
        count = data[pos]
        pos += 1
        if pos + 4 * count > end:
            raise _truncated(code)
        out["character_set_collations"] = tuple(
            struct.unpack_from("<HH", data, pos + 4 * i) for i in range(count))
        pos += 4 * count
    else:  # pragma: no cover - the size tables and this switch list the same codes
        raise AssertionError(code)
    return pos


# --- flags2 ----------------------------------------------------------------------------------

# thd->variables.option_bits (sql_priv.h); flags2 is their low 32 bits, masked.
OPTION_AUTO_IS_NULL = 1 << 14
OPTION_NO_CHECK_CONSTRAINT_CHECKS = 1 << 15  # MariaDB
OPTION_NOT_AUTOCOMMIT = 1 << 19
OPTION_EXPLICIT_DEF_TIMESTAMP = 1 << 24  # MariaDB
OPTION_NO_FOREIGN_KEY_CHECKS = 1 << 26
OPTION_RELAXED_UNIQUE_CHECKS = 1 << 27
OPTION_IF_EXISTS = 1 << 28  # MariaDB
# MariaDB 10.11+ (@@system_versioning_insert_history); the value was read off a 10.11 binlog
# (mariadb-binlog prints the bit as system_versioning_insert_history=1).
OPTION_INSERT_HISTORY = 1 << 30

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
# First 10.x patch release of each minor that logs explicit_defaults_for_timestamp in
# flags2 (Format_description_log_event::deduct_options_written_to_bin_log).
_EXPLICIT_DEF_TS_SINCE = {5: 17, 6: 9, 7: 5, 8: 4, 9: 2}


def options_written_to_binlog(server_version: str | None, *, mariadb: bool) -> int:
    """The flags2 bits the upstream writes, from its FDE server version (``None``: the newest).

    A bit outside this mask is 0 because the server does not log it, not because the session
    had the option off: a replica keeps its own value for those (MariaDB's rule, in
    ``deduct_options_written_to_bin_log``).  MySQL writes only the four classic bits; the
    MariaDB-only bits are in its mask anyway because a MariaDB replica applies them as
    "off" for a MySQL upstream (their session defaults).
    """
    mask = (OPTION_AUTO_IS_NULL | OPTION_NOT_AUTOCOMMIT | OPTION_NO_FOREIGN_KEY_CHECKS
            | OPTION_RELAXED_UNIQUE_CHECKS | OPTION_INSERT_HISTORY
            | OPTION_NO_CHECK_CONSTRAINT_CHECKS)
    if not mariadb:
        return mask
    if server_version is None:
        return mask | OPTION_IF_EXISTS | OPTION_EXPLICIT_DEF_TIMESTAMP
    m = _VERSION.match(server_version)
    if not m:
        return mask
    version = tuple(int(x) for x in m.groups())
    if version < (10, 5, 2):
        return mask
    mask |= OPTION_IF_EXISTS
    major, minor, patch = version
    if major == 10 and patch < _EXPLICIT_DEF_TS_SINCE.get(minor, 0):
        return mask
    return mask | OPTION_EXPLICIT_DEF_TIMESTAMP


# --- sql_mode --------------------------------------------------------------------------------

#: MariaDB's sql_mode bits, in bit order (sql_class.h MODE_*, names as sys_vars.cc spells them
#: and as ``SELECT @@sql_mode`` prints them).
MARIADB_SQL_MODES: tuple[str, ...] = (
    "REAL_AS_FLOAT", "PIPES_AS_CONCAT", "ANSI_QUOTES", "IGNORE_SPACE",
    "IGNORE_BAD_TABLE_OPTIONS", "ONLY_FULL_GROUP_BY", "NO_UNSIGNED_SUBTRACTION",
    "NO_DIR_IN_CREATE", "POSTGRESQL", "ORACLE", "MSSQL", "DB2", "MAXDB", "NO_KEY_OPTIONS",
    "NO_TABLE_OPTIONS", "NO_FIELD_OPTIONS", "MYSQL323", "MYSQL40", "ANSI",
    "NO_AUTO_VALUE_ON_ZERO", "NO_BACKSLASH_ESCAPES", "STRICT_TRANS_TABLES",
    "STRICT_ALL_TABLES", "NO_ZERO_IN_DATE", "NO_ZERO_DATE", "ALLOW_INVALID_DATES",
    "ERROR_FOR_DIVISION_BY_ZERO", "TRADITIONAL", "NO_AUTO_CREATE_USER", "HIGH_NOT_PRECEDENCE",
    "NO_ENGINE_SUBSTITUTION", "PAD_CHAR_TO_FULL_LENGTH", "EMPTY_STRING_IS_NULL",
    "SIMULTANEOUS_ASSIGNMENT", "TIME_ROUND_FRACTIONAL",
)

#: MySQL 8.0+'s sql_mode bits (system_variables.h): bits 4, 8-17 and 28 are unused (5.7's
#: NOT_USED, POSTGRESQL..MYSQL40 and NO_AUTO_CREATE_USER, which 8.0 ignores from an older
#: source), bit 32 is TIME_TRUNCATE_FRACTIONAL, bit 33 INTERPRET_UTF8_AS_UTF8MB4 (9.x).
MYSQL_SQL_MODES: tuple[str, ...] = (
    "REAL_AS_FLOAT", "PIPES_AS_CONCAT", "ANSI_QUOTES", "IGNORE_SPACE", "NOT_USED",
    "ONLY_FULL_GROUP_BY", "NO_UNSIGNED_SUBTRACTION", "NO_DIR_IN_CREATE",
    *(f"NOT_USED_{n}" for n in range(9, 19)), "ANSI", "NO_AUTO_VALUE_ON_ZERO",
    "NO_BACKSLASH_ESCAPES", "STRICT_TRANS_TABLES", "STRICT_ALL_TABLES", "NO_ZERO_IN_DATE",
    "NO_ZERO_DATE", "ALLOW_INVALID_DATES", "ERROR_FOR_DIVISION_BY_ZERO", "TRADITIONAL",
    "NOT_USED_29", "HIGH_NOT_PRECEDENCE", "NO_ENGINE_SUBSTITUTION", "PAD_CHAR_TO_FULL_LENGTH",
    "TIME_TRUNCATE_FRACTIONAL", "INTERPRET_UTF8_AS_UTF8MB4",
)


def sql_mode_names(bits: int, *, mariadb: bool) -> tuple[str, ...]:
    """The names of the set bits, in bit order.  A bit the flavour does not define raises
    ``ValueError`` (naming it would be a guess)."""
    table = MARIADB_SQL_MODES if mariadb else MYSQL_SQL_MODES
    if bits < 0 or bits >> len(table):
        raise ValueError(f"sql_mode {bits:#x} has bits {bits >> len(table) << len(table):#x} "
                         f"that {'MariaDB' if mariadb else 'MySQL'} does not define")
    return tuple(name for i, name in enumerate(table) if bits >> i & 1)


def sql_mode_bits(names: str, *, mariadb: bool) -> int:
    """The inverse of :func:`sql_mode_names` for a comma-separated list (``@@sql_mode``)."""
    table = MARIADB_SQL_MODES if mariadb else MYSQL_SQL_MODES
    bits = 0
    for name in filter(None, (n.strip().upper() for n in names.split(","))):
        if name not in table:
            raise ValueError(f"unknown sql_mode {name!r}")
        bits |= 1 << table.index(name)
    return bits


_MYSQL_NOT_USED = 1 << 4
_MYSQL_ORACLE_57 = 1 << 9
_MYSQL_TIME_TRUNCATE_FRACTIONAL = 1 << 32
_MARIADB_TIME_ROUND_FRACTIONAL = 1 << 34
_LOW_32 = 0xFFFF_FFFF


@dataclass(frozen=True, slots=True)
class MysqlSqlModeOnMariadb:
    """A MySQL upstream's sql_mode as a MariaDB session needs it."""

    #: MariaDB bits.
    bits: int
    #: Their MariaDB names.
    names: tuple[str, ...]
    #: MySQL modes set upstream that MariaDB has no equivalent for (MySQL's names).
    unmapped: tuple[str, ...]


def mysql_sql_mode_on_mariadb(bits: int,
                              server_version: str | None = None) -> MysqlSqlModeOnMariadb:
    """Map a MySQL upstream's sql_mode to MariaDB's bits, as MariaDB's own replica does.

    The low 32 bits mean the same on both (MODE_MASK_MYSQL_COMPATIBLE) except two that this
    keeps out: bit 4 (MySQL's NOT_USED is MariaDB's IGNORE_BAD_TABLE_OPTIONS) and bit 9 (5.7's
    ORACLE was only a combination of bits that are set anyway; MariaDB's switches the parser
    to PL/SQL).  Fractional seconds: MySQL 5.6+ rounds unless TIME_TRUNCATE_FRACTIONAL,
    MariaDB truncates unless TIME_ROUND_FRACTIONAL, so the bit is inverted; MySQL before 5.6
    has no fractional seconds and maps to nothing.  INTERPRET_UTF8_AS_UTF8MB4 (bit 33, and
    any bit MySQL does not define) has no sql_mode equivalent and is reported ``unmapped``.
    """
    unmapped = bits & ~_LOW_32 & ~_MYSQL_TIME_TRUNCATE_FRACTIONAL
    unmapped |= bits & (_MYSQL_NOT_USED | _MYSQL_ORACLE_57)
    maria = bits & _LOW_32 & ~(_MYSQL_NOT_USED | _MYSQL_ORACLE_57)
    m = _VERSION.match(server_version or "")
    fsp = True if server_version is None or not m else (
        tuple(int(x) for x in m.groups()) >= (5, 6, 0))
    if fsp and not bits & _MYSQL_TIME_TRUNCATE_FRACTIONAL:
        maria |= _MARIADB_TIME_ROUND_FRACTIONAL
    names = []
    for i in range(unmapped.bit_length()):
        if unmapped >> i & 1:
            names.append(MYSQL_SQL_MODES[i] if i < len(MYSQL_SQL_MODES) else f"bit {i}")
    # 5.7's name for bit 9, which is what an upstream that sets it runs.
    names = ["ORACLE" if n == "NOT_USED_10" else n for n in names]
    return MysqlSqlModeOnMariadb(maria, sql_mode_names(maria, mariadb=True), tuple(names))


# --- INTVAR, RAND ----------------------------------------------------------------------------

LAST_INSERT_ID_EVENT = 1
INSERT_ID_EVENT = 2


def parse_intvar(body: bytes | bytearray | memoryview) -> tuple[int, int]:
    """INTVAR_EVENT body (after the header, before the checksum): ``(kind, value)`` with
    kind :data:`LAST_INSERT_ID_EVENT` or :data:`INSERT_ID_EVENT`."""
    if len(body) != 9:
        raise BinlogFormatError(f"INTVAR_EVENT body has {len(body)} bytes, not 9")
    kind = body[0]
    if kind not in (LAST_INSERT_ID_EVENT, INSERT_ID_EVENT):
        raise BinlogFormatError(f"INTVAR_EVENT of unknown kind {kind}")
    return kind, int.from_bytes(body[1:9], "little")


def parse_rand(body: bytes | bytearray | memoryview) -> tuple[int, int]:
    """RAND_EVENT body: ``(seed1, seed2)``."""
    if len(body) != 16:
        raise BinlogFormatError(f"RAND_EVENT body has {len(body)} bytes, not 16")
    seed1, seed2 = struct.unpack("<QQ", body)
    return seed1, seed2


# --- USER_VAR --------------------------------------------------------------------------------

# Item_result.
STRING_RESULT = 0
REAL_RESULT = 1
INT_RESULT = 2
DECIMAL_RESULT = 4

_BINARY_COLLATION = 63
# The trailing bytes after the value: MySQL writes one flags byte (UNDEF_F 0, UNSIGNED_F 1);
# MariaDB writes "chunks" that extend it compatibly (Log_event_data_type).
_CHUNK_SIGNED = 0
_CHUNK_UNSIGNED = 1
_CHUNK_DATA_TYPE_NAME = 2
# DECIMAL(M, D) limits: MariaDB's (MySQL's scale limit, 30, is lower).
_MAX_DECIMAL_PRECISION = 65
_MAX_DECIMAL_SCALE = 38


@dataclass(frozen=True, slots=True)
class UserVar:
    """One user variable as a USER_VAR event gives it.

    ``value``: ``None`` (SQL NULL), ``bytes`` (STRING_RESULT, in collation ``charset``),
    ``int`` (INT_RESULT, ``unsigned`` applied), ``float`` (REAL_RESULT) or ``str`` (the exact
    decimal text of a DECIMAL_RESULT, e.g. ``"-12.50"``, scale digits kept).
    """

    name: str
    value: bytes | int | float | str | None
    #: Item_result: STRING_RESULT, REAL_RESULT, INT_RESULT or DECIMAL_RESULT.
    type: int = STRING_RESULT
    #: Collation id (meaningful for strings; 63 = binary for NULL).
    charset: int = _BINARY_COLLATION
    unsigned: bool = False
    #: MariaDB: the SQL data type of a variable of a plugin type (``inet6`` ...), if logged.
    data_type_name: str | None = None


def parse_user_var(body: bytes | bytearray | memoryview) -> UserVar:
    """USER_VAR_EVENT body: name_len(4) name is_null(1) [type(1) charset(4) val_len(4) val
    flags...]."""
    data = bytes(body)
    end = len(data)
    if end < 4:
        raise BinlogFormatError("USER_VAR_EVENT truncated")
    name_len = int.from_bytes(data[0:4], "little")
    if name_len == 0:
        raise BinlogFormatError("USER_VAR_EVENT with an empty name")
    pos = 4 + name_len
    if pos + 1 > end:
        raise BinlogFormatError("USER_VAR_EVENT truncated")
    name = data[4:pos].decode("utf-8", "surrogateescape")
    if data[pos]:
        if pos + 1 != end:
            raise BinlogFormatError("USER_VAR_EVENT: bytes after a NULL value")
        return UserVar(name, None)
    pos += 1
    if pos + 9 > end:
        raise BinlogFormatError("USER_VAR_EVENT truncated")
    vtype = data[pos]
    charset = int.from_bytes(data[pos + 1:pos + 5], "little")
    val_len = int.from_bytes(data[pos + 5:pos + 9], "little")
    pos += 9
    if pos + val_len > end:
        raise BinlogFormatError("USER_VAR_EVENT value truncated")
    raw = data[pos:pos + val_len]
    unsigned, type_name = _user_var_chunks(data, pos + val_len, end)
    value: bytes | int | float | str
    if vtype == STRING_RESULT:
        value = raw
    elif vtype == INT_RESULT:
        if val_len != 8:
            raise BinlogFormatError(f"USER_VAR_EVENT: INT value of {val_len} bytes")
        value = int.from_bytes(raw, "little", signed=not unsigned)
    elif vtype == REAL_RESULT:
        if val_len != 8:
            raise BinlogFormatError(f"USER_VAR_EVENT: REAL value of {val_len} bytes")
        value = struct.unpack("<d", raw)[0]
    elif vtype == DECIMAL_RESULT:
        value = _decimal_text(raw)
    else:
        raise BinlogFormatError(f"USER_VAR_EVENT of unknown value type {vtype}")
    return UserVar(name, value, vtype, charset, unsigned, type_name)


def _user_var_chunks(data: bytes, pos: int, end: int) -> tuple[bool, str | None]:
    unsigned = False
    type_name = None
    while pos < end:
        chunk = data[pos]
        pos += 1
        if chunk == _CHUNK_SIGNED:
            unsigned = False
        elif chunk == _CHUNK_UNSIGNED:
            unsigned = True
        elif chunk == _CHUNK_DATA_TYPE_NAME:
            if pos >= end or pos + 1 + data[pos] > end:
                raise BinlogFormatError("USER_VAR_EVENT: data type name truncated")
            type_name = data[pos + 1:pos + 1 + data[pos]].decode("ascii", "replace")
            pos += 1 + data[pos]
        else:
            raise BinlogFormatError(f"USER_VAR_EVENT: unknown attribute chunk {chunk}")
    return unsigned, type_name


# Packed DECIMAL (strings/decimal.cc bin2decimal): base-1e9 groups of 4 bytes, big-endian,
# with a shorter leading group in the integer part and a shorter trailing one in the
# fraction; the top bit is the sign (1 = positive) and a negative number is stored inverted.
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_size(precision: int, scale: int) -> int:
    intg, frac = precision - scale, scale
    return (intg // 9 * 4 + _DIG2BYTES[intg % 9]) + (frac // 9 * 4 + _DIG2BYTES[frac % 9])


def _decimal_text(raw: bytes) -> str:
    if len(raw) < 2:
        raise BinlogFormatError("USER_VAR_EVENT: DECIMAL value truncated")
    precision, scale = raw[0], raw[1]
    if precision > _MAX_DECIMAL_PRECISION or scale > _MAX_DECIMAL_SCALE or scale > precision:
        raise BinlogFormatError(f"USER_VAR_EVENT: bad DECIMAL({precision},{scale})")
    size = _decimal_size(precision, scale)
    if len(raw) - 2 < size:
        raise BinlogFormatError("USER_VAR_EVENT: DECIMAL value truncated")
    if size == 0:
        return "0"
    b = bytearray(raw[2:2 + size])
    negative = not b[0] & 0x80
    b[0] ^= 0x80
    if negative:
        b = bytearray(x ^ 0xFF for x in b)
    intg = precision - scale
    digits = []
    pos = 0
    for n in ([intg % 9] if intg % 9 else []) + [9] * (intg // 9) + [9] * (scale // 9) + (
            [scale % 9] if scale % 9 else []):
        width = _DIG2BYTES[n]
        group = int.from_bytes(b[pos:pos + width], "big")
        if group >= 10**n:
            raise BinlogFormatError(f"USER_VAR_EVENT: DECIMAL digit group {group} too large")
        digits.append(str(group).zfill(n))
        pos += width
    text = "".join(digits)
    int_part = text[:intg].lstrip("0") or "0"
    out = int_part + ("." + text[intg:] if scale else "")
    return "-" + out if negative else out
