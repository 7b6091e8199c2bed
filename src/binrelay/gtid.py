"""MySQL and MariaDB GTIDs and GTID sets: parsing, canonical text, set algebra, wire encoding.

Pure code: no I/O.  Every value is an immutable, hashable dataclass whose fields are kept in
canonical form, so ``==`` and ``hash`` compare meaning, not spelling.  Bad input of any kind
raises :class:`~binrelay.errors.GtidError` naming the offending text.

* :class:`MariaGtid` / :class:`MariaGtidSet` - a MariaDB GTID and a GTID *position* (at most
  one GTID per replication domain, like ``@@gtid_binlog_pos`` or ``@slave_connect_state``).
* :class:`MysqlGtidSet` - a MySQL GTID set, ``uuid[:tag]`` mapped to intervals of transaction
  numbers, with the binary SID block of PREVIOUS_GTIDS_LOG_EVENT and COM_BINLOG_DUMP_GTID.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby, pairwise
from typing import TypeAlias

from binrelay.errors import GtidError

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
# MySQL stores GNOs as signed 64-bit and reserves INT64_MAX as the exclusive end of the
# last interval, so that is one past the largest transaction number a server accepts.
MAX_GNO = 2**63 - 2
MAX_TAG_LENGTH = 32

#: One MySQL interval, first and last transaction number, both inclusive.
Interval: TypeAlias = tuple[int, int]
MysqlEntry: TypeAlias = tuple[str, str, tuple[Interval, ...]]

# Only ASCII whitespace: str.strip() and re's \s would also accept exotic Unicode spaces
# that no server would.
_WS = " \t\r\n\f\v"
_DIGITS = "[0-9]+"
_MARIA_GTID = re.compile(rf"({_DIGITS})-({_DIGITS})-({_DIGITS})")
_INTERVAL = re.compile(rf"({_DIGITS})[{_WS}]*(?:-[{_WS}]*({_DIGITS}))?")
# re.ASCII matters: with IGNORECASE alone, 'K' (Kelvin sign) and 'ſ' would match [a-z].
_TAG = re.compile(r"[a-z_][a-z0-9_]{0,31}", re.IGNORECASE | re.ASCII)
_UUID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}",
    re.IGNORECASE | re.ASCII,
)


class _Reject(Exception):
    """Why a piece of input is bad; the public entry point adds which input it was."""


def _quote(text: str, limit: int = 100) -> str:
    # Long inputs (a whole gtid_executed) would drown the reason in the message.
    if len(text) > limit:
        return repr(text[:limit]) + "..."
    return repr(text)


def _to_int(digits: str, high: int, what: str, low: int = 0) -> int:
    # Checking the length first keeps int() away from its 4300-digit limit (a ValueError).
    if len(digits.lstrip("0")) > 20 or not low <= int(digits) <= high:
        shown = digits if len(digits) <= 24 else digits[:20] + "..."
        raise _Reject(f"{what} {shown} is out of range ({low}..{high})")
    return int(digits)


def _check_int(value: object, high: int, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Reject(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise _Reject(f"{what} {value} is out of range ({low}..{high})")
    return value


def _norm_uuid(text: str) -> str:
    if not isinstance(text, str):
        raise _Reject(f"{text!r} is not a UUID")
    # MySQL also accepts the braced and the dash-less spellings; all print the same.
    bare = text[1:-1] if text.startswith("{") and text.endswith("}") else text
    if not _UUID.fullmatch(bare):
        raise _Reject(f"{text!r} is not a UUID")
    h = bare.replace("-", "").lower()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _norm_tag(text: str) -> str:
    if text == "":
        return ""
    if not isinstance(text, str) or not _TAG.fullmatch(text):
        raise _Reject(f"{text!r} is not a GTID tag ([a-z_][a-z0-9_]{{0,31}})")
    return text.lower()


def _merge(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    merged: list[Interval] = []
    for first, last in sorted(intervals):
        if merged and first <= merged[-1][1] + 1:
            if last > merged[-1][1]:
                merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
    return tuple(merged)


# ---------------------------------------------------------------------------------- MariaDB


@dataclass(frozen=True, slots=True)
class MariaGtid:
    """A MariaDB GTID ``domain-server-seq``."""

    domain_id: int
    server_id: int
    seq_no: int

    def __post_init__(self) -> None:
        try:
            _check_int(self.domain_id, U32_MAX, "domain id")
            _check_int(self.server_id, U32_MAX, "server id")
            _check_int(self.seq_no, U64_MAX, "sequence number")
        except _Reject as e:
            text = f"{self.domain_id}-{self.server_id}-{self.seq_no}"
            raise GtidError(f"bad GTID {_quote(text)}: {e}") from None

    @classmethod
    def parse(cls, text: str) -> MariaGtid:
        if not isinstance(text, str):
            raise GtidError(f"bad GTID {text!r}: expected a string")
        try:
            return _parse_maria(text.strip(_WS))
        except _Reject as e:
            raise GtidError(f"bad GTID {_quote(text)}: {e}") from None

    def __str__(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"


def _parse_maria(text: str) -> MariaGtid:
    m = _MARIA_GTID.fullmatch(text)
    if m is None:
        raise _Reject(f"{text!r} is not domain-server-seq")
    return MariaGtid(
        _to_int(m[1], U32_MAX, "domain id"),
        _to_int(m[2], U32_MAX, "server id"),
        _to_int(m[3], U64_MAX, "sequence number"),
    )


def _sorted_by_domain(gtids: Iterable[MariaGtid]) -> tuple[MariaGtid, ...]:
    ordered = tuple(sorted(gtids, key=lambda g: g.domain_id))
    for a, b in pairwise(ordered):
        if a.domain_id == b.domain_id:
            # MariaDB refuses such a position too (ER_DUPLICATE_GTID_DOMAIN): which of the
            # two is meant is ambiguous.
            raise _Reject(f"GTIDs {a} and {b} conflict (duplicate domain id {a.domain_id})")
    return ordered


@dataclass(frozen=True, slots=True, repr=False)
class MariaGtidSet:
    """A MariaDB GTID position: the last GTID of each domain, kept sorted by domain."""

    gtids: tuple[MariaGtid, ...] = ()
    _by_domain: dict[int, MariaGtid] = field(init=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        gtids = tuple(self.gtids)
        try:
            gtids = _sorted_by_domain(gtids)
        except _Reject as e:
            raise GtidError(f"bad GTID set {_quote(','.join(map(str, gtids)))}: {e}") from None
        object.__setattr__(self, "gtids", gtids)
        object.__setattr__(self, "_by_domain", {g.domain_id: g for g in gtids})

    @classmethod
    def parse(cls, text: str) -> MariaGtidSet:
        if not isinstance(text, str):
            raise GtidError(f"bad GTID set {text!r}: expected a string")
        if not text.strip(_WS):
            return cls()
        try:
            gtids = []
            for item in text.split(","):
                item = item.strip(_WS)
                if not item:
                    raise _Reject("empty element between commas")
                gtids.append(_parse_maria(item))
            return cls(_sorted_by_domain(gtids))
        except _Reject as e:
            raise GtidError(f"bad GTID set {_quote(text)}: {e}") from None

    def __str__(self) -> str:
        return ",".join(map(str, self.gtids))

    def __repr__(self) -> str:
        return f"MariaGtidSet({str(self)!r})"

    def __iter__(self) -> Iterator[MariaGtid]:
        return iter(self.gtids)

    def __bool__(self) -> bool:
        return bool(self.gtids)

    @property
    def is_empty(self) -> bool:
        return not self.gtids

    def gtid_for_domain(self, domain_id: int) -> MariaGtid | None:
        return self._by_domain.get(domain_id)

    def add(self, gtid: MariaGtid) -> MariaGtidSet:
        """The position after ``gtid`` was applied: it replaces its domain's entry."""
        by_domain = dict(self._by_domain)
        by_domain[gtid.domain_id] = gtid
        return MariaGtidSet(tuple(by_domain.values()))

    def union(self, other: MariaGtidSet) -> MariaGtidSet:
        """Per domain the GTID with the higher seq_no (``self``'s on a tie)."""
        by_domain = dict(self._by_domain)
        for g in other.gtids:
            mine = by_domain.get(g.domain_id)
            if mine is None or g.seq_no > mine.seq_no:
                by_domain[g.domain_id] = g
        return MariaGtidSet(tuple(by_domain.values()))

    def contains(self, gtid: MariaGtid) -> bool:
        # seq_no is monotonic per domain, whichever server wrote it, so server_id is not
        # part of the comparison (MariaDB compares positions the same way).
        mine = self._by_domain.get(gtid.domain_id)
        return mine is not None and gtid.seq_no <= mine.seq_no

    def issuperset(self, other: MariaGtidSet) -> bool:
        return all(self.contains(g) for g in other.gtids)


