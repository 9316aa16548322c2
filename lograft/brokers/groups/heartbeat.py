"""Membership: join, heartbeat and leave in one request (KIP-848's
ConsumerGroupHeartbeat), and removal of members whose session expired.

Protocol, by the member epoch the request carries:

- 0, join: the member (its id chosen by the client or the runtime, a UUID,
  as KIP-1082) joins with its subscribed topics. A member id the group
  already has is a restart of that member: it holds nothing, so whatever the
  group recorded for it is released.
- > 0, heartbeat: must equal the member's epoch, or be its previous epoch
  while the partitions it reports owning are all still assigned to it (the
  response that bumped its epoch was lost). Anything else is
  FENCED_MEMBER_EPOCH; an unknown member id is UNKNOWN_MEMBER_ID. Either
  way the client must give up its partitions and join again with epoch 0.
- -1, leave: the member's partitions are released at once. Idempotent: an
  unknown member leaves successfully.

Every response carries the member's epoch and its current assignment
(`assigned`): the partitions it may consume. A partition missing from it that
the member holds must be given up; the member says it has by no longer
listing it in `owned_partitions` of its next heartbeat.

On each join or heartbeat, in order:

1. member metadata: a new member, or a changed subscription or assignor,
   bumps the group epoch;
2. partition counts of the subscribed topics (passed in from the metadata
   image): a change bumps the group epoch;
3. target: if the group epoch is above the assignment epoch (this request
   bumped it, or a member left or expired since), the assignor computes a new
   target at the group epoch;
4. reconciliation of this member towards its target (group_reconciliation);
5. the member's session is renewed (group_sessions).

Other members learn about a new target on their own next heartbeat.

Delayed duplicates. Over HTTP a heartbeat the client gave up on (timeout,
retry on a new connection) may still reach the coordinator after newer ones.
Processed late, a duplicate join would release every partition the member
holds, and a duplicate heartbeat listing fewer partitions than the member now
holds would acknowledge a revocation that never happened; member epochs cannot
tell (the assignment can change, and even return to an earlier set, within one
epoch). So a request may carry `sequence`, strictly increasing over the
member's requests for the client's lifetime; one at or below the last
processed is refused with OUT_OF_ORDER_HEARTBEAT. The check lives in soft
state (`MemberSession.last_sequence`): a new coordinator accepts the first
sequence it sees, which is safe because a request delayed in flight to the
old coordinator is refused there (NOT_COORDINATOR) rather than forwarded.
Requests without a sequence are not protected; the lograft client always
sends one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lograft.brokers.groups.assignors import assignor_for
from lograft.brokers.groups.config import ASSIGNOR_NAMES, GroupCoordinatorConfig
from lograft.brokers.groups.reconciliation import reconcile
from lograft.brokers.groups.records import (
    NO_PARTITIONS,
    CurrentMemberAssignmentKey,
    CurrentMemberAssignmentValue,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupPartitionMetadataKey,
    GroupPartitionMetadataValue,
    GroupRecord,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    Partitions,
    TargetAssignmentMemberKey,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataKey,
    TargetAssignmentMetadataValue,
)
from lograft.brokers.groups.result import GroupResult
from lograft.brokers.groups.sessions import GroupSessions, MemberSession
from lograft.brokers.groups.state import NEW_MEMBER_CURRENT, ConsumerGroup, CoordinatorState
from lograft.brokers.groups.validation import (
    check_client_string,
    check_group_id,
    check_member_id,
    check_topic,
    check_topic_partition,
)
from lograft.errors import (
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    GroupsLimitReachedError,
    GroupSubscriptionTooLargeError,
    InvalidRequestError,
    OutOfOrderHeartbeatError,
    UnknownMemberIdError,
    UnsupportedAssignorError,
)
from lograft.protocol.topic_partition import TopicPartition

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    # Required to join; None on a heartbeat: unchanged.
    subscribed_topics: tuple[str, ...] | None = None
    # The partitions the member holds right now. None: not reported, and then
    # the coordinator assumes it still holds everything it was given.
    owned_partitions: Partitions | None = None
    # None: unchanged (on join: no preference, the group's default).
    assignor: str | None = None
    # "": unchanged (on join: none).
    client_id: str = ""
    client_host: str = ""
    # None: unchanged (on join: the configured default), ms.
    rebalance_timeout_ms: int | None = None
    # Strictly increasing per member over its requests (join, heartbeat and
    # leave alike); None: not protected against delayed duplicates.
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    member_id: str
    # -1 after a leave.
    member_epoch: int
    heartbeat_interval_ms: int
    # The partitions the member may consume now (its current `assigned`).
    assignment: Partitions


def _validate(request: HeartbeatRequest, config: GroupCoordinatorConfig) -> None:
    check_group_id(request.group_id, config)
    check_member_id(request.member_id, config)
    if request.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        # Kafka's -2 (static member leaving temporarily) needs group.instance.id,
        # which lograft does not support.
        raise InvalidRequestError(
            f"member epoch {request.member_epoch}: use 0 to join, -1 to leave, "
            "or the epoch of the last response"
        )
    if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.subscribed_topics is None:
            raise InvalidRequestError("a join must carry the subscribed topics")
        if request.owned_partitions:
            raise InvalidRequestError(
                "a joining member owns no partitions: give them up before joining again"
            )
    if request.subscribed_topics is not None:
        if len(set(request.subscribed_topics)) > config.subscribed_topics_max:
            raise GroupSubscriptionTooLargeError(
                f"more than {config.subscribed_topics_max} subscribed topics",
                subscribed_topics_max=config.subscribed_topics_max,
            )
        for topic in request.subscribed_topics:
            check_topic(topic)
    if request.owned_partitions is not None:
        if len(request.owned_partitions) > config.group_assigned_partitions_max:
            raise InvalidRequestError(
                f"more than {config.group_assigned_partitions_max} owned partitions",
                group_assigned_partitions_max=config.group_assigned_partitions_max,
            )
        for tp in request.owned_partitions:
            check_topic_partition(tp)
    if request.assignor is not None and request.assignor not in ASSIGNOR_NAMES:
        raise UnsupportedAssignorError(
            f"unknown assignor {request.assignor!r}; use one of {list(ASSIGNOR_NAMES)}",
            assignor=request.assignor,
        )
    if request.sequence is not None and not 0 <= request.sequence < 2**63:
        raise InvalidRequestError(f"sequence {request.sequence} out of range")
    check_client_string(request.client_id, "client id", config)
    check_client_string(request.client_host, "client host", config)
    timeout = request.rebalance_timeout_ms
    if timeout is not None and not 0 < timeout <= config.rebalance_timeout_ms_max:
        raise InvalidRequestError(
            f"rebalance_timeout_ms must be 1 to {config.rebalance_timeout_ms_max}",
            rebalance_timeout_ms_max=config.rebalance_timeout_ms_max,
        )


def _check_sequence(sessions: GroupSessions, request: HeartbeatRequest) -> None:
    session = sessions.get(request.member_id)
    if request.sequence is None or session is None or session.last_sequence is None:
        return
    if request.sequence <= session.last_sequence:
        raise OutOfOrderHeartbeatError(
            f"heartbeat sequence {request.sequence} is not above {session.last_sequence}: "
            "a delayed duplicate",
            last_sequence=session.last_sequence,
        )


def _check_member_epoch(current: CurrentMemberAssignmentValue, request: HeartbeatRequest) -> None:
    epoch = request.member_epoch
    if epoch == current.member_epoch:
        return
    owned = request.owned_partitions
    if (
        epoch < current.member_epoch
        and epoch == current.previous_member_epoch
        and owned is not None
        and owned <= current.assigned
    ):
        # The response that moved the member to its current epoch was lost; it
        # holds nothing it should not, so it may carry on.
        return
    raise FencedMemberEpochError(
        f"member epoch {epoch} is fenced (current {current.member_epoch})",
        member_epoch=current.member_epoch,
    )


def member_removal_records(
    group: ConsumerGroup, member_ids: Iterable[str]
) -> tuple[GroupRecord, ...]:
    """Tombstones for members leaving the group, and one group epoch bump.

    Their partitions are free as soon as the records are replayed; the next
    heartbeat of any member computes the target without them.
    """
    gid = group.group_id
    records: list[GroupRecord] = []
    for member_id in member_ids:
        # Current assignment first: it is what releases the partitions.
        records.append(GroupRecord.tombstone(CurrentMemberAssignmentKey(gid, member_id)))
        records.append(GroupRecord.tombstone(TargetAssignmentMemberKey(gid, member_id)))
        records.append(GroupRecord.tombstone(MemberMetadataKey(gid, member_id)))
    if records:
        records.append(
            GroupRecord(GroupMetadataKey(gid), GroupMetadataValue(group.group_epoch + 1))
        )
    return tuple(records)


def _topics_after(
    group: ConsumerGroup | None, old: MemberMetadataValue | None, new: MemberMetadataValue
) -> tuple[frozenset[str], frozenset[str]]:
    """(subscribed topics of the group before, after) this member's change."""
    before = group.subscribed_topics() if group is not None else frozenset()
    after = set(before)
    if old is not None and group is not None:
        after.difference_update(t for t in old.subscribed_topics if group.subscriber_count(t) == 1)
    after.update(new.subscribed_topics)
    return before, frozenset(after)


