"""How a command fails: one line on stderr and the error's exit status; the traceback goes
to the log at debug level (or, for a bug the log does not record at that level, to a
private file the line names)."""

from __future__ import annotations

import errno
import logging
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from functools import wraps
from typing import Any, NoReturn

import click

from binrelay.errors import BinrelayError, InternalError
from binrelay.logfmt import mask_secrets

log = logging.getLogger("binrelay")


def _fail(exc: BinrelayError) -> NoReturn:
    """The one line an error prints, and its exit status."""
    # A message may quote a server's text, which may hold a line break: still one line.
    line = " ".join(str(exc).splitlines())
    click.echo(f"binrelay: error: {line}", err=True)
    sys.exit(exc.exit_code)


def reports_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn any exception into one line on stderr and an exit status: ours say what is
    wrong and what to do; a failed Spark job is the error its task raised
    (``binrelay.spark.failures``); anything else an internal error.  Tracebacks go to the log
    at debug level, never to the terminal."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BinrelayError as exc:
            log.debug("command failed", exc_info=exc)
            err, cause = exc, exc  # an InternalError here: a bug in a Spark task, rebuilt
        except (click.exceptions.ClickException, click.exceptions.Exit,
                click.exceptions.Abort):
            raise  # click's own ways to end a command: it prints them as it does
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                raise  # the reader went away (``| head``): click ends quietly
            # Imported here: it needs no pyspark, and a command that never fails so never
            # loads it.
            from binrelay.spark.failures import unexpected_error

            err, cause = unexpected_error(exc), exc
        if isinstance(err, InternalError) and not log.isEnabledFor(logging.DEBUG):
            err = _traceback_saved(err, cause)
        _fail(err)

    return wrapper


def _traceback_saved(err: InternalError, exc: BaseException) -> InternalError:
    """``err`` naming a file (0600, in the temporary directory) that holds the traceback
    the log does not record at its level (or at all: ``dump`` has no log): ``exc``'s, and
    for a bug in a Spark task the job's exception and the Python worker's traceback."""
    try:
        text = "".join(traceback.format_exception(exc))
        job = exc.__context__ if exc.__suppress_context__ else None
        if job is not None:
            from binrelay.spark.failures import worker_traceback

            text += "\nThe Spark job's exception:\n" + "".join(traceback.format_exception(job))
            worker = worker_traceback(job)
            if worker:
                text += "\nThe Python worker's traceback:\n" + worker
        fd, path = tempfile.mkstemp(prefix="binrelay-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(mask_secrets(text))
    except Exception:  # the one line must come out whatever happens here
        return err
    return InternalError(err.message, hint=f"this is a bug: its traceback is in {path};"
                                            " report it with that traceback")
