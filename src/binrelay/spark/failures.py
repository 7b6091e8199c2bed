"""Failures of Spark tasks as binrelay errors: one line for the operator, the rest in the log.

An exception raised in a Spark task never reaches the driver as an object.  The Python
worker formats it as a traceback (text), the JVM wraps that text in an
``org.apache.spark.api.python.PythonException`` that fails the job, and pyspark raises, on
the driver, ``pyspark.errors.exceptions.captured.PythonException`` (pyspark 4, whenever a
SparkSession installed its py4j exception hook) or else a ``py4j.protocol.Py4JJavaError``
whose Java exception (``SparkException: Job aborted due to stage failure``) has the
``PythonException`` among its causes.  Printed, either is ~150 lines of Java and Python.

So the task side cooperates.  :func:`task_errors` wraps a task function; when the function
raises, it adds one note to the exception: a line ``binrelay-error: {...}`` with the
exception's class and, for our errors, every field (code, message, table, position, hint,
errno, exit status) as JSON.  Python prints an exception's notes right after it, so the line
travels inside the worker's traceback, and the driver (:func:`spark_failures`,
:func:`from_spark`) rebuilds the very error the task raised from it: no parsing of messages.

Without the note (a task function that is not wrapped) the driver falls back on the
traceback's last exception line, which gives the class and the one-line text; then on
:class:`~binrelay.errors.SparkError` for failures that are Spark's own (a Python worker or an
executor lost), with the first line Spark gives.  Tracebacks go to the log at debug level.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar, cast

from binrelay.errors import BinrelayError, InternalError, SparkError

__all__ = [
    "MARKER",
    "from_spark",
    "internal_error",
    "note_error",
    "spark_failures",
    "task_errors",
    "unexpected_error",
    "worker_traceback",
]

log = logging.getLogger(__name__)

#: How the note line that carries an error from a task to the driver starts.
MARKER = "binrelay-error: "
_TRACEBACK = "Traceback (most recent call last):"
_PYTHON_EXCEPTION = "org.apache.spark.api.python.PythonException"
#: A message longer than this is cut: the operator's line must stay a line.
_MAX_TEXT = 400

F = TypeVar("F", bound=Callable[..., Any])


# --- the task side --------------------------------------------------------------------------


def _type_name(cls: type) -> str:
    """A class as Python's tracebacks name it: bare for builtins, else module-qualified."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(exc: BaseException) -> str:
    """The note line for ``exc``: its class and text, and for our errors their fields."""
    payload: dict[str, Any] = {"type": _type_name(type(exc)), "text": str(exc)}
    if isinstance(exc, BinrelayError):
        payload.update(
            code=exc.code, hint=exc.hint, exit_code=exc.exit_code, args=list(exc.args),
            # What pickle would carry: the constructor's result is args plus __dict__.
            state={k: v for k, v in vars(exc).items() if not k.startswith("__")})
    # ASCII JSON holds no line break, whatever the message: the note stays one line.
    return MARKER + json.dumps(payload, default=str, ensure_ascii=True, separators=(",", ":"))


def note_error(exc: BaseException) -> None:
    """Add ``exc``'s note line, once (nested wrapped functions see the same exception)."""
    notes = getattr(exc, "__notes__", ())
    if any(isinstance(n, str) and n.startswith(MARKER) for n in notes):
        return
    # Never let the note replace the error it is about: without it the driver reads the
    # traceback's exception line instead.
    with contextlib.suppress(Exception):
        exc.add_note(describe(exc))


def _noted(items: Iterable[Any]) -> Iterator[Any]:
    try:
        yield from items
    except Exception as exc:
        note_error(exc)
        raise


def task_errors(func: F) -> F:
    """Wrap a function that runs in Spark tasks so that the driver can rebuild what it raises.

    For a generator function (``mapPartitions`` functions) the wrapper is one too; for a
    plain function, what it raises and, when it returns an iterator (a ``flatMap``
    function), what iterating raises.  The exception itself is unchanged but for a note, so
    code calling the function directly (tests, the driver) sees no difference.
    """
    if inspect.isgeneratorfunction(func):
        @wraps(func)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            yield from _noted(func(*args, **kwargs))

        return cast(F, generator)

    @wraps(func)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            result = func(*args, **kwargs)
        except Exception as exc:
            note_error(exc)
            raise
        return _noted(result) if isinstance(result, Iterator) else result

    return cast(F, plain)


