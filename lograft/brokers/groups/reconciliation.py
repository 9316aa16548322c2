"""Reconciliation: one member's next current assignment towards its target.

KIP-848's CurrentAssignmentBuilder, as a pure function. Each member has a
target (what the assignor wants it to hold, computed at the group's
assignment epoch) and a current assignment (`CurrentMemberAssignmentValue`):
the partitions it has been given (`assigned`), the partitions it has been asked
to give up but still holds (`pending_revocation`), its member epoch and state.
The coordinator considers the member to OWN assigned + pending_revocation.

Rules, applied on each heartbeat of the member, given the partitions the
member reports owning (None: not reported, assume it still owns everything):

1. UNREVOKED_PARTITIONS: while the member still reports owning any partition
   pending revocation, nothing changes. Once it reports none of them, they are
   released and the member moves on as in 2.
2. Otherwise, if the member is not at the target epoch, or is waiting for
   partitions (UNRELEASED_PARTITIONS), compute the next step from
   keep = assigned & target, revoke = assigned - target,
   wanted = target - assigned:
   a. revoke non-empty and (possibly) still owned by the member: state
      UNREVOKED_PARTITIONS, assigned = keep, pending = revoke, epoch unchanged
      (no new partitions until the old ones are given up);
   b. otherwise (revoked partitions, if any, are already given up): the member
      moves to the target epoch; it gets every wanted partition that no other
      member owns; if some are still owned elsewhere it is
      UNRELEASED_PARTITIONS (and picks them up on a later heartbeat once
      released), else STABLE.
3. STABLE at the target epoch: nothing changes.

Safety: a partition enters a member's `assigned` only when no other member
owns it (2b), and leaves an owner only when the owner reports not holding it
(1, 2a/2b) or the owner is removed from the group (left, or its session or
rebalance timeout expired). So no partition has two owners at any moment, and
a member's heartbeat response (its `assigned`) never lists a partition another
live member may still hold.

The member epoch moves to the target epoch only in 2b; `previous_member_epoch`
is then the epoch it left.
"""

from __future__ import annotations

from collections.abc import Callable

from lograft.brokers.groups.records import (
    NO_PARTITIONS,
    CurrentMemberAssignmentValue,
    MemberState,
    Partitions,
)
from lograft.protocol.topic_partition import TopicPartition


def _may_own_any(owned: Partitions | None, partitions: Partitions) -> bool:
    # Not reported: the member may still hold them (never assume a release).
    return owned is None or not owned.isdisjoint(partitions)


def reconcile(
    current: CurrentMemberAssignmentValue,
    target: Partitions,
    target_epoch: int,
    owned: Partitions | None,
    owned_by_other: Callable[[TopicPartition], bool],
) -> CurrentMemberAssignmentValue:
    """The member's next current assignment (equal to `current` when unchanged).

    `owned_by_other(tp)`: some other member owns tp (assigned or pending
    revocation), so tp cannot be given to this member yet.
    """
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if _may_own_any(owned, current.pending_revocation):
            return current
        return _next(current, target, target_epoch, owned, owned_by_other)
    if current.member_epoch != target_epoch or current.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(current, target, target_epoch, owned, owned_by_other)
    return current


def _next(
    current: CurrentMemberAssignmentValue,
    target: Partitions,
    target_epoch: int,
    owned: Partitions | None,
    owned_by_other: Callable[[TopicPartition], bool],
) -> CurrentMemberAssignmentValue:
    assigned = current.assigned
    keep = assigned & target
    revoke = assigned - target
    if revoke and _may_own_any(owned, revoke):
        new = CurrentMemberAssignmentValue(
            member_epoch=current.member_epoch,
            previous_member_epoch=current.previous_member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=keep,
            pending_revocation=revoke,
        )
    else:
        wanted = target - assigned
        free = frozenset(tp for tp in wanted if not owned_by_other(tp))
        if target_epoch != current.member_epoch:
            previous = current.member_epoch
        else:
            previous = current.previous_member_epoch
        new = CurrentMemberAssignmentValue(
            member_epoch=target_epoch,
            previous_member_epoch=previous,
            state=(MemberState.UNRELEASED_PARTITIONS if free != wanted else MemberState.STABLE),
            assigned=keep | free,
            pending_revocation=NO_PARTITIONS,
        )
    return current if new == current else new
