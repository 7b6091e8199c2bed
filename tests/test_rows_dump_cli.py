"""``binrelay dump [--json] FILE|RELAY-DIR``."""

from __future__ import annotations

import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from binlog_builder import BinlogBuilder
from binrelay.cli.main import main
from captures import MYSQL_CAPTURES
from relay_helpers import binrelay_cmd

ZONGJI = MYSQL_CAPTURES / "zongji" / "binlog-mysql84-fullmeta.events.bin"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["dump", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_one_object_per_row_change() -> None:
    code, out, _ = _run("--json", str(ZONGJI))
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["op"] for r in rows] == ["insert", "update", "delete", "insert"]
    first = rows[0]
    assert (first["file"], first["pos"], first["end_pos"]) == (str(ZONGJI), 1453, 1741)
    assert first["gtid"] == "75029619-787e-11f1-88ef-6acb2cd49b0e:106"
    assert (first["schema"], first["table"], first["before"]) == (
        "zongji_fixture_capture", "capture_types", None)
    after = first["after"]
    assert after["u_big"] == 18446744073709551615
    assert after["dec_col"] == "-12345678901234567.0123456789"
    assert after["bin_col"] == {"hex": "deadbeef"}
    assert (after["dt"], after["ts"], after["t"]) == (
        "2024-06-15 12:34:56.789", "2024-06-15 12:34:56", "-01:02:03.500")
    assert after["js"] == '{"a": 1, "d": 1.5, "arr": ["x", true, null], "big": 9223372036854775807}'
    assert rows[1]["before"]["vc"] == "héllo wörld" and rows[1]["after"]["vc"] == "updated"
    assert "txt" not in rows[1]["before"]  # not in the image: left out, not null
    assert rows[3]["after"]["vc"] is None


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_reader_that_goes_away_stops_the_dump_quietly(tmp_path: Path, as_json: bool) -> None:
    b = BinlogBuilder()
    b.gtid_list([])
    for i in range(2000):  # megabytes of output: far more than a pipe holds
        b.trx(list(range(20 * i, 20 * i + 20)))
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(b.bytes())
    proc = subprocess.Popen(binrelay_cmd("dump", *(["--json"] if as_json else []), str(path)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == b""


def test_text_dump_lists_events_and_rows() -> None:
    code, out, _ = _run(str(ZONGJI))
    assert code == 0
    assert "Table_map: `zongji_fixture_capture`.`capture_types` mapped to number" in out
    assert "### INSERT INTO `zongji_fixture_capture`.`capture_types`" in out
    assert "###   vc='héllo wörld'" in out
    assert "###   bt=b'1000000001'" in out
    assert "###   bin_col=X'DEADBEEF'" in out
    assert "### WHERE" in out and "### SET" in out


def as_after_restart(binlog: bytes) -> bytes:
    """``binlog`` with its FORMAT_DESCRIPTION's ``created`` set (and its CRC32 redone)."""
    size = int.from_bytes(binlog[4 + 9:4 + 13], "little")
    fde = bytearray(binlog[4:4 + size])
    fde[19 + 2 + 50:19 + 2 + 50 + 4] = (1).to_bytes(4, "little")
    fde[-4:] = zlib.crc32(bytes(fde[:-4])).to_bytes(4, "little")
    return binlog[:4] + bytes(fde) + binlog[4 + size:]


def test_relay_dir_in_index_order(tmp_path: Path) -> None:
    # Two subdirs in index order; within one, files by binlog number (not by name).
    a, b = tmp_path / "uuid-a.000001", tmp_path / "uuid-b.000002"
    a.mkdir()
    b.mkdir()
    shutil.copy(MYSQL_CAPTURES / "rust_mysql_common/mysql_type_bit.000001", b / "mysql-bin.000001")
    # Unrelated captures; the second made to read as the first binlog after an upstream
    # restart, which is how a file may follow one without a ROTATE (relay/chain.py).
    (a / "mysql-bin.000010").write_bytes(as_after_restart(ZONGJI.read_bytes()))
    shutil.copy(MYSQL_CAPTURES / "rust_mysql_common/json-opaque.binlog", a / "mysql-bin.000009")
    (tmp_path / "server-uuid.index").write_text("uuid-a.000001\nuuid-b.000002\n")
    code, out, _ = _run("--json", str(tmp_path))
    assert code == 0
    files = [Path(json.loads(line)["file"]) for line in out.splitlines()]
    order = list(dict.fromkeys(files))
    assert order == [a / "mysql-bin.000009", a / "mysql-bin.000010", b / "mysql-bin.000001"]
    code, out, _ = _run(str(tmp_path))
    assert code == 0 and out.count("# file ") == 3


def test_truncated_input_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "mysql-bin.000001"
    data = ZONGJI.read_bytes()[:2000]
    bad.write_bytes(data)
    torn = 4  # where the first event that does not fit starts
    while torn + int.from_bytes(data[torn + 9:torn + 13], "little") <= len(data):
        torn += int.from_bytes(data[torn + 9:torn + 13], "little")
    for args in (["--json", str(bad)], [str(bad)]):
        code, _, err = _run(*args)
        assert code != 0
        assert err.count("\n") == 1
        assert f"{bad} at offset {torn}:" in err and "BR2002" in err


def test_not_a_binlog(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello world")
    code, _, err = _run(str(junk))
    assert code != 0 and "bad magic" in err
