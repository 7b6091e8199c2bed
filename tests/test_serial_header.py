"""The driver's replay of barrier batches reads each relay file's header once
(``spark.serial._header``), and again for a file made anew under the same name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from binlog_builder import BinlogBuilder
from binrelay.errors import RelayDirError
from binrelay.spark import serial


def _write(path: Path, flavor: str) -> None:
    tmp = path.with_suffix(".tmp")
    b = BinlogBuilder(flavor=flavor, checksum=True).header()
    b.ddl("CREATE TABLE app.t (id INT)")
    tmp.write_bytes(b.bytes())
    os.replace(tmp, path)


def test_a_relay_file_header_is_read_once_per_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mysql-bin.000001"
    _write(path, "mariadb")
    reads: list[Path] = []
    read = serial.read_fde_event
    monkeypatch.setattr(serial, "read_fde_event", lambda p: reads.append(p) or read(p))
    first = serial._header(path)
    assert first[1].is_mariadb and serial._header(path) == first and reads == [path]
    # Made again under the same name (a relay dir rebuilt while the sync runs).
    _write(path, "mysql")
    assert not serial._header(path)[1].is_mariadb and len(reads) == 2
    path.unlink()
    with pytest.raises(RelayDirError, match="is gone"):
        serial._header(path)
    path.write_bytes(b"\xfebin" + b"\0" * 10)
    with pytest.raises(RelayDirError, match="no valid binlog header"):
        serial._header(path)
