"""pause_guard: pysyncobj's timer checks do not fire for a pause of the Raft
thread that began inside the tick (after the tick's own late-start check).

The follower's check is `deadline < monotonicTime()`, the leader's
`last_answer > monotonicTime() - fallback`; both are run here exactly as
pysyncobj writes them, against a real SyncObj's private attributes."""

from __future__ import annotations

from types import SimpleNamespace

from lograft.quorum.raft import pause_guard
from lograft.quorum.raft.core import absorb_own_pause

LIMIT_S = 0.1  # heartbeat_interval_ms
FALLBACK_S = 2.0


def armed(deadline: float, answers: dict[str, float], looked_at: float) -> SimpleNamespace:
    so = SimpleNamespace(
        _SyncObj__raftElectionDeadline=deadline,
        _SyncObj__lastResponseTime=dict(answers),
    )
    pause_guard.arm(so, looked_at, LIMIT_S, FALLBACK_S)  # type: ignore[arg-type]
    return so


def test_a_deadline_that_passed_during_a_pause_inside_the_tick_does_not_fire() -> None:
    so = armed(deadline=100.05, answers={}, looked_at=100.0)
    deadline = so._SyncObj__raftElectionDeadline
    assert not deadline < 100.02  # no pause, not yet due
    assert deadline < 100.09  # no pause (90 ms of work): due, fires
    assert not deadline < 104.2  # 4.2 s since the tick began: a pause, held back
    assert deadline == 100.05 and float(deadline) == 100.05


def test_an_answer_older_than_the_fallback_counts_after_a_pause_only() -> None:
    so = armed(deadline=0, answers={"2": 97.0}, looked_at=100.0)
    assert so._SyncObj__raftElectionDeadline == 0  # a leader's: left alone
    answer = so._SyncObj__lastResponseTime["2"]
    assert not answer > 100.05 - FALLBACK_S  # 3.05 s old, no pause: the leader steps down
    assert answer > 104.2 - FALLBACK_S  # the same after a 4.2 s pause in the tick: kept
    assert answer > 98.5 - FALLBACK_S  # answered recently: kept either way


def test_absorbing_a_late_tick_sees_through_last_ticks_guards() -> None:
    """absorb_own_pause pushes the deadline with max(): a guarded float must
    compare as its value there, or the old deadline would win."""
    so = armed(deadline=100.5, answers={"2": 99.0}, looked_at=100.0)
    so._SyncObj__transferInProgress = False
    so._SyncObj__generateRaftTimeout = lambda: 2.0
    absorb_own_pause(so, 104.2, FALLBACK_S)  # type: ignore[arg-type]
    assert so._SyncObj__raftElectionDeadline == 106.2
    assert so._SyncObj__lastResponseTime["2"] == 104.2 - FALLBACK_S / 2
