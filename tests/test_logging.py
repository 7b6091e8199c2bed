"""Structured (logfmt) logs, and no password in any output of relay, sync or status."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

from binrelay.logfmt import LogfmtFormatter, SecretMask, logfmt_value, setup_logging
from relay_helpers import relay_until_caught_up, run_binrelay, write_config

UP_PASSWORD = "Up-pw-7f3a9c!"
DOWN_PASSWORD = "Down pw \"q\" 81e2"
LINE = re.compile(r'ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(debug|info|warn|error) '
                  r'logger=[\w.]+ msg=("([^"\\]|\\.)*"|\S+)( [\w.]+=("([^"\\]|\\.)*"|\S*))*')


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("binrelay.x", logging.WARNING, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_logfmt_line() -> None:
    line = LogfmtFormatter().format(record("relaying %s", "a b", addr="127.0.0.1:9", n=3,
                                           ok=True, note='say "hi"'))
    assert LINE.fullmatch(line), line
    assert ' level=warn logger=binrelay.x msg="relaying a b" ' in line
    assert line.endswith(' addr=127.0.0.1:9 n=3 ok=true note="say \\"hi\\""')


def test_logfmt_values() -> None:
    assert logfmt_value("plain") == "plain"
    assert logfmt_value("") == '""'
    assert logfmt_value(None) == '""'
    assert logfmt_value("a=b") == '"a=b"'
    assert logfmt_value("two\nlines") == '"two\\nlines"'


def test_secrets_are_masked_wherever_they_come_from() -> None:
    mask = SecretMask()
    mask.add(["hunter22", "", "ab"])  # empty and tiny strings are not secrets worth masking
    formatter = LogfmtFormatter(mask)
    line = formatter.format(record("login with %s", "hunter22", dsn="u:hunter22@h"))
    assert "hunter22" not in line and line.count("***") == 2
    assert "ab" in formatter.format(record("about"))


def test_setup_logging_levels() -> None:
    out = io.StringIO()
    setup_logging("warn", secrets=["zz-secret"], stream=out)
    try:
        logging.getLogger("binrelay.t").info("hidden")
        logging.getLogger("binrelay.t").warning("shown zz-secret")
    finally:
        setup_logging("info")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "level=warn" in lines[0] and "***" in lines[0], lines


def test_py4j_failures_logged_on_the_root_logger_stay_at_debug() -> None:
    """py4j logs some of its failures with ``logging.info(..., exc_info=True)`` (the root
    logger): at exit its finalizer thread does, when the JVM has ended.  Such a traceback
    belongs to the debug log, not to an operator's terminal."""
    import py4j.java_gateway as gateway

    def py4j_failure() -> None:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except OSError:
            # As py4j writes it (java_gateway.py), from a record made in py4j's file.
            logging.getLogger().handle(logging.LogRecord(
                "root", logging.INFO, gateway.__file__, 1056,
                "Exception while sending command.", None, sys.exc_info()))

    for level, shown in (("info", False), ("debug", True)):
        out = io.StringIO()
        setup_logging(level, stream=out)
        try:
            py4j_failure()
            logging.getLogger("binrelay.t").info("ours")
        finally:
            setup_logging("info")
        text = out.getvalue()
        assert ("Exception while sending command." in text) is shown, text
        assert ("Traceback" in text) is shown, text
        assert "msg=ours" in text


def test_no_password_in_relay_sync_or_status_output(mariadb_factory, tmp_path: Path) -> None:
    upstream = mariadb_factory(server_id=1)
    downstream = mariadb_factory(server_id=2)
    # Not in the binlog: the sync's user may not replay account statements downstream.
    with upstream.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE USER 'br_up'@'%%' IDENTIFIED BY %s", (UP_PASSWORD,))
        cur.execute("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'br_up'@'%'")
    downstream.execute("CREATE USER 'br_down'@'%%' IDENTIFIED BY %s", (DOWN_PASSWORD,))
    downstream.execute("GRANT ALL ON *.* TO 'br_down'@'%'")
    upstream.execute("CREATE DATABASE d")
    upstream.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(40))")
    # A password can land in the data too; it must not be logged from there either.
    upstream.execute("INSERT INTO d.t VALUES (1, %s)", (UP_PASSWORD,))
    relay_dir = tmp_path / "relay"
    config = write_config(
        tmp_path / "binrelay.toml", upstream, relay_dir, log_level="debug",
        from_={"user": "br_up", "password": UP_PASSWORD},
        to={"host": downstream.host, "port": downstream.port, "user": "br_down",
            "password": DOWN_PASSWORD},
        sync={"master": "local[1]", "tasks": 1},
        metrics={"relay-addr": "127.0.0.1:0"})
    relay_until_caught_up(config, upstream, relay_dir, tmp_path / "relay.log")
    outputs = {"relay": (tmp_path / "relay.log").read_text()}
    sync = run_binrelay("sync", "--config", str(config), "--until-caught-up", timeout=600)
    assert sync.returncode == 0, sync.stderr[-3000:]
    assert downstream.scalar("SELECT v FROM d.t WHERE id = 1") == UP_PASSWORD
    outputs["sync"] = sync.stdout + sync.stderr
    status = run_binrelay("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    outputs["status"] = status.stdout + status.stderr
    (tmp_path / "bad.toml").write_text(
        config.read_text().replace(UP_PASSWORD, UP_PASSWORD + "-wrong"))
    bad = run_binrelay("relay", "--config", str(tmp_path / "bad.toml"))
    assert bad.returncode != 0 and "[BR4003]" in bad.stderr, bad.stderr
    outputs["bad relay"] = bad.stdout + bad.stderr
    for name, text in outputs.items():
        for secret in (UP_PASSWORD, DOWN_PASSWORD):
            assert secret not in text, f"{name} output holds a password"
    # Every log line of ours is one logfmt line, with the figures as fields.
    ours = [line for line in outputs["relay"].splitlines() if line.startswith("ts=")]
    assert ours and all(LINE.fullmatch(line) for line in ours), ours
    batches = [line for line in outputs["sync"].splitlines() if 'msg="batch applied"' in line]
    assert batches and all(LINE.fullmatch(line) and " rows=" in line for line in batches)
    # The driver thread's CPU and its wait for one: a slow batch on a busy host tells.
    assert all(re.search(r" cpu_seconds=\d+\.?\d* cpu_wait_seconds=\d+\.?\d*( |$)", line)
               for line in batches), batches
    assert any("logger=binrelay.relay.service" in line for line in ours)


def test_secret_with_quotes_is_masked_before_escaping() -> None:
    mask = SecretMask()
    mask.add([DOWN_PASSWORD])
    line = LogfmtFormatter(mask).format(record("pw %s", DOWN_PASSWORD, also=DOWN_PASSWORD))
    assert "q" not in line.split("msg=", 1)[1].replace("***", ""), line
