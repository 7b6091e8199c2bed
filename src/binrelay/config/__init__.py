"""The TOML configuration file, with TiDB DM's relay-unit key names: its model
(:mod:`~binrelay.config.model`), the checks of single values (:mod:`~binrelay.config.fields`),
every key (:mod:`~binrelay.config.schema`) and reading a file (:mod:`~binrelay.config.loading`).

Every error is a :class:`~binrelay.errors.ConfigError` whose one-line message names the file and
the key.  Password values never reach a message or a ``repr()``.

May import: errors, gtid.
"""

from binrelay.config.fields import split_addr
from binrelay.config.loading import load_config, parse_config
from binrelay.config.model import (
    Config,
    FromConfig,
    MetricsConfig,
    PurgeConfig,
    SyncConfig,
    ToConfig,
)
from binrelay.config.schema import SCHEMA, Field

__all__ = [
    "SCHEMA",
    "Config",
    "Field",
    "FromConfig",
    "MetricsConfig",
    "PurgeConfig",
    "SyncConfig",
    "ToConfig",
    "load_config",
    "parse_config",
    "split_addr",
]
