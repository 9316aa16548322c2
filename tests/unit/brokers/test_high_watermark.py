"""Leader HW: smallest ISR LEO, never backwards, never above the LEO, held
while the ISR is below min.insync.replicas; a simulated leader with random
appends, fetches and ISR changes checks that every offset below the HW was
held by min ISR replicas when the HW passed it. Acks checks at their
boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.brokers.high_watermark import (
    acks_all_satisfied,
    compute_high_watermark,
    enough_replicas_for_acks_all,
    follower_high_watermark,
)


def test_smallest_leo_in_the_isr() -> None:
    assert compute_high_watermark(0, 10, {2: 7, 3: 9}, 2) == 7


def test_leader_leo_bounds_it() -> None:
    # A follower reporting more than the leader has (a reordered report after
    # a truncation) cannot lift the HW above the leader's LEO.
    assert compute_high_watermark(0, 5, {2: 8}, 1) == 5
    assert compute_high_watermark(0, 5, {}, 1) == 5


def test_never_backwards() -> None:
    assert compute_high_watermark(7, 10, {2: 3}, 2) == 7
    # Unknown LEO of a follower a new leader has not heard from yet.
    assert compute_high_watermark(4, 10, {2: -1, 3: 10}, 2) == 4


def test_held_while_isr_below_min_insync() -> None:
    assert compute_high_watermark(3, 10, {}, 2) == 3
    assert compute_high_watermark(3, 10, {2: 8}, 3) == 3
    assert compute_high_watermark(3, 10, {2: 8}, 2) == 8


def test_invariants_fail_loudly() -> None:
    with pytest.raises(AssertionError):
        compute_high_watermark(11, 10, {}, 1)
    with pytest.raises(ValueError):
        compute_high_watermark(0, 10, {}, 0)


def test_follower_high_watermark() -> None:
    assert follower_high_watermark(10, 7) == 7
    assert follower_high_watermark(5, 7) == 5
    assert follower_high_watermark(-1, 7) == 0


def test_acks_all_boundaries() -> None:
    # A batch with last offset 9 needs HW 10.
    assert not acks_all_satisfied(10, 9)
    assert acks_all_satisfied(10, 10)
    assert not enough_replicas_for_acks_all(1, 2)
    assert enough_replicas_for_acks_all(2, 2)


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5)),
        st.tuples(st.just("fetch"), st.integers(1, 4), st.integers(0, 6)),
        st.tuples(st.just("leave"), st.integers(1, 4)),
        st.tuples(st.just("join"), st.integers(1, 4)),
    ),
    max_size=80,
)


@settings(max_examples=400)
@given(STEPS, st.integers(1, 5))
def test_hw_against_a_simulated_leader(steps, min_isr) -> None:
    leader = 0
    leo = {r: 0 for r in range(5)}
    isr = {0, 1, 2, 3, 4}
    hw = 0
    for step in steps:
        if step[0] == "append":
            leo[leader] += step[1]
        elif step[0] == "fetch":
            _, r, n = step
            leo[r] = min(leo[leader], leo[r] + n)
        elif step[0] == "leave":
            isr.discard(step[1])
        elif step[0] == "join" and leo[step[1]] >= hw:
            isr.add(step[1])
        followers = {r: leo[r] for r in isr if r != leader}
        new = compute_high_watermark(hw, leo[leader], followers, min_isr)
        assert hw <= new <= leo[leader]
        if new > hw:
            # Every newly exposed offset is held by >= min_isr ISR members.
            holders = [r for r in isr if leo[r] >= new]
            assert len(holders) >= min_isr
        if len(isr) >= min_isr:
            # ...and the HW is not held back more than the ISR requires.
            assert new >= min(leo[r] for r in isr)
        else:
            assert new == hw
        hw = new
