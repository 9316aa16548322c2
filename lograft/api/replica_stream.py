"""Replica fetches over one WebSocket per follower and leader.

A follower sends a leader hundreds of fetches a second under load, one at a
time (one long-poll in flight per leader). As HTTP requests each cost the
leader ~235 us of CPU, more than half of it aiohttp's parse, routing, the
request pipeline and the answer's headers (docs/benchmarks.md, "CPU per
request"); as WebSocket messages on a connection kept open, an exchange costs
each side ~25 us of transport (docs/benchmarks.md, "Replica fetches over a
WebSocket"). The fetch itself is the same: the same `ReplicaFetchRequest`
JSON in, the same binary answer out (lograft/protocol/fetch_wire.py), served
by the same `ReplicaManager.replica_fetch`.

`GET /internal/v1/replica-fetch/stream` upgrades to a WebSocket. The upgrade
request passes the node's whole request pipeline (request_pipeline.py): the
cluster secret (an internal route), TLS, the connection caps and the
serving gate, as a `POST /internal/v1/replica-fetch` does. Then, one binary
message per fetch, each way:

- the follower's: an 8-byte big-endian request id, then the request's JSON;
- the leader's: the same id, a 2-byte big-endian HTTP status, then the body
  the POST route would have answered: the fetch answer (status 200), or the
  JSON error body of the error (`{"error": {...}}`) with its status.

The leader serves the messages of one connection one after the other, in
order (the follower never sends the next before the answer or before it
closes the connection), and re-checks the serving gate for each. What one
connection can cost it is bounded: no upgrade body (it would hold the
internal body budget for the stream's life: 400), a message of at most
`[http] request_bytes_max` (a larger one closes the connection with 1009),
one fetch at a time, a connection with no fetch for
`[http] keepalive_timeout_ms` is closed (1000 "idle"; pings do not count),
as an idle keep-alive HTTP connection is, and one that does not take an
answer within as long is dropped. A text message, or a binary one too short
for its id, closes it with 1003 / 1002. The node's shutdown closes every
stream (1001). However a stream ends, its connection is reset (TCP RST, the
unsent bytes dropped) if it has not closed within a second or still holds
bytes the follower has not taken: a follower that reads nothing (an answer,
or the pongs of its pings, in its socket) would otherwise keep the
connection and those bytes, and hold the node's shutdown. Each fetch
is timed and counted as a `POST /internal/v1/replica-fetch` in the request
metrics; the stream's own life is not timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time

from aiohttp import WSCloseCode, WSMsgType, web

from lograft.api.http_errors import render_error, status_for
from lograft.api.internal_paths import REPLICA_FETCH_PATH, REPLICA_STREAM_PATH
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.request_pipeline import PIPELINE_KEY
from lograft.api.serving_gate import ServingCheck
from lograft.brokers.broker_stats import BrokerStats
from lograft.brokers.remote_wait import RequestClock, reset_clock, use_clock
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import InvalidRequestError, LograftError
from lograft.protocol.fetch_wire import ReplicaFetchRequest, encode_answer

log = logging.getLogger(__name__)

# The follower's message: request id. The leader's: request id, HTTP status.
REQUEST_HEAD = struct.Struct(">Q")
ANSWER_HEAD = struct.Struct(">QH")
# How long the leader waits for a closing stream's close handshake, s.
_CLOSE_WAIT_S = 1.0
# SO_LINGER on, 0 s: close() resets the connection and drops unsent bytes.
_LINGER_RESET = struct.pack("ii", 1, 0)


class ReplicaStreams:
    """The open streams of one app, to close at its shutdown."""

    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        message_bytes_max: int,
        idle_timeout_s: float,
        stats: BrokerStats | None = None,
    ) -> None:
        """`stats`: where the streams open and the fetches answered are
        counted for the metrics (None: only in `served`)."""
        self.replicas = replicas
        self.message_bytes_max = message_bytes_max
        self.idle_timeout_s = idle_timeout_s
        self.stats = stats
        # Each open stream, with its connection (to abort one that will not close).
        self.open: dict[web.WebSocketResponse, asyncio.BaseTransport | None] = {}
        self.served = 0  # fetches answered over streams

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(REPLICA_STREAM_PATH, self.handle)
        app.on_shutdown.append(self._close_all)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.body_exists:
            # A body would hold the internal body budget for the stream's life.
            raise InvalidRequestError("the upgrade to a replica stream takes no body")
        ws = web.WebSocketResponse(
            max_msg_size=self.message_bytes_max,
            autoping=True,
            compress=False,
            timeout=_CLOSE_WAIT_S,
        )
        await ws.prepare(request)
        pipeline = request.app.get(PIPELINE_KEY)
        self.open[ws] = request.transport
        self._count()
        code: int = WSCloseCode.OK
        message = b""
        try:
            code, message = await self._serve(
                ws,
                pipeline.serving if pipeline is not None else None,
                pipeline.metrics if pipeline is not None else None,
            )
        except Exception:
            # Past prepare() no HTTP answer can be sent; the connection is gone
            # (a pong or a close that could not be written).
            log.debug("replica stream ended by an error", exc_info=True)
        finally:
            del self.open[ws]
            self._count()
            await _close(ws, request.transport, code, message)
        return ws

    def _count(self) -> None:
        if self.stats is not None:
            self.stats.replica_streams_open = len(self.open)

    async def _serve(
        self,
        ws: web.WebSocketResponse,
        serving: ServingCheck | None,
        metrics: RequestMetrics | None,
    ) -> tuple[int, bytes]:
        """Answer the stream's fetches until it ends; the close code and
        message to end it with (sent by the caller, bounded in time)."""
        loop = asyncio.get_running_loop()
        idle_until = loop.time() + self.idle_timeout_s
        while True:
            try:
                # From the last fetch, not the last frame: pings alone (which
                # receive() answers and reads past) do not keep a stream open.
                async with asyncio.timeout_at(idle_until):
                    msg = await ws.receive()
            except TimeoutError:
                return WSCloseCode.OK, b"idle"
            if msg.type is WSMsgType.BINARY:
                data: bytes = msg.data
                if len(data) < REQUEST_HEAD.size:
                    return WSCloseCode.PROTOCOL_ERROR, b"no request id"
                (request_id,) = REQUEST_HEAD.unpack_from(data)
                message = await self._answer(
                    serving, metrics, request_id, data[REQUEST_HEAD.size :]
                )
                self.served += 1
                if self.stats is not None:
                    self.stats.replica_stream_fetches = self.served
                try:
                    # A follower that does not take its answer within the
                    # idle timeout loses the stream (and its long-poll slot).
                    async with asyncio.timeout(self.idle_timeout_s):
                        await ws.send_bytes(message)
                except (ConnectionError, TimeoutError):
                    # Closed while the fetch waited (shutdown, the follower
                    # gone), or the answer not taken in time.
                    return WSCloseCode.GOING_AWAY, b"answer not taken"
                idle_until = loop.time() + self.idle_timeout_s
            elif msg.type is WSMsgType.TEXT:
                return WSCloseCode.UNSUPPORTED_DATA, b"binary messages only"
            else:
                # CLOSE / CLOSING / CLOSED, or ERROR (a message past
                # message_bytes_max: aiohttp has closed with 1009).
                return WSCloseCode.OK, b""

    async def _answer(
        self,
        serving: ServingCheck | None,
        metrics: RequestMetrics | None,
        request_id: int,
        body: bytes,
    ) -> bytes:
        """The message answering `body`: its head, then the POST route's
        answer; timed and counted as the POST route's in the request metrics."""
        clock = RequestClock(time.perf_counter())
        clock.handler_at = clock.started_at
        token = use_clock(clock)
        code: str | None = None
        try:
            if serving is not None:
                refusal = serving()
                if refusal is not None:
                    raise refusal
            answer = await self.replicas.replica_fetch(ReplicaFetchRequest.from_json(body))
            return encode_answer(answer, prefix=ANSWER_HEAD.pack(request_id, 200))
        except LograftError as exc:
            code = exc.code
            return ANSWER_HEAD.pack(request_id, status_for(exc)) + render_error(exc)
        except Exception as exc:
            log.exception("replica fetch over a stream failed")
            error = LograftError(f"internal error: {type(exc).__name__}; see the node's log")
            code = error.code
            return ANSWER_HEAD.pack(request_id, status_for(error)) + render_error(error)
        finally:
            reset_clock(token)
            if metrics is not None:
                metrics.observe_exchange(
                    "POST", REPLICA_FETCH_PATH, clock, time.perf_counter(), code
                )

    async def _close_all(self, app: web.Application) -> None:
        await asyncio.gather(
            *(
                _close(ws, transport, WSCloseCode.GOING_AWAY, b"shutdown")
                for ws, transport in list(self.open.items())
            ),
            return_exceptions=True,
        )


