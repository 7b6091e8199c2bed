"""What a loaded configuration file is: one frozen dataclass per section."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class FromConfig:
    """``[from]``: the upstream server the relay reads binlog from."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)


@dataclass(frozen=True)
class PurgeConfig:
    """``[purge]``: when relay files may be deleted."""

    interval: int = 3600
    expires: int = 0
    remain_space: int = 15
    gc_applied: bool = False


@dataclass(frozen=True)
class ToConfig:
    """``[to]``: the downstream server the sync applies changes to."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)


@dataclass(frozen=True)
class SyncConfig:
    """``[sync]``: the apply pipeline on Spark."""

    master: str = "local[*]"
    pipeline: str = "sync"
    checkpoint_schema: str = "binrelay"
    batch_bytes: int = 256 << 20
    batch_transactions: int = 0
    tasks: int = 4
    partition_bytes: int = 16 << 20
    driver_host: str = "127.0.0.1"
    mode: str = "concurrent"
    binlog_gtid: str = ""
    reconnect_deadline: float = 600.0
    driver_apply: bool = True
    driver_batch_bytes: int = 16 << 20


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: where the relay and the sync serve Prometheus metrics ("" = off)."""

    relay_addr: str = ""
    sync_addr: str = ""


@dataclass(frozen=True)
class Config:
    """The whole file; key names in snake_case, ``[from]`` as ``from_``."""

    #: As written in the file, with ``~`` expanded; see :meth:`resolve_relay_dir`.
    relay_dir: str
    flavor: str | None = None
    enable_gtid: bool = False
    relay_binlog_name: str = ""
    relay_binlog_gtid: str = ""
    server_id: int = 0
    log_level: str = "info"
    #: As written in the file ("" = stderr); see :meth:`resolve_log_file`.
    log_file: str = ""
    relay_sync_interval: float = 0.025
    relay_log_recovery: bool = False
    from_: FromConfig = field(default_factory=FromConfig)
    purge: PurgeConfig = field(default_factory=PurgeConfig)
    to: ToConfig = field(default_factory=ToConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    #: The file the values came from.  ``load_config`` stores it absolute so that
    #: :meth:`resolve_relay_dir` does not depend on the current directory at call time.
    source_path: str = ""
    #: Whether the file has a ``[to]`` or ``[sync]`` table: a sync pipeline will read this
    #: relay dir (the relay then protects its files from purge before the sync first runs).
    sync_configured: bool = False

    def resolve_relay_dir(self) -> Path:
        """The relay directory as an absolute path.

        An absolute ``relay-dir`` is returned unchanged.  A relative one is taken relative to
        the directory holding the configuration file, not the current directory, so that the
        same file means the same directory whichever directory the relay is started from.
        """
        relay_dir = Path(self.relay_dir)
        if relay_dir.is_absolute():
            return relay_dir
        base = Path(self.source_path).parent if self.source_path else Path()
        return (base / relay_dir).absolute()

    def resolve_log_file(self) -> Path | None:
        """Where the log goes: None for stderr, else an absolute path, a relative
        ``log-file`` taken relative to the configuration file's directory as ``relay-dir``
        is."""
        if not self.log_file:
            return None
        log_file = Path(os.path.expanduser(self.log_file))
        if log_file.is_absolute():
            return log_file
        base = Path(self.source_path).parent if self.source_path else Path()
        return (base / log_file).absolute()


