"""A cap on connections and a deadline for request headers, in front of aiohttp.

aiohttp bounds what one request may send (header sizes, `request_bytes_max`)
and closes idle keep-alive connections (`[http] keepalive_timeout_ms`), but it
neither caps connections nor bounds the time a request's headers may take: a
client that opens thousands of connections, or sends its headers a byte a
second (slowloris), holds descriptors and memory as long as it likes. The
guard wraps the protocol of every accepted connection and adds both:

- **Caps**, counted when a connection is accepted, before anything is read:
  at most `connections_per_ip_max` from one remote address and
  `connections_max` in all. A connection over either is answered
  `503 CONNECTIONS_LIMIT_REACHED` (JSON, `Connection: close`) and closed at
  once, without reading; a client that had already sent its request may see
  a reset instead of the answer.
- **Header deadline**: a connection must complete the headers of its first
  request within `header_read_timeout_ms` of being accepted, and those of
  each later request within `header_read_timeout_ms` of that request's first
  byte (the keep-alive timeout governs the quiet time in between). Otherwise
  it is closed without an answer.

Node-to-node traffic (replica fetches, controller calls, forwarded produces
and group calls) comes to this same port, and a connection is counted before
any request says who sends it, so peers cannot be told apart when the caps
apply. The per-address cap is what keeps them from being starved: one host --
or the proxy or NAT gateway all outside clients come through -- holds at most
`connections_per_ip_max`, and the rest of `connections_max` stays for the
peers, which dial from addresses of their own. A peer holds at most about
`forward_connections_max` + a few connections (replication, controller calls,
heartbeats, streams). A flood from many addresses at once has to be stopped in
front of the node (firewall, load balancer), as it would be for Kafka.

With `[tls]` on, the guard also runs each connection's TLS handshake
(`loop.start_tls`, the standard library's `ssl`), so a connection is counted
from the moment it is accepted, handshake included, and a connection over a
cap is closed without one (no answer: the client has not yet agreed on keys).
The handshake must finish within `[http] tls_handshake_timeout_ms` of the
accept; a connection that fails it (plain HTTP sent to the TLS port, a client
certificate the CA did not sign, a client that stalls) is closed and logged as
the client fault `tls-handshake`. The header deadline starts once the
handshake is done. uvloop starts reading an accepted connection right after
`connection_made` whatever that paused, so the first bytes of the handshake
may reach the guard before `start_tls` takes the transport: they are kept and
handed to the TLS protocol once it is in place, before it reads again.

Headers are complete when aiohttp hands the request to the application: the
guard's middleware, the outermost, marks that. Bytes that arrive while a
request is handled, or while the last request's body is still arriving, are
body or pipelined requests and start no deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.streams import StreamReader

from lograft.api.client_faults import (
    CONNECTIONS_LIMIT,
    HEADER_TIMEOUT,
    TLS_HANDSHAKE,
    ClientFaultLog,
    describe,
)
from lograft.api.http_errors import raw_error_response
from lograft.errors import ConnectionsLimitReachedError

ProtocolFactory = Callable[[], asyncio.Protocol]


class ConnectionGuard:
    """Counts the node's client connections and owns their header deadlines."""

    def __init__(
        self,
        *,
        connections_max: int,
        connections_per_ip_max: int,
        header_read_timeout_ms: int,
        faults: ClientFaultLog,
        tls: ssl.SSLContext | None = None,
        tls_handshake_timeout_ms: int = 10_000,
    ) -> None:
        """`tls`: the server context each connection's handshake uses (None: plain HTTP)."""
        self.tls = tls
        self.tls_handshake_timeout_ms = tls_handshake_timeout_ms
        self.connections_max = connections_max
        self.connections_per_ip_max = min(connections_per_ip_max, connections_max)
        self.header_read_timeout_ms = header_read_timeout_ms
        self.faults = faults
        self._per_ip: dict[str, int] = {}
        self._by_transport: dict[asyncio.BaseTransport, _GuardedConnection] = {}
        # TLS handshakes under way (cancelled when the listener stops).
        self._handshakes: set[asyncio.Task[None]] = set()
        # The answers to a refused connection, built once: a flood costs no JSON.
        self._refuse_ip = raw_error_response(
            ConnectionsLimitReachedError(
                f"this address already holds {self.connections_per_ip_max} connections to "
                "this node (connections_per_ip_max); reuse one (keep-alive) or close some",
                connections_per_ip_max=self.connections_per_ip_max,
            )
        )
        self._refuse_node = raw_error_response(
            ConnectionsLimitReachedError(
                f"this node already holds {connections_max} connections (connections_max); "
                "retry later or use another node",
                connections_max=connections_max,
            )
        )
        # Observable (tests, and anyone debugging a flood).
        self.refused_total = 0
        self.header_timeouts_total = 0
        self.tls_handshake_failures_total = 0

    @property
    def open_connections(self) -> int:
        return len(self._by_transport)

    def connections_from(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)

    def protocol_factory(self, inner: ProtocolFactory) -> ProtocolFactory:
        """A factory for `loop.create_server`: `inner`'s protocols, guarded."""
        return lambda: _GuardedConnection(self, inner)

    def middleware(self) -> Any:
        """The outermost middleware: it tells a connection its request's headers are in."""

        @web.middleware
        async def request_started(request: web.Request, handler: Any) -> web.StreamResponse:
            conn = self.connection_of(request)
            if conn is None:
                return await handler(request)
            conn.request_started(request.content)
            try:
                return await handler(request)
            finally:
                conn.request_finished()

        return request_started

    def connection_of(self, request: web.Request) -> _GuardedConnection | None:
        """The guarded connection `request` came on (None: not one of ours)."""
        transport = request.transport
        return self._by_transport.get(transport) if transport is not None else None

    async def abort_handshakes(self) -> None:
        """Stop the TLS handshakes under way (the listener is stopping: aiohttp
        does not know these connections yet, so it cannot close them)."""
        tasks = list(self._handshakes)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- accounting (the connections call these) -------------------------------------

    def _admit(self, conn: _GuardedConnection, transport: asyncio.BaseTransport) -> bytes | None:
        """Count `conn` in, or return the answer that refuses it."""
        ip = conn.ip
        refusal = None
        if self._per_ip.get(ip, 0) >= self.connections_per_ip_max:
            refusal, limit = self._refuse_ip, "connections_per_ip_max"
        elif len(self._by_transport) >= self.connections_max:
            refusal, limit = self._refuse_node, "connections_max"
        if refusal is not None:
            self.refused_total += 1
            self.faults.event(CONNECTIONS_LIMIT, "refused a connection from %s (%s)", ip, limit)
            return refusal
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        self._by_transport[transport] = conn
        return None

    def _rekey(self, old: asyncio.BaseTransport, new: asyncio.BaseTransport) -> None:
        """The connection counted under `old` goes on as `new` (its TLS transport,
        the one aiohttp's requests name)."""
        conn = self._by_transport.pop(old, None)
        if conn is not None:
            self._by_transport[new] = conn

    def _release(self, conn: _GuardedConnection, transport: asyncio.BaseTransport) -> None:
        if self._by_transport.pop(transport, None) is None:
            return
        left = self._per_ip[conn.ip] - 1
        if left:
            self._per_ip[conn.ip] = left
        else:
            del self._per_ip[conn.ip]

    def _headers_late(self, conn: _GuardedConnection) -> None:
        self.header_timeouts_total += 1
        self.faults.event(
            HEADER_TIMEOUT,
            "closed a connection from %s: no complete request headers within %d ms "
            "(header_read_timeout_ms)",
            conn.ip,
            self.header_read_timeout_ms,
        )

    def _handshake_failed(self, conn: _GuardedConnection, exc: BaseException) -> None:
        self.tls_handshake_failures_total += 1
        self.faults.event(
            TLS_HANDSHAKE,
            "closed a connection from %s: no TLS handshake (plain HTTP to the TLS port, an "
            "untrusted certificate, or not within tls_handshake_timeout_ms=%d): %s",
            conn.ip,
            self.tls_handshake_timeout_ms,
            describe(exc),
        )


