"""Prometheus metrics of the relay and the sync, each on its own registry and HTTP server.

The relay's figures are read from the running service when Prometheus scrapes (a collector,
so the relay's hot path counts nothing twice); the sync's are counted once per batch by a
``SyncPipeline`` listener.  Each process (and each test) gets its own ``CollectorRegistry``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from binrelay.config import Config, split_addr
from binrelay.errors import ConfigError

__all__ = [
    "MetricsServer",
    "RelayCollector",
    "RelayFigures",
    "SyncMetrics",
    "serve_metrics",
]


@dataclass(frozen=True)
class RelayFigures:
    """The relay's counters and gauges at one moment (see ``RelayService.figures``)."""

    events: int
    bytes: int
    fsyncs: int
    reconnects: int
    purge_runs: int
    purge_freed_bytes: int
    #: Times the relay dir's file system was full and the relay waited for space.
    disk_full: int
    #: None until known (no probe of the upstream yet).
    lag_bytes: int | None
    lag_seconds: float | None
    upstream_up: bool | None


class RelayCollector(Collector):
    """Reads ``figures()`` at every scrape."""

    def __init__(self, figures: Callable[[], RelayFigures]) -> None:
        self.figures = figures

    def collect(self) -> Iterable[Any]:
        f = self.figures()
        for name, doc, value in (
            ("binrelay_relay_events", "Events written to relay files.", f.events),
            ("binrelay_relay_bytes", "Bytes written to relay files.", f.bytes),
            ("binrelay_relay_fsyncs", "fsyncs of relay files.", f.fsyncs),
            ("binrelay_relay_reconnects", "Reconnects to the upstream after a lost connection.",
             f.reconnects),
            ("binrelay_purge_runs", "Automatic purge checks run.", f.purge_runs),
            ("binrelay_purge_freed_bytes", "Bytes freed by automatic purge.",
             f.purge_freed_bytes),
            ("binrelay_relay_disk_full",
             "Times the relay dir's file system was full and the relay waited for space.",
             f.disk_full),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        # A gauge with no value yet is left out rather than reported as 0 ("caught up").
        for name, doc, maybe in (
            ("binrelay_relay_lag_bytes",
             "Binlog bytes the upstream has that the relay has not relayed.", f.lag_bytes),
            ("binrelay_relay_lag_seconds", "Seconds the relay is behind the upstream.",
             f.lag_seconds),
            ("binrelay_relay_upstream_up", "1 when the last probe of the upstream succeeded.",
             None if f.upstream_up is None else int(f.upstream_up)),
        ):
            if maybe is not None:
                yield GaugeMetricFamily(name, doc, value=maybe)


class SyncMetrics:
    """A ``SyncPipeline`` listener counting what each applied batch did."""

    def __init__(self, registry: CollectorRegistry,
                 lag_bytes: Callable[[Any], int | None] | None = None) -> None:
        self.lag_bytes = lag_bytes
        self.batches = Counter("binrelay_sync_batches", "Batches applied, by kind.",
                               ["kind"], registry=registry)
        self.rows = Counter("binrelay_sync_rows", "Row changes applied, by op.", ["op"],
                            registry=registry)
        self.ddl = Counter("binrelay_sync_ddl", "DDL statements applied.", registry=registry)
        self.relay_bytes = Counter("binrelay_sync_relay_bytes", "Relay bytes applied.",
                                   registry=registry)
        self.seconds = Histogram(
            "binrelay_sync_batch_seconds", "Time to apply one batch.", registry=registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.lag = Gauge("binrelay_sync_lag_bytes",
                         "Relay bytes between the checkpoint and the relay's end.",
                         registry=registry)
        self.cpu = Counter("binrelay_sync_driver_cpu_seconds",
                           "Seconds the sync's driver thread ran while applying batches.",
                           registry=registry)
        self.cpu_wait = Counter(
            "binrelay_sync_driver_cpu_wait_seconds",
            "Seconds the sync's driver thread was ready to run but waited for a CPU while"
            " applying batches (Linux).", registry=registry)
        self.outages = Counter("binrelay_sync_downstream_outages",
                               "Times the downstream was lost and waited for.",
                               registry=registry)
        for kind in ("dml", "ddl", "empty"):
            self.batches.labels(kind)
        for op in ("insert", "update", "delete"):
            self.rows.labels(op)

    def downstream_lost(self) -> None:
        self.outages.inc()

    def __call__(self, report: Any) -> None:
        self.batches.labels(report.kind).inc()
        for op, n in report.rows_by_op.items():
            self.rows.labels(op).inc(n)
        self.ddl.inc(report.ddl)
        self.relay_bytes.inc(report.relay_bytes)
        self.seconds.observe(report.seconds)
        self.cpu.inc(max(0.0, report.cpu_seconds))
        if report.cpu_wait_seconds is not None:
            self.cpu_wait.inc(max(0.0, report.cpu_wait_seconds))
        if self.lag_bytes is not None:
            lag = self.lag_bytes(report)
            if lag is not None:
                self.lag.set(lag)


@dataclass
class MetricsServer:
    """A running ``/metrics`` server; ``addr`` is where it listens (the real port)."""

    addr: str
    _server: Any
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(config: Config, key: str, registry: CollectorRegistry) -> MetricsServer | None:
    """Serve ``registry`` at the address of ``[metrics] <key>``; None when the key is empty."""
    text = getattr(config.metrics, key.replace("-", "_"))
    if not text:
        return None
    host, port = split_addr(text) or ("", 0)
    try:
        server, thread = start_http_server(port, host, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"config {config.source_path}: [metrics] {key}: cannot listen on {text}: "
            f"{exc.strerror or exc}",
            hint="choose a free port (0 picks one) on an address of this machine") from None
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return MetricsServer(f"{shown}:{bound_port}", server, thread)
