"""The driver JVM's class archive (``spark.jvm_archive``): made once, mapped after, never in
the way.  The bookkeeping without a JVM; then a real archive, a start that maps it, and a
truncated one (which would crash a JVM at start) replaced by a start without it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from binrelay.spark.jvm_archive import (
    ArchiveUse,
    archive_key,
    archive_use,
    java_binary,
)
from binrelay.spark.session import make_archive

DEAD = 2**22 + 12345  # above the default pid_max: no such process


def spark_home(tmp: Path) -> Path:
    jars = tmp / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("a.jar", "b.jar"):
        (jars / name).write_bytes(b"x" * 10)
    return tmp / "spark"


def test_the_key_follows_the_jars_the_class_path_and_the_options(tmp_path: Path,
                                                                   monkeypatch) -> None:
    home = spark_home(tmp_path)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    key = archive_key(home, None, "-Xa")
    assert archive_key(home, None, "-Xa") == key
    assert archive_key(home, None, "-Xb") != key
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert archive_key(home, None, "-Xa") != key
    monkeypatch.delenv("SPARK_CONF_DIR")
    (home / "jars" / "b.jar").write_bytes(b"y" * 11)
    assert archive_key(home, None, "-Xa") != key


def test_one_jvm_makes_it_and_a_later_start_maps_it(tmp_path: Path) -> None:
    home, cache = spark_home(tmp_path), tmp_path / "cache"
    cache.mkdir(mode=0o700)
    making = archive_use(home, "-Xa", directory=cache, token="t1")
    assert making.making is not None and making.mapped is None
    assert making.options == f"-XX:ArchiveClassesAtExit={making.making}"
    pid_file = making.making.with_suffix(".pid")
    # The maker (pid and start time: a reused pid is another process), until its JVM is
    # known.
    assert pid_file.read_text().split()[0] == str(os.getpid())
    # Its JVM is alive: another start neither maps nor makes one.
    assert archive_use(home, "-Xa", directory=cache, token="t2") == ArchiveUse()
    # The JVM writes the archive as it exits; once it is gone the archive moves in place.
    making.started(DEAD)
    making.making.write_bytes(b"archive")
    mapped = archive_use(home, "-Xa", directory=cache, token="t3")
    final = cache / f"{archive_key(home, java_binary(), '-Xa')}.jsa"
    assert mapped.mapped == final and final.read_bytes() == b"archive"
    assert stat.S_IMODE(final.stat().st_mode) == 0o600
    assert f"-XX:SharedArchiveFile={final} -Xshare:on -XX:+VerifySharedSpaces" in \
        mapped.options
    assert not making.making.exists() and not pid_file.exists()
    mapped.failed()
    assert not final.exists()


def test_a_maker_that_wrote_nothing_is_not_waited_for(tmp_path: Path) -> None:
    home, cache = spark_home(tmp_path), tmp_path / "cache"
    cache.mkdir(mode=0o700)
    making = archive_use(home, "-Xa", directory=cache, token="t1")
    assert making.making is not None
    making.started(DEAD)
    making.making.write_bytes(b"")  # its JVM died as it began to write
    again = archive_use(home, "-Xa", directory=cache, token="t2")
    assert again.making is not None and again.making != making.making
    assert not making.making.exists()


def test_a_reused_pid_is_not_the_maker(tmp_path: Path) -> None:
    home, cache = spark_home(tmp_path), tmp_path / "cache"
    cache.mkdir(mode=0o700)
    making = archive_use(home, "-Xa", directory=cache, token="t1")
    assert making.making is not None
    # The JVM's pid, since reused by this very process (alive, another start time).
    making.making.with_suffix(".pid").write_text(f"{os.getpid()} 1")
    making.making.write_bytes(b"archive")
    assert archive_use(home, "-Xa", directory=cache, token="t2").mapped is not None


def test_a_start_that_failed_while_making_one_lets_another_make_it(tmp_path: Path) -> None:
    home, cache = spark_home(tmp_path), tmp_path / "cache"
    cache.mkdir(mode=0o700)
    making = archive_use(home, "-Xa", directory=cache, token="t1")
    making.failed()
    assert archive_use(home, "-Xa", directory=cache, token="t2").making is not None


def test_old_archives_of_other_keys_go_and_crash_reports_are_private(tmp_path: Path) -> None:
    home, cache = spark_home(tmp_path), tmp_path / "cache"
    cache.mkdir(mode=0o700)
    old, recent = cache / "0123old.jsa", cache / "4567new.jsa"
    for path in (old, recent):
        path.write_bytes(b"x")
    os.utime(old, (1, 1))
    report = cache / "hs_err_123.log"
    report.write_text("crash")
    report.chmod(0o644)
    archive_use(home, "-Xa", directory=cache, token="t1")
    assert not old.exists() and recent.exists()
    assert stat.S_IMODE(report.stat().st_mode) == 0o600


def test_no_cache_dir_no_archive(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert archive_use(spark_home(tmp_path), "-Xa") == ArchiveUse()


def test_a_path_with_blanks_is_quoted(tmp_path: Path) -> None:
    cache = tmp_path / "my cache"
    cache.mkdir(mode=0o700)
    use = archive_use(spark_home(tmp_path), "-Xa", directory=cache, token="t")
    assert use.options == f"'-XX:ArchiveClassesAtExit={use.making}'"


_START = """
import sys
from binrelay.spark.session import build_session
s = build_session("local[1]", app_name="archive-test")
args = s.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print("ARGS", " ".join(args.getInputArguments()))
s.sparkContext.parallelize([1, 2], 1).count()
s.stop()
"""


def _start(tmp_path: Path) -> str:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    proc = subprocess.run([sys.executable, "-c", _START], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("ARGS ")]
    return line


def test_a_real_archive_is_mapped_and_a_damaged_one_replaced(tmp_path: Path,
                                                            monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    archive = make_archive()
    assert archive is not None and archive.stat().st_size > 1 << 20
    assert stat.S_IMODE(archive.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    good = archive.read_bytes()
    assert f"-XX:SharedArchiveFile={archive}" in _start(tmp_path)
    # Its header zeroed (a JVM killed while writing it: the header goes last), which a JVM
    # would silently ignore; then truncated, which would crash one at start.
    for damaged in (bytes(4096) + good[4096:], good[:len(good) // 2]):
        archive.write_bytes(damaged)
        assert "-XX:SharedArchiveFile" not in _start(tmp_path)
        assert not archive.exists()
    assert not list(tmp_path.glob("hs_err*"))  # the crash's report is not left in the cwd
