"""Leaders' offsets for many partitions: one batched internal request per
leader (not one per partition), bounded in size and concurrency, and the
leader's side of it on a real ReplicaManager."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.api.partition_offsets import (
    PARTITION_OFFSETS_BATCH_MAX,
    PARTITION_OFFSETS_CONCURRENT_MAX,
    PATH,
    LeaderOffsets,
    PartitionOffsets,
    add_partition_offsets_route,
    decode_offsets_answer,
    encode_offsets_request,
)
from lograft.api.services import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.errors import LograftError
from lograft.node.peer_client import PeerClient
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.api.one_broker import BROKER, OneBrokerMetadata

WIDE = 2_000


class Leaders:
    """Fake remote leaders behind one test server, at /b<id>: each answers the
    batched offsets request (high watermark = partition number) and counts
    what it was asked."""

    def __init__(self) -> None:
        self.requests: dict[int, int] = {}
        self.partitions: dict[int, int] = {}
        self.in_flight = 0
        self.in_flight_max = 0
        self.failing: set[int] = set()

    def app(self, brokers: list[int]) -> web.Application:
        app = web.Application()
        for b in brokers:
            app.router.add_post(f"/b{b}{PATH}", self._handler(b))
        return app

    def _handler(self, broker: int) -> Any:
        async def handle(request: web.Request) -> web.Response:
            self.requests[broker] = self.requests.get(broker, 0) + 1
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
            try:
                await asyncio.sleep(0.01)  # overlap with the others, if sent at once
                if broker in self.failing:
                    return web.Response(status=503, text="down")
                doc = await request.json()
                self.partitions[broker] = self.partitions.get(broker, 0) + len(doc["partitions"])
                return web.json_response(
                    {
                        "partitions": [
                            {
                                "log_start_offset": 0,
                                "high_watermark": p["partition"],
                                "log_end_offset": p["partition"] + 1,
                                "offset_for_timestamp": None,
                            }
                            for p in doc["partitions"]
                        ]
                    }
                )
            finally:
                self.in_flight -= 1

        return handle


class Metadata:
    """One topic whose partitions are led, in turn, by `leaders`."""

    def __init__(self, base_url: str, partitions: int, leaders: list[int]) -> None:
        self.base_url = base_url
        parts = {
            p: Assignment(tuple(leaders), tuple(leaders), leaders[p % len(leaders)], 1, 0)
            for p in range(partitions)
        }
        self.view = TopicView("wide", "id-wide", MappingProxyType(parts))

    def topic(self, name: str) -> TopicView | None:
        return self.view if name == "wide" else None

    def topics(self) -> list[TopicView]:
        return [self.view]

    def broker_url(self, broker_id: int) -> str | None:
        return f"{self.base_url}/b{broker_id}"

    def live_brokers(self) -> list[int]:
        return [1, 2, 3]


async def _ask(
    partitions: int, leaders: list[int], fake: Leaders
) -> tuple[dict[TopicPartition, Any], PartitionOffsets]:
    async with TestServer(fake.app(leaders)) as server:
        metadata = Metadata(str(server.make_url("")).rstrip("/"), partitions, leaders)
        calls = PeerClient(cluster_secret="s", metadata=metadata)
        offsets = PartitionOffsets(metadata, calls)
        tps = [TopicPartition("wide", p) for p in range(partitions)]
        try:
            return await offsets.offsets(tps, timeout_ms=10_000), offsets
        finally:
            await calls.close()


async def test_a_wide_describe_asks_each_leader_once() -> None:
    fake = Leaders()
    found, offsets = await _ask(WIDE, [2, 3], fake)
    assert fake.requests == {2: 1, 3: 1}
    assert offsets.requests_sent == {2: 1, 3: 1}
    assert fake.partitions == {2: WIDE // 2, 3: WIDE // 2}
    assert found[TopicPartition("wide", 7)] == LeaderOffsets(0, 7, 8, None)
    assert len(found) == WIDE


async def test_batches_are_bounded_in_size_and_concurrency() -> None:
    fake = Leaders()
    partitions = PARTITION_OFFSETS_BATCH_MAX * (PARTITION_OFFSETS_CONCURRENT_MAX + 2)
    found, _ = await _ask(partitions, [2], fake)
    assert fake.requests == {2: PARTITION_OFFSETS_CONCURRENT_MAX + 2}
    assert fake.in_flight_max <= PARTITION_OFFSETS_CONCURRENT_MAX
    assert all(isinstance(v, LeaderOffsets) for v in found.values())


async def test_a_failing_leader_fails_only_its_partitions() -> None:
    fake = Leaders()
    fake.failing.add(3)
    found, _ = await _ask(10, [2, 3], fake)
    assert isinstance(found[TopicPartition("wide", 0)], LeaderOffsets)
    failed = found[TopicPartition("wide", 1)]
    assert isinstance(failed, LograftError) and failed.retriable


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], OneBrokerMetadata]]:
    metadata = OneBrokerMetadata()
    metadata.set_topic("orders", 2, BROKER)
    metadata.set_topic("elsewhere", 1, leader=BROKER + 1)
    replicas = ReplicaManager(BROKER, tmp_path, BrokerSettings(min_insync_replicas=1))
    await replicas.start()
    replicas.apply_metadata(metadata.wanted())
    batch = build_batch([RecordInput(b"v")] * 5, timestamp_ms=1_000)
    await replicas.produce(TopicPartition("orders", 1), batch, Acks.ALL)
    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    add_partition_offsets_route(app, replicas, metadata)
    async with TestClient(TestServer(app)) as client:
        yield client, metadata
    await replicas.stop()


async def test_the_leader_answers_every_partition_in_order(leader: Any) -> None:
    client, _ = leader
    body = {
        "partitions": [
            {"topic": "orders", "partition": 1},
            {"topic": "elsewhere", "partition": 0},
            {"topic": "orders", "partition": 0},
            {"topic": "nope", "partition": 0},
        ],
        "timestamp": 500,
    }
    resp = await client.post(PATH, json=body, headers={"X-Lograft-Cluster-Secret": "s"})
    assert resp.status == 200, await resp.text()
    answers = (await resp.json())["partitions"]
    assert answers[0].pop("size_bytes") > 0  # the leader's log: five records
    assert answers[2].pop("size_bytes") >= 0
    assert answers[0] == {
        "log_start_offset": 0,
        "high_watermark": 5,
        "log_end_offset": 5,
        "offset_for_timestamp": 0,
    }
    assert answers[1]["error"]["code"] == "NOT_LEADER_OR_FOLLOWER"
    assert answers[2]["high_watermark"] == 0
    assert answers[3]["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION"


async def test_the_leader_refuses_an_oversized_batch(leader: Any) -> None:
    client, _ = leader
    body = {"partitions": [{"topic": "orders", "partition": 0}] * (PARTITION_OFFSETS_BATCH_MAX + 1)}
    resp = await client.post(PATH, json=body, headers={"X-Lograft-Cluster-Secret": "s"})
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "INVALID_REQUEST"


async def test_this_brokers_own_partitions_are_asked_in_process(tmp_path: Path) -> None:
    """The node's peer calls answer its own asks with the leader's function:
    no HTTP request, though this broker's address here leads nowhere."""
    metadata = OneBrokerMetadata()  # broker 1 at a made-up address
    metadata.set_topic("orders", 2, BROKER)
    replicas = ReplicaManager(BROKER, tmp_path, BrokerSettings(min_insync_replicas=1))
    await replicas.start()
    replicas.apply_metadata(metadata.wanted())
    await replicas.produce(
        TopicPartition("orders", 1),
        build_batch([RecordInput(b"v")] * 3, timestamp_ms=1_000),
        Acks.ALL,
    )
    sent: list[str] = []

    async def on_start(_session: Any, _ctx: Any, params: Any) -> None:
        sent.append(str(params.url))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    calls = PeerClient(cluster_secret="s", metadata=metadata, trace_configs=[trace])
    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    add_partition_offsets_route(app, replicas, metadata, calls)
    offsets = PartitionOffsets(metadata, calls)
    try:
        found = await offsets.offsets(
            [TopicPartition("orders", 1), TopicPartition("orders", 0)], timeout_ms=1_000
        )
    finally:
        await calls.close()
        await replicas.stop()
    one, zero = found[TopicPartition("orders", 1)], found[TopicPartition("orders", 0)]
    assert isinstance(one, LeaderOffsets) and one.size_bytes and one.size_bytes > 0
    assert one == LeaderOffsets(0, 3, 3, None, one.size_bytes)
    assert zero == LeaderOffsets(0, 0, 0, None, 0)
    assert sent == []
    assert offsets.requests_sent == {BROKER: 1}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{", "partition offsets: not valid JSON"),
        (b"[]", "partition offsets: Expected `object`, got `array`"),
        (b"{}", "partition offsets.partitions: required"),
        (b'{"partitions": [{"topic": 1, "partition": 0}]}', "partitions[0].topic: Expected `str`"),
        (b'{"partitions": [{"topic": "t", "partition": -1}]}', "partitions[0].partition: Expected"),
        (b'{"partitions": [{"topic": "t", "partition": true}]}', "partitions[0].partition:"),
        (
            b'{"partitions": [], "timestamp": -1}',
            "partition offsets.timestamp: Expected `int` >= 0",
        ),
        (b'{"partitions": [], "extra": 1}', "partition offsets.extra: unknown field"),
    ],
)
async def test_the_leader_refuses_a_bad_request_naming_the_field(
    leader: Any, body: bytes, says: str
) -> None:
    client, _ = leader
    resp = await client.post(PATH, data=body, headers={"X-Lograft-Cluster-Secret": "s"})
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == "INVALID_REQUEST"
    assert says in error["message"]


