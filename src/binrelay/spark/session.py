"""A SparkSession bound to loopback, with the ``relaylog`` source registered.

Spark binds its driver and block manager to the machine's external address by default;
binrelay keeps every server it starts on 127.0.0.1 unless told otherwise, so the driver,
block manager and (in tests) the UI-less session all bind to loopback, and executors run the
venv's own Python.

Nothing Spark's JVM prints reaches the terminal: its stdout and stderr (the JVM launcher's
warnings, log4j, the Python workers' stderr, which the JVM copies to its own) go to the
binrelay log at debug level, logger ``binrelay.spark.jvm``; our log4j2 configuration
(``log4j2.properties`` next to this file) keeps Spark's part of it to warnings and errors.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import os
import re
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from binrelay.errors import SparkError
from binrelay.spark.jvm_archive import (
    ArchiveUse,
    archive_key,
    archive_use,
    being_made,
    cache_dir,
    java_binary,
    key_options,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"
#: log4j2 configuration of the driver and executor JVMs (see the file).
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_DRIVER_OPTIONS = "spark.driver.extraJavaOptions"

log = logging.getLogger(__name__)
jvm_log = logging.getLogger("binrelay.spark.jvm")
_TELLING = re.compile(r"error|exception|no such file|not found|cannot|could not",
                      re.IGNORECASE)


def spark_env(local_ip: str = LOOPBACK) -> None:
    """Environment every Spark process of ours needs (set before the JVM starts)."""
    os.environ.setdefault("SPARK_LOCAL_IP", local_ip)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _log4j_option() -> str:
    # Spark splits extraJavaOptions like a shell would: quote a path with blanks.
    path = str(LOG4J2_CONFIG)
    if " " in path:
        path = f"'{path}'"
    return f"-Dlog4j2.configurationFile={path}"


def _conf_text(value: Any) -> str:
    # As pyspark's builder writes values: Spark reads booleans in lower case only.
    return str(value).lower() if isinstance(value, bool) else str(value)


def session_conf(master: str, app_name: str, *, ui: bool = False,
                 driver_host: str = LOOPBACK) -> dict[str, str]:
    """The configuration ``build_session`` gives Spark, before the caller's ``conf``."""
    return {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.driver.bindAddress": driver_host,
        "spark.driver.host": driver_host,
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.host": LOOPBACK,
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.python.worker.reuse": "true",
        # PySpark's daemon, imported from the installed package's bytecode rather than
        # compiled again from Spark's zip by every daemon (spark/daemon.py).
        "spark.python.daemon.module": "binrelay.spark.daemon",
        # Over TCP, a task's input waits out the worker's delayed ACK: 40 ms of every task,
        # measured, whatever its size (most of a streaming batch's latency when batches are
        # small).  A Unix socket has no such wait.
        "spark.python.unix.domain.socket.enabled": "true",
        # Spark draws its stage bars on stderr even when it is not a terminal.
        "spark.ui.showConsoleProgress": "false",
        # The driver JVM only moves pickled bytes here (Python does the work): C1-only JIT
        # and the serial collector start it ~1.4 s sooner (measured on 2 cores: 5.5 vs
        # 6.9 s) at no cost the sync can see.  Our log4j2 file replaces Spark's default,
        # which prints a banner on stderr whatever the log level.  Executors keep Spark's
        # default: in local mode they are this JVM, and on a cluster they log (at info,
        # which is what one reads there) into their worker's directory, never to ours.
        "spark.driver.extraJavaOptions": f"{DRIVER_JAVA_OPTIONS} {_log4j_option()}",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # The driver keeps finished jobs, stages, tasks and SQL executions for the UI up to
        # these limits, UI on or off.  A sync runs several jobs per batch, batches every
        # fraction of a second, for weeks: Spark's defaults (1000 jobs and stages, 100,000
        # tasks) would hold megabytes of history nobody reads; a service needs the recent.
        "spark.ui.retainedJobs": "50",
        "spark.ui.retainedStages": "50",
        "spark.ui.retainedTasks": "1000",
        "spark.ui.retainedDeadExecutors": "10",
        "spark.sql.ui.retainedExecutions": "20",
        # Spark cleans a finished batch's shuffle files and metadata once the driver's
        # garbage collector has found them unreferenced, and by default forces that only
        # every 30 minutes; meanwhile garbage fills the old generation, whose every touched
        # page stays resident: a 30-minute soak's JVM grew 379 -> 608 MiB.  A full GC every
        # 3 minutes (the live heap is 60-70 MB) held it at 380 -> 435 MiB.
        "spark.cleaner.periodicGC.interval": "3min",
    }