# ------------------------------------------------------------------------------------ MySQL


@dataclass(frozen=True, slots=True, repr=False)
class MysqlGtidSet:
    """A MySQL GTID set.

    ``entries`` is ``((uuid, tag, ((first, last), ...)), ...)``: lower-case dashed UUIDs,
    lower-case tags (``""`` = untagged), sorted by (uuid, tag), intervals inclusive, sorted,
    merged and never empty.  The constructor accepts any spelling and order and normalises.
    """

    entries: tuple[MysqlEntry, ...] = ()
    _index: dict[tuple[str, str], tuple[Interval, ...]] = field(
        init=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        grouped: dict[tuple[str, str], list[Interval]] = {}
        try:
            for uuid, tag, intervals in self.entries:
                key = (_norm_uuid(uuid), _norm_tag(tag))
                bucket = grouped.setdefault(key, [])
                for first, last in intervals:
                    _check_int(first, MAX_GNO, "transaction number", low=1)
                    _check_int(last, MAX_GNO, f"end of interval {first}-", low=first)
                    bucket.append((first, last))
        except (_Reject, TypeError, ValueError) as e:
            raise GtidError(f"bad GTID set entries: {e}") from None
        index = {key: _merge(ivs) for key, ivs in sorted(grouped.items()) if ivs}
        object.__setattr__(self, "entries", tuple((u, t, ivs) for (u, t), ivs in index.items()))
        object.__setattr__(self, "_index", index)

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        """Parse MySQL syntax: ``uuid:1-5:7[:tag:1-3],uuid2:...`` (empty text = empty set)."""
        if not isinstance(text, str):
            raise GtidError(f"bad GTID set {text!r}: expected a string")
        try:
            return cls(tuple(_parse_mysql(text)))
        except _Reject as e:
            raise GtidError(f"bad GTID set {_quote(text)}: {e}") from None

    def __str__(self) -> str:
        elements = []
        for uuid, group in groupby(self.entries, key=lambda e: e[0]):
            pieces = [uuid]
            for _, tag, intervals in group:  # untagged sorts first, as MySQL prints it
                if tag:
                    pieces.append(tag)
                pieces.extend(f"{a}-{b}" if b > a else str(a) for a, b in intervals)
            elements.append(":".join(pieces))
        return ",".join(elements)

    def __repr__(self) -> str:
        return f"MysqlGtidSet({str(self)!r})"

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def is_empty(self) -> bool:
        return not self.entries

    def intervals(self, uuid: str, tag: str = "") -> tuple[Interval, ...]:
        try:
            return self._index.get((_norm_uuid(uuid), _norm_tag(tag)), ())
        except _Reject as e:
            raise GtidError(f"bad GTID {_quote(f'{uuid}:{tag}' if tag else uuid)}: {e}") from None

    def add(self, uuid: str, gno: int, tag: str = "") -> MysqlGtidSet:
        return MysqlGtidSet((*self.entries, (uuid, tag, ((gno, gno),))))

    def union(self, other: MysqlGtidSet) -> MysqlGtidSet:
        return MysqlGtidSet(self.entries + other.entries)

    def contains(self, uuid: str, gno: int, tag: str = "") -> bool:
        return _covers(self.intervals(uuid, tag), gno, gno)

    def issuperset(self, other: MysqlGtidSet) -> bool:
        return all(
            _covers(self._index.get((uuid, tag), ()), first, last)
            for uuid, tag, intervals in other.entries
            for first, last in intervals
        )

    def encode(self) -> bytes:
        """The SID block of PREVIOUS_GTIDS_LOG_EVENT and COM_BINLOG_DUMP_GTID.

        Tag-free sets use the classic format every MySQL version reads; only a set that
        holds a tag needs the 8.4+ tagged format, which older servers refuse.
        """
        tagged = any(tag for _, tag, _ in self.entries)
        n = len(self.entries)
        # Tagged: the format byte goes in both the top and the bottom byte, so a pre-8.4
        # reader sees an absurd SID count and fails instead of misreading the tags.
        header = (1 << 56) | (n << 8) | 1 if tagged else n
        out = [header.to_bytes(8, "little")]
        for uuid, tag, intervals in self.entries:
            out.append(bytes.fromhex(uuid.replace("-", "")))
            if tagged:
                raw = tag.encode("ascii")
                # Length as a MySQL serialization varlen: one byte holding len << 1 suffices
                # because a tag is at most 32 characters.
                out.append(bytes([len(raw) << 1]) + raw)
            out.append(len(intervals).to_bytes(8, "little"))
            for first, last in intervals:
                out.append(first.to_bytes(8, "little") + (last + 1).to_bytes(8, "little"))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> MysqlGtidSet:
        """Inverse of :meth:`encode`; also reads the tagged format of MySQL 8.4+."""
        buf = memoryview(data).cast("B").tobytes()
        try:
            return cls(tuple(_decode_entries(_Reader(buf))))
        except _Reject as e:
            raise GtidError(f"bad GTID set encoding ({len(buf)} bytes): {e}") from None


def _covers(intervals: tuple[Interval, ...], first: int, last: int) -> bool:
    i = bisect_right(intervals, (first, U64_MAX)) - 1
    return i >= 0 and intervals[i][1] >= last


def _parse_mysql(text: str) -> Iterator[MysqlEntry]:
    for element in text.split(","):
        element = element.strip(_WS)
        if not element:
            continue  # MySQL skips empty elements ("a,,b", trailing comma) too
        head, *parts = (p.strip(_WS) for p in element.split(":"))
        uuid = _norm_uuid(head)
        if not parts:
            raise _Reject(f"no transaction numbers after {head}")
        # A tag applies to the intervals that follow it, up to the next tag.
        tag, intervals = "", []
        for part in parts:
            m = _INTERVAL.fullmatch(part)
            if m is not None:
                first = _to_int(m[1], MAX_GNO, "transaction number", low=1)
                last = first if m[2] is None else _to_int(m[2], MAX_GNO, "transaction number", 1)
                if last < first:
                    raise _Reject(f"interval {part} ends before it starts")
                intervals.append((first, last))
                continue
            if not _TAG.fullmatch(part):
                raise _Reject(f"{part!r} is neither an interval nor a tag")
            if tag and not intervals:
                raise _Reject(f"tag {tag!r} has no transaction numbers")
            yield uuid, tag, tuple(intervals)
            tag, intervals = part.lower(), []
        if not intervals:
            raise _Reject(f"tag {tag!r} has no transaction numbers")
        yield uuid, tag, tuple(intervals)


class _Reader:
    """Bounds-checked reads: running short is a _Reject, never an IndexError or struct.error."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n > self.remaining:
            raise _Reject(f"truncated at offset {self.pos}: {what} needs {n} bytes")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def u64(self, what: str) -> int:
        return int.from_bytes(self.take(8, what), "little")


def _decode_entries(r: _Reader) -> Iterator[MysqlEntry]:
    header = r.u64("SID count")
    fmt = header >> 56
    if fmt == 0:
        tagged, n_sids = False, header
    elif fmt == 1 and (header & 0xFF) == 1:
        tagged, n_sids = True, (header >> 8) & (2**48 - 1)
    else:
        raise _Reject(f"unknown or inconsistent format in header 0x{header:016x}")
    for i in range(n_sids):
        uuid = _norm_uuid(r.take(16, f"UUID of SID {i}").hex())
        tag = ""
        if tagged:
            length = r.take(1, f"tag length of SID {i}")[0]
            # An odd first byte starts a multi-byte varlen, i.e. a length of 128 or more.
            if length & 1 or length >> 1 > MAX_TAG_LENGTH:
                raise _Reject(f"tag of SID {i} is longer than {MAX_TAG_LENGTH} characters")
            tag = _norm_tag(r.take(length >> 1, f"tag of SID {i}").decode("latin-1"))
        count = r.u64(f"interval count of SID {i}")
        if count > r.remaining // 16:
            raise _Reject(f"SID {i} claims {count} intervals, only {r.remaining} bytes left")
        intervals, previous_end = [], 0
        for _ in range(count):
            start, end = r.u64("interval start"), r.u64("interval end")
            # The same rule as MySQL: ascending, non-adjacent, non-empty, GNOs from 1.
            if start <= previous_end or end <= start or end - 1 > MAX_GNO:
                raise _Reject(f"bad interval [{start}, {end}) for {uuid} after end {previous_end}")
            intervals.append((start, end - 1))
            previous_end = end
        yield uuid, tag, tuple(intervals)
    if r.remaining:
        raise _Reject(f"{r.remaining} trailing bytes after {n_sids} SIDs")


# --------------------------------------------------------------------------------- Flavours

GtidSet: TypeAlias = MariaGtidSet | MysqlGtidSet


def parse_gtid_set(text: str, flavor: str | None) -> GtidSet:
    """Parse ``text`` as a ``"mysql"`` or ``"mariadb"`` GTID set; ``None`` guesses.

    The guess relies on ':' appearing only in MySQL syntax; an empty set looks the same in
    both, so it cannot be guessed.
    """
    if not isinstance(text, str):
        raise GtidError(f"bad GTID set {text!r}: expected a string")
    if flavor is not None and not isinstance(flavor, str):
        raise GtidError(f"unknown server flavor {flavor!r} for GTID set {_quote(text)}")
    if flavor is None:
        if not text.strip(_WS):
            raise GtidError(
                f"bad GTID set {_quote(text)}: an empty set is valid for both MySQL and MariaDB",
                hint="set the server flavor (mysql or mariadb) explicitly",
            )
        flavor = "mysql" if ":" in text else "mariadb"
    if flavor.lower() == "mysql":
        return MysqlGtidSet.parse(text)
    if flavor.lower() == "mariadb":
        return MariaGtidSet.parse(text)
    raise GtidError(f"unknown server flavor {flavor!r} for GTID set {_quote(text)}",
                    hint="use 'mysql' or 'mariadb'")


def advance_gtid_set(text: str, gtids: Iterable[str]) -> str:
    """The GTID set ``text`` after the transactions ``gtids`` (in relay order) applied.

    The flavour is seen from the GTIDs themselves (``uuid:n`` or ``domain-server-seq``).
    """
    maria: dict[str, str] = {}  # domain -> its last GTID (each replaces the one before)
    mysql: dict[str, list[int]] = {}
    for gtid in gtids:
        if ":" in gtid:
            uuid, _, gno = gtid.rpartition(":")
            mysql.setdefault(uuid, []).append(int(gno))
        else:
            maria[gtid.partition("-")[0]] = gtid
    if not maria and not mysql:
        return text
    if maria:
        result: GtidSet = parse_gtid_set(text, "mariadb")
        for g in maria.values():
            result = result.add(MariaGtid.parse(g))  # type: ignore[union-attr, arg-type]
        return str(result)
    base = parse_gtid_set(text, "mysql")
    for uuid, gnos in mysql.items():
        gnos.sort()
        first = prev = gnos[0]
        for gno in gnos[1:]:
            if gno != prev + 1:
                base = base.union(MysqlGtidSet.parse(f"{uuid}:{first}-{prev}"))  # type: ignore
                first = gno
            prev = gno
        base = base.union(MysqlGtidSet.parse(f"{uuid}:{first}-{prev}"))  # type: ignore
    return str(base)
