"""The one client for node-to-node HTTP calls.

Every call one node makes to another goes through a `PeerClient`: replica
fetches to a partition leader, produce requests forwarded to a leader, the
batched partition-offsets requests, group listings, the streams' reads and
offsets of partitions led elsewhere, and the controller RPCs
(`ControllerClient`). It owns what each of those sites used to write again:

- TLS: with `[tls]`, every call is HTTPS with the node's client context
  (`lograft.security.tls.client_context`): the peer's certificate and host
  name are verified against `ca_file`, and the node presents its own
  certificate;
- the connection pool (one `aiohttp.ClientSession`, created on first use in
  the event loop that uses it, so the heartbeat thread's client lives on that
  thread's loop) and its bound on connections;
- the cluster secret header (`X-Lograft-Cluster-Secret`), sent on every call;
- timeouts: a call's own `timeout_ms`, else the client's default;
- a bound on the size of an answer (`answer_bytes_max`): a peer answering
  more is treated as unreachable, and no more than the bound is read;
- the peer's address: a broker's registered URL, or a voter's, through
  `PeerUrls` (`[http.dial]` replaces host:port per peer);
- decoding: a 2xx answer's body is returned; any other status raises the
  error of its JSON error body (`LograftError.from_dict`), or
  `PeerAnswerUnreadableError` (BROKER_NOT_AVAILABLE) naming the status when
  the body is not one; no answer
  at all (refused, reset, timed out, no address, too large) raises
  `PeerUnreachableError`, which is BROKER_NOT_AVAILABLE on the wire.

It satisfies `lograft.brokers.peer_calls.PeerCalls`, the protocol the routes,
the produce router and the stream sources depend on: its typed operations
(`forward_produce`, `partition_offsets`, `list_groups`) encode their values
here, and a call of one to this node's own broker runs the in-process handler
the node registered (`serve_locally`, `LocalFirst`) with no encoding at all.

Calls a node makes to itself that are not yet typed operations are still
decided by their callers: the streams' reads and start offsets of a partition
led here (lograft/api/stream/source.py), and the controller RPCs
(`ControllerClient`'s local short-circuit to this node's active runtime).

Separate pools (separate `PeerClient`s) keep calls that depend on each other
from waiting on each other: the node has one for forwarded produces and other
short data-path calls, one for replica fetches, one for controller calls, and
the streams have one for short calls and one for their long-polls.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson
import yarl

from lograft.api.app import SECRET_HEADER
from lograft.api.internal_paths import GROUPS_PATH
from lograft.api.partition_offsets import PATH as OFFSETS_PATH
from lograft.api.partition_offsets import decode_offsets_answer, encode_offsets_request
from lograft.api.services import MetadataView
from lograft.brokers.peer_calls import (
    JSON,
    GroupListing,
    LeaderOffsets,
    LocalFirst,
    UnreadableAnswer,
)
from lograft.brokers.produce_router import FORWARD_PATH
from lograft.brokers.remote_wait import remote_wait
from lograft.errors import (
    InvalidRequestError,
    LograftError,
    PeerAddressUnknownError,
    PeerAnswerUnreadableError,
    PeerUnreachableError,
)
from lograft.node.config import Voter
from lograft.node.peer_channel import ChannelError, PeerChannel
from lograft.node.peer_stream import PeerStream, StreamRefused
from lograft.node.peer_urls import PeerUrls
from lograft.protocol.produce_wire import CONTENT_TYPE as FORWARD_CONTENT_TYPE
from lograft.protocol.produce_wire import (
    PartitionOutcome,
    ProduceRequest,
    decode_response,
    encode_request,
)
from lograft.protocol.topic_partition import TopicPartition

MIB = 1024 * 1024
# Default bound on one node-to-node call (calls set shorter ones), ms.
NODE_REQUEST_TIMEOUT_MS = 60_000
# Largest answer a peer may give to one call, bytes (`[http]
# peer_answer_bytes_max`, the node passes it). The largest legitimate ones are
# replica-fetch and stream-fetch answers: whole batches up to the request's
# byte budget, where one batch may pass it by up to the topic's
# max_message_bytes; 1 GiB is well past both with the defaults (8 MiB, 1 MiB).
PEER_ANSWER_BYTES_MAX = 1024 * MIB
# Pieces an answer without a Content-Length is read in, bytes.
_READ_PIECE_BYTES = 256 * 1024
# How much of an unreadable error answer an error message quotes, bytes.
_QUOTED_BYTES = 200


class PeerClient(LocalFirst):
    def __init__(
        self,
        *,
        cluster_secret: str,
        peers: PeerUrls | None = None,
        metadata: MetadataView | None = None,
        connections_max: int = 0,
        connections_per_peer_max: int = 0,
        timeout_ms: int = NODE_REQUEST_TIMEOUT_MS,
        answer_bytes_max: int = PEER_ANSWER_BYTES_MAX,
        trace_configs: list[aiohttp.TraceConfig] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`metadata` gives brokers' registered URLs (None: calls by broker id
        find none); `connections_max` / `connections_per_peer_max` 0: no limit;
        `trace_configs`: aiohttp's hooks on every request (tests count them);
        `tls`: the client context of https calls (None: the system's defaults)."""
        super().__init__()
        self.cluster_secret = cluster_secret
        self.peers = peers or PeerUrls()
        self.metadata = metadata
        self.connections_max = connections_max
        self.connections_per_peer_max = connections_per_peer_max
        self.timeout_ms = timeout_ms
        self.answer_bytes_max = answer_bytes_max
        self.trace_configs = trace_configs
        self.tls = tls
        self._session: aiohttp.ClientSession | None = None
        # Kept connections for `exchange`, and streams for `stream_exchange`, by peer id.
        self._channels: dict[int, PeerChannel] = {}
        self._streams: dict[int, PeerStream] = {}
        # Streams of peers that moved, closing (awaited by `close`).
        self._retired: list[PeerStream] = []

    # -- addresses ------------------------------------------------------------------------

    def broker_url(self, broker_id: int) -> str | None:
        if self.metadata is None:
            return None
        return self.peers.broker(self.metadata, broker_id)

    def voter_url(self, voter: Voter) -> str:
        return self.peers.voter(voter)

    def controller_url(self, voter: Voter) -> str:
        """Where `voter` serves controller RPCs (its controller listener, if any)."""
        return self.peers.controller(voter)

    # -- typed operations over HTTP (LocalFirst runs the local ones) ----------------------

    async def _remote_forward_produce(
        self, broker_id: int, req: ProduceRequest
    ) -> list[PartitionOutcome]:
        body = await self.post(
            broker_id, FORWARD_PATH, encode_request(req), content_type=FORWARD_CONTENT_TYPE
        )
        try:
            return decode_response(body, [b.partition for b in req.partitions])
        except InvalidRequestError as exc:
            raise UnreadableAnswer(exc.message) from None

    async def _remote_partition_offsets(
        self,
        broker_id: int,
        tps: Sequence[TopicPartition],
        timestamp_ms: int | None,
        *,
        timeout_ms: int,
    ) -> list[LeaderOffsets | LograftError]:
        raw = await self.post(
            broker_id,
            OFFSETS_PATH,
            encode_offsets_request(tps, timestamp_ms),
            timeout_ms=timeout_ms,
        )
        return decode_offsets_answer(tps, raw)

    async def _remote_list_groups(self, broker_id: int, *, timeout_ms: int) -> GroupListing:
        doc = orjson.loads(await self.get(broker_id, GROUPS_PATH, timeout_ms=timeout_ms))
        if not isinstance(doc, dict):
            raise UnreadableAnswer(f"broker {broker_id}'s group listing is not an object")
        return doc

    # -- raw calls ------------------------------------------------------------------------

    async def post(
        self,
        peer_id: int,
        path: str,
        body: bytes,
        *,
        content_type: str = JSON,
        timeout_ms: int | None = None,
    ) -> bytes:
        return await self.call(
            self._url_of(peer_id),
            "POST",
            path,
            peer_id=peer_id,
            body=body,
            content_type=content_type,
            timeout_ms=timeout_ms,
        )

    async def get(
        self,
        peer_id: int,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> bytes:
        return await self.call(
            self._url_of(peer_id),
            "GET",
            path,
            peer_id=peer_id,
            params=params,
            timeout_ms=timeout_ms,
        )

    async def call(
        self,
        base_url: str,
        method: str,
        path: str,
        *,
        peer_id: int | None = None,
        body: bytes | None = None,
        content_type: str = JSON,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        who = _who(peer_id, base_url)
        timeout = aiohttp.ClientTimeout(total=(timeout_ms or self.timeout_ms) / 1000)
        sent = {**(headers or {}), SECRET_HEADER: self.cluster_secret}
        if body is not None:
            sent["Content-Type"] = content_type
        try:
            # A request being served waits on another node: its remote time.
            with remote_wait():
                async with self.session().request(
                    method,
                    # Paths arrive quoted (a group id's "/" as %2F): sent as they are.
                    yarl.URL(base_url + path, encoded=True),
                    params=params,
                    data=body,
                    headers=sent,
                    timeout=timeout,
                ) as resp:
                    status = resp.status
                    data = await self._read(resp, who)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PeerUnreachableError(
                f"could not reach {who} ({method} {path}): {type(exc).__name__}: {exc}",
                **_peer(peer_id),
            ) from None
        if not 200 <= status < 300:
            raise answer_error(status, data, who, peer_id)
        return data

    async def exchange(
        self,
        peer_id: int,
        path: str,
        body: bytes,
        *,
        content_type: str = JSON,
        timeout_ms: int | None = None,
    ) -> bytes:
        """`post` for calls made one at a time to a peer, hundreds a second
        (replica fetches: one in flight per leader): over one kept
        connection per peer (node/peer_channel.py), not through the pool,
        at about a quarter of the CPU. Same answers and errors as `post`;
        `trace_configs` do not see these calls."""
        url = self._url_of(peer_id)
        channel = self._channels.get(peer_id)
        if channel is None or channel.base_url != url:
            if channel is not None:
                channel.close()  # the peer moved (a new registration)
            channel = self._channels[peer_id] = PeerChannel(
                url,
                cluster_secret=self.cluster_secret,
                answer_bytes_max=self.answer_bytes_max,
                tls=self.tls,
            )
        who = _who(peer_id, url)
        try:
            status, data = await channel.post(
                path,
                body,
                content_type=content_type,
                timeout_s=(timeout_ms or self.timeout_ms) / 1000,
            )
        except ChannelError as exc:
            raise _unreachable(who, f"POST {path}", exc, peer_id) from None
        return _body_of(status, data, who, peer_id)

    async def stream_exchange(
        self, peer_id: int, post_path: str, body: bytes, *, timeout_ms: int | None = None
    ) -> bytes:
        """A replica fetch (`body`: its request's JSON) over the peer's kept
        WebSocket (node/peer_stream.py): the same answers and errors as
        `exchange` to `post_path`, at a tenth of the transport's CPU. A peer
        that refuses the stream (an older node, or one catching up) is sent
        the fetch as a POST to `post_path` instead, for a while."""
        url = self._url_of(peer_id)
        stream = self._streams.get(peer_id)
        if stream is None or stream.base_url != url:
            if stream is not None:
                stream.retire()  # the peer moved (a new registration)
                self._retired.append(stream)
            stream = self._streams[peer_id] = PeerStream(
                url,
                self.session(),
                cluster_secret=self.cluster_secret,
                answer_bytes_max=self.answer_bytes_max,
            )
        timeout_s = (timeout_ms or self.timeout_ms) / 1000
        if stream.refused():
            return await self.exchange(peer_id, post_path, body, timeout_ms=timeout_ms)
        who = _who(peer_id, url)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            status, data = await stream.call(body, timeout_s=timeout_s)
        except StreamRefused:
            # The POST gets what is left of the call's time, not all of it again.
            left_ms = max(int((deadline - loop.time()) * 1000), 1)
            return await self.exchange(peer_id, post_path, body, timeout_ms=left_ms)
        except ChannelError as exc:
            raise _unreachable(who, f"stream of {post_path}", exc, peer_id) from None
        return _body_of(status, data, who, peer_id)

    async def _read(self, resp: aiohttp.ClientResponse, who: str) -> bytes:
        """The answer's body, at most `answer_bytes_max` of it."""
        limit = self.answer_bytes_max
        if resp.content_length is not None:
            if resp.content_length > limit:
                raise PeerUnreachableError(
                    f"{who} answered {resp.content_length} bytes, past the bound of "
                    f"{limit} bytes on a node-to-node answer"
                )
            return await resp.read()
        data = bytearray()
        async for piece in resp.content.iter_chunked(_READ_PIECE_BYTES):
            data += piece
            if len(data) > limit:
                raise PeerUnreachableError(
                    f"{who} answered more than {limit} bytes, the bound on a node-to-node answer"
                )
        return bytes(data)

    def _url_of(self, peer_id: int) -> str:
        url = self.broker_url(peer_id)
        if url is None:
            raise PeerAddressUnknownError(
                f"broker {peer_id} has no registered address", leader_id=peer_id
            )
        return url

    # -- the pool -------------------------------------------------------------------------

    def session(self) -> aiohttp.ClientSession:
        """The pool, made on first use in the running loop."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self.connections_max,
                    limit_per_host=self.connections_per_peer_max,
                    ssl=self.tls if self.tls is not None else True,
                ),
                timeout=aiohttp.ClientTimeout(total=self.timeout_ms / 1000),
                trace_configs=self.trace_configs,
            )
        return self._session

    async def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        streams = [*self._streams.values(), *self._retired]
        self._streams.clear()
        self._retired.clear()
        await asyncio.gather(*(stream.aclose() for stream in streams))
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def closed(self) -> bool:
        """True once closed, or never opened."""
        return self._session is None or self._session.closed


def _unreachable(who: str, what: str, exc: ChannelError, peer_id: int) -> PeerUnreachableError:
    return PeerUnreachableError(f"could not reach {who} ({what}): {exc}", **_peer(peer_id))


def _body_of(status: int, data: bytes, who: str, peer_id: int) -> bytes:
    """A kept connection's answer: its body when 2xx, else the error it names."""
    if not 200 <= status < 300:
        raise answer_error(status, data, who, peer_id)
    return data


def answer_error(status: int, body: bytes, who: str, peer_id: int | None = None) -> LograftError:
    """The error a peer's non-2xx answer carries: the one its JSON error body
    names, else BROKER_NOT_AVAILABLE quoting the status and the body's start
    (a proxy's page, a node stopping)."""
    try:
        doc: Any = orjson.loads(body)
        return LograftError.from_dict(doc["error"] if isinstance(doc, dict) else None)
    except (KeyError, ValueError):  # orjson.JSONDecodeError is a ValueError
        return PeerAnswerUnreadableError(
            f"{who} answered HTTP {status}: {body[:_QUOTED_BYTES]!r}",
            status=status,
            **_peer(peer_id),
        )


def _who(peer_id: int | None, base_url: str) -> str:
    return f"broker {peer_id}" if peer_id is not None else base_url


def _peer(peer_id: int | None) -> dict[str, Any]:
    return {} if peer_id is None else {"leader_id": peer_id}


__all__ = ["NODE_REQUEST_TIMEOUT_MS", "PEER_ANSWER_BYTES_MAX", "PeerClient", "answer_error"]