# --- the driver side ------------------------------------------------------------------------


def _one_line(text: str) -> str:
    line = " ".join(text.split("\n")[0].split()) if text else ""
    return line if len(line) <= _MAX_TEXT else line[: _MAX_TEXT - 3] + "..."


def _tuples(value: Any) -> Any:
    """JSON's lists back to the tuples our errors hold (``position``)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _error_class(name: str) -> type[BinrelayError] | None:
    """Our error class called ``name`` (``binrelay.errors.DownstreamRowError``), if the
    driver has it; never imports anything outside binrelay."""
    module, _, qualname = name.rpartition(".")
    if module != "binrelay" and not module.startswith("binrelay."):
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    if isinstance(found, type) and issubclass(found, BinrelayError):
        return found
    return None


def _with_text(code: str, text: str, *, hint: str = "", exit_code: int = 1,
               cls: type[BinrelayError] | None = None) -> BinrelayError:
    """An error that prints as ``text`` (``[code] message; hint``): of class ``cls`` when it
    can be built from its message alone, else a plain BinrelayError with that code."""
    message = text.removeprefix(f"[{code}] ")
    if hint and message.endswith(f"; {hint}"):
        message = message[: -len(hint) - 2]
    else:
        hint = ""  # an instance's own hint cannot be told from the message: kept in it
    if cls is not None and cls.code == code:
        try:
            # Every class of ours takes the message first, its other fields by keyword;
            # without them, the message is printed as given.
            err = cls(message, hint=hint or None)
        except TypeError:
            pass
        else:
            if str(err) == text:
                return err
    err = BinrelayError(message, hint=hint)
    err.code = code
    err.exit_code = exit_code
    return err


def _from_note(payload: Mapping[str, Any]) -> BinrelayError:
    kind, text = str(payload.get("type", "")), str(payload.get("text", ""))
    if "code" not in payload:
        return internal_error_from(kind, text)
    cls = _error_class(kind)
    if cls is not None:
        # Unpickling does the same: the object without __init__, then its args and fields.
        err = cls.__new__(cls)
        Exception.__init__(err, *_tuples(payload.get("args", [])))
        err.__dict__.update(_tuples(payload.get("state", {})))
        if str(err) == text:
            return err
    return _with_text(str(payload["code"]), text, hint=str(payload.get("hint") or ""),
                      exit_code=int(payload.get("exit_code", 1)), cls=cls)


def _last_exception(text: str) -> tuple[str, list[str]]:
    """The final exception line of a (possibly chained) traceback, and the lines after it
    (the rest of its message, its notes)."""
    start = text.rfind(_TRACEBACK)
    lines = text[start + len(_TRACEBACK):].splitlines() if start >= 0 else text.splitlines()
    for i, line in enumerate(lines):
        # Frames and source lines are indented; the exception line is not.
        if line and not line[0].isspace():
            return line, lines[i + 1:]
    return "", []


def error_from_traceback(text: str) -> BinrelayError | None:
    """The error a Python worker's traceback ``text`` reports: rebuilt from its note when
    the task function was wrapped in :func:`task_errors`, else from its exception line."""
    line, after = _last_exception(text)
    for candidate in (line, *after):
        if candidate.startswith(MARKER):
            try:
                payload = json.loads(candidate[len(MARKER):])
            except ValueError:
                break
            if isinstance(payload, dict):
                return _from_note(payload)
    if not line:
        return None
    kind, _, message = line.partition(": ")
    cls = _error_class(kind)
    if cls is None:
        return internal_error_from(kind, message)
    code = message[1:message.index("]")] if message.startswith("[") and "]" in message \
        else cls.code
    return _with_text(code, message, hint=cls.hint, exit_code=cls.exit_code, cls=cls)


def internal_error_from(kind: str, text: str) -> InternalError:
    """``internal error: <type>: <message>`` for an exception of no binrelay class."""
    text = _one_line(text)
    return InternalError(f"internal error: {kind}: {text}" if text else
                         f"internal error: {kind}")


def internal_error(exc: BaseException) -> InternalError:
    return internal_error_from(_type_name(type(exc)), str(exc))


def _is_spark(exc: BaseException) -> bool:
    # By module, so that telling needs no import of pyspark (commands that never ran Spark).
    return any(cls.__module__.partition(".")[0] in ("pyspark", "py4j")
               for cls in type(exc).__mro__)


def _java_exception(exc: BaseException) -> Any:
    """The Java exception behind a Spark failure: py4j's, or the one pyspark converted."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def _java_chain(jexc: Any) -> Iterator[Any]:
    seen = 0
    while jexc is not None and seen < 32:
        yield jexc
        seen += 1
        jexc = jexc.getCause()


