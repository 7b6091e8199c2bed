"""The byte-identity check used by tests, benchmarks and the demo."""

from __future__ import annotations

from pathlib import Path

from binrelay.relay.verify import IN_USE_FLAG_OFFSET, compare_file


def test_only_a_cleared_in_use_flag_is_allowed(tmp_path: Path) -> None:
    upstream = bytearray(b"\xfebin" + bytes(range(256)) * 300)
    upstream[IN_USE_FLAG_OFFSET] |= 1
    (tmp_path / "up").write_bytes(upstream)
    relay = bytearray(upstream)
    relay[IN_USE_FLAG_OFFSET] &= 0xFE
    (tmp_path / "relay").write_bytes(relay)
    assert compare_file(tmp_path / "relay", tmp_path / "up") is None
    (tmp_path / "same").write_bytes(upstream)
    assert compare_file(tmp_path / "same", tmp_path / "up") is None

    set_in_relay_only = bytearray(upstream)
    set_in_relay_only[IN_USE_FLAG_OFFSET] ^= 2
    (tmp_path / "bad").write_bytes(set_in_relay_only)
    assert "offsets [21]" in (compare_file(tmp_path / "bad", tmp_path / "up") or "")

    late = bytearray(relay)
    late[50_000] ^= 1
    (tmp_path / "late").write_bytes(late)
    assert "offsets [50000]" in (compare_file(tmp_path / "late", tmp_path / "up") or "")
    (tmp_path / "short").write_bytes(relay[:-1])
    assert "bytes" in (compare_file(tmp_path / "short", tmp_path / "up") or "")
    assert "missing" in (compare_file(tmp_path / "nope", tmp_path / "up") or "")
