"""A class data sharing (CDS) archive of the driver JVM's classes, kept between runs.

Most of a SparkSession's start is its JVM loading, verifying and linking Spark's classes
from some 250 jars.  A dynamic CDS archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` writes
it when a JVM exits, ``-XX:SharedArchiveFile`` maps it at the next start) holds them ready:
measured on 2 cores, the session's start went from 8.2–9.7 s to 5.2–5.8 s (the first job
after it unchanged, ~2 s).  A catch-up's Spark start overlaps with the driver's own
batches, but it takes their CPU meanwhile; a streaming sync's is its time to be warm.

The archive lives in ``$XDG_CACHE_HOME/binrelay/jvm`` (``~/.cache``; dir 0700, file 0600),
named by a digest of what it depends on (the JVM, Spark's jars, the driver's options): a
JVM or Spark upgrade makes another.  The first run with no archive makes one as its JVM
exits (one maker at a time); the JVM writes it under a temporary name, with a file naming
its pid beside it, and a later start moves it into place once that pid is gone.  A JVM
killed while writing leaves an archive without its header (written last), which a JVM
would ignore at every start; a truncated or corrupt one would crash it.  So the archive is
mapped with ``-Xshare:on`` (a JVM that cannot use it stops at once) and
``-XX:+VerifySharedSpaces`` (its checksums checked), and when the JVM does not start with
it, ``build_session`` deletes it and starts the JVM without one (the next run makes
another).  Nothing of this reaches the terminal; no cache dir (a
read-only home) means no archive.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: A temporary archive, its maker's pid file beside it, whose pid is gone but which never
#: became whole (the maker died before its JVM started, or the JVM before it wrote one) is
#: removed after this long.
_STALE = 24 * 3600.0


@dataclass(frozen=True)
class ArchiveUse:
    """What one JVM start does with the archive: the options it adds, the archive it maps
    (dropped if the start fails) or the temporary one it makes at exit (its pid file to
    write once the JVM's pid is known)."""

    options: str = ""
    mapped: Path | None = None
    making: Path | None = None

    def started(self, jvm_pid: int) -> None:
        """The JVM making an archive is up: its pid, for the start that moves the archive
        into place once the JVM is gone."""
        if self.making is not None:
            _write_private(_pid_file(self.making), _identity(jvm_pid))

    def failed(self) -> None:
        """The JVM did not start with these options, and did without them: delete the
        archive it mapped (the next run makes a new one), or forget the one it was to
        make."""
        if self.making is not None:
            with contextlib.suppress(OSError):
                _pid_file(self.making).unlink()
        if self.mapped is not None:
            log.debug("the JVM did not start with its class archive: deleting it",
                      extra={"archive": str(self.mapped)})
            with contextlib.suppress(OSError):
                self.mapped.unlink()


def cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/binrelay/jvm`` (``~/.cache`` by default), made 0700; None when it
    cannot be made."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        base.mkdir(parents=True, exist_ok=True)
        path = base / "binrelay" / "jvm"
        for level in (path.parent, path):
            level.mkdir(exist_ok=True, mode=0o700)
            os.chmod(level, 0o700)
    except (OSError, RuntimeError) as exc:  # (RuntimeError: no home directory)
        log.debug("no cache dir for the JVM's class archive", extra={"error": str(exc)})
        return None
    if any(c in str(path) for c in _UNQUOTABLE):
        return None
    return path


#: Environment that adds to the driver JVM's class path (``bin/spark-class``), and so to
#: what an archive must match.
_CLASS_PATH_ENV = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
                   "SPARK_DIST_CLASSPATH")
#: Characters Spark's splitting of extraJavaOptions (or the JVM's ``%p`` in -XX:ErrorFile)
#: would take apart: a cache dir holding one gets no archive.
_UNQUOTABLE = ("'", '"', "\\", "%")
#: An archive of another key (another JVM, Spark or option set) not used for this long is
#: deleted by a start that makes or maps one (each is ~130 MB).
_UNUSED = 7 * 24 * 3600.0


def archive_key(spark_home: Path, java: Path | None, java_options: str) -> str:
    """What the archive depends on, as a file name: the JVM binary, Spark's jars (name,
    size, modification time: the JVM checks the same), the environment that adds to the
    class path, the driver's options (and extra class path)."""
    digest = hashlib.blake2b(digest_size=10)
    for name in _CLASS_PATH_ENV:
        digest.update(f"{name}={os.environ.get(name, '')}\n".encode())
    for path in [java, *sorted((spark_home / "jars").glob("*.jar"))]:
        if path is None:
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    digest.update(java_options.encode())
    return digest.hexdigest()


