"""Member sessions of one group: the coordinator's soft state.

Heartbeat times are not written to `__consumer_offsets` (a record per
heartbeat would flood it); they live only in the coordinator's memory as an
immutable `GroupSessions` value per group, which handlers take and return.
A new coordinator starts from `GroupSessions.after_failover`, which gives every
member a full session (and a member asked to revoke partitions a full
rebalance timeout) from the moment it took over: a failover never removes a
live member, and a dead one is removed one session timeout after it at the
latest.

Two deadlines per member, both absolute times on the caller's monotonic clock:

- `session_deadline_ms`: now + session timeout at each heartbeat;
- `revocation_deadline_ms`: set when the member is first asked to revoke
  partitions (enters UNREVOKED_PARTITIONS), cleared when it leaves that state;
  a member that keeps heartbeating but never gives the partitions up would
  otherwise hold them, and stall the group, forever.

A member is expired when `now_ms` is past either deadline.

`last_sequence` is the highest heartbeat `sequence` processed for the member
(None: none seen since the session began). A request at or below it is a
delayed duplicate and is refused (see group_heartbeat). It is soft state like
the deadlines: after a failover the first heartbeat sets it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.records import MemberState
from lograft.brokers.groups.state import ConsumerGroup


@dataclass(frozen=True, slots=True)
class MemberSession:
    session_deadline_ms: int
    revocation_deadline_ms: int | None = None
    last_sequence: int | None = None

    def expired(self, now_ms: int) -> bool:
        if now_ms > self.session_deadline_ms:
            return True
        return self.revocation_deadline_ms is not None and now_ms > self.revocation_deadline_ms


def _no_members() -> Mapping[str, MemberSession]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GroupSessions:
    members: Mapping[str, MemberSession] = field(default_factory=_no_members)

    @classmethod
    def after_failover(
        cls, group: ConsumerGroup | None, now_ms: int, config: GroupCoordinatorConfig
    ) -> GroupSessions:
        """A fresh session for every member of `group`, starting at `now_ms`."""
        if group is None:
            return cls()
        sessions: dict[str, MemberSession] = {}
        for member_id, meta in group.members.items():
            revocation = None
            if group.current_of(member_id).state is MemberState.UNREVOKED_PARTITIONS:
                revocation = now_ms + meta.rebalance_timeout_ms
            sessions[member_id] = MemberSession(now_ms + config.session_timeout_ms, revocation)
        return cls(MappingProxyType(sessions))

    def get(self, member_id: str) -> MemberSession | None:
        return self.members.get(member_id)

    def with_member(self, member_id: str, session: MemberSession) -> GroupSessions:
        members = dict(self.members)
        members[member_id] = session
        return GroupSessions(MappingProxyType(members))

    def without(self, *member_ids: str) -> GroupSessions:
        members = dict(self.members)
        for member_id in member_ids:
            members.pop(member_id, None)
        return GroupSessions(MappingProxyType(members))

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of any member: when to call `expire_members` next."""
        deadlines = [s.session_deadline_ms for s in self.members.values()]
        deadlines += [
            s.revocation_deadline_ms
            for s in self.members.values()
            if s.revocation_deadline_ms is not None
        ]
        return min(deadlines, default=None)
