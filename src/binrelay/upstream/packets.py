"""The binlog stream of a replication session: MySQL packets in, event bytes out.

After ``COM_BINLOG_DUMP`` the server sends one packet per event: a 0x00 byte followed by the
event, split into 16 MiB - 1 chunks when larger, an EOF packet when a non-blocking dump is
done, or an error packet.  PyMySQL handles the handshake; this reader takes the socket over
for the stream because per-packet objects would cost more than the relay's whole budget.

Packet framing lives here, in :meth:`EventStream.events`: partial packets, 16 MiB
continuations, error and EOF packets.  The relay takes most packets before they reach it, in
two specialisations of its commonest case only, a whole ``0x00 + event`` packet shorter than
:data:`MAX_PACKET`: ``relay.hotloop.take_run`` (runs of ordinary events; the Python
specification of the C loop) and ``RelayWriter.consume_packets`` (the event between two
runs).  Both write that one test inline (``end > n or length >= MAX_PACKET or marker != 0``:
leave it to ``events``), because they run per event on the hot path, and leave every other
packet to ``events``.
"""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Callable, Iterator

from binrelay.errors import (
    BinlogPurgedError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamTornBinlogError,
)

MAX_PACKET = 0xFFFFFF
_STOP_POLL = 0.2
_RECV_SIZE = 1 << 18
#: How long the stream must stay silent before it counts as idle (``on_idle``).  Without it,
#: every gap between two transactions of a steady 1000 tps upstream is "idle", and the relay
#: fsynced and rewrote relay.meta ~600 times a second (measured: 7 CPU-seconds in 30 s,
#: most of it in fsync); 2 ms leaves ~1 in 8 such gaps and delays the last transaction of a
#: burst by at most that much.  Once the socket is drained the stream sleeps this long and
#: then reads what came meanwhile, rather than waking for each packet: bytes a relay holds
#: are not the sync's before the next grouped fsync anyway, and a steady 2,000 tps upstream
#: woke the relay 2,000 times a second (its CPU 8.1 → 5.5-5.8 s a minute, BENCHMARKS.md
#: "Session 36").
IDLE_GRACE = 0.002

#: MySQL/MariaDB error codes on the dump stream.
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
ER_SLAVE_SAME_ID = 4070


class StopRequested(Exception):
    """The operator asked the relay to stop while it waited for the upstream."""


def parse_error_packet(payload: bytes) -> tuple[int, str]:
    code = struct.unpack_from("<H", payload, 1)[0] if len(payload) >= 3 else 0
    message = payload[3:]
    if message[:1] == b"#":
        message = message[6:]  # SQL state marker and 5-character state
    return code, message.decode("utf-8", "replace")


#: Where the server's reader of a torn binlog stopped: "... the last event read from
#: './mysql-bin.000038' at 176084, the last byte read from ..." (the event at ``pos`` is torn).
_TORN = re.compile(r"the last event read from '(?P<file>[^']+)' at (?P<pos>\d+)")


def error_from_packet(payload: bytes) -> UpstreamError:
    code, message = parse_error_packet(payload)
    text = f"upstream error {code}: {message}"
    if code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
        lowered = message.lower()
        if "purged" in lowered or "could not find" in lowered or "not find gtid" in lowered:
            return BinlogPurgedError(
                text,
                hint="the upstream no longer has the binlog the relay needs; set "
                     "relay-binlog-name or relay-binlog-gtid to a position it still has "
                     "(SHOW BINARY LOGS), with an empty relay dir",
            )
        torn = _TORN.search(message) if "truncated in the middle of event" in lowered else None
        if torn is not None:
            return UpstreamTornBinlogError(
                text, file=torn["file"].replace("\\", "/").rsplit("/", 1)[-1],
                pos=int(torn["pos"]),
                hint="that file ends inside an event, and the relay could not confirm it is"
                     " what a crash while writing leaves (a later file opened by the server's"
                     " restart: docs/relay.md); check it on the upstream with mariadb-binlog")
        err = UpstreamError(text)
        return err
    err = UpstreamConnectionError(text) if code in (ER_SLAVE_SAME_ID,) else UpstreamError(text)
    return err


