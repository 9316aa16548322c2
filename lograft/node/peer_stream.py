"""A follower's WebSocket of replica fetches to one leader (the client side of
lograft/api/replica_stream.py, which describes the messages).

`PeerClient.stream_exchange` (node/peer_client.py) owns one `PeerStream` per
peer and is the only caller. What it keeps of the contract of a node-to-node
call (brokers/peer_calls.py), as `PeerChannel` does for a kept HTTP
connection:

- the cluster secret on the upgrade request, TLS with the client context when
  the peer's URL is https (the peer's certificate and host name verified);
- the call's timeout covers connecting, sending and reading;
- an answer is bounded: a message of at most the client's `answer_bytes_max`
  (a larger one ends the stream; aiohttp stops reading it at the bound);
- it returns the status and the body, as an HTTP exchange would;
- any failure (refused, reset, timed out, unreadable, cancelled mid-call)
  closes the stream, whose state is then unknown; the next call opens a new
  one. A stream the leader closed while idle (its `keepalive_timeout_ms`, a
  restart) fails the call before any answer: that call is sent once more on
  a new stream (a replica fetch sent twice is safe: the leader's session
  then sees an old epoch and the follower starts its session over).

A leader that refuses the upgrade with an HTTP status (a node older than the
stream route: 404; one still catching up: 503) raises `StreamRefused`; the
caller sends that fetch as a POST instead, which answers with the error the
leader means, and tries the stream again `RETRY_UPGRADE_S` later.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import WSCloseCode, WSMsgType

from lograft.api.app import SECRET_HEADER
from lograft.api.internal_paths import REPLICA_STREAM_PATH
from lograft.api.replica_stream import ANSWER_HEAD, REQUEST_HEAD
from lograft.node.peer_channel import ChannelError, one_call

# After a refused upgrade, fetches to that leader go as POSTs this long, s.
RETRY_UPGRADE_S = 5.0
# How long a closing stream waits for the leader's close reply, s.
_CLOSE_WAIT_S = 1.0
# Close codes after which the fetch is sent once more on a new stream: the
# leader closed an idle stream (1000) or is shutting down (1001).
_RESENDABLE_CLOSES = frozenset({WSCloseCode.OK, WSCloseCode.GOING_AWAY})


class StreamRefused(Exception):
    """The leader answered the upgrade with an HTTP status, not a stream."""


class _Closed(Exception):
    """The leader closed a kept stream before answering (safe to resend)."""


class PeerStream:
    """A kept WebSocket of replica fetches to one base URL (`http://host:port`)."""

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession,
        *,
        cluster_secret: str,
        answer_bytes_max: int,
    ) -> None:
        self.base_url = base_url
        self._url = base_url.rstrip("/") + REPLICA_STREAM_PATH
        self._session = session
        self._headers = {SECRET_HEADER: cluster_secret}
        self._answer_bytes_max = answer_bytes_max
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._lock = asyncio.Lock()
        self._next_id = 0
        self._refused_until = 0.0
        self._closing: set[asyncio.Task[bool]] = set()
        self._retired = False
        self.streams_opened = 0  # for tests: a kept stream is reused

    def refused(self) -> bool:
        """Whether the leader refused the upgrade less than RETRY_UPGRADE_S ago."""
        return time.monotonic() < self._refused_until

    async def call(self, body: bytes, *, timeout_s: float) -> tuple[int, bytes]:
        """Send one fetch request's JSON: the answer's status and body. Raises
        ChannelError when there is no usable answer, StreamRefused when the
        leader would not open a stream."""
        async with self._lock:
            return await one_call(self._exchange(body), timeout_s, self.base_url, self.close)

    async def _exchange(self, body: bytes) -> tuple[int, bytes]:
        reused = self._ws is not None and not self._ws.closed
        try:
            return await self._send(body)
        except _Closed:
            self.close()
            if not reused:
                raise ChannelError(f"{self.base_url} closed the stream without answering") from None
        # The kept stream had gone stale: once more on a new one.
        try:
            return await self._send(body)
        except _Closed:
            self.close()
            raise ChannelError(f"{self.base_url} closed the stream without answering") from None

    async def _send(self, body: bytes) -> tuple[int, bytes]:
        ws = await self._stream()
        self._next_id += 1
        request_id = self._next_id
        try:
            await ws.send_bytes(REQUEST_HEAD.pack(request_id) + body)
            while True:
                msg = await ws.receive()
                if msg.type is WSMsgType.BINARY:
                    data: bytes = msg.data
                    if len(data) < ANSWER_HEAD.size:
                        raise ChannelError(
                            f"{self.base_url} sent a stream message of {len(data)} bytes"
                        )
                    answered_id, status = ANSWER_HEAD.unpack_from(data)
                    if answered_id != request_id:
                        continue  # the answer to a request given up on: not this one
                    return status, data[ANSWER_HEAD.size :]
                if msg.type is WSMsgType.CLOSE and msg.data not in _RESENDABLE_CLOSES:
                    # The leader refused what was sent (1009: larger than its
                    # request_bytes_max; 1002, 1003): sending it again would not help.
                    raise ChannelError(
                        f"{self.base_url} closed the stream with code {msg.data} "
                        f"({msg.extra or 'no reason given'})"
                    )
                if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                    raise _Closed
                if msg.type is WSMsgType.ERROR:
                    raise ChannelError(f"{self.base_url}'s stream failed: {msg.data!r}")
                if msg.type is WSMsgType.TEXT:
                    raise ChannelError(f"{self.base_url} sent a text message on the stream")
                # PING / PONG are aiohttp's (autoping): read on.
        except ConnectionResetError:
            raise _Closed from None
        except (OSError, aiohttp.ClientError) as exc:
            raise _unreachable(self.base_url, exc) from None

    async def _stream(self) -> aiohttp.ClientWebSocketResponse:
        ws = self._ws
        if ws is not None and not ws.closed:
            return ws
        self.close()
        if self._retired:
            raise ChannelError(f"{self.base_url} is no longer this peer's address")
        try:
            ws = await self._session.ws_connect(
                self._url,
                headers=self._headers,
                autoping=True,
                compress=0,
                max_msg_size=self._answer_bytes_max,
                timeout=aiohttp.ClientWSTimeout(ws_close=_CLOSE_WAIT_S),
            )
        except aiohttp.WSServerHandshakeError as exc:
            self._refused_until = time.monotonic() + RETRY_UPGRADE_S
            raise StreamRefused(f"{self.base_url} answered the upgrade {exc.status}") from None
        except (OSError, aiohttp.ClientError) as exc:
            raise _unreachable(self.base_url, exc) from None
        self._ws = ws
        self.streams_opened += 1
        return ws

    def close(self) -> None:
        """Close the stream, without waiting (a cancelled call may not wait)."""
        ws, self._ws = self._ws, None
        if ws is not None and not ws.closed:
            task = asyncio.ensure_future(ws.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def retire(self) -> None:
        """Close the stream for good (the peer moved): a call in flight fails,
        and none opens a new stream to this URL."""
        self._retired = True
        self.close()

    async def aclose(self) -> None:
        """Close the stream for good and wait for it and every earlier close."""
        self.retire()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._ws.closed


def _unreachable(who: str, exc: BaseException) -> ChannelError:
    return ChannelError(f"could not reach {who}: {type(exc).__name__}: {exc}")


__all__ = ["RETRY_UPGRADE_S", "PeerStream", "StreamRefused"]
