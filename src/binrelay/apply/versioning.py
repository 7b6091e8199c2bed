"""System-versioned tables (MariaDB): their row changes replayed as a replica stores them.

A versioned table's rows carry a period, ``row_start``/``row_end`` (implicit and invisible,
or named in ``PERIOD FOR SYSTEM_TIME``); a current row ends at the maximum TIMESTAMP, a
history row at the moment it stopped being current.  The upstream logs what it stored:

* an INSERT as a write of the current row;
* an UPDATE as an update of the current row (its new ``row_start`` = the statement's time
  T) followed by a write of the old version as a history row ending at T;
* a DELETE (and the delete half of a REPLACE) as an update setting ``row_end`` to T;
* ``DELETE HISTORY`` as deletes of history rows.

A replica stores those images below SQL.  Through SQL the same rows come out as follows:
a write names ``row_start``/``row_end`` under ``system_versioning_insert_history = 1``
(MariaDB 10.11+), which stores them as given; an update of a current row runs at
``@@timestamp`` = its new ``row_start``, so that the server moves the old version to history
ending at that moment, which is the history row the upstream logged next (that write is
then skipped, not written twice); a versioned delete runs at ``@@timestamp`` = its
``row_end``; a deleted history row goes with ``DELETE HISTORY … BEFORE SYSTEM_TIME`` just
after its end (the upstream's statement deleted every older one too: history is deleted by
age, never row by row).  What SQL cannot reproduce (an update of a history row, a current
row removed without history) stops with one line.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator

from binrelay.apply.changes import ABSENT, DELETE, INSERT, Change
from binrelay.apply.sql import Statement, change_statement, quote_ident, quote_table
from binrelay.errors import UnfaithfulApplyError

__all__ = ["HistoryReplay", "is_current_end"]

# The largest TIMESTAMP(6) a current row ends at: 2038-01-19 03:14:07.999999 UTC (32-bit
# TIMESTAMP), 2106-02-07 06:28:15.999999 UTC from MariaDB 11.5 (unsigned 32-bit).
_CURRENT_ENDS = frozenset({"2038-01-19 03:14:07.999999", "2106-02-07 06:28:15.999999"})

_HISTORY_ON = Statement("SET SESSION system_versioning_insert_history = 1")
_HISTORY_OFF = Statement("SET SESSION system_versioning_insert_history = 0")
_CLOCK_OFF = Statement("SET SESSION timestamp = DEFAULT")


def is_current_end(value: object) -> bool:
    """Whether ``row_end`` (UTC text, as changes carry TIMESTAMP values) is a current row's."""
    return value in _CURRENT_ENDS


def _clock(at: object) -> Statement:
    # The apply session's time zone is UTC, the value's text too.
    return Statement("SET SESSION timestamp = UNIX_TIMESTAMP(%s)", (at,))


class HistoryReplay:
    """Statements for one ordered run of changes, some of versioned tables.

    Stateful across the run: an update replayed through SQL makes the server write the
    history row that the upstream logged after it; that write is recognised and skipped.
    Call :meth:`finish` for the statements that restore the session.
    """

    def __init__(self) -> None:
        #: History rows the server wrote for us: (table, row_end, ((index, value), ...)).
        self._expected: list[tuple[object, object, tuple[tuple[int, object], ...]]] = []
        self._inserting = False
        self._clocked = False

    def statements(self, change: Change) -> Iterator[Statement]:
        if change.period is None:
            st = change_statement(change)
            if st is not None:
                yield st
            return
        start, end = change.period
        if change.op == INSERT:
            yield from self._insert(change, end)
        elif change.op == DELETE:
            yield from self._delete_history(change, end)
        else:
            yield from self._update(change, start, end)

    def finish(self) -> list[Statement]:
        out = []
        if self._inserting:
            out.append(_HISTORY_OFF)
        if self._clocked:
            out.append(_CLOCK_OFF)
        self._inserting = self._clocked = False
        self._expected.clear()
        return out

    # ---- per operation --------------------------------------------------------------------

    def _insert(self, change: Change, end: int) -> Iterator[Statement]:
        after = change.after
        assert after is not None
        if not is_current_end(after[end]):
            named = next((e for e in self._expected if e[0] == change.table
                          and e[1] == after[end] and all(after[i] == v for i, v in e[2])),
                         None)
            if named is not None:
                self._expected.remove(named)  # the server wrote it with the update before
                return
        if not self._inserting:
            self._inserting = True
            yield _HISTORY_ON
        st = change_statement(change)
        assert st is not None
        yield st

    def _update(self, change: Change, start: int, end: int) -> Iterator[Statement]:
        before, after = change.before, change.after
        assert before is not None and after is not None
        if before[end] is not ABSENT and not is_current_end(before[end]):
            raise _cannot(change, "an update of a history row")
        plain = _without_period(change)
        if after[end] is not ABSENT and not is_current_end(after[end]):
            # A versioned DELETE: the row becomes history, ending at the logged moment.
            yield from self._at(after[end])
            st = change_statement(Change(change.table, DELETE, plain.columns, plain.key,
                                         plain.before, None, change.position,
                                         change.fk_checks, text=plain.text))
            assert st is not None
            yield st
            return
        begins = after[start]
        if begins is ABSENT:
            raise _cannot(change, "an update of a current row without its new row start")
        st = change_statement(plain)
        if st is None:
            return
        if before[start] is ABSENT or before[start] != begins:
            # The old version goes to history, ending where the new one begins.
            self._expected.append((change.table, begins, tuple(
                (i, v) for i, v in enumerate(before) if v is not ABSENT and i not in
                change.period)))
        yield from self._at(begins)
        yield st

    def _delete_history(self, change: Change, end: int) -> Iterator[Statement]:
        before = change.before
        assert before is not None
        ended = before[end]
        if ended is ABSENT or is_current_end(ended):
            raise _cannot(change, "a current row deleted without keeping its history")
        yield Statement(f"DELETE HISTORY FROM {quote_table(change.table).replace('%', '%%')}"
                        " BEFORE SYSTEM_TIME TIMESTAMP %s", (_just_after(ended),),
                        change.table, (change.position,))

    def _at(self, moment: object) -> Iterator[Statement]:
        self._clocked = True
        yield _clock(moment)


def _without_period(change: Change) -> Change:
    """The change with the period columns left out (statements must not assign them)."""
    assert change.period is not None
    keep = [i for i in range(len(change.columns)) if i not in change.period]
    index = {old: new for new, old in enumerate(keep)}

    def project(image: tuple[object, ...] | None) -> tuple[object, ...] | None:
        return None if image is None else tuple(image[i] for i in keep)

    return Change(change.table, change.op, tuple(change.columns[i] for i in keep),
                  tuple(index[k] for k in change.key if k in index), project(change.before),
                  project(change.after), change.position, change.fk_checks,
                  text=tuple(index[i] for i in change.text if i in index))


def _just_after(ended: object) -> str:
    moment = _dt.datetime.strptime(str(ended), "%Y-%m-%d %H:%M:%S.%f")
    return (moment + _dt.timedelta(microseconds=1)).strftime("%Y-%m-%d %H:%M:%S.%f")


def _cannot(change: Change, what: str) -> UnfaithfulApplyError:
    return UnfaithfulApplyError(
        f"{what} in system-versioned table {quote_ident(change.table.schema)}."
        f"{quote_ident(change.table.table)}: SQL cannot store it as the upstream did",
        table=str(change.table), position=change.position,
        hint="resynchronise this table from the upstream past this position")