async def _close(
    ws: web.WebSocketResponse, transport: asyncio.BaseTransport | None, code: int, message: bytes
) -> None:
    """Close `ws` within _CLOSE_WAIT_S, then drop what the peer did not take.

    aiohttp's close ends, on time or not, by closing the transport gracefully,
    which keeps the connection and every byte still unsent until the peer
    reads them: a follower that reads nothing (an answer or a flood of pongs
    in its socket) would hold both for as long as it likes, and the node's
    shutdown waits for such a connection. So a connection with bytes still
    unsent after the close is reset."""
    try:
        async with asyncio.timeout(_CLOSE_WAIT_S):
            await ws.close(code=code, message=message, drain=False)
    except (TimeoutError, ConnectionError):
        _reset(transport)
        return
    if transport is not None and _unsent_bytes(transport) > 0:
        _reset(transport)


def _unsent_bytes(transport: asyncio.BaseTransport) -> int:
    # Duck-typed: uvloop's transports are no asyncio.Transport instances.
    size = getattr(transport, "get_write_buffer_size", None)
    return size() if size is not None else 0


def _reset(transport: asyncio.BaseTransport | None) -> None:
    """Abort `transport` with a TCP reset: the kernel drops the bytes still
    queued in the socket too, instead of holding them for a peer that does not
    read (SO_LINGER 0; an abort alone frees only the process's buffer)."""
    abort = getattr(transport, "abort", None)  # uvloop's: no asyncio.Transport
    if transport is None or abort is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    abort()


__all__ = ["ANSWER_HEAD", "REPLICA_STREAM_PATH", "REQUEST_HEAD", "ReplicaStreams"]
