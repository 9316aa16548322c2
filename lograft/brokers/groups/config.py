"""Settings and limits of the group coordinator, each with its unit last.

Every collection the coordinator keeps or accepts has a bound here: members
per group, partitions an assignment covers, topics per subscription, groups per
coordinator, committed partitions per group and per request, and the sizes of
ids and offset metadata.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from lograft.typed import FieldError, Positive, Record

ASSIGNOR_NAMES = ("range", "uniform")

# Kafka's limit on a topic name (Topic.MAX_NAME_LENGTH), in characters.
TOPIC_NAME_CHARS_MAX = 249

# Ids and metadata travel in record keys as Kafka strings (int16 length).
_INT16_MAX = 32_767
Int16Length = Annotated[int, Meta(ge=1, le=_INT16_MAX)]


class GroupCoordinatorConfig(Record):
    # A member whose last heartbeat is older than this is removed, ms.
    session_timeout_ms: Positive = 10_000
    # How often members should heartbeat; sent in every heartbeat response, ms.
    group_heartbeat_interval_ms: Positive = 1_000
    # A member that still holds partitions it was asked to revoke this long
    # after being asked is removed (its partitions move). Members may ask for a
    # different value when they join, up to the maximum, ms.
    rebalance_timeout_ms: Positive = 60_000
    rebalance_timeout_ms_max: Positive = 300_000
    # Members of one group.
    group_max_size: Positive = 1_000
    # Partitions one group's target assignment may cover. A subscription that
    # would exceed it is refused; if topics grow past it later, partitions
    # beyond it (topics in name order) are left unassigned.
    group_assigned_partitions_max: Positive = 10_000
    # Topics in one member's subscription.
    subscribed_topics_max: Positive = 1_000
    # Groups held by one coordinator (one `__consumer_offsets` partition).
    groups_max: Positive = 10_000
    # Partitions with a committed offset, per group.
    group_committed_partitions_max: Positive = 100_000
    # Partitions in one commit or reset request.
    offset_commit_partitions_max: Positive = 10_000
    # Kafka's `offset.metadata.max.bytes`: UTF-8 bytes of a commit's metadata.
    offset_metadata_bytes_max: Annotated[int, Meta(ge=0, le=_INT16_MAX)] = 4_096
    # Kafka's `offsets.retention.minutes` (7 days): offsets of a group without
    # members that were committed longer ago than this are deleted, ms.
    offsets_retention_ms: Positive = 7 * 24 * 3600 * 1000
    # UTF-8 bytes of ids carried in records.
    group_id_bytes_max: Int16Length = 255
    member_id_bytes_max: Int16Length = 255
    client_id_bytes_max: Int16Length = 255
    # The assignor of a group whose members name none.
    assignor_default: Literal["range", "uniform"] = "uniform"

    def __post_init__(self) -> None:
        # A member must be able to heartbeat more than once per session.
        if self.group_heartbeat_interval_ms >= self.session_timeout_ms:
            raise FieldError("group_heartbeat_interval_ms", "must be below session_timeout_ms")
        if self.rebalance_timeout_ms > self.rebalance_timeout_ms_max:
            raise FieldError("rebalance_timeout_ms", "must not exceed rebalance_timeout_ms_max")
