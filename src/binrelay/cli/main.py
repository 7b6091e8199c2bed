"""``binrelay`` commands.  Errors become one line on stderr and a non-zero exit status."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from binrelay import __version__
from binrelay.config import Config, load_config
from binrelay.errors import BinrelayError

log = logging.getLogger("binrelay")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "error": logging.ERROR}


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=_LEVELS.get(level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def reports_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn our errors into one line on stderr and the error's exit status."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BinrelayError as exc:
            click.echo(f"binrelay: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


def _load(path: str) -> Config:
    config = load_config(path)
    setup_logging(config.log_level)
    return config


@click.group()
@click.version_option(__version__, prog_name="binrelay")
def main() -> None:
    """A relay log for MySQL-family replication, with its apply pipeline on Spark."""


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML configuration file")
@reports_errors
def relay(config_path: str) -> None:
    """Mirror the upstream's binlog into the relay dir until SIGTERM/SIGINT."""
    from binrelay.relay.service import RelayService

    config = _load(config_path)
    service = RelayService(config)

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d received: stopping", signum)
        service.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    service.run()


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML configuration file")
@click.option("--until-caught-up", is_flag=True,
              help="apply everything relayed so far, then exit 0")
@reports_errors
def sync(config_path: str, until_caught_up: bool) -> None:
    """Apply the relay log to the downstream ([to]) on Spark, until stopped."""
    from binrelay.spark.sync import SyncPipeline

    config = _load(config_path)
    stopping = {"now": False}

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d received: stopping after the current batch", signum)
        stopping["now"] = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pipeline = SyncPipeline(config, should_stop=lambda: stopping["now"])
    stats = pipeline.run(until_caught_up=until_caught_up)
    click.echo(f"applied {stats.batches} batch(es): {stats.changes} row change(s), "
               f"{stats.ddl} DDL statement(s) in {stats.seconds:.1f} s")


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML configuration file")
@reports_errors
def recover(config_path: str) -> None:
    """Bring the downstream back to a consistent state from the relay log (no upstream)."""
    from binrelay.spark.sync import recover as run_recover

    config = _load(config_path)
    needed, stats = run_recover(config)
    if not needed:
        click.echo("checkpoint is consistent: nothing to recover")
        return
    click.echo(f"recovered: applied {stats.batches} batch(es), {stats.changes} row change(s), "
               f"{stats.ddl} DDL statement(s); checkpoint consistent")


@main.command("purge-relay")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML configuration file (for relay-dir)")
@click.option("--filename", required=True,
              help="purge the relay files before this one, e.g. mysql-bin.000003")
@click.option("--sub-dir", default=None,
              help="the subdir holding --filename (default: the newest subdir); every earlier "
                   "subdir is purged entirely")
@click.option("--force", is_flag=True,
              help="purge even files that registered consumers still need")
@reports_errors
def purge_relay(config_path: str, filename: str, sub_dir: str | None, force: bool) -> None:
    """Remove relay files before --filename, as DM's purge-relay does."""
    from binrelay.relay.purge import purge_manual

    config = _load(config_path)
    plan, freed, overridden = purge_manual(config.resolve_relay_dir(), filename=filename,
                                           sub_dir=sub_dir, force=force)
    for consumer in overridden:
        click.echo(f"warning: --force: {consumer.describe()} loses files it still needs; it "
                   "will stop with a 'purged' error", err=True)
    if plan.empty:
        click.echo("nothing to purge")
        return
    click.echo(f"purged {len(plan.files)} file(s), {freed / (1 << 20):.1f} MiB"
               + (f"; removed subdir(s) {', '.join(map(str, plan.subdirs))}"
                  if plan.subdirs else ""))


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML configuration file (for relay-dir)")
@click.option("--unregister", default=None, metavar="NAME",
              help="forget consumer NAME: purge stops protecting the files it still needs")
@reports_errors
def consumers(config_path: str, unregister: str | None) -> None:
    """List the consumers registered in the relay dir (their safe positions)."""
    from binrelay.relay.consumers import list_consumers
    from binrelay.relay.consumers import unregister as forget

    config = _load(config_path)
    relay_dir = config.resolve_relay_dir()
    if unregister is not None:
        if forget(relay_dir, unregister):
            click.echo(f"unregistered consumer {unregister!r}: purge no longer keeps its files")
        else:
            click.echo(f"no consumer named {unregister!r}", err=True)
            sys.exit(1)
        return
    found = list_consumers(relay_dir)
    if not found:
        click.echo("no consumers registered")
    for consumer in found:
        click.echo(consumer.describe())


@main.command()
@click.option("--seconds", default=8.0, show_default=True, help="how long the workload runs")
@click.option("--keep", is_flag=True, help="keep the sandbox datadirs and relay dir")
@reports_errors
def demo(seconds: float, keep: bool) -> None:
    """Relay a sysbench workload with DDL from a sandbox MariaDB (with a kill -9 of the
    relay), apply it to a second sandbox server on Spark, and compare CHECKSUM TABLE."""
    from binrelay.demo import run_demo

    setup_logging("warn")
    run_demo(seconds=seconds, keep=keep, echo=click.echo)


from binrelay.cli.dump import dump  # noqa: E402 - registered after main is defined

main.add_command(dump)

if __name__ == "__main__":  # pragma: no cover
    main()
