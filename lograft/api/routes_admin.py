"""Public admin endpoints: topics, brokers and the cluster view.

Changes (create, delete, add partitions, alter configs) go to the active
controller, from any node; the answer comes once the change is committed and
this node's own metadata, and on a broker its replicas, have caught up with
it, so a client may use the new topic on the same node at once. The wait for
the replicas is bounded by METADATA_CATCH_UP_TIMEOUT_MS: a committed change is
answered as done even when opening its logs takes longer (thousands of
partitions), and until then the data path answers with retriable errors.
Reads are served from this node's image.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from lograft.api import access
from lograft.api.partition_offsets import LeaderOffsets, PartitionOffsets
from lograft.api.request_shapes import AddPartitions, AlterConfigs, CreateTopic, decode_body
from lograft.api.routes_data import json_response
from lograft.api.services import ControllerCalls, PeerCalls
from lograft.brokers.metadata_sync import ImageView
from lograft.brokers.replica_manager import ReplicaManager
from lograft.echo import clip, shown
from lograft.errors import (
    LograftError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol import controller_wire as w
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.raft.adapter import RaftAdapter
from lograft.quorum.records import ConfigResourceType
from lograft.security.acls import CLUSTER_RESOURCE_NAME, AclOperation, ResourceType

_CREATE, _DESCRIBE = AclOperation.CREATE, AclOperation.DESCRIBE

# How long an admin change waits for this node's metadata to catch up, ms.
METADATA_CATCH_UP_TIMEOUT_MS = 5_000
# How long describe waits for a remote leader's offsets, ms.
DESCRIBE_OFFSETS_TIMEOUT_MS = 2_000


class AdminRoutes:
    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        store: MetadataStore,
        raft: RaftAdapter,
        controller: ControllerCalls,
        replicas: ReplicaManager | None,
        calls: PeerCalls,
        replicas_caught_up: Callable[[int, int], Awaitable[None]] | None = None,
        offsets: PartitionOffsets | None = None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.store = store
        self.raft = raft
        self.controller = controller
        self.replicas = replicas
        # (offset, timeout_ms): returns once the replicas follow that metadata.
        self.replicas_caught_up = replicas_caught_up
        # Leaders' offsets for describe: one batched request per remote leader.
        self.offsets = offsets or PartitionOffsets(_StoreView(store), calls)

    def add_to(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/v1/cluster", self.cluster)
        r.add_get("/v1/brokers", self.brokers)
        r.add_get("/v1/topics", self.list_topics)
        r.add_post("/v1/topics", self.create_topic)
        r.add_get("/v1/topics/{topic}", self.describe_topic)
        r.add_delete("/v1/topics/{topic}", self.delete_topic)
        r.add_post("/v1/topics/{topic}/partitions", self.add_partitions)
        r.add_patch("/v1/topics/{topic}/configs", self.alter_configs)

    # -- changes through the controller ----------------------------------------------------

    async def _change(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.controller.call(name, body)
        await self._catch_up(result.get("metadata_offset"))
        return result

    async def _catch_up(self, offset: Any) -> None:
        target = offset if isinstance(offset, int) else None
        if target is None:
            return
        await self.raft.wait_for_offset(target, METADATA_CATCH_UP_TIMEOUT_MS)
        if self.replicas_caught_up is not None:
            with contextlib.suppress(RequestTimedOutError):
                await self.replicas_caught_up(target, METADATA_CATCH_UP_TIMEOUT_MS)

    async def create_topic(self, request: web.Request) -> web.Response:
        body = decode_body(await request.read(), CreateTopic)
        # Kafka's CreateTopics: CREATE on the cluster covers every topic; else
        # CREATE on the topic itself (a prefixed ACL lets a team make its own).
        if not access.may(request, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, _CREATE):
            access.require(request, ResourceType.TOPIC, body.name, _CREATE)
        replication_factor = body.replication_factor
        if replication_factor is None:
            replication_factor = min(3, max(1, len(self.store.image.brokers)))
        rpc = w.CreateTopicRequest(
            name=body.name,
            partitions=body.partitions,
            replication_factor=replication_factor,
            configs=body.configs,
        )
        result = await self._change("create-topic", w.body_of(rpc))
        return json_response(result, 201)

    async def delete_topic(self, request: web.Request) -> web.Response:
        rpc = w.DeleteTopicRequest(name=request.match_info["topic"])
        result = await self._change("delete-topic", w.body_of(rpc))
        return json_response(result)

    async def add_partitions(self, request: web.Request) -> web.Response:
        body = decode_body(await request.read(), AddPartitions)
        rpc = w.CreatePartitionsRequest(
            name=request.match_info["topic"], partitions=body.partitions
        )
        result = await self._change("create-partitions", w.body_of(rpc))
        return json_response(result)

    async def alter_configs(self, request: web.Request) -> web.Response:
        body = decode_body(await request.read(), AlterConfigs)
        rpc = w.AlterConfigsRequest(
            resource_type=ConfigResourceType.TOPIC.value,
            resource_name=request.match_info["topic"],
            configs=body.configs,
        )
        result = await self._change("alter-configs", w.body_of(rpc))
        return json_response(result)

    # -- reads -------------------------------------------------------------------------------

    async def list_topics(self, request: web.Request) -> web.Response:
        view = ImageView(self.store.image)
        # Topics the caller may not DESCRIBE are absent, as in Kafka's Metadata.
        visible = [
            t for t in view.topics() if access.may(request, ResourceType.TOPIC, t.name, _DESCRIBE)
        ]
        return json_response(
            {
                "topics": [
                    {
                        "name": t.name,
                        "topic_id": t.topic_id,
                        "partitions": len(t.partitions),
                        "replication_factor": len(t.partitions[0].replicas) if t.partitions else 0,
                        **_configs_shown(request, t.name, t.config),
                    }
                    for t in visible
                ]
            }
        )

    async def describe_topic(self, request: web.Request) -> web.Response:
        view = ImageView(self.store.image)
        name = request.match_info["topic"]
        topic = view.topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(
                f"topic {shown(name)} does not exist", topic=clip(name)
            )
        found = await self.offsets.offsets(
            [TopicPartition(name, p) for p in sorted(topic.partitions)],
            DESCRIBE_OFFSETS_TIMEOUT_MS,
        )
        partitions = []
        for p, a in sorted(topic.partitions.items()):
            partitions.append(
                {
                    "partition": p,
                    "leader": a.leader,
                    "leader_epoch": a.leader_epoch,
                    "replicas": list(a.replicas),
                    "isr": list(a.isr),
                    "offline": a.leader < 0,
                    **_offsets_json(found[TopicPartition(name, p)]),
                }
            )
        return json_response(
            {
                "name": topic.name,
                "topic_id": topic.topic_id,
                **_configs_shown(request, name, topic.config),
                "partitions": partitions,
            }
        )

    def _brokers(self) -> list[dict[str, Any]]:
        image = self.store.image
        return [
            {
                "id": b.broker_id,
                "epoch": b.broker_epoch,
                "state": b.state.value if hasattr(b.state, "value") else str(b.state),
                "fenced": b.fenced,
                "rack": b.rack,
                "endpoints": dict(b.endpoints),
            }
            for _id, b in sorted(image.brokers.items())
        ]

    async def brokers(self, _request: web.Request) -> web.Response:
        return json_response({"brokers": self._brokers()})

    async def cluster(self, request: web.Request) -> web.Response:
        status = await self.raft.status()
        raft = status.to_dict()
        return json_response(
            {
                "cluster_id": self.cluster_id,
                "node_id": self.node_id,
                "active_controller": self.controller.active_controller_id(),
                "metadata_offset": self.store.image.offset,
                "raft": {
                    "role": raft["role"],
                    "leader_id": raft["leader_id"],
                    "term": raft["term"],
                    "commit_index": raft["commit_index"],
                    "last_applied": raft["last_applied"],
                    "has_quorum": raft["has_quorum"],
                    "voters": raft["voters"],
                    "observers": raft["observers"],
                },
                "brokers": self._brokers(),
                # Counted as the listing is: only topics the caller may DESCRIBE.
                "topics": sum(
                    1
                    for name in self.store.image.topic_ids
                    if access.may(request, ResourceType.TOPIC, name, _DESCRIBE)
                ),
            }
        )


class _StoreView:
    """A MetadataView of the node's current metadata image (whatever it is when asked)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(ImageView(self.store.image), name)


def _configs_shown(request: web.Request, name: str, config: Any) -> dict[str, Any]:
    """`{"configs": ...}` when the caller may DESCRIBE_CONFIGS the topic, else
    nothing: as in Kafka, describing a topic (DESCRIBE, implied by READ or
    WRITE) does not show its configs (DescribeConfigs needs DESCRIBE_CONFIGS,
    implied by ALTER_CONFIGS)."""
    if not access.may(request, ResourceType.TOPIC, name, AclOperation.DESCRIBE_CONFIGS):
        return {}
    return {"configs": dict(config)}


def _offsets_json(found: LeaderOffsets | LograftError) -> dict[str, int | None]:
    """A partition's offsets in describe; all null when its leader could not say."""
    if isinstance(found, LeaderOffsets):
        return {
            "log_start_offset": found.log_start_offset,
            "log_end_offset": found.log_end_offset,
            "high_watermark": found.high_watermark,
            "size_bytes": found.size_bytes,
        }
    return {
        "log_start_offset": None,
        "log_end_offset": None,
        "high_watermark": None,
        "size_bytes": None,
    }
