"""Check relay files against the upstream's own binlog files (demo, benchmarks, tests).

The one allowed difference: an upstream file that is still open (or that a crash left open)
has the in-use flag set in its FDE, which the server clears in what it sends.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from binrelay.binlog import constants as c

IN_USE_FLAG_OFFSET = 4 + 17  # the FDE's flags byte


def compare_file(relay_file: Path, upstream_file: Path) -> str | None:
    """None when the files match, else what differs."""
    if not relay_file.exists():
        return f"{relay_file.name}: missing from the relay"
    want = upstream_file.read_bytes()
    got = relay_file.read_bytes()
    if len(got) != len(want):
        return f"{relay_file.name}: relay has {len(got)} bytes, upstream {len(want)}"
    if got == want:
        return None
    diffs = [i for i in range(len(want)) if got[i] != want[i]]
    if diffs == [IN_USE_FLAG_OFFSET] and \
            want[IN_USE_FLAG_OFFSET] == got[IN_USE_FLAG_OFFSET] | c.LOG_EVENT_BINLOG_IN_USE_F:
        return None
    return f"{relay_file.name}: differs from the upstream at offsets {diffs[:10]}"


def mariadb_binlog_check(path: Path) -> str | None:
    """Let ``mariadb-binlog`` (a reader we did not write) read the file; None when it can."""
    tool = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    if tool is None:
        return "mariadb-binlog is not installed"
    proc = subprocess.run([tool, str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0 or "ERROR" in proc.stderr:
        return f"{path.name}: {Path(tool).name} failed: {proc.stderr.strip()[-500:]}"
    return None


def compare_subdir(subdir: Path, upstream_dir: Path, names: list[str]) -> list[str]:
    """Problems found comparing ``names`` in ``subdir`` with the upstream's datadir."""
    problems = []
    for name in names:
        problem = compare_file(subdir / name, upstream_dir / name) or \
            mariadb_binlog_check(subdir / name)
        if problem:
            problems.append(problem)
    return problems
