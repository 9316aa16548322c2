"""lograft/worst_window.py: the worst value of the last window, shared by the
event loop's and the Raft thread's lag probes."""

from __future__ import annotations

from lograft.node.loop_lag import LoopLagProbe
from lograft.quorum.raft.tick_lag import TickLag
from lograft.worst_window import WorstInWindow


def test_the_worst_of_the_window_and_only_of_it():
    w = WorstInWindow(10)
    assert w.worst(now=100.0) == 0.0
    w.record(5.0, now=100.2)
    w.record(30.0, now=100.9)  # same second: the worst of it is kept
    w.record(7.0, now=101.0)
    assert w.worst(now=101.5) == 30.0
    assert w.worst(now=110.5) == 7.0  # second 100 left the window
    assert w.worst(now=111.5) == 0.0


def test_old_seconds_are_dropped_as_new_ones_come():
    w = WorstInWindow(3)
    for second in range(100):
        w.record(float(second), now=float(second))
    assert len(w._seconds) <= 3
    assert w.worst(now=99.0) == 99.0


def test_both_probes_use_it():
    # One tracker for both lags: the same samples give the same worst.
    loop, tick = LoopLagProbe(), TickLag()
    for now, lag in ((50.0, 12.0), (50.5, 40.0), (55.0, 3.0)):
        loop.record(lag, now=now)
        tick.record(lag, now=now)
    assert isinstance(loop._window, WorstInWindow) and isinstance(tick._window, WorstInWindow)
    assert loop.worst_ms(now=56.0) == tick.worst_ms(now=56.0) == 40.0
    assert loop.worst_ms(now=61.0) == tick.worst_ms(now=61.0) == 3.0
