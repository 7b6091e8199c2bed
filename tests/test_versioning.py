"""System-versioned changes as statements (the end-to-end check is test_fidelity's)."""

from __future__ import annotations

import pytest

from binrelay.apply.catalog import TableRules
from binrelay.apply.changes import ABSENT, DELETE, INSERT, UPDATE, Change, TableRef
from binrelay.apply.sql import change_statement
from binrelay.apply.versioning import HistoryReplay, is_current_end
from binrelay.errors import UnfaithfulApplyError

T = TableRef("app", "v")
COLS = ("id", "x", "row_start", "row_end")
MAX = "2038-01-19 03:14:07.999999"
T0, T1 = "2026-01-01 00:00:00.000001", "2026-01-01 00:00:02.500000"


def change(op, before, after, pos=1):
    return Change(T, op, COLS, (0,), before, after, (1, 1, pos, 0), True, (2, 3))


def sql(statements):
    return [(st.sql, st.params) for st in statements]


def test_a_current_end_is_the_largest_timestamp() -> None:
    assert is_current_end(MAX) and is_current_end("2106-02-07 06:28:15.999999")
    assert not is_current_end(T1) and not is_current_end(ABSENT)


def test_an_update_runs_at_its_new_row_start_and_its_history_row_is_not_written_twice() -> None:
    replay = HistoryReplay()
    out = sql(replay.statements(change(UPDATE, (1, 1, T0, MAX), (1, 2, T1, MAX))))
    assert out == [("SET SESSION timestamp = UNIX_TIMESTAMP(%s)", (T1,)),
                   ("UPDATE `app`.`v` SET `id` = %s, `x` = %s WHERE `id` = %s", (1, 2, 1))]
    # The history row the upstream logged next is the one the server just wrote.
    assert list(replay.statements(change(INSERT, None, (1, 1, T0, T1), 2))) == []
    # Another history row (an explicit insert of history) is written as logged.
    out = sql(replay.statements(change(INSERT, None, (5, 5, T0, T1), 3)))
    assert out[0][0] == "SET SESSION system_versioning_insert_history = 1"
    assert out[1][1] == (5, 5, T0, T1)
    assert sql(replay.finish()) == [
        ("SET SESSION system_versioning_insert_history = 0", None),
        ("SET SESSION timestamp = DEFAULT", None)]


def test_a_minimal_before_image_still_pairs_the_history_row() -> None:
    replay = HistoryReplay()
    before = (1, ABSENT, ABSENT, MAX)
    list(replay.statements(change(UPDATE, before, (1, 2, T1, MAX))))
    assert list(replay.statements(change(INSERT, None, (1, 1, T0, T1), 2))) == []


def test_an_update_of_unversioned_columns_only_expects_no_history() -> None:
    replay = HistoryReplay()
    list(replay.statements(change(UPDATE, (1, 1, T0, MAX), (1, 1, T0, MAX))))
    assert len(list(replay.statements(change(INSERT, None, (1, 1, T0, T0), 2)))) == 2


def test_a_versioned_delete_runs_at_its_row_end() -> None:
    out = sql(HistoryReplay().statements(change(UPDATE, (1, 1, T0, MAX), (1, 1, T0, T1))))
    assert out == [("SET SESSION timestamp = UNIX_TIMESTAMP(%s)", (T1,)),
                   ("DELETE FROM `app`.`v` WHERE `id` = %s", (1,))]


def test_deleted_history_goes_by_age() -> None:
    out = sql(HistoryReplay().statements(change(DELETE, (1, ABSENT, ABSENT, T1), None)))
    assert out == [("DELETE HISTORY FROM `app`.`v` BEFORE SYSTEM_TIME TIMESTAMP %s",
                    ("2026-01-01 00:00:02.500001",))]


@pytest.mark.parametrize("op, before, after", [
    (UPDATE, (1, 1, T0, T1), (1, 2, T0, T1)),   # an update of a history row
    (DELETE, (1, 1, T0, MAX), None),            # a current row gone without history
    (UPDATE, (1, 1, T0, MAX), (1, 2, ABSENT, MAX)),
])
def test_what_sql_cannot_store_stops(op, before, after) -> None:
    with pytest.raises(UnfaithfulApplyError, match="system-versioned"):
        list(HistoryReplay().statements(change(op, before, after)))


def test_a_minimal_sequence_write_keeps_the_stored_values() -> None:
    seq = Change(TableRef("app", "s"), INSERT, ("next_not_cached_value", "increment",
                                                "cycle_count"), (), None, (1001, ABSENT, 0),
                 (1, 1, 5, 0), sequence=True)
    st = change_statement(seq)
    assert st.sql == ("INSERT INTO `app`.`s` (`next_not_cached_value`, `increment`,"
                      " `cycle_count`) SELECT %s, `increment`, %s FROM `app`.`s`")
    assert st.params == (1001, 0)


def test_period_columns_are_found_by_name_and_transaction_ids_refused() -> None:
    rules = TableRules(versioned={T: ("row_start", "row_end")})
    assert rules.period(T, ("id", "x", "ROW_START", "row_end")) == (2, 3)
    assert rules.period(TableRef("app", "plain"), COLS) is None
    with pytest.raises(UnfaithfulApplyError, match="binlog_row_metadata"):
        rules.period(T, ("@1", "@2", "@3", "@4"))
    by_trx = TableRules(versioned={T: ("row_start", "row_end")}, versioned_by_trx=frozenset({T}))
    with pytest.raises(UnfaithfulApplyError, match="transaction id"):
        by_trx.period(T, COLS)
