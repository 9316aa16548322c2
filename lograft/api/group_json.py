"""JSON shapes of the consumer group endpoints, both ways (docs/api.md).

Request bodies are the typed Records of request_shapes: a field of the wrong
type, an unknown field or a negative partition is INVALID_REQUEST, naming the
field. A set of partitions is `{"topic": [p, ...]}` in both directions;
offsets are lists of objects. Sizes are bounded by the pure core's limits,
which it checks itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from lograft.api.request_shapes import CommittedOffset, PartitionsByTopic, decode_body
from lograft.brokers.groups.admin import GroupDescription
from lograft.brokers.groups.heartbeat import HeartbeatResponse
from lograft.brokers.groups.offsets import OffsetAndMetadata
from lograft.brokers.groups.records import Partitions
from lograft.errors import InvalidRequestError
from lograft.protocol.topic_partition import TopicPartition

T = TypeVar("T")


async def parse_body(request: web.Request, into: type[T]) -> T:
    """The request's body as an `into` (request_shapes); an empty body is `{}`."""
    return decode_body(await request.read(), into)


def partitions_from_json(value: PartitionsByTopic) -> Partitions:
    """`{"topic": [p, ...]}` -> a set of partitions."""
    return frozenset(TopicPartition(topic, p) for topic, ps in value.items() for p in ps)


def offsets_from_json(
    value: list[CommittedOffset],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The offsets of a commit; a partition named twice is INVALID_REQUEST."""
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for i, entry in enumerate(value):
        tp = TopicPartition(entry.topic, entry.partition)
        if tp in out:
            raise InvalidRequestError(f"offsets[{i}]: {tp} appears twice", field=f"offsets[{i}]")
        out[tp] = OffsetAndMetadata(
            offset=entry.offset,
            metadata=entry.metadata or "",
            leader_epoch=-1 if entry.leader_epoch is None else entry.leader_epoch,
        )
    return out


def _everything(_topic: str) -> bool:
    return True


def partitions_json(
    parts: Partitions, visible: Callable[[str], bool] = _everything
) -> dict[str, list[int]]:
    """`{"topic": [p, ...]}` of the partitions whose topic is `visible`."""
    out: dict[str, list[int]] = {}
    for tp in parts:
        if visible(tp.topic):
            out.setdefault(tp.topic, []).append(tp.partition)
    return {topic: sorted(out[topic]) for topic in sorted(out)}


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


def describe_json(
    d: GroupDescription, visible: Callable[[str], bool] = _everything
) -> dict[str, Any]:
    """The group's description, naming only `visible` topics: a caller may
    describe a group without being allowed to DESCRIBE every topic its
    members read (the others are absent, as from the group's offsets)."""
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
                "subscribed_topics": [t for t in m.subscribed_topics if visible(t)],
                "assignor": m.assignor,
                "member_epoch": m.member_epoch,
                "member_state": m.member_state.value,
                "assigned": partitions_json(m.assigned, visible),
                "pending_revocation": partitions_json(m.pending_revocation, visible),
                "target": partitions_json(m.target, visible),
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
            if visible(o.topic_partition.topic)
        ],
    }
