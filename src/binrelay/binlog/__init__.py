"""Binlog bytes: the one event model (``events``), bytes to events (``parse``), event
framing, the byte helpers, dummy events.

Pure: bytes in, values out.  Nothing here opens a file or a socket (``framing``'s reader
reads a file its caller opened).

May import: errors, gtid.
"""
