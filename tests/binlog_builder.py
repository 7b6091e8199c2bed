"""Build valid MariaDB 10.11 / MySQL 8.0 binlog events and files for tests, byte for byte.

The body helpers (``fde_body``, ``maria_gtid_body``, ...) produce exactly what the servers write;
``test_binlog_events.py`` checks them against a real MariaDB server's binlog.  ``BinlogBuilder``
strings events into a file, computing ``log_pos`` and CRC32, and records, independently of the
code under test, where every transaction ends and which GTID set is relayed at that point.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

MAGIC = b"\xfebin"
HEADER_LEN = 19

FDE, QUERY, STOP, ROTATE, INTVAR, USER_VAR, XID = 15, 2, 3, 4, 5, 14, 16
TABLE_MAP, WRITE_ROWS_V1, WRITE_ROWS = 19, 23, 30
GTID_LOG, ANONYMOUS_GTID, PREVIOUS_GTIDS, XA_PREPARE = 33, 34, 35, 38
ANNOTATE_ROWS, BINLOG_CHECKPOINT, MARIA_GTID, GTID_LIST = 160, 161, 162, 163

# MariaDB Gtid_log_event flags.
FL_STANDALONE, FL_GROUP_COMMIT_ID, FL_TRANSACTIONAL, FL_ALLOW_PARALLEL = 1, 2, 4, 8
FL_DDL, FL_PREPARED_XA, FL_COMPLETED_XA = 32, 64, 128

# Post-header lengths exactly as the servers write them in their FDE.  MariaDB 10.11 writes one
# per event type up to 171 (DELETE_ROWS_COMPRESSED); GTID (162) is 19, GTID_LIST (163) is 4.
MARIADB_10_11_POST_HEADERS = bytes.fromhex(
    "380d000800120004040404120000e400041a08000000080808020000000a0a0a0000000000000a0a0a"
    + "00" * 119
    + "041304000d0808080a0a0a"
)
MARIADB_10_11_VERSION = "10.11.19-MariaDB-0+deb12u1-log"
# MySQL 8.0.40 (41 types, up to TRANSACTION_PAYLOAD), from a real 8.0.40 binlog.
MYSQL_8_0_POST_HEADERS = bytes.fromhex(
    "000d0008000000000400040000006200041a08000000080808020000000a0a0a2a2a001234000a2800"
)
MYSQL_8_0_VERSION = "8.0.40"

assert len(MARIADB_10_11_POST_HEADERS) == 171 and MARIADB_10_11_POST_HEADERS[161] == 19
assert len(MYSQL_8_0_POST_HEADERS) == 41


# ----------------------------------------------------------------------------- single events


def event(event_type: int, body: bytes, *, log_pos: int, checksum: bool, server_id: int = 1,
          timestamp: int = 1_700_000_000, flags: int = 0) -> bytes:
    """One event: 19-byte header, ``body``, CRC32 when ``checksum``."""
    size = HEADER_LEN + len(body) + (4 if checksum else 0)
    raw = struct.pack("<IBIIIH", timestamp, event_type, server_id, size, log_pos, flags) + body
    return with_crc(raw) if checksum else raw


def with_crc(raw: bytes) -> bytes:
    return raw + struct.pack("<I", zlib.crc32(raw))


def fde_event(*, flavor: str, checksum: bool, log_pos: int | None = None, server_id: int = 1,
              timestamp: int = 1_700_000_000, create_timestamp: int | None = None,
              in_use: bool = False, server_version: str | None = None) -> bytes:
    """A FORMAT_DESCRIPTION_EVENT.  Its CRC is always written, and computed with the in-use
    flag clear, as both servers do (the flag is toggled in place when the file is closed)."""
    body = fde_body(flavor=flavor, checksum=checksum,
                    create_timestamp=timestamp if create_timestamp is None else create_timestamp,
                    server_version=server_version)
    size = HEADER_LEN + len(body) + 4
    if log_pos is None:
        log_pos = 4 + size  # the FDE sits right after the magic
    raw = struct.pack("<IBIIIH", timestamp, FDE, server_id, size, log_pos, 0) + body
    ev = bytearray(with_crc(raw))
    if in_use:
        ev[17] |= 1
    return bytes(ev)


def fde_body(*, flavor: str, checksum: bool, create_timestamp: int,
             server_version: str | None = None) -> bytes:
    if flavor == "mariadb":
        version, post_headers = MARIADB_10_11_VERSION, MARIADB_10_11_POST_HEADERS
    elif flavor == "mysql":
        version, post_headers = MYSQL_8_0_VERSION, MYSQL_8_0_POST_HEADERS
    else:
        raise ValueError(flavor)
    version = server_version or version
    return (struct.pack("<H", 4) + version.encode().ljust(50, b"\0")
            + struct.pack("<IB", create_timestamp, HEADER_LEN) + post_headers
            + bytes([1 if checksum else 0]))


def maria_gtid_body(seq_no: int, domain_id: int = 0, flags: int = FL_TRANSACTIONAL
                    | FL_ALLOW_PARALLEL, *, commit_id: int | None = None,
                    xid: tuple[int, bytes, bytes] | None = None, extra: bytes = b"") -> bytes:
    """seq u64, domain u32, flags u8, then commit id / XA xid / ``extra`` (flags_extra and
    what it announces), zero-padded to 19 bytes."""
    if commit_id is not None:
        flags |= FL_GROUP_COMMIT_ID
    body = struct.pack("<QIB", seq_no, domain_id, flags)
    if commit_id is not None:
        body += struct.pack("<Q", commit_id)
    if xid is not None:
        format_id, gtrid, bqual = xid
        body += struct.pack("<iBB", format_id, len(gtrid), len(bqual)) + gtrid + bqual
    return (body + extra).ljust(19, b"\0")


def gtid_list_body(triples: list[tuple[int, int, int]]) -> bytes:
    """count u32, then (domain u32, server_id u32, seq u64) each; MariaDB pads an empty list to
    6 bytes so that the event can be replaced by a dummy of the same size for old replicas."""
    body = struct.pack("<I", len(triples))
    body += b"".join(struct.pack("<IIQ", *t) for t in triples)
    return body.ljust(6, b"\0")


def checkpoint_body(name: str) -> bytes:
    return struct.pack("<I", len(name)) + name.encode()


def query_body(text: str | bytes, *, db: str = "", status_vars: bytes = b"", thread_id: int = 1,
               exec_time: int = 0, error_code: int = 0) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return (struct.pack("<IIBHH", thread_id, exec_time, len(db), error_code, len(status_vars))
            + status_vars + db.encode() + b"\0" + raw)


def xid_body(xid: int) -> bytes:
    return struct.pack("<Q", xid)


def rotate_body(next_file: str, position: int = 4) -> bytes:
    return struct.pack("<Q", position) + next_file.encode()


def xa_prepare_body(gtrid: bytes, bqual: bytes = b"", *, format_id: int = 1,
                    one_phase: bool = False) -> bytes:
    return struct.pack("<BiII", one_phase, format_id, len(gtrid), len(bqual)) + gtrid + bqual


def table_map_body(table_id: int, db: str = "app", table: str = "t") -> bytes:
    """A real TABLE_MAP for ``db.table(id INT NULL)``."""
    return (table_id.to_bytes(6, "little") + struct.pack("<H", 1)
            + bytes([len(db)]) + db.encode() + b"\0" + bytes([len(table)]) + table.encode() + b"\0"
            + b"\x01"  # one column
            + b"\x03"  # MYSQL_TYPE_LONG
            + b"\x00"  # no column metadata
            + b"\x01")  # the column is nullable


def write_rows_body(table_id: int, values: list[int], *, v2: bool = False) -> bytes:
    """WRITE_ROWS (v1, or v2 with empty extra data) of ``values`` into the table above."""
    head = table_id.to_bytes(6, "little") + struct.pack("<H", 1)  # STMT_END_F
    if v2:
        head += struct.pack("<H", 2)
    rows = b"".join(b"\x00" + struct.pack("<i", v) for v in values)
    return head + b"\x01" + b"\x01" + rows  # 1 column, all columns present


def mysql_gtid_body(uuid: str, gno: int, *, last_committed: int = 0, sequence_number: int = 1,
                    transaction_length: int = 0, v80: bool = True) -> bytes:
    """GTID_LOG_EVENT / ANONYMOUS_GTID_LOG_EVENT: 5.7 layout, plus the 8.0 commit timestamp,
    transaction length and server version when ``v80``."""
    body = (b"\x01" + bytes.fromhex(uuid.replace("-", "")) + struct.pack("<q", gno)
            + b"\x02" + struct.pack("<qq", last_committed, sequence_number))
    if v80:
        body += (1_700_000_000_000_000).to_bytes(7, "little")
        body += _packed_int(transaction_length)
        body += struct.pack("<I", 80040)
    return body


def _packed_int(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + struct.pack("<Q", n)


def previous_gtids_body(sids: dict[str, list[tuple[int, int]]]) -> bytes:
    """The SID block: n_sids u64, then per SID uuid, n_intervals u64, [start, end) u64 pairs."""
    out = struct.pack("<Q", len(sids))
    for uuid in sorted(sids):
        ivs = sids[uuid]
        out += bytes.fromhex(uuid.replace("-", "")) + struct.pack("<Q", len(ivs))
        out += b"".join(struct.pack("<QQ", a, b + 1) for a, b in ivs)
    return out


# ------------------------------------------------------------------------------- whole files


ANONYMOUS_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass
class Event:
    pos: int
    end: int
    event_type: int
    boundary: bool


@dataclass
class BinlogBuilder:
    """A binlog file under construction.

    Every high-level method appends whole event groups and marks which events end a
    transaction; ``gtid_at[end]`` is the GTID set text relayed once the file is read up to a
    transaction end, computed here without the project's GTID code.
    """

    flavor: str = "mariadb"
    checksum: bool = True
    server_id: int = 1
    timestamp: int = 1_700_000_000
    in_use: bool = False
    data: bytearray = field(default_factory=bytearray)
    events: list[Event] = field(default_factory=list)
    gtid_at: dict[int, str] = field(default_factory=dict)
    _maria: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    _mysql: dict[str, set[int]] = field(default_factory=dict)
    _next_seq: dict[int, int] = field(default_factory=dict)
    _table_id: int = 18

    def __post_init__(self) -> None:
        self.data += MAGIC
        fde = fde_event(flavor=self.flavor, checksum=self.checksum, server_id=self.server_id,
                        timestamp=self.timestamp, in_use=self.in_use)
        self._push(fde, FDE, boundary=True)

    # -- basics --------------------------------------------------------------------------------

    @property
    def pos(self) -> int:
        return len(self.data)

    @property
    def checksum_len(self) -> int:
        return 4 if self.checksum else 0

    @property
    def boundaries(self) -> list[int]:
        return [e.end for e in self.events if e.boundary]

    def bytes(self) -> bytes:
        return bytes(self.data)

    def gtid_text(self) -> str:
        """The GTID set once everything appended so far is relayed."""
        if self.flavor == "mariadb":
            return ",".join(f"{d}-{s}-{n}" for d, s, n in
                            (self._maria[k] for k in sorted(self._maria)))
        parts = []
        for uuid in sorted(self._mysql):
            gnos = sorted(self._mysql[uuid])
            runs: list[list[int]] = []
            for g in gnos:
                if runs and g == runs[-1][1] + 1:
                    runs[-1][1] = g
                else:
                    runs.append([g, g])
            parts.append(":".join([uuid] + [f"{a}-{b}" if b > a else str(a) for a, b in runs]))
        return ",".join(parts)

    def add(self, event_type: int, body: bytes, *, boundary: bool = False,
            flags: int = 0, server_id: int | None = None) -> bytes:
        """Append one raw event ending at its real position."""
        size = HEADER_LEN + len(body) + self.checksum_len
        ev = event(event_type, body, log_pos=self.pos + size, checksum=self.checksum,
                   server_id=self.server_id if server_id is None else server_id,
                   timestamp=self.timestamp, flags=flags)
        self._push(ev, event_type, boundary=boundary)
        return ev

    def _push(self, ev: bytes, event_type: int, *, boundary: bool) -> None:
        start = self.pos
        self.data += ev
        self.events.append(Event(start, self.pos, event_type, boundary))
        if boundary:
            self.gtid_at[self.pos] = self.gtid_text()

    def _seq(self, domain: int, seq_no: int | None) -> int:
        if seq_no is None:
            seq_no = self._next_seq.get(domain, 1)
        self._next_seq[domain] = seq_no + 1
        return seq_no

    def _commit_maria(self, domain: int, server_id: int, seq_no: int) -> None:
        self._maria[domain] = (domain, server_id, seq_no)

    def _commit_mysql(self, uuid: str, gno: int) -> None:
        self._mysql.setdefault(uuid, set()).add(gno)

    # -- file header events ----------------------------------------------------------------

    def gtid_list(self, triples: list[tuple[int, int, int]]) -> None:
        """MariaDB's binlog state at the file start; the last entry of a domain is its position."""
        for d, s, n in triples:
            self._commit_maria(d, s, n)
            self._next_seq[d] = max(self._next_seq.get(d, 1), n + 1)
        self.add(GTID_LIST, gtid_list_body(triples), boundary=True)

    def checkpoint(self, name: str = "mysql-bin.000001") -> None:
        self.add(BINLOG_CHECKPOINT, checkpoint_body(name), boundary=True)

    def previous_gtids(self, sids: dict[str, list[tuple[int, int]]]) -> None:
        for uuid, ivs in sids.items():
            for a, b in ivs:
                self._mysql.setdefault(uuid, set()).update(range(a, b + 1))
        self.add(PREVIOUS_GTIDS, previous_gtids_body(sids), boundary=True, flags=0x80)

    def header(self) -> BinlogBuilder:
        """What a server writes after the FDE of a fresh file."""
        if self.flavor == "mariadb":
            self.gtid_list([])
            self.checkpoint()
        else:
            self.previous_gtids({})
        return self

    def rotate(self, next_file: str = "mysql-bin.000002", position: int = 4) -> None:
        self.add(ROTATE, rotate_body(next_file, position), boundary=True)

    def stop(self) -> None:
        self.add(STOP, b"", boundary=True)

    # -- transactions ------------------------------------------------------------------------

    def _mysql_group(self, uuid: str | None, gno: int | None,
                     rest: list[tuple[int, bytes]]) -> None:
        rest_size = sum(HEADER_LEN + len(b) + self.checksum_len for _, b in rest)
        anonymous = uuid is None
        first_guess = mysql_gtid_body(ANONYMOUS_UUID if anonymous else uuid, gno or 0)
        gtid_size = HEADER_LEN + len(first_guess) + self.checksum_len
        length = gtid_size + rest_size
        body = mysql_gtid_body(ANONYMOUS_UUID if anonymous else uuid, gno or 0,
                               transaction_length=length)
        if len(body) != len(first_guess):  # the packed length grew: count it too
            body = mysql_gtid_body(ANONYMOUS_UUID if anonymous else uuid, gno or 0,
                                   transaction_length=length + len(body) - len(first_guess))
        self.add(ANONYMOUS_GTID if anonymous else GTID_LOG, body)
        for i, (etype, b) in enumerate(rest):
            last = i == len(rest) - 1
            if last and not anonymous:
                self._commit_mysql(uuid, gno)  # type: ignore[arg-type]
            self.add(etype, b, boundary=last, flags=8 if etype == QUERY else 0)

    def _rows(self, values: list[int]) -> list[tuple[int, bytes]]:
        tid = self._table_id
        if self.flavor == "mariadb":
            return [(TABLE_MAP, table_map_body(tid)), (WRITE_ROWS_V1, write_rows_body(tid, values))]
        return [(TABLE_MAP, table_map_body(tid)), (WRITE_ROWS, write_rows_body(tid, values,
                                                                                v2=True))]

    def ddl(self, text: str = "CREATE TABLE app.t (id INT)", *, domain: int = 0,
            seq_no: int | None = None, uuid: str | None = "3e11fa47-71ca-11e1-9e33-c80aa9429562",
            gno: int | None = None, server_id: int | None = None) -> None:
        """A statement that commits on its own (GTID + Query)."""
        q = query_body(text, db="app")
        if self.flavor == "mariadb":
            sid = self.server_id if server_id is None else server_id
            seq = self._seq(domain, seq_no)
            self.add(MARIA_GTID,
                     maria_gtid_body(seq, domain, FL_STANDALONE | FL_ALLOW_PARALLEL | FL_DDL),
                     flags=8, server_id=sid)
            self._commit_maria(domain, sid, seq)
            self.add(QUERY, q, boundary=True, server_id=sid)
        else:
            self._mysql_group(uuid, self._mysql_gno(uuid, gno), [(QUERY, q)])

    def trx(self, values: list[int] | None = None, *, statements: int = 1, domain: int = 0,
            seq_no: int | None = None, uuid: str | None = "3e11fa47-71ca-11e1-9e33-c80aa9429562",
            gno: int | None = None, xid: int = 7, server_id: int | None = None) -> None:
        """A transactional (InnoDB) transaction of row events ending in XID."""
        rows: list[tuple[int, bytes]] = []
        for i in range(statements):
            if self.flavor == "mariadb":
                rows.append((ANNOTATE_ROWS, f"INSERT INTO app.t VALUES ({i})".encode()))
            rows += self._rows(values or [i])
        if self.flavor == "mariadb":
            sid = self.server_id if server_id is None else server_id
            seq = self._seq(domain, seq_no)
            self.add(MARIA_GTID, maria_gtid_body(seq, domain), flags=8, server_id=sid)
            for etype, b in rows:
                self.add(etype, b, server_id=sid)
            self._commit_maria(domain, sid, seq)
            self.add(XID, xid_body(xid), boundary=True, server_id=sid)
        else:
            begin = (QUERY, query_body("BEGIN", db="app"))
            self._mysql_group(uuid, self._mysql_gno(uuid, gno),
                              [begin, *rows, (XID, xid_body(xid))])

    def nontrx(self, values: list[int] | None = None, *, domain: int = 0,
               seq_no: int | None = None) -> None:
        """MariaDB: a MyISAM change, whose group ends with a Query COMMIT instead of XID."""
        assert self.flavor == "mariadb"
        seq = self._seq(domain, seq_no)
        self.add(MARIA_GTID, maria_gtid_body(seq, domain, FL_ALLOW_PARALLEL), flags=8)
        for etype, b in self._rows(values or [1]):
            self.add(etype, b)
        self._commit_maria(domain, self.server_id, seq)
        self.add(QUERY, query_body("COMMIT", db="app"), boundary=True, flags=8)

    def _mysql_gno(self, uuid: str | None, gno: int | None) -> int | None:
        if uuid is None:
            return None
        if gno is None:
            gno = max(self._mysql.get(uuid, {0})) + 1
        return gno


