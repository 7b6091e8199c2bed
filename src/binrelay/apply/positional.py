"""Rows logged without column names, read by position as a replica reads them.

MariaDB logs a table map's column names, signedness, character sets and primary key only
with ``binlog_row_metadata = FULL`` (its default is NO_LOG; MySQL's, MINIMAL, logs the
signedness and character sets but no names or key), and servers older than the setting
never do.  A replica applies such rows by position into its own table, whose columns are
the upstream's at that point of the binlog: the DDL before the rows was applied in order.
So does binrelay: :func:`complete` gives a nameless table map the downstream table's
column names, and what the upstream did not log of signedness, character sets and primary
key, from the catalog (``TableRules.columns``, read while the sync is ``positional``).

A table map that does not fit the downstream table stops the sync, as a replica's SQL
thread stops on a table definition that does not match (error 1677): fewer columns
downstream than logged, or a column that cannot hold the logged one's values
(``column_fit``: of another kind, or narrower).  A downstream with more columns than logged
is what a replica accepts too: they keep their defaults.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from binrelay.apply.catalog import DownstreamColumn, TableColumns, TableRules
from binrelay.apply.changes import TableRef
from binrelay.apply.column_fit import FAMILIES, OLD_TEMPORAL, misfit, upstream_type
from binrelay.errors import NamelessRowsError, UnfaithfulApplyError
from binrelay.rows import coltypes as t
from binrelay.rows.charsets import collation_of_charset
from binrelay.rows.tablemap import (
    PRIMARY_KEY_WITH_PREFIX,
    SIGNEDNESS,
    SIMPLE_PRIMARY_KEY,
    Column,
    TableMap,
)

__all__ = ["complete", "nameless"]

#: The SQL names of the integer types the binlog names otherwise (LONG is INT...).
_SQL_NAMES = {t.MYSQL_TYPE_TINY: "TINYINT", t.MYSQL_TYPE_SHORT: "SMALLINT",
              t.MYSQL_TYPE_INT24: "MEDIUMINT", t.MYSQL_TYPE_LONG: "INT",
              t.MYSQL_TYPE_LONGLONG: "BIGINT"}

_CACHE_SIZE = 1024
#: Completed table maps by the nameless one's identity (parsed table maps are shared by the
#: process's decoders), with the columns they were completed with: a busy table's map is
#: completed, and its row decoders compiled, once, not once per batch.
_DONE: dict[int, tuple[TableMap, TableColumns, TableMap]] = {}
_LOCK = threading.Lock()


def complete(tm: TableMap, rules: TableRules) -> TableMap:
    """``tm`` with the downstream table's column names, and what the upstream did not log of
    signedness, character sets and primary key; ``tm`` itself when it has names.  Raises
    :class:`NamelessRowsError` when the rules hold no columns (not ``positional``), and
    :class:`UnfaithfulApplyError` when the downstream table is not there or does not fit:
    a logged column its downstream column cannot hold (``column_fit``), named or not."""
    ref = TableRef(tm.schema, tm.table)
    info = rules.columns_of(ref)
    if tm.has_names:
        if info is None:
            return tm  # not there (the write says so), or made since the rules were read
    elif not rules.positional:
        raise nameless(ref)
    elif info is None:
        raise UnfaithfulApplyError(
            "rows logged without column names for a table the downstream does not have:"
            " they are applied by position, into the downstream's table", table=str(ref),
            hint="create the table downstream as the upstream had it at this point of the"
                 " binlog, or set binlog_row_metadata = FULL on the upstream")
    found = _DONE.get(id(tm))
    if found is not None and found[0] is tm and found[1] == info:
        return found[2]
    done = _checked(tm, ref, info) if tm.has_names else _completed(tm, ref, info)
    with _LOCK:  # decoders of other threads share the cache
        if len(_DONE) >= _CACHE_SIZE:
            for old in list(_DONE)[:len(_DONE) - _CACHE_SIZE + 1]:
                _DONE.pop(old, None)
        _DONE[id(tm)] = (tm, info, done)
    return done


def nameless(ref: TableRef) -> NamelessRowsError:
    return NamelessRowsError(
        "the upstream logged these rows without column names (binlog_row_metadata = NO_LOG"
        " or MINIMAL), and the sync has not read the downstream's columns to apply them by",
        table=str(ref), hint="report this: the sync reads them when it meets such rows")


def _completed(tm: TableMap, ref: TableRef, info: TableColumns) -> TableMap:
    downstream = info.columns
    key, prefixes = info.primary_key, info.primary_key_prefixes
    logged = len(tm.columns)
    if info.hashes and len(downstream) > logged >= info.hashes and all(
            c.type == t.MYSQL_TYPE_LONGLONG for c in tm.columns[logged - info.hashes:]):
        # Columns the downstream has after the logged ones come before its long unique
        # keys' hidden hashes, which the server keeps last, and the binlog logs last.
        mine = logged - info.hashes
        if all(c.data_type == "bigint" for c in downstream[mine:logged]):
            # Or the upstream has no such key, and its last columns are BIGINTs in place.
            raise UnfaithfulApplyError(
                "rows logged without column names end in BIGINT columns that may be the"
                " upstream's long unique keys' hidden hashes or its own columns: the"
                " downstream's table has more columns and such keys", table=str(ref),
                hint="give the downstream's table the upstream's columns, or set"
                     " binlog_row_metadata = FULL on the upstream")
        downstream = (*downstream[:mine], *downstream[len(downstream) - info.hashes:])
        if any(i >= mine for i in key):
            key, prefixes = (), ()  # a key on columns not logged: the rows are keyless here
    if len(downstream) < len(tm.columns):
        raise UnfaithfulApplyError(
            f"the upstream logged {len(tm.columns)} columns without their names, the"
            f" downstream's table has {len(downstream)}: rows are applied by position",
            table=str(ref), hint="give the downstream's table the upstream's columns, in its"
                                 " order, or set binlog_row_metadata = FULL on the upstream")
    signed_logged = SIGNEDNESS in tm.metadata_fields
    columns = []
    for col, ds in zip(tm.columns, downstream, strict=False):
        if col.type in FAMILIES and ds.data_type not in FAMILIES[col.type]:
            raise UnfaithfulApplyError(
                f"column {col.index + 1} is {_SQL_NAMES.get(col.type, col.type_name)} in"
                " the binlog, the downstream's"
                f" column {ds.name!r} in that place is {ds.data_type.upper()}: rows logged"
                " without column names are applied by position", table=str(ref),
                hint="give the downstream's table the upstream's columns, in its order, or"
                     " set binlog_row_metadata = FULL on the upstream")
        _fits(ref, col, ds, signed_logged)
        columns.append(_column(col, ds.name, ds.unsigned, ds.charset, signed_logged))
    keyed = SIMPLE_PRIMARY_KEY in tm.metadata_fields or \
        PRIMARY_KEY_WITH_PREFIX in tm.metadata_fields
    if keyed:
        key, prefixes = tm.primary_key, tm.primary_key_prefixes
    elif any(i >= logged for i in key):
        key, prefixes = (), ()  # a key on columns not logged: the rows are keyless here
    return replace(tm, columns=tuple(columns), primary_key=key, primary_key_prefixes=prefixes,
                   has_names=True, decoders={})


def _checked(tm: TableMap, ref: TableRef, info: TableColumns) -> TableMap:
    """``tm`` (logged with names) when the downstream's columns of those names can hold
    every value logged; a column the downstream does not have is the write's to refuse."""
    by_name = {c.name.lower(): c for c in info.columns}
    signed_logged = SIGNEDNESS in tm.metadata_fields
    for col in tm.columns:
        ds = by_name.get((col.name or "").lower())
        if ds is not None:
            _fits(ref, col, ds, signed_logged)
    return tm


