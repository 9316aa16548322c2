"""The coordinator's state for the groups of one `__consumer_offsets` partition,
and the one code path that changes it: `CoordinatorState.replay(record)`.

Handlers (group_heartbeat, group_offsets, group_admin) only read this state
and return records; the runtime appends the records to the partition and
replays them here. A new coordinator builds the same state by replaying the
partition from its start.

Replay is a keyed put or delete: each record sets (or, as a tombstone,
removes) exactly the part of one group that its key names, whatever other
keys hold. So the state after a log depends only on the latest value of each
key, which is what compaction keeps, and a compacted log rebuilds the same
state as the full one. For the same reason replay creates a group on its first
record of any type, and drops it when its last key is deleted.

Invariants replay enforces (a record breaking one raises `GroupRecordError`:
it is a coordinator bug, and applying it would make replicas disagree):

- group epochs, assignment epochs and member epochs never go backwards for a
  key that still exists;
- no partition is owned (assigned or pending revocation, per
  `CurrentMemberAssignmentValue`) by two members of a group at once.

Invariants across keys (assignment epoch <= group epoch, member records come
and go together, targets disjoint) hold after every complete handler batch but
not in the middle of one or of a compacted log, so replay does not assert them;
`ConsumerGroup.check_invariants` does, for tests and handlers.

Soft state (heartbeat deadlines) is not here: see group_sessions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from lograft.brokers.groups.records import (
    NO_PARTITIONS,
    CurrentMemberAssignmentKey,
    CurrentMemberAssignmentValue,
    GroupKey,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupPartitionMetadataKey,
    GroupPartitionMetadataValue,
    GroupRecord,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    Partitions,
    TargetAssignmentMemberKey,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataKey,
    TargetAssignmentMetadataValue,
)
from lograft.errors import GroupRecordError
from lograft.protocol.topic_partition import TopicPartition

__all__ = ["NEW_MEMBER_CURRENT", "ConsumerGroup", "CoordinatorState", "GroupState", "MemberState"]


class GroupState(enum.StrEnum):
    """A group's state, derived from its records (KIP-848's consumer group states)."""

    # No members (it may still hold committed offsets).
    EMPTY = "empty"
    # Membership, subscriptions or partition counts changed (the group epoch
    # moved) and the target assignment is not computed yet.
    ASSIGNING = "assigning"
    # Some member is not yet at the target epoch or not holding its whole target.
    RECONCILING = "reconciling"
    # Every member holds exactly its target at the target epoch.
    STABLE = "stable"
    # No such group (never existed, or deleted).
    DEAD = "dead"


# A member the coordinator has not reconciled yet: epoch 0, owning nothing.
NEW_MEMBER_CURRENT = CurrentMemberAssignmentValue(
    member_epoch=0,
    previous_member_epoch=-1,
    state=MemberState.STABLE,
    assigned=NO_PARTITIONS,
    pending_revocation=NO_PARTITIONS,
)


class ConsumerGroup:
    """One group. Read freely; only `CoordinatorState.replay` changes it."""

    __slots__ = (
        "_current",
        "_members",
        "_metadata",
        "_offsets",
        "_owners",
        "_partition_metadata",
        "_subscribers",
        "_target_metadata",
        "_targets",
        "group_id",
    )

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # Stored: one field per key type of the group.
        self._metadata: GroupMetadataValue | None = None
        self._partition_metadata: GroupPartitionMetadataValue | None = None
        self._members: dict[str, MemberMetadataValue] = {}
        self._target_metadata: TargetAssignmentMetadataValue | None = None
        self._targets: dict[str, Partitions] = {}
        self._current: dict[str, CurrentMemberAssignmentValue] = {}
        self._offsets: dict[TopicPartition, OffsetCommitValue] = {}
        # Derived, kept by replay so a heartbeat costs O(its own partitions):
        # partition -> the member owning it; topic -> members subscribed to it.
        self._owners: dict[TopicPartition, str] = {}
        self._subscribers: dict[str, int] = {}

    # --- reading ------------------------------------------------------------------

    @property
    def group_epoch(self) -> int:
        return 0 if self._metadata is None else self._metadata.epoch

    @property
    def assignment_epoch(self) -> int:
        return 0 if self._target_metadata is None else self._target_metadata.assignment_epoch

    @property
    def partition_counts(self) -> Mapping[str, int]:
        """Partition counts of subscribed topics as of the last target computation."""
        if self._partition_metadata is None:
            return MappingProxyType({})
        return MappingProxyType(self._partition_metadata.counts())

    @property
    def members(self) -> Mapping[str, MemberMetadataValue]:
        return MappingProxyType(self._members)

    @property
    def targets(self) -> Mapping[str, Partitions]:
        return MappingProxyType(self._targets)

    @property
    def offsets(self) -> Mapping[TopicPartition, OffsetCommitValue]:
        return MappingProxyType(self._offsets)

    def current_of(self, member_id: str) -> CurrentMemberAssignmentValue:
        return self._current.get(member_id, NEW_MEMBER_CURRENT)

    def target_of(self, member_id: str) -> Partitions:
        return self._targets.get(member_id, NO_PARTITIONS)

    def owner_of(self, tp: TopicPartition) -> str | None:
        return self._owners.get(tp)

    def subscribed_topics(self) -> frozenset[str]:
        """Every topic some member subscribes to."""
        return frozenset(self._subscribers)

    def subscriber_count(self, topic: str) -> int:
        """How many members subscribe to `topic`."""
        return self._subscribers.get(topic, 0)

    def state(self) -> GroupState:
        if not self._members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        target_epoch = self.assignment_epoch
        for member_id in self._members:
            current = self.current_of(member_id)
            if current.state is not MemberState.STABLE or current.member_epoch != target_epoch:
                return GroupState.RECONCILING
        return GroupState.STABLE

    def has_keys(self) -> bool:
        return bool(
            self._metadata is not None
            or self._partition_metadata is not None
            or self._members
            or self._target_metadata is not None
            or self._targets
            or self._current
            or self._offsets
        )

    def check_invariants(self) -> None:
        """Cross-key invariants of a group after a complete batch of records."""
        if self.assignment_epoch > self.group_epoch:
            raise AssertionError(f"{self.group_id}: assignment epoch above the group epoch")
        for member_id in self._targets.keys() | self._current.keys():
            if member_id not in self._members:
                raise AssertionError(f"{self.group_id}: records of unknown member {member_id}")
        seen: dict[TopicPartition, str] = {}
        for member_id, parts in self._targets.items():
            for tp in parts:
                if tp in seen:
                    raise AssertionError(f"{tp} in the targets of {seen[tp]} and {member_id}")
                seen[tp] = member_id
        owners: dict[TopicPartition, str] = {}
        for member_id, current in self._current.items():
            if current.member_epoch > self.assignment_epoch:
                raise AssertionError(f"{member_id}: member epoch above the assignment epoch")
            for tp in current.owned:
                assert tp not in owners, f"{tp} owned by {owners[tp]} and {member_id}"
                owners[tp] = member_id
        assert owners == self._owners, "owner index out of date"
        counts: dict[str, int] = {}
        for meta in self._members.values():
            for topic in meta.subscribed_topics:
                counts[topic] = counts.get(topic, 0) + 1
        assert counts == self._subscribers, "subscriber index out of date"

    def records(self) -> Iterator[GroupRecord]:
        """Records that rebuild this group: one per key (a compacted log)."""
        gid = self.group_id
        if self._metadata is not None:
            yield GroupRecord(GroupMetadataKey(gid), self._metadata)
        if self._partition_metadata is not None:
            yield GroupRecord(GroupPartitionMetadataKey(gid), self._partition_metadata)
        for member_id, meta in sorted(self._members.items()):
            yield GroupRecord(MemberMetadataKey(gid, member_id), meta)
        if self._target_metadata is not None:
            yield GroupRecord(TargetAssignmentMetadataKey(gid), self._target_metadata)
        for member_id, parts in sorted(self._targets.items()):
            yield GroupRecord(
                TargetAssignmentMemberKey(gid, member_id), TargetAssignmentMemberValue(parts)
            )
        for member_id, current in sorted(self._current.items()):
            yield GroupRecord(CurrentMemberAssignmentKey(gid, member_id), current)
        for tp, value in sorted(
            self._offsets.items(), key=lambda kv: (kv[0].topic, kv[0].partition)
        ):
            yield GroupRecord(OffsetCommitKey(gid, tp.topic, tp.partition), value)

    def _stored(self) -> tuple[object, ...]:
        return (
            self.group_id,
            self._metadata,
            self._partition_metadata,
            self._members,
            self._target_metadata,
            self._targets,
            self._current,
            self._offsets,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerGroup):
            return NotImplemented
        return self._stored() == other._stored()

    __hash__ = None  # type: ignore[assignment]  # mutable (by replay)

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, epoch={self.group_epoch}, "
            f"assignment_epoch={self.assignment_epoch}, members={sorted(self._members)}, "
            f"offsets={len(self._offsets)})"
        )

    # --- replay (called only by CoordinatorState.replay) --------------------------

    def _apply(self, key: GroupKey, value: object) -> None:
        if isinstance(key, OffsetCommitKey):
            tp = key.topic_partition
            if value is None:
                self._offsets.pop(tp, None)
            else:
                assert isinstance(value, OffsetCommitValue)
                self._offsets[tp] = value
        elif isinstance(key, GroupMetadataKey):
            assert value is None or isinstance(value, GroupMetadataValue)
            if value is not None and self._metadata is not None:
                _never_backwards("group epoch", self._metadata.epoch, value.epoch)
            self._metadata = value
        elif isinstance(key, GroupPartitionMetadataKey):
            assert value is None or isinstance(value, GroupPartitionMetadataValue)
            self._partition_metadata = value
        elif isinstance(key, MemberMetadataKey):
            assert value is None or isinstance(value, MemberMetadataValue)
            self._set_member(key.member_id, value)
        elif isinstance(key, TargetAssignmentMetadataKey):
            assert value is None or isinstance(value, TargetAssignmentMetadataValue)
            if value is not None and self._target_metadata is not None:
                _never_backwards(
                    "assignment epoch",
                    self._target_metadata.assignment_epoch,
                    value.assignment_epoch,
                )
            self._target_metadata = value
        elif isinstance(key, TargetAssignmentMemberKey):
            if value is None:
                self._targets.pop(key.member_id, None)
            else:
                assert isinstance(value, TargetAssignmentMemberValue)
                self._targets[key.member_id] = value.partitions
        elif isinstance(key, CurrentMemberAssignmentKey):
            assert value is None or isinstance(value, CurrentMemberAssignmentValue)
            self._set_current(key.member_id, value)
        else:  # pragma: no cover - GroupRecord admits only the keys above
            raise GroupRecordError(f"unknown key {key!r}")

    def _set_member(self, member_id: str, value: MemberMetadataValue | None) -> None:
        old = self._members.get(member_id)
        if old is not None:
            for topic in old.subscribed_topics:
                left = self._subscribers[topic] - 1
                if left:
                    self._subscribers[topic] = left
                else:
                    del self._subscribers[topic]
        if value is None:
            self._members.pop(member_id, None)
            return
        self._members[member_id] = value
        for topic in value.subscribed_topics:
            self._subscribers[topic] = self._subscribers.get(topic, 0) + 1

    def _set_current(self, member_id: str, value: CurrentMemberAssignmentValue | None) -> None:
        old = self._current.get(member_id)
        if old is not None and value is not None:
            _never_backwards(f"member epoch of {member_id}", old.member_epoch, value.member_epoch)
        new_owned = NO_PARTITIONS if value is None else value.owned
        # Check before changing anything: a refused record leaves no trace.
        for tp in new_owned:
            owner = self._owners.get(tp)
            if owner is not None and owner != member_id:
                raise GroupRecordError(
                    f"{self.group_id}: {tp} given to {member_id} while {owner} owns it"
                )
        if old is not None:
            for tp in old.owned:
                del self._owners[tp]
        for tp in new_owned:
            self._owners[tp] = member_id
        if value is None:
            self._current.pop(member_id, None)
        else:
            self._current[member_id] = value


def _never_backwards(what: str, old: int, new: int) -> None:
    if new < old:
        raise GroupRecordError(f"{what} would go backwards: {old} -> {new}")


class CoordinatorState:
    """Every group of one `__consumer_offsets` partition. Only `replay` changes it."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, ConsumerGroup] = {}

    @classmethod
    def from_records(cls, records: Iterator[GroupRecord] | list[GroupRecord]) -> CoordinatorState:
        state = cls()
        for record in records:
            state.replay(record)
        return state

    @property
    def groups(self) -> Mapping[str, ConsumerGroup]:
        return MappingProxyType(self._groups)

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def replay(self, record: GroupRecord) -> None:
        """Apply one record: the only way this state changes."""
        group_id = record.key.group_id
        group = self._groups.get(group_id)
        if group is None:
            if record.value is None:
                # A tombstone for a key nobody holds: compaction dropped (or
                # never saw) the value it deletes.
                return
            group = ConsumerGroup(group_id)
            self._groups[group_id] = group
        group._apply(record.key, record.value)
        if not group.has_keys():
            del self._groups[group_id]

    def records(self) -> Iterator[GroupRecord]:
        """Records that rebuild this state (what a fully compacted log holds)."""
        for group_id in sorted(self._groups):
            yield from self._groups[group_id].records()

    def copy(self) -> CoordinatorState:
        """An independent copy, built by replay (for a runtime that must roll back
        to it when an append fails)."""
        return CoordinatorState.from_records(self.records())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CoordinatorState):
            return NotImplemented
        return self._groups == other._groups

    __hash__ = None  # type: ignore[assignment]  # mutable (by replay)

    def __repr__(self) -> str:
        return f"CoordinatorState({list(self._groups.values())!r})"
