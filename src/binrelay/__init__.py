"""binrelay: a relay log for MySQL-family replication, with its apply pipeline on Spark."""

__version__ = "0.1.0"
