"""Settings and limits of the group coordinator, each with its unit last.

Every collection the coordinator keeps or accepts has a bound here: members
per group, partitions an assignment covers, topics per subscription, groups per
coordinator, committed partitions per group and per request, and the sizes of
ids and offset metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

ASSIGNOR_NAMES = ("range", "uniform")

# Kafka's limit on a topic name (Topic.MAX_NAME_LENGTH), in characters.
TOPIC_NAME_CHARS_MAX = 249


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    # A member whose last heartbeat is older than this is removed, ms.
    session_timeout_ms: int = 10_000
    # How often members should heartbeat; sent in every heartbeat response, ms.
    group_heartbeat_interval_ms: int = 1_000
    # A member that still holds partitions it was asked to revoke this long
    # after being asked is removed (its partitions move). Members may ask for a
    # different value when they join, up to the maximum, ms.
    rebalance_timeout_ms: int = 60_000
    rebalance_timeout_ms_max: int = 300_000
    # Members of one group.
    group_max_size: int = 1_000
    # Partitions one group's target assignment may cover. A subscription that
    # would exceed it is refused; if topics grow past it later, partitions
    # beyond it (topics in name order) are left unassigned.
    group_assigned_partitions_max: int = 10_000
    # Topics in one member's subscription.
    subscribed_topics_max: int = 1_000
    # Groups held by one coordinator (one `__consumer_offsets` partition).
    groups_max: int = 10_000
    # Partitions with a committed offset, per group.
    group_committed_partitions_max: int = 100_000
    # Partitions in one commit or reset request.
    offset_commit_partitions_max: int = 10_000
    # Kafka's `offset.metadata.max.bytes`: UTF-8 bytes of a commit's metadata.
    offset_metadata_bytes_max: int = 4_096
    # Kafka's `offsets.retention.minutes` (7 days): offsets of a group without
    # members that were committed longer ago than this are deleted, ms.
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # UTF-8 bytes of ids carried in records.
    group_id_bytes_max: int = 255
    member_id_bytes_max: int = 255
    client_id_bytes_max: int = 255
    # The assignor of a group whose members name none.
    assignor_default: str = "uniform"

    def __post_init__(self) -> None:
        for name in (
            "session_timeout_ms",
            "group_heartbeat_interval_ms",
            "rebalance_timeout_ms",
            "rebalance_timeout_ms_max",
            "group_max_size",
            "group_assigned_partitions_max",
            "subscribed_topics_max",
            "groups_max",
            "group_committed_partitions_max",
            "offset_commit_partitions_max",
            "offsets_retention_ms",
            "group_id_bytes_max",
            "member_id_bytes_max",
            "client_id_bytes_max",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.offset_metadata_bytes_max < 0:
            raise ValueError("offset_metadata_bytes_max must not be negative")
        # A member must be able to heartbeat more than once per session.
        if self.group_heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("group_heartbeat_interval_ms must be below session_timeout_ms")
        if self.rebalance_timeout_ms > self.rebalance_timeout_ms_max:
            raise ValueError("rebalance_timeout_ms must not exceed rebalance_timeout_ms_max")
        if self.assignor_default not in ASSIGNOR_NAMES:
            raise ValueError(f"assignor_default must be one of {ASSIGNOR_NAMES}")
        # Ids travel in record keys as Kafka strings (int16 length).
        for name in ("group_id_bytes_max", "member_id_bytes_max", "client_id_bytes_max"):
            if getattr(self, name) > 32_767:
                raise ValueError(f"{name} must fit an int16 length (32767)")
        if self.offset_metadata_bytes_max > 32_767:
            raise ValueError("offset_metadata_bytes_max must fit an int16 length (32767)")