class EventStream:
    """Iterate the events of a dump session as ``bytes``.

    ``on_idle`` is called whenever every byte received so far has been handed out and the next
    read would wait for the network: the relay uses that moment for its grouped fsync.
    ``timeout`` bounds the wait for the next bytes (heartbeats keep an idle session alive);
    when it passes, the session is considered dead.
    """

    def __init__(self, sock: socket.socket, *, timeout: float,
                 on_idle: Callable[[], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self._sock = sock
        self._timeout = timeout
        self._on_idle = on_idle
        self._should_stop = should_stop
        self.bytes_received = 0

    def _recv(self, want: int) -> bytes:
        sock = self._sock
        size = max(want, _RECV_SIZE)
        try:
            sock.settimeout(0.0)
            try:
                chunk = sock.recv(size)
            except (BlockingIOError, InterruptedError):
                chunk = self._recv_within(size, IDLE_GRACE)
                if chunk is None:
                    if self._on_idle is not None:
                        self._on_idle()
                    chunk = self._wait_recv(size)
        except OSError as exc:
            raise UpstreamConnectionError(f"connection to the upstream lost: {exc}") from exc
        if not chunk:
            raise UpstreamConnectionError("the upstream closed the replication connection")
        self.bytes_received += len(chunk)
        return chunk

    def _recv_within(self, size: int, seconds: float) -> bytes | None:
        """What came within ``seconds``, read after them (b"" at EOF), else None."""
        time.sleep(seconds)
        try:
            return self._sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return None

    def _wait_recv(self, size: int) -> bytes:
        """Block for the next bytes, in slices so that a stop request is seen quickly."""
        deadline = time.monotonic() + self._timeout
        while True:
            if self._should_stop is not None and self._should_stop():
                raise StopRequested
            left = deadline - time.monotonic()
            if left <= 0:
                raise UpstreamConnectionError(
                    f"no data from the upstream for {self._timeout:.0f} s (heartbeats lost)")
            self._sock.settimeout(min(left, _STOP_POLL))
            try:
                return self._sock.recv(size)
            except TimeoutError:
                continue

    def __iter__(self) -> Iterator[bytes]:
        return self.events()

    def events(self, consume: Callable[[bytes, int], int] | None = None) -> Iterator[bytes]:
        """Yield each event; ``consume`` may take runs of ordinary packets first.

        ``consume(data, pos)`` is offered the received bytes from ``pos`` on, takes as many
        whole ``0x00 + event`` packets as it likes and returns the position after the last one
        it took.  What it leaves (a partial packet, an error or EOF packet, a 16 MiB+ event, or
        an event it prefers to see alone) is yielded or handled here.  This lets the relay's hot
        loop run over a whole receive buffer without a generator step per event.
        """
        data = b""
        pos = 0
        recv = self._recv
        while True:
            if consume is not None and pos < len(data):
                pos = consume(data, pos)
            avail = len(data) - pos
            if avail < 4:
                data = data[pos:] + recv(4 - avail)
                pos = 0
                continue
            length = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            end = pos + 4 + length
            if end > len(data):
                data = data[pos:] + recv(end - len(data))
                pos = 0
                continue
            marker = data[pos + 4] if length else -1
            if length == MAX_PACKET:
                payload, data, pos = self._read_continued(data, pos)
            else:
                payload = None
            if marker == 0:
                if payload is None:
                    yield data[pos + 5 : end]
                    pos = end
                else:
                    yield payload[1:]
                continue
            if payload is None:
                payload = data[pos + 4 : end]
                pos = end
            if marker == 0xFF:
                raise error_from_packet(payload)
            if marker == 0xFE and len(payload) < 9:
                return  # EOF: a non-blocking dump reached the end of the binlog
            raise UpstreamError(f"unexpected packet on the binlog stream (first byte {marker})")

    def _read_continued(self, data: bytes, pos: int) -> tuple[bytes, bytes, int]:
        """A payload of 16 MiB or more comes in chunks; the last one is shorter than the max."""
        parts: list[bytes] = []
        while True:
            while len(data) - pos < 4:
                data = data[pos:] + self._recv(4)
                pos = 0
            length = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            end = pos + 4 + length
            while end > len(data):
                data = data[pos:] + self._recv(end - len(data))
                end -= pos
                pos = 0
            parts.append(data[pos + 4 : end])
            pos = end
            if length < MAX_PACKET:
                return b"".join(parts), data, pos
