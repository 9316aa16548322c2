"""Reconciliation: the rules of `reconcile` one by one, then the property that
matters, under random joins, leaves, crashes, timeouts, lost responses, slow
revocations, topic growth, subscription changes and coordinator failovers:

- safety, after every step: no partition is held by two live clients, and a
  client holds only partitions the coordinator records it as owning (so the
  assignment in any response never lists a partition another live member may
  still hold);
- liveness, once faults stop: every partition of every subscribed topic is
  held by exactly one live member subscribed to it, and the group is STABLE.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lograft.brokers.groups.reconciliation import reconcile
from lograft.brokers.groups.records import (
    NO_PARTITIONS,
    CurrentMemberAssignmentValue,
    MemberState,
)
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.brokers.group_harness import tps
from tests.unit.brokers.group_sim import Simulation


def _current(
    epoch: int,
    assigned: frozenset[TopicPartition],
    state: MemberState = MemberState.STABLE,
    pending: frozenset[TopicPartition] = NO_PARTITIONS,
    previous: int = -1,
) -> CurrentMemberAssignmentValue:
    return CurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)


def _nobody(_: TopicPartition) -> bool:
    return False


def test_stable_at_target_epoch_does_not_change() -> None:
    cur = _current(3, tps("t", 0, 1))
    assert reconcile(cur, tps("t", 0, 1), 3, tps("t", 0, 1), _nobody) is cur


def test_new_target_with_only_additions_moves_to_target_epoch() -> None:
    cur = _current(3, tps("t", 0))
    new = reconcile(cur, tps("t", 0, 1), 4, tps("t", 0), _nobody)
    assert new == _current(4, tps("t", 0, 1), previous=3)


def test_revocation_keeps_epoch_and_withholds_new_partitions() -> None:
    cur = _current(3, tps("t", 0, 1))
    new = reconcile(cur, tps("t", 0, 2), 4, tps("t", 0, 1), _nobody)
    # t-1 must be given up first; t-2 is not handed out until then.
    assert new == _current(
        3, tps("t", 0), MemberState.UNREVOKED_PARTITIONS, pending=tps("t", 1), previous=-1
    )


def test_unreported_owned_partitions_are_assumed_still_held() -> None:
    cur = _current(3, tps("t", 0, 1))
    new = reconcile(cur, tps("t", 0), 4, None, _nobody)
    assert new.state is MemberState.UNREVOKED_PARTITIONS
    # ... and an UNREVOKED member that does not report stays waiting.
    assert reconcile(new, tps("t", 0), 4, None, _nobody) is new


def test_revocation_waits_until_the_member_stops_listing_the_partition() -> None:
    cur = _current(3, tps("t", 0), MemberState.UNREVOKED_PARTITIONS, pending=tps("t", 1))
    assert reconcile(cur, tps("t", 0, 2), 4, tps("t", 0, 1), _nobody) is cur
    done = reconcile(cur, tps("t", 0, 2), 4, tps("t", 0), _nobody)
    assert done == _current(4, tps("t", 0, 2), previous=3)


def test_partitions_already_given_up_are_dropped_without_waiting() -> None:
    cur = _current(3, tps("t", 0, 1))
    new = reconcile(cur, tps("t", 0), 4, tps("t", 0), _nobody)
    assert new == _current(4, tps("t", 0), previous=3)


def test_partition_owned_by_another_member_is_withheld_until_released() -> None:
    cur = _current(3, tps("t", 0))
    busy = tps("t", 1)
    new = reconcile(cur, tps("t", 0, 1), 4, tps("t", 0), lambda tp: tp in busy)
    assert new == _current(4, tps("t", 0), MemberState.UNRELEASED_PARTITIONS, previous=3)
    # Still owned elsewhere: unchanged. Released: picked up, STABLE.
    assert reconcile(new, tps("t", 0, 1), 4, tps("t", 0), lambda tp: tp in busy) is new
    assert reconcile(new, tps("t", 0, 1), 4, tps("t", 0), _nobody) == _current(
        4, tps("t", 0, 1), previous=3
    )


def test_new_member_gets_free_partitions_at_the_target_epoch() -> None:
    cur = _current(0, NO_PARTITIONS)
    new = reconcile(cur, tps("t", 0, 1), 7, NO_PARTITIONS, _nobody)
    assert new == _current(7, tps("t", 0, 1), previous=0)


# --- the property ----------------------------------------------------------------------

TOPICS = ("a", "b")
SUBSCRIPTIONS = [("a",), ("b",), ("a", "b")]

_join = st.tuples(
    st.just("join"), st.sampled_from(SUBSCRIPTIONS), st.sampled_from([None, "range", "uniform"])
)
_heartbeat = st.tuples(st.just("heartbeat"), st.integers(0, 9), st.booleans())
_heartbeat_ok = st.tuples(st.just("heartbeat"), st.integers(0, 9), st.just(False))
_release = st.tuples(st.just("release"), st.integers(0, 9), st.integers(1, 3))
# Weighted by repetition: mostly heartbeats and releases, with faults mixed in.
op = st.one_of(
    _join,
    _join,
    _heartbeat,
    _heartbeat_ok,
    _heartbeat_ok,
    _heartbeat_ok,
    _release,
    _release,
    st.tuples(st.just("leave"), st.integers(0, 9)),
    st.tuples(st.just("crash"), st.integers(0, 9)),
    st.tuples(st.just("tick"), st.sampled_from([100, 1_000, 2_500, 4_000, 11_000])),
    st.tuples(st.just("tick"), st.just(1_000)),
    st.tuples(st.just("grow"), st.sampled_from(TOPICS)),
    st.tuples(st.just("subscribe"), st.integers(0, 9), st.sampled_from(SUBSCRIPTIONS)),
    st.tuples(st.just("failover"), st.booleans(), st.booleans()),
    st.tuples(st.just("delay"), st.integers(0, 9)),
    st.tuples(st.just("deliver"), st.integers(0, 9)),
)


def run_ops(sim: Simulation, ops: list[tuple]) -> None:
    for step in ops:
        kind = step[0]
        clients = sim.clients
        if kind == "join":
            if len(sim.live()) < 6:
                sim.heartbeat(sim.add_client(step[1], step[2]))
        elif kind == "tick":
            sim.tick(step[1])
        elif kind == "grow":
            sim.grow(step[1])
        elif kind == "failover":
            sim.failover(compacted=step[1], drop_tombstones=step[2])
        elif kind == "deliver":
            sim.deliver(step[1])
        elif clients:
            client = clients[step[1] % len(clients)]
            if kind == "heartbeat":
                sim.heartbeat(client, lose_response=step[2])
            elif kind == "release":
                sim.release(client, step[2])
            elif kind == "leave":
                sim.leave(client)
            elif kind == "crash":
                sim.crash(client)
            elif kind == "subscribe":
                sim.change_subscription(client, step[2])
            elif kind == "delay":
                sim.delay(client)
        sim.check_safety()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 7), min_size=1),
    st.lists(op, min_size=20, max_size=120),
)
def test_never_two_owners_and_eventually_all_owned(
    topics: dict[str, int], ops: list[tuple]
) -> None:
    sim = Simulation(topics)
    run_ops(sim, ops)
    sim.settle()
    sim.check_converged()


def test_scenario_rebalance_when_a_member_joins_and_one_crashes() -> None:
    """Two members split six partitions; a third joins; one crashes and its
    partitions move after the session timeout."""
    sim = Simulation({"a": 6})
    one, two = sim.add_client(("a",)), sim.add_client(("a",))
    sim.heartbeat(one)
    sim.heartbeat(two)
    sim.settle(rounds=3)
    sim.check_converged()
    assert len(one.held) == len(two.held) == 3

    three = sim.add_client(("a",))
    sim.heartbeat(three)
    sim.check_safety()
    assert three.held == set()  # nothing is free yet: the others must give up first
    sim.settle(rounds=3)
    sim.check_converged()
    assert sorted(len(c.held) for c in (one, two, three)) == [2, 2, 2]

    before = set(one.held)
    sim.crash(one)
    sim.settle(rounds=3)  # 3 s: not yet expired, its partitions stay unassigned
    assert all(not (before & c.held) for c in (two, three))
    sim.settle(rounds=9)  # past the 10 s session timeout
    sim.check_converged()
    assert before <= two.held | three.held


def test_slow_revocation_blocks_the_new_owner_until_acknowledged() -> None:
    sim = Simulation({"a": 2}, release_delay_ms_max=3_000)
    one = sim.add_client(("a",))
    sim.heartbeat(one)
    assert len(one.held) == 2
    two = sim.add_client(("a",))
    sim.heartbeat(two)
    sim.heartbeat(one)  # learns it must give one up; has not yet
    assert len(one.revoking) == 1
    for _ in range(3):
        sim.heartbeat(two)
        sim.check_safety()
        assert two.held == set()
    sim.release(one, 1)
    sim.heartbeat(two)
    assert two.held == set()  # the coordinator has not heard the release yet
    sim.heartbeat(one)
    sim.heartbeat(two)
    assert len(two.held) == 1
    sim.check_safety()


# --- delayed duplicates ------------------------------------------------------------------


def _two_owners(sim: Simulation) -> bool:
    try:
        sim.check_safety()
    except AssertionError:
        return True
    return False


def _stale_join_scenario(use_sequence: bool) -> Simulation:
    """A join stuck in flight reaches the coordinator after the member has
    joined again, holds partitions and is slowly giving one up."""
    sim = Simulation({"a": 2}, use_sequence=use_sequence)
    one = sim.add_client(("a",))
    sim.delay(one)  # join #1 stuck
    sim.heartbeat(one)  # join #2: gets a-0 and a-1
    assert len(one.held) == 2
    two = sim.add_client(("a",))
    sim.heartbeat(two)
    sim.heartbeat(one)  # asked to give up one partition; still holds it
    assert len(one.revoking) == 1
    refused = sim.deliver(0)  # the stale join
    assert refused == ("OUT_OF_ORDER_HEARTBEAT" if use_sequence else None)
    sim.heartbeat(two)
    return sim


def _stale_heartbeat_scenario(use_sequence: bool) -> Simulation:
    """A heartbeat sent before the member got a partition reaches the
    coordinator while the member is giving that partition up: it lists the
    partitions the member held then, which looks like an acknowledgement."""
    sim = Simulation({"a": 1}, use_sequence=use_sequence)
    one = sim.add_client(("a",))
    sim.heartbeat(one)
    sim.delay(one)  # owned {a-0} at the old epoch, stuck
    sim.grow("a")
    sim.heartbeat(one)  # new epoch, now holds a-0 and a-1
    assert len(one.held) == 2
    two = sim.add_client(("a",))
    sim.heartbeat(two)
    sim.heartbeat(one)  # asked to give up a-1; still holds it
    assert len(one.revoking) == 1
    # The stale heartbeat: previous epoch, owned within assigned.
    refused = sim.deliver(0)
    assert refused == ("OUT_OF_ORDER_HEARTBEAT" if use_sequence else None)
    sim.heartbeat(two)
    return sim


def test_delayed_duplicates_break_safety_without_sequence_numbers() -> None:
    # Why `sequence` exists: member epochs alone let both through.
    assert _two_owners(_stale_join_scenario(use_sequence=False))
    assert _two_owners(_stale_heartbeat_scenario(use_sequence=False))


def test_sequence_numbers_refuse_delayed_duplicates() -> None:
    for scenario in (_stale_join_scenario, _stale_heartbeat_scenario):
        sim = scenario(use_sequence=True)
        sim.check_safety()
        sim.settle(rounds=3)
        sim.check_converged()
