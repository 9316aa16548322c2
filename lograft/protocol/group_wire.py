"""The consumer-group wire shapes a member uses, for clients and servers alike.

The HTTP contract is docs/api.md ("Consumer groups"): a member joins with
epoch 0 (`POST /v1/groups/{group}/members`), heartbeats with its epoch and
the partitions it holds (`POST .../members/{member}/heartbeat`), leaves
(`DELETE .../members/{member}`) and commits with its id and epoch
(`POST .../offsets`). Every join and heartbeat answer carries `assignment`,
the partitions the member may consume now.

The Python client (`lograft.client`) and the SSE group stream
(`lograft.api.stream.group`) both speak it; the member's decisions are in
`group_member.py`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from lograft.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    LograftError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.typed import build

Partitions = frozenset[TopicPartition]
NO_PARTITIONS: Partitions = frozenset()

# The member epoch of a join (and of a member that is not in the group).
JOIN_EPOCH = 0

# Answers after which the member must drop every partition and join again.
REJOIN_ERRORS = (FencedMemberEpochError, UnknownMemberIdError)
# Answers that mean "ask someone else who the coordinator is".
COORDINATOR_ERRORS = (
    NotCoordinatorError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
)


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """A join's or heartbeat's answer, as the member uses it."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    session_timeout_ms: int
    assignment: Partitions


class _HeartbeatBody(msgspec.Struct, frozen=True, kw_only=True):
    # Fields beyond these (group_id, ...) are allowed: the member needs only these.
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: Annotated[int, msgspec.Meta(ge=1)]
    session_timeout_ms: Annotated[int, msgspec.Meta(ge=1)]
    assignment: dict[str, list[Annotated[int, msgspec.Meta(ge=0)]]]


def group_path(group_id: str, suffix: str = "") -> str:
    """`/v1/groups/{group}{suffix}` with the id URL-encoded (a "/" becomes %2F)."""
    return f"/v1/groups/{urllib.parse.quote(group_id, safe='')}{suffix}"


def member_path(group_id: str, member_id: str, suffix: str = "") -> str:
    return group_path(group_id, f"/members/{urllib.parse.quote(member_id, safe='')}{suffix}")


def partitions_json(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(tps):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def parse_heartbeat(doc: Any, error: type[LograftError]) -> HeartbeatAnswer:
    """A join's or heartbeat's answer body (decoded JSON), or `error` naming the bad field."""
    body = build(doc, _HeartbeatBody, error=error, where="heartbeat answer")
    return HeartbeatAnswer(
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        heartbeat_interval_ms=body.heartbeat_interval_ms,
        session_timeout_ms=body.session_timeout_ms,
        assignment=frozenset(
            TopicPartition(topic, p) for topic, ps in body.assignment.items() for p in ps
        ),
    )


def parse_committed(doc: Any, error: type[LograftError]) -> dict[TopicPartition, int]:
    """`GET .../offsets` -> {tp: committed offset}, or `error`."""
    try:
        return {
            TopicPartition(str(o["topic"]), int(o["partition"])): int(o["offset"])
            for o in doc["offsets"]
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise error(f"committed offsets are malformed: {exc!r}") from None


def commit_body(
    member_id: str, member_epoch: int, offsets: Mapping[TopicPartition, int]
) -> dict[str, Any]:
    """A member commits with its id and epoch; a consumer that is not a member
    (assign() with a group_id) with an empty id and no epoch."""
    body: dict[str, Any] = {
        "member_id": member_id,
        "offsets": [
            {"topic": tp.topic, "partition": tp.partition, "offset": off}
            for tp, off in sorted(offsets.items())
        ],
    }
    if member_id:
        body["member_epoch"] = member_epoch
    return body


__all__ = [
    "COORDINATOR_ERRORS",
    "JOIN_EPOCH",
    "NO_PARTITIONS",
    "REJOIN_ERRORS",
    "HeartbeatAnswer",
    "Partitions",
    "commit_body",
    "group_path",
    "member_path",
    "parse_committed",
    "parse_heartbeat",
    "partitions_json",
]
