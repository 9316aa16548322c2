"""Group administration: list, describe (with lag), delete, reset offsets.

- list and describe only read. Lag per partition is high watermark minus the
  committed offset; high watermarks are passed in (the runtime asks the
  partitions' leaders), and a partition without one, or without a committed
  offset, has no lag.
- delete writes tombstones for every key of the group, so compaction removes
  it; only a group without members may be deleted (NON_EMPTY_GROUP), and an
  unknown group is GROUP_ID_NOT_FOUND.
- reset offsets commits new offsets for a group without members
  (NON_EMPTY_GROUP otherwise: a live member would overwrite them, or consume
  from the old position). The new offsets are resolved by the caller's
  bounds: `resolve_reset_offsets` maps a strategy (earliest, latest, a
  timestamp, a given offset) and each partition's log start, high watermark
  and offset for the timestamp to an offset, the way kafka-consumer-groups
  --reset-offsets does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.heartbeat import group_assignor
from lograft.brokers.groups.offsets import (
    OffsetAndMetadata,
    check_commit,
    group_metadata_tombstones,
    offset_commit_records,
)
from lograft.brokers.groups.records import (
    GroupRecord,
    MemberState,
    OffsetCommitKey,
    Partitions,
)
from lograft.brokers.groups.result import GroupResult
from lograft.brokers.groups.state import CoordinatorState, GroupState
from lograft.brokers.groups.validation import check_group_id
from lograft.errors import GroupIdNotFoundError, NonEmptyGroupError

# The reset rules are the protocol's (the CLI's dry run applies them too);
# re-exported here, where the coordinator's admin operations live.
from lograft.protocol.offset_reset import OffsetResetStrategy as OffsetResetStrategy
from lograft.protocol.offset_reset import PartitionBounds as PartitionBounds
from lograft.protocol.offset_reset import resolve_reset_offsets as resolve_reset_offsets
from lograft.protocol.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: GroupState
    members: int


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    assignor: str | None
    member_epoch: int
    member_state: MemberState
    # What it may consume now, what it was asked to give up, what it should hold.
    assigned: Partitions
    pending_revocation: Partitions
    target: Partitions


@dataclass(frozen=True, slots=True)
class PartitionOffsetDescription:
    topic_partition: TopicPartition
    committed_offset: int | None
    metadata: str
    high_watermark: int | None
    lag: int | None
    # The member that owns the partition (assigned or pending revocation).
    owner: str | None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    group_epoch: int
    assignment_epoch: int
    # The assignor the next target computation would use.
    assignor: str
    members: tuple[MemberDescription, ...]
    # Every partition with a committed offset or an owner, by topic and number.
    offsets: tuple[PartitionOffsetDescription, ...]


def list_groups(
    state: CoordinatorState, states: Collection[GroupState] | None = None
) -> tuple[GroupListing, ...]:
    """Every group of this coordinator, by id; only those in `states` if given."""
    out = []
    for group_id in sorted(state.groups):
        group = state.groups[group_id]
        group_state = group.state()
        if states is None or group_state in states:
            out.append(GroupListing(group_id, group_state, len(group.members)))
    return tuple(out)


def dead_group(group_id: str, config: GroupCoordinatorConfig) -> GroupDescription:
    """The description of a group that does not exist (Kafka's DEAD state)."""
    check_group_id(group_id, config)
    return GroupDescription(group_id, GroupState.DEAD, 0, 0, config.assignor_default, (), ())


def describe_group(
    state: CoordinatorState,
    group_id: str,
    high_watermarks: Mapping[TopicPartition, int],
    config: GroupCoordinatorConfig,
) -> GroupDescription:
    """A group's state, members and offsets; an unknown group is DEAD and empty."""
    group = state.group(group_id)
    if group is None:
        return dead_group(group_id, config)
    members = tuple(
        MemberDescription(
            member_id=member_id,
            client_id=meta.client_id,
            client_host=meta.client_host,
            subscribed_topics=meta.subscribed_topics,
            assignor=meta.assignor,
            member_epoch=group.current_of(member_id).member_epoch,
            member_state=group.current_of(member_id).state,
            assigned=group.current_of(member_id).assigned,
            pending_revocation=group.current_of(member_id).pending_revocation,
            target=group.target_of(member_id),
        )
        for member_id, meta in sorted(group.members.items())
    )
    partitions = set(group.offsets)
    for m in members:
        partitions |= m.assigned | m.pending_revocation
    offsets = []
    for tp in sorted(partitions, key=lambda t: (t.topic, t.partition)):
        committed = group.offsets.get(tp)
        hw = high_watermarks.get(tp)
        lag = None
        if committed is not None and hw is not None:
            # A commit above the HW (acks=1 data lost on failover) is no negative lag.
            lag = max(0, hw - committed.offset)
        offsets.append(
            PartitionOffsetDescription(
                topic_partition=tp,
                committed_offset=None if committed is None else committed.offset,
                metadata="" if committed is None else committed.metadata,
                high_watermark=hw,
                lag=lag,
                owner=group.owner_of(tp),
            )
        )
    return GroupDescription(
        group_id=group_id,
        state=group.state(),
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor=group_assignor(group.members, config),
        members=members,
        offsets=tuple(offsets),
    )


def delete_group(state: CoordinatorState, group_id: str) -> GroupResult[None]:
    """Tombstones for every key of a group without members."""
    group = state.group(group_id)
    if group is None:
        raise GroupIdNotFoundError(f"group {group_id} does not exist")
    if group.members:
        raise NonEmptyGroupError(
            f"group {group_id} has {len(group.members)} members", members=len(group.members)
        )
    records = [
        GroupRecord.tombstone(OffsetCommitKey(group_id, tp.topic, tp.partition))
        for tp in sorted(group.offsets, key=lambda t: (t.topic, t.partition))
    ]
    records.extend(group_metadata_tombstones(group))
    return GroupResult(tuple(records), None)


def reset_offsets(
    state: CoordinatorState,
    group_id: str,
    new_offsets: Mapping[TopicPartition, int],
    commit_time_ms: int,
    config: GroupCoordinatorConfig,
) -> GroupResult[dict[TopicPartition, int]]:
    """Commit `new_offsets` (from `resolve_reset_offsets`) for a group without
    members; creates the group if it does not exist (as Kafka's tool does)."""
    check_group_id(group_id, config)
    group = state.group(group_id)
    if group is not None and group.members:
        raise NonEmptyGroupError(
            f"group {group_id} has {len(group.members)} members: stop them before resetting",
            members=len(group.members),
        )
    offsets = {tp: OffsetAndMetadata(o) for tp, o in new_offsets.items()}
    check_commit(state, group_id, offsets, config)
    return GroupResult(offset_commit_records(group_id, offsets, commit_time_ms), dict(new_offsets))
