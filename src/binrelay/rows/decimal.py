"""DECIMAL (MYSQL_TYPE_NEWDECIMAL) in the binlog's packed binary form.

Digits are stored in groups of nine per four bytes, big-endian; a leading and a trailing
partial group take fewer bytes.  The first bit is the sign (1 = positive) and a negative
number has every byte inverted — the fraction included, and leading zero groups of the
fraction must keep their zeros (the two classic bugs).
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


@lru_cache(maxsize=512)
def _layout(precision: int, scale: int) -> tuple[int, tuple[tuple[int, int, int], ...], int]:
    """(size, groups, int_bytes): groups are (offset, length, digits) in storage order."""
    intg = precision - scale
    intg0, intg0x = divmod(intg, 9)
    frac0, frac0x = divmod(scale, 9)
    groups: list[tuple[int, int, int]] = []
    pos = 0
    if intg0x:
        groups.append((pos, _DIG2BYTES[intg0x], intg0x))
        pos += _DIG2BYTES[intg0x]
    for _ in range(intg0):
        groups.append((pos, 4, 9))
        pos += 4
    int_bytes = pos
    for _ in range(frac0):
        groups.append((pos, 4, 9))
        pos += 4
    if frac0x:
        groups.append((pos, _DIG2BYTES[frac0x], frac0x))
        pos += _DIG2BYTES[frac0x]
    return pos, tuple(groups), int_bytes


def decimal_size(precision: int, scale: int) -> int:
    """Bytes a DECIMAL(precision, scale) value takes in a row image."""
    return _layout(precision, scale)[0]


def decode_decimal(data: bytes, precision: int, scale: int) -> Decimal:
    """The exact value, with exactly ``scale`` fractional digits (``Decimal('1.50')``)."""
    size, _groups, int_bytes = _layout(precision, scale)
    if len(data) < size:
        raise ValueError("DECIMAL value truncated")
    raw = int.from_bytes(data[:size], "big")
    negative = not raw >> (8 * size - 1)
    if negative:
        raw = ~raw & ((1 << (8 * size)) - 1)
    raw &= ~(1 << (8 * size - 1))
    frac_bytes = size - int_bytes
    int_raw = raw >> (8 * frac_bytes)
    frac_raw = raw & ((1 << (8 * frac_bytes)) - 1)
    intval = _digits(int_raw, int_bytes, precision - scale, leading=True)
    text = str(intval)
    if scale:
        fracval = _digits(frac_raw, frac_bytes, scale, leading=False)
        text += "." + str(fracval).zfill(scale)
    return Decimal("-" + text if negative else text)


def _digits(raw: int, nbytes: int, ndigits: int, *, leading: bool) -> int:
    """Turn the base-1e9 groups of ``raw`` (``nbytes`` big-endian bytes) into an integer."""
    if not nbytes:
        return 0
    full, part = divmod(ndigits, 9)
    part_bytes = _DIG2BYTES[part]
    value = 0
    if leading:
        # The partial group comes first in the integer part ...
        shift = 8 * (nbytes - part_bytes)
        if part:
            value = raw >> shift
            _check(value, part)
        for _ in range(full):
            shift -= 32
            group = (raw >> shift) & 0xFFFFFFFF
            _check(group, 9)
            value = value * 1_000_000_000 + group
        return value
    # ... and last in the fraction.
    shift = 8 * nbytes
    for _ in range(full):
        shift -= 32
        group = (raw >> shift) & 0xFFFFFFFF
        _check(group, 9)
        value = value * 1_000_000_000 + group
    if part:
        group = raw & ((1 << (8 * part_bytes)) - 1)
        _check(group, part)
        value = value * 10**part + group
    return value


def _check(group: int, digits: int) -> None:
    if group >= 10**digits:
        raise ValueError(f"DECIMAL digit group {group} has more than {digits} digits")
