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
connection can cost it is bounded: a message of at most
`[http] request_bytes_max` (a larger one closes the connection with 1009),
one fetch at a time, and a connection with no message for
`[http] keepalive_timeout_ms` is closed (1000), as an idle keep-alive HTTP
connection is. A text message, or a binary one too short for its id, closes
it with 1003 / 1002. The node's shutdown closes every stream (1001).
"""

from __future__ import annotations

import asyncio
import logging
import struct

from aiohttp import WSCloseCode, WSMsgType, web

from lograft.api.http_errors import render_error, status_for
from lograft.api.internal_paths import REPLICA_STREAM_PATH
from lograft.api.request_pipeline import PIPELINE_KEY
from lograft.api.serving_gate import ServingCheck
from lograft.brokers.broker_stats import BrokerStats
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import LograftError
from lograft.protocol.fetch_wire import ReplicaFetchRequest, encode_answer

log = logging.getLogger(__name__)

# The follower's message: request id. The leader's: request id, HTTP status.
REQUEST_HEAD = struct.Struct(">Q")
ANSWER_HEAD = struct.Struct(">QH")
# How long the leader waits for a closing stream's close handshake, s.
_CLOSE_WAIT_S = 1.0


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
        self.open: set[web.WebSocketResponse] = set()
        self.served = 0  # fetches answered over streams

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(REPLICA_STREAM_PATH, self.handle)
        app.on_shutdown.append(self._close_all)

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(
            max_msg_size=self.message_bytes_max,
            autoping=True,
            compress=False,
            timeout=_CLOSE_WAIT_S,
        )
        await ws.prepare(request)
        pipeline = request.app.get(PIPELINE_KEY)
        serving = pipeline.serving if pipeline is not None else None
        self.open.add(ws)
        self._count()
        try:
            await self._serve(ws, serving)
        finally:
            self.open.discard(ws)
            self._count()
            await ws.close()
        return ws

    def _count(self) -> None:
        if self.stats is not None:
            self.stats.replica_streams_open = len(self.open)
            self.stats.replica_stream_fetches = self.served

    async def _serve(self, ws: web.WebSocketResponse, serving: ServingCheck | None) -> None:
        while True:
            try:
                msg = await ws.receive(timeout=self.idle_timeout_s)
            except TimeoutError:
                await ws.close(code=WSCloseCode.OK, message=b"idle")
                return
            if msg.type is WSMsgType.BINARY:
                data: bytes = msg.data
                if len(data) < REQUEST_HEAD.size:
                    await ws.close(code=WSCloseCode.PROTOCOL_ERROR, message=b"no request id")
                    return
                (request_id,) = REQUEST_HEAD.unpack_from(data)
                status, body = await self._answer(serving, data[REQUEST_HEAD.size :])
                self.served += 1
                if self.stats is not None:
                    self.stats.replica_stream_fetches = self.served
                try:
                    await ws.send_bytes(ANSWER_HEAD.pack(request_id, status) + body)
                except ConnectionError:
                    return  # closed while the fetch waited (shutdown, the follower gone)
            elif msg.type is WSMsgType.TEXT:
                await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"binary messages only")
                return
            else:
                # CLOSE / CLOSING / CLOSED, or ERROR (a message past
                # message_bytes_max: aiohttp has closed with 1009).
                return

    async def _answer(self, serving: ServingCheck | None, body: bytes) -> tuple[int, bytes]:
        """The POST route's answer to `body`: its status and body."""
        try:
            if serving is not None:
                refusal = serving()
                if refusal is not None:
                    raise refusal
            answer = await self.replicas.replica_fetch(ReplicaFetchRequest.from_json(body))
            return 200, encode_answer(answer)
        except LograftError as exc:
            return status_for(exc), render_error(exc)
        except Exception as exc:
            log.exception("replica fetch over a stream failed")
            error = LograftError(f"internal error: {type(exc).__name__}; see the node's log")
            return status_for(error), render_error(error)

    async def _close_all(self, app: web.Application) -> None:
        streams = list(self.open)
        await asyncio.gather(
            *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"shutdown") for ws in streams),
            return_exceptions=True,
        )


__all__ = ["ANSWER_HEAD", "REPLICA_STREAM_PATH", "REQUEST_HEAD", "ReplicaStreams"]
