"""Whether the downstream may take two of the upstream's key values for one row.

A unique key compares text by its column's collation: under ``utf8mb4_general_ci``
``'a'`` and ``'A'`` are one key, under ``utf8mb4_bin`` two, and under a PAD SPACE
collation ``'a'`` and ``'a '`` are one.  When the downstream's key column compares more
leniently than the upstream's (``utf8mb4_bin`` upstream, ``_ci`` downstream), two upstream
rows may be one downstream row: a replica's write of the second stops on a duplicate key
(error 1062).  A keyed apply would not: its REPLACE of ``'A'`` deletes the row of
``'a'``, and the data would differ with the checkpoint saying consistent.  Such a table
is replayed in relay order, by INSERT, UPDATE and DELETE of the logged rows, which stops
where the replica stops.

The upstream's collations are known only when the table map logs them
(``binlog_row_metadata`` MINIMAL or FULL); with NO_LOG the downstream's word is taken (as
for rows by position: ``binrelay.apply.positional``).

Pure: a table map and the downstream table's columns in, the reason out.
"""

from __future__ import annotations

from collections.abc import Iterable

from binrelay.apply.catalog import TableColumns
from binrelay.rows import coltypes as t
from binrelay.rows.charsets import BINARY_COLLATION, always_text
from binrelay.rows.tablemap import COLUMN_CHARSET, DEFAULT_CHARSET, TableMap

__all__ = ["lenient_key", "loose_key", "may_fold", "pads"]


#: Column types whose values a key compares exactly (numbers, bits, years, dates and
#: times), as the upstream logs them; any other (text, ENUM and SET by a collation; FLOAT and
#: DOUBLE, whose -0 is 0; binary strings, UUID and INET, which share text's type codes) may
#: be compared by more than its logged value.  (As the downstream's catalog names them:
#: ``catalog.EXACT_KEY_TYPES``.)
_EXACT_TYPES = frozenset({
    t.MYSQL_TYPE_TINY, t.MYSQL_TYPE_SHORT, t.MYSQL_TYPE_INT24, t.MYSQL_TYPE_LONG,
    t.MYSQL_TYPE_LONGLONG, t.MYSQL_TYPE_DECIMAL, t.MYSQL_TYPE_NEWDECIMAL, t.MYSQL_TYPE_BIT,
    t.MYSQL_TYPE_YEAR, t.MYSQL_TYPE_DATE, t.MYSQL_TYPE_NEWDATE, t.MYSQL_TYPE_TIME,
    t.MYSQL_TYPE_TIME2, t.MYSQL_TYPE_DATETIME, t.MYSQL_TYPE_DATETIME2,
    t.MYSQL_TYPE_TIMESTAMP, t.MYSQL_TYPE_TIMESTAMP2})


def may_fold(tm: TableMap, key: Iterable[int]) -> bool:
    """Whether a key (indexes into the table map's columns) has a column whose values the
    downstream may compare by more than their bytes: what decides, for a table the rules
    know nothing of (made since they were read), that its survivors are written by one
    task, as :func:`loose_key` decides with the downstream's columns."""
    columns = tm.columns
    return any(columns[i].type not in _EXACT_TYPES for i in key)


