"""Committed offsets: commit (fenced by member epoch), fetch, expiry, and where a
consumer starts reading (`auto_offset_reset`).

Commit rules (Kafka's, for KIP-848 groups):

- a member commits with its member id and current member epoch. An unknown
  member id is UNKNOWN_MEMBER_ID; an epoch older than the member's is
  STALE_MEMBER_EPOCH (a zombie, or a commit that raced a rebalance: heartbeat,
  then commit with the new epoch); a newer one is FENCED_MEMBER_EPOCH;
- a client that is not a member (admin tools, "simple" consumers that assign
  partitions themselves) commits with an empty member id, and only while the
  group has no members: otherwise it could overwrite a live member's commits
  (UNKNOWN_MEMBER_ID);
- a commit is atomic: every partition is checked (offset >= 0, metadata at
  most `offset_metadata_bytes_max` UTF-8 bytes, limits) before any record is
  built, so a refused commit writes nothing.

A commit is one OffsetCommit record per partition; it is acknowledged when the
runtime has them committed (acks=all) in `__consumer_offsets`.

`commit_time_ms` is wall-clock time (it is persisted and compared on other
nodes by offset expiry), unlike the monotonic `now_ms` of sessions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.records import (
    GroupMetadataKey,
    GroupPartitionMetadataKey,
    GroupRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    TargetAssignmentMetadataKey,
)
from lograft.brokers.groups.result import GroupResult
from lograft.brokers.groups.state import ConsumerGroup, CoordinatorState
from lograft.brokers.groups.validation import check_group_id, check_topic_partition
from lograft.errors import (
    FencedMemberEpochError,
    GroupsLimitReachedError,
    InvalidRequestError,
    NoOffsetError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from lograft.protocol.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    # The next offset to consume.
    offset: int
    metadata: str = ""
    # Leader epoch of the last consumed record, -1 when unknown.
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    leader_epoch: int
    commit_timestamp_ms: int


def _check_offsets(
    group: ConsumerGroup | None,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    config: GroupCoordinatorConfig,
) -> None:
    if len(offsets) > config.offset_commit_partitions_max:
        raise InvalidRequestError(
            f"more than {config.offset_commit_partitions_max} partitions in one commit",
            offset_commit_partitions_max=config.offset_commit_partitions_max,
        )
    for tp, om in offsets.items():
        check_topic_partition(tp)
        if om.offset < 0 or om.offset >= 2**63:
            raise InvalidRequestError(f"{tp}: offset {om.offset} out of range", topic=tp.topic)
        if not -1 <= om.leader_epoch < 2**31:
            raise InvalidRequestError(f"{tp}: leader epoch {om.leader_epoch} out of range")
        try:
            metadata_bytes = len(om.metadata.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidRequestError(f"{tp}: metadata is not valid Unicode") from None
        if metadata_bytes > config.offset_metadata_bytes_max:
            raise OffsetMetadataTooLargeError(
                f"{tp}: metadata of {metadata_bytes} bytes; at most "
                f"{config.offset_metadata_bytes_max}",
                offset_metadata_bytes_max=config.offset_metadata_bytes_max,
            )
    existing = group.offsets if group is not None else {}
    new = sum(1 for tp in offsets if tp not in existing)
    if len(existing) + new > config.group_committed_partitions_max:
        raise InvalidRequestError(
            f"the group would have committed offsets for more than "
            f"{config.group_committed_partitions_max} partitions",
            group_committed_partitions_max=config.group_committed_partitions_max,
        )


def _check_committer(group: ConsumerGroup | None, member_id: str, member_epoch: int) -> None:
    if not member_id:
        if group is not None and group.members:
            raise UnknownMemberIdError(
                f"group {group.group_id} has members: only they may commit",
                members=len(group.members),
            )
        return
    if group is None or member_id not in group.members:
        raise UnknownMemberIdError(f"{member_id} is not a member of the group")
    current_epoch = group.current_of(member_id).member_epoch
    if member_epoch < current_epoch:
        raise StaleMemberEpochError(
            f"member epoch {member_epoch} is older than {current_epoch}",
            member_epoch=current_epoch,
        )
    if member_epoch > current_epoch:
        raise FencedMemberEpochError(
            f"member epoch {member_epoch} is newer than {current_epoch}",
            member_epoch=current_epoch,
        )


def offset_commit_records(
    group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], commit_time_ms: int
) -> tuple[GroupRecord, ...]:
    return tuple(
        GroupRecord(
            OffsetCommitKey(group_id, tp.topic, tp.partition),
            OffsetCommitValue(om.offset, om.leader_epoch, om.metadata, commit_time_ms),
        )
        for tp, om in sorted(offsets.items(), key=lambda kv: (kv[0].topic, kv[0].partition))
    )


def check_commit(
    state: CoordinatorState,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    config: GroupCoordinatorConfig,
) -> ConsumerGroup | None:
    """Checks every commit-like write shares (group id, group count, offsets)."""
    check_group_id(group_id, config)
    group = state.group(group_id)
    if group is None and len(state.groups) >= config.groups_max:
        raise GroupsLimitReachedError(
            f"this coordinator holds {config.groups_max} groups", groups_max=config.groups_max
        )
    _check_offsets(group, offsets, config)
    return group


def commit_offsets(
    state: CoordinatorState,
    group_id: str,
    member_id: str,
    member_epoch: int,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    commit_time_ms: int,
    config: GroupCoordinatorConfig,
) -> GroupResult[dict[TopicPartition, OffsetAndMetadata]]:
    """Commit `offsets` for `group_id`; the response is what was committed.

    `member_id` "" (with any epoch) commits as a non-member: only allowed while
    the group has no members.
    """
    group = check_commit(state, group_id, offsets, config)
    _check_committer(group, member_id, member_epoch)
    return GroupResult(offset_commit_records(group_id, offsets, commit_time_ms), dict(offsets))


def fetch_offsets(
    state: CoordinatorState,
    group_id: str,
    partitions: Iterable[TopicPartition] | None = None,
) -> dict[TopicPartition, CommittedOffset | None]:
    """Committed offsets of `group_id`: for `partitions` (None where nothing is
    committed), or every committed partition when `partitions` is None. An
    unknown group has nothing committed."""
    group = state.group(group_id)
    committed = group.offsets if group is not None else {}

    def view(value: OffsetCommitValue | None) -> CommittedOffset | None:
        if value is None:
            return None
        return CommittedOffset(
            value.offset, value.metadata, value.leader_epoch, value.commit_timestamp_ms
        )

    if partitions is None:
        return {tp: view(v) for tp, v in committed.items()}
    return {tp: view(committed.get(tp)) for tp in partitions}


class AutoOffsetReset(enum.StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"


def resolve_start_offset(
    committed: int | None,
    log_start_offset: int,
    high_watermark: int,
    reset: AutoOffsetReset,
) -> int:
    """Where a consumer of one partition starts reading.

    The committed offset if it lies in [log_start_offset, high_watermark];
    otherwise (none committed, or retention or truncation left it out of
    range) `reset` decides: earliest -> the log start, latest -> the high
    watermark, none -> NoOffsetError (nothing committed) or
    OffsetOutOfRangeError (committed but out of range).
    """
    if not 0 <= log_start_offset <= high_watermark:
        raise ValueError(f"bad bounds: log start {log_start_offset}, HW {high_watermark}")
    if committed is not None and log_start_offset <= committed <= high_watermark:
        return committed
    if reset is AutoOffsetReset.EARLIEST:
        return log_start_offset
    if reset is AutoOffsetReset.LATEST:
        return high_watermark
    if committed is None:
        raise NoOffsetError("no committed offset and auto_offset_reset=none")
    raise OffsetOutOfRangeError(
        f"committed offset {committed} is outside [{log_start_offset}, {high_watermark}] "
        "and auto_offset_reset=none",
        offset=committed,
        log_start_offset=log_start_offset,
        high_watermark=high_watermark,
    )


def expire_offsets(
    state: CoordinatorState, now_wall_ms: int, config: GroupCoordinatorConfig
) -> GroupResult[dict[str, list[TopicPartition]]]:
    """Tombstones for offsets of member-less groups committed more than
    `offsets_retention_ms` ago (Kafka's offset retention for groups without
    members, by commit time). A group left with nothing but its metadata is
    deleted as well, so abandoned groups do not use up `groups_max`.

    The response maps each group to the partitions whose offsets expired.
    """
    records: list[GroupRecord] = []
    expired: dict[str, list[TopicPartition]] = {}
    cutoff = now_wall_ms - config.offsets_retention_ms
    for group_id in sorted(state.groups):
        group = state.groups[group_id]
        if group.members:
            continue
        old = sorted(
            (tp for tp, v in group.offsets.items() if v.commit_timestamp_ms < cutoff),
            key=lambda tp: (tp.topic, tp.partition),
        )
        if old:
            expired[group_id] = old
            records.extend(
                GroupRecord.tombstone(OffsetCommitKey(group_id, tp.topic, tp.partition))
                for tp in old
            )
        if len(old) == len(group.offsets):
            records.extend(group_metadata_tombstones(group))
    return GroupResult(tuple(records), expired)


def group_metadata_tombstones(group: ConsumerGroup) -> tuple[GroupRecord, ...]:
    """Tombstones for the group-level keys of a group without members."""
    assert not group.members, "members must be removed first"
    gid = group.group_id
    return (
        GroupRecord.tombstone(TargetAssignmentMetadataKey(gid)),
        GroupRecord.tombstone(GroupPartitionMetadataKey(gid)),
        GroupRecord.tombstone(GroupMetadataKey(gid)),
    )
