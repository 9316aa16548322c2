"""Replica fetches over a kept WebSocket (`PeerClient.stream_exchange`,
node/peer_stream.py, served by api/replica_stream.py): one stream reused, the
same answers and errors as the POST route, the node's request pipeline on the
upgrade (cluster secret, serving gate) and the gate on every message,
bounded messages both ways, a stale, broken or idle stream replaced, a leader
without the route sent POSTs, and every stream closed at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import ClientSession, WSMsgType, web
from aiohttp.test_utils import TestServer

from lograft.api.app import SECRET_HEADER, create_app
from lograft.api.internal_paths import REPLICA_STREAM_PATH
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.replica_stream import REQUEST_HEAD, ReplicaStreams
from lograft.api.request_pipeline import PIPELINE_KEY
from lograft.api.routes_internal import REPLICA_FETCH_PATH
from lograft.brokers.broker_stats import BrokerStats
from lograft.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    LograftError,
    NotLeaderOrFollowerError,
    PeerUnreachableError,
)
from lograft.node.peer_client import PeerClient
from lograft.protocol.fetch_wire import (
    FetchPartitionRequest,
    FetchPartitionResponse,
    PartitionFetch,
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
    decode_answer,
    encode_answer,
)

SECRET = "unit-test-cluster-secret"
UPGRADE_HEADERS = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZQ==",
}


def request(offset: int) -> bytes:
    return ReplicaFetchRequest(
        replica_id=2,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
        partitions=[FetchPartitionRequest("t", 0, PartitionFetch(offset))],
    ).to_json()


@dataclass
class FakeReplicas:
    """`ReplicaManager.replica_fetch` alone: answers each fetch with its offset
    as data, or raises what `fail` holds; `stall` holds a fetch."""

    fetched: list[int] = field(default_factory=list)
    fail: Exception | None = None
    stall: asyncio.Event | None = None
    data_bytes: int = 8

    async def replica_fetch(self, req: ReplicaFetchRequest) -> ReplicaFetchAnswer:
        offset = req.partitions[0].fetch.fetch_offset
        self.fetched.append(offset)
        if self.stall is not None:
            await self.stall.wait()
        if self.fail is not None:
            raise self.fail
        data = str(offset).encode().ljust(self.data_bytes, b".")
        return ReplicaFetchAnswer(
            partitions=[FetchPartitionResponse("t", 0, offset + 1, 0, offset + 1, data)]
        )


class Brokers:
    def __init__(self, urls: dict[int, str]) -> None:
        self.urls = urls

    def broker_url(self, broker_id: int) -> str | None:
        return self.urls.get(broker_id)


@dataclass
class Leader:
    replicas: FakeReplicas
    streams: ReplicaStreams
    client: PeerClient
    server: TestServer
    refusal: list[LograftError | None]
    posts: list[bytes]


def leader_app(
    replicas: FakeReplicas,
    refusal: list[LograftError | None],
    posts: list[bytes],
    *,
    with_stream: bool = True,
    idle_timeout_s: float = 30.0,
) -> tuple[web.Application, ReplicaStreams]:
    app = create_app(
        cluster_secret=SECRET,
        request_bytes_max=64 * 1024,
        ready=lambda: (True, {}),
        serving=lambda: refusal[0],
        request_metrics=RequestMetrics(),
    )
    streams = ReplicaStreams(
        replicas,  # type: ignore[arg-type]
        message_bytes_max=64 * 1024,
        idle_timeout_s=idle_timeout_s,
        stats=BrokerStats(topics_max=10),
    )
    if with_stream:
        streams.add_to(app)

    async def post(req: web.Request) -> web.Response:
        body = await req.read()
        posts.append(body)
        answer = await replicas.replica_fetch(ReplicaFetchRequest.from_json(body))
        return web.Response(body=encode_answer(answer))

    app.router.add_post(REPLICA_FETCH_PATH, post)
    return app, streams


async def start_leader(**kwargs: Any) -> Leader:
    replicas = FakeReplicas()
    refusal: list[LograftError | None] = [None]
    posts: list[bytes] = []
    app, streams = leader_app(replicas, refusal, posts, **kwargs)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    client = PeerClient(cluster_secret=SECRET, metadata=Brokers({1: url}), answer_bytes_max=4096)
    return Leader(replicas, streams, client, server, refusal, posts)


@pytest.fixture
async def leader() -> AsyncIterator[Leader]:
    lead = await start_leader()
    try:
        yield lead
    finally:
        if lead.replicas.stall is not None:
            lead.replicas.stall.set()
        await lead.client.close()
        await lead.server.close()


async def fetch(lead: Leader, offset: int, timeout_ms: int = 5_000) -> bytes:
    return await lead.client.stream_exchange(
        1, REPLICA_FETCH_PATH, request(offset), timeout_ms=timeout_ms
    )


def data_of(answer: bytes) -> bytes:
    return decode_answer(answer).partitions[0].data


async def until(condition: Any, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)  # polling a condition, not a sync point


async def test_fetches_share_one_stream_and_get_the_post_routes_answers(leader: Leader) -> None:
    for offset in range(5):
        assert data_of(await fetch(leader, offset)) == str(offset).encode().ljust(8, b".")
    assert leader.client._streams[1].streams_opened == 1
    assert leader.replicas.fetched == [0, 1, 2, 3, 4]
    assert leader.streams.served == 5
    assert leader.posts == []  # none went as a POST
    stats = leader.streams.stats
    assert stats is not None
    assert (stats.replica_streams_open, stats.replica_stream_fetches) == (1, 5)
    await leader.client.close()
    await until(lambda: stats.replica_streams_open == 0)


async def test_a_fetch_error_is_the_error_the_post_route_answers(leader: Leader) -> None:
    leader.replicas.fail = NotLeaderOrFollowerError("not here", leader_id=3)
    with pytest.raises(NotLeaderOrFollowerError) as info:
        await fetch(leader, 1)
    assert info.value.details == {"leader_id": 3}
    leader.replicas.fail = None
    # An error answer leaves the stream usable.
    assert data_of(await fetch(leader, 2)).startswith(b"2")
    assert leader.client._streams[1].streams_opened == 1


async def test_a_request_that_does_not_parse_is_invalid_and_the_stream_lives_on(
    leader: Leader,
) -> None:
    with pytest.raises(InvalidRequestError):
        await leader.client.stream_exchange(1, REPLICA_FETCH_PATH, b"{not json", timeout_ms=5_000)
    assert data_of(await fetch(leader, 3)).startswith(b"3")
    assert leader.client._streams[1].streams_opened == 1


async def test_an_unexpected_failure_is_an_error_answer_not_a_lost_stream(leader: Leader) -> None:
    leader.replicas.fail = RuntimeError("bug")
    with pytest.raises(LograftError) as info:
        await fetch(leader, 1)
    assert "internal error: RuntimeError" in info.value.message
    leader.replicas.fail = None
    assert data_of(await fetch(leader, 2)).startswith(b"2")


async def test_the_serving_gate_is_checked_for_every_message(leader: Leader) -> None:
    assert data_of(await fetch(leader, 0)).startswith(b"0")
    leader.refusal[0] = BrokerNotAvailableError("catching up")
    with pytest.raises(BrokerNotAvailableError):
        await fetch(leader, 1)
    assert leader.replicas.fetched == [0]  # refused before the fetch
    leader.refusal[0] = None
    assert data_of(await fetch(leader, 2)).startswith(b"2")


async def test_the_upgrade_needs_the_cluster_secret(leader: Leader) -> None:
    async with ClientSession() as session:
        for headers in ({}, {SECRET_HEADER: "wrong"}):
            resp = await session.get(
                leader.server.make_url(REPLICA_STREAM_PATH),
                headers={**headers, **UPGRADE_HEADERS},
            )
            assert resp.status == 401
            assert (await resp.json())["error"]["code"] == "SASL_AUTHENTICATION_FAILED"
    assert not leader.streams.open


async def test_a_leader_catching_up_refuses_the_upgrade_and_gets_a_post(leader: Leader) -> None:
    leader.refusal[0] = BrokerNotAvailableError("catching up")
    with pytest.raises(BrokerNotAvailableError):
        await fetch(leader, 1)  # the POST's answer: the error the leader means
    assert leader.client._streams[1].refused()
    leader.refusal[0] = None
    # Within RETRY_UPGRADE_S the fetches go as POSTs.
    assert data_of(await fetch(leader, 2)).startswith(b"2")
    assert len(leader.posts) == 1 and leader.streams.served == 0


async def test_a_leader_without_the_stream_route_is_sent_posts() -> None:
    lead = await start_leader(with_stream=False)
    try:
        for offset in range(3):
            assert data_of(await fetch(lead, offset)).startswith(str(offset).encode())
        assert len(lead.posts) == 3
        assert lead.client._streams[1].streams_opened == 0
    finally:
        await lead.client.close()
        await lead.server.close()


async def test_an_answer_past_the_bound_is_unreachable_and_the_stream_replaced(
    leader: Leader,
) -> None:
    leader.replicas.data_bytes = 5000  # the client's answer_bytes_max is 4096
    with pytest.raises(PeerUnreachableError) as info:
        await fetch(leader, 1)
    assert info.value.details == {"leader_id": 1}
    assert not leader.client._streams[1].connected
    leader.replicas.data_bytes = 8
    assert data_of(await fetch(leader, 2)).startswith(b"2")
    assert leader.client._streams[1].streams_opened == 2


async def test_a_request_past_the_leaders_bound_closes_the_stream(leader: Leader) -> None:
    huge = b'{"pad": "' + b"x" * 70_000 + b'"}'
    with pytest.raises(PeerUnreachableError) as info:
        await leader.client.stream_exchange(1, REPLICA_FETCH_PATH, huge, timeout_ms=5_000)
    assert "code 1009" in info.value.message  # said, and not sent again
    assert leader.client._streams[1].streams_opened == 1
    assert leader.replicas.fetched == []
    await until(lambda: not leader.streams.open)
    assert data_of(await fetch(leader, 2)).startswith(b"2")


async def test_each_fetch_is_timed_and_counted_as_the_post_routes(leader: Leader) -> None:
    metrics = leader.server.app[PIPELINE_KEY].metrics
    assert metrics is not None
    for offset in range(3):
        await fetch(leader, offset)
    leader.replicas.fail = NotLeaderOrFollowerError("not here", leader_id=3)
    with pytest.raises(NotLeaderOrFollowerError):
        await fetch(leader, 3)
    times = metrics.routes[("POST", REPLICA_FETCH_PATH)]
    assert times.total.snapshot().buckets[-1] == ("+Inf", 4.0)
    assert metrics.errors == {("POST", REPLICA_FETCH_PATH, "NOT_LEADER_OR_FOLLOWER"): 1}
    assert ("GET", REPLICA_STREAM_PATH) not in metrics.routes  # the stream's life is not timed


async def test_an_upgrade_with_a_body_is_refused(leader: Leader) -> None:
    async with ClientSession() as session:
        resp = await session.get(
            leader.server.make_url(REPLICA_STREAM_PATH),
            data=b"x" * 100,
            headers={SECRET_HEADER: SECRET, **UPGRADE_HEADERS},
        )
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == "INVALID_REQUEST"
    assert not leader.streams.open


async def test_pings_alone_do_not_keep_a_stream_open() -> None:
    lead = await start_leader(idle_timeout_s=0.3)
    try:
        url = lead.server.make_url(REPLICA_STREAM_PATH)
        async with (
            ClientSession() as session,
            session.ws_connect(url, headers={SECRET_HEADER: SECRET}) as ws,
            asyncio.timeout(5),
        ):
            while not ws.closed:
                await ws.ping()
                try:
                    msg = await ws.receive(timeout=0.1)
                except TimeoutError:
                    continue  # the pong is aiohttp's; ping again
                if msg.type is WSMsgType.CLOSE:
                    assert (msg.data, msg.extra) == (1000, "idle")
                    break
        await until(lambda: not lead.streams.open)
    finally:
        await lead.client.close()
        await lead.server.close()


async def test_shutdown_aborts_a_stream_whose_follower_reads_nothing() -> None:
    """An answer larger than the socket buffers, to a follower that stopped
    reading: the leader's shutdown does not wait for it."""
    lead = await start_leader()
    lead.replicas.data_bytes = 32 * 1024 * 1024
    try:
        url = lead.server.make_url(REPLICA_STREAM_PATH)
        async with ClientSession() as session:
            ws = await session.ws_connect(url, headers={SECRET_HEADER: SECRET}, max_msg_size=0)
            await ws.send_bytes(REQUEST_HEAD.pack(1) + request(7))  # never read
            await until(lambda: lead.replicas.fetched == [7])
            async with asyncio.timeout(10):
                await lead.server.close()
            assert not lead.streams.open
            await ws.close()
    finally:
        await lead.client.close()