class JvmOutput:
    """The driver JVM's stdout and stderr: each line to ``binrelay.spark.jvm`` at debug,
    the last few kept to explain a JVM that does not start."""

    def __init__(self, keep: int = 20) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self._muted = False
        # The JVM outlives us and talks while it stops; a daemon thread writing to a log
        # stream while the interpreter shuts down can abort it ("could not acquire lock"),
        # so from exit on its lines are read and dropped.
        atexit.register(self._mute)
        read_fd, self.write_fd = os.pipe()
        self._thread = threading.Thread(target=self._forward, args=(read_fd,),
                                        name="binrelay-spark-output", daemon=True)
        self._thread.start()

    def _forward(self, read_fd: int) -> None:
        # A daemon thread: the JVM writes until it exits, which is after we do.  Reading
        # must never stop early, or a full pipe would block the JVM's writes.
        with os.fdopen(read_fd, "rb") as stream:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip()
                if line and not self._muted:
                    self.tail.append(line)
                    jvm_log.debug(line)

    def _mute(self) -> None:
        self._muted = True

    def started(self) -> None:
        """The JVM holds the write end now (or never will): ours goes, so that the reader
        sees the end of the output when the JVM exits."""
        os.close(self.write_fd)

    def reason(self, wait: float = 5.0) -> str:
        """The line that best says why the JVM stopped: the first that names an error
        (a launcher script goes on to fail in ways that say less), else the last."""
        self._thread.join(wait)
        for line in self.tail:
            if _TELLING.search(line):
                return line
        return self.tail[-1] if self.tail else "it printed nothing"


def start_jvm(conf: dict[str, str]) -> None:
    """Start Spark's driver JVM with ``conf``, its output into our log, unless this process
    has one already (a session made before, stopped or not: pyspark keeps its JVM) or
    runs under ``spark-submit`` (which owns the JVM and its output).

    pyspark would start it itself on the first ``getOrCreate``, writing to our stderr; its
    ``launch_gateway`` takes ``popen_kwargs`` for exactly this, and a gateway handed to
    ``SparkContext._ensure_initialized`` is the one every later context uses.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    from pyspark.find_spark_home import _find_spark_home

    options = conf.get(_DRIVER_OPTIONS, "")
    try:
        archive = archive_use(Path(_find_spark_home()), key_options(conf))
    except Exception as exc:  # only an optimisation: never in the way of a start
        log.debug("the JVM's class archive is not used", extra={"error": str(exc)})
        archive = ArchiveUse()

    def launch(extra: str) -> Any:
        spark_conf = SparkConf()
        for key, value in conf.items():
            spark_conf.set(key, value)
        if extra:
            spark_conf.set(_DRIVER_OPTIONS, f"{options} {extra}".strip())
        output = JvmOutput()
        try:
            gateway = launch_gateway(spark_conf, popen_kwargs={
                "stdout": output.write_fd, "stderr": output.write_fd})
        except Exception as exc:
            output.started()
            raise SparkError(
                f"Spark's driver JVM did not start: {output.reason()}",
                hint="check that Java 17 is installed (java -version) or JAVA_HOME points"
                     ' at it; the JVM\'s whole output is in the log at log-level = "debug"'
            ) from exc
        output.started()
        return gateway

    try:
        gateway = launch(archive.options)
    except SparkError:
        if not archive.options:
            raise
        gateway = launch("")  # raises if the archive was not what stopped the JVM
        archive.failed()  # (a truncated or foreign archive stops the JVM at once)
    else:
        with contextlib.suppress(Exception):  # only the archive's making needs it
            archive.started(int(gateway.jvm.java.lang.ProcessHandle.current().pid()))
    SparkContext._ensure_initialized(gateway=gateway)


def build_session(master: str = "local[*]", *, app_name: str = "binrelay",
                  ui: bool = False, conf: dict[str, Any] | None = None,
                  driver_host: str = LOOPBACK) -> SparkSession:
    """``driver_host``: what the driver (and its block manager) binds and tells executors
    to connect to; loopback unless executors run on other machines."""
    spark_env(driver_host)
    from pyspark.sql import SparkSession

    settings = session_conf(master, app_name, ui=ui, driver_host=driver_host)
    settings.update({key: _conf_text(value) for key, value in (conf or {}).items()})
    start_jvm(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    from binrelay.spark.source import RelayLogDataSource

    spark.dataSource.register(RelayLogDataSource)


def make_archive(timeout: float = 120.0) -> Path | None:
    """Make the driver JVM's class archive now if there is none (``dev/setup``;
    ``jvm_archive``): a child process starts a session and runs a job, and its JVM writes
    the archive as it exits.  Returns the archive, or None when none could be made (never
    raises: it is only an optimisation)."""
    import subprocess
    import time

    try:
        from pyspark.find_spark_home import _find_spark_home

        directory = cache_dir()
        if directory is None:
            return None
        home = Path(_find_spark_home())
        options = key_options(session_conf("local[1]", "binrelay-archive"))
        key = archive_key(home, java_binary(), options)
        final = directory / f"{key}.jsa"
        archive_use(home, options, directory=directory, make=False)
        if final.is_file():
            return final
        # A job of each kind a sync runs (a read stage's shuffle, an apply stage reading
        # it): the archive holds the classes the maker's JVM loaded.
        code = ("from binrelay.spark.session import build_session\n"
                "s = build_session('local[1]', app_name='binrelay-archive')\n"
                "rdd = s.sparkContext.parallelize(range(64), 2).map(lambda x: (x % 4, x))\n"
                "rdd.partitionBy(2).mapPartitions(lambda it: [sum(v for _k, v in it)])"
                ".collect()\n"
                "s.stop()\n")
        subprocess.run([sys.executable, "-c", code], check=False, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            # Until its JVM, writing the archive as it exits, is gone.
            archive_use(home, options, directory=directory, make=False)
            if final.is_file() or not being_made(directory, key) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.5)
        return final if final.is_file() else None
    except Exception as exc:  # (a timeout, no JVM, no pyspark)
        log.debug("the JVM's class archive was not made", extra={"error": str(exc)})
        return None
