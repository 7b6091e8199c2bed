"""Binlog bytes: event framing, headers, the few event bodies the relay needs, dummy events.

Pure: bytes in, values out.  Nothing here opens a file or a socket.

May import: errors, gtid.
"""
