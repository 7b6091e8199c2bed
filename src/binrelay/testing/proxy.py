"""A TCP proxy on 127.0.0.1 whose live connections can be cut mid-stream (a network
fault: the soak's, and the relay tests').

    proxy = CutProxy(("127.0.0.1", 3306), name="upstream")   # listens on proxy.port
    proxy.cut()      # at the next bytes that pass: half of them forwarded, then both
                     # sockets of every live connection reset (RST, not FIN)
    proxy.cut_after(n)   # the connection carrying the n-th next byte from the target is
                         # reset right after it: inside an event, or a packet header
    proxy.close()

One asyncio loop in a daemon thread serves every connection.  A cut waits up to
``within`` seconds for bytes in flight, so that it lands inside a packet (inside an event
of a binlog dump, inside a batch's statements) rather than between two; with no traffic
in that time it cuts the idle connections.  ``SO_LINGER`` 0 makes ``close`` send a reset
at once, as a dropped NAT entry or a killed middlebox does; neither side gets a goodbye.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from dataclasses import dataclass

HOST = "127.0.0.1"
CHUNK = 65536
_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass
class CutResult:
    connections: int  #: live connection pairs reset
    mid_stream: bool  #: the cut fell inside bytes being forwarded (else: idle connections)


class _Pair:
    """A client connection and the proxy's connection to the target."""

    def __init__(self, writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        self.writers = writers
        self.closed = False

    def reset(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in self.writers:
            sock = w.get_extra_info("socket")
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            w.transport.abort()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for w in self.writers:
                w.transport.close()


class CutProxy:
    """Forwards every connection to ``target``; :meth:`cut` resets the live ones."""

    def __init__(self, target: tuple[str, int], *, name: str = "proxy") -> None:
        self.target = target
        self.name = name
        self.accepted = 0
        self.refused = 0  #: clients closed at once because the target did not answer
        self.bytes = 0
        self.cuts: list[CutResult] = []
        self._pairs: set[_Pair] = set()
        self._pending: asyncio.Future[CutResult] | None = None
        self._budget: int | None = None  #: bytes from the target until a cut_after cut
        self._budget_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True,
                                        name=f"proxy-{name}")
        self._thread.start()
        ready.wait()
        if self._server is None:
            raise RuntimeError(f"proxy {name}: could not listen on {HOST}")
        self.port = int(self._server.sockets[0].getsockname()[1])

    # ---------------------------------------------------------------- loop thread

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, HOST, 0))
        finally:
            ready.set()
        self._loop.run_forever()

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter
                     ) -> None:
        try:
            t_reader, t_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target), timeout=5)
        except (OSError, TimeoutError):
            self.refused += 1
            pair = _Pair((c_writer, c_writer))
            pair.reset()  # as a refused connection looks to the client: at once, no data
            return
        self.accepted += 1
        pair = _Pair((c_writer, t_writer))
        self._pairs.add(pair)
        try:
            await asyncio.gather(self._pump(pair, c_reader, t_writer),
                                 self._pump(pair, t_reader, c_writer, from_target=True))
        finally:
            self._pairs.discard(pair)
            pair.close()

    async def _pump(self, pair: _Pair, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter, *, from_target: bool = False) -> None:
        try:
            while not pair.closed:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if from_target and self._budget is not None:
                    with self._budget_lock:
                        budget, self._budget = self._budget, None
                        if budget is not None and len(data) < budget:
                            self._budget = budget - len(data)
                    if budget is not None and len(data) >= budget:
                        writer.write(data[:budget])
                        # All n bytes out before the reset, which drops what is buffered.
                        while writer.transport.get_write_buffer_size():
                            await asyncio.sleep(0.001)
                        pair.reset()
                        self.cuts.append(CutResult(1, mid_stream=True))
                        return
                if self._pending is not None and not self._pending.done():
                    # Cut inside what is passing: half of it reaches the other side.
                    writer.write(data[: max(1, len(data) // 2)])
                    self._pending.set_result(self._reset_all(mid_stream=True))
                    return
                self.bytes += len(data)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One direction ended (EOF or error): the connection is over both ways.
            pair.close()

    def _reset_all(self, *, mid_stream: bool) -> CutResult:
        pairs = [p for p in self._pairs if not p.closed]
        for p in pairs:
            p.reset()
        return CutResult(len(pairs), mid_stream)

    async def _cut(self, within: float) -> CutResult:
        self._pending = self._loop.create_future()
        try:
            return await asyncio.wait_for(asyncio.shield(self._pending), timeout=within)
        except TimeoutError:
            if self._pending.done():
                return self._pending.result()
            result = self._reset_all(mid_stream=False)
            self._pending.set_result(result)
            return result
        finally:
            self._pending = None

    # ---------------------------------------------------------------- any thread

    @property
    def live(self) -> int:
        return sum(1 for p in list(self._pairs) if not p.closed)

    def cut(self, within: float = 2.0) -> CutResult:
        """Reset every live connection, inside the next bytes forwarded if any pass
        within ``within`` seconds; returns what was cut."""
        result = asyncio.run_coroutine_threadsafe(self._cut(within), self._loop).result(
            timeout=within + 10)
        self.cuts.append(result)
        return result

    def cut_after(self, n: int) -> None:
        """Reset the connection that carries the ``n``-th next byte from the target, right
        after forwarding it (``n`` ≥ 1)."""
        with self._budget_lock:
            self._budget = n

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for p in list(self._pairs):
                p.reset()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self._loop.close()
