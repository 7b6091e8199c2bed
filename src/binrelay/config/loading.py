"""Reading the file: TOML in, a checked :class:`~binrelay.config.model.Config` out, or one
:class:`~binrelay.errors.ConfigError` line naming the file and the key.  Password values
never reach a message or a ``repr()``."""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from binrelay.config.fields import GTID_EXAMPLES, Invalid, gtid_flavor
from binrelay.config.model import Config
from binrelay.config.schema import SCHEMA, SECTIONS, Field, attr_name
from binrelay.errors import ConfigError

#: Pointer printed with errors an operator fixes by reading the key reference.
_DOCS_HINT = "see docs/configuration.md for every key, its type and its default"


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
        values[attr_name(key)] = _check(spec, value, f"{_where(section)}{key}")
    for key, spec in schema.items():
        if attr_name(key) in values:
            continue
        if spec.env is not None and spec.env in env:
            values[attr_name(key)] = _check(spec, env[spec.env], f"{_where(section)}{key} "
                                        f"(from ${spec.env})")
        elif spec.required:
            missing.append(key)
        else:
            values[attr_name(key)] = spec.default
    return values, missing


def _check(spec: Field, value: Any, where: str) -> Any:
    try:
        return spec.check(value)
    except Invalid as bad:
        raise ConfigError(
            f"{where}: expected {bad.expected}, got {_show(value, spec.secret)}",
            hint=bad.hint or _DOCS_HINT,
        ) from None


def _check_together(values: Mapping[str, Any]) -> None:
    """Rules that involve more than one key."""
    gtid, flavor = values["relay_binlog_gtid"], values["flavor"]
    # A MariaDB GTID list given to a MySQL upstream (or the reverse) can never work; say so
    # now rather than after connecting.
    if gtid and flavor is not None and gtid_flavor(gtid) != flavor:
        name = "a MySQL GTID set" if flavor == "mysql" else "a MariaDB GTID list"
        raise ConfigError(
            f"relay-binlog-gtid: expected {name} like {GTID_EXAMPLES[flavor]} "
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
        top = {k: v for k, v in data.items() if k not in SECTIONS}
        values, top_missing = _parse_table(top, "", env)
        missing = [("", key) for key in top_missing]
        for section, (attr, cls) in SECTIONS.items():
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
