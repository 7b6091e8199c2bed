"""binrelay.sqlclient: one TLS context per process, TLS still negotiated when offered."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pymysql
import pytest

from binrelay import sqlclient
from binrelay.apply.downstream import Downstream
from binrelay.testing.sandbox import ServerFactory
from binrelay.upstream.client import Endpoint, UpstreamSession


def _cipher(conn: sqlclient.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        return str(cur.fetchone()[1])


def test_connections_share_one_context_and_stay_plain_without_server_tls(mariadb) -> None:
    a = sqlclient.connect(host=mariadb.host, port=mariadb.port, user="root", password="")
    b = sqlclient.connect(host=mariadb.host, port=mariadb.port, user="root", password="")
    try:
        # The server offers no TLS: plain, as PyMySQL's own preferred mode would be.
        assert _cipher(a) == "" and _cipher(b) == ""
        assert a.ctx is b.ctx is sqlclient._preferred_context()
    finally:
        a.close()
        b.close()


def test_tls_is_negotiated_when_the_server_offers_it(mariadb_factory: ServerFactory,
                                                     tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server = mariadb_factory(server_id=1, extra_args=[f"--ssl-cert={cert}",
                                                      f"--ssl-key={key}"])
    # Each path that opens a connection: the upstream session and the apply session.
    session = UpstreamSession(Endpoint(server.host, server.port, "root", ""))
    try:
        assert _cipher(session._conn)
    finally:
        session.close()
    conn = Downstream(host=server.host, port=server.port, user="root", password="").connect()
    try:
        assert _cipher(conn)
        assert conn.ctx is sqlclient._preferred_context()
    finally:
        conn.close()


def test_load_data_local_sends_only_what_is_offered(mariadb, tmp_path: Path) -> None:
    """A LOAD DATA LOCAL reads the bytes offered under its file's name; a file of this
    machine the statement (or a server) names is never sent: PyMySQL's own handler would."""
    secret = tmp_path / "secret.txt"
    secret.write_text("1\n2\n")
    conn = sqlclient.connect(host=mariadb.host, port=mariadb.port, user="root", password="",
                             local_infile=True, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS ld")
            cur.execute("CREATE TABLE ld.t (id INT PRIMARY KEY)")
            with conn.offering("relay-file", b"7\n8\n9\n"):
                cur.execute("LOAD DATA LOCAL INFILE 'relay-file' INTO TABLE ld.t")
            with pytest.raises(pymysql.OperationalError, match="did not offer"):
                cur.execute(f"LOAD DATA LOCAL INFILE '{secret}' INTO TABLE ld.t")
            cur.execute("SELECT id FROM ld.t ORDER BY id")
            assert cur.fetchall() == ((7,), (8,), (9,))
    finally:
        conn.close()
