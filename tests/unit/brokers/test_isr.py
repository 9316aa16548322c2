"""ISR shrink and expand decisions at their boundaries, and a leader walking a
follower out of the ISR and back in through the tracker, the ISR rules and the
HW computation together."""

from __future__ import annotations

import pytest

from lograft.brokers.high_watermark import compute_high_watermark
from lograft.brokers.isr import isr_expand_candidates, isr_shrink_candidates
from lograft.brokers.replica_state import (
    REPLICA_LAG_TIME_MAX_MS,
    FollowerState,
    FollowerStateTracker,
)

LAG = 1_000


def st_(leo: int, caught_up: int) -> FollowerState:
    return FollowerState(leo, caught_up, caught_up, leo)


def test_default_lag_is_kafkas() -> None:
    assert REPLICA_LAG_TIME_MAX_MS == 30_000


def test_shrink_boundary_is_inclusive_like_kafka() -> None:
    states = {2: st_(5, 0)}
    assert (
        isr_shrink_candidates([1, 2], states, 10, LAG, leader_id=1, replica_lag_time_max_ms=LAG)
        == frozenset()
    )
    assert isr_shrink_candidates([1, 2], states, 10, LAG + 1, 1, LAG) == {2}


def test_follower_at_leader_leo_stays_however_old() -> None:
    states = {2: st_(10, 0)}
    assert isr_shrink_candidates([1, 2], states, 10, 10 * LAG, 1, LAG) == frozenset()


def test_leader_never_leaves_and_missing_state_is_a_bug() -> None:
    assert isr_shrink_candidates([1], {}, 10, 10 * LAG, 1, LAG) == frozenset()
    with pytest.raises(ValueError):
        isr_shrink_candidates([1, 2], {}, 10, 0, 1, LAG)


def test_expand_needs_hw_and_leader_epoch_start() -> None:
    states = {2: st_(7, 0), 3: st_(9, 0), 4: st_(12, 0), 5: st_(20, 0)}
    got = isr_expand_candidates(
        isr=[1],
        replicas=[1, 2, 3, 4, 5],
        follower_states=states,
        high_watermark=8,
        leader_epoch_start_offset=10,
        leader_id=1,
        ineligible={5},
        leader_leo=20,
        now_ms=0,
    )
    # 2 is below the HW, 3 below the epoch start, 5 is fenced.
    assert got == {4}


def test_expand_skips_isr_members_unassigned_and_unknown() -> None:
    states = {2: st_(9, 0), 6: st_(9, 0)}
    assert (
        isr_expand_candidates([1, 2], [1, 2, 3], states, 0, 0, 1, leader_leo=9, now_ms=0)
        == frozenset()
    )


def test_a_follower_that_stopped_fetching_is_not_taken_back_from_its_stale_state() -> None:
    # min_insync_replicas not met: the HW stays at 1 while the leader appends
    # (acks=1), so the LEO (1) of follower 3, which stopped fetching when it
    # was caught up and was removed a lag time later, is still "at the HW".
    # It must fetch (and catch up) before it joins again.
    t = FollowerStateTracker(leader_id=1)
    t.become_leader([1, 2, 3], {1, 2, 3}, now_ms=0)
    t.on_fetch(3, 1, 1, now_ms=100)
    t.on_fetch(2, 2, 2, now_ms=200)
    now = 100 + LAG + 1
    assert isr_shrink_candidates([1, 2, 3], t.states(), 2, now, 1, LAG) == {3}
    joining = isr_expand_candidates(
        [1, 2],
        [1, 2, 3],
        t.states(),
        1,
        0,
        1,
        leader_leo=2,
        now_ms=now,
        replica_lag_time_max_ms=LAG,
    )
    assert joining == frozenset()
    # Back: a fetch behind the log end, then one at it.
    t.on_fetch(3, 1, 2, now_ms=now + 10)
    t.on_fetch(3, 2, 2, now_ms=now + 20)
    joining = isr_expand_candidates(
        [1, 2],
        [1, 2, 3],
        t.states(),
        1,
        0,
        1,
        leader_leo=2,
        now_ms=now + 20,
        replica_lag_time_max_ms=LAG,
    )
    assert joining == {3}


def test_follower_leaves_and_rejoins() -> None:
    t = FollowerStateTracker(leader_id=1)
    isr = {1, 2, 3}
    t.become_leader([1, 2, 3], isr, now_ms=0)
    leo, hw, now = 0, 0, 0
    for _ in range(5):  # both followers keep up
        leo += 10
        now += 100
        for f in (2, 3):
            t.on_fetch(f, leo, leo, now)
        hw = compute_high_watermark(hw, leo, t.follower_leos(isr), 2)
    assert hw == 50
    # Follower 3 stops fetching; the HW stalls at its LEO until it is removed.
    for _ in range(20):
        leo += 10
        now += 100
        t.on_fetch(2, leo, leo, now)
        hw = compute_high_watermark(hw, leo, t.follower_leos(isr), 2)
        isr -= isr_shrink_candidates(isr, t.states(), leo, now, 1, LAG)
    assert isr == {1, 2}
    assert hw == compute_high_watermark(hw, leo, t.follower_leos(isr), 2) == leo
    # It comes back, fetches up to the leader and rejoins.
    t.on_fetch(3, 60, leo, now + 1)
    expand = {"leader_leo": leo, "replica_lag_time_max_ms": LAG}
    assert (
        isr_expand_candidates(isr, [1, 2, 3], t.states(), hw, 0, 1, now_ms=now + 1, **expand)
        == frozenset()
    )
    t.on_fetch(3, leo, leo, now + 2)
    assert isr_expand_candidates(
        isr, [1, 2, 3], t.states(), hw, 0, 1, now_ms=now + 2, **expand
    ) == {3}
