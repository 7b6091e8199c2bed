"""``binrelay`` commands.  Errors become one line on stderr and a non-zero exit status."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from binrelay import __version__
from binrelay.cli.dump import dump
from binrelay.cli.failing import reports_errors
from binrelay.config import Config, load_config
from binrelay.errors import BinrelayError, ConfigError
from binrelay.logfmt import setup_logging

log = logging.getLogger("binrelay")


def _load(path: str) -> Config:
    config = load_config(path)
    log_file = config.resolve_log_file()
    try:
        setup_logging(config.log_level, secrets=(config.from_.password, config.to.password),
                      path=log_file)
    except OSError as err:
        raise ConfigError(f"config {config.source_path}: log-file: cannot open {log_file}: "
                          f"{err.strerror or err}",
                          hint="check that its directory exists and is writable") from None
    return config


def _sync_lag(relay_dir: Path) -> Callable[[Any], int]:
    """Relay bytes after a batch's end, up to the relay's end now (for metrics and bars)."""
    from binrelay.relay.lag import relay_bytes_between
    from binrelay.relay.relaydir import RelayView

    def lag(report: Any) -> int:
        try:
            view = RelayView(relay_dir)
            return relay_bytes_between(view, report.end, max(report.relay_end, view.end))
        except (BinrelayError, OSError):  # the sync itself will say what is wrong
            return relay_bytes_between(relay_dir, report.end, report.relay_end)

    return lag


def _sync_listeners(config: Config, *, bar: str | None) -> tuple[list[Any], list[Any]]:
    """The listeners of a SyncPipeline (metrics, a progress bar) and what to close after."""
    from prometheus_client import CollectorRegistry

    from binrelay.cli.bars import SyncCatchUpBar, wanted
    from binrelay.metrics import SyncMetrics, serve_metrics

    lag = _sync_lag(config.resolve_relay_dir())
    listeners: list[Any] = []
    closing: list[Any] = []
    registry = CollectorRegistry()
    server = serve_metrics(config, "sync-addr", registry)
    if server is not None:
        listeners.append(SyncMetrics(registry, lag_bytes=lag))
        closing.append(server)
        log.info("serving metrics", extra={"addr": server.addr, "path": "/metrics"})
    if bar is not None and wanted():
        progress = SyncCatchUpBar(lag, desc=bar)
        listeners.append(progress)
        closing.append(progress)
    return listeners, closing


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
    from prometheus_client import CollectorRegistry

    from binrelay.cli.bars import RelayCatchUpBar, wanted
    from binrelay.metrics import RelayCollector, serve_metrics
    from binrelay.relay.service import RelayService

    config = _load(config_path)
    show_bar = wanted()
    holder: dict[str, Any] = {}
    bar = RelayCatchUpBar(lambda: holder["service"].figures().bytes) if show_bar else None
    registry = CollectorRegistry()
    service = RelayService(config, probe=bool(config.metrics.relay_addr) or show_bar,
                           on_status=bar)
    holder["service"] = service
    registry.register(RelayCollector(service.figures))
    server = serve_metrics(config, "relay-addr", registry)
    if server is not None:
        service.metrics_addr = server.addr
        log.info("serving metrics", extra={"addr": server.addr, "path": "/metrics"})

    def stop(signum: int, _frame: object) -> None:
        log.info("signal received: stopping", extra={"signal": signum})
        service.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        service.run()
    finally:
        if bar is not None:
            bar.close()
        if server is not None:
            server.close()


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
        log.info("signal received: stopping after the current batch", extra={"signal": signum})
        stopping["now"] = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    listeners, closing = _sync_listeners(
        config, bar="sync catch-up" if until_caught_up else None)
    pipeline = SyncPipeline(config, should_stop=lambda: stopping["now"],
                            listeners=listeners)
    try:
        stats = pipeline.run(until_caught_up=until_caught_up)
    finally:
        pipeline.close()
        for thing in closing:
            thing.close()
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
    listeners, closing = _sync_listeners(config, bar="recover")
    try:
        needed, stats = run_recover(config, listeners=listeners)
    finally:
        for thing in closing:
            thing.close()
    if not needed:
        click.echo("checkpoint is consistent: nothing to recover")
        return
    click.echo(f"recovered: applied {stats.batches} batch(es), {stats.changes} row change(s), "
               f"{stats.ddl} DDL statement(s); checkpoint consistent")


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML configuration file")
@click.option("--json", "as_json", is_flag=True, help="one JSON document (stable field names)")
@reports_errors
def status(config_path: str, as_json: bool) -> None:
    """Where the relay and the pipeline are: persisted positions and live figures, labelled."""
    from binrelay.status import gather, render, to_dict

    config = _load(config_path)
    report = gather(config)
    if as_json:
        click.echo(json.dumps(to_dict(report), indent=2, sort_keys=True))
    else:
        click.echo(render(report))


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
    from binrelay.testing.demo import run_demo

    setup_logging("warn")
    run_demo(seconds=seconds, keep=keep, echo=click.echo)


main.add_command(dump)

if __name__ == "__main__":  # pragma: no cover
    main()