# ----------------------------------------------------------------------------- reading files


def walk(data: bytes, start: int = 4) -> Iterator[tuple[int, bytes]]:
    """(offset, whole event) for each complete event from ``start``; stops at a torn tail."""
    pos = start
    while pos + HEADER_LEN <= len(data):
        size = struct.unpack_from("<I", data, pos + 9)[0]
        if size < HEADER_LEN or pos + size > len(data):
            return
        yield pos, data[pos : pos + size]
        pos += size


def query_text(ev: bytes, checksum_len: int) -> bytes:
    """The statement of a Query (2) or Execute_load_query (18) event."""
    db_len = ev[HEADER_LEN + 8]
    status_len = struct.unpack_from("<H", ev, HEADER_LEN + 11)[0]
    post_header = 13 + (13 if ev[4] == 18 else 0)
    start = HEADER_LEN + post_header + status_len + db_len + 1
    return ev[start : len(ev) - checksum_len]


# Events copied from binlogs of a real MariaDB 10.11.19 server (binlog_checksum=CRC32 unless
# named _NONE), so the fast tests need no server; test_binlog_events.py rebuilds them all.
REAL_MARIADB_10_11 = {name: bytes.fromhex(text) for name, text in {
    # FDE of a closed first file, and the same server with binlog_checksum=NONE.
    "fde": "18a0026b0f01000000fc000000000100000000040031302e31312e31392d4d6172696144422d302b6465"
           "62313275312d6c6f67000000000000000000000000000000000000000018a0026b13380d00080012000404"
           "0404120000e400041a08000000080808020000000a0a0a0000000000000a0a0a" + "00" * 119
           + "041304000d0808080a0a0a01ded572aa",
    "fde_none": "36a0026b0f01000000fc000000000100000000040031302e31312e31392d4d6172696144422d302b"
                "646562313275312d6c6f67000000000000000000000000000000000000000036a0026b13380d0008"
                "00120004040404120000e400041a08000000080808020000000a0a0a0000000000000a0a0a"
                + "00" * 119 + "041304000d0808080a0a0a002cf60c70",
    # FDE of the file being written (in-use flag set, CRC computed with the flag clear).
    "fde_in_use": "18a0026b0f01000000fc000000000100000100040031302e31312e31392d4d6172696144422d30"
                  "2b646562313275312d6c6f6700000000000000000000000000000000000000000000000013380d"
                  "000800120004040404120000e400041a08000000080808020000000a0a0a0000000000000a0a0a"
                  + "00" * 119 + "041304000d0808080a0a0a01903fa249",
    "gtid_list_empty": "18a0026ba3010000001d0000001d010000000000000000000020169606",
    # Binlog state 5-1-1,0-2-2,0-1-3: domain 0 has two server ids, its position (0-1-3) last.
    "gtid_list_3": "9aa0026ba3010000004b0000004b01000000000300000005000000010000000100000000000000"
                   "00000000020000000200000000000000000000000100000003000000000000003a6848b5",
    "checkpoint": "18a0026ba1010000002b000000480100000000100000006d7973716c2d62696e2e30303030303185"
                  "403d2d",
    # GTID 0-1-1 of a DDL (standalone|allow_parallel|ddl), zero-padded to 19 body bytes.
    "gtid_ddl": "18a0026ba2010000002a00000072010000080001000000000000000000000029000000000000a588"
                "32a4",
    # GTID 0-1-6 of XA PREPARE 'x2' (prepared_xa), carrying the xid.
    "gtid_xa": "18a0026ba2010000002e0000004505000008000600000000000000000000004c0100000002007832"
               "01ff786f02bf",
    "xa_prepare": "18a0026b2601000000260000005b0600000000000100000002000000000000007832c7bc81dc",
    # GTID 0-1-7 of XA COMMIT 'x2' (completed_xa|standalone).
    "gtid_xa_commit": "18a0026ba2010000002c0000008706000008000700000000000000000000008d01000000"
                      "020078327b367b58",
    # The Query COMMIT that ends a MyISAM group.
    "query_commit": "18a0026b02010000004500000017050000080009000000000000000000001a00000000000101"
                    "00002054000000000603737464042d002d00080000434f4d4d49542e2a6409",
    # "ROLLBACK TO `s1`" logged inside a transaction.
    "query_rollback_to": "6ba0026b02010000004f00000085050000080008000000000000000000001a0000000000"
                         "010100002054000000000603737464042d002d00080000524f4c4c4241434b20544f2060"
                         "733160fef78087",
    "rotate": "18a0026b04010000002f0000000c070000000004000000000000006d7973716c2d62696e2e30303030"
              "3032ba3e7909",
}.items()}
