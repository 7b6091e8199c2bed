"""Check relay files against the upstream's own binlog files (demo, benchmarks, tests).

Two allowed differences: an upstream file that is still open (or that a crash left open)
has the in-use flag set in its FDE, which the server clears in what it sends; and a file the
upstream crashed while writing may go on past the relay's copy with a transaction that never
committed (no XID, cut short by a torn event), which the relay does not keep.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from binrelay.binlog import constants as c
from binrelay.relay.scan import scan_file

IN_USE_FLAG_OFFSET = 4 + 17  # the FDE's flags byte


_CHUNK = 16 << 20


def compare_file(relay_file: Path, upstream_file: Path) -> str | None:
    """None when the files match, else what differs.  Memory: two 16 MiB chunks."""
    if not relay_file.exists():
        return f"{relay_file.name}: missing from the relay"
    want_size, got_size = upstream_file.stat().st_size, relay_file.stat().st_size
    if want_size != got_size and not (
            got_size < want_size and uncommitted_tail(upstream_file, got_size)):
        return f"{relay_file.name}: relay has {got_size} bytes, upstream {want_size}"
    diffs: list[int] = []
    with open(upstream_file, "rb") as fw, open(relay_file, "rb") as fg:
        base = 0
        while base < got_size and (want := fw.read(min(_CHUNK, got_size - base))):
            got = fg.read(_CHUNK)
            if want != got:
                found = [base + i for i, (x, y) in enumerate(zip(want, got, strict=True))
                         if x != y]
                if base == 0 and found[:1] == [IN_USE_FLAG_OFFSET] and want[IN_USE_FLAG_OFFSET] \
                        == got[IN_USE_FLAG_OFFSET] | c.LOG_EVENT_BINLOG_IN_USE_F:
                    found = found[1:]  # the one allowed difference
                diffs += found[:10]
                if diffs:
                    break
            base += len(want)
    if diffs:
        return f"{relay_file.name}: differs from the upstream at offsets {diffs[:10]}"
    return None


def uncommitted_tail(upstream_file: Path, start: int) -> bool:
    """Whether the upstream file goes on past ``start`` with no transaction end: ``start``
    is its last one (``scan_file``'s safe position), and what follows is a transaction cut
    short, whole events then at most a torn one, as a crash while writing leaves them."""
    scan = scan_file(upstream_file, flavor=None)
    return scan.safe_pos == start < scan.size and (scan.torn_tail or not scan.stop_reason)


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
