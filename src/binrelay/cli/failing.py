"""How a command fails: one line on stderr and the error's exit status; the traceback goes
to the log at debug level."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, NoReturn

import click

from binrelay.errors import BinrelayError

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
            _fail(exc)
        except (click.exceptions.ClickException, click.exceptions.Exit,
                click.exceptions.Abort):
            raise  # click's own ways to end a command: it prints them as it does
        except Exception as exc:
            # Imported here: it needs no pyspark, and a command that never fails so never
            # loads it.
            from binrelay.spark.failures import unexpected_error

            _fail(unexpected_error(exc))

    return wrapper
