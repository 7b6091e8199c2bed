"""The replication client: one session with an upstream MySQL or MariaDB server and the
packet stream of its binlog dump.

May import: binlog, errors, gtid, sqlclient.
"""
