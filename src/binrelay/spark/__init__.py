"""The Spark side: the ``relaylog`` data source and the session it runs in.

Importing this package does not import pyspark; :func:`build_session` and :func:`register`
do.

May import: apply, relay, rows, binlog, config, errors, gtid, position, threadtimes.
"""

from binrelay.spark.session import build_session, register

__all__ = ["build_session", "register"]
