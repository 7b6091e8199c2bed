"""``relay-log-recovery = true`` (issue 12, item 5; SPEC.md §3, MySQL's relay_log_recovery):
a relay dir damaged where its readers still need it is mended by fetching again from the
upstream; the damaged part is kept aside; the sync then continues to equality.  When the
upstream no longer has what must be fetched, one line, nothing changed."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import tomli_w

from binrelay.relay.layout import list_binlogs, read_meta
from binrelay.relay.salvage import ASIDE_DIRNAME
from fidelity import Env, assert_converged, make_env
from relay_helpers import assert_identical, current_subdir, run_binrelay

SMALL_BINLOGS = ["--max-binlog-size=4096"]


def traffic(env: Env, first: int, rows: int) -> None:
    steps = [] if first else ["CREATE DATABASE d",
                              "CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(200))"]
    steps += [f"INSERT INTO d.t VALUES ({i}, REPEAT('x', 150))" for i in range(first,
                                                                                first + rows)]
    steps += [f"UPDATE d.t SET v = 'changed' WHERE id = {first}"]
    env.run(steps)


def with_recovery(env: Env) -> None:
    data = tomllib.loads(env.config.read_text())
    data["relay-log-recovery"] = True
    env.config.write_text(tomli_w.dumps(data))


def fingerprint(relay_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(relay_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(relay_dir.rglob("*")) if p.is_file()}


def synced_then_more(mariadb_factory, tmp_path: Path, spark) -> tuple[Env, list[str]]:
    """A sync at some point of the relay, then more relayed after it; returns the files
    after the sync's position."""
    env = make_env(mariadb_factory, tmp_path, upstream_args=SMALL_BINLOGS)
    traffic(env, 0, 40)
    env.relay()
    env.sync(spark)  # registers the pipeline as a consumer at its checkpoint
    at = read_meta(current_subdir(env.relay_dir))
    assert at is not None
    traffic(env, 1000, 120)
    env.relay()
    files = list_binlogs(current_subdir(env.relay_dir))
    after = [f for f in files if f > at.binlog_name]
    assert len(after) >= 4, files
    return env, after


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_bytes_flipped_mid_file_are_fetched_again(mariadb_factory, tmp_path: Path,
                                                  spark) -> None:
    env, after = synced_then_more(mariadb_factory, tmp_path, spark)
    subdir = current_subdir(env.relay_dir)
    damaged = subdir / after[1]
    original = damaged.read_bytes()
    flip(damaged, len(original) // 2)
    with_recovery(env)
    env.relay()
    assert_identical(subdir, env.upstream)
    kept = list((env.relay_dir / ASIDE_DIRNAME).glob(f"*/{after[1]}"))
    assert len(kept) == 1 and kept[0].read_bytes() != original  # the damaged copy, kept
    assert sorted(p.name for p in kept[0].parent.iterdir()) == sorted(after[1:])
    log = (env.tmp / "relay.log").read_text()
    assert "relay-log-recovery" in log and "damaged at offset" in log
    traffic(env, 5000, 10)
    env.relay()
    env.sync(spark)
    assert_converged(env)


def test_the_last_two_files_deleted_are_fetched_again(mariadb_factory, tmp_path: Path,
                                                      spark) -> None:
    env, _after = synced_then_more(mariadb_factory, tmp_path, spark)
    subdir = current_subdir(env.relay_dir)
    for name in list_binlogs(subdir)[-2:]:
        (subdir / name).unlink()
    with_recovery(env)
    env.relay()
    assert_identical(subdir, env.upstream)
    env.sync(spark)
    assert_converged(env)


def test_the_damaged_last_file_before_relay_meta(mariadb_factory, tmp_path: Path,
                                                 spark) -> None:
    """The case a relay refuses without the switch: damage before relay.meta's position."""
    env, _after = synced_then_more(mariadb_factory, tmp_path, spark)
    subdir = current_subdir(env.relay_dir)
    last = subdir / list_binlogs(subdir)[-1]
    flip(last, last.stat().st_size // 2)
    refused = run_binrelay("relay", "--config", str(env.config))
    assert refused.returncode != 0 and "corrupt" in refused.stderr, refused.stderr
    with_recovery(env)
    env.relay()
    assert_identical(subdir, env.upstream)
    env.sync(spark)
    assert_converged(env)


def test_nothing_changes_when_the_upstream_no_longer_has_the_file(mariadb_factory,
                                                                  tmp_path: Path,
                                                                  spark) -> None:
    env, after = synced_then_more(mariadb_factory, tmp_path, spark)
    flip(current_subdir(env.relay_dir) / after[1], 300)
    env.upstream.execute("FLUSH BINARY LOGS")
    env.upstream.purge_logs_to(after[3])
    with_recovery(env)
    before = fingerprint(env.relay_dir)
    done = run_binrelay("relay", "--config", str(env.config))
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert "relay-log-recovery" in lines[0] and f"no longer has {after[1]}" in lines[0]
    assert fingerprint(env.relay_dir) == before
