"""Where the real MySQL binlogs are (``../shared/mysql-captures``, next to this repository).

The MySQL-format tests need them and CI has them: a missing directory fails the run
(``conftest.pytest_configure``), and every reader here fails rather than finding nothing.
"""

from __future__ import annotations

from pathlib import Path

MYSQL_CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "mysql-captures"

MAGIC = b"\xfebin"


def missing_message() -> str:
    return (f"{MYSQL_CAPTURES} is missing: the MySQL-format tests read real MySQL binlogs from"
            " it (it sits next to this repository, as ../shared/mysql-captures)")


def capture(relative: str) -> Path:
    """One capture file, which must exist."""
    path = MYSQL_CAPTURES / relative
    assert path.is_file(), f"{path} is missing ({missing_message()})"
    return path


def capture_binlogs() -> list[Path]:
    """Every binlog file among the captures (those that start with the binlog magic)."""
    assert MYSQL_CAPTURES.is_dir(), missing_message()
    return sorted(p for p in MYSQL_CAPTURES.rglob("*")
                  if p.is_file() and p.suffix not in (".md", ".txt", ".sql", ".json")
                  and p.read_bytes()[:4] == MAGIC)