async def test_a_peer_that_moved_gets_no_new_stream_at_its_old_address() -> None:
    old, new = await start_leader(), await start_leader()
    try:
        brokers = old.client.metadata
        assert isinstance(brokers, Brokers)
        old.replicas.stall = asyncio.Event()
        call = asyncio.create_task(fetch(old, 1))
        await until(lambda: old.replicas.fetched == [1])
        brokers.urls[1] = str(new.server.make_url("")).rstrip("/")  # broker 1 moved
        assert data_of(await fetch(old, 2)).startswith(b"2")  # to its new address
        with pytest.raises(PeerUnreachableError):
            await call  # its stream closed under it; not reopened to the old address
        old.replicas.stall.set()
        assert new.replicas.fetched == [2]
        await old.client.close()
        await until(lambda: not old.streams.open)
    finally:
        await old.client.close()
        await new.client.close()
        await old.server.close()
        await new.server.close()


async def test_a_timeout_closes_the_stream_and_the_next_fetch_opens_one(leader: Leader) -> None:
    leader.replicas.stall = asyncio.Event()
    with pytest.raises(PeerUnreachableError) as info:
        await fetch(leader, 1, timeout_ms=100)
    assert "did not answer" in info.value.message
    assert not leader.client._streams[1].connected
    leader.replicas.stall.set()
    leader.replicas.stall = None
    assert data_of(await fetch(leader, 2)).startswith(b"2")
    assert leader.client._streams[1].streams_opened == 2