def lenient_key(tm: TableMap, info: TableColumns) -> str | None:
    """Why a unique key of the downstream's table may take two of the upstream's values
    for one (a text column of it compares more leniently downstream), or None when every
    such column compares at least as strictly as the upstream's."""
    if not tm.has_names or (DEFAULT_CHARSET not in tm.metadata_fields
                            and COLUMN_CHARSET not in tm.metadata_fields):
        return None  # the upstream's collations are not logged
    logged = {(c.name or "").lower(): c for c in tm.columns}
    # The downstream's unique keys, and the upstream's key, by which rows are deleted
    # before their INSERT where the downstream has no key within it: a lenient collation
    # there deletes every row equal to it.
    keyed = {part.split("(", 1)[0] for key in info.unique for part in key} | \
        {(tm.columns[i].name or "").lower() for i in tm.primary_key}
    if not keyed:
        return None
    for down in info.columns:
        name = down.name.lower()
        if name not in keyed or down.collation is None or down.data_type in ("enum", "set"):
            continue
        col = logged.get(name)
        if col is None or col.collation is None or col.collation == down.collation_id:
            continue
        # A CHAR's value is stored without its trailing spaces: whether the upstream's
        # collation pads cannot tell two of its values apart.
        padded = col.type == t.MYSQL_TYPE_STRING or pads(col.collation) is True
        if not _as_strict(padded, down.collation, down.charset):
            return (f"key column {down.name!r} compares by {down.collation} downstream and by"
                    f" another collation (id {col.collation}) upstream")
    return None


def loose_key(info: TableColumns, key_columns: Iterable[str]) -> str | None:
    """A column of the key (as the downstream compares it) for which two different logged
    values may be one key value, or None.  Text under a collation other than binary or
    ``_bin`` of a set whose values are text (``fold_key`` drops their trailing spaces,
    what a PAD SPACE ``_bin`` ignores): ``fold_key`` covers case, accents and trailing
    spaces, not every collation's equivalences (under ``utf8mb4_general_ci`` every
    character beyond the BMP is one, ``'ß'`` is ``'s'``; ``unicode_ci`` ignores some
    characters and expands others); a FLOAT or DOUBLE, whose ``-0`` is ``0``.  Such a
    table's survivors are written by one task, whose deletes run before its writes: a
    delete of one spelling then never removes a row written under another
    (``docs/apply.md``)."""
    wanted = {c.lower() for c in key_columns}
    for down in info.columns:
        if down.name.lower() not in wanted:
            continue
        if down.data_type in ("float", "double"):
            return down.name
        if down.collation is None or down.data_type in ("enum", "set"):
            continue
        compares = _compares(down.collation, down.charset)
        # (A PAD SPACE _bin of bytes values: fold_key drops no trailing space of them.)
        if compares == _OTHER or (compares == _PAD_BIN and not always_text(down.charset)):
            return down.name
    return None


_EXACT, _PAD_BIN, _OTHER = "bytes", "bytes but trailing spaces", "by weights"


def _compares(collation: str, charset: str | None) -> str:
    """How a collation compares two values: by their bytes, by their bytes but trailing
    spaces (a PAD SPACE ``_bin``), or by weights (every other one)."""
    name = collation.lower()
    if charset == "binary" or name.endswith(("_nopad_bin", "_0900_bin")):
        return _EXACT
    return _PAD_BIN if name.endswith("_bin") else _OTHER


def _as_strict(padded: bool, collation: str, charset: str | None) -> bool:
    """Whether values the upstream's collation tells apart stay apart under the
    downstream's: its bytes compared exactly, or a PAD SPACE ``_bin`` collation (only
    trailing spaces ignored) where the upstream's values differ in more (``padded``).
    (A value's bytes in another character set are told apart as well: ``column_fit``
    stops a set that cannot hold the upstream's text.)"""
    compares = _compares(collation, charset)
    return compares == _EXACT or (compares == _PAD_BIN and padded)


def pads(collation_id: int) -> bool | None:
    """Whether a collation ignores trailing spaces (PAD SPACE), by its id; None when the id
    does not say.  MariaDB numbers its NO PAD collations from 1024 to 2047, and in its
    UCA 14 ids (2048 on) bit 2 is NO PAD; MySQL 8's ``utf8mb4_0900`` family (255–323) is
    NO PAD; every older collation pads."""
    if collation_id == BINARY_COLLATION:
        return False  # bytes: a trailing space is a byte like any other
    if 2048 <= collation_id < 4096:
        return not collation_id & 4
    if 1024 <= collation_id < 2048 or 255 <= collation_id <= 323:
        return False
    if collation_id < 1024:
        return True
    return None
