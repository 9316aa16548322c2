"""JSON shapes of the consumer group endpoints, both ways (docs/api.md).

Parsing is strict: a field of the wrong type, an unknown field or a negative
partition is INVALID_REQUEST, naming the field. A set of partitions is
`{"topic": [p, ...]}` in both directions; offsets are lists of objects.
Sizes are bounded by the pure core's limits, which it checks itself.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import orjson
from aiohttp import web

from lograft.api.request_ints import INT32_MAX, INT64_MAX, json_int
from lograft.brokers.groups.admin import GroupDescription
from lograft.brokers.groups.heartbeat import HeartbeatResponse
from lograft.brokers.groups.offsets import OffsetAndMetadata
from lograft.brokers.groups.records import Partitions
from lograft.echo import shown
from lograft.errors import InvalidRequestError
from lograft.protocol.topic_partition import TopicPartition


async def parse_body(request: web.Request, allowed: Collection[str]) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    unknown = set(body) - set(allowed)
    if unknown:
        raise InvalidRequestError(
            f"unknown field(s) {shown(sorted(unknown))}; known: {sorted(allowed)}"
        )
    return body


def required_int(
    body: Mapping[str, Any], name: str, *, minimum: int, maximum: int = INT64_MAX
) -> int:
    if body.get(name) is None:
        raise InvalidRequestError(f"{name} is required")
    return json_int(body[name], name, minimum=minimum, maximum=maximum)


def optional_int(
    body: Mapping[str, Any], name: str, *, minimum: int, maximum: int = INT64_MAX
) -> int | None:
    value = body.get(name)
    return None if value is None else json_int(value, name, minimum=minimum, maximum=maximum)


def optional_str(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string")
    return value


def topics_from_json(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidRequestError("topics must be a list of topic names")
    return tuple(value)


def partitions_from_json(value: Any, name: str) -> Partitions:
    """`{"topic": [p, ...]}` -> a set of partitions."""
    if not isinstance(value, dict):
        raise InvalidRequestError(f'{name} must be an object {{"topic": [partition, ...]}}')
    out: set[TopicPartition] = set()
    for topic, numbers in value.items():
        if not isinstance(numbers, list):
            raise InvalidRequestError(f"{name}.{topic} must be a list of partition numbers")
        out.update(
            TopicPartition(topic, json_int(p, f"{name}.{topic}", maximum=INT32_MAX))
            for p in numbers
        )
    return frozenset(out)


def partitions_json(parts: Partitions) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in parts:
        out.setdefault(tp.topic, []).append(tp.partition)
    return {topic: sorted(out[topic]) for topic in sorted(out)}


def _object(value: Any, name: str, allowed: Collection[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{name} must be an object")
    unknown = set(value) - set(allowed)
    if unknown:
        raise InvalidRequestError(f"{name}: unknown field(s) {sorted(unknown)}")
    topic = value.get("topic")
    if not isinstance(topic, str):
        raise InvalidRequestError(f"{name}.topic must be a string")
    return value


def topic_partitions_from_json(value: Any) -> list[TopicPartition]:
    """`[{"topic", "partition"}, ...]`."""
    if not isinstance(value, list):
        raise InvalidRequestError('partitions must be a list of {"topic", "partition"}')
    out = []
    for i, item in enumerate(value):
        entry = _object(item, f"partitions[{i}]", {"topic", "partition"})
        partition = required_int(entry, "partition", minimum=0, maximum=INT32_MAX)
        out.append(TopicPartition(entry["topic"], partition))
    return out


def offsets_from_json(value: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """`[{"topic", "partition", "offset", "metadata"?, "leader_epoch"?}, ...]`."""
    if not isinstance(value, list):
        raise InvalidRequestError("offsets must be a list of {topic, partition, offset}")
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for i, item in enumerate(value):
        name = f"offsets[{i}]"
        entry = _object(item, name, {"topic", "partition", "offset", "metadata", "leader_epoch"})
        partition = required_int(entry, "partition", minimum=0, maximum=INT32_MAX)
        tp = TopicPartition(entry["topic"], partition)
        if tp in out:
            raise InvalidRequestError(f"{name}: {tp} appears twice")
        leader_epoch = optional_int(entry, "leader_epoch", minimum=-1, maximum=INT32_MAX)
        out[tp] = OffsetAndMetadata(
            offset=required_int(entry, "offset", minimum=0),
            metadata=optional_str(entry, "metadata") or "",
            leader_epoch=-1 if leader_epoch is None else leader_epoch,
        )
    return out


def heartbeat_json(
    group_id: str, response: HeartbeatResponse, session_timeout_ms: int
) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "member_id": response.member_id,
        "member_epoch": response.member_epoch,
        "heartbeat_interval_ms": response.heartbeat_interval_ms,
        "session_timeout_ms": session_timeout_ms,
        "assignment": partitions_json(response.assignment),
    }


def describe_json(d: GroupDescription) -> dict[str, Any]:
    return {
        "group_id": d.group_id,
        "state": d.state.value,
        "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
        "assignor": d.assignor,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topics": list(m.subscribed_topics),
                "assignor": m.assignor,
                "member_epoch": m.member_epoch,
                "member_state": m.member_state.value,
                "assigned": partitions_json(m.assigned),
                "pending_revocation": partitions_json(m.pending_revocation),
                "target": partitions_json(m.target),
            }
            for m in d.members
        ],
        "offsets": [
            {
                "topic": o.topic_partition.topic,
                "partition": o.topic_partition.partition,
                "committed_offset": o.committed_offset,
                "metadata": o.metadata,
                "high_watermark": o.high_watermark,
                "lag": o.lag,
                "owner": o.owner,
            }
            for o in d.offsets
        ],
    }
