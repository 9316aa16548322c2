"""Replay rebuilds the coordinator's state: from the full log, from what
compaction leaves of it (all of it or a prefix, with or without tombstones),
and from a snapshot (`CoordinatorState.records()`), after random histories of
joins, heartbeats, leaves, expiries, commits, deletions and failovers. And
replay refuses records that would break its invariants."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lograft.brokers.groups.records import (
    CurrentMemberAssignmentKey,
    CurrentMemberAssignmentValue,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    TargetAssignmentMetadataKey,
    TargetAssignmentMetadataValue,
    decode_record,
    encode_record,
)
from lograft.brokers.groups.state import CoordinatorState
from lograft.errors import (
    GroupRecordError,
    LograftError,
)
from tests.unit.brokers.group_harness import compact, replay_log, tp, tps
from tests.unit.brokers.group_sim import GROUP, Simulation
from tests.unit.brokers.test_group_reconciliation import TOPICS, op, run_ops

extra_op = st.one_of(
    # A live member commits with the epoch it knows (possibly stale).
    st.tuples(st.just("commit"), st.integers(0, 9), st.integers(0, 6), st.integers(0, 1000)),
    # Another group: simple commits, deletion.
    st.tuples(st.just("simple_commit"), st.sampled_from(["x", "y"]), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.sampled_from(["x", "y", GROUP])),
)


def run_mixed(sim: Simulation, ops: list[tuple]) -> None:
    c = sim.coordinator
    for step in ops:
        kind = step[0]
        if kind == "commit" and sim.clients:
            client = sim.clients[step[1] % len(sim.clients)]
            if client.alive and client.epoch:
                with contextlib.suppress(LograftError):
                    c.commit(GROUP, client.member_id, client.epoch, {tp("a", step[2]): step[3]})
        elif kind == "simple_commit":
            c.commit(step[1], "", -1, {tp("a", step[2]): step[2] * 10})
        elif kind == "delete":
            with contextlib.suppress(LograftError):
                c.delete(step[1])
        else:
            run_ops(sim, [step])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 5), min_size=1),
    st.lists(st.one_of(op, extra_op), min_size=10, max_size=100),
    st.data(),
)
def test_replay_rebuilds_the_state(
    topics: dict[str, int], ops: list[tuple], data: st.DataObject
) -> None:
    sim = Simulation(topics)
    run_mixed(sim, ops)
    c = sim.coordinator
    state, log = c.state, c.log

    assert replay_log(log) == state
    assert replay_log(compact(log)) == state
    assert replay_log(compact(log, drop_tombstones=True)) == state
    # The cleaner compacts a prefix; the rest of the log stays as written.
    cut = data.draw(st.integers(0, len(log)))
    assert replay_log(compact(log[:cut]) + log[cut:]) == state
    assert replay_log(compact(log[:cut], drop_tombstones=True) + log[cut:]) == state

    # Snapshot/restore, through bytes.
    snapshot = [encode_record(r) for r in state.records()]
    assert replay_log(snapshot) == state
    assert len(snapshot) == len(compact(log, drop_tombstones=True))

    # A copy is equal and independent.
    copy = state.copy()
    assert copy == state
    copy.replay(GroupRecord(OffsetCommitKey("fresh", "a", 0), OffsetCommitValue(1, -1, "", 0)))
    assert copy != state and state.group("fresh") is None

    # And the rebuilt state carries on exactly like the original: every live
    # client keeps working after a failover to it.
    sim.failover(compacted=True, drop_tombstones=True)
    sim.settle()
    sim.check_converged()


# --- replay invariants -------------------------------------------------------------------


def _current(
    epoch: int, assigned: frozenset, pending: frozenset = frozenset()
) -> CurrentMemberAssignmentValue:
    state = MemberState.UNREVOKED_PARTITIONS if pending else MemberState.STABLE
    return CurrentMemberAssignmentValue(epoch, -1, state, assigned, pending)


def test_replay_refuses_a_second_owner() -> None:
    s = CoordinatorState()
    s.replay(GroupRecord(CurrentMemberAssignmentKey("g", "a"), _current(1, tps("t", 0))))
    bad = GroupRecord(CurrentMemberAssignmentKey("g", "b"), _current(1, frozenset(), tps("t", 0)))
    with pytest.raises(GroupRecordError, match="while a owns it"):
        s.replay(bad)
    group = s.group("g")
    assert group is not None and group.owner_of(tp("t", 0)) == "a"
    assert "b" not in group._current  # a refused record leaves no trace
    # Once a gives it up, b may have it.
    s.replay(GroupRecord(CurrentMemberAssignmentKey("g", "a"), _current(1, frozenset())))
    s.replay(bad)
    assert group.owner_of(tp("t", 0)) == "b"


def test_replay_refuses_epochs_going_backwards() -> None:
    s = CoordinatorState()
    s.replay(GroupRecord(GroupMetadataKey("g"), GroupMetadataValue(5)))
    with pytest.raises(GroupRecordError, match="backwards"):
        s.replay(GroupRecord(GroupMetadataKey("g"), GroupMetadataValue(4)))
    s.replay(GroupRecord(TargetAssignmentMetadataKey("g"), TargetAssignmentMetadataValue(5)))
    with pytest.raises(GroupRecordError, match="backwards"):
        s.replay(GroupRecord(TargetAssignmentMetadataKey("g"), TargetAssignmentMetadataValue(3)))
    s.replay(GroupRecord(CurrentMemberAssignmentKey("g", "a"), _current(5, frozenset())))
    with pytest.raises(GroupRecordError, match="backwards"):
        s.replay(GroupRecord(CurrentMemberAssignmentKey("g", "a"), _current(4, frozenset())))
    # After a tombstone (the group deleted) epochs start again.
    s.replay(GroupRecord.tombstone(GroupMetadataKey("g")))
    s.replay(GroupRecord(GroupMetadataKey("g"), GroupMetadataValue(1)))


def test_group_exists_while_any_key_does() -> None:
    s = CoordinatorState()
    s.replay(GroupRecord.tombstone(GroupMetadataKey("g")))  # nothing to delete
    assert s.group("g") is None
    key = OffsetCommitKey("g", "t", 0)
    s.replay(GroupRecord(key, OffsetCommitValue(3, -1, "", 0)))
    s.replay(GroupRecord(GroupMetadataKey("g"), GroupMetadataValue(1)))
    s.replay(GroupRecord.tombstone(key))
    assert s.group("g") is not None
    s.replay(GroupRecord.tombstone(GroupMetadataKey("g")))
    assert s.group("g") is None and dict(s.groups) == {}


def test_replay_from_bytes_refuses_garbage() -> None:
    with pytest.raises(GroupRecordError):
        decode_record(b"\x00\x09\x00\x01g", None)
