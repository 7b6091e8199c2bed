"""binrelay.spark.failures: errors raised in Spark tasks rebuilt on the driver.

The first tests work on traceback text as a Python worker writes it (no Spark); the others
run jobs on the session's local Spark, so that the errors cross the JVM for real.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator

import pytest

from binrelay.errors import (
    BinlogFormatError,
    BinrelayError,
    ConfigError,
    DownstreamRowError,
    DownstreamSchemaError,
    InternalError,
    SparkError,
)
from binrelay.spark.failures import (
    MARKER,
    error_from_traceback,
    from_spark,
    spark_failures,
    task_errors,
)


def worker_text(exc: BaseException) -> str:
    """What a Python worker sends the JVM for ``exc`` (pyspark.util.handle_worker_exception)."""
    return "".join(traceback.TracebackException(type(exc), exc, exc.__traceback__,
                                                compact=True).format())


def raised(func, *args) -> BaseException:
    try:
        for _ in func(*args):
            pass
    except Exception as exc:
        return exc
    raise AssertionError("nothing raised")


@task_errors
def failing(exc: BaseException) -> Iterator[int]:
    yield 1
    raise exc


def same_error(got: BinrelayError, want: BinrelayError) -> None:
    assert type(got) is type(want)
    assert str(got) == str(want)
    assert (got.code, got.hint, got.exit_code) == (want.code, want.hint, want.exit_code)
    assert {k: v for k, v in vars(got).items() if not k.startswith("__")} == \
        {k: v for k, v in vars(want).items() if not k.startswith("__")}


@pytest.mark.parametrize("error", [
    DownstreamRowError("rejected", table="d.t", position=(1, 1, 403957, 7), errno=4025),
    DownstreamSchemaError("no table\nhere", table="d.t", position=(2, 3)),
    BinlogFormatError("bad event", path="/r/0-1.000001/mysql-bin.000002", offset=4096),
    DownstreamRowError("rejected", hint="a hint of its own; with a semicolon"),
    ConfigError("config x.toml: log-file: cannot open"),
], ids=lambda e: type(e).__name__)
def test_a_noted_error_is_rebuilt_with_every_field(error: BinrelayError) -> None:
    exc = raised(failing, error)
    assert exc is error and MARKER in worker_text(exc)
    rebuilt = error_from_traceback(worker_text(exc))
    assert rebuilt is not None and rebuilt is not error
    same_error(rebuilt, error)


def test_without_the_note_the_exception_line_gives_class_and_text() -> None:
    error = DownstreamRowError("rejected", table="d.t", position=(1, 2))
    try:
        raise error
    except DownstreamRowError as exc:
        text = worker_text(exc)
    assert MARKER not in text
    rebuilt = error_from_traceback(text)
    assert isinstance(rebuilt, DownstreamRowError)
    assert str(rebuilt) == str(error) and rebuilt.exit_code == 1


def test_a_bug_in_a_task_is_an_internal_error() -> None:
    exc = raised(failing, KeyError("nope"))
    rebuilt = error_from_traceback(worker_text(exc))
    assert isinstance(rebuilt, InternalError)
    assert rebuilt.message == "internal error: KeyError: 'nope'"
    assert "log-level" in str(rebuilt)


def test_only_the_final_exception_of_a_chain_counts() -> None:
    @task_errors
    def handled() -> Iterator[int]:
        try:
            yield from failing(DownstreamRowError("first", table="d.t"))
        except DownstreamRowError as exc:
            raise ValueError("while handling") from exc

    text = worker_text(raised(handled))
    assert text.count(MARKER) == 2  # both noted; only the last one is the job's error
    rebuilt = error_from_traceback(text)
    assert isinstance(rebuilt, InternalError)
    assert rebuilt.message == "internal error: ValueError: while handling"


def test_task_errors_changes_nothing_else() -> None:
    @task_errors
    def plain(n: int) -> Iterator[int]:
        return iter(range(n))

    @task_errors
    def value(n: int) -> int:
        return n * 2

    assert list(plain(3)) == [0, 1, 2] and value(2) == 4
    gen = failing(KeyError("x"))
    assert next(gen) == 1
    with pytest.raises(KeyError) as info:
        next(gen)
    assert [n for n in info.value.__notes__ if n.startswith(MARKER)] != []
    # Nested wrapped functions note an exception once.
    nested = raised(task_errors(lambda: failing(KeyError("y"))))
    assert len(nested.__notes__) == 1


def test_other_exceptions_pass_unchanged() -> None:
    assert from_spark(ValueError("x")) is None
    with pytest.raises(ValueError), spark_failures():
        raise ValueError("not Spark's")


# --- through Spark ---------------------------------------------------------------------------


def run_job(spark, func) -> BinrelayError:
    sc = spark.sparkContext
    with pytest.raises(BinrelayError) as info, spark_failures():
        sc.parallelize(range(6), 3).mapPartitions(func).collect()
    return info.value


def test_an_error_raised_in_a_task_comes_back_with_its_fields(spark, caplog) -> None:
    @task_errors
    def apply(items: Iterator[int]) -> Iterator[int]:
        for item in items:
            if item == 4:
                raise DownstreamRowError("rejected", table="d.t", position=(1, 2, 3),
                                         errno=4025)
            yield item

    with caplog.at_level(logging.DEBUG, logger="binrelay.spark.failures"):
        err = run_job(spark, apply)
    same_error(err, DownstreamRowError("rejected", table="d.t", position=(1, 2, 3),
                                       errno=4025))
    assert err.__cause__ is None  # the Spark exception is not printed with it
    [record] = [r for r in caplog.records if r.name == "binrelay.spark.failures"]
    assert record.levelno == logging.DEBUG
    assert "DownstreamRowError" in record.worker_traceback  # type: ignore[attr-defined]


def test_an_unwrapped_task_function_still_gives_the_error_line(spark) -> None:
    def apply(items: Iterator[int]) -> Iterator[int]:
        yield from items
        raise DownstreamSchemaError("no such table", table="d.t", position=(7,))

    err = run_job(spark, apply)
    assert isinstance(err, DownstreamSchemaError)
    assert str(err) == str(DownstreamSchemaError("no such table", table="d.t", position=(7,)))


def test_a_bug_and_a_crash_in_a_task(spark) -> None:
    @task_errors
    def bug(items: Iterator[int]) -> Iterator[int]:
        yield from items
        raise KeyError("nope")

    err = run_job(spark, bug)
    assert isinstance(err, InternalError) and err.message == "internal error: KeyError: 'nope'"

    def crash(items: Iterator[int]) -> Iterator[int]:
        import os

        os._exit(3)
        yield from items

    err = run_job(spark, crash)
    assert isinstance(err, SparkError)
    assert err.message.startswith("a Spark job failed: Python worker exited unexpectedly"), err
    assert "\n" not in str(err)


def test_flat_map_functions(spark) -> None:
    @task_errors
    def explode(item: int) -> Iterator[int]:
        if item == 5:
            raise DownstreamRowError("bad", table="d.u")
        return iter([item, item])

    sc = spark.sparkContext
    with pytest.raises(DownstreamRowError) as info, spark_failures():
        sc.parallelize(range(6), 2).flatMap(explode).collect()
    assert info.value.table == "d.u"
