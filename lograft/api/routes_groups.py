"""Consumer groups over HTTP (the contract is in docs/api.md, "Consumer groups").

- `GET  /v1/groups/{group}/coordinator`: any broker; creates `__consumer_offsets`
  on first use.
- `POST /v1/groups/{group}/members`: join; `POST .../members/{member}/heartbeat`;
  `DELETE .../members/{member}`: leave.
- `POST /v1/groups/{group}/offsets`: commit; `GET`: fetch committed offsets
  (with `auto_offset_reset`: where a consumer starts, per partition).
- administration (list, describe, delete, reset offsets): routes_group_admin,
  registered from here.

Every group-specific request is served by the group's coordinator only; any
other broker answers NOT_COORDINATOR naming it. Request bodies are parsed
strictly here (wrong types and unknown fields are INVALID_REQUEST) and turned
into the runtime's plain values; the runtime and the pure core decide the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from lograft.api import access
from lograft.api.group_json import (
    heartbeat_json,
    offsets_from_json,
    parse_body,
    partitions_from_json,
)
from lograft.api.http_errors import error_dict
from lograft.api.partition_offsets import PartitionOffsets
from lograft.api.request_ints import INT64_MAX, optional_query_int
from lograft.api.request_shapes import Commit, Heartbeat, Join
from lograft.api.routes_data import json_response
from lograft.api.routes_group_admin import (
    GroupAdminRoutes,
    check_partition_count,
    check_partitions_exist,
    topic_partitions,
)
from lograft.api.services import MetadataView, PeerCalls
from lograft.brokers.groups.heartbeat import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    HeartbeatRequest,
)
from lograft.brokers.groups.offsets import AutoOffsetReset, CommittedOffset, resolve_start_offset
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    LograftError,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.security.acls import AclOperation, ResourceType

# How long fetching offsets with auto_offset_reset waits for partition leaders, ms.
START_OFFSETS_TIMEOUT_MS = 5_000

CreateOffsetsTopic = Callable[[], Awaitable[None]]


class GroupRoutes:
    def __init__(
        self,
        runtime: GroupCoordinatorRuntime,
        metadata: MetadataView,
        calls: PeerCalls,
        create_offsets_topic: CreateOffsetsTopic,
        offsets: PartitionOffsets,
    ) -> None:
        self.runtime = runtime
        self.metadata = metadata
        self.calls = calls
        self.create_offsets_topic = create_offsets_topic
        self.offsets = offsets

    def add_to(self, app: web.Application) -> None:
        r = app.router
        # `[^/]+`: ids are any string (aiohttp's default refuses braces); a
        # "/" in one travels as %2F and arrives decoded.
        r.add_get("/v1/groups/{group:[^/]+}/coordinator", self.find_coordinator)
        r.add_post("/v1/groups/{group:[^/]+}/members", self.join)
        r.add_post("/v1/groups/{group:[^/]+}/members/{member:[^/]+}/heartbeat", self.heartbeat)
        r.add_delete("/v1/groups/{group:[^/]+}/members/{member:[^/]+}", self.leave)
        r.add_post("/v1/groups/{group:[^/]+}/offsets", self.commit)
        r.add_get("/v1/groups/{group:[^/]+}/offsets", self.fetch_offsets)
        GroupAdminRoutes(self.runtime, self.metadata, self.calls, self.offsets).add_to(app)

    # -- coordinator --------------------------------------------------------------------

    async def find_coordinator(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        if self.metadata.topic(CONSUMER_OFFSETS_TOPIC) is None:
            try:
                await self.create_offsets_topic()
            except LograftError as exc:
                if not exc.retriable:
                    raise
                # NOT_CONTROLLER and the like would send the client to the
                # controller; for it, the coordinator is just not there yet.
                raise CoordinatorNotAvailableError(
                    f"could not create {CONSUMER_OFFSETS_TOPIC} yet: {exc.message}; retry shortly",
                    cause=exc.code,
                ) from None
        where = self.runtime.locate(group_id)
        if where.coordinator_id < 0:
            raise CoordinatorNotAvailableError(
                f"{CONSUMER_OFFSETS_TOPIC}-{where.partition} has no leader right now; "
                "retry shortly",
                group_id=group_id,
                partition=where.partition,
            )
        return json_response(
            {
                "group_id": group_id,
                "partition": where.partition,
                "coordinator_id": where.coordinator_id,
                "coordinator_url": where.coordinator_url,
            }
        )

    # -- membership ---------------------------------------------------------------------

    async def join(self, request: web.Request) -> web.Response:
        body = await parse_body(request, Join)
        member_id = body.member_id or str(uuid.uuid4())
        return await self._heartbeat(request, body, member_id, JOIN_GROUP_MEMBER_EPOCH)

    async def heartbeat(self, request: web.Request) -> web.Response:
        body = await parse_body(request, Heartbeat)
        return await self._heartbeat(request, body, request.match_info["member"], body.member_epoch)

    async def leave(self, request: web.Request) -> web.Response:
        # A DELETE has no body: its sequence is a query parameter.
        sequence = optional_query_int(request.query, "sequence", maximum=INT64_MAX)
        hb = HeartbeatRequest(
            group_id=request.match_info["group"],
            member_id=request.match_info["member"],
            member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
            sequence=sequence,
        )
        return await self._send(hb)

    async def _heartbeat(
        self, request: web.Request, body: Join | Heartbeat, member_id: str, epoch: int
    ) -> web.Response:
        subscribed = body.subscribed_topics
        if subscribed:
            # Kafka's ConsumerGroupHeartbeat: a member may subscribe only to
            # topics it may see.
            access.require_each(request, ResourceType.TOPIC, subscribed, AclOperation.DESCRIBE)
        owned = body.owned_partitions if isinstance(body, Heartbeat) else None
        hb = HeartbeatRequest(
            group_id=request.match_info["group"],
            member_id=member_id,
            member_epoch=epoch,
            subscribed_topics=None if subscribed is None else tuple(subscribed),
            owned_partitions=None if owned is None else partitions_from_json(owned),
            assignor=body.assignor,
            client_id=body.client_id or "",
            client_host=(request.remote or "") if epoch == JOIN_GROUP_MEMBER_EPOCH else "",
            rebalance_timeout_ms=body.rebalance_timeout_ms,
            sequence=body.sequence,
        )
        return await self._send(hb)

    async def _send(self, hb: HeartbeatRequest) -> web.Response:
        group_id = hb.group_id
        response = await self.runtime.heartbeat(hb)
        return json_response(
            heartbeat_json(group_id, response, self.runtime.config.session_timeout_ms)
        )

    # -- offsets ------------------------------------------------------------------------

    async def commit(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        body = await parse_body(request, Commit)
        member_id = body.member_id or ""
        epoch = body.member_epoch
        if member_id and epoch is None:
            raise InvalidRequestError(
                "a member's commit needs its member_epoch", field="member_epoch"
            )
        offsets = offsets_from_json(body.offsets)
        # Before existence: a denied caller learns nothing of the topics.
        access.require_each(
            request, ResourceType.TOPIC, {tp.topic for tp in offsets}, AclOperation.READ
        )
        check_partitions_exist(self.metadata, offsets)
        done = await self.runtime.commit_offsets(group_id, member_id, epoch or 0, offsets)
        return json_response(
            {
                "group_id": group_id,
                "offsets": [
                    {"topic": tp.topic, "partition": tp.partition, "offset": om.offset}
                    for tp, om in sorted(done.items(), key=lambda kv: _tp_key(kv[0]))
                ],
            }
        )

    async def fetch_offsets(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        raw = request.query.get("topics")
        topics = None if raw is None else {t for t in raw.split(",") if t}
        reset_raw = request.query.get("auto_offset_reset")
        if topics is not None:
            access.require_each(request, ResourceType.TOPIC, topics, AclOperation.DESCRIBE)
        committed = self.runtime.fetch_offsets(group_id, topics)
        if topics is None:
            # All the group's offsets: only those of topics the caller may see.
            committed = {
                tp: c
                for tp, c in committed.items()
                if access.may(request, ResourceType.TOPIC, tp.topic, AclOperation.DESCRIBE)
            }
        if reset_raw is None:
            entries = [
                committed_json(tp, c)
                for tp, c in sorted(committed.items(), key=lambda kv: _tp_key(kv[0]))
            ]
        else:
            if topics is None:
                raise InvalidRequestError("auto_offset_reset needs topics")
            tps = topic_partitions(self.metadata, sorted(topics))
            check_partition_count(tps, self.runtime.config.offset_commit_partitions_max)
            entries = await self._start_offsets(tps, committed, reset_raw)
        return json_response({"group_id": group_id, "offsets": entries})

    async def _start_offsets(
        self,
        tps: list[TopicPartition],
        committed: Mapping[TopicPartition, CommittedOffset],
        reset_raw: str,
    ) -> list[dict[str, Any]]:
        """Every partition with where a consumer starts (`start_offset`), or why it cannot."""
        choices = [r.value for r in AutoOffsetReset]
        if reset_raw not in choices:
            raise InvalidRequestError(f"auto_offset_reset must be one of {choices}")
        reset = AutoOffsetReset(reset_raw)
        found = await self.offsets.bounds(tps, START_OFFSETS_TIMEOUT_MS)
        entries = []
        for tp in tps:
            c = committed.get(tp)
            entry = committed_json(tp, c)
            bounds = found[tp]
            try:
                if isinstance(bounds, LograftError):
                    raise bounds
                entry["start_offset"] = resolve_start_offset(
                    None if c is None else c.offset,
                    bounds.log_start_offset,
                    bounds.high_watermark,
                    reset,
                )
            except LograftError as exc:
                entry["error"] = error_dict(exc)
            entries.append(entry)
        return entries


def committed_json(tp: TopicPartition, c: CommittedOffset | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition}
    if c is None:
        entry["offset"] = None
        return entry
    entry.update(
        offset=c.offset,
        metadata=c.metadata,
        leader_epoch=c.leader_epoch,
        commit_timestamp=c.commit_timestamp_ms,
    )
    return entry


def _tp_key(tp: TopicPartition) -> tuple[str, int]:
    return (tp.topic, tp.partition)
