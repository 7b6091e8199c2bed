"""Every key of the file: section -> key -> :class:`Field` (its check, default, meaning).

To add a section: write a frozen dataclass for it (:mod:`~binrelay.config.model`), add its
keys to ``SCHEMA`` and the dataclass to ``SECTIONS``, add a field to
:class:`~binrelay.config.model.Config`, and document every key in
``docs/configuration.md`` (a test fails until the docs and the schema agree).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from binrelay.config.fields import (
    Addr,
    BinlogName,
    Bool,
    Choice,
    Float,
    GtidSetText,
    Int,
    PathText,
    SparkMaster,
    Str,
)
from binrelay.config.model import (
    FromConfig,
    MetricsConfig,
    PurgeConfig,
    SyncConfig,
    ToConfig,
)

_REQUIRED: Any = object()


@dataclass(frozen=True)
class Field:
    """One key of the file: how to check it, its default, and a one-line meaning."""

    check: Callable[[Any], Any]
    default: Any
    doc: str
    unit: str = ""
    #: Environment variable used when the key is absent from the file.
    env: str | None = None
    #: Never echo the value (in messages or anywhere else).
    secret: bool = False
    #: How docs/configuration.md shows the default when a TOML literal does not fit.
    default_doc: str | None = None

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    @property
    def default_text(self) -> str:
        """The default as docs/configuration.md shows it (a TOML literal where one exists)."""
        if self.default_doc is not None:
            return self.default_doc
        if self.required:
            return "required"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, str):
            return json.dumps(self.default)
        return repr(self.default)


#: section -> key -> Field; the section "" holds the top-level keys.
SCHEMA: dict[str, dict[str, Field]] = {
    "": {
        "relay-dir": Field(
            PathText(), _REQUIRED,
            "Directory holding the relay log; `~` is expanded, a relative path is taken "
            "relative to the directory of the configuration file.",
        ),
        "flavor": Field(
            Choice(("mariadb", "mysql")), None,
            "Upstream server family; absent means detect it from the server at start.",
            default_doc="absent (detect)",
        ),
        "enable-gtid": Field(
            Bool(), False,
            "Start and resume replication by GTID instead of by binlog file and position.",
        ),
        "relay-binlog-name": Field(
            BinlogName(), "",
            "Binlog file to start relaying from when `enable-gtid = false`, "
            'e.g. `"mysql-bin.000003"`; empty means the default start.',
        ),
        "relay-binlog-gtid": Field(
            GtidSetText(), "",
            "GTID set to start relaying from when `enable-gtid = true`; empty means the "
            "default start.",
        ),
        "server-id": Field(
            # 0 is the "not set" default, never a value to send: an upstream treats a dump
            # from server id 0 as one-shot and disconnects at the end of its binlog.
            Int(1, 4294967295, range_hint="leave server-id out to have one picked at start"), 0,
            "Server id the relay presents to the upstream; must differ from every other "
            "server and replica of that upstream. Absent (0) means pick one at start.",
            default_doc="0 (pick one at start)",
        ),
        "log-level": Field(
            Choice(("debug", "info", "warn", "error")), "info",
            "Least severe log message that is written.",
        ),
        "log-file": Field(
            Str(), "",
            "File the log is appended to instead of stderr; a relative path is taken "
            "relative to the directory of the configuration file. Empty means stderr.",
        ),
        "relay-sync-interval": Field(
            Float(0), 0.025,
            "How long relayed data may wait before the grouped fsync at a transaction end "
            "(what a sync may apply waits for it); 0 means fsync at every transaction end.",
            unit="seconds",
        ),
        "relay-log-recovery": Field(
            Bool(), False,
            "At start, check the current subdir from the oldest consumer's file on; move "
            "damaged or missing parts aside and fetch them again from the upstream "
            "(MySQL's relay_log_recovery).",
        ),
    },
    "from": {
        "host": Field(Str(nonempty=True), "127.0.0.1", "Upstream host name or IP address."),
        "port": Field(Int(1, 65535), 3306, "Upstream TCP port."),
        "user": Field(Str(), "root", "User the relay logs in as."),
        "password": Field(
            Str(), "",
            "Password of `user`. When the key is absent, the environment variable "
            "`BINRELAY_FROM_PASSWORD` is used if set.",
            env="BINRELAY_FROM_PASSWORD", secret=True,
        ),
    },
    "purge": {
        "interval": Field(Int(0), 3600, "Time between two purge checks.", unit="seconds"),
        "expires": Field(
            Int(0), 0,
            "Relay files older than this may be purged; 0 means never purge by age.",
            unit="hours",
        ),
        "remain-space": Field(
            Int(0), 15,
            "Relay files may be purged when free disk space falls below this.",
            unit="GB",
        ),
        "gc-applied": Field(
            Bool(), False,
            "Also purge, at every check, the relay files that every registered consumer has "
            "fully applied (TiDB Drainer's relay-log GC). Needs at least one consumer.",
        ),
    },
    "to": {
        "host": Field(Str(nonempty=True), "127.0.0.1", "Downstream host name or IP address."),
        "port": Field(Int(1, 65535), 3306, "Downstream TCP port."),
        "user": Field(Str(), "root", "User the sync applies changes as."),
        "password": Field(
            Str(), "",
            "Password of `user`. When the key is absent, the environment variable "
            "`BINRELAY_TO_PASSWORD` is used if set.",
            env="BINRELAY_TO_PASSWORD", secret=True,
        ),
    },
    "sync": {
        "master": Field(SparkMaster(), "local[*]",
                        "Spark master URL: `local[*]`, `local[N]` or `spark://host:port`."),
        "pipeline": Field(Str(nonempty=True), "sync",
                          "Name of this pipeline: its checkpoint row and relay consumer name."),
        "checkpoint-schema": Field(Str(nonempty=True), "binrelay",
                                   "Downstream schema holding the checkpoint table."),
        "batch-bytes": Field(Int(1), 256 << 20,
                             "Relay bytes one batch takes at most (at least one transaction).",
                             unit="bytes", default_doc="268435456"),
        "batch-transactions": Field(Int(0), 0,
                                    "Transactions one batch takes at most; 0 = no limit."),
        "tasks": Field(Int(1, 1024), 4,
                       "Parallel apply tasks (downstream connections) per batch."),
        "partition-bytes": Field(Int(1 << 16), 16 << 20,
                                 "Relay bytes one read partition (Spark task) decodes.",
                                 unit="bytes", default_doc="16777216"),
        "driver-host": Field(Str(nonempty=True), "127.0.0.1",
                             "Address the Spark driver binds and gives its executors."),
        "mode": Field(Choice(("concurrent", "strict")), "concurrent",
                      "concurrent: batches applied in parallel, consistent at batch ends; "
                      "strict: every upstream transaction in relay order, each with its "
                      "checkpoint (consistent after every transaction; one connection)."),
        "binlog-gtid": Field(
            GtidSetText(), "",
            "GTID set the downstream already holds (restored from a backup or a dump): a "
            "pipeline without a checkpoint starts at the relay position where exactly this "
            "set is applied; empty means the relay's earliest position. Ignored once the "
            "pipeline has a checkpoint."),
        "reconnect-deadline": Field(
            Float(0), 600.0,
            "Seconds `sync --until-caught-up` and `recover` wait for a lost or refused "
            "downstream (retrying with backoff up to 30 s) before they stop with one line; a "
            "streaming `sync` waits as long as it takes.", unit="seconds", default_doc="600"),
        "driver-apply": Field(
            Bool(), True,
            "While Spark starts (seconds), the driver applies batches itself, each at most "
            "`partition-bytes`, as one Spark task would, and so it does with any batch of at "
            "most `driver-batch-bytes`; false: every batch of rows goes to Spark."),
        "driver-batch-bytes": Field(
            Int(0), 16 << 20,
            "With `driver-apply`, a batch of rows up to this many relay bytes is applied by "
            "the driver even when Spark is up (a streaming sync's batches, the rows between "
            "DDL), saving a Spark job's costs (tens of ms, and CPU for the JVM, pickling and "
            "the workers' pipes): below 8 MiB in one downstream transaction with the "
            "checkpoint's move (two checkpoint commits saved), from 8 MiB on by `tasks` "
            "connections at once, as Spark's apply tasks would. 0: only while Spark starts.",
            unit="bytes", default_doc="16777216"),
    },
    "metrics": {
        "relay-addr": Field(
            Addr(), "",
            "Address (`host:port`) where `binrelay relay` serves Prometheus metrics at "
            "`/metrics`; port 0 picks a free port; empty means no metrics server.",
        ),
        "sync-addr": Field(
            Addr(), "",
            "Address (`host:port`) where `binrelay sync` and `binrelay recover` serve "
            "Prometheus metrics; port 0 picks a free port; empty means no metrics server.",
        ),
    },
}

#: section -> (attribute of Config, dataclass holding that section's values).
SECTIONS: dict[str, tuple[str, type]] = {
    "from": ("from_", FromConfig),
    "purge": ("purge", PurgeConfig),
    "to": ("to", ToConfig),
    "sync": ("sync", SyncConfig),
    "metrics": ("metrics", MetricsConfig),
}


def attr_name(key: str) -> str:
    return key.replace("-", "_")


