"""Collation ids (as TABLE_MAP metadata gives them) to character sets, and how to decode each.

A character column's bytes are in the column's own character set; decoding them with anything
else (the connection's charset, utf-8 everywhere) is the classic charset bug.  Every decoder
here is lossless: bytes the charset cannot map come back as lone surrogates (U+DC80..U+DCFF,
Python's ``surrogateescape``), so ``text.encode(codec, "surrogateescape")`` restores them.
The UTF-16 and UTF-32 sets are the exception (:func:`wide_text`): a code unit that does not
decode cannot be escaped byte by byte, and MariaDB stores such units (a ``ucs2`` column
takes a lone surrogate, a ``utf32`` one U+D800), so such a value stays ``bytes``, which a
server stores back unchanged into a column of that charset.
Character sets without a decoder (only ``binary``) and unknown collation ids keep ``bytes``.
"""

from __future__ import annotations

import codecs
import functools
import re
from collections.abc import Callable
from functools import partial

from binrelay.rows._charmaps import TABLES as _SINGLE_BYTE_TABLES

BINARY_COLLATION = 63

# MariaDB 10.11's information_schema.COLLATIONS, grouped by character set, plus MySQL's own ids
# (gb18030 and utf8mb3_tolower_ci from 5.7/8.0, the utf8mb4_0900 family from 255 on).
_IDS: dict[str, tuple[int | tuple[int, int], ...]] = {
    "armscii8": (32, 64, 1056, 1088),
    "ascii": (11, 65, 1035, 1089),
    "big5": (1, 84, 1025, 1108),
    "binary": (63,),
    "cp1250": (26, 34, 44, 66, 99, 1050, 1090),
    "cp1251": (14, 23, (50, 52), (1074, 1075)),
    "cp1256": (57, 67, 1081, 1091),
    "cp1257": (29, (58, 59), (1082, 1083)),
    "cp850": (4, 80, 1028, 1104),
    "cp852": (40, 81, 1064, 1105),
    "cp866": (36, 68, 1060, 1092),
    "cp932": ((95, 96), (1119, 1120)),
    "dec8": (3, 69, 1027, 1093),
    "eucjpms": ((97, 98), (1121, 1122)),
    "euckr": (19, 85, 1043, 1109),
    "gb2312": (24, 86, 1048, 1110),
    "gb18030": ((248, 250),),
    "gbk": (28, 87, 1052, 1111),
    "geostd8": ((92, 93), (1116, 1117)),
    "greek": (25, 70, 1049, 1094),
    "hebrew": (16, 71, 1040, 1095),
    "hp8": (6, 72, 1030, 1096),
    "keybcs2": (37, 73, 1061, 1097),
    "koi8r": (7, 74, 1031, 1098),
    "koi8u": (22, 75, 1046, 1099),
    "latin1": (5, 8, 15, 31, (47, 49), 94, 1032, 1071),
    "latin2": (2, 9, 21, 27, 77, 1033, 1101),
    "latin5": (30, 78, 1054, 1102),
    "latin7": (20, (41, 42), 79, 1065, 1103),
    "macce": (38, 43, 1062, 1067),
    "macroman": (39, 53, 1063, 1077),
    "sjis": (13, 88, 1037, 1112),
    "swe7": (10, 82, 1034, 1106),
    "tis620": (18, 89, 1042, 1113),
    "ucs2": (35, 90, (128, 151), 159, (640, 642), 1059, 1114, 1152, 1174),
    "ujis": (12, 91, 1036, 1115),
    "utf16": ((54, 55), (101, 124), (672, 674), (1078, 1079), 1125, 1147),
    "utf16le": (56, 62, 1080, 1086),
    "utf32": ((60, 61), (160, 183), (736, 738), (1084, 1085), 1184, 1206),
    "utf8mb3": (33, 76, 83, (192, 215), 223, (576, 578), 1057, 1107, 1216, 1238),
    "utf8mb4": ((45, 46), (224, 247), (255, 323), (608, 610), (1069, 1070), 1248, 1270),
}

# MariaDB 10.10+ numbers its UCA 14.0 collations from 2048, the character set in bits 8..11
# (e.g. utf8mb4_uca1400_ai_ci is 2304).
_UCA1400_CHARSETS = {8: "utf8mb3", 9: "utf8mb4", 10: "ucs2", 11: "utf16", 12: "utf32"}

COLLATION_CHARSETS: dict[int, str] = {}
for _name, _entries in _IDS.items():
    for _entry in _entries:
        _lo, _hi = _entry if isinstance(_entry, tuple) else (_entry, _entry)
        for _id in range(_lo, _hi + 1):
            COLLATION_CHARSETS[_id] = _name

# Multi-byte character sets: Python's codec of the same name.  Single-byte ones use the
# server's own tables (_charmaps), which differ from Python's codecs in a few places (MySQL's
# latin1 is cp1252 with the five holes mapped to C1 controls, cp866 0xFC, koi8u 0x95, ...).
_PYTHON_CODECS = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "ucs2": "utf-16-be", "utf16": "utf-16-be",
    "utf16le": "utf-16-le", "utf32": "utf-32-be", "big5": "big5", "cp932": "cp932",
    "sjis": "shift_jis", "ujis": "euc_jp", "eucjpms": "euc_jp", "euckr": "euc_kr",
    "gb2312": "gb2312", "gbk": "gbk", "gb18030": "gb18030",
}

#: The multi-byte character sets whose values the rows decoder keeps as bytes: Python's
#: codecs of them are not the server's tables (``compiler._text_expr``).
MULTI_BYTE_KEPT = frozenset(name for name, codec in _PYTHON_CODECS.items()
                            if codec not in ("utf-8", "utf-16-be", "utf-16-le", "utf-32-be"))

