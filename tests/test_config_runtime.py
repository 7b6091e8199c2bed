"""Config values that are well-formed but wrong for the servers or the machine: found when the
relay starts, and still one line naming the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay_helpers import run_binrelay, write_config


def last_error_line(config: Path) -> str:
    proc = run_binrelay("relay", "--config", str(config), timeout=120)
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("binrelay: error: ["), proc.stderr
    return last


@pytest.mark.parametrize("keys,named", [
    ({"flavor": "mysql"}, "flavor"),
    ({"server_id": 1}, "server-id"),
    ({"relay_binlog_name": "mysql-bin.000099"}, "relay-binlog-name"),
])
def test_wrong_for_the_upstream(mariadb, tmp_path: Path, keys, named) -> None:
    config = write_config(tmp_path / "r.toml", mariadb, tmp_path / "relay", **keys)
    last = last_error_line(config)
    assert f"config {config}" in last and named in last, last


def test_relay_dir_that_cannot_be_created(mariadb, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = write_config(tmp_path / "r.toml", mariadb, blocker / "relay")
    last = last_error_line(config)
    assert "[BR3001]" in last and f"relay-dir in config {config}" in last, last
