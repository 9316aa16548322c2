"""Remote reads of streams share a few long-polls per leader (`stream_polls`),
served by the leader's `POST /internal/v1/stream-fetch` (`stream_fetch`).

The leader is a real ReplicaManager behind the real route; the reading side
is a `RemoteReads` whose requests are counted as they go out and come back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from lograft.api.app import SECRET_HEADER, create_app
from lograft.api.stream.fetch import PATH, ServeLimits, add_stream_fetch_route
from lograft.api.stream.polls import PollLimits, RemoteReads
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import BrokerNotAvailableError, UnknownTopicOrPartitionError
from lograft.node.peer_client import PeerClient
from lograft.protocol.topic_partition import TopicPartition
from tests.raft_support import free_port
from tests.unit.api.test_routes_stream import produce, start_replicas

SECRET = "s"
LEADER = 2
WAIT_S = 10.0  # generous: other engineers load this machine
POLLS = PollLimits(
    polls_per_leader_max=2, reads_max=100, bytes_max=1 << 20, wait_ms=300, timeout_margin_ms=5_000
)
SERVE = ServeLimits(reads_max=100, bytes_max=1 << 20, read_bytes_max=1 << 20)


def tp(p: int) -> TopicPartition:
    return TopicPartition("orders", p)


@dataclass
class Leader:
    url: str
    rm: ReplicaManager
    in_flight: int = 0  # stream-fetch requests sent and not yet answered
    in_flight_max: int = 0
    sent: int = 0


@dataclass
class Env:
    leader: Leader
    reads: RemoteReads
    leads: dict[TopicPartition, bool]


@pytest.fixture
async def make_env(tmp_path) -> AsyncIterator[Callable[..., Any]]:
    """`await make_env(limits=...)`: broker 2 leading `orders` (3 partitions) and a
    RemoteReads of it whose every request is counted."""
    cleanup: list[Callable[[], Any]] = []

    async def make(limits: PollLimits = POLLS, url: str | None = None) -> Env:
        rm = await start_replicas(LEADER, tmp_path / f"leader-{len(cleanup)}")
        app = create_app(cluster_secret=SECRET, request_bytes_max=1 << 20, ready=lambda: (True, {}))
        add_stream_fetch_route(app, rm, SERVE)
        server = TestServer(app)
        await server.start_server()
        leader = Leader(url or str(server.make_url("")).rstrip("/"), rm)

        async def started(*_: Any) -> None:
            leader.sent += 1
            leader.in_flight += 1
            leader.in_flight_max = max(leader.in_flight_max, leader.in_flight)

        async def ended(*_: Any) -> None:
            leader.in_flight -= 1

        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(started)
        trace.on_request_end.append(ended)
        trace.on_request_exception.append(ended)
        calls = PeerClient(cluster_secret=SECRET, trace_configs=[trace])
        leads = {tp(p): True for p in range(3)}
        reads = RemoteReads(calls, limits, lambda _leader, t: leads[t])

        async def close() -> None:
            await reads.close()
            await calls.close()
            await server.close()
            await rm.stop()

        cleanup.append(close)
        return Env(leader, reads, leads)

    yield make
    for close in reversed(cleanup):
        await close()


def read(env: Env, p: int, offset: int = 0, max_bytes: int = 1 << 16) -> asyncio.Task[Any]:
    return asyncio.create_task(env.reads.read(LEADER, env.leader.url, tp(p), offset, max_bytes))


async def eventually(predicate: Callable[[], Any], what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_many_streams_reads_of_one_leader_share_at_most_polls_per_leader_max(make_env):
    env = await make_env(limits=replace(POLLS, reads_max=10))
    # 3 partitions x 20 streams, each stream with its own share of max_bytes so
    # that no two reads are the same: 60 reads, 10 per poll, 2 polls at once.
    tasks = [read(env, p, max_bytes=1000 + s) for p in range(3) for s in range(20)]
    await eventually(lambda: env.reads.reads_waiting() == 60, "every read queued")
    # Rounds of empty long-polls go by, every read in one of them.
    await eventually(lambda: env.leader.sent >= 12, "a few rounds of polls")
    assert not any(t.done() for t in tasks)
    for p in range(3):
        await produce(env.leader.rm, p, [f"v{p}"])
    async with asyncio.timeout(WAIT_S):
        answers = await asyncio.gather(*tasks)
    assert all(a.data and a.high_watermark == 1 for a in answers)
    assert env.leader.in_flight_max == POLLS.polls_per_leader_max
    await eventually(lambda: env.reads.polls_in_flight() == 0, "the polls to end")


async def test_reads_that_agree_share_one_entry_and_one_answer(make_env):
    env = await make_env()
    tasks = [read(env, 0) for _ in range(10)]
    await eventually(lambda: env.leader.sent >= 1, "a poll")
    assert env.reads.reads_waiting() == 1
    await produce(env.leader.rm, 0, ["a"])
    async with asyncio.timeout(WAIT_S):
        answers = await asyncio.gather(*tasks)
    assert len({id(a) for a in answers}) == 1


async def test_reads_whose_stream_went_away_leave_and_their_polls_end(make_env):
    env = await make_env()
    tasks = [read(env, p, max_bytes=1000 + s) for p in range(3) for s in range(5)]
    await eventually(lambda: env.reads.polls_in_flight() == 2, "polls in flight")
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await eventually(
        lambda: env.reads.reads_waiting() == 0 and env.reads.polls_in_flight() == 0,
        "nothing left: no entry, no poll",
    )
    sent = env.leader.sent
    await asyncio.sleep(3 * POLLS.wait_ms / 1000)  # an observation window, not a sync
    assert env.leader.sent == sent, "nobody reads: nothing is sent"


@pytest.mark.parametrize(
    "limits",
    [
        replace(POLLS, polls_per_leader_max=1, reads_max=1),
        # All three in one poll, but its answer has room for one read's data.
        replace(POLLS, polls_per_leader_max=1, bytes_max=1),
    ],
    ids=["reads_max", "bytes_max"],
)
async def test_reads_go_out_in_turn_when_polls_are_cut_short(make_env, limits):
    # Reads with data go out in arrival order and are served once each.
    env = await make_env(limits=limits)
    for p in range(3):
        await produce(env.leader.rm, p, [f"v{p}"])
    served: list[int] = []

    async def one(p: int) -> None:
        await env.reads.read(LEADER, env.leader.url, tp(p), 0, 1 << 16)
        served.append(p)

    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*(one(p) for p in (2, 0, 1)))
    assert served == [2, 0, 1]
    assert env.leader.sent == 3


async def test_reads_of_idle_partitions_do_not_keep_newer_reads_waiting(make_env):
    # Each poll carries 2 reads, one poll at a time. Partitions 0 and 1 stay
    # empty; partition 2's read comes last, and must still go out in its turn.
    env = await make_env(limits=replace(POLLS, polls_per_leader_max=1, reads_max=2))
    idle = [read(env, 0), read(env, 1)]
    await eventually(lambda: env.leader.sent >= 1, "the idle reads in a poll")
    await produce(env.leader.rm, 2, ["v"])
    async with asyncio.timeout(WAIT_S):
        assert (await read(env, 2)).data
    assert not any(t.done() for t in idle)


async def test_a_leader_that_cannot_be_reached_fails_every_read_of_the_poll(make_env):
    env = await make_env(url=f"http://127.0.0.1:{free_port()}")
    tasks = [read(env, p) for p in range(3)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, BrokerNotAvailableError) for r in results), results
    assert env.reads.reads_waiting() == 0 and env.reads.polls_in_flight() == 0


async def test_a_read_is_answered_empty_once_the_metadata_names_another_leader(make_env):
    env = await make_env()
    task = read(env, 0)
    await eventually(lambda: env.leader.sent >= 2, "a poll answered empty and sent again")
    assert not task.done()
    env.leads[tp(0)] = False
    async with asyncio.timeout(WAIT_S):
        answer = await task
    assert answer.data == b"" and answer.error is None


async def test_an_error_of_one_partition_answers_its_read_only(make_env):
    env = await make_env()
    env.leads[tp(7)] = True
    good = read(env, 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        async with asyncio.timeout(WAIT_S):
            await read(env, 7)
    assert not good.done()
    await produce(env.leader.rm, 0, ["a"])
    async with asyncio.timeout(WAIT_S):
        assert (await good).data


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{", 400),
        ({"max_wait_ms": 0, "max_bytes": 1, "reads": []}, 400),
        ({"max_wait_ms": 0, "max_bytes": (1 << 20) + 1, "reads": [{}]}, 400),
        (
            {
                "max_wait_ms": 0,
                "max_bytes": 1,
                "reads": [{"topic": "orders", "partition": 0, "offset": 0, "max_bytes": 1}] * 101,
            },
            400,
        ),
        (
            {
                "max_wait_ms": 0,
                "max_bytes": 1,
                "reads": [{"topic": "orders", "partition": 0, "offset": -1, "max_bytes": 1}],
            },
            400,
        ),
        (
            {
                "max_wait_ms": 0,
                "max_bytes": 1,
                "reads": [{"topic": "orders", "partition": 0, "offset": 0, "max_bytes": 1 << 30}],
            },
            400,
        ),
        (
            {
                "max_wait_ms": 0,
                "max_bytes": 1,
                "reads": [{"topic": "orders", "partition": 0, "offset": 0, "max_bytes": 1}],
            },
            200,
        ),
    ],
)
async def test_the_leader_bounds_what_one_request_asks(make_env, body, status):
    env = await make_env()
    async with (
        aiohttp.ClientSession(headers={SECRET_HEADER: SECRET}) as http,
        http.post(
            env.leader.url + PATH, **({"data": body} if isinstance(body, bytes) else {"json": body})
        ) as resp,
    ):
        assert resp.status == status, await resp.text()
        if status == 400:
            assert (await resp.json())["error"]["code"] == "INVALID_REQUEST"


async def test_the_leader_answers_only_nodes_of_the_cluster(make_env):
    env = await make_env()
    async with aiohttp.ClientSession() as http, http.post(env.leader.url + PATH, json={}) as resp:
        assert resp.status == 401
