"""The relay unit: an upstream's binlog mirrored into a relay directory with DM's layout
(``server-uuid.index``, one subdir per upstream, ``relay.meta``), and everything that reads
such a directory whole: the chain check, readers, purge, recovery, status.

May import: binlog, upstream, config, errors, gtid, metrics, position, _speedups.
"""
