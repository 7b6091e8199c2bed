"""DATE, TIME, DATETIME, TIMESTAMP and YEAR as the binlog stores them.

Python's ``date``/``datetime`` cannot hold what MySQL calls a date: the zero date
``0000-00-00``, partial dates (``2023-00-15``, ``2023-05-00``), year 0 and, under
``ALLOW_INVALID_DATES``, days a month does not have (``2023-02-31``).  Those come back as
:class:`MysqlDate` / :class:`MysqlDateTime`, plain calendar fields whose ``str`` is what the
server prints; every other value is a ``date``/``datetime``.  TIME is a ``timedelta`` (it is a
duration: negative, and up to 838:59:59.999999).  TIMESTAMP is an aware UTC ``datetime``;
its zero value (stored as 0 seconds) is ``MysqlDateTime(0, 0, 0)``.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

UTC = _dt.UTC
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_timedelta = _dt.timedelta


@dataclass(frozen=True, slots=True, order=True)
class MysqlDate:
    """A DATE that ``datetime.date`` cannot hold (zero, partial, year 0 or invalid day)."""

    year: int
    month: int
    day: int

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"

    isoformat = __str__


@dataclass(frozen=True, slots=True, order=True)
class MysqlDateTime:
    """A DATETIME/TIMESTAMP that ``datetime.datetime`` cannot hold (see :class:`MysqlDate`)."""

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0

    def __str__(self) -> str:
        text = (f"{self.year:04d}-{self.month:02d}-{self.day:02d} "
                f"{self.hour:02d}:{self.minute:02d}:{self.second:02d}")
        if self.microsecond:
            text += f".{self.microsecond:06d}"
        return text

    def isoformat(self, sep: str = "T") -> str:
        return str(self).replace(" ", sep, 1)


ZERO_DATETIME = MysqlDateTime(0, 0, 0)


def make_date(year: int, month: int, day: int) -> _dt.date | MysqlDate:
    try:
        return _dt.date(year, month, day)
    except ValueError:
        return MysqlDate(year, month, day)


def make_datetime(year: int, month: int, day: int, hour: int, minute: int, second: int,
                  micro: int) -> _dt.datetime | MysqlDateTime:
    try:
        return _dt.datetime(year, month, day, hour, minute, second, micro)
    except ValueError:
        return MysqlDateTime(year, month, day, hour, minute, second, micro)


# --- fractional seconds ------------------------------------------------------------------
#: Bytes of the fractional part for fsp 0..6, and the factor to microseconds of its value.
FRAC_BYTES = (0, 1, 1, 2, 2, 3, 3)
_FRAC_SCALE = {0: 0, 1: 10000, 2: 100, 3: 1}


# --- DATE (3 bytes little-endian: day 5 bits, month 4 bits, year 15 bits) -----------------

def date_from_int(v: int) -> _dt.date | MysqlDate:
    return make_date(v >> 9, (v >> 5) & 15, v & 31)


# --- DATETIME2 (5 bytes big-endian + fraction, offset 0x8000000000) -----------------------

def datetime2_from_parts(intpart: int, frac: int, frac_len: int) -> _dt.datetime | MysqlDateTime:
    v = intpart - 0x8000000000
    ym = (v >> 22) & 0x1FFFF
    micro = frac * _FRAC_SCALE[frac_len] if frac_len else 0
    return make_datetime(ym // 13, ym % 13, (v >> 17) & 31, (v >> 12) & 31, (v >> 6) & 63,
                         v & 63, micro)


def datetime2_from_bytes(data: bytes, frac_len: int) -> _dt.datetime | MysqlDateTime:
    frac = int.from_bytes(data[5:5 + frac_len], "big") if frac_len else 0
    return datetime2_from_parts(int.from_bytes(data[:5], "big"), frac, frac_len)


# --- TIMESTAMP2 (4 bytes big-endian seconds + fraction) ------------------------------------

def timestamp2_from_parts(seconds: int, frac: int, frac_len: int) -> _dt.datetime | MysqlDateTime:
    micro = frac * _FRAC_SCALE[frac_len] if frac_len else 0
    if seconds == 0 and micro == 0:
        return ZERO_DATETIME
    return _EPOCH + _timedelta(seconds=seconds, microseconds=micro)


def timestamp2_from_bytes(data: bytes, frac_len: int) -> _dt.datetime | MysqlDateTime:
    frac = int.from_bytes(data[4:4 + frac_len], "big") if frac_len else 0
    return timestamp2_from_parts(int.from_bytes(data[:4], "big"), frac, frac_len)


def timestamp_from_seconds(seconds: int) -> _dt.datetime | MysqlDateTime:
    """The pre-5.6 TIMESTAMP: 4 bytes little-endian seconds."""
    if seconds == 0:
        return ZERO_DATETIME
    return _EPOCH + _timedelta(seconds=seconds)


# --- TIME2 (3 bytes big-endian + fraction, the whole value offset-binary) ------------------

def time2_from_bytes(data: bytes, frac_len: int) -> _dt.timedelta:
    """TIME2: integer part and fraction form one big-endian offset-binary number.

    A negative time is the complement of the whole packed value, fraction included, so the
    sign must be taken from the whole number before splitting it (splitting first is the
    classic negative-fraction bug).
    """
    n = len(data)  # 3 + frac_len
    value = int.from_bytes(data, "big") - (0x800000 << (8 * (n - 3)))
    if value < 0:
        sign, value = -1, -value
    else:
        sign = 1
    bits = 8 * frac_len
    hms = value >> bits
    micro = (value & ((1 << bits) - 1)) * _FRAC_SCALE[frac_len] if frac_len else 0
    seconds = ((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)
    return _timedelta(seconds=sign * seconds, microseconds=sign * micro)


def time_from_int(v: int) -> _dt.timedelta:
    """The pre-5.6 TIME: 3 bytes little-endian signed, decimal digits HHMMSS."""
    sign = -1 if v < 0 else 1
    v = abs(v)
    if v // 100 % 100 > 59 or v % 100 > 59:
        raise ValueError(_not_old(v, "TIME"))
    return _timedelta(seconds=sign * ((v // 10000) * 3600 + (v // 100 % 100) * 60 + v % 100))


def _not_old(v: int, kind: str) -> str:
    # MariaDB 5.3-10.0's columns with fractional seconds log the old type code too, in a
    # layout of their own: read as the old one, their digits come out of range.
    return (f"{v} is no {kind} in the pre-5.6 format (a MariaDB 5.3-10.0 column with"
            " fractional seconds? ALTER TABLE ... FORCE upstream rewrites it)")


def datetime_from_int(v: int) -> _dt.datetime | MysqlDateTime:
    """The pre-5.6 DATETIME: 8 bytes little-endian, decimal digits YYYYMMDDhhmmss."""
    d, t = divmod(v, 1000000)
    if d > 99991231 or d // 100 % 100 > 12 or d % 100 > 31 or t // 10000 > 23 or \
            t // 100 % 100 > 59 or t % 100 > 59:
        raise ValueError(_not_old(v, "DATETIME"))
    return make_datetime(d // 10000, d // 100 % 100, d % 100, t // 10000, t // 100 % 100,
                         t % 100, 0)


def year_from_byte(v: int) -> int:
    """YEAR: one byte, 0 for the zero year, else year - 1900."""
    return 1900 + v if v else 0


# --- MySQL's text of a value ---------------------------------------------------------------

def time_text(value: _dt.timedelta, fsp: int = 6) -> str:
    """``[-]HH:MM:SS[.ffffff]`` as the server prints a TIME (hours may exceed 24)."""
    total = value.days * 86400_000000 + value.seconds * 1_000000 + value.microseconds
    sign = "-" if total < 0 else ""
    total = abs(total)
    seconds, micro = divmod(total, 1_000000)
    hours, rest = divmod(seconds, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    if fsp:
        text += "." + f"{micro:06d}"[:fsp]
    return text


def datetime_text(value: _dt.datetime | MysqlDateTime, fsp: int = 6) -> str:
    """``YYYY-MM-DD HH:MM:SS[.f]`` with exactly ``fsp`` fractional digits, as the server does.

    An aware value (a TIMESTAMP) is printed in UTC.
    """
    if isinstance(value, _dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(UTC)
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    if fsp:
        text += "." + f"{value.microsecond:06d}"[:fsp]
    return text


def date_text(value: _dt.date | MysqlDate) -> str:
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