async def test_a_cancelled_fetch_leaves_no_stream_half_read(leader: Leader) -> None:
    leader.replicas.stall = asyncio.Event()
    call = asyncio.create_task(fetch(leader, 1))
    await until(lambda: leader.replicas.fetched == [1])
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not leader.client._streams[1].connected
    # The old fetch's late answer goes to a closed stream, not to the next fetch.
    leader.replicas.stall.set()
    leader.replicas.stall = None
    assert data_of(await fetch(leader, 2)).startswith(b"2")


async def test_a_stream_the_leader_closed_idle_is_replaced_and_the_fetch_sent_once_more() -> None:
    lead = await start_leader(idle_timeout_s=0.2)
    try:
        assert data_of(await fetch(lead, 0)).startswith(b"0")
        await until(lambda: not lead.streams.open)  # the leader closed it, idle
        assert data_of(await fetch(lead, 1)).startswith(b"1")
        assert lead.client._streams[1].streams_opened == 2
        assert lead.replicas.fetched == [0, 1]
    finally:
        await lead.client.close()
        await lead.server.close()


async def test_a_text_message_or_one_without_an_id_closes_the_stream(leader: Leader) -> None:
    url = leader.server.make_url(REPLICA_STREAM_PATH)
    async with ClientSession() as session:
        for send, code in ((b"", 1002), ("hello", 1003)):
            async with session.ws_connect(url, headers={SECRET_HEADER: SECRET}) as ws:
                if isinstance(send, str):
                    await ws.send_str(send)
                else:
                    await ws.send_bytes(send)
                msg = await ws.receive()
                assert msg.type is WSMsgType.CLOSE and msg.data == code
    assert leader.replicas.fetched == []


async def test_shutdown_closes_open_streams() -> None:
    lead = await start_leader()
    try:
        lead.replicas.stall = asyncio.Event()
        assert not lead.streams.open
        call = asyncio.create_task(fetch(lead, 1))
        await until(lambda: lead.replicas.fetched == [1])
        assert len(lead.streams.open) == 1
        lead.replicas.stall.set()
        await call
        async with asyncio.timeout(5):
            await lead.server.close()  # would wait out the idle timeout (30 s) otherwise
        assert not lead.streams.open
    finally:
        await lead.client.close()
