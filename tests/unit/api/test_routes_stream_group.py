"""Streams that consume as members of a consumer group, on one broker with the
real group coordinator runtime and group endpoints (aiohttp test server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.api.partition_offsets import PartitionOffsets, add_partition_offsets_route
from lograft.api.routes_data import DataRoutes
from lograft.api.routes_groups import GroupRoutes
from lograft.api.stream.limits import StreamLimits
from lograft.api.stream.routes import StreamRoutes
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.node.peer_client import PeerClient
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from tests.sse_support import SseEvent, SseParser
from tests.unit.api.one_broker import BROKER, OneBrokerMetadata

TOPIC = "orders"
PARTITIONS = 4
WAIT_S = 15.0  # generous: other engineers load this machine
HEARTBEAT_MS = 100
COMMIT_MS = 100
LIMITS = StreamLimits(heartbeat_interval_ms=500, liveness_check_ms=50)


@dataclass
class Server:
    client: TestClient[Any, Any]
    replicas: ReplicaManager
    routes: StreamRoutes

    async def produce(self, partition: int, values: list[str]) -> None:
        batch = build_batch(
            [RecordInput(key=None, value=v.encode()) for v in values],
            timestamp_ms=1_700_000_000_000,
        )
        await self.replicas.produce(TopicPartition(TOPIC, partition), batch, Acks.LEADER)

    async def get(self, path: str) -> Any:
        resp = await self.client.get(path)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    async def committed(self, group: str) -> dict[int, int]:
        doc = await self.get(f"/v1/groups/{group}/offsets?topics={TOPIC}")
        return {o["partition"]: o["offset"] for o in doc["offsets"]}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    metadata = OneBrokerMetadata()
    metadata.set_topic(TOPIC, PARTITIONS)
    replicas = ReplicaManager(BROKER, tmp_path, BrokerSettings(min_insync_replicas=1))
    await replicas.start()
    replicas.apply_metadata(metadata.wanted())
    settings = GroupRuntimeSettings(
        offsets_topic_num_partitions=1,
        group_heartbeat_interval_ms=HEARTBEAT_MS,
        session_timeout_ms=5_000,
    )
    runtime = GroupCoordinatorRuntime(replicas, metadata, settings)

    async def create_offsets_topic() -> None:
        metadata.set_topic(CONSUMER_OFFSETS_TOPIC, settings.offsets_topic_num_partitions)
        replicas.apply_metadata(metadata.wanted())

    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    calls = PeerClient(cluster_secret="s", metadata=metadata)
    offsets = PartitionOffsets(metadata, calls)
    GroupRoutes(runtime, metadata, calls, create_offsets_topic, offsets).add_to(app)
    DataRoutes(replicas, metadata, calls).add_to(app)
    # As the node does: this broker answers its own offsets asks in process.
    add_partition_offsets_route(app, replicas, metadata, calls)
    routes = StreamRoutes(replicas, metadata, LIMITS, calls=calls, poll_calls=calls)
    routes.add_to(app)
    async with TestClient(TestServer(app)) as client:
        metadata.url = str(client.make_url("")).rstrip("/")
        yield Server(client, replicas, routes)
    await calls.close()
    await runtime.stop()
    await replicas.stop()


class GroupStream:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.parser = SseParser()
        self.events: list[SseEvent] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while chunk := await self.resp.content.readany():
            self.events.extend(self.parser.feed(chunk))

    def records(self) -> list[dict[str, Any]]:
        errors = [e for e in self.events if e.name == "error"]
        assert not errors, errors[0].data
        return [e.json() for e in self.events if e.name == "message" and e.data is not None]

    def assignments(self) -> list[dict[str, Any]]:
        """Every assignment event the stream sent, in order."""
        return [e.json() for e in self.events if e.name == "assignment"]

    def partitions(self) -> list[int] | None:
        """The latest assignment the stream announced."""
        found = self.assignments()
        return found[-1]["partitions"] if found else None

    async def close(self) -> None:
        self.resp.close()
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)


async def close_all(server: Server, *streams: GroupStream) -> None:
    """Close the streams and wait until the server has ended them (and they left)."""
    for stream in streams:
        await stream.close()
    await eventually(lambda: not server.routes.sessions, "the streams to end")


async def open_group_stream(server: Server, group: str, **params: str) -> GroupStream:
    query = "&".join(
        f"{k}={v}"
        for k, v in {"group": group, "format": "string", "commit_interval_ms": COMMIT_MS}.items()
    )
    extra = "".join(f"&{k}={v}" for k, v in params.items())
    resp = await server.client.get(f"/v1/topics/{TOPIC}/stream?{query}{extra}")
    assert resp.status == 200, await resp.text()
    return GroupStream(resp)


async def eventually(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def eventually_async(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        value = await predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_member_streams_its_partitions_commits_and_leaves(server):
    for p in range(PARTITIONS):
        await server.produce(p, [f"p{p}-a", f"p{p}-b"])
    stream = await open_group_stream(server, "g1", auto_offset_reset="earliest")
    await eventually(lambda: stream.partitions() == list(range(PARTITIONS)), "all partitions")
    await eventually(lambda: len(stream.records()) == 2 * PARTITIONS, "the records")
    expected = dict.fromkeys(range(PARTITIONS), 2)
    # Delivered positions are committed every commit_interval_ms, while streaming.
    await eventually_async(
        lambda: committed_is(server, "g1", expected), "the delivered offsets committed"
    )
    await server.produce(0, ["p0-c"])
    await eventually(lambda: len(stream.records()) == 2 * PARTITIONS + 1, "the new record")
    await stream.close()
    # Leaving commits the last positions and removes the member at once.
    await eventually(lambda: not server.routes.sessions, "the stream to end")
    assert await server.committed("g1") == {**expected, 0: 3}
    described = await server.get("/v1/groups/g1")
    assert described["members"] == []


async def test_a_new_member_resumes_at_the_committed_offsets(server):
    await server.produce(1, ["one", "two"])
    first = await open_group_stream(server, "g2", auto_offset_reset="earliest")
    await eventually(lambda: len(first.records()) == 2, "the first records")
    await first.close()
    await eventually(lambda: not server.routes.sessions, "the first stream to end")
    await server.produce(1, ["three"])
    second = await open_group_stream(server, "g2", auto_offset_reset="earliest")
    await eventually(lambda: len(second.records()) == 1, "the record after the commit")
    assert [r["value"] for r in second.records()] == ["three"]
    await close_all(server, second)


async def test_latest_without_a_commit_skips_older_records(server):
    await server.produce(2, ["old"])
    stream = await open_group_stream(server, "g3")  # auto_offset_reset=latest by default
    await eventually(lambda: stream.partitions() == list(range(PARTITIONS)), "all partitions")
    await server.produce(2, ["new"])
    await eventually(lambda: stream.records(), "the new record")
    assert [r["value"] for r in stream.records()] == ["new"]
    await close_all(server, stream)


async def test_two_members_split_the_partitions_and_each_record_arrives_once(server):
    first = await open_group_stream(server, "g4", auto_offset_reset="earliest")
    await eventually(lambda: first.partitions() == list(range(PARTITIONS)), "all to the first")
    for p in range(PARTITIONS):
        await server.produce(p, [f"p{p}-0"])
    await eventually(lambda: len(first.records()) == PARTITIONS, "the first records")
    second = await open_group_stream(server, "g4", auto_offset_reset="earliest")

    def split() -> bool:
        a, b = first.partitions() or [], second.partitions() or []
        return len(a) == len(b) == PARTITIONS // 2 and not set(a) & set(b)

    await eventually(split, "the partitions split between the two members")
    for p in range(PARTITIONS):
        await server.produce(p, [f"p{p}-1", f"p{p}-2"])
    await eventually(
        lambda: len(first.records()) + len(second.records()) == 3 * PARTITIONS,
        "every record",
    )
    delivered = [(r["partition"], r["offset"]) for r in first.records() + second.records()]
    assert sorted(delivered) == [(p, o) for p in range(PARTITIONS) for o in range(3)]
    for p in second.partitions() or []:  # moved partitions went on where the first stopped
        assert [r["offset"] for r in second.records() if r["partition"] == p] == [1, 2]
    await close_all(server, first, second)


async def test_a_fenced_member_drops_its_partitions_and_joins_again_with_its_id(server):
    await server.produce(0, ["a"])
    stream = await open_group_stream(server, "g5", auto_offset_reset="earliest")
    await eventually(lambda: stream.partitions() == list(range(PARTITIONS)), "all partitions")
    await eventually(lambda: len(stream.records()) == 1, "the first record")
    expected = {**dict.fromkeys(range(PARTITIONS), 0), 0: 1}
    await eventually_async(lambda: committed_is(server, "g5", expected), "positions committed")
    member_id = stream.assignments()[-1]["member_id"]
    # The coordinator forgets the member (as after a session it missed): its
    # next heartbeat is refused with UNKNOWN_MEMBER_ID.
    resp = await server.client.delete(f"/v1/groups/g5/members/{member_id}")
    assert resp.status == 200, await resp.text()
    seen = len(stream.assignments())

    def rejoined() -> bool:
        later = [a["partitions"] for a in stream.assignments()[seen:]]
        return [] in later and later[-1] == list(range(PARTITIONS))

    await eventually(rejoined, "every partition dropped, then assigned again")
    last = stream.assignments()[-1]
    assert last["member_id"] == member_id and last["member_epoch"] > 0
    await server.produce(0, ["b"])
    await eventually(lambda: len(stream.records()) == 2, "the record after the rejoin")
    # Resumed from the commit: nothing delivered twice, nothing skipped.
    assert [r["value"] for r in stream.records()] == ["a", "b"]
    await close_all(server, stream)


@pytest.mark.parametrize(
    "query",
    [
        "group=g&partitions=0",
        "group=g&offset=earliest",
        "group=g&auto_offset_reset=sometimes",
        "group=g&commit_interval_ms=1",
        "auto_offset_reset=earliest",
    ],
)
async def test_group_parameters_are_checked_before_the_stream_starts(server, query):
    resp = await server.client.get(f"/v1/topics/{TOPIC}/stream?{query}")
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "INVALID_REQUEST"
    assert not server.routes.sessions


async def committed_is(server: Server, group: str, expected: dict[int, int]) -> bool:
    return await server.committed(group) == expected