def _existing_counts(topics: Iterable[str], topic_partitions: Mapping[str, int]) -> dict[str, int]:
    return {t: topic_partitions[t] for t in sorted(topics) if topic_partitions.get(t, 0) > 0}


def _clamp(counts: Mapping[str, int], limit: int) -> dict[str, int]:
    """At most `limit` partitions in all, taken from topics in name order."""
    out: dict[str, int] = {}
    left = limit
    for topic in sorted(counts):
        n = min(counts[topic], left)
        if n <= 0:
            break
        out[topic] = n
        left -= n
    return out


def group_assignor(
    members: Mapping[str, MemberMetadataValue], config: GroupCoordinatorConfig
) -> str:
    """The assignor most members ask for (ties: first by name), else the default."""
    votes = Counter(m.assignor for m in members.values() if m.assignor is not None)
    if not votes:
        return config.assignor_default
    return min(votes, key=lambda name: (-votes[name], name))


def heartbeat(
    state: CoordinatorState,
    sessions: GroupSessions,
    request: HeartbeatRequest,
    topic_partitions: Mapping[str, int],
    now_ms: int,
    config: GroupCoordinatorConfig,
) -> GroupResult[HeartbeatResponse]:
    """Join (epoch 0), heartbeat (epoch > 0) or leave (epoch -1).

    `topic_partitions`: partition count of every existing topic (at least the
    subscribed ones), from the metadata image. `sessions`: this group's.
    """
    _validate(request, config)
    _check_sequence(sessions, request)
    group = state.group(request.group_id)
    if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
        return _leave(group, sessions, request, config)

    gid, mid = request.group_id, request.member_id
    records: list[GroupRecord] = []
    old_meta: MemberMetadataValue | None
    if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if group is None and len(state.groups) >= config.groups_max:
            raise GroupsLimitReachedError(
                f"this coordinator holds {config.groups_max} groups", groups_max=config.groups_max
            )
        old_meta = group.members.get(mid) if group is not None else None
        if old_meta is None and group is not None and len(group.members) >= config.group_max_size:
            raise GroupMaxSizeReachedError(
                f"group {gid} has {config.group_max_size} members",
                group_max_size=config.group_max_size,
            )
        assert request.subscribed_topics is not None
        meta = MemberMetadataValue(
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topics=tuple(sorted(set(request.subscribed_topics))),
            assignor=request.assignor,
            rebalance_timeout_ms=request.rebalance_timeout_ms or config.rebalance_timeout_ms,
        )
        # A (re)joining member holds nothing, whatever the group recorded for it.
        current = NEW_MEMBER_CURRENT
        owned: Partitions | None = NO_PARTITIONS
    else:
        if group is None or mid not in group.members:
            raise UnknownMemberIdError(f"{mid} is not a member of group {gid}; join again")
        old_meta = group.members[mid]
        current = group.current_of(mid)
        _check_member_epoch(current, request)
        subscribed = request.subscribed_topics
        meta = MemberMetadataValue(
            client_id=request.client_id or old_meta.client_id,
            client_host=request.client_host or old_meta.client_host,
            subscribed_topics=(
                old_meta.subscribed_topics if subscribed is None else tuple(sorted(set(subscribed)))
            ),
            assignor=old_meta.assignor if request.assignor is None else request.assignor,
            rebalance_timeout_ms=request.rebalance_timeout_ms or old_meta.rebalance_timeout_ms,
        )
        owned = request.owned_partitions

    subscription_changed = old_meta is None or old_meta.subscribed_topics != meta.subscribed_topics
    bump = subscription_changed or old_meta is None or old_meta.assignor != meta.assignor
    if meta != old_meta:
        records.append(GroupRecord(MemberMetadataKey(gid, mid), meta))

    # Partition counts of the subscribed topics, bounded.
    topics_before, topics_after = _topics_after(group, old_meta, meta)
    full_counts = _existing_counts(topics_after, topic_partitions)
    limit = config.group_assigned_partitions_max
    if subscription_changed and sum(full_counts.values()) > limit:
        before_total = sum(_existing_counts(topics_before, topic_partitions).values())
        if sum(full_counts.values()) > before_total:
            raise GroupSubscriptionTooLargeError(
                f"the group's subscribed topics would have more than {limit} partitions",
                group_assigned_partitions_max=limit,
            )
    counts = _clamp(full_counts, limit)
    stored_counts = dict(group.partition_counts) if group is not None else {}
    if counts != stored_counts:
        records.append(
            GroupRecord(GroupPartitionMetadataKey(gid), GroupPartitionMetadataValue.of(counts))
        )
        bump = True

    group_epoch = group.group_epoch if group is not None else 0
    if bump:
        group_epoch += 1
        records.append(GroupRecord(GroupMetadataKey(gid), GroupMetadataValue(group_epoch)))

    # Target assignment at the group epoch, if it is behind.
    assignment_epoch = group.assignment_epoch if group is not None else 0
    if group_epoch > assignment_epoch:
        members = dict(group.members) if group is not None else {}
        members[mid] = meta
        subscriptions = {m: frozenset(v.subscribed_topics) for m, v in members.items()}
        previous = group.targets if group is not None else {}
        assign = assignor_for(group_assignor(members, config))
        new_targets = assign(subscriptions, counts, previous)
        for member_id in sorted(new_targets):
            parts = new_targets[member_id]
            old_parts = previous.get(member_id)
            if old_parts is not parts and old_parts != parts:
                records.append(
                    GroupRecord(
                        TargetAssignmentMemberKey(gid, member_id),
                        TargetAssignmentMemberValue(parts),
                    )
                )
        records.append(
            GroupRecord(
                TargetAssignmentMetadataKey(gid), TargetAssignmentMetadataValue(group_epoch)
            )
        )
        assignment_epoch = group_epoch
        target = new_targets[mid]
    else:
        assert group is not None  # a group with a member has had a target computed
        target = group.target_of(mid)

    def owned_by_other(tp: TopicPartition) -> bool:
        owner = group.owner_of(tp) if group is not None else None
        return owner is not None and owner != mid

    new_current = reconcile(current, target, assignment_epoch, owned, owned_by_other)
    stored_current = group.current_of(mid) if group is not None else NEW_MEMBER_CURRENT
    if new_current != stored_current:
        records.append(GroupRecord(CurrentMemberAssignmentKey(gid, mid), new_current))

    # Soft state: a fresh session; the revocation clock starts when the member
    # is first asked to revoke and keeps running while it has not.
    old_session = sessions.get(mid)
    revocation_deadline: int | None = None
    if new_current.state is MemberState.UNREVOKED_PARTITIONS:
        if (
            request.member_epoch != JOIN_GROUP_MEMBER_EPOCH
            and current.state is MemberState.UNREVOKED_PARTITIONS
            and old_session is not None
            and old_session.revocation_deadline_ms is not None
        ):
            revocation_deadline = old_session.revocation_deadline_ms
        else:
            revocation_deadline = now_ms + meta.rebalance_timeout_ms
    last_sequence = request.sequence
    if last_sequence is None and old_session is not None:
        last_sequence = old_session.last_sequence
    new_sessions = sessions.with_member(
        mid,
        MemberSession(now_ms + config.session_timeout_ms, revocation_deadline, last_sequence),
    )
    response = HeartbeatResponse(
        member_id=mid,
        member_epoch=new_current.member_epoch,
        heartbeat_interval_ms=config.group_heartbeat_interval_ms,
        assignment=new_current.assigned,
    )
    return GroupResult(tuple(records), response, new_sessions)