class _GuardedConnection(asyncio.Protocol):
    """One accepted connection: admits it, times its headers, and hands every
    event on to the wrapped protocol (aiohttp's RequestHandler), which writes
    to the transport directly."""

    def __init__(self, guard: ConnectionGuard, inner_factory: ProtocolFactory) -> None:
        self._guard = guard
        self._inner_factory = inner_factory
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self.ip = ""
        # The header deadline's timer, and when the headers it waits for
        # began (loop time; None: none awaited). The timer is not cancelled
        # when headers complete: it stays armed, and when it fires it checks
        # the request awaited then, re-arming for that request's own deadline.
        # So a keep-alive connection arms one timer per header_read_timeout_ms,
        # not one per request.
        self._deadline: asyncio.TimerHandle | None = None
        self._headers_since: float | None = None
        self._requests_in_progress = 0
        self._last_body: StreamReader | None = None
        # Set while the TLS handshake runs; what the client sends right after
        # it (in the read that completed it) waits here for the protocol.
        self._early: list[bytes] | None = None
        # Set until start_tls takes the transport: encrypted bytes read before
        # that (uvloop reads whatever connection_made paused), for the TLS protocol.
        self._raw: list[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)
        self.ip = _remote_ip(tcp)
        refusal = self._guard._admit(self, tcp)
        if refusal is not None:
            if self._guard.tls is None:
                tcp.write(refusal)  # a TLS client could not read it: closed without
            tcp.close()
            return
        self._transport = tcp
        if self._guard.tls is None:
            self._open(tcp)
            return
        # Nothing is read before start_tls takes the transport over (it
        # resumes reading itself).
        tcp.pause_reading()
        self._early = []
        self._raw = []
        task = asyncio.get_running_loop().create_task(self._handshake(tcp, self._guard.tls))
        self._guard._handshakes.add(task)
        task.add_done_callback(self._guard._handshakes.discard)

    async def _handshake(self, tcp: asyncio.Transport, context: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        starting = loop.create_task(
            loop.start_tls(
                tcp,
                self,
                context,
                server_side=True,
                ssl_handshake_timeout=self._guard.tls_handshake_timeout_ms / 1000,
            )
        )
        try:
            # One turn: start_tls's first step has swapped the transport's
            # protocol and queued the TLS protocol's connection_made and the
            # resumed reading; what was read before goes in right behind them,
            # in the same turn, so before anything read next.
            await asyncio.sleep(0)
            raw, self._raw = self._raw, None
            if raw and not starting.done():
                loop.call_soon(_feed, tcp, b"".join(raw))
            tls = await starting
        except (OSError, ssl.SSLError, TimeoutError, EOFError) as exc:
            # The client's doing (start_tls closed the transport).
            self._guard._handshake_failed(self, exc)
            self._handshake_over(tcp)
            return
        except BaseException:
            # Cancelled (the listener stops), or a fault of the node's own
            # (logged with its traceback by asyncio): uncounted either way.
            starting.cancel()
            self._handshake_over(tcp)
            raise
        if tls is None or self._transport is not tcp:
            self._handshake_over(tcp)  # lost while the handshake finished
            return
        self._guard._rekey(tcp, tls)
        self._transport = tls
        self._open(tls)

    def _handshake_over(self, tcp: asyncio.Transport) -> None:
        """A connection that never got past its handshake: closed and uncounted."""
        self._early = None
        self._raw = None
        if self._inner is None:
            self._guard._release(self, tcp)
            self._transport = None
            tcp.abort()

    def _open(self, transport: asyncio.Transport) -> None:
        """The connection is ready for HTTP: the wrapped protocol takes it."""
        early, self._early = self._early, None
        self._start_deadline()
        self._inner = self._inner_factory()
        self._inner.connection_made(transport)
        for data in early or ():
            self.data_received(data)

    def data_received(self, data: bytes) -> None:
        if self._raw is not None and self._transport is not None:
            # Encrypted, read before start_tls took the transport (uvloop).
            self._raw.append(data)
            self._transport.pause_reading()
            return
        if self._early is not None:
            self._early.append(data)  # decrypted before start_tls returned
            return
        if self._inner is None:
            return  # refused: closing
        if (
            self._headers_since is None
            and self._requests_in_progress == 0
            and (self._last_body is None or self._last_body.is_eof())
        ):
            self._start_deadline()  # the first byte of the next request
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_since = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        transport, self._transport = self._transport, None
        if transport is None:
            return  # refused: never counted
        self._guard._release(self, transport)
        if self._inner is not None:  # None: lost during the TLS handshake
            self._inner.connection_lost(exc)

    # -- the header deadline ------------------------------------------------------------

    def request_started(self, body: StreamReader) -> None:
        self._headers_since = None  # in time: the armed timer finds nothing awaited
        self._requests_in_progress += 1
        self._last_body = body

    def request_finished(self) -> None:
        self._requests_in_progress -= 1

    def _start_deadline(self) -> None:
        loop = asyncio.get_running_loop()
        # The clock, not loop.time(): uvloop reads its loop time once per loop
        # turn, and one turn of a flood accepts hundreds of connections, so a
        # deadline counted from it started before the accept it follows (by a
        # whole turn: hundreds of ms on a loaded machine). Both loops' times
        # are this clock (CLOCK_MONOTONIC), so call_at still fires at it.
        now = time.monotonic()
        self._headers_since = now
        if self._deadline is None:
            self._deadline = loop.call_at(now + self._timeout_s, self._on_deadline)

    @property
    def _timeout_s(self) -> float:
        return self._guard.header_read_timeout_ms / 1000

    def _on_deadline(self) -> None:
        self._deadline = None
        since = self._headers_since
        if since is None or self._requests_in_progress or self._transport is None:
            return  # no headers awaited now: the next request's first byte re-arms
        due = since + self._timeout_s
        loop = asyncio.get_running_loop()
        if due > loop.time():
            # Awaiting a later request's headers than the one this was armed for.
            self._deadline = loop.call_at(due, self._on_deadline)
            return
        self._headers_since = None
        self._guard._headers_late(self)
        self._transport.close()


def _feed(tcp: asyncio.Transport, data: bytes) -> None:
    """Hand `data` to the protocol start_tls put on `tcp` (the TLS protocol, a
    buffered protocol on both loops) as if it had just been read."""
    protocol = tcp.get_protocol()
    if tcp.is_closing():
        return
    if not hasattr(protocol, "get_buffer"):
        cast(asyncio.Protocol, protocol).data_received(data)
        return
    buffered = cast(asyncio.BufferedProtocol, protocol)
    view = memoryview(data)
    while view:
        buffer = memoryview(buffered.get_buffer(len(view)))
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        buffered.buffer_updated(n)
        view = view[n:]


def _remote_ip(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple | list) and peer:
        return str(peer[0])
    return str(peer or "")