def worker_traceback(exc: BaseException) -> str | None:
    """The Python worker's traceback that failed the job, as text, or None."""
    try:
        params = exc.getMessageParameters() if hasattr(exc, "getMessageParameters") else None
        if params and "traceback" in params:
            return str(params["traceback"])
        for jexc in _java_chain(_java_exception(exc)):
            if jexc.getClass().getName() == _PYTHON_EXCEPTION:
                return str(jexc.getMessage())
    except Exception:  # the JVM may be gone: fall back on the text we have
        log.debug("cannot read the Java side of a Spark failure", exc_info=True)
    text = str(exc)
    return text if _TRACEBACK in text else None


def _spark_summary(exc: BaseException) -> str:
    """The most telling line of a failure that is Spark's own: the deepest Java cause with a
    message ("Python worker exited unexpectedly (crashed)"), else pyspark's first line."""
    try:
        messages = [m for j in _java_chain(_java_exception(exc))
                    if (m := str(j.getMessage() or "").strip())]
        if messages:
            return _one_line(messages[-1])
    except Exception:
        log.debug("cannot read the Java side of a Spark failure", exc_info=True)
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return _one_line(lines[0]) if lines else type(exc).__name__


def _jvm_stacktrace(exc: BaseException) -> str | None:
    jexc = _java_exception(exc)
    if jexc is None or hasattr(exc, "java_exception"):
        return None  # a Py4JJavaError prints its Java stack trace itself
    try:
        from pyspark import SparkContext

        utils = getattr(SparkContext._jvm, "org.apache.spark.util.Utils")
        return str(utils.exceptionString(jexc))
    except Exception:
        return None


def from_spark(exc: BaseException) -> BinrelayError | None:
    """The binrelay error a Spark failure stands for, or None if ``exc`` is not Spark's.

    An error a task raised comes back as itself (see :func:`task_errors`); any other
    exception of a task as :class:`InternalError`; a failure of Spark's own as
    :class:`SparkError`.
    """
    if isinstance(exc, BinrelayError):
        return exc
    if not _is_spark(exc):
        return None
    text = worker_traceback(exc)
    if text is not None:
        found = error_from_traceback(text)
        if found is not None:
            return found
    if hasattr(exc, "java_exception") or hasattr(exc, "_origin"):
        return SparkError(f"a Spark job failed: {_spark_summary(exc)}")
    return SparkError(f"Spark failed: {_spark_summary(exc)}")


def _log_spark_failure(exc: BaseException, err: BinrelayError) -> None:
    log.debug("a Spark job failed", extra={
        "error": str(err), "worker_traceback": worker_traceback(exc),
        "jvm_stacktrace": _jvm_stacktrace(exc)}, exc_info=exc)


@contextmanager
def spark_failures() -> Iterator[None]:
    """Around Spark actions on the driver: a failed job raises the binrelay error its task
    raised (or InternalError, SparkError, see :func:`from_spark`); the whole Python and Java
    story goes to the log at debug level.  Other exceptions pass unchanged."""
    try:
        yield
    except BinrelayError:
        raise
    except Exception as exc:
        err = from_spark(exc)
        if err is None:
            raise
        _log_spark_failure(exc, err)
        # The Spark exception stays reachable as __context__; printed, it is the 150 lines
        # this module exists to keep from the operator.
        raise err from None


def unexpected_error(exc: BaseException) -> BinrelayError:
    """For a command's last line of defence: any exception as a binrelay error (Spark's
    rebuilt, anything else an InternalError), its traceback logged at debug level."""
    if isinstance(exc, BinrelayError):
        return exc
    err = from_spark(exc)
    if err is not None:
        _log_spark_failure(exc, err)
        return err
    log.debug("unexpected error", exc_info=exc)
    return internal_error(exc)
