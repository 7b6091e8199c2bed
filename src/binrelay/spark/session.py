"""A SparkSession bound to loopback, with the ``relaylog`` source registered.

Spark binds its driver and block manager to the machine's external address by default;
binrelay keeps every server it starts on 127.0.0.1 unless told otherwise, so the driver,
block manager and (in tests) the UI-less session all bind to loopback, and executors run the
venv's own Python.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_env(local_ip: str = LOOPBACK) -> None:
    """Environment every Spark process of ours needs (set before the JVM starts)."""
    os.environ.setdefault("SPARK_LOCAL_IP", local_ip)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def build_session(master: str = "local[*]", *, app_name: str = "binrelay",
                  ui: bool = False, conf: dict[str, Any] | None = None,
                  driver_host: str = LOOPBACK) -> SparkSession:
    """``driver_host``: what the driver (and its block manager) binds and tells executors
    to connect to; loopback unless executors run on other machines."""
    spark_env(driver_host)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.bindAddress", driver_host)
               .config("spark.driver.host", driver_host)
               .config("spark.ui.enabled", "true" if ui else "false")
               .config("spark.ui.host", LOOPBACK)
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true")
               # Over TCP, a task's input waits out the worker's delayed ACK: 40 ms of
               # every task, measured, whatever its size (most of a streaming batch's
               # latency when batches are small).  A Unix socket has no such wait.
               .config("spark.python.unix.domain.socket.enabled", "true")
               # Spark draws its stage bars on stderr even when it is not a terminal.
               .config("spark.ui.showConsoleProgress", "false")
               # The driver JVM only moves pickled bytes here (Python does the work):
               # C1-only JIT and the serial collector start it ~1.4 s sooner (measured on
               # 2 cores: 5.5 vs 6.9 s) at no cost the sync can see.
               .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    from binrelay.spark.source import RelayLogDataSource

    spark.dataSource.register(RelayLogDataSource)
