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
    """Whether the upstream file's bytes from ``start`` (an event boundary) hold no committed
    transaction: whole events of one that never ended (no XID, XA PREPARE, compressed
    transaction, or statement other than its BEGIN), then at most a torn event, as a crash
    while writing leaves them."""
    with open(upstream_file, "rb") as f:
        pos = 4
        while pos < start:  # ``start`` must be where an event begins, not inside one
            f.seek(pos)
            header = f.read(c.EVENT_HEADER_LEN)
            size = int.from_bytes(header[9:13], "little")
            if len(header) < c.EVENT_HEADER_LEN or size < c.EVENT_HEADER_LEN:
                return False
            pos += size
        if pos != start:
            return False
        f.seek(start)
        data = f.read()  # what a crash left past the relay's copy: one transaction at most
    pos = 0
    while len(data) - pos >= c.EVENT_HEADER_LEN:
        size = int.from_bytes(data[pos + 9:pos + 13], "little")
        if size < c.EVENT_HEADER_LEN or pos + size > len(data):
            return True  # the torn event
        etype = data[pos + 4]
        if etype not in _INSIDE_A_TRANSACTION or (
                etype == c.QUERY_EVENT and not _is_begin(data[pos:pos + size])):
            return False
        pos += size
    return True


#: What a transaction holds before its end (XID, XA PREPARE, COMMIT, a DDL's statement), or
#: a compressed transaction whole, or a file's end (Rotate, Stop): a tail of these only is a
#: transaction that never ended.
_INSIDE_A_TRANSACTION = frozenset({
    c.QUERY_EVENT,  # its BEGIN only
    c.INTVAR_EVENT, c.RAND_EVENT, c.USER_VAR_EVENT, c.TABLE_MAP_EVENT,
    c.WRITE_ROWS_EVENT_V1, c.UPDATE_ROWS_EVENT_V1, c.DELETE_ROWS_EVENT_V1,
    c.WRITE_ROWS_EVENT, c.UPDATE_ROWS_EVENT, c.DELETE_ROWS_EVENT, c.PARTIAL_UPDATE_ROWS_EVENT,
    c.ROWS_QUERY_LOG_EVENT, c.GTID_LOG_EVENT, c.ANONYMOUS_GTID_LOG_EVENT,
    c.GTID_TAGGED_LOG_EVENT, c.ANNOTATE_ROWS_EVENT, c.GTID_EVENT,
    c.WRITE_ROWS_COMPRESSED_EVENT_V1, c.UPDATE_ROWS_COMPRESSED_EVENT_V1,
    c.DELETE_ROWS_COMPRESSED_EVENT_V1, c.WRITE_ROWS_COMPRESSED_EVENT,
    c.UPDATE_ROWS_COMPRESSED_EVENT, c.DELETE_ROWS_COMPRESSED_EVENT})


def _is_begin(event: bytes) -> bool:
    """A Query event whose statement is ``BEGIN`` (with or without a CRC32 after it)."""
    body = event[c.EVENT_HEADER_LEN:]
    if len(body) < 13:
        return False
    db_len, status_len = body[8], int.from_bytes(body[11:13], "little")
    text = body[13 + status_len + db_len + 1:]
    return text == b"BEGIN" or text[:-4] == b"BEGIN"


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
