"""A JSON produce through a node that leads only some partitions: one
forwarded request per leader, answered per record as before."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.api.routes_data import DataLimits, DataRoutes
from lograft.api.services import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import NotLeaderOrFollowerError
from lograft.node.peer_client import PeerClient
from lograft.protocol.produce_wire import AppendResult, decode_request, encode_response
from lograft.protocol.topic_partition import TopicPartition

# Partition -> leader: this node (1) leads 0, broker 2 leads 1, 2 and 5,
# broker 3 (unreachable) leads 3 and 4.
LEADERS = {0: 1, 1: 2, 2: 2, 3: 3, 4: 3, 5: 2}


@dataclass
class FakeLeader:
    """Broker 2: records each forwarded request; refuses partition 5."""

    requests: list[list[int]] = field(default_factory=list)
    # When set, the answer to every request (a whole-request refusal).
    refusal: tuple[int, bytes] | None = None

    async def handle(self, request: web.Request) -> web.Response:
        req = decode_request(await request.read())
        self.requests.append([b.partition for b in req.partitions])
        if self.refusal is not None:
            return web.Response(status=self.refusal[0], body=self.refusal[1])
        outcomes = [
            (
                b.partition,
                NotLeaderOrFollowerError("moved", topic="t", partition=5)
                if b.partition == 5
                else AppendResult(10 * b.partition, 10 * b.partition, -1),
            )
            for b in req.partitions
        ]
        return web.Response(body=encode_response(outcomes), content_type="application/json")


class Metadata:
    def __init__(self, urls: dict[int, str]) -> None:
        self.urls = urls
        self.view = TopicView(
            "t",
            "id-t",
            {p: Assignment((1, 2, 3), (1, 2, 3), leader, 1, 0) for p, leader in LEADERS.items()},
        )

    def topic(self, name: str) -> TopicView | None:
        return self.view if name == "t" else None

    def topics(self) -> list[TopicView]:
        return [self.view]

    def broker_url(self, broker_id: int) -> str | None:
        return self.urls.get(broker_id)

    def live_brokers(self) -> list[int]:
        return [1, 2, 3]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _node(
    tmp_path, leader: FakeLeader, limits: DataLimits
) -> AsyncIterator[tuple[TestClient, FakeLeader]]:
    leader_app = web.Application()
    leader_app.router.add_post("/internal/v1/produce", leader.handle)
    async with TestServer(leader_app, host="127.0.0.1") as leader_srv:
        md = Metadata(
            {
                2: str(leader_srv.make_url("")).rstrip("/"),
                3: f"http://127.0.0.1:{_closed_port()}",
            }
        )
        rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
        await rm.start()
        rm.apply_metadata({TopicPartition("t", 0): PartitionMeta("id-t", md.view.partitions[0])})
        app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
        calls = PeerClient(cluster_secret="s", metadata=md)
        try:
            DataRoutes(rm, md, calls, limits).add_to(app)
            async with TestClient(TestServer(app, host="127.0.0.1")) as client:
                yield client, leader
        finally:
            await calls.close()
        await rm.stop()


@pytest.fixture
async def node(tmp_path) -> AsyncIterator[tuple[TestClient, FakeLeader]]:
    async for pair in _node(tmp_path, FakeLeader(), DataLimits()):
        yield pair


@pytest.fixture
async def small_node(tmp_path) -> AsyncIterator[tuple[TestClient, FakeLeader]]:
    # Room for about two one-record batches per forwarded request.
    async for pair in _node(tmp_path, FakeLeader(), DataLimits(forward_request_bytes_max=2400)):
        yield pair


def _records(partitions: list[int]) -> bytes:
    return orjson.dumps({"records": [{"value": "v", "partition": p} for p in partitions]})


async def test_one_request_per_leader_and_answers_per_record(node) -> None:
    client, leader = node
    # acks=1: the local partition's followers are not running.
    url = "/v1/topics/t/records?acks=1"
    resp = await client.post(url, data=_records([5, 0, 1, 3, 2, 1, 4]))
    assert resp.status == 207
    offsets = (await resp.json())["offsets"]
    assert leader.requests == [[5, 1, 2]]  # one request, partitions in first-seen order
    assert offsets[0]["error"]["code"] == "NOT_LEADER_OR_FOLLOWER"
    assert offsets[1] == {"partition": 0, "offset": 0}
    assert offsets[2] == {"partition": 1, "offset": 10}
    assert offsets[4] == {"partition": 2, "offset": 20}
    assert offsets[5] == {"partition": 1, "offset": 11}
    for n, p in ((3, 3), (6, 4)):
        # Broker 3 is unreachable: each of its partitions gets today's error.
        err = offsets[n]["error"]
        assert err["code"] == "LEADER_NOT_AVAILABLE" and err["details"] == {"leader_id": 3}
        assert err["message"].startswith(f"could not reach broker 3, the leader of t-{p}: ")


async def test_a_large_produce_is_cut_at_the_leaders_body_limit(small_node) -> None:
    client, leader = small_node
    big = orjson.dumps({"records": [{"value": "v" * 500, "partition": p} for p in (1, 2, 5)]})
    resp = await client.post("/v1/topics/t/records?acks=1", data=big)
    assert resp.status == 207
    assert leader.requests == [[1, 2], [5]]


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (
            413,
            b'{"error": {"code": "MESSAGE_TOO_LARGE", "message": "body too large"}}',
            {"code": "MESSAGE_TOO_LARGE", "message": "body too large", "retriable": False},
        ),
        (
            502,
            b"<html>bad gateway</html>",
            {
                "code": "UNKNOWN_SERVER_ERROR",
                "message": "broker 2 answered 502",
                "retriable": False,
            },
        ),
    ],
)
async def test_a_refused_request_fails_each_of_its_partitions(node, status, body, error) -> None:
    client, leader = node
    leader.refusal = (status, body)
    resp = await client.post("/v1/topics/t/records?acks=1", data=_records([1, 0, 2]))
    assert resp.status == 207
    offsets = (await resp.json())["offsets"]
    assert leader.requests == [[1, 2]]
    assert offsets[0] == {"partition": 1, "error": error}
    assert offsets[2] == {"partition": 2, "error": error}
    assert offsets[1] == {"partition": 0, "offset": 0}


@pytest.fixture
async def spreading_node(tmp_path) -> AsyncIterator[tuple[TestClient, FakeLeader]]:
    limits = DataLimits(keyless_partitions="all")
    async for pair in _node(tmp_path, FakeLeader(), limits):
        yield pair


KEYLESS = orjson.dumps({"records": [{"value": "a"}, {"value": "b"}]})


async def _keyless_partitions(client: TestClient, requests: int) -> list[int]:
    """The partition each of `requests` keyless produces went to."""
    got = []
    for _ in range(requests):
        resp = await client.post("/v1/topics/t/records?acks=1", data=KEYLESS)
        body = await resp.json()
        # A partition whose leader refused or is unreachable: an error naming it.
        offsets = body["offsets"] if "offsets" in body else body["error"]["details"]["offsets"]
        assert offsets[0]["partition"] == offsets[1]["partition"], offsets
        got.append(offsets[0]["partition"])
    return got


async def test_keyless_records_stay_on_the_partition_led_here(node) -> None:
    client, leader = node
    assert await _keyless_partitions(client, len(LEADERS)) == [0] * len(LEADERS)
    assert leader.requests == []  # nothing forwarded


async def test_keyless_records_spread_over_every_partition_with_rule_all(spreading_node) -> None:
    client, leader = spreading_node
    got = await _keyless_partitions(client, len(LEADERS))
    assert sorted(got) == sorted(LEADERS)  # each partition once, round-robin
    assert sorted(p for [p] in leader.requests) == [1, 2, 5]  # broker 2's went there