TP = TopicPartition("t", 0)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{", "not valid JSON"),
        (b'{"partitions": []}', "0 answers for 1 partitions"),
        (b'{"partitions": [{"high_watermark": "5"}]}', "partitions[0].high_watermark: Expected"),
        (b'{"partitions": [{"high_watermark": 5}]}', "needs log_start_offset"),
        (b'{"partitions": [{"error": {"code": 5}}]}', "needs a non-empty string code"),
    ],
)
def test_an_unreadable_answer_is_a_value_error_naming_the_field(raw: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        decode_offsets_answer([TP], raw)


def test_an_answer_round_trips() -> None:
    raw = orjson.dumps(
        {
            "partitions": [
                LeaderOffsets(1, 5, 6, None).to_dict(),
                {"error": {"code": "NOT_LEADER_OR_FOLLOWER", "message": "moved"}},
            ]
        }
    )
    ok, failed = decode_offsets_answer([TP, TP], raw)
    assert ok == LeaderOffsets(1, 5, 6, None)
    assert isinstance(failed, LograftError) and failed.code == "NOT_LEADER_OR_FOLLOWER"
    assert orjson.loads(encode_offsets_request([TP], 7)) == {
        "partitions": [{"topic": "t", "partition": 0}],
        "timestamp": 7,
    }
    assert orjson.loads(encode_offsets_request([TP], None)) == {
        "partitions": [{"topic": "t", "partition": 0}]
    }
