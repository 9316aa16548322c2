"""The consumer-group wire shapes and the pure decisions a member makes.

The HTTP contract is docs/api.md ("Consumer groups"): a member joins with
epoch 0, heartbeats with its epoch and the partitions it holds, and every
answer carries `assignment`, the partitions it may consume now. Given the
partitions it holds and an answer, `reconcile` says which partitions to take
and which to give up; giving up is not instant (callbacks and a commit run
first), so the member keeps listing those as owned until it is done.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lograft.client.errors import UnexpectedResponseError
from lograft.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from lograft.protocol.topic_partition import TopicPartition

Partitions = frozenset[TopicPartition]
NO_PARTITIONS: Partitions = frozenset()

JOIN_EPOCH = 0

# Answers after which the member must drop every partition and join again.
REJOIN_ERRORS = (FencedMemberEpochError, UnknownMemberIdError)
# Answers that mean "ask someone else who the coordinator is".
COORDINATOR_ERRORS = (
    NotCoordinatorError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
)


class RebalanceKind(enum.Enum):
    ASSIGN = "assign"  # partitions added: look up committed offsets, then on_assign
    REVOKE = "revoke"  # partitions to give up: commit, on_revoke, then acknowledge
    LOST = "lost"  # partitions already gone (fenced or session lost): on_lost


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    kind: RebalanceKind
    partitions: Partitions
    # The membership generation it belongs to; a loss ends a generation and
    # makes its pending events void.
    generation: int


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    session_timeout_ms: int
    assignment: Partitions


@dataclass(frozen=True, slots=True)
class Reconciliation:
    added: Partitions  # newly assigned: the member holds them from now on
    revoked: Partitions  # to give up (not already being given up)


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


def partitions_from_json(doc: Any) -> Partitions:
    if not isinstance(doc, Mapping):
        raise UnexpectedResponseError(f"assignment is not an object: {doc!r}")
    try:
        return frozenset(
            TopicPartition(str(topic), int(p)) for topic, ps in doc.items() for p in ps
        )
    except (TypeError, ValueError) as exc:
        raise UnexpectedResponseError(f"assignment is malformed: {exc!r}") from None


def parse_heartbeat(doc: Any) -> HeartbeatAnswer:
    try:
        return HeartbeatAnswer(
            member_id=str(doc["member_id"]),
            member_epoch=int(doc["member_epoch"]),
            heartbeat_interval_ms=int(doc["heartbeat_interval_ms"]),
            session_timeout_ms=int(doc["session_timeout_ms"]),
            assignment=partitions_from_json(doc["assignment"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UnexpectedResponseError(f"heartbeat answer is malformed: {exc!r}") from None


def parse_committed(doc: Any) -> dict[TopicPartition, int]:
    """`GET .../offsets` -> {tp: committed offset}."""
    try:
        return {
            TopicPartition(str(o["topic"]), int(o["partition"])): int(o["offset"])
            for o in doc["offsets"]
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise UnexpectedResponseError(f"committed offsets are malformed: {exc!r}") from None


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


def reconcile(owned: Partitions, revoking: Partitions, assignment: Partitions) -> Reconciliation:
    """What to do with an answer's `assignment` while holding `owned`, of which
    `revoking` are already being given up.

    A partition being given up stays so even if the answer lists it again: its
    revocation callbacks may be running. Once it is released the coordinator
    hands it back in a later answer, as a new partition.
    """
    assert revoking <= owned, "only held partitions can be given up"
    return Reconciliation(
        added=assignment - owned,
        revoked=owned - assignment - revoking,
    )


def session_deadline(
    sent_at_s: float, server_session_ms: int, client_session_ms: int | None
) -> float:
    """When a member that sent its last answered heartbeat at `sent_at_s` must
    consider itself removed. The coordinator renewed the session no earlier
    than that send, so its own deadline is no earlier than this one; the
    client's setting can only shorten it (a longer one would let the member
    consume partitions the coordinator already handed on)."""
    session_ms = server_session_ms
    if client_session_ms is not None:
        session_ms = min(session_ms, client_session_ms)
    return sent_at_s + session_ms / 1000
