"""The docs only name commands, options and configuration keys that exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import click
import pytest

from binrelay.cli.main import main
from binrelay.config import parse_config

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
# "binrelay sync --config FILE --until-caught-up", also as ".venv/bin/binrelay ...".
_COMMAND = re.compile(r"(?:^|[\s/])binrelay ([a-z][a-z-]*)((?:[^|;&#\n`])*)")


def _code(text: str) -> list[str]:
    """Code blocks and inline code spans: where commands and keys are written to be run."""
    blocks = [body for _lang, body in _FENCE.findall(text)]
    prose = _FENCE.sub("", text)
    return blocks + _SPAN.findall(prose)


def _toml_blocks(text: str) -> list[str]:
    return [body for lang, body in _FENCE.findall(text) if lang == "toml"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_documented_commands_and_options_exist(doc: Path) -> None:
    commands: dict[str, click.Command] = dict(main.commands)  # type: ignore[attr-defined]
    problems = []
    for code in _code(doc.read_text()):
        for line in code.splitlines():
            for name, rest in _COMMAND.findall(line):
                command = commands.get(name)
                if command is None:
                    problems.append(f"unknown command: binrelay {name}")
                    continue
                known = {opt for p in command.params for opt in p.opts}
                problems += [f"binrelay {name}: unknown option {opt}"
                             for opt in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest)
                             if opt not in known and opt != "--help"]
    assert not problems, f"{doc.name}: {problems}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_documented_configuration_is_valid(doc: Path) -> None:
    for body in _toml_blocks(doc.read_text()):
        data = tomllib.loads(body)
        if "binlog-pos" in data or "pos" in data:
            continue  # relay.meta or a consumer file, not a configuration
        data.setdefault("relay-dir", "relay")
        parse_config(data, f"{doc.name} example", env={})
