"""Dummy events that fill a hole so the next event lands at its upstream position.

The upstream may not send every event (GTID auto-position skips transactions, some servers
skip events a replica does not ask for).  TiDB DM's rule keeps relay offsets equal to upstream
offsets: fill the gap with one harmless event of exactly the gap's size.  A User_var event
(``SET @`!dummyvar...` = NULL``) fits small gaps, a Query event holding only a comment fits
the rest; both are ignored by every applier.
"""

from __future__ import annotations

import time

from binrelay.binlog import constants as c
from binrelay.binlog.build import event, query_body, user_var_null_body
from binrelay.errors import BinlogFormatError

_COMMENT = b"# dummy event written by binrelay to fill a hole in a relayed binlog file"
_USER_VAR_FIXED = c.EVENT_HEADER_LEN + 4 + 1  # header, name length, is_null
_QUERY_FIXED = c.EVENT_HEADER_LEN + 13 + 1  # header, post-header, db name terminator
_FLAGS = c.LOG_EVENT_SUPPRESS_USE_F | c.LOG_EVENT_RELAY_LOG_F


def min_dummy_size(checksum_len: int) -> int:
    return _USER_VAR_FIXED + 1 + checksum_len


def dummy_event(*, size: int, end_pos: int, server_id: int, checksum_len: int,
                timestamp: int | None = None) -> bytes:
    """One event of exactly ``size`` bytes ending at upstream position ``end_pos``."""
    if size < min_dummy_size(checksum_len):
        raise BinlogFormatError(
            f"a hole of {size} bytes before position {end_pos} is too small for a dummy event "
            f"(minimum {min_dummy_size(checksum_len)})",
            hint="the upstream sent events that do not line up with the relayed file; "
                 "move the relay dir away and relay again",
        )
    ts = int(time.time()) if timestamp is None else timestamp
    payload = size - checksum_len
    query_len = payload - _QUERY_FIXED
    if query_len >= 1:
        body = query_body((_COMMENT * (query_len // len(_COMMENT) + 1))[:query_len],
                          thread_id=0)
        event_type = c.QUERY_EVENT
    else:
        name_len = payload - _USER_VAR_FIXED
        body = user_var_null_body((b"!dummyvar" + b"_" * name_len)[:name_len])
        event_type = c.USER_VAR_EVENT
    raw = event(event_type, body, log_pos=end_pos, checksum=bool(checksum_len),
                server_id=server_id, timestamp=ts, flags=_FLAGS)
    if len(raw) != size:  # pragma: no cover - arithmetic guard
        raise AssertionError(f"dummy event is {len(raw)} bytes, wanted {size}")
    return raw
