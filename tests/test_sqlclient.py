"""binrelay.sqlclient: one TLS context per process, TLS still negotiated when offered."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
