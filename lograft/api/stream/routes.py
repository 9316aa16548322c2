"""Streaming consume over Server-Sent Events: `GET /v1/topics/{topic}/stream`.

    curl -N 'http://127.0.0.1:9091/v1/topics/orders/stream?offset=earliest'

Query parameters (named after the fetch endpoint's):

- `partitions`: `0,1,...`; default every partition of the topic;
- `offset`: `earliest` | `latest` (default, like `tail -f`) | a number, where
  each partition starts;
- `format`, `key_format`: as for fetch (`auto`, `json`, `string`, `base64`);
- `max_bytes`: raw bytes read per round of fetches, all partitions together;
- `last_event_id`: a cursor to resume from, for clients that cannot send the
  `Last-Event-ID` header (the header wins when both are given);
- `group`: consume as a member of this consumer group instead
  (`stream_group`): the group assigns the partitions, each starts at the
  group's committed offset, else at `auto_offset_reset` (`earliest`,
  `latest` (default), `none`), and delivered positions are committed every
  `commit_interval_ms`; `partitions` and `offset` do not apply then.

Each record is one event whose `id:` is the cursor (`lograft.api.stream.sse`) and whose
`data:` is the record object of the fetch endpoint; `: keep-alive` comments
keep quiet connections open. Errors before the stream starts are ordinary JSON
error answers; an error after it started is sent as `event: error` with the
JSON error body, and the stream ends.

Limits: `streams_max` streams per node at once (`STREAMS_LIMIT_REACHED`, 503,
beyond it); what one stream may buffer is bounded as `stream_session` explains.
Partitions led elsewhere are read through long-polls all streams share
(`stream_polls`: at most `remote_polls_per_leader_max` per leader); start
offsets and group calls go over a pool of `remote_connections_max`
connections that no long-poll holds, so a new stream's start never waits
behind the reads of running ones.

What a stream takes it gives back on every way out: its slot, the reads and
tasks it started, its group membership. Before the headers are sent, finding
the start positions is bounded by `start_retry_timeout_ms` (a group join by
`group.request_timeout_ms`), and the start is abandoned within
`liveness_check_ms` of the client going away (aiohttp
does not cancel a handler whose client left); the same check ends a running
stream (`stream_session`), and a client that takes none of a running stream's
bytes for `client_stalled_timeout_ms` (gone without closing, or not reading)
has its connection closed by the kernel. Shutdown cancels every stream and
waits for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from aiohttp import web

from lograft.api.caller import CLIENT_ID_HEADER, How, caller_of
from lograft.api.quota_gate import request_quota
from lograft.api.record_work import RecordWork
from lograft.api.records_json import READ_FORMATS, RenderLimits
from lograft.api.request_ints import QUERY_INT_MAX, parse_int, parse_partition, query_int
from lograft.api.services import MetadataView, PeerCalls, TopicView
from lograft.api.stream import sse
from lograft.api.stream.fetch import ServeLimits, add_stream_fetch_route
from lograft.api.stream.group import AUTO_OFFSET_RESETS, GroupMember
from lograft.api.stream.limits import StreamLimits
from lograft.api.stream.polls import PollLimits, RemoteReads
from lograft.api.stream.session import (
    GroupBinding,
    SessionSettings,
    StreamSession,
    cancel_and_wait,
    client_gone,
)
from lograft.api.stream.source import PartitionSource
from lograft.brokers.metadata_sync import partition_of
from lograft.brokers.peer_calls import NoPeers
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import (
    InvalidRequestError,
    StreamsLimitReachedError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition

OFFSET_NAMES = ("earliest", "latest")
# Logged as the status of a stream whose client left before its headers
# (nginx's "client closed request"); nobody receives it.
CLIENT_CLOSED_REQUEST = 499

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GroupRequest:
    group_id: str
    auto_offset_reset: str
    commit_interval_ms: int


@dataclass(frozen=True, slots=True)
class StreamRequest:
    view: TopicView
    partitions: tuple[int, ...]  # offset mode; a group member streams what it is assigned
    offset: str | int  # "earliest", "latest" or an offset
    resume: Mapping[int, int]  # positions from the cursor (Last-Event-ID)
    settings: SessionSettings
    group: GroupRequest | None
    # The client's credential headers, sent on the group calls made for it.
    on_behalf: Mapping[str, str]


class StreamRoutes:
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataView,
        limits: StreamLimits | None = None,
        calls: PeerCalls | None = None,
        poll_calls: PeerCalls | None = None,
        work: RecordWork | None = None,
        render: RenderLimits | None = None,
    ) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.limits = limits or StreamLimits()
        # Threads that render records (the node's, shared with the fetch route)
        # and the bounds of rendering (`[http]`, as for JSON fetches). Without
        # the node's, the routes own a pool of their own and close it with the app.
        self.work = work or RecordWork()
        self._owns_work = work is None
        self.render = render or RenderLimits()
        # Calls to other nodes (the node's peer clients, which it closes): short
        # ones (start offsets, group calls), over a pool of remote_connections_max
        # that no long-poll holds, so a new stream's start never queues behind
        # reads; and the long-polls, at most remote_polls_per_leader_max per
        # leader (the pool holds to the same bound per address). None: this
        # node reads no partition led elsewhere.
        self.calls = calls or NoPeers()
        self.poll_calls = poll_calls or NoPeers()
        # Every stream's handler task -> its session once it runs (None while it starts).
        self.sessions: dict[asyncio.Task[object], StreamSession | None] = {}
        # Streams per authenticated principal (streams_per_principal_max).
        self._by_principal: dict[str, int] = {}
        lim = self.limits
        self.remote = RemoteReads(
            self.poll_calls,
            PollLimits(
                polls_per_leader_max=lim.remote_polls_per_leader_max,
                reads_max=lim.remote_poll_partitions_max,
                bytes_max=lim.remote_poll_bytes_max,
                wait_ms=lim.source.fetch_wait_ms,
                timeout_margin_ms=lim.source.remote_timeout_margin_ms,
            ),
            self._leads,
        )

    def add_to(self, app: web.Application) -> None:
        # No HEAD: a HEAD would run the whole stream with its body thrown
        # away (a group member joining, and committing records it never
        # sent as consumed); it is 405, like any other method but GET.
        app.router.add_get("/v1/topics/{topic}/stream", self.stream, allow_head=False)
        lim = self.limits
        serve = ServeLimits(
            lim.remote_poll_partitions_max, lim.remote_poll_bytes_max, lim.chunk_bytes_max
        )
        add_stream_fetch_route(app, self.replicas, serve)
        app.on_shutdown.append(self._end_streams)
        app.on_cleanup.append(self._close)

    # -- lifecycle --------------------------------------------------------------------

    def _leads(self, broker_id: int, tp: TopicPartition) -> bool:
        view = self.metadata.topic(tp.topic)
        part = view.partitions.get(tp.partition) if view is not None else None
        return part is not None and part.leader == broker_id

    async def _end_streams(self, _app: web.Application) -> None:
        # A stream never ends by itself, and one blocked on a reader that does
        # not read would hold the server's shutdown for its whole timeout.
        tasks = list(self.sessions)
        for task, session in list(self.sessions.items()):
            if session is not None and session.group is not None:
                session.group.member.closing = True
            task.cancel()
        if tasks:
            # Group streams commit and leave on the way out (leave_timeout_ms).
            await asyncio.wait(tasks, timeout=self.limits.group.leave_timeout_ms / 1000 + 1)

    async def _close(self, _app: web.Application) -> None:
        try:
            await self.remote.close()
        finally:
            if self._owns_work:
                self.work.close()

    # -- the route --------------------------------------------------------------------

    async def stream(self, request: web.Request) -> web.StreamResponse:
        req = self._parse(request)
        if len(self.sessions) >= self.limits.streams_max:
            raise StreamsLimitReachedError(
                f"this node already serves {self.limits.streams_max} streams (streams_max); "
                "retry later or stream from another node",
                streams_max=self.limits.streams_max,
            )
        principal = _counted_principal(request)
        per_principal = self.limits.streams_per_principal_max
        if principal is not None and self._by_principal.get(principal, 0) >= per_principal:
            raise StreamsLimitReachedError(
                f"{principal} already has {per_principal} streams on this node "
                "(streams_per_principal_max); close one, or stream from another node",
                streams_per_principal_max=per_principal,
            )
        quota = request_quota(request)
        if quota is not None:
            quota.time_exempt = True  # a stream's pushes count as consumer bytes
            quota.waited = True  # paced between pushes, not delayed as a whole
            quota.check_consume()  # owes more than throttle_max_ms: 429
        task = asyncio.current_task()
        assert task is not None
        self.sessions[task] = None  # the slot is taken from here to the finally
        if principal is not None:
            self._by_principal[principal] = self._by_principal.get(principal, 0) + 1
        try:
            started = await self._while_connected(request, self._start(req))
            if started is None:
                return web.Response(status=CLIENT_CLOSED_REQUEST)
            sources, positions, group = started
            response = web.StreamResponse(
                headers={
                    "Content-Type": sse.CONTENT_TYPE,
                    "Cache-Control": "no-cache",
                    # nginx buffers proxied responses unless told not to.
                    "X-Accel-Buffering": "no",
                }
            )
            try:
                await response.prepare(request)
            except BaseException as exc:
                if group is not None:
                    await group.member.leave({})
                if isinstance(exc, ConnectionError):
                    return response  # the client left as the headers went out
                raise
            _bound_client_stall(request, self.limits.client_stalled_timeout_ms)
            session = StreamSession(
                request,
                response,
                sources,
                positions,
                req.settings,
                group,
                work=self.work,
                quota=quota,
                counts=(
                    None
                    if self.replicas.stats is None
                    else self.replicas.stats.topic(req.view.name)
                ),
            )
            self.sessions[task] = session
            await session.run()  # a group member leaves when it returns
            return response
        finally:
            del self.sessions[task]
            if principal is not None:
                left = self._by_principal.pop(principal) - 1
                if left:
                    self._by_principal[principal] = left

    async def _while_connected(self, request: web.Request, start: Awaitable[T]) -> T | None:
        """`start`'s result, or None as soon as the client has gone (`start` is
        then cancelled, and awaited: it gives back what it took)."""
        task = asyncio.ensure_future(start)
        check_s = self.limits.liveness_check_ms / 1000
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=check_s)
                if done:
                    return task.result()
                if client_gone(request):
                    return None
        finally:
            await cancel_and_wait(task)

    async def _start(
        self, req: StreamRequest
    ) -> tuple[dict[int, PartitionSource], dict[int, int], GroupBinding | None]:
        """What a stream needs before its headers: start positions, or a group membership."""
        if req.group is not None:
            return {}, {}, await self._join(req)
        sources = {p: self._source(req.view, p) for p in req.partitions}
        return sources, await self._start_positions(req, sources), None

    def _source(self, view: TopicView, partition: int) -> PartitionSource:
        return PartitionSource(
            self.replicas,
            self.metadata,
            self.calls,
            self.remote,
            TopicPartition(view.name, partition),
            view.topic_id,
            self.limits.source,
        )

    async def _join(self, req: StreamRequest) -> GroupBinding:
        """Join the group before the stream starts, so a refusal is a JSON error."""
        assert req.group is not None
        member = GroupMember(
            self.calls,
            bootstrap=lambda: self.calls.broker_url(self.replicas.broker_id),
            dial=self.calls.broker_url,
            group_id=req.group.group_id,
            topic=req.view.name,
            auto_offset_reset=req.group.auto_offset_reset,
            limits=self.limits.group,
            on_behalf=req.on_behalf,
        )
        try:
            await member.join()
        except asyncio.CancelledError:
            # The join may have reached the coordinator: do not leave a member
            # behind that would hold partitions until its session times out.
            await member.leave({})
            raise
        return GroupBinding(
            member,
            lambda p: self._source(req.view, p),
            req.group.commit_interval_ms,
            req.resume,
        )

    async def _start_positions(
        self, req: StreamRequest, sources: Mapping[int, PartitionSource]
    ) -> dict[int, int]:
        deadline = time.monotonic() + self.limits.start_retry_timeout_ms / 1000

        async def one(p: int) -> int:
            wanted = req.resume.get(p, req.offset)
            if isinstance(wanted, int):
                await sources[p].check_position(wanted, deadline=deadline)
                return wanted
            got = await sources[p].offsets(deadline=deadline)
            return got.earliest if wanted == "earliest" else got.latest

        # A TaskGroup: when one partition fails, the others stop too (and are
        # awaited), instead of going on reading for a stream that will not run.
        try:
            async with asyncio.TaskGroup() as tg:
                found = {p: tg.create_task(one(p)) for p in req.partitions}
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return {p: t.result() for p, t in found.items()}

    # -- request parsing --------------------------------------------------------------

    def _parse(self, request: web.Request) -> StreamRequest:
        q = request.query
        name = request.match_info["topic"]
        view = self.metadata.topic(name)
        if view is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", topic=name)
        group = self._group(q)
        if group is not None and caller_of(request).how is How.CERTIFICATE:
            # The member's calls to the coordinator carry the client's
            # Authorization header; a certificate cannot be passed on, and
            # the coordinator would see this node's own certificate instead
            # (another principal, with its ACLs).
            raise InvalidRequestError(
                "a group stream needs a bearer token or a password (Authorization header): "
                "the node calls the group's coordinator with the client's credential, and a "
                "TLS client certificate cannot be passed on; stream without group= or send "
                "an Authorization header"
            )
        partitions = _partitions(view, q.get("partitions"))
        offset = _offset(q.get("offset", "latest"))
        for key in ("format", "key_format"):
            fmt = q.get(key, "auto")
            if fmt not in READ_FORMATS:
                raise InvalidRequestError(f"{key}={fmt!r}; use one of {', '.join(READ_FORMATS)}")
        max_bytes = query_int(q, "max_bytes", self.limits.chunk_bytes_default, minimum=1)
        if max_bytes > self.limits.chunk_bytes_max:
            raise InvalidRequestError(
                f"max_bytes={max_bytes} exceeds the stream limit of "
                f"{self.limits.chunk_bytes_max} bytes (chunk_bytes_max)",
                chunk_bytes_max=self.limits.chunk_bytes_max,
            )
        cursor_text = request.headers.get("Last-Event-ID") or q.get("last_event_id")
        cursor = sse.parse_cursor(cursor_text) if cursor_text else {}
        settings = SessionSettings(
            value_format=q.get("format", "auto"),
            key_format=q.get("key_format", "auto"),
            max_bytes=max_bytes,
            write_block_bytes=self.limits.write_block_bytes,
            heartbeat_interval_ms=self.limits.heartbeat_interval_ms,
            liveness_check_ms=self.limits.liveness_check_ms,
            render=self.render,
        )
        resume = {p: o for p, o in cursor.items() if p in view.partitions}
        if group is None:
            resume = {p: o for p, o in resume.items() if p in partitions}
        return StreamRequest(view, partitions, offset, resume, settings, group, _on_behalf(request))

    def _group(self, q: Mapping[str, str]) -> GroupRequest | None:
        group_id = q.get("group")
        if group_id is None:
            for key in ("auto_offset_reset", "commit_interval_ms"):
                if key in q:
                    raise InvalidRequestError(f"{key} applies only with group=")
            return None
        for key in ("partitions", "offset"):
            if key in q:
                raise InvalidRequestError(
                    f"{key} does not apply with group=: the group assigns the partitions, "
                    "and each starts at the group's committed offset (else auto_offset_reset)"
                )
        reset = q.get("auto_offset_reset", "latest")
        if reset not in AUTO_OFFSET_RESETS:
            raise InvalidRequestError(
                f"auto_offset_reset={reset!r}; use one of {', '.join(AUTO_OFFSET_RESETS)}"
            )
        limits = self.limits.group
        interval = query_int(q, "commit_interval_ms", limits.commit_interval_ms_default, minimum=1)
        if interval < limits.commit_interval_ms_min:
            raise InvalidRequestError(
                f"commit_interval_ms must be >= {limits.commit_interval_ms_min}",
                commit_interval_ms_min=limits.commit_interval_ms_min,
            )
        return GroupRequest(group_id, reset, interval)


# The client's headers a stream sends on the group calls it makes for the
# client: its credential and its client id (quotas count the client).
_ON_BEHALF_HEADERS = ("Authorization", CLIENT_ID_HEADER)


def _counted_principal(request: web.Request) -> str | None:
    """The principal whose streams are counted against
    `streams_per_principal_max`; None for an unauthenticated caller."""
    caller = caller_of(request)
    return None if caller.how is How.ANONYMOUS else caller.principal


def _on_behalf(request: web.Request) -> Mapping[str, str]:
    """The client's credential headers (each only when sent once: the
    authentication middleware refused a request with more)."""
    out: dict[str, str] = {}
    for name in _ON_BEHALF_HEADERS:
        values = request.headers.getall(name, [])
        if len(values) == 1:
            out[name] = values[0]
    return MappingProxyType(out)


def _bound_client_stall(request: web.Request, timeout_ms: int) -> None:
    """Have the kernel close the connection once what was sent stays unacknowledged,
    or the client's window stays shut, for `timeout_ms` (where the OS can)."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if sock is None or option is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, option, timeout_ms)


def _partitions(view: TopicView, raw: str | None) -> tuple[int, ...]:
    """`0,1,...`: a malformed list is INVALID_REQUEST; a number the topic
    lacks is UNKNOWN_TOPIC_OR_PARTITION, as for the fetch path."""
    if raw is None:
        return tuple(sorted(view.partitions))
    wanted: set[int] = set()
    for item in raw.split(","):
        wanted.add(partition_of(view, parse_partition(item, "partitions")).partition)
    return tuple(sorted(wanted))


def _offset(raw: str) -> str | int:
    if raw in OFFSET_NAMES:
        return raw
    try:
        return parse_int(raw, "offset", maximum=QUERY_INT_MAX)
    except InvalidRequestError as exc:
        raise InvalidRequestError(
            f"{exc.message}; or use earliest or latest", **exc.details
        ) from None


__all__ = ["StreamLimits", "StreamRoutes"]
