"""Group admin: list, describe (members, offsets, lag), delete, reset offsets."""

from __future__ import annotations

import pytest

from lograft.brokers.groups.admin import (
    OffsetResetStrategy,
    PartitionBounds,
    PartitionOffsetDescription,
    describe_group,
    list_groups,
    resolve_reset_offsets,
)
from lograft.brokers.groups.offsets import CommittedOffset, OffsetAndMetadata, fetch_offsets
from lograft.brokers.groups.records import MemberState
from lograft.brokers.groups.state import GroupState
from lograft.errors import GroupIdNotFoundError, InvalidRequestError, NonEmptyGroupError
from tests.unit.brokers.group_harness import Coordinator, compact, replay_log, tp, tps


def test_list_groups_with_states() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("stable", "a", ("t",))
    c.join("reconciling", "a", ("t",))
    c.join("reconciling", "b", ("t",))
    c.commit("empty", "", -1, {tp("t", 0): 1})
    listing = list_groups(c.state)
    assert [(g.group_id, g.state, g.members) for g in listing] == [
        ("empty", GroupState.EMPTY, 0),
        ("reconciling", GroupState.RECONCILING, 2),
        ("stable", GroupState.STABLE, 1),
    ]
    assert [g.group_id for g in list_groups(c.state, {GroupState.EMPTY})] == ["empty"]
    c.leave("stable", "a")
    assert list_groups(c.state, {GroupState.EMPTY, GroupState.STABLE})[1].state is (
        GroupState.EMPTY
    )
    assert a.member_epoch == 1


def test_describe_members_offsets_and_lag() -> None:
    c = Coordinator(topics={"t": 3})
    a = c.join("g", "a", ("t",), assignor="range")
    c.commit("g", "a", a.member_epoch, {tp("t", 0): OffsetAndMetadata(40, "x"), tp("t", 1): 7})
    c.commit("g", "a", a.member_epoch, {tp("t", 1): 9})
    d = describe_group(c.state, "g", {tp("t", 0): 100, tp("t", 1): 5}, c.config)
    assert d.state is GroupState.STABLE
    assert (d.group_epoch, d.assignment_epoch, d.assignor) == (1, 1, "range")
    (m,) = d.members
    assert m.member_id == "a" and m.member_state is MemberState.STABLE
    assert m.assigned == m.target == tps("t", 0, 1, 2) and m.pending_revocation == frozenset()
    assert d.offsets == (
        PartitionOffsetDescription(tp("t", 0), 40, "x", 100, 60, "a"),
        # Committed above the high watermark: lag 0, never negative.
        PartitionOffsetDescription(tp("t", 1), 9, "", 5, 0, "a"),
        # Owned without a commit, no high watermark given: no lag.
        PartitionOffsetDescription(tp("t", 2), None, "", None, None, "a"),
    )


def test_describe_states_through_a_rebalance() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",))
    c.join("g", "b", ("t",))

    def state() -> GroupState:
        return describe_group(c.state, "g", {}, c.config).state

    assert state() is GroupState.RECONCILING
    c.heartbeat("g", "a", 1, owned=a.assignment)
    d = describe_group(c.state, "g", {}, c.config)
    assert d.members[0].member_state is MemberState.UNREVOKED_PARTITIONS
    assert d.members[1].member_state is MemberState.UNRELEASED_PARTITIONS
    c.heartbeat("g", "a", 1, owned=d.members[0].assigned)
    c.heartbeat("g", "b", 2, owned=frozenset())
    assert state() is GroupState.STABLE
    c.leave("g", "b")
    assert state() is GroupState.ASSIGNING
    c.leave("g", "a")
    assert state() is GroupState.EMPTY


def test_describe_unknown_group_is_dead() -> None:
    c = Coordinator()
    d = describe_group(c.state, "ghost", {}, c.config)
    assert d.state is GroupState.DEAD and d.members == () and d.offsets == ()


def test_delete_group() -> None:
    c = Coordinator(topics={"t": 1})
    with pytest.raises(GroupIdNotFoundError):
        c.delete("g")
    c.join("g", "a", ("t",))
    c.commit("g", "a", 1, {tp("t", 0): 3})
    with pytest.raises(NonEmptyGroupError):
        c.delete("g")
    c.leave("g", "a")
    c.delete("g")
    assert c.state.group("g") is None
    # Compaction with tombstones past their retention leaves nothing of the group.
    assert compact(c.log, drop_tombstones=True) == []
    assert replay_log(compact(c.log)) == c.state
    # A new group of the same name starts afresh.
    assert c.join("g", "b", ("t",)).member_epoch == 1


def test_reset_offsets_only_without_members() -> None:
    c = Coordinator(topics={"t": 2})
    c.join("g", "a", ("t",))
    with pytest.raises(NonEmptyGroupError):
        c.reset("g", {tp("t", 0): 0})
    c.leave("g", "a")
    c.reset("g", {tp("t", 0): 0, tp("t", 1): 5})
    assert fetch_offsets(c.state, "g") == {
        tp("t", 0): CommittedOffset(0, "", -1, 0),
        tp("t", 1): CommittedOffset(5, "", -1, 0),
    }
    c.reset("new", {tp("t", 0): 2})
    assert fetch_offsets(c.state, "new")[tp("t", 0)] == CommittedOffset(2, "", -1, 0)


def test_resolve_reset_offsets() -> None:
    bounds = {
        tp("t", 0): PartitionBounds(10, 20, offset_for_timestamp=15),
        tp("t", 1): PartitionBounds(0, 0),
        tp("t", 2): PartitionBounds(5, 50, offset_for_timestamp=None),
    }
    S = OffsetResetStrategy
    assert resolve_reset_offsets(S.EARLIEST, bounds) == {
        tp("t", 0): 10,
        tp("t", 1): 0,
        tp("t", 2): 5,
    }
    assert resolve_reset_offsets(S.LATEST, bounds) == {
        tp("t", 0): 20,
        tp("t", 1): 0,
        tp("t", 2): 50,
    }
    # No record that recent: the high watermark.
    assert resolve_reset_offsets(S.TIMESTAMP, bounds) == {
        tp("t", 0): 15,
        tp("t", 1): 0,
        tp("t", 2): 50,
    }
    # A given offset is clamped into each partition's range.
    assert resolve_reset_offsets(S.OFFSET, bounds, 12) == {
        tp("t", 0): 12,
        tp("t", 1): 0,
        tp("t", 2): 12,
    }
    assert resolve_reset_offsets(S.OFFSET, bounds, 3)[tp("t", 0)] == 10
    with pytest.raises(InvalidRequestError):
        resolve_reset_offsets(S.OFFSET, bounds)
    with pytest.raises(ValueError):
        resolve_reset_offsets(S.EARLIEST, {tp("t", 0): PartitionBounds(5, 4)})
