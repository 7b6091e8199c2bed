"""A replication session with an upstream MySQL or MariaDB server.

The only module that talks to the upstream.  PyMySQL does the handshake and authentication;
the session then registers as a replica and asks for the binlog by file/position, by MariaDB
GTID (``@slave_connect_state``) or by MySQL GTID set (``COM_BINLOG_DUMP_GTID``).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

import pymysql
from pymysql.constants import COMMAND

from binrelay import sqlclient
from binrelay.binlog import constants as c
from binrelay.errors import (
    UpstreamAuthError,
    UpstreamConfigError,
    UpstreamConnectionError,
    UpstreamError,
)
from binrelay.gtid import MariaGtidSet, MysqlGtidSet
from binrelay.upstream.packets import EventStream

log = logging.getLogger(__name__)

HEARTBEAT_PERIOD = 1.0  # seconds between server heartbeats on an idle stream
#: Heartbeats missing for this long mean the session is dead.
READ_TIMEOUT = 10.0

_AUTH_ERRORS = {1044, 1045, 1698, 1227}
#: The connection, not the request: 1152 aborted, 1159/1161 network read/write interrupted
#: (a MariaDB replica's IO thread retries them too).  Not 1184: the server's answer when
#: the user's init_connect fails, which no retry cures.
_CONNECT_ERRORS = {2002, 2003, 2005, 2006, 2013, 2055, 1040, 1053, 1152, 1159, 1161, 1927}


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str
    password: str = ""

    def __repr__(self) -> str:  # never show the password
        return f"Endpoint({self.user}@{self.host}:{self.port})"


@dataclass(frozen=True)
class ServerInfo:
    flavor: str  # "mariadb" | "mysql"
    version: str
    server_id: int
    #: Identity of the upstream, the first part of a relay subdir name: ``server_uuid`` on
    #: MySQL, ``<gtid_domain_id>-<server_id>`` on MariaDB (which has no server uuid).
    identity: str
    binlog_format: str
    binlog_checksum: str
    log_bin: bool


@dataclass(frozen=True)
class BinlogFile:
    name: str
    size: int


def _translate(exc: pymysql.err.MySQLError, endpoint: Endpoint) -> UpstreamError:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    message = exc.args[1] if len(exc.args) > 1 else str(exc)
    if not message and code == 0:
        message = "connection closed"  # PyMySQL's InterfaceError(0, '')
    where = f"upstream {endpoint.host}:{endpoint.port}"
    if code in _AUTH_ERRORS:
        return UpstreamAuthError(f"{where} refused user {endpoint.user!r}: {message}")
    # No server code: PyMySQL's own view of the socket (a closed connection, a packet out of
    # sequence after bytes were lost), which a new connection cures.
    client_side = code == 0 and isinstance(exc, pymysql.err.InterfaceError
                                           | pymysql.err.InternalError)
    if code in _CONNECT_ERRORS or client_side or (
            isinstance(exc, pymysql.err.OperationalError) and code >= 2000):
        return UpstreamConnectionError(
            f"cannot reach {where}: {message}",
            hint="check [from] host and port and that the server is running",
        )
    return UpstreamError(f"{where}: error {code}: {message}")


class UpstreamSession:
    """One connection to the upstream.  Not thread-safe; close it when done."""

    def __init__(self, endpoint: Endpoint, *, connect_timeout: float = 10.0) -> None:
        self.endpoint = endpoint
        try:
            self._conn = sqlclient.connect(
                host=endpoint.host, port=endpoint.port, user=endpoint.user,
                password=endpoint.password, connect_timeout=connect_timeout,
                read_timeout=READ_TIMEOUT * 3, write_timeout=READ_TIMEOUT * 3,
                autocommit=True, charset="utf8mb4",
            )
        except pymysql.err.MySQLError as exc:
            raise _translate(exc, endpoint) from exc
        except OSError as exc:
            raise UpstreamConnectionError(
                f"cannot reach upstream {endpoint.host}:{endpoint.port}: {exc}",
                hint="check [from] host and port and that the server is running",
            ) from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()

    def __enter__(self) -> UpstreamSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plain queries ----------------------------------------------------------------------

    def query(self, sql: str) -> list[tuple]:
        try:
            with self._conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        except pymysql.err.MySQLError as exc:
            raise _translate(exc, self.endpoint) from exc
        except OSError as exc:
            raise UpstreamConnectionError(f"connection to the upstream lost: {exc}") from exc

    def variable(self, name: str) -> str | None:
        rows = self.query(f"SELECT @@GLOBAL.{name}")
        value = rows[0][0] if rows else None
        return None if value is None else str(value)

    def server_info(self) -> ServerInfo:
        version = self.variable("version") or ""
        flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        server_id = int(self.variable("server_id") or 0)
        if flavor == "mariadb":
            identity = f"{int(self.variable('gtid_domain_id') or 0)}-{server_id}"
        else:
            identity = (self.variable("server_uuid") or "").lower()
        log_bin = (self.variable("log_bin") or "0") in ("1", "ON")
        return ServerInfo(
            flavor=flavor, version=version, server_id=server_id, identity=identity,
            binlog_format=(self.variable("binlog_format") or "").upper(),
            binlog_checksum=(self.variable("binlog_checksum") or "NONE").upper(),
            log_bin=log_bin,
        )

    def check_replicable(self, info: ServerInfo) -> None:
        where = f"upstream {self.endpoint.host}:{self.endpoint.port}"
        if not info.log_bin:
            raise UpstreamConfigError(f"{where} has no binary log (log_bin is OFF)",
                                      hint="start it with --log-bin")
        if info.binlog_format != "ROW":
            raise UpstreamConfigError(
                f"{where} has binlog_format={info.binlog_format}, binrelay needs ROW",
                hint="SET GLOBAL binlog_format=ROW and set it in the server's config file",
            )

    def row_metadata(self) -> str | None:
        """``binlog_row_metadata`` (MariaDB 10.5+, MySQL 8.0.1+), or None where the server
        has no such variable (it logs no column names then)."""
        rows = self.query("SHOW GLOBAL VARIABLES LIKE 'binlog\\_row\\_metadata'")
        return str(rows[0][1]).upper() if rows else None

    def binlog_files(self) -> list[BinlogFile]:
        return [BinlogFile(str(r[0]), int(r[1])) for r in self.query("SHOW BINARY LOGS")]

    def gtid_executed(self, flavor: str) -> str:
        name = "gtid_binlog_pos" if flavor == "mariadb" else "gtid_executed"
        return (self.variable(name) or "").replace("\n", "")

    # --- the dump ---------------------------------------------------------------------------

    def _prepare_dump(self, info: ServerInfo) -> None:
        self.query("SET @master_binlog_checksum = @@GLOBAL.binlog_checksum")
        self.query(f"SET @master_heartbeat_period = {int(HEARTBEAT_PERIOD * 1e9)}")
        if info.flavor == "mariadb":
            self.query(f"SET @mariadb_slave_capability = {c.MARIA_SLAVE_CAPABILITY_MINE}")

    def _register(self, server_id: int) -> None:
        host = socket.gethostname().encode()[:60]
        payload = (
            struct.pack("<IB", server_id, len(host)) + host
            + b"\x00\x00"  # user, password: not reported
            + struct.pack("<HII", 0, 0, 0)  # port, replication rank, master id
        )
        try:
            self._conn._execute_command(COMMAND.COM_REGISTER_SLAVE, payload)
            self._conn._read_ok_packet()
        except pymysql.err.MySQLError as exc:
            raise _translate(exc, self.endpoint) from exc
        except OSError as exc:
            raise UpstreamConnectionError(f"connection to the upstream lost: {exc}") from exc

    def _send(self, command: int, payload: bytes) -> None:
        try:
            self._conn._execute_command(command, payload)
        except (pymysql.err.MySQLError, OSError) as exc:
            raise UpstreamConnectionError(f"connection to the upstream lost: {exc}") from exc

    def _stream(self, on_idle: Callable[[], None] | None,
                should_stop: Callable[[], bool] | None = None) -> EventStream:
        sock = self._conn._sock
        if sock is None:
            raise UpstreamConnectionError("connection to the upstream is closed")
        return EventStream(sock, timeout=READ_TIMEOUT, on_idle=on_idle, should_stop=should_stop)

    def dump_by_position(self, info: ServerInfo, *, server_id: int, file: str, pos: int,
                         on_idle: Callable[[], None] | None = None,
                         should_stop: Callable[[], bool] | None = None,
                         non_blocking: bool = False) -> EventStream:
        self._prepare_dump(info)
        self._register(server_id)
        flags = c.BINLOG_DUMP_NON_BLOCK if non_blocking else 0
        if info.flavor == "mariadb":
            flags |= c.BINLOG_SEND_ANNOTATE_ROWS_EVENT
        payload = struct.pack("<IHI", pos, flags, server_id) + file.encode()
        self._send(COMMAND.COM_BINLOG_DUMP, payload)
        return self._stream(on_idle, should_stop)

    def dump_by_maria_gtid(self, info: ServerInfo, *, server_id: int, gtids: MariaGtidSet,
                           on_idle: Callable[[], None] | None = None) -> EventStream:
        self._prepare_dump(info)
        self.query(f"SET @slave_connect_state = '{gtids}'")
        self.query("SET @slave_gtid_strict_mode = 0")
        self.query("SET @slave_gtid_ignore_duplicates = 0")
        self._register(server_id)
        payload = struct.pack("<IHI", 4, c.BINLOG_SEND_ANNOTATE_ROWS_EVENT, server_id)
        self._send(COMMAND.COM_BINLOG_DUMP, payload)
        return self._stream(on_idle)

    def dump_by_mysql_gtid(self, info: ServerInfo, *, server_id: int, gtids: MysqlGtidSet,
                           on_idle: Callable[[], None] | None = None) -> EventStream:
        self._prepare_dump(info)
        self._register(server_id)
        self._send(COMMAND.COM_BINLOG_DUMP_GTID,
                   encode_dump_gtid(server_id=server_id, gtids=gtids))
        return self._stream(on_idle)


def encode_dump_gtid(*, server_id: int, gtids: MysqlGtidSet, file: str = "", pos: int = 4,
                     flags: int = c.BINLOG_THROUGH_GTID) -> bytes:
    """COM_BINLOG_DUMP_GTID's payload (after the command byte).

    flags u16, server_id u32, file name length u32, file name, position u64, then the GTID set
    in the PREVIOUS_GTIDS encoding, prefixed by its length u32.
    """
    name = file.encode()
    data = gtids.encode()
    return (struct.pack("<HII", flags, server_id, len(name)) + name
            + struct.pack("<QI", pos, len(data)) + data)
