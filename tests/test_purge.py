"""Purge planning and removal on relay dirs built on disk; the seed's example exactly."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest

from binrelay.position import Position, SubdirName
from binrelay.relay import consumers as reg
from binrelay.relay.layout import list_binlogs, read_index
from binrelay.relay.purge import (
    PurgeError,
    PurgeRefused,
    _remove,
    plan_manual,
    purge_auto,
    purge_manual,
    read_state,
)
from binrelay.relay.reader import RelayReader
from binrelay.relay.relaydir import RelayDir
from relay_helpers import tree_digest
from relaydir_builder import make_relay_dir

A = "deb76a2b-09cc-11e9-9129-5242cf3bb246"
B = "e4e0e8ab-09cc-11e9-9220-82cc35207219"
SEED = [(f"{A}.000001", [2, 2, 2]), (f"{B}.000002", [2]), (f"{A}.000003", [2])]


def _index(root: Path) -> list[str]:
    return [str(s) for s in read_index(root) or []]


def test_seed_example_with_sub_dir(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, SEED)
    purge_manual(tmp_path, filename="mysql-bin.000001", sub_dir=f"{B}.000002")
    assert _index(tmp_path) == [f"{B}.000002", f"{A}.000003"]
    assert not (tmp_path / f"{A}.000001").exists()
    assert list_binlogs(tmp_path / f"{B}.000002") == ["mysql-bin.000001"]
    assert list_binlogs(tmp_path / f"{A}.000003") == ["mysql-bin.000001"]


def test_seed_example_without_sub_dir(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, SEED)
    purge_manual(tmp_path, filename="mysql-bin.000001")
    assert _index(tmp_path) == [f"{A}.000003"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [f"{A}.000003"]


def test_files_before_the_named_one_in_a_subdir(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, SEED)
    plan, freed, _ = purge_manual(tmp_path, filename="mysql-bin.000003",
                                  sub_dir=f"{A}.000001")
    assert [f.name for f in plan.files] == ["mysql-bin.000001", "mysql-bin.000002"]
    assert freed > 0
    assert list_binlogs(tmp_path / f"{A}.000001") == ["mysql-bin.000003"]
    assert len(_index(tmp_path)) == 3
    # What is left still reads from its start, in order.
    assert {(str(e.subdir), e.file) for e in RelayReader(tmp_path)} >= {
        (f"{A}.000001", "mysql-bin.000003"), (f"{A}.000003", "mysql-bin.000001")}


@pytest.mark.parametrize(("filename", "sub_dir", "message"), [
    ("mysql-bin.000001", "nope.000009", "not in server-uuid.index"),
    ("mysql-bin.000007", f"{A}.000001", "is not a relay file"),
    ("mysql-bin.000002", None, "comes after the file the relay is writing"),
    ("not-a-binlog", None, "not a binlog file name"),
])
def test_bad_requests_delete_nothing(tmp_path: Path, filename: str, sub_dir: str | None,
                                     message: str) -> None:
    make_relay_dir(tmp_path, SEED)
    before = tree_digest(tmp_path)
    with pytest.raises(PurgeError, match=message):
        purge_manual(tmp_path, filename=filename, sub_dir=sub_dir)
    assert tree_digest(tmp_path) == before


def test_a_consumer_holds_its_files(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, SEED)
    pos = Position(SubdirName.parse(f"{A}.000001"), "mysql-bin.000002", 4)
    reg.register(tmp_path, "sync", pos)
    before = tree_digest(tmp_path)
    with pytest.raises(PurgeRefused, match=r"consumer 'sync' at .*mysql-bin.000002"):
        purge_manual(tmp_path, filename="mysql-bin.000001", sub_dir=f"{B}.000002")
    assert tree_digest(tmp_path) == before
    # Before its file is fine.
    purge_manual(tmp_path, filename="mysql-bin.000002", sub_dir=f"{A}.000001")
    assert list_binlogs(tmp_path / f"{A}.000001") == ["mysql-bin.000002", "mysql-bin.000003"]
    # The consumer still reads everything from its position.
    files = {(str(e.subdir), e.file) for e in RelayReader(tmp_path, pos)}
    assert (f"{A}.000003", "mysql-bin.000001") in files
    # Stale consumers keep protecting; --force overrides and says whom it hurt.
    plan, _, hurt = purge_manual(tmp_path, filename="mysql-bin.000001", sub_dir=f"{B}.000002",
                                 force=True)
    assert [c.name for c in hurt] == ["sync"] and plan.subdirs
    reg.unregister(tmp_path, "sync")
    assert reg.list_consumers(tmp_path) == []


def test_space_and_age_triggers(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, SEED)
    # Low free space (remain-space above what the disk has): everything safe goes.
    pos = Position(SubdirName.parse(f"{B}.000002"), "mysql-bin.000001", 4)
    reg.register(tmp_path, "sync", pos)
    plan, _ = purge_auto(tmp_path, now=time.time(), expires_hours=0, remain_gb=10**6,
                         gc_applied=False)
    assert _index(tmp_path) == [f"{B}.000002", f"{A}.000003"]
    assert len(plan.files) == 3
    reg.unregister(tmp_path, "sync")

    make_relay_dir(tmp_path / "aged", [(f"{A}.000001", [1, 1, 1, 1])])
    old = time.time() - 3 * 3600
    sub = tmp_path / "aged" / f"{A}.000001"
    for name in ("mysql-bin.000001", "mysql-bin.000003"):  # 000002 is newer: stop there
        os.utime(sub / name, (old, old))
    plan, _ = purge_auto(tmp_path / "aged", now=time.time(), expires_hours=2, remain_gb=0,
                         gc_applied=False)
    assert [f.name for f in plan.files] == ["mysql-bin.000001"]
    assert list_binlogs(sub) == ["mysql-bin.000002", "mysql-bin.000003", "mysql-bin.000004"]


def test_gc_applied_follows_the_slowest_consumer(tmp_path: Path) -> None:
    make_relay_dir(tmp_path, SEED)
    plan, _ = purge_auto(tmp_path, now=time.time(), expires_hours=0, remain_gb=0,
                         gc_applied=True)
    assert plan.empty  # no consumer: nothing is known to be applied
    reg.register(tmp_path, "fast", Position(SubdirName.parse(f"{A}.000003"),
                                                 "mysql-bin.000001", 100))
    reg.register(tmp_path, "slow", Position(SubdirName.parse(f"{A}.000001"),
                                                 "mysql-bin.000003", 4))
    plan, _ = purge_auto(tmp_path, now=time.time(), expires_hours=0, remain_gb=0,
                         gc_applied=True)
    assert [f.name for f in plan.files] == ["mysql-bin.000001", "mysql-bin.000002"]


@pytest.mark.parametrize("crash_after", range(8))
def test_a_crash_at_any_step_leaves_a_usable_relay_dir(tmp_path: Path, monkeypatch,
                                                       crash_after: int) -> None:
    make_relay_dir(tmp_path, SEED)
    state = read_state(tmp_path)
    plan = plan_manual(state, [], filename="mysql-bin.000001")  # removes two subdirs
    steps = {"n": 0}

    class Crash(Exception):
        pass

    def step(real):
        def wrapped(*args, **kwargs):
            if steps["n"] >= crash_after:
                raise Crash
            steps["n"] += 1
            return real(*args, **kwargs)
        return wrapped

    import binrelay.relay.purge as purge_mod

    monkeypatch.setattr(purge_mod.os, "unlink", step(os.unlink))
    monkeypatch.setattr(purge_mod, "write_index", step(purge_mod.write_index))
    monkeypatch.setattr(purge_mod.shutil, "rmtree", step(shutil.rmtree))
    with contextlib.suppress(Crash):
        _remove(tmp_path, plan)
    monkeypatch.undo()
    # The relay opens it (removing a half-removed subdir), readers read what is left.
    relay_dir = RelayDir(tmp_path)
    relay_dir.open()
    assert str(relay_dir.current) == f"{A}.000003"
    events = list(RelayReader(tmp_path))
    assert (f"{A}.000003", "mysql-bin.000001") in {(str(e.subdir), e.file) for e in events}