def _fits(ref: TableRef, col: Column, ds: DownstreamColumn, signed_logged: bool) -> None:
    why = misfit(col, ds, signedness_logged=signed_logged)
    if why is not None:
        raise UnfaithfulApplyError(
            f"column {ds.name!r} is {upstream_type(col)} in the binlog and"
            f" {ds.column_type or ds.data_type} downstream ({why}): its values would be"
            " changed on the way in, where a replica stops (error 1677)", table=str(ref),
            hint="if the upstream's column has no fractional seconds (MySQL 5.5), give the"
                 " downstream's none either; if it has (MariaDB 5.3-10.0's format), rewrite"
                 " the upstream's table (ALTER TABLE ... FORCE, mysql56_temporal_format ="
                 " ON) and resynchronise it" if why == OLD_TEMPORAL else
                 "give the downstream's column the upstream's type (or a wider one of the"
                 " same kind), or leave the table out of the sync")


def _column(col: Column, name: str, unsigned: bool, charset: str | None,
            signed_logged: bool) -> Column:
    changes: dict[str, object] = {"name": name}
    if col.type in t.NUMERIC_TYPES and not signed_logged:
        changes["unsigned"] = unsigned
    if col.collation is None and col.type in t.CHARACTER_TYPES:
        changes["collation"] = collation_of_charset(charset)
    return replace(col, **changes)
