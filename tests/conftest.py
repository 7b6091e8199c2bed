"""Shared fixtures: throwaway real MariaDB servers (see ``binrelay.sandbox``).

``mariadb_factory(server_id=..., max_binlog_size=..., ...)`` returns a started
server; everything a test started is stopped at teardown. Set
``BINRELAY_KEEP_SERVERS=1`` or pass ``--keep-servers`` to keep datadirs and
error logs for post-mortem debugging (processes are stopped regardless).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from binrelay.sandbox import (
    INSTALL_DB,
    MARIADBD,
    MariaDBServer,
    ServerFactory,
    build_template,
    stop_all,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--keep-servers",
        action="store_true",
        default=False,
        help="keep MariaDB datadirs/logs of test servers (also: BINRELAY_KEEP_SERVERS=1)",
    )


@pytest.fixture(scope="session")
def keep_servers(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--keep-servers")) or os.environ.get(
        "BINRELAY_KEEP_SERVERS", ""
    ) not in ("", "0")


@pytest.fixture(scope="session", autouse=True)
def _no_leaked_mariadb_processes() -> Iterator[None]:
    yield
    # A test that builds servers outside the factory and forgets them would
    # otherwise only be caught by atexit, silently; fail the session instead.
    leaked = stop_all()
    assert not leaked, f"tests left mariadbd/sysbench processes running: {leaked}"



#: Real MySQL binlogs (../shared/mysql-captures): the MySQL-format tests need them, and CI has
#: them, so a run without them fails instead of skipping those tests.
MYSQL_CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "mysql-captures"


def pytest_configure(config: pytest.Config) -> None:
    if not MYSQL_CAPTURES.is_dir():
        raise pytest.UsageError(
            f"{MYSQL_CAPTURES} is missing: the MySQL-format tests read real MySQL binlogs from"
            " it (it sits next to this repository, as ../shared/mysql-captures)")

@pytest.fixture(scope="session")
def mariadb_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pristine datadir, built once per session and copied for every server."""
    for binary in (MARIADBD, INSTALL_DB):
        if not Path(binary).exists():
            pytest.fail(f"{binary} is not installed: run ./dev/setup (it installs mariadb-server)")
    return build_template(tmp_path_factory.mktemp("mariadb-template") / "data")


@pytest.fixture(scope="session")
def mariadb_socket_dir() -> Iterator[Path]:
    # tmp_path-based paths easily exceed the 107-byte unix socket limit. Only
    # sockets live here, which are useless once the servers stop, so it always goes.
    path = Path(tempfile.mkdtemp(prefix="br", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def mariadb_factory(
    mariadb_template: Path,
    mariadb_socket_dir: Path,
    tmp_path: Path,
    keep_servers: bool,
) -> Iterator[ServerFactory]:
    factory = ServerFactory(
        tmp_path / "mariadb",
        template=mariadb_template,
        socket_dir=mariadb_socket_dir,
        keep_files=keep_servers,
    )
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def mariadb(mariadb_factory: ServerFactory) -> MariaDBServer:
    return mariadb_factory(server_id=1)


@pytest.fixture(scope="session")
def spark():
    """One local Spark (2 cores, loopback, no UI) for every Spark test of the session."""
    from binrelay.spark import build_session

    session = build_session("local[2]", app_name="binrelay-tests")
    yield session
    session.stop()