def java_binary() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found else None


def archive_use(spark_home: Path, java_options: str, *, directory: Path | None = None,
                token: str | None = None, make: bool = True) -> ArchiveUse:
    """The archive options for the next driver JVM: map the archive if there is one (after
    moving a finished one into place), else make one at exit unless another JVM is making
    it."""
    directory = directory or cache_dir()
    if directory is None:
        return ArchiveUse()
    key = archive_key(spark_home, java_binary(), java_options)
    final = directory / f"{key}.jsa"
    try:
        _settle(directory, key, final)
        _tidy(directory, key)
        if final.is_file():
            os.utime(final)  # (in use: see _tidy)
            # -Xshare:on: an archive the JVM cannot use stops it (and is replaced) rather
            # than being ignored at every start.
            return ArchiveUse(f"{_option('-XX:SharedArchiveFile=', final)}"
                              " -Xshare:on -XX:+VerifySharedSpaces"
                              f" {_option('-XX:ErrorFile=', directory / 'hs_err_%p.log')}",
                              mapped=final)
        if not make or being_made(directory, key):
            return ArchiveUse()
        making = directory / f"{key}.{token or f'{os.getpid()}-{time.time_ns()}'}.part"
        # The maker's own pid until its JVM's is known: a start meanwhile leaves it be.
        _write_private(_pid_file(making), _identity(os.getpid()))
    except OSError as exc:
        log.debug("the JVM's class archive is not used", extra={"error": str(exc)})
        return ArchiveUse()
    return ArchiveUse(_option("-XX:ArchiveClassesAtExit=", making), making=making)


def _option(name: str, path: Path) -> str:
    # Spark splits extraJavaOptions like a shell would: quote a path with blanks (one with
    # quotes, backslashes or % gets no archive: cache_dir).
    text = f"{name}{path}"
    return f"'{text}'" if " " in text else text


def key_options(conf: dict[str, str]) -> str:
    """What of a session's configuration the archive depends on: the driver's JVM options
    and extra class path."""
    return (f"{conf.get('spark.driver.extraJavaOptions', '')}\0"
            f"{conf.get('spark.driver.extraClassPath', '')}")


def _settle(directory: Path, key: str, final: Path) -> None:
    """Move a finished temporary archive into place (its JVM gone), and drop the ones
    that never will be."""
    for pid_file in directory.glob(f"{key}.*.pid"):
        part = pid_file.with_suffix(".part")
        if _running(pid_file):
            continue
        if part.is_file() and part.stat().st_size > 0 and not final.exists():
            os.chmod(part, 0o600)
            os.replace(part, final)
            log.debug("the JVM's class archive is ready", extra={"archive": str(final)})
        elif part.exists():
            part.unlink()  # empty, or one is in place already
        elif time.time() - pid_file.stat().st_mtime < _STALE:
            continue  # its JVM may be gone before it wrote anything: kept a while
        pid_file.unlink()


def _tidy(directory: Path, key: str) -> None:
    """Archives of other keys unused for a week go; the JVM's crash reports (of a start
    with an archive it could not map) are made private."""
    now = time.time()
    for other in directory.glob("*.jsa"):
        if not other.name.startswith(key) and now - other.stat().st_mtime > _UNUSED:
            other.unlink()
    for report in directory.glob("hs_err_*.log"):
        os.chmod(report, 0o600)


def being_made(directory: Path, key: str) -> bool:
    """Whether a JVM (or the process starting one) is making this key's archive."""
    return any(_running(pid_file) for pid_file in directory.glob(f"{key}.*.pid"))


def _identity(pid: int) -> str:
    """A process as its pid and start time (``/proc/<pid>/stat``): a pid reused by another
    process does not pass for it."""
    return f"{pid} {_start_time(pid) or ''}".strip()


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _running(pid_file: Path) -> bool:
    try:
        fields = pid_file.read_text().split()
        pid = int(fields[0])
    except (OSError, ValueError, IndexError):
        return False
    if len(fields) > 1:
        return _start_time(pid) == fields[1]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_file(part: Path) -> Path:
    return part.with_suffix(".pid")


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
