"""Listings filtered by authorization on one broker (real ReplicaManager and
coordinator runtime): `GET /v1/groups` lists only the groups the caller may
DESCRIBE (every group with DESCRIBE on the cluster), a group's offsets
fetched without `topics` only those of topics it may DESCRIBE, and a group's
description names no topic the caller may not DESCRIBE."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.access import AccessControl
from lograft.api.app import create_app
from lograft.api.authentication import Authenticator
from lograft.api.caller import CALLER_KEY, Caller, How
from lograft.api.partition_offsets import PartitionOffsets, add_partition_offsets_route
from lograft.api.routes_groups import GroupRoutes
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.node.peer_client import PeerClient
from lograft.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from lograft.security.settings import SecuritySettings
from tests.unit.api.one_broker import BROKER, OneBrokerMetadata

USER_HEADER = "X-Test-User"
LOAD_WAIT_S = 10.0


def allow(user: str, rt: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        resource_type=rt,
        resource_name=name,
        pattern_type=PatternType.LITERAL,
        principal=f"User:{user}",
        host="*",
        operation=op,
        permission=AclPermission.ALLOW,
    )


_T, _G, _C, _D = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, AclOperation.DESCRIBE
ACLS = frozenset(
    {
        allow("viewer", _G, "g", _D),
        allow("viewer", _T, "orders", _D),
        allow("operator", _C, CLUSTER_RESOURCE_NAME, _D),
    }
)


class CallerFromHeader(Authenticator):
    """Stands in for authentication (off here): the caller is named by a test header."""

    def set_anonymous(self, request: web.Request) -> None:
        user = request.headers.get(USER_HEADER, "nobody")
        request[CALLER_KEY] = Caller(f"User:{user}", "127.0.0.1", "", How.BEARER)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], Any]]:
    metadata = OneBrokerMetadata()
    for topic in ("orders", "hidden"):
        metadata.set_topic(topic, 1, BROKER)
    replicas = ReplicaManager(BROKER, tmp_path, BrokerSettings(min_insync_replicas=1))
    await replicas.start()
    replicas.apply_metadata(metadata.wanted())
    settings = GroupRuntimeSettings(offsets_topic_num_partitions=1)
    runtime = GroupCoordinatorRuntime(replicas, metadata, settings)

    async def create_offsets_topic() -> None:
        metadata.set_topic(CONSUMER_OFFSETS_TOPIC, settings.offsets_topic_num_partitions, BROKER)
        replicas.apply_metadata(metadata.wanted())

    access = AccessControl(
        SecuritySettings(authorization=True, super_users=("User:admin",)), lambda: ACLS
    )
    app = create_app(
        cluster_secret="s",
        request_bytes_max=1 << 20,
        ready=lambda: (True, {}),
        access=access,
        authenticator=CallerFromHeader(),
    )
    calls = PeerClient(cluster_secret="s", metadata=metadata)
    offsets = PartitionOffsets(metadata, calls)
    GroupRoutes(runtime, metadata, calls, create_offsets_topic, offsets).add_to(app)
    add_partition_offsets_route(app, replicas, metadata, calls)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client, runtime
    await calls.close()
    await runtime.stop()
    await replicas.stop()


async def call(
    client: TestClient[Any, Any], user: str, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    resp = await client.request(method, path, json=body, headers={USER_HEADER: user})
    return resp.status, await resp.json()


async def test_listings_hold_only_what_the_caller_may_describe(
    served: tuple[TestClient[Any, Any], GroupCoordinatorRuntime],
) -> None:
    client, runtime = served
    status, doc = await call(client, "admin", "GET", "/v1/groups/g/coordinator")
    assert status == 200, doc
    coordinator = runtime.coordinator(doc["partition"])
    assert coordinator is not None and await coordinator.wait_loaded(LOAD_WAIT_S)
    # Two groups with offsets on two topics, committed by a super user.
    for group in ("g", "h"):
        commit = {
            "offsets": [{"topic": t, "partition": 0, "offset": 1} for t in ("hidden", "orders")]
        }
        status, done = await call(client, "admin", "POST", f"/v1/groups/{group}/offsets", commit)
        assert status == 200, done

    status, doc = await call(client, "admin", "GET", "/v1/groups")
    assert [g["group_id"] for g in doc["groups"]] == ["g", "h"]
    # DESCRIBE on the cluster: every group; DESCRIBE on a group: that group.
    status, doc = await call(client, "operator", "GET", "/v1/groups")
    assert [g["group_id"] for g in doc["groups"]] == ["g", "h"]
    status, doc = await call(client, "viewer", "GET", "/v1/groups")
    assert status == 200 and [g["group_id"] for g in doc["groups"]] == ["g"]
    status, doc = await call(client, "nobody", "GET", "/v1/groups")
    assert status == 200 and doc["groups"] == []

    # A group's offsets: only the topics the caller may describe.
    status, doc = await call(client, "admin", "GET", "/v1/groups/g/offsets")
    assert sorted(o["topic"] for o in doc["offsets"]) == ["hidden", "orders"]
    status, doc = await call(client, "viewer", "GET", "/v1/groups/g/offsets")
    assert status == 200 and [o["topic"] for o in doc["offsets"]] == ["orders"]
    status, doc = await call(client, "viewer", "GET", "/v1/groups/g/offsets?topics=hidden")
    assert (status, doc["error"]["code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    status, doc = await call(client, "viewer", "GET", "/v1/groups/h/offsets")
    assert (status, doc["error"]["code"]) == (403, "GROUP_AUTHORIZATION_FAILED")


async def test_a_group_description_names_only_topics_the_caller_may_describe(
    served: tuple[TestClient[Any, Any], GroupCoordinatorRuntime],
) -> None:
    """DESCRIBE on a group is not DESCRIBE on its topics: a member reading a
    topic the caller may not see shows neither that topic nor its offsets,
    high watermark or lag (found by the issue 12 attack: they were shown)."""
    client, runtime = served
    status, doc = await call(client, "admin", "GET", "/v1/groups/g/coordinator")
    assert status == 200, doc
    coordinator = runtime.coordinator(doc["partition"])
    assert coordinator is not None and await coordinator.wait_loaded(LOAD_WAIT_S)
    join = {"subscribed_topics": ["hidden", "orders"]}
    status, member = await call(client, "admin", "POST", "/v1/groups/g/members", join)
    assert status == 200 and sorted(member["assignment"]) == ["hidden", "orders"], member
    commit = {
        "member_id": member["member_id"],
        "member_epoch": member["member_epoch"],
        "offsets": [{"topic": t, "partition": 0, "offset": 0} for t in ("hidden", "orders")],
    }
    status, done = await call(client, "admin", "POST", "/v1/groups/g/offsets", commit)
    assert status == 200, done

    status, full = await call(client, "admin", "GET", "/v1/groups/g")
    assert status == 200 and "hidden" in str(full), full
    status, seen = await call(client, "viewer", "GET", "/v1/groups/g")
    assert status == 200, seen
    assert "hidden" not in str(seen), seen
    (m,) = seen["members"]
    assert m["subscribed_topics"] == ["orders"]
    assert list(m["assigned"]) == ["orders"] and list(m["target"]) == ["orders"]
    assert [o["topic"] for o in seen["offsets"]] == ["orders"]
    status, doc = await call(client, "nobody", "GET", "/v1/groups/g")
    assert (status, doc["error"]["code"]) == (403, "GROUP_AUTHORIZATION_FAILED")
