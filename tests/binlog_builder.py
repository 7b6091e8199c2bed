"""Build valid MariaDB 10.11 / MySQL 8.0 binlog files for tests, byte for byte.

The event encoders (``fde_body``, ``maria_gtid_body``, ...) are ``binrelay.binlog.build``'s,
which the relay's dummy events use too; ``test_binlog_events.py`` checks them against a real
MariaDB server's binlog.  ``BinlogBuilder``
strings events into a file, computing ``log_pos`` and CRC32, and records, independently of the
code under test, where every transaction ends and which GTID set is relayed at that point.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

# The encoders are the product's (binrelay.binlog.build), re-exported for the tests; what
# this module adds is stringing them into files and recording, independently of the code
# under test, where transactions end and which GTID set is relayed there.
from binrelay.binlog.build import (  # noqa: F401
    FL_ALLOW_PARALLEL,
    FL_COMPLETED_XA,
    FL_DDL,
    FL_GROUP_COMMIT_ID,
    FL_PREPARED_XA,
    FL_STANDALONE,
    FL_TRANSACTIONAL,
    MARIADB_10_11_POST_HEADERS,
    MARIADB_10_11_VERSION,
    MYSQL_8_0_POST_HEADERS,
    MYSQL_8_0_VERSION,
    checkpoint_body,
    event,
    fde_body,
    fde_event,
    gtid_list_body,
    maria_gtid_body,
    mysql_gtid_body,
    previous_gtids_body,
    query_body,
    rotate_body,
    table_map_body,
    with_crc,
    write_rows_body,
    xa_prepare_body,
    xid_body,
)

MAGIC = b"\xfebin"
HEADER_LEN = 19

FDE, QUERY, STOP, ROTATE, INTVAR, USER_VAR, XID = 15, 2, 3, 4, 5, 14, 16
TABLE_MAP, WRITE_ROWS_V1, WRITE_ROWS = 19, 23, 30
GTID_LOG, ANONYMOUS_GTID, PREVIOUS_GTIDS, XA_PREPARE = 33, 34, 35, 38
ANNOTATE_ROWS, BINLOG_CHECKPOINT, MARIA_GTID, GTID_LIST = 160, 161, 162, 163


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
               seq_no: int | None = None, end: str = "COMMIT") -> None:
        """MariaDB: a MyISAM change, whose group ends with a Query COMMIT instead of XID
        (``end``: or ROLLBACK, the group of a transaction that also changed an InnoDB
        table and was rolled back)."""
        assert self.flavor == "mariadb"
        seq = self._seq(domain, seq_no)
        self.add(MARIA_GTID, maria_gtid_body(seq, domain, FL_ALLOW_PARALLEL), flags=8)
        for etype, b in self._rows(values or [1]):
            self.add(etype, b)
        self._commit_maria(domain, self.server_id, seq)
        self.add(QUERY, query_body(end, db="app"), boundary=True, flags=8)

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
