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


def reports_errors(func: Callable[..., Any], *, all_errors: bool = False
                   ) -> Callable[..., Any]:
    """Turn our errors into one line on stderr and the error's exit status.

    ``all_errors`` (the commands that run Spark): a failed Spark job is the error its task
    raised (``binrelay.spark.failures``), and any other exception an internal error; one
    line either way, the tracebacks in the log at debug level."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BinrelayError as exc:
            log.debug("command failed", exc_info=exc)
            _fail(exc)
        except Exception as exc:
            if not all_errors:
                raise
            # Imported here: it needs no pyspark, but only these commands need it at all.
            from binrelay.spark.failures import unexpected_error

            _fail(unexpected_error(exc))

    return wrapper


def reports_all_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    return reports_errors(func, all_errors=True)