#: The character sets that are text, not bytes (everything but ``binary``; values of
#: :data:`MULTI_BYTE_KEPT`, and some of the single-byte sets', stay bytes all the same).
TEXT_CHARSETS = frozenset(_PYTHON_CODECS) | frozenset(_SINGLE_BYTE_TABLES)


def charset_of(collation_id: int | None) -> str | None:
    """The character set name of a collation id, or None when the id is unknown."""
    if collation_id is None:
        return None
    name = COLLATION_CHARSETS.get(collation_id)
    if name is None and 2048 <= collation_id < 4096:
        name = _UCA1400_CHARSETS.get(collation_id >> 8)
    return name


#: Older names of character sets (MySQL 5.7 and MariaDB before 10.6 say ``utf8``).
_ALIASES = {"utf8": "utf8mb3"}

#: Bytes of a character at most and at least, per character set (the server's mbmaxlen,
#: mbminlen); a set not listed takes one byte per character.
MBMAXLEN = {"big5": 2, "cp932": 2, "sjis": 2, "ujis": 3, "eucjpms": 3, "euckr": 2,
            "gb2312": 2, "gbk": 2, "gb18030": 4, "ucs2": 2, "utf16": 4, "utf16le": 4,
            "utf32": 4, "utf8mb3": 3, "utf8mb4": 4}
MBMINLEN = {"ucs2": 2, "utf16": 2, "utf16le": 2, "utf32": 4}


def canonical_charset(name: str | None) -> str | None:
    """A character set's name as this module spells it (``utf8`` is ``utf8mb3``)."""
    return None if name is None else _ALIASES.get(name.lower(), name.lower())


def collation_of_charset(charset: str | None) -> int | None:
    """A collation id of ``charset`` (its first), for a column whose character set is known
    by name only (the downstream's catalog): what decoding needs is the set, not the
    collation.  None when the name is unknown."""
    if charset is None:
        return None
    entries = _IDS.get(canonical_charset(charset))
    if not entries:
        return None
    first = entries[0]
    return first[0] if isinstance(first, tuple) else first


Decoder = Callable[[bytes], str]


def _single_byte(table: str, data: bytes) -> str:
    return codecs.charmap_decode(data, "strict", table)[0]


def decoder_for(charset: str | None) -> Decoder | None:
    """A function bytes -> str for ``charset``; None means "keep the bytes" (binary, unknown)."""
    if charset is None or charset == "binary":
        return None
    codec = _PYTHON_CODECS.get(charset)
    if codec is not None:
        return partial(_decode_with, codec)
    table = _SINGLE_BYTE_TABLES.get(charset)
    if table is not None:
        return partial(_single_byte, table)
    return None


def _decode_with(codec: str, data: bytes) -> str:
    return data.decode(codec, "surrogateescape")


#: The codecs of the UTF-16 and UTF-32 character sets (see :func:`wide_text`).
WIDE_CODECS = frozenset({"utf-16-be", "utf-16-le", "utf-32-be"})


def wide_text(codec: str, data: bytes) -> str | bytes:
    """A UTF-16 or UTF-32 value as text, or its bytes when they are not valid in ``codec``
    (a lone surrogate, a unit past U+10FFFF, a cut unit): no error handler can keep those
    losslessly in a ``str`` that travels as UTF-8."""
    try:
        return data.decode(codec)
    except UnicodeDecodeError:
        return bytes(data)


@functools.cache
def lossy_bytes(table: str) -> re.Pattern[bytes] | None:
    """The bytes of a single-byte set that its text does not hold one to one: undefined
    in it (decoded to an escape surrogate, which no UTF-8 statement carries) or decoded
    to a character another byte decodes to as well (armscii8's 0xA5 and 0x28 are both
    ``(``).  A value with one of them stays bytes (:func:`exact_single_byte`)."""
    seen: dict[str, int] = {}
    lossy = set()
    for byte, char in enumerate(table):
        if 0xDC00 <= ord(char) <= 0xDCFF:
            lossy.add(byte)
        elif char in seen:
            lossy.update((byte, seen[char]))
        else:
            seen[char] = byte
    if not lossy:
        return None
    return re.compile(b"[" + b"".join(re.escape(bytes([b])) for b in sorted(lossy)) + b"]")


def always_text(charset: str | None) -> bool:
    """Whether every value of ``charset`` decodes to text (``str``): UTF-8, and the
    single-byte sets whose every byte is a character of its own.  Other sets' values, or
    some of them, stay bytes (:func:`lossy_bytes`, ``compiler._text_expr``)."""
    name = canonical_charset(charset)
    if name in ("utf8mb3", "utf8mb4"):
        return True
    table = _SINGLE_BYTE_TABLES.get(name or "")
    return table is not None and lossy_bytes(table) is None


def exact_single_byte(table: str, lossy: re.Pattern[bytes], data: bytes) -> str | bytes:
    """A value of a single-byte set as text, or its bytes when it holds a byte
    :func:`lossy_bytes` names."""
    if lossy.search(data) is not None:
        return bytes(data)
    return codecs.charmap_decode(data, "strict", table)[0]


def python_codec(charset: str | None) -> str | None:
    """The Python codec that decodes ``charset`` directly (multi-byte sets), else None."""
    return _PYTHON_CODECS.get(charset or "")


def single_byte_table(charset: str | None) -> str | None:
    return _SINGLE_BYTE_TABLES.get(charset or "")
