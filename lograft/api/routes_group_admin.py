"""Consumer group administration over HTTP (docs/api.md, "Administration").

- `GET /v1/groups`: every group in the cluster; each live broker answers for
  the partitions it coordinates through `GET /internal/v1/groups`.
- `GET /v1/groups/{group}`: describe, with lag from the partitions' leaders.
- `DELETE /v1/groups/{group}`: delete a group without members.
- `POST /v1/groups/{group}/offsets/reset`: earliest, latest, timestamp or a
  given offset, for a group without members.

Group-specific requests are served by the group's coordinator only, like the
rest of the group API (routes_groups, which registers these routes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from lograft.api import access
from lograft.api.group_json import describe_json, parse_body
from lograft.api.internal_paths import GROUPS_PATH
from lograft.api.partition_offsets import PartitionOffsets
from lograft.api.request_shapes import ResetOffsets
from lograft.api.routes_data import json_response
from lograft.api.services import MetadataView, PeerCalls
from lograft.brokers.groups.admin import OffsetResetStrategy, PartitionBounds, resolve_reset_offsets
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.brokers.peer_calls import GroupListing
from lograft.echo import clip, shown
from lograft.errors import InvalidRequestError, LograftError, UnknownTopicOrPartitionError
from lograft.protocol.topic_partition import TopicPartition
from lograft.security.acls import CLUSTER_RESOURCE_NAME, AclOperation, ResourceType

_GROUP, _DESCRIBE = ResourceType.GROUP, AclOperation.DESCRIBE

# How long describe waits for partition leaders' high watermarks (lag), ms.
DESCRIBE_OFFSETS_TIMEOUT_MS = 2_000
# How long reset waits for partition leaders' offsets (it fails without them), ms.
RESET_OFFSETS_TIMEOUT_MS = 5_000
# How long listing groups waits for each broker, ms.
LIST_GROUPS_TIMEOUT_MS = 5_000


class GroupAdminRoutes:
    def __init__(
        self,
        runtime: GroupCoordinatorRuntime,
        metadata: MetadataView,
        calls: PeerCalls,
        offsets: PartitionOffsets,
    ) -> None:
        self.runtime = runtime
        self.metadata = metadata
        self.calls = calls
        self.offsets = offsets
        # This node's own listing, asked through `calls` like any other
        # broker's, is answered in process by the function that answers peers.
        calls.serve_locally(runtime.replicas.broker_id, list_groups=self._local_groups)

    def add_to(self, app: web.Application) -> None:
        r = app.router
        # `[^/]+`: any group id (aiohttp's default refuses braces); "/" as %2F.
        r.add_get("/v1/groups", self.list_groups)
        r.add_get("/v1/groups/{group:[^/]+}", self.describe)
        r.add_delete("/v1/groups/{group:[^/]+}", self.delete)
        r.add_post("/v1/groups/{group:[^/]+}/offsets/reset", self.reset_offsets)
        r.add_get(GROUPS_PATH, self.list_local_groups)

    async def list_local_groups(self, _request: web.Request) -> web.Response:
        return json_response(self._local_groups())

    def _local_groups(self) -> GroupListing:
        return {
            "broker_id": self.runtime.replicas.broker_id,
            "groups": [
                {"group_id": g.group_id, "state": g.state.value, "members": g.members}
                for g in self.runtime.list_local_groups()
            ],
            "loading_partitions": self.runtime.loading_partitions(),
        }

    async def list_groups(self, request: web.Request) -> web.Response:
        brokers = self.metadata.live_brokers()
        answers = await asyncio.gather(*(self._groups_of(b) for b in brokers))
        groups: list[dict[str, Any]] = []
        unreachable: list[int] = []
        loading: list[int] = []
        for broker_id, doc in zip(brokers, answers, strict=True):
            if doc is None:
                unreachable.append(broker_id)
                continue
            loading += doc.get("loading_partitions", [])
            groups += [{**g, "coordinator_id": broker_id} for g in doc.get("groups", [])]
        # Kafka's ListGroups: DESCRIBE on the cluster shows every group, else
        # only the groups the caller may DESCRIBE (the others are absent).
        if not access.may(request, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, _DESCRIBE):
            groups = [g for g in groups if access.may(request, _GROUP, g["group_id"], _DESCRIBE)]
        groups.sort(key=lambda g: g["group_id"])
        # A broker that did not answer, or a partition still loading, may hold
        # groups this list lacks: say so rather than answer a short list as whole.
        return json_response(
            {
                "groups": groups,
                "unreachable_brokers": unreachable,
                "loading_partitions": sorted(loading),
            }
        )

    async def _groups_of(self, broker_id: int) -> GroupListing | None:
        try:
            return await self.calls.list_groups(broker_id, timeout_ms=LIST_GROUPS_TIMEOUT_MS)
        except (LograftError, ValueError):
            # Unreachable, refused or unreadable: listed as unreachable.
            return None

    async def describe(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]

        def visible(topic: str) -> bool:
            return access.may(request, ResourceType.TOPIC, topic, _DESCRIBE)

        async def high_watermarks(tps: Any) -> dict[TopicPartition, int]:
            # Only the visible topics' leaders are asked; the others are not shown.
            wanted = [tp for tp in tps if visible(tp.topic)]
            return await self.offsets.high_watermarks(wanted, DESCRIBE_OFFSETS_TIMEOUT_MS)

        description = await self.runtime.describe_group(group_id, high_watermarks)
        # Topics the caller may not DESCRIBE are absent (GET .../offsets alike).
        return json_response(describe_json(description, visible))

    async def delete(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        await self.runtime.delete_group(group_id)
        return json_response({"group_id": group_id, "deleted": True})

    async def reset_offsets(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        body = await parse_body(request, ResetOffsets)
        strategy, timestamp, offset = body.strategy, body.timestamp, body.offset
        if strategy is OffsetResetStrategy.TIMESTAMP and timestamp is None:
            raise InvalidRequestError("strategy timestamp needs timestamp (ms)", field="timestamp")
        if strategy is OffsetResetStrategy.OFFSET and offset is None:
            raise InvalidRequestError("strategy offset needs offset", field="offset")
        # As a commit: READ on every topic reset, before looking them up.
        named = body.topics or [p.topic for p in body.partitions or ()]
        access.require_each(request, ResourceType.TOPIC, named, AclOperation.READ)
        tps = self._reset_partitions(body)
        check_partition_count(tps, self.runtime.config.offset_commit_partitions_max)
        self.runtime.check_can_reset(group_id)
        found = await self.offsets.bounds(tps, RESET_OFFSETS_TIMEOUT_MS, timestamp)
        bounds: dict[TopicPartition, PartitionBounds] = {}
        for tp, b in found.items():
            if isinstance(b, LograftError):
                raise b
            bounds[tp] = b
        new = resolve_reset_offsets(strategy, bounds, offset)
        if body.dry_run:
            return json_response(self._dry_run(group_id, new))
        done = await self.runtime.reset_offsets(group_id, new)
        return json_response(
            {
                "group_id": group_id,
                "offsets": [
                    {"topic": tp.topic, "partition": tp.partition, "offset": o}
                    for tp, o in sorted(done.items(), key=lambda kv: _tp_key(kv[0]))
                ],
            }
        )

    def _dry_run(self, group_id: str, new: dict[TopicPartition, int]) -> dict[str, Any]:
        """What a reset would set, next to what is committed now (null: nothing)."""
        committed = self.runtime.fetch_offsets(group_id, {tp.topic for tp in new})
        return {
            "group_id": group_id,
            "dry_run": True,
            "offsets": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": o,
                    "committed_offset": c.offset if (c := committed.get(tp)) else None,
                }
                for tp, o in sorted(new.items(), key=lambda kv: _tp_key(kv[0]))
            ],
        }

    def _reset_partitions(self, body: ResetOffsets) -> list[TopicPartition]:
        if (body.topics is None) == (body.partitions is None):
            raise InvalidRequestError("name either topics or partitions to reset")
        if body.partitions is not None:
            tps = [TopicPartition(p.topic, p.partition) for p in body.partitions]
        else:
            tps = topic_partitions(self.metadata, body.topics or ())
        if not tps:
            raise InvalidRequestError("no partitions to reset")
        return tps


def check_partition_count(tps: list[TopicPartition], limit: int) -> None:
    """Refuse before asking partition leaders about more partitions than a commit may hold."""
    if len(tps) > limit:
        raise InvalidRequestError(
            f"{len(tps)} partitions; at most {limit} (offset_commit_partitions_max) per request",
            offset_commit_partitions_max=limit,
        )


def topic_partitions(metadata: MetadataView, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of each topic, in order."""
    tps: list[TopicPartition] = []
    for name in topics:
        view = metadata.topic(name)
        if view is None:
            raise UnknownTopicOrPartitionError(
                f"topic {shown(name)} does not exist", topic=clip(name)
            )
        tps += [TopicPartition(name, p) for p in sorted(view.partitions)]
    return tps


def check_partitions_exist(metadata: MetadataView, tps: Iterable[TopicPartition]) -> None:
    """Refuse offsets for a topic or partition this broker's metadata does not
    have (as Kafka's OffsetCommit does): they would outlive nothing and could
    never be consumed, and a typo would otherwise pass silently."""
    for tp in tps:
        view = metadata.topic(tp.topic)
        if view is None:
            raise UnknownTopicOrPartitionError(
                f"topic {tp.topic!r} does not exist", topic=tp.topic, partition=tp.partition
            )
        if tp.partition not in view.partitions:
            count = len(view.partitions)
            raise UnknownTopicOrPartitionError(
                f"topic {tp.topic!r} has no partition {tp.partition}; it has {count} "
                f"(0..{count - 1})",
                topic=tp.topic,
                partition=tp.partition,
            )


def _tp_key(tp: TopicPartition) -> tuple[str, int]:
    return (tp.topic, tp.partition)
