"""A barrier batch's replay reads each relay file's header once (``spark.serial._header``
with the replay's ``headers``), and clear errors for a file gone or garbled."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlog_builder import BinlogBuilder
from binrelay.errors import RelayDirError
from binrelay.spark import serial


def test_a_relay_file_header_is_read_once_per_replay(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mysql-bin.000001"
    b = BinlogBuilder(flavor="mariadb", checksum=True).header()
    b.ddl("CREATE TABLE app.t (id INT)")
    path.write_bytes(b.bytes())
    reads: list[Path] = []
    read = serial.read_fde_event
    monkeypatch.setattr(serial, "read_fde_event", lambda p: reads.append(p) or read(p))
    headers: serial.Headers = {}
    first = serial._header(path, headers)
    assert first[1].is_mariadb
    assert serial._header(path, headers) == first and reads == [path]
    # Another replay reads it again (a file may be made anew under the same name).
    assert serial._header(path, {}) == first and reads == [path, path]
    with pytest.raises(RelayDirError, match="is gone"):
        serial._header(tmp_path / "mysql-bin.000002", headers)
    garbled = tmp_path / "mysql-bin.000003"
    garbled.write_bytes(b"\xfebin" + b"\0" * 10)
    with pytest.raises(RelayDirError, match="no valid binlog header"):
        serial._header(garbled, headers)
