"""The TOML configuration file, with TiDB DM's relay-unit key names.

Validation is driven by :data:`SCHEMA` (section -> key -> :class:`Field`).  To add a section:
write a frozen dataclass for it, add its keys to ``SCHEMA`` and the dataclass to ``_SECTIONS``,
add a field to :class:`Config`, and document every key in ``docs/configuration.md`` (a test
fails until the docs and the schema agree).

Every error is a :class:`~binrelay.errors.ConfigError` whose one-line message names the file and
the key.  Password values never reach a message or a ``repr()``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from binrelay.errors import ConfigError

__all__ = [
    "SCHEMA",
    "Config",
    "Field",
    "FromConfig",
    "MetricsConfig",
    "PurgeConfig",
    "load_config",
    "parse_config",
]

#: Pointer printed with errors an operator fixes by reading the key reference.
_DOCS_HINT = "see docs/configuration.md for every key, its type and its default"


# --------------------------------------------------------------------------- result types


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
    relay_sync_interval: float = 0.1
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


# --------------------------------------------------------------------------- validators


class _Invalid(Exception):
    """A value that a validator refuses; the caller adds the file and key to the message."""

    def __init__(self, expected: str, hint: str | None = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.hint = hint


def _unquote_hint(value: Any, looks_right: Callable[[str], bool]) -> str | None:
    # "3306" instead of 3306 is the commonest type mistake; name the fix rather than the rule.
    if isinstance(value, str) and looks_right(value.strip()):
        return "write numbers and true/false without quotes"
    return None


def _is_int_text(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text) is not None


def _is_float_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Str:
    nonempty: bool = False

    @property
    def expected(self) -> str:
        return "a non-empty string" if self.nonempty else "a string"

    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or (self.nonempty and not value):
            raise _Invalid(self.expected)
        return value


@dataclass(frozen=True)
class _Path:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise _Invalid("a non-empty path string")
        # Only "~" is expanded: the path is otherwise kept as written so that relative paths
        # can still be resolved against the config file's directory later.
        return os.path.expanduser(value)


@dataclass(frozen=True)
class _Bool:
    def __call__(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise _Invalid("true or false", _unquote_hint(value, lambda t: t in ("true", "false")))
        return value


@dataclass(frozen=True)
class _Int:
    lo: int
    hi: int | None = None
    #: Extra advice when the value is an integer outside the range.
    range_hint: str | None = None

    @property
    def expected(self) -> str:
        if self.hi is not None:
            return f"an integer in {self.lo}..{self.hi}"
        return f"an integer >= {self.lo}"

    def __call__(self, value: Any) -> int:
        # bool is a subclass of int, so `port = true` would otherwise be read as port 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(self.expected, _unquote_hint(value, _is_int_text))
        if value < self.lo or (self.hi is not None and value > self.hi):
            raise _Invalid(self.expected, self.range_hint)
        return value


@dataclass(frozen=True)
class _Float:
    lo: float

    def __call__(self, value: Any) -> float:
        expected = f"a number >= {self.lo:g}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(expected, _unquote_hint(value, _is_float_text))
        # TOML allows inf and nan; neither is a usable interval.
        if not math.isfinite(value) or value < self.lo:
            raise _Invalid(expected)
        return float(value)


@dataclass(frozen=True)
class _Choice:
    choices: tuple[str, ...]

    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            hint = None
            if isinstance(value, str) and value.strip().lower() in self.choices:
                hint = "the values are lower case"
            raise _Invalid("one of " + ", ".join(f'"{c}"' for c in self.choices), hint)
        return value


@dataclass(frozen=True)
class _Addr:
    """``"host:port"`` (``"[v6]:port"`` for IPv6), port 0 = any free port; "" = off."""

    def __call__(self, value: Any) -> str:
        expected = 'a "host:port" address like "127.0.0.1:9150", or "" for off'
        if not isinstance(value, str):
            raise _Invalid(expected)
        if value and split_addr(value) is None:
            raise _Invalid(expected, "port 0 picks a free port; write IPv6 as \"[::1]:9150\"")
        return value


def split_addr(text: str) -> tuple[str, int] | None:
    """``"host:port"`` as (host, port), or None when it is not one."""
    m = re.fullmatch(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9_.-]+)):(\d{1,5})", text)
    if m is None or int(m[3]) > 65535:
        return None
    return (m[1] or m[2]), int(m[3])


# Spark's own master URL forms; anything else fails deep inside Spark with a JVM stack trace.
_SPARK_MASTER_RE = re.compile(
    r"local(?:\[(?:\*|[1-9]\d*)(?:,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]"
    r"|(?:spark|k8s|mesos)://\S+|yarn")


@dataclass(frozen=True)
class _SparkMaster:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or not _SPARK_MASTER_RE.fullmatch(value):
            raise _Invalid('a Spark master URL: "local[*]", "local[N]" or "spark://host:port"')
        return value


# <base>.<digits>, as MySQL and MariaDB name binlog files; a bare file name, never a path.
_BINLOG_NAME_RE = re.compile(r"[^/\\\s]+\.[0-9]+")


@dataclass(frozen=True)
class _BinlogName:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str):
            raise _Invalid("a string")
        if value and not _BINLOG_NAME_RE.fullmatch(value):
            raise _Invalid('a binlog file name like "mysql-bin.000003"')
        return value


# Only a light syntax check.  binrelay.gtid.parse_gtid_set is the authoritative parser; it is
# deliberately not imported here (the two modules were written independently), so this check
# only catches typos early, while the file is still open in the operator's editor.
_UUID = r"[0-9A-Fa-f]{8}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{12}"
_INTERVAL = r"\d+(?:-\d+)?"
# MySQL 8.3+ may put tags ("uuid:tag:1-5") in a set; accept them so that a valid set is never
# refused here.
_TAG = r"[A-Za-z_][A-Za-z0-9_]{0,31}"
_MYSQL_ITEM = rf"{_UUID}(?::{_TAG})?(?::{_INTERVAL})+(?::{_TAG}(?::{_INTERVAL})+)*"
_MARIADB_ITEM = r"\d+-\d+-\d+"
_MYSQL_SET_RE = re.compile(rf"\s*{_MYSQL_ITEM}(?:\s*,\s*{_MYSQL_ITEM})*\s*")
_MARIADB_SET_RE = re.compile(rf"\s*{_MARIADB_ITEM}(?:\s*,\s*{_MARIADB_ITEM})*\s*")
_GTID_EXAMPLES = {
    "mysql": '"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"',
    "mariadb": '"0-1-100"',
}


def _gtid_flavor(text: str) -> str | None:
    if _MYSQL_SET_RE.fullmatch(text):
        return "mysql"
    if _MARIADB_SET_RE.fullmatch(text):
        return "mariadb"
    return None


@dataclass(frozen=True)
class _GtidSet:
    def __call__(self, value: Any) -> str:
        if not isinstance(value, str):
            raise _Invalid("a string")
        if value and _gtid_flavor(value) is None:
            raise _Invalid(
                f"a MySQL GTID set like {_GTID_EXAMPLES['mysql']} "
                f"or a MariaDB GTID list like {_GTID_EXAMPLES['mariadb']}"
            )
        return value


# --------------------------------------------------------------------------- schema


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
            _Path(), _REQUIRED,
            "Directory holding the relay log; `~` is expanded, a relative path is taken "
            "relative to the directory of the configuration file.",
        ),
        "flavor": Field(
            _Choice(("mariadb", "mysql")), None,
            "Upstream server family; absent means detect it from the server at start.",
            default_doc="absent (detect)",
        ),
        "enable-gtid": Field(
            _Bool(), False,
            "Start and resume replication by GTID instead of by binlog file and position.",
        ),
        "relay-binlog-name": Field(
            _BinlogName(), "",
            "Binlog file to start relaying from when `enable-gtid = false`, "
            'e.g. `"mysql-bin.000003"`; empty means the default start.',
        ),
        "relay-binlog-gtid": Field(
            _GtidSet(), "",
            "GTID set to start relaying from when `enable-gtid = true`; empty means the "
            "default start.",
        ),
        "server-id": Field(
            # 0 is the "not set" default, never a value to send: an upstream treats a dump
            # from server id 0 as one-shot and disconnects at the end of its binlog.
            _Int(1, 4294967295, range_hint="leave server-id out to have one picked at start"), 0,
            "Server id the relay presents to the upstream; must differ from every other "
            "server and replica of that upstream. Absent (0) means pick one at start.",
            default_doc="0 (pick one at start)",
        ),
        "log-level": Field(
            _Choice(("debug", "info", "warn", "error")), "info",
            "Least severe log message that is written.",
        ),
        "log-file": Field(
            _Str(), "",
            "File the log is appended to instead of stderr; a relative path is taken "
            "relative to the directory of the configuration file. Empty means stderr.",
        ),
        "relay-sync-interval": Field(
            _Float(0), 0.1,
            "How long relayed data may wait before the grouped fsync at a transaction end; "
            "0 means fsync at every transaction end.",
            unit="seconds",
        ),
        "relay-log-recovery": Field(
            _Bool(), False,
            "At start, check the current subdir from the oldest consumer's file on; move "
            "damaged or missing parts aside and fetch them again from the upstream "
            "(MySQL's relay_log_recovery).",
        ),
    },
    "from": {
        "host": Field(_Str(nonempty=True), "127.0.0.1", "Upstream host name or IP address."),
        "port": Field(_Int(1, 65535), 3306, "Upstream TCP port."),
        "user": Field(_Str(), "root", "User the relay logs in as."),
        "password": Field(
            _Str(), "",
            "Password of `user`. When the key is absent, the environment variable "
            "`BINRELAY_FROM_PASSWORD` is used if set.",
            env="BINRELAY_FROM_PASSWORD", secret=True,
        ),
    },
    "purge": {
        "interval": Field(_Int(0), 3600, "Time between two purge checks.", unit="seconds"),
        "expires": Field(
            _Int(0), 0,
            "Relay files older than this may be purged; 0 means never purge by age.",
            unit="hours",
        ),
        "remain-space": Field(
            _Int(0), 15,
            "Relay files may be purged when free disk space falls below this.",
            unit="GB",
        ),
        "gc-applied": Field(
            _Bool(), False,
            "Also purge, at every check, the relay files that every registered consumer has "
            "fully applied (TiDB Drainer's relay-log GC). Needs at least one consumer.",
        ),
    },
    "to": {
        "host": Field(_Str(nonempty=True), "127.0.0.1", "Downstream host name or IP address."),
        "port": Field(_Int(1, 65535), 3306, "Downstream TCP port."),
        "user": Field(_Str(), "root", "User the sync applies changes as."),
        "password": Field(
            _Str(), "",
            "Password of `user`. When the key is absent, the environment variable "
            "`BINRELAY_TO_PASSWORD` is used if set.",
            env="BINRELAY_TO_PASSWORD", secret=True,
        ),
    },
    "sync": {
        "master": Field(_SparkMaster(), "local[*]",
                        "Spark master URL: `local[*]`, `local[N]` or `spark://host:port`."),
        "pipeline": Field(_Str(nonempty=True), "sync",
                          "Name of this pipeline: its checkpoint row and relay consumer name."),
        "checkpoint-schema": Field(_Str(nonempty=True), "binrelay",
                                   "Downstream schema holding the checkpoint table."),
        "batch-bytes": Field(_Int(1), 256 << 20,
                             "Relay bytes one batch takes at most (at least one transaction).",
                             unit="bytes", default_doc="268435456"),
        "batch-transactions": Field(_Int(0), 0,
                                    "Transactions one batch takes at most; 0 = no limit."),
        "tasks": Field(_Int(1, 1024), 4,
                       "Parallel apply tasks (downstream connections) per batch."),
        "partition-bytes": Field(_Int(1 << 16), 16 << 20,
                                 "Relay bytes one read partition (Spark task) decodes.",
                                 unit="bytes", default_doc="16777216"),
        "driver-host": Field(_Str(nonempty=True), "127.0.0.1",
                             "Address the Spark driver binds and gives its executors."),
        "mode": Field(_Choice(("concurrent", "strict")), "concurrent",
                      "concurrent: batches applied in parallel, consistent at batch ends; "
                      "strict: every upstream transaction in relay order, each with its "
                      "checkpoint (consistent after every transaction; one connection)."),
        "binlog-gtid": Field(
            _GtidSet(), "",
            "GTID set the downstream already holds (restored from a backup or a dump): a "
            "pipeline without a checkpoint starts at the relay position where exactly this "
            "set is applied; empty means the relay's earliest position. Ignored once the "
            "pipeline has a checkpoint."),
        "reconnect-deadline": Field(
            _Float(0), 600.0,
            "Seconds `sync --until-caught-up` and `recover` wait for a lost or refused "
            "downstream (retrying with backoff up to 30 s) before they stop with one line; a "
            "streaming `sync` waits as long as it takes.", unit="seconds", default_doc="600"),
    },
    "metrics": {
        "relay-addr": Field(
            _Addr(), "",
            "Address (`host:port`) where `binrelay relay` serves Prometheus metrics at "
            "`/metrics`; port 0 picks a free port; empty means no metrics server.",
        ),
        "sync-addr": Field(
            _Addr(), "",
            "Address (`host:port`) where `binrelay sync` and `binrelay recover` serve "
            "Prometheus metrics; port 0 picks a free port; empty means no metrics server.",
        ),
    },
}

#: section -> (attribute of Config, dataclass holding that section's values).
_SECTIONS: dict[str, tuple[str, type]] = {
    "from": ("from_", FromConfig),
    "purge": ("purge", PurgeConfig),
    "to": ("to", ToConfig),
    "sync": ("sync", SyncConfig),
    "metrics": ("metrics", MetricsConfig),
}


def _attr(key: str) -> str:
    return key.replace("-", "_")


# --------------------------------------------------------------------------- parsing


def _show(value: Any, secret: bool = False) -> str:
    """A value as the operator wrote it in TOML, short enough for a one-line message."""
    if isinstance(value, bool):
        kind, text = "a boolean", "true" if value else "false"
    elif isinstance(value, int):
        kind, text = "an integer", str(value)
    elif isinstance(value, float):
        kind, text = "a float", repr(value)
    elif isinstance(value, str):
        kind, text = "a string", json.dumps(value if len(value) <= 60 else value[:57] + "...")
    elif isinstance(value, dict):
        return "a table"
    elif isinstance(value, list):
        return "an array"
    else:
        return "a date/time"
    return kind if secret else text


def _where(section: str) -> str:
    return f"[{section}] " if section else ""


def _suggest(key: str, section: str) -> str:
    """The " (did you mean ...?)" tail for an unknown key, or ""."""
    here = SCHEMA[section]
    normal = key.strip().lower().replace("_", "-")
    if normal in here:
        return f' (did you mean "{normal}"?)'
    close = difflib.get_close_matches(normal, here, n=1)
    if close:
        return f' (did you mean "{close[0]}"?)'
    # A key written under the wrong header: TOML puts every key after [x] into table x, so a
    # top-level key placed below a section is the usual way to land here.
    for other, keys in SCHEMA.items():
        if other != section and normal in keys:
            if other:
                return f' (it belongs in [{other}])'
            return " (it is a top-level key: move it above the first [section])"
    return ""


def _unknown_section(name: str) -> ConfigError:
    close = difflib.get_close_matches(name.lower(), [s for s in SCHEMA if s], n=1)
    tail = f" (did you mean [{close[0]}]?)" if close else ""
    return ConfigError(f"unknown section [{name}]{tail}", hint=_DOCS_HINT)


def _parse_table(
    table: Mapping[str, Any], section: str, env: Mapping[str, str],
) -> tuple[dict[str, Any], list[str]]:
    """The checked values of one table, and the required keys it lacks."""
    schema = SCHEMA[section]
    values: dict[str, Any] = {}
    missing: list[str] = []
    for key, value in table.items():
        spec = schema.get(key)
        if spec is None:
            if not section and isinstance(value, dict):
                raise _unknown_section(key)
            raise ConfigError(
                f'{_where(section)}unknown key "{key}"{_suggest(key, section)}', hint=_DOCS_HINT,
            )
        values[_attr(key)] = _check(spec, value, f"{_where(section)}{key}")
    for key, spec in schema.items():
        if _attr(key) in values:
            continue
        if spec.env is not None and spec.env in env:
            values[_attr(key)] = _check(spec, env[spec.env], f"{_where(section)}{key} "
                                        f"(from ${spec.env})")
        elif spec.required:
            missing.append(key)
        else:
            values[_attr(key)] = spec.default
    return values, missing


def _check(spec: Field, value: Any, where: str) -> Any:
    try:
        return spec.check(value)
    except _Invalid as bad:
        raise ConfigError(
            f"{where}: expected {bad.expected}, got {_show(value, spec.secret)}",
            hint=bad.hint or _DOCS_HINT,
        ) from None


def _check_together(values: Mapping[str, Any]) -> None:
    """Rules that involve more than one key."""
    gtid, flavor = values["relay_binlog_gtid"], values["flavor"]
    # A MariaDB GTID list given to a MySQL upstream (or the reverse) can never work; say so
    # now rather than after connecting.
    if gtid and flavor is not None and _gtid_flavor(gtid) != flavor:
        name = "a MySQL GTID set" if flavor == "mysql" else "a MariaDB GTID list"
        raise ConfigError(
            f"relay-binlog-gtid: expected {name} like {_GTID_EXAMPLES[flavor]} "
            f'because flavor = "{flavor}", got {_show(gtid)}',
            hint="fix the GTID set, or the flavor, or remove flavor to detect it",
        )


def parse_config(
    data: Mapping[str, Any], source: str, *, env: Mapping[str, str] | None = None,
) -> Config:
    """Check parsed TOML ``data`` against :data:`SCHEMA` and build a :class:`Config`.

    ``source`` names the file in messages and becomes ``Config.source_path``.  ``env`` is
    where environment fallbacks (``BINRELAY_FROM_PASSWORD``) are looked up; it defaults to
    ``os.environ`` and exists so tests need not touch the real environment.
    """
    env = os.environ if env is None else env
    try:
        top = {k: v for k, v in data.items() if k not in _SECTIONS}
        values, top_missing = _parse_table(top, "", env)
        missing = [("", key) for key in top_missing]
        for section, (attr, cls) in _SECTIONS.items():
            table = data.get(section, {})
            if not isinstance(table, dict):
                raise ConfigError(f"[{section}]: expected a table, got {_show(table)}",
                                  hint=f"write it as a [{section}] header followed by its keys")
            section_values, section_missing = _parse_table(table, section, env)
            missing += [(section, key) for key in section_missing]
            if not section_missing:
                values[attr] = cls(**section_values)
        # Reported after every unknown key, because a misplaced key (relay-dir written below
        # [from]) shows up as both, and the unknown-key message is the one that explains it.
        if missing:
            where, key = missing[0]
            place = f"under [{where}]" if where else "above the first [section]"
            raise ConfigError(f"{_where(where)}{key}: required key is missing",
                              hint=f"add {key} = ... {place}")
        _check_together(values)
    except ConfigError as err:
        # Built without the file name so that the helpers above stay short; prefixed once here.
        raise ConfigError(f"config {source}: {err.message}", hint=err.hint) from None
    return Config(**values, source_path=source,
                  sync_configured="to" in data or "sync" in data)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and check the TOML file at ``path``; raise ConfigError if it is unusable."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as fp:
            raw = fp.read()
    except OSError as err:
        raise ConfigError(f"config {source}: cannot read: {err.strerror or err}",
                          hint="check the path and its permissions") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config {source}: not valid TOML: not UTF-8 (bad byte at offset {err.start})",
            hint="save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        # tomllib's messages quote at most a key or one offending character, never a value,
        # so a password cannot leak through them.
        raise ConfigError(f"config {source}: not valid TOML: {err}",
                          hint="fix the syntax at the line and column given") from None
    return replace(parse_config(data, source), source_path=os.path.abspath(source))
