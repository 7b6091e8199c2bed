"""The fidelity harness: SQL upstream, relay, ``sync --until-caught-up``, every table compared.

A scenario is a list of *sessions*, each a list of SQL statements run on one upstream
connection (so that session settings such as ``binlog_format``, ``sql_mode`` or
``time_zone`` hold for the statements after them); sessions run one after the other, or
interleaved when a statement is a ``(session index, sql)`` pair (``(i, None)`` ends session
``i``, as a client disconnecting).  The check is the one a
native replica meets: after the sync every user table equals the upstream's, by CHECKSUM
TABLE and by a sorted dump of its rows, and the checkpoint says consistent.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from binrelay.apply.checkpoint import CheckpointStore, read_checkpoint
from binrelay.apply.sql import quote_ident
from binrelay.config import load_config
from binrelay.spark.sync import SyncPipeline
from relay_helpers import relay_until_caught_up, run_binrelay, write_config

SYSTEM = ("mysql", "information_schema", "performance_schema", "sys", "binrelay")

Step = str | tuple[int, str | None]


@dataclass
class Env:
    upstream: Any
    downstream: Any
    relay_dir: Path
    config: Path
    tmp: Path
    connections: dict[int, Any] = field(default_factory=dict)

    def session(self, index: int) -> Any:
        conn = self.connections.get(index)
        if conn is None:
            conn = self.connections[index] = self.upstream.connect()
        return conn

    def run(self, steps: Sequence[Step]) -> None:
        """Run ``steps`` upstream: plain SQL on session 0, ``(i, sql)`` on session ``i``,
        ``(i, None)`` ends session ``i``."""
        for step in steps:
            index, sql = (0, step) if isinstance(step, str) else step
            if sql is None:
                self.connections.pop(index).close()
                continue
            with self.session(index).cursor() as cur:
                cur.execute(sql)

    def close_sessions(self) -> None:
        for conn in self.connections.values():
            with contextlib.suppress(Exception):
                conn.close()
        self.connections.clear()

    def relay(self) -> None:
        self.close_sessions()
        relay_until_caught_up(self.config, self.upstream, self.relay_dir,
                              self.tmp / "relay.log")

    def sync(self, spark: Any) -> Any:
        return SyncPipeline(load_config(self.config), spark=spark).run(until_caught_up=True)


class SimulatedCrash(Exception):
    """The sync "dies" between applying a batch and moving the checkpoint."""


def sync_with_crashes(env: Env, spark: Any, monkeypatch: Any) -> int:
    """Sync to the end, crashing every batch once right before its checkpoint would move
    (its data applied, ``consistent = 0``, as a kill -9 at that moment leaves it), then
    replaying it as ``recover`` does and going on.  Returns the crashes."""
    from binrelay.spark import sync as sync_module

    real = sync_module.finish_batch
    crashed: set[int] = set()

    def finish_or_crash(conn: Any, pipeline: str, batch_id: int, *args: Any, **kw: Any) -> Any:
        if batch_id not in crashed:
            crashed.add(batch_id)
            conn.rollback()  # what the server does to the open transaction of a dead client
            raise SimulatedCrash(batch_id)
        return real(conn, pipeline, batch_id, *args, **kw)

    monkeypatch.setattr(sync_module, "finish_batch", finish_or_crash)
    config = load_config(env.config)
    for _ in range(10_000):
        try:
            # What `binrelay recover` runs (the batch in flight first), on the session
            # the tests share.
            SyncPipeline(config, spark=spark).run(until_caught_up=True)
            return len(crashed)
        except SimulatedCrash:
            continue
    raise AssertionError("the sync never got to the end")


def make_env(mariadb_factory: Callable[..., Any], tmp: Path, *,
             upstream_args: Sequence[str] = (), downstream_args: Sequence[str] = (),
             sync: dict[str, Any] | None = None, user: str = "root") -> Env:
    upstream = mariadb_factory(server_id=1, extra_args=list(upstream_args))
    downstream = mariadb_factory(server_id=2, extra_args=list(downstream_args))
    relay_dir = tmp / "relay"
    # Small partitions and no batch applied by the driver: the shuffled, multi-task path
    # (tests of the driver's own apply ask for it).
    settings = {"master": "local[2]", "tasks": 3, "batch-bytes": 1 << 20,
                "partition-bytes": 64 * 1024, "driver-batch-bytes": 0}
    settings.update(sync or {})
    config = write_config(
        tmp / "binrelay.toml", upstream, relay_dir,
        to={"host": downstream.host, "port": downstream.port, "user": user, "password": ""},
        sync=settings)
    return Env(upstream, downstream, relay_dir, config, tmp)


def user_tables(server: Any) -> list[tuple[str, str]]:
    marks = ", ".join(["%s"] * len(SYSTEM))
    rows = server.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE IN"
        f" ('BASE TABLE', 'SYSTEM VERSIONED', 'SEQUENCE') AND TABLE_SCHEMA NOT IN ({marks})"
        " ORDER BY 1, 2", SYSTEM)
    return [(s, t) for s, t in rows]


_WIDE = frozenset({"ucs2", "utf16", "utf16le", "utf32"})


def snapshot(server: Any) -> dict[str, tuple[Any, list[tuple[Any, ...]]]]:
    """Every user table: CHECKSUM TABLE and its rows, sorted (invisible and system-versioning
    columns included, history rows too)."""
    out = {}
    with contextlib.closing(server.connect()) as conn, conn.cursor() as cur:
        for schema, table in user_tables(server):
            name = f"{quote_ident(schema)}.{quote_ident(table)}"
            cur.execute("SELECT COLUMN_NAME, CHARACTER_SET_NAME, IS_GENERATED FROM"
                        " information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
                        " ORDER BY ORDINAL_POSITION", (schema, table))
            columns = cur.fetchall()
            # UTF-16/32 columns may hold units that do not convert to the client's UTF-8.
            cols = ", ".join(f"HEX({quote_ident(c)})" if charset in _WIDE else quote_ident(c)
                             for c, charset, _g in columns)
            if any(generated != "NEVER" for _c, _cs, generated in columns):
                # MariaDB 10.11's CHECKSUM TABLE never reads a generated column (stored or
                # not) and hashes what its row buffer held in its place (MDEV-22943): the
                # same rows give another value on another server, or after FLUSH TABLES on
                # the same one, the upstream's included.  The rows below, generated columns
                # with them, are the comparison.
                checksum = "generated columns: rows compared"
            else:
                cur.execute(f"CHECKSUM TABLE {name}")
                checksum = cur.fetchone()[1]
            history = ""
            cur.execute("SELECT TABLE_TYPE FROM information_schema.TABLES WHERE"
                        " TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table))
            if cur.fetchone()[0] == "SYSTEM VERSIONED":
                history = " FOR SYSTEM_TIME ALL"
            cur.execute(f"SELECT {cols} FROM {name}{history}")
            rows = sorted(cur.fetchall(), key=repr)
            out[f"{schema}.{table}"] = (checksum, rows)
    return out


def assert_converged(env: Env) -> None:
    """Every user table equal on both sides, the checkpoint consistent, ``status`` agreeing."""
    want = snapshot(env.upstream)
    got = snapshot(env.downstream)
    assert sorted(got) == sorted(want), f"tables differ: {sorted(got)} {sorted(want)}"
    for name in want:
        assert got[name][1] == want[name][1], f"rows of {name} differ"
        assert got[name][0] == want[name][0], f"CHECKSUM TABLE of {name} differs"
    conn = env.downstream.connect()
    try:
        cp = read_checkpoint(conn, "sync", CheckpointStore())
    finally:
        conn.close()
    assert cp is not None and cp.consistent
    assert (cp.position.binlog_name, cp.position.binlog_pos) == env.upstream.master_status()
    # The checkpoint's GTID set is the upstream's at that position.
    assert cp.gtid_set == env.upstream.scalar("SELECT @@gtid_binlog_pos")
    status = run_binrelay("status", "--config", str(env.config))
    assert status.returncode == 0, status.stderr
    assert re.search(r"^\s*Consistent: Yes$", status.stdout, re.M), status.stdout
