"""Follower state on the leader: Kafka's lastCaughtUpTimeMs rules (caught up
to the LEO at this fetch, or to the LEO at the previous fetch), the new-leader
grace period, and refusals; checked against a definition over the whole fetch
history."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.brokers.replica_state import FollowerState, FollowerStateTracker
from lograft.errors import NotLeaderOrFollowerError


def tracker(now: int = 0) -> FollowerStateTracker:
    t = FollowerStateTracker(leader_id=1)
    t.become_leader(replicas=[1, 2, 3], isr=[1, 2], now_ms=now)
    return t


def test_become_leader_resets_and_gives_isr_followers_grace() -> None:
    t = tracker(now=500)
    assert t.state(2) == FollowerState(-1, 500, 0, -1)
    assert t.state(3) == FollowerState(-1, 0, 0, -1)
    assert 1 not in t.states()


def test_fetch_at_leader_leo_is_caught_up_now() -> None:
    t = tracker()
    s = t.on_fetch(2, 10, 10, now_ms=1_000)
    assert (s.leo, s.last_caught_up_ms, s.last_fetch_ms) == (10, 1_000, 1_000)


def test_steady_load_counts_as_caught_up_at_previous_fetch() -> None:
    t = tracker()
    # The leader's LEO keeps moving; each fetch reaches the LEO the leader
    # had at the previous fetch, never the current one.
    t.on_fetch(2, 5, 10, now_ms=1_000)
    s = t.on_fetch(2, 10, 20, now_ms=2_000)
    assert s.last_caught_up_ms == 1_000
    s = t.on_fetch(2, 20, 30, now_ms=3_000)
    assert s.last_caught_up_ms == 2_000


def test_falling_behind_keeps_the_old_caught_up_time() -> None:
    t = tracker()
    t.on_fetch(2, 10, 10, now_ms=1_000)
    t.on_fetch(2, 11, 20, now_ms=2_000)
    s = t.on_fetch(2, 15, 30, now_ms=3_000)  # below 20, the LEO at the previous fetch
    assert s.last_caught_up_ms == 1_000


def test_refusals() -> None:
    t = tracker()
    with pytest.raises(NotLeaderOrFollowerError):
        t.on_fetch(9, 0, 0, now_ms=1)
    with pytest.raises(ValueError):
        t.on_fetch(2, 11, 10, now_ms=1)
    with pytest.raises(ValueError):
        t.on_fetch(2, -1, 10, now_ms=1)


def test_set_replicas_keeps_known_states_and_adds_new_ones() -> None:
    t = tracker()
    t.on_fetch(2, 4, 4, now_ms=10)
    t.set_replicas([1, 2, 4])
    assert set(t.states()) == {2, 4}
    assert t.state(2).leo == 4
    assert t.state(4) == FollowerState(-1, 0, 0, -1)
    assert t.follower_leos([1, 2, 4]) == {2: 4, 4: -1}


FETCHES = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 8), st.integers(0, 50)),  # leo growth, lag, dt
    max_size=40,
)


@settings(max_examples=300)
@given(FETCHES, st.integers(0, 1_000))
def test_matches_definition_over_fetch_history(fetches, start) -> None:
    t = tracker(now=start)
    leader_leo, now, prev_follower = 0, start, 0
    history: list[tuple[int, int, int]] = []  # (fetch offset, leader LEO, time)
    for growth, lag, dt in fetches:
        leader_leo += growth
        now += dt
        offset = max(prev_follower, leader_leo - lag)
        prev_follower = offset
        s = t.on_fetch(2, offset, leader_leo, now)
        history.append((offset, leader_leo, now))
        # Definition: the latest time the follower is known to have held the
        # leader's whole log: a fetch reaching that fetch's leader LEO (at its
        # time) or the previous fetch's leader LEO (at the previous time).
        expected = start  # ISR member at become_leader
        for i, (off, lleo, ts) in enumerate(history):
            if off >= lleo:
                expected = max(expected, ts)
            elif i > 0 and off >= history[i - 1][1]:
                expected = max(expected, history[i - 1][2])
        assert s.last_caught_up_ms == expected
        assert s.leo == offset
        assert s.last_fetch_ms == now
