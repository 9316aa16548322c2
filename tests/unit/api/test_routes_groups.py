"""The consumer group endpoints on one broker (real ReplicaManager and
coordinator runtime, aiohttp test server): JSON shapes, error codes and
statuses, describe with lag, reset strategies, delete, NOT_COORDINATOR."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.api.partition_offsets import PartitionOffsets, add_partition_offsets_route
from lograft.api.routes_data import BATCH_CONTENT_TYPE, DataRoutes
from lograft.api.routes_groups import GroupRoutes
from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.errors import NotControllerError
from lograft.node.peer_client import PeerClient
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.api.one_broker import BROKER, OneBrokerMetadata

ORDERS = "orders"
ORDERS_PARTITIONS = 2
# Seconds a test waits for the coordinator to load its (empty) partition.
LOAD_WAIT_S = 10.0


@dataclass
class Server:
    client: TestClient[Any, Any]
    replicas: ReplicaManager
    runtime: GroupCoordinatorRuntime
    metadata: OneBrokerMetadata
    routes: GroupRoutes

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        resp = await self.client.request(method, path, json=body)
        return resp.status, await resp.json()

    async def ready(self) -> None:
        """Look the coordinator up (creating the topic) and wait for it to load."""
        status, doc = await self.call("GET", "/v1/groups/g/coordinator")
        assert status == 200, doc
        coordinator = self.runtime.coordinator(doc["partition"])
        assert coordinator is not None and await coordinator.wait_loaded(LOAD_WAIT_S)

    def move_offsets_leader(self, leader: int) -> None:
        self.metadata.set_topic(CONSUMER_OFFSETS_TOPIC, 1, leader, leader_epoch=2)
        self.replicas.apply_metadata(self.metadata.wanted())


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    metadata = OneBrokerMetadata()
    metadata.set_topic(ORDERS, ORDERS_PARTITIONS, BROKER)
    replicas = ReplicaManager(BROKER, tmp_path, BrokerSettings(min_insync_replicas=1))
    await replicas.start()
    replicas.apply_metadata(metadata.wanted())
    settings = GroupRuntimeSettings(offsets_topic_num_partitions=1)
    runtime = GroupCoordinatorRuntime(replicas, metadata, settings)

    async def create_offsets_topic() -> None:
        # What the controller would do: the topic appears in the metadata.
        metadata.set_topic(CONSUMER_OFFSETS_TOPIC, settings.offsets_topic_num_partitions, BROKER)
        replicas.apply_metadata(metadata.wanted())

    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    calls = PeerClient(cluster_secret="s", metadata=metadata)
    offsets = PartitionOffsets(metadata, calls)
    routes = GroupRoutes(runtime, metadata, calls, create_offsets_topic, offsets)
    routes.add_to(app)
    DataRoutes(replicas, metadata, calls).add_to(app)
    # As the node does: this broker answers its own offsets asks in process.
    add_partition_offsets_route(app, replicas, metadata, calls)
    async with TestClient(TestServer(app)) as client:
        yield Server(client, replicas, runtime, metadata, routes)
    await calls.close()
    await runtime.stop()
    await replicas.stop()


async def produce(server: Server, partition: int, count: int, timestamp_ms: int) -> None:
    batch = build_batch([RecordInput(b"v")] * count, timestamp_ms=timestamp_ms)
    await server.replicas.produce(TopicPartition(ORDERS, partition), batch, Acks.ALL)


async def test_join_heartbeat_commit_fetch_leave(server: Server) -> None:
    await server.ready()
    status, joined = await server.call(
        "POST", "/v1/groups/g/members", {"subscribed_topics": [ORDERS], "sequence": 1}
    )
    assert status == 200, joined
    assert joined["group_id"] == "g" and joined["member_epoch"] == 1
    assert joined["assignment"] == {ORDERS: [0, 1]}
    assert joined["session_timeout_ms"] == GroupCoordinatorConfig().session_timeout_ms
    member = urllib.parse.quote(joined["member_id"], safe="")

    status, beat = await server.call(
        "POST",
        f"/v1/groups/g/members/{member}/heartbeat",
        {"member_epoch": 1, "owned_partitions": {ORDERS: [0, 1]}, "sequence": 2},
    )
    assert status == 200 and beat["assignment"] == {ORDERS: [0, 1]}

    status, done = await server.call(
        "POST",
        "/v1/groups/g/offsets",
        {
            "member_id": joined["member_id"],
            "member_epoch": 1,
            "offsets": [{"topic": ORDERS, "partition": 1, "offset": 7, "metadata": "m"}],
        },
    )
    assert status == 200, done
    assert done["offsets"] == [{"topic": ORDERS, "partition": 1, "offset": 7}]
    status, fetched = await server.call("GET", f"/v1/groups/g/offsets?topics={ORDERS}")
    assert status == 200
    (entry,) = fetched["offsets"]
    assert (entry["partition"], entry["offset"], entry["metadata"]) == (1, 7, "m")
    status, fetched = await server.call("GET", "/v1/groups/g/offsets?topics=other")
    assert fetched["offsets"] == []

    status, left = await server.call("DELETE", f"/v1/groups/g/members/{member}?sequence=3")
    assert status == 200 and left["member_epoch"] == -1 and left["assignment"] == {}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/v1/groups/g/members", {"sequence": 1}, 400, "INVALID_REQUEST"),
        ("POST", "/v1/groups/g/members", {"subscribed_topics": "x"}, 400, "INVALID_REQUEST"),
        ("POST", "/v1/groups/g/members", {"subscribed_topics": [], "x": 1}, 400, "INVALID_REQUEST"),
        (
            "POST",
            "/v1/groups/g/members",
            {"subscribed_topics": [ORDERS], "assignor": "magic"},
            400,
            "UNSUPPORTED_ASSIGNOR",
        ),
        (
            "POST",
            "/v1/groups/g/members/ghost/heartbeat",
            {"member_epoch": 3},
            409,
            "UNKNOWN_MEMBER_ID",
        ),
        ("POST", "/v1/groups/g/members/ghost/heartbeat", {}, 400, "INVALID_REQUEST"),
        (
            "POST",
            "/v1/groups/g/offsets",
            {"member_id": "ghost", "member_epoch": 1, "offsets": []},
            409,
            "UNKNOWN_MEMBER_ID",
        ),
        (
            "POST",
            "/v1/groups/g/offsets",
            {"offsets": [{"topic": ORDERS, "partition": 0, "offset": -1}]},
            400,
            "INVALID_REQUEST",
        ),
        (
            "POST",
            "/v1/groups/g/offsets",
            {"offsets": [{"topic": ORDERS, "partition": 0, "offset": 1, "metadata": "x" * 5000}]},
            400,
            "OFFSET_METADATA_TOO_LARGE",
        ),
        ("DELETE", "/v1/groups/nobody", None, 404, "GROUP_ID_NOT_FOUND"),
        ("POST", "/v1/groups/g/offsets/reset", {"strategy": "sideways"}, 400, "INVALID_REQUEST"),
        (
            "POST",
            "/v1/groups/g/offsets/reset",
            {"strategy": "earliest", "topics": ["nope"]},
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
    ],
)
async def test_bad_requests_get_stable_codes(
    server: Server, method: str, path: str, body: Any, status: int, code: str
) -> None:
    await server.ready()
    got_status, doc = await server.call(method, path, body)
    assert (got_status, doc["error"]["code"]) == (status, code), doc


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("DELETE", "/v1/groups/g/members/m?sequence=%D9%A3", None),  # int() reads 3
        ("DELETE", "/v1/groups/g/members/m?sequence=0_0", None),
        ("DELETE", "/v1/groups/g/members/m?sequence=%2B1", None),
        ("DELETE", "/v1/groups/g/members/m?sequence=-1", None),
        ("DELETE", f"/v1/groups/g/members/m?sequence={2**63}", None),
        ("DELETE", f"/v1/groups/g/members/m?sequence={10**40}", None),
        ("POST", "/v1/groups/g/members/m/heartbeat", {"member_epoch": True}),
        ("POST", "/v1/groups/g/members/m/heartbeat", {"member_epoch": 1.0}),
        ("POST", "/v1/groups/g/members/m/heartbeat", {"member_epoch": 2**31}),
        (
            "POST",
            "/v1/groups/g/members/m/heartbeat",
            {"member_epoch": 1, "owned_partitions": {ORDERS: [2**31]}},
        ),
        ("POST", "/v1/groups/g/members", {"subscribed_topics": [], "sequence": 2**63}),
        (
            "POST",
            "/v1/groups/g/members",
            {"subscribed_topics": [], "rebalance_timeout_ms": 2**31},
        ),
        (
            "POST",
            "/v1/groups/g/offsets",
            {"offsets": [{"topic": ORDERS, "partition": 0, "offset": 1, "leader_epoch": 2**31}]},
        ),
        (
            "POST",
            "/v1/groups/g/offsets",
            {"offsets": [{"topic": ORDERS, "partition": 2**31, "offset": 1}]},
        ),
        ("POST", "/v1/groups/g/offsets/reset", {"strategy": "timestamp", "timestamp": 2**63}),
        (
            "POST",
            "/v1/groups/g/offsets/reset",
            {"strategy": "earliest", "partitions": [{"topic": ORDERS, "partition": 2**31}]},
        ),
    ],
)
async def test_integers_are_strict_and_range_checked(
    server: Server, method: str, path: str, body: Any
) -> None:
    await server.ready()
    status, doc = await server.call(method, path, body)
    assert (status, doc["error"]["code"]) == (400, "INVALID_REQUEST"), doc


async def test_reads_of_a_group_before_the_offsets_topic_exists_answer_as_for_no_group(
    server: Server,
) -> None:
    """They were 503 COORDINATOR_NOT_AVAILABLE: no lookup had created the topic
    yet, and no group can exist before it."""
    assert server.metadata.topic(CONSUMER_OFFSETS_TOPIC) is None
    status, doc = await server.call("GET", "/v1/groups/never-seen")
    assert status == 200, doc
    assert (doc["group_id"], doc["state"], doc["members"], doc["offsets"]) == (
        "never-seen",
        "dead",
        [],
        [],
    )
    status, doc = await server.call("GET", "/v1/groups/never-seen/offsets")
    assert (status, doc) == (200, {"group_id": "never-seen", "offsets": []})
    status, doc = await server.call(
        "GET", f"/v1/groups/never-seen/offsets?topics={ORDERS}&auto_offset_reset=latest"
    )
    assert status == 200, doc
    assert [(o["partition"], o["offset"], o["start_offset"]) for o in doc["offsets"]] == [
        (0, None, 0),
        (1, None, 0),
    ]
    status, doc = await server.call("DELETE", "/v1/groups/never-seen")
    assert (status, doc["error"]["code"]) == (404, "GROUP_ID_NOT_FOUND"), doc
    # The id is still checked, and none of these created the topic.
    for method in ("GET", "DELETE"):
        status, doc = await server.call(method, "/v1/groups/" + "g" * 300)
        assert (status, doc["error"]["code"]) == (400, "INVALID_GROUP_ID"), doc
    assert server.metadata.topic(CONSUMER_OFFSETS_TOPIC) is None
    # A write needs the coordinator: the lookup creates the topic.
    status, doc = await server.call("POST", "/v1/groups/g/members", {"subscribed_topics": []})
    assert (status, doc["error"]["code"]) == (503, "COORDINATOR_NOT_AVAILABLE"), doc


async def test_a_stale_or_fenced_member_epoch_is_refused(server: Server) -> None:
    await server.ready()
    _, a = await server.call("POST", "/v1/groups/g/members", {"subscribed_topics": [ORDERS]})
    await server.call("POST", "/v1/groups/g/members", {"subscribed_topics": [ORDERS]})
    a_path = f"/v1/groups/g/members/{a['member_id']}/heartbeat"
    status, doc = await server.call("POST", a_path, {"member_epoch": 9})
    assert (status, doc["error"]["code"]) == (409, "FENCED_MEMBER_EPOCH")
    # a gives up what it must, so it moves to the new epoch; its old one is stale.
    _, beat = await server.call("POST", a_path, {"member_epoch": 1, "owned_partitions": {}})
    _, beat = await server.call(
        "POST",
        a_path,
        {"member_epoch": beat["member_epoch"], "owned_partitions": beat["assignment"]},
    )
    assert beat["member_epoch"] > 1
    commit = {"topic": ORDERS, "partition": 0, "offset": 1}
    status, doc = await server.call(
        "POST",
        "/v1/groups/g/offsets",
        {"member_id": a["member_id"], "member_epoch": 1, "offsets": [commit]},
    )
    assert (status, doc["error"]["code"]) == (409, "STALE_MEMBER_EPOCH")
    assert doc["error"]["details"]["member_epoch"] == beat["member_epoch"]


async def test_describe_shows_members_and_lag(server: Server) -> None:
    await server.ready()
    await produce(server, 0, 10, timestamp_ms=1_000)
    _, joined = await server.call(
        "POST", "/v1/groups/g/members", {"subscribed_topics": [ORDERS], "client_id": "w1"}
    )
    await server.call(
        "POST",
        "/v1/groups/g/offsets",
        {
            "member_id": joined["member_id"],
            "member_epoch": joined["member_epoch"],
            "offsets": [{"topic": ORDERS, "partition": 0, "offset": 4}],
        },
    )
    status, doc = await server.call("GET", "/v1/groups/g")
    assert status == 200
    assert doc["state"] == "stable"
    (member,) = doc["members"]
    assert member["client_id"] == "w1" and member["assigned"] == {ORDERS: [0, 1]}
    by_partition = {o["partition"]: o for o in doc["offsets"]}
    assert by_partition[0]["committed_offset"] == 4
    assert by_partition[0]["high_watermark"] == 10 and by_partition[0]["lag"] == 6
    assert by_partition[1]["committed_offset"] is None and by_partition[1]["lag"] is None
    assert by_partition[1]["owner"] == joined["member_id"]
    status, listed = await server.call("GET", "/v1/groups")
    assert listed["groups"] == [
        {"group_id": "g", "state": "stable", "members": 1, "coordinator_id": BROKER}
    ]
    assert listed["unreachable_brokers"] == [] and listed["loading_partitions"] == []
    status, doc = await server.call("GET", "/v1/groups/unknown")
    assert (status, doc["state"], doc["members"]) == (200, "dead", [])


async def test_reset_offsets_strategies_then_delete(server: Server) -> None:
    await server.ready()
    await produce(server, 0, 5, timestamp_ms=1_000)
    await produce(server, 0, 5, timestamp_ms=2_000)
    await produce(server, 1, 3, timestamp_ms=1_000)

    async def reset(body: dict[str, Any]) -> dict[tuple[str, int], int]:
        status, doc = await server.call("POST", "/v1/groups/g/offsets/reset", body)
        assert status == 200, doc
        return {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}

    assert await reset({"strategy": "latest", "topics": [ORDERS]}) == {
        (ORDERS, 0): 10,
        (ORDERS, 1): 3,
    }
    assert await reset({"strategy": "earliest", "topics": [ORDERS]}) == {
        (ORDERS, 0): 0,
        (ORDERS, 1): 0,
    }
    assert await reset({"strategy": "timestamp", "timestamp": 1_500, "topics": [ORDERS]}) == {
        (ORDERS, 0): 5,
        (ORDERS, 1): 3,  # nothing that recent: the high watermark
    }
    only = [{"topic": ORDERS, "partition": 0}]
    assert await reset({"strategy": "offset", "offset": 99, "partitions": only}) == {
        (ORDERS, 0): 10  # clamped into the partition's range
    }
    status, fetched = await server.call("GET", "/v1/groups/g/offsets")
    assert [(o["partition"], o["offset"]) for o in fetched["offsets"]] == [(0, 10), (1, 3)]

    # A dry run answers what a reset would set, next to what is committed,
    # and changes nothing.
    status, dry = await server.call(
        "POST",
        "/v1/groups/g/offsets/reset",
        {"strategy": "earliest", "topics": [ORDERS], "dry_run": True},
    )
    assert status == 200, dry
    assert dry["dry_run"] is True
    assert [(o["partition"], o["committed_offset"], o["offset"]) for o in dry["offsets"]] == [
        (0, 10, 0),
        (1, 3, 0),
    ]
    status, after = await server.call("GET", "/v1/groups/g/offsets")
    assert after["offsets"] == fetched["offsets"]

    # A group with a member can be neither reset nor deleted.
    _, joined = await server.call("POST", "/v1/groups/g/members", {"subscribed_topics": [ORDERS]})
    status, doc = await server.call(
        "POST", "/v1/groups/g/offsets/reset", {"strategy": "earliest", "topics": [ORDERS]}
    )
    assert (status, doc["error"]["code"]) == (409, "NON_EMPTY_GROUP")
    status, doc = await server.call("DELETE", "/v1/groups/g")
    assert (status, doc["error"]["code"]) == (409, "NON_EMPTY_GROUP")
    await server.call("DELETE", f"/v1/groups/g/members/{joined['member_id']}")
    status, doc = await server.call("DELETE", "/v1/groups/g")
    assert status == 200 and doc == {"group_id": "g", "deleted": True}
    status, fetched = await server.call("GET", "/v1/groups/g/offsets")
    assert fetched["offsets"] == []


async def test_the_wrong_broker_names_the_coordinator(server: Server) -> None:
    await server.ready()
    server.move_offsets_leader(2)
    status, doc = await server.call("POST", "/v1/groups/g/members", {"subscribed_topics": [ORDERS]})
    assert status == 421
    error = doc["error"]
    assert error["code"] == "NOT_COORDINATOR" and error["retriable"] is True
    assert error["details"]["coordinator_id"] == 2
    assert error["details"]["coordinator_url"] == "http://broker-2:9092"
    # The lookup works on any broker.
    status, doc = await server.call("GET", "/v1/groups/g/coordinator")
    assert status == 200 and doc["coordinator_id"] == 2
    # No leader at all.
    server.move_offsets_leader(-1)
    status, doc = await server.call("GET", "/v1/groups/g")
    assert (status, doc["error"]["code"]) == (503, "COORDINATOR_NOT_AVAILABLE")


async def test_group_ids_with_slashes_and_braces(server: Server) -> None:
    await server.ready()
    for group in ("a/b", "{x}"):
        path = f"/v1/groups/{urllib.parse.quote(group, safe='')}"
        status, doc = await server.call("POST", f"{path}/members", {"subscribed_topics": [ORDERS]})
        assert status == 200 and doc["group_id"] == group, doc


async def test_fetch_offsets_resolves_start_offsets(server: Server) -> None:
    await server.ready()
    await produce(server, 0, 4, timestamp_ms=1_000)
    await produce(server, 1, 6, timestamp_ms=1_000)
    only = [{"topic": ORDERS, "partition": 0}]
    await server.call(
        "POST",
        "/v1/groups/g/offsets/reset",
        {"strategy": "offset", "offset": 2, "partitions": only},
    )

    async def starts(reset: str) -> dict[int, Any]:
        status, doc = await server.call(
            "GET", f"/v1/groups/g/offsets?topics={ORDERS}&auto_offset_reset={reset}"
        )
        assert status == 200, doc
        return {
            o["partition"]: o.get("start_offset", o.get("error", {}).get("code"))
            for o in doc["offsets"]
        }

    # Partition 0 has a commit in range; partition 1 has none.
    assert await starts("earliest") == {0: 2, 1: 0}
    assert await starts("latest") == {0: 2, 1: 6}
    assert await starts("none") == {0: 2, 1: "NO_OFFSET"}
    status, doc = await server.call("GET", "/v1/groups/g/offsets?auto_offset_reset=earliest")
    assert (status, doc["error"]["code"]) == (400, "INVALID_REQUEST")
    status, doc = await server.call(
        "GET", f"/v1/groups/g/offsets?topics={ORDERS}&auto_offset_reset=sometimes"
    )
    assert (status, doc["error"]["code"]) == (400, "INVALID_REQUEST")


async def test_clients_cannot_produce_to_the_offsets_topic(server: Server) -> None:
    await server.ready()
    path = f"/v1/topics/{CONSUMER_OFFSETS_TOPIC}"
    status, doc = await server.call("POST", f"{path}/records", {"records": [{"value": 1}]})
    assert (status, doc["error"]["code"]) == (400, "INVALID_TOPIC_EXCEPTION")
    resp = await server.client.post(
        f"{path}/partitions/0/batches",
        data=build_batch([RecordInput(b"junk", key=b"junk")], timestamp_ms=1),
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    assert resp.status == 400
    # Nothing reached the log: the coordinator still loads it.
    part = server.replicas.partition(TopicPartition(CONSUMER_OFFSETS_TOPIC, 0))
    assert part.log.log_end_offset == 0


async def test_commits_for_unknown_topics_or_partitions_are_refused_whole(server: Server) -> None:
    await server.ready()
    good = {"topic": ORDERS, "partition": 0, "offset": 3}
    for bad, what in (
        ({"topic": "nope", "partition": 0, "offset": 1}, "topic 'nope' does not exist"),
        ({"topic": ORDERS, "partition": 99, "offset": 1}, "has no partition 99"),
    ):
        status, doc = await server.call("POST", "/v1/groups/g/offsets", {"offsets": [good, bad]})
        assert (status, doc["error"]["code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION"), doc
        assert what in doc["error"]["message"]
        assert doc["error"]["details"]["partition"] == bad["partition"]
    # All or nothing: the good partition in the same commit was not written.
    status, fetched = await server.call("GET", "/v1/groups/g/offsets")
    assert (status, fetched["offsets"]) == (200, [])


async def test_requests_over_too_many_partitions_are_refused_early(server: Server) -> None:
    await server.ready()
    server.runtime.config = GroupCoordinatorConfig(offset_commit_partitions_max=1)
    status, doc = await server.call(
        "POST", "/v1/groups/g/offsets/reset", {"strategy": "earliest", "topics": [ORDERS]}
    )
    assert (status, doc["error"]["code"]) == (400, "INVALID_REQUEST")
    assert doc["error"]["details"]["offset_commit_partitions_max"] == 1
    status, doc = await server.call(
        "GET", f"/v1/groups/g/offsets?topics={ORDERS}&auto_offset_reset=earliest"
    )
    assert (status, doc["error"]["code"]) == (400, "INVALID_REQUEST")


async def test_a_failed_topic_creation_is_coordinator_not_available(server: Server) -> None:
    async def no_controller() -> None:
        raise NotControllerError("no active controller is reachable; retry shortly")

    server.routes.create_offsets_topic = no_controller
    status, doc = await server.call("GET", "/v1/groups/g/coordinator")
    assert (status, doc["error"]["code"]) == (503, "COORDINATOR_NOT_AVAILABLE")
    assert doc["error"]["retriable"] is True
    assert doc["error"]["details"]["cause"] == "NOT_CONTROLLER"
