"""The README's first command runs the demo; it must work and clean up after itself."""

from __future__ import annotations

import tempfile
from pathlib import Path

from relay_helpers import run_binrelay


def test_demo_runs_and_cleans_up() -> None:
    before = set(Path(tempfile.gettempdir()).glob("binrelay-demo-*"))
    proc = run_binrelay("demo", "--seconds", "3", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "result: OK" in proc.stdout
    assert "byte-identical" in proc.stdout
    assert set(Path(tempfile.gettempdir()).glob("binrelay-demo-*")) == before