def _leave(
    group: ConsumerGroup | None,
    sessions: GroupSessions,
    request: HeartbeatRequest,
    config: GroupCoordinatorConfig,
) -> GroupResult[HeartbeatResponse]:
    mid = request.member_id
    response = HeartbeatResponse(
        member_id=mid,
        member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
        heartbeat_interval_ms=config.group_heartbeat_interval_ms,
        assignment=NO_PARTITIONS,
    )
    if group is None or mid not in group.members:
        # Already gone (a retried leave, or removed on expiry): nothing to do.
        return GroupResult((), response, sessions.without(mid) if sessions.get(mid) else None)
    return GroupResult(member_removal_records(group, [mid]), response, sessions.without(mid))


def expire_members(
    state: CoordinatorState,
    group_id: str,
    sessions: GroupSessions,
    now_ms: int,
    config: GroupCoordinatorConfig,
) -> GroupResult[tuple[str, ...]]:
    """Remove every member past its session or revocation deadline.

    The response is the ids removed. A member without a session (the runtime
    lost track of it) gets a fresh one rather than being removed unheard.
    """
    group = state.group(group_id)
    if group is None:
        return GroupResult((), (), GroupSessions() if sessions.members else None)
    expired: list[str] = []
    fresh = GroupSessions.after_failover(group, now_ms, config)
    new_sessions = sessions
    changed = False
    for member_id in sorted(group.members):
        session = sessions.get(member_id)
        if session is None:
            fresh_session = fresh.get(member_id)
            assert fresh_session is not None
            new_sessions = new_sessions.with_member(member_id, fresh_session)
            changed = True
        elif session.expired(now_ms):
            expired.append(member_id)
    stale = [m for m in sessions.members if m not in group.members]
    if expired or stale:
        new_sessions = new_sessions.without(*expired, *stale)
        changed = True
    return GroupResult(
        member_removal_records(group, expired), tuple(expired), new_sessions if changed else None
    )
