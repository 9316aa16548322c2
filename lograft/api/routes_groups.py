"""Consumer groups over HTTP (the contract is in docs/api.md, "Consumer groups").

- `GET  /v1/groups/{group}/coordinator`: any broker; creates `__consumer_offsets`
  on first use.
- `POST /v1/groups/{group}/members`: join; `POST .../members/{member:[^/]+}/heartbeat`;
  `DELETE .../members/{member:[^/]+}`: leave.
- `POST /v1/groups/{group}/offsets`: commit; `GET`: fetch committed offsets.
- `GET /v1/groups`: every group in the cluster (asks each broker's
  `GET /internal/v1/groups`); `GET|DELETE /v1/groups/{group}`: describe,
  delete; `POST /v1/groups/{group}/offsets/reset`.

Every group-specific request is served by the group's coordinator only; any
other broker answers NOT_COORDINATOR naming it. Request bodies are parsed
strictly here (wrong types and unknown fields are INVALID_REQUEST) and turned
into the runtime's plain values; the runtime and the pure core decide the rest.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web

from lograft.api.app import SECRET_HEADER
from lograft.api.group_json import (
    describe_json,
    heartbeat_json,
    offsets_from_json,
    optional_int,
    optional_str,
    parse_body,
    partitions_from_json,
    required_int,
    topic_partitions_from_json,
    topics_from_json,
)
from lograft.api.partition_offsets import PartitionOffsets
from lograft.api.peer_urls import PeerUrls
from lograft.api.routes_data import json_response
from lograft.api.services import MetadataView
from lograft.brokers.group_admin import OffsetResetStrategy, PartitionBounds, resolve_reset_offsets
from lograft.brokers.group_heartbeat import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    HeartbeatRequest,
)
from lograft.brokers.group_placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.group_runtime import GroupCoordinatorRuntime
from lograft.brokers.partition import TopicPartition
from lograft.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    LograftError,
    UnknownTopicOrPartitionError,
)

# How long describe waits for partition leaders' high watermarks (lag), ms.
DESCRIBE_OFFSETS_TIMEOUT_MS = 2_000
# How long reset waits for partition leaders' offsets (it fails without them), ms.
RESET_OFFSETS_TIMEOUT_MS = 5_000
# How long listing groups waits for each broker, ms.
LIST_GROUPS_TIMEOUT_MS = 5_000

CreateOffsetsTopic = Callable[[], Awaitable[None]]


class GroupRoutes:
    def __init__(
        self,
        runtime: GroupCoordinatorRuntime,
        metadata: MetadataView,
        session: aiohttp.ClientSession,
        create_offsets_topic: CreateOffsetsTopic,
        offsets: PartitionOffsets,
        peers: PeerUrls,
    ) -> None:
        self.runtime = runtime
        self.metadata = metadata
        self.session = session
        self.create_offsets_topic = create_offsets_topic
        self.offsets = offsets
        self.peers = peers

    def add_to(self, app: web.Application) -> None:
        r = app.router
        # `[^/]+`: ids are any string (aiohttp's default refuses braces); a
        # "/" in one travels as %2F and arrives decoded.
        r.add_get("/v1/groups", self.list_groups)
        r.add_get("/v1/groups/{group:[^/]+}", self.describe)
        r.add_delete("/v1/groups/{group:[^/]+}", self.delete)
        r.add_get("/v1/groups/{group:[^/]+}/coordinator", self.find_coordinator)
        r.add_post("/v1/groups/{group:[^/]+}/members", self.join)
        r.add_post("/v1/groups/{group:[^/]+}/members/{member:[^/]+}/heartbeat", self.heartbeat)
        r.add_delete("/v1/groups/{group:[^/]+}/members/{member:[^/]+}", self.leave)
        r.add_post("/v1/groups/{group:[^/]+}/offsets", self.commit)
        r.add_get("/v1/groups/{group:[^/]+}/offsets", self.fetch_offsets)
        r.add_post("/v1/groups/{group:[^/]+}/offsets/reset", self.reset_offsets)
        r.add_get("/internal/v1/groups", self.list_local_groups)

    # -- coordinator --------------------------------------------------------------------

    async def find_coordinator(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        if self.metadata.topic(CONSUMER_OFFSETS_TOPIC) is None:
            await self.create_offsets_topic()
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
        body = await parse_body(
            request,
            {
                "member_id",
                "subscribed_topics",
                "assignor",
                "client_id",
                "rebalance_timeout_ms",
                "sequence",
            },
        )
        if "subscribed_topics" not in body:
            raise InvalidRequestError("a join needs subscribed_topics (a list of topic names)")
        member_id = optional_str(body, "member_id") or str(uuid.uuid4())
        return await self._heartbeat(request, body, member_id, JOIN_GROUP_MEMBER_EPOCH)

    async def heartbeat(self, request: web.Request) -> web.Response:
        body = await parse_body(
            request,
            {
                "member_epoch",
                "owned_partitions",
                "subscribed_topics",
                "assignor",
                "client_id",
                "rebalance_timeout_ms",
                "sequence",
            },
        )
        epoch = required_int(body, "member_epoch", minimum=1)
        return await self._heartbeat(request, body, request.match_info["member"], epoch)

    async def leave(self, request: web.Request) -> web.Response:
        raw = request.query.get("sequence")
        body: dict[str, Any] = {}
        if raw is not None:
            try:
                body["sequence"] = int(raw)
            except ValueError:
                raise InvalidRequestError(f"sequence={raw!r} is not an integer") from None
        return await self._heartbeat(
            request, body, request.match_info["member"], LEAVE_GROUP_MEMBER_EPOCH
        )

    async def _heartbeat(
        self, request: web.Request, body: Mapping[str, Any], member_id: str, epoch: int
    ) -> web.Response:
        group_id = request.match_info["group"]
        subscribed = body.get("subscribed_topics")
        owned = body.get("owned_partitions")
        hb = HeartbeatRequest(
            group_id=group_id,
            member_id=member_id,
            member_epoch=epoch,
            subscribed_topics=None if subscribed is None else topics_from_json(subscribed),
            owned_partitions=None
            if owned is None
            else partitions_from_json(owned, "owned_partitions"),
            assignor=optional_str(body, "assignor"),
            client_id=optional_str(body, "client_id") or "",
            client_host=(request.remote or "") if epoch == JOIN_GROUP_MEMBER_EPOCH else "",
            rebalance_timeout_ms=optional_int(body, "rebalance_timeout_ms", minimum=1),
            sequence=optional_int(body, "sequence", minimum=0),
        )
        response = await self.runtime.heartbeat(hb)
        return json_response(
            heartbeat_json(group_id, response, self.runtime.config.session_timeout_ms)
        )

    # -- offsets ------------------------------------------------------------------------

    async def commit(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        body = await parse_body(request, {"member_id", "member_epoch", "offsets"})
        member_id = optional_str(body, "member_id") or ""
        epoch = optional_int(body, "member_epoch", minimum=-1)
        if member_id and epoch is None:
            raise InvalidRequestError("a member's commit needs its member_epoch")
        if "offsets" not in body:
            raise InvalidRequestError("send offsets: [{topic, partition, offset}, ...]")
        offsets = offsets_from_json(body["offsets"])
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
        committed = self.runtime.fetch_offsets(group_id, topics)
        return json_response(
            {
                "group_id": group_id,
                "offsets": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "offset": c.offset,
                        "metadata": c.metadata,
                        "leader_epoch": c.leader_epoch,
                        "commit_timestamp": c.commit_timestamp_ms,
                    }
                    for tp, c in sorted(committed.items(), key=lambda kv: _tp_key(kv[0]))
                ],
            }
        )

    # -- administration -----------------------------------------------------------------

    async def list_local_groups(self, _request: web.Request) -> web.Response:
        return json_response(self._local_groups())

    def _local_groups(self) -> dict[str, Any]:
        return {
            "broker_id": self.runtime.replicas.broker_id,
            "groups": [
                {"group_id": g.group_id, "state": g.state.value, "members": g.members}
                for g in self.runtime.list_local_groups()
            ],
            "loading_partitions": self.runtime.loading_partitions(),
        }

    async def list_groups(self, _request: web.Request) -> web.Response:
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

    async def _groups_of(self, broker_id: int) -> dict[str, Any] | None:
        if broker_id == self.runtime.replicas.broker_id:
            return self._local_groups()
        url = self.peers.broker(self.metadata, broker_id)
        if url is None:
            return None
        secret = self.session.headers.get(SECRET_HEADER, "")
        try:
            async with self.session.get(
                f"{url}/internal/v1/groups",
                headers={SECRET_HEADER: secret},
                timeout=aiohttp.ClientTimeout(total=LIST_GROUPS_TIMEOUT_MS / 1000),
            ) as resp:
                if resp.status != 200:
                    return None
                doc = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    async def describe(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]

        async def high_watermarks(tps: Any) -> dict[TopicPartition, int]:
            return await self.offsets.high_watermarks(tps, DESCRIBE_OFFSETS_TIMEOUT_MS)

        description = await self.runtime.describe_group(group_id, high_watermarks)
        return json_response(describe_json(description))

    async def delete(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        await self.runtime.delete_group(group_id)
        return json_response({"group_id": group_id, "deleted": True})

    async def reset_offsets(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        body = await parse_body(
            request, {"strategy", "timestamp", "offset", "topics", "partitions"}
        )
        raw_strategy = optional_str(body, "strategy")
        strategies = [s.value for s in OffsetResetStrategy]
        if raw_strategy not in strategies:
            raise InvalidRequestError(f"strategy must be one of {strategies}")
        strategy = OffsetResetStrategy(raw_strategy)
        timestamp = optional_int(body, "timestamp", minimum=0)
        offset = optional_int(body, "offset", minimum=0)
        if strategy is OffsetResetStrategy.TIMESTAMP and timestamp is None:
            raise InvalidRequestError("strategy timestamp needs timestamp (ms)")
        if strategy is OffsetResetStrategy.OFFSET and offset is None:
            raise InvalidRequestError("strategy offset needs offset")
        tps = self._reset_partitions(body)
        self.runtime.check_can_reset(group_id)
        found = await self.offsets.bounds(tps, RESET_OFFSETS_TIMEOUT_MS, timestamp)
        bounds: dict[TopicPartition, PartitionBounds] = {}
        for tp, b in found.items():
            if isinstance(b, LograftError):
                raise b
            bounds[tp] = b
        new = resolve_reset_offsets(strategy, bounds, offset)
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

    def _reset_partitions(self, body: Mapping[str, Any]) -> list[TopicPartition]:
        if ("topics" in body) == ("partitions" in body):
            raise InvalidRequestError("name either topics or partitions to reset")
        if "partitions" in body:
            tps = topic_partitions_from_json(body["partitions"])
        else:
            tps = []
            for name in topics_from_json(body["topics"]):
                view = self.metadata.topic(name)
                if view is None:
                    raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", topic=name)
                tps += [TopicPartition(name, p) for p in sorted(view.partitions)]
        if not tps:
            raise InvalidRequestError("no partitions to reset")
        return tps


def _tp_key(tp: TopicPartition) -> tuple[str, int]:
    return (tp.topic, tp.partition)
