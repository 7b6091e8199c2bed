"""Shared fixtures: throwaway real MariaDB servers (see ``binrelay.testing.sandbox``).

``mariadb_factory(server_id=..., max_binlog_size=..., ...)`` returns a started
server; everything a test started is stopped at teardown. Set
``BINRELAY_KEEP_SERVERS=1`` or pass ``--keep-servers`` to keep datadirs and
error logs for post-mortem debugging (processes are stopped regardless).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from binrelay.testing.sandbox import (
    INSTALL_DB,
    MARIADBD,
    MariaDBServer,
    ServerFactory,
    build_template,
    stop_all,
)
from captures import MYSQL_CAPTURES, missing_message


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





def pytest_configure(config: pytest.Config) -> None:
    if not MYSQL_CAPTURES.is_dir():
        raise pytest.UsageError(missing_message())

#: Every fixture that starts MariaDB depends on mariadb_template; Spark's is spark.
SERVER_FIXTURES = {"mariadb_template", "spark"}
#: What a test may only start when it carries the ``server`` marker.
SERVER_PROGRAMS = {"mariadbd", "mariadb-install-db", "mysqld", "sysbench", "java",
                   "spark-submit", "spark-class"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that start servers through a fixture (``fixturenames`` is transitive);
    tests that start them otherwise carry ``pytestmark = pytest.mark.server`` themselves."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "spark" in names:
            item.add_marker(pytest.mark.spark)
        if names & SERVER_FIXTURES or item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.server)


@pytest.fixture(autouse=True)
def _servers_only_when_marked(request: pytest.FixtureRequest,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A test without the ``server`` marker that starts MariaDB, sysbench or a JVM fails, so
    ``pytest -m "not server"`` is the pure core and the markers cannot rot."""
    if request.node.get_closest_marker("server"):
        return
    execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def guarded(self: subprocess.Popen[bytes], args: object, executable: object,
                *rest: object) -> None:
        if isinstance(args, str | bytes):  # a command line (shell=True) or one program
            argv = shlex.split(os.fsdecode(args)) or [""]
        else:
            args = list(args)  # type: ignore[call-overload]
            argv = [os.fsdecode(a) for a in args] or [""]
        program = os.path.basename(os.fsdecode(executable) if executable else argv[0])
        if program in SERVER_PROGRAMS:
            raise AssertionError(
                f"{request.node.nodeid} starts {program} without the 'server' marker: add "
                "pytestmark = pytest.mark.server (or use the mariadb/spark fixtures)")
        execute(self, args, executable, *rest)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", guarded)


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

    # As the CLI does (logfmt.setup_logging): py4j's INFO lines are noise, and one of them,
    # from its finalizer thread at interpreter exit, would print to a closed capture stream.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = build_session("local[2]", app_name="binrelay-tests")
    yield session
    session.stop()
