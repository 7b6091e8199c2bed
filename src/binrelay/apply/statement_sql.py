"""The session context of an upstream statement, as SQL for a downstream MariaDB (pure).

A replica's SQL thread installs the context a Query event carries (its status variables,
and the INTVAR / RAND / USER_VAR events before it) directly in the session, then runs the
statement.  :func:`context_statements` gives the SET statements that have the same effect
on an ordinary client session, modelled on what ``mariadb-binlog`` prints for a Query event
(``Query_log_event::print_query_header``); run them, then the statement's exact bytes
(``QueryEvent.raw_query``), then :func:`reset_statements` to give the session back to the
applier.

Where this differs from ``mariadb-binlog``, on purpose:

- Stateless: every statement gets its whole context, including the values a replica
  assumes when a variable is not logged (``lc_time_names`` en_US, auto_increment (1, 1),
  ``LAST_INSERT_ID`` 0), so replays do not depend on what ran before on the connection.
- ``pseudo_thread_id`` is set only when asked for (``pseudo_thread``): it needs a privilege
  (SUPER or BINLOG REPLAY) an applier of rows does not.  With it, as on a replica, each
  upstream session's temporary tables are its own in the one downstream session (MariaDB
  keys a temporary table by the session's ``pseudo_thread_id``), and ``CONNECTION_ID()``
  reads the upstream's.  :func:`reset_statements` puts 0 back (no upstream session's), so
  that rows written in the session never resolve to a temporary table of their name.
- ``autocommit`` is left out unless asked for (a DDL, which commits by itself): setting it
  to 1 on a session with autocommit off commits the open transaction, and the binlog marks
  transaction boundaries itself (BEGIN / COMMIT / XID), which the replayer follows.  A DDL
  gets it as the upstream's session had it (1 when not logged): MariaDB's ``ALTER TABLE ...
  EXCHANGE PARTITION`` waits on its own row locks in a session with autocommit off
  (measured on 10.11: a lock wait timeout, every time).
- REAL user variables are exact (``repr``, as a DOUBLE literal), where ``mariadb-binlog``
  prints ``%.14g``; ``SET TIMESTAMP`` microseconds are zero-padded (MDEV-31761).
- String user variables take their collation by id, as the replica does: the
  ``collation_connection`` is set to the id and the bytes are CAST to CHAR (no table of
  collation names that a newer server would outgrow).
- sql_mode is given by names, a MySQL upstream's bits mapped as a MariaDB replica maps them
  (``binlog.statement.mysql_sql_mode_on_mariadb``), and NO_DIR_IN_CREATE is the applier's
  own, as a replica keeps its own.
- A two-phase ALTER (``binlog_alter_two_phase``) runs where its COMMIT ALTER is logged, in
  that event's context, as ``mariadb-binlog`` output does (it prints the START and ROLLBACK
  ALTER commented out): the caller leaves the START and ROLLBACK ALTER out
  (:func:`runs_as_logged`), and asking for their context raises.

Not reproduced (no session variable for them): Q_INVOKER (CURRENT_USER() as a definer),
and a MySQL upstream's ``default_collation_for_utf8mb4``, ``sql_require_primary_key``,
``default_table_encryption``, ``enable_cascade_triggers``.  A MySQL upstream's collation
ids are used as they are: those MariaDB lacks (MySQL 8's 255, utf8mb4_0900_ai_ci, and the
other 0900 ones) fail the SET, loudly, rather than being replaced by a guess.

Statement order matters: everything that names a user variable or the default database
runs before ``character_set_client`` changes (the applier sends UTF-8), and the statement
context that changes parsing or evaluation (sql_mode) comes after the variables are set.
Every identifier is quoted; values are literals built here (no parameters), in a form that
parses the same under every sql_mode (no backslashes, no double quotes).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from binrelay.apply.sql import REPLICA_SQL_MODE, quote_ident
from binrelay.binlog import statement as st
from binrelay.binlog.statement import QueryStatus, UserVar
from binrelay.errors import ApplyError

__all__ = ["context_statements", "reset_statements", "runs_as_logged", "sql_string"]

_BINARY_COLLATION = 63
#: A START ALTER runs nothing yet; a ROLLBACK ALTER ends an ALTER that never took effect.
_NOT_RUN = st.FL_START_ALTER | st.FL_ROLLBACK_ALTER


def runs_as_logged(status: QueryStatus) -> bool:
    """Whether a Query event's statement is run where it is logged: not the START ALTER of a
    two-phase ALTER (it runs at its COMMIT ALTER, after the transactions that committed
    upstream while it ran, whose rows are in the table's old shape), nor its ROLLBACK ALTER
    (the upstream undid it)."""
    return not (status.gtid_flags3 or 0) & _NOT_RUN


def sql_string(text: str) -> str:
    """A string literal that means ``text`` whatever the sql_mode (NO_BACKSLASH_ESCAPES,
    ANSI_QUOTES): plain quotes for printable ASCII, a hex literal otherwise."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return "'" + text.replace("'", "''") + "'"
    return "_utf8mb4 X'" + text.encode("utf-8", "surrogateescape").hex() + "'"


def _user_var(item: Any) -> UserVar:
    return item if isinstance(item, UserVar) else item.var  # a UserVarEvent


def _pair(item: Any, a: str, b: str) -> tuple[int, int]:
    if isinstance(item, tuple):
        return item
    return getattr(item, a), getattr(item, b)  # an IntvarEvent / RandEvent


def _value_literal(var: UserVar) -> str:
    value = var.value
    if value is None:
        return "NULL"
    if var.type == st.INT_RESULT:
        assert isinstance(value, int)
        return f"CAST({value} AS UNSIGNED)" if var.unsigned else str(value)
    if var.type == st.REAL_RESULT:
        assert isinstance(value, float)
        text = repr(value)
        # A literal without an exponent is a DECIMAL; the variable must stay a DOUBLE.
        return text if "e" in text else text + "e0"
    if var.type == st.DECIMAL_RESULT:
        assert isinstance(value, str)
        return value
    assert isinstance(value, bytes)
    if var.charset == _BINARY_COLLATION:
        return "_binary X'" + value.hex() + "'"
    return "CAST(X'" + value.hex() + "' AS CHAR)"


_NO_DIR_IN_CREATE = 1 << st.MARIADB_SQL_MODES.index("NO_DIR_IN_CREATE")
# A replica keeps its own NO_DIR_IN_CREATE (DATA/INDEX DIRECTORY name the upstream's disks):
# the applier's, here.
_OWN_NO_DIR_IN_CREATE = st.sql_mode_bits(REPLICA_SQL_MODE, mariadb=True) & _NO_DIR_IN_CREATE


def _sql_mode(status: QueryStatus, *, mariadb_upstream: bool, upstream_version: str | None,
              drop_unmapped_sql_modes: bool) -> str:
    assert status.sql_mode is not None
    if mariadb_upstream:
        bits = status.sql_mode
    else:
        mapped = st.mysql_sql_mode_on_mariadb(status.sql_mode, upstream_version)
        if mapped.unmapped and not drop_unmapped_sql_modes:
            raise ApplyError(
                "the MySQL upstream's sql_mode has modes MariaDB has no equivalent for: "
                + ", ".join(mapped.unmapped),
                hint="replay without them only if the statements do not depend on them "
                     "(drop_unmapped_sql_modes)")
        bits = mapped.bits
    bits = bits & ~_NO_DIR_IN_CREATE | _OWN_NO_DIR_IN_CREATE
    try:
        names = st.sql_mode_names(bits, mariadb=True)
    except ValueError as exc:
        raise ApplyError(f"upstream sql_mode: {exc}",
                         hint="this binrelay does not know a newer server's sql_mode") from None
    return sql_string(",".join(names))


def _flags2(flags2: int, *, mariadb_upstream: bool, upstream_version: str | None,
            autocommit: bool) -> list[str]:
    written = st.options_written_to_binlog(upstream_version, mariadb=mariadb_upstream)

    def on(bit: int) -> int:
        return 1 if flags2 & bit else 0

    out = [f"@@session.foreign_key_checks = {1 - on(st.OPTION_NO_FOREIGN_KEY_CHECKS)}",
           f"@@session.sql_auto_is_null = {on(st.OPTION_AUTO_IS_NULL)}",
           f"@@session.unique_checks = {1 - on(st.OPTION_RELAXED_UNIQUE_CHECKS)}"]
    if autocommit:
        out.append(f"@@session.autocommit = {1 - on(st.OPTION_NOT_AUTOCOMMIT)}")
    out.append("@@session.check_constraint_checks = "
               f"{1 - on(st.OPTION_NO_CHECK_CONSTRAINT_CHECKS)}")
    if written & st.OPTION_IF_EXISTS:
        out.append(f"@@session.sql_if_exists = {on(st.OPTION_IF_EXISTS)}")
    if written & st.OPTION_EXPLICIT_DEF_TIMESTAMP:
        out.append("@@session.explicit_defaults_for_timestamp = "
                   f"{on(st.OPTION_EXPLICIT_DEF_TIMESTAMP)}")
    # The variable exists from MariaDB 10.11 on: only said when the upstream has it too.
    if flags2 & st.OPTION_INSERT_HISTORY or (mariadb_upstream and _at_least(
            upstream_version, (10, 11, 0))):
        out.append("@@session.system_versioning_insert_history = "
                   f"{on(st.OPTION_INSERT_HISTORY)}")
    return out


def _at_least(version: str | None, wanted: tuple[int, int, int]) -> bool:
    if version is None:
        return True
    parts = version.split("-", 1)[0].split(".")
    try:
        return tuple(int(p) for p in parts[:3]) >= wanted
    except ValueError:
        return False


def _character_set_collations(pairs: tuple[tuple[int, int], ...]) -> str:
    # The variable takes names; the event has ids, which name what they name on the
    # downstream (as on a replica, which skips the pairs it does not know: CONCAT_WS skips
    # the NULL of a failed lookup).
    if not pairs:
        return "''"
    table = "information_schema.COLLATION_CHARACTER_SET_APPLICABILITY"
    parts = [f"(SELECT CONCAT(a.CHARACTER_SET_NAME, '=', b.FULL_COLLATION_NAME) FROM {table} a,"
             f" {table} b WHERE a.ID = {int(frm)} AND b.ID = {int(to)} LIMIT 1)"
             for frm, to in pairs]
    return "CONCAT_WS(','" + "".join(", " + p for p in parts) + ")"


def context_statements(
    status: QueryStatus, *, schema: str, timestamp: int, thread_id: int,
    intvars: Iterable[Any] = (), rand: Any = None, user_vars: Iterable[Any] = (),
    mariadb_upstream: bool, upstream_version: str | None = None, suppress_use: bool = False,
    autocommit: bool = False, drop_unmapped_sql_modes: bool = False,
    pseudo_thread: bool = False,
) -> list[str]:
    """The statements to run before an upstream statement, in order.

    ``status``: ``QueryEvent.status``; ``schema``: its default database; ``timestamp``: its
    header's timestamp; ``thread_id``: the upstream session's, set as ``pseudo_thread_id``
    when ``pseudo_thread`` (see the module).  ``intvars`` (``IntvarEvent`` or ``(kind,
    value)``), ``rand`` (``RandEvent``, ``(seed1, seed2)`` or None) and ``user_vars``
    (``UserVarEvent`` or ``UserVar``): the events of those types between the previous
    statement and this one.  ``upstream_version``: the FDE's server version, which says
    which flags2 bits are logged (``None``: a current server).  ``suppress_use``: the
    event has LOG_EVENT_SUPPRESS_USE_F (CREATE/DROP DATABASE), so its database is not
    made the default.  ``autocommit``: also set @@autocommit from flags2 (see the module).
    ``drop_unmapped_sql_modes``: replay a MySQL upstream's statement without the sql_mode
    bits MariaDB lacks (``binlog.statement.mysql_sql_mode_on_mariadb``) instead of raising.

    Raises :class:`~binrelay.errors.ApplyError` for a context that cannot be reproduced.
    """
    if not runs_as_logged(status):
        raise ApplyError("the START or ROLLBACK ALTER of a two-phase ALTER runs nothing",
                         hint="report this: the ALTER runs at its COMMIT ALTER")
    out: list[str] = []
    use_db = bool(schema) and not suppress_use
    if use_db:
        out.append("USE " + quote_ident(schema))

    strings: dict[int, list[str]] = {}
    others: list[str] = []
    for item in user_vars:
        var = _user_var(item)
        if var.data_type_name is not None:
            raise ApplyError(f"user variable @{var.name} is of type {var.data_type_name}, "
                             "which binrelay cannot reproduce")
        assign = "@" + quote_ident(var.name) + " := "
        if var.value is not None and var.type == st.STRING_RESULT \
                and var.charset != _BINARY_COLLATION:
            strings.setdefault(var.charset, []).append(assign + _value_literal(var))
        else:
            others.append(assign + _value_literal(var))
    for collation, assigns in strings.items():
        # CAST(... AS CHAR) takes collation_connection, which is set by id first.
        out.append(f"SET @@session.collation_connection = {int(collation)}")
        out.append("SET " + ", ".join(assigns))

    last_insert_id = 0
    for item in intvars:
        kind, value = _pair(item, "kind", "value")
        if kind == st.INSERT_ID_EVENT:
            others.append(f"INSERT_ID = {int(value)}")
        elif kind == st.LAST_INSERT_ID_EVENT:
            last_insert_id = int(value)
        else:
            raise ApplyError(f"INTVAR event of unknown kind {kind}")
    # A replica resets it after every statement, and an upstream that read 0 logs nothing.
    others.append(f"LAST_INSERT_ID = {last_insert_id}")
    if rand is not None:
        seed1, seed2 = _pair(rand, "seed1", "seed2")
        others.append(f"@@RAND_SEED1 = {int(seed1)}, @@RAND_SEED2 = {int(seed2)}")

    when = str(int(timestamp))
    if status.microseconds:
        when += f".{status.microseconds:06d}"
    session = [f"@@session.timestamp = {when}"]
    if pseudo_thread:
        session.append(f"{_PSEUDO_THREAD}{int(thread_id)}")
    if status.flags2 is not None:
        session += _flags2(status.flags2, mariadb_upstream=mariadb_upstream,
                           upstream_version=upstream_version, autocommit=autocommit)
    elif autocommit:
        session.append("@@session.autocommit = 1")
    if status.sql_mode is not None:
        session.append("@@session.sql_mode = " + _sql_mode(
            status, mariadb_upstream=mariadb_upstream, upstream_version=upstream_version,
            drop_unmapped_sql_modes=drop_unmapped_sql_modes))
    inc, off = status.auto_increment or (1, 1)
    session.append(f"@@session.auto_increment_increment = {int(inc)}, "
                   f"@@session.auto_increment_offset = {int(off)}")
    # Not logged means en_US (0): that is what a replica sets.
    session.append(f"@@session.lc_time_names = {int(status.lc_time_names or 0)}")
    if status.collation_database:
        session.append(f"@@session.collation_database = {int(status.collation_database)}")
    elif not use_db:
        # Not logged: a replica uses the default database's, which USE gave above.
        session.append("@@session.collation_database = DEFAULT")
    if status.time_zone is not None:
        # Not logged means the statement did not depend on it.
        session.append("@@session.time_zone = " + sql_string(status.time_zone))
    if status.explicit_defaults_for_timestamp is not None:
        session.append("@@session.explicit_defaults_for_timestamp = "
                       f"{1 if status.explicit_defaults_for_timestamp else 0}")
    if status.character_set_collations is not None:
        session.append("@@session.character_set_collations = "
                       + _character_set_collations(status.character_set_collations))
    if status.charset is not None:
        client, connection, server = status.charset
        # Last: nothing after it may carry non-ASCII text (the statement itself runs in it).
        session.append(f"@@session.character_set_client = {int(client)}, "
                       f"@@session.collation_connection = {int(connection)}, "
                       f"@@session.collation_server = {int(server)}")
    # One statement: a SET assigns left to right, and nothing before the session's part
    # changes how the statement parses.
    out.append("SET " + ", ".join(others + session))
    return out


#: How :func:`context_statements` gives a session the upstream session's thread id.
_PSEUDO_THREAD = "@@session.pseudo_thread_id = "


def sets_pseudo_thread(setup: Iterable[str]) -> bool:
    """Whether ``setup`` (:func:`context_statements`') gives the session an upstream
    session's thread id, which its reset must take back."""
    return any(_PSEUDO_THREAD in sql for sql in setup)


def reset_statements(*, foreign_key_checks: bool = False, user_vars: Iterable[Any] = (),
                     pseudo_thread: bool = False) -> list[str]:
    """Statements that give a session back to the applier's own settings after a replay
    (``Downstream.connect``): utf8mb4, time zone +00:00, :data:`REPLICA_SQL_MODE`,
    ``foreign_key_checks`` as the caller says (the applier's sessions run with 0),
    ``check_constraint_checks`` 0 (as they run: ``Downstream.connect``), and the defaults
    for every other variable :func:`context_statements` sets; autocommit off (a
    DDL's context may have set it); ``INSERT_ID`` 0 drops a value no insert consumed.
    ``user_vars`` (names, ``UserVar`` or ``UserVarEvent``): set back to NULL.  The RAND
    seeds have no default to go back to; the applier never calls RAND().
    ``pseudo_thread``: the context set an upstream session's thread id; 0 is no upstream
    session's, so the rows written next never meet one's temporary table of their name.
    """
    sets = ["@@session.timestamp = DEFAULT", "@@session.time_zone = '+00:00'",
            "@@session.sql_mode = " + sql_string(REPLICA_SQL_MODE),
            f"@@session.foreign_key_checks = {1 if foreign_key_checks else 0}",
            "@@session.check_constraint_checks = 0"]
    sets += [f"@@session.{name} = DEFAULT" for name in (
        "sql_auto_is_null", "unique_checks", "sql_if_exists",
        "explicit_defaults_for_timestamp", "system_versioning_insert_history",
        "auto_increment_increment", "auto_increment_offset", "lc_time_names",
        "collation_server", "collation_database")]
    sets += ["INSERT_ID = 0", "LAST_INSERT_ID = 0", "@@session.autocommit = 0"]
    if pseudo_thread:
        sets.append(_PSEUDO_THREAD + "0")
    cleared = ["@" + quote_ident(item if isinstance(item, str) else _user_var(item).name)
               + " := NULL" for item in user_vars]
    if not cleared:
        # ASCII only, which every client character set reads alike: one statement.
        return ["SET NAMES utf8mb4, " + ", ".join(sets)]
    # SET NAMES first: the rest names user variables in UTF-8.
    return ["SET NAMES utf8mb4", "SET " + ", ".join(sets + cleared)]
