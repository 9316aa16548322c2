"""How late the Raft thread comes back to tick: the pauses Raft itself sees.

The Raft thread polls its sockets for up to `tick_interval_ms` per tick. A
tick that returns later than that was held up: by the GIL (another thread,
usually the node's event loop, kept it), by its own fsync or state-machine
apply, or by the machine. A follower that is held up this long misses its
leader's heartbeats as if they had not been sent, and a leader holds its own
back; past `election_timeout_min_ms` the quorum elects again. The node's
`/healthz` reports the latest lag and the worst of the last `WINDOW_S`
seconds (`raft_tick_lag_ms`); `scripts/soak_quorum.py` reads it.

Written on the Raft thread only; read from any thread (a tuple swapped by
reference, int and float assignments are atomic).
"""

from __future__ import annotations

from lograft.worst_window import WorstInWindow

WINDOW_S = 10
# Upper bounds (ms) of the lag counters kept since start; the last counts the rest.
BOUNDS_MS = (10, 50, 100, 200, 400, 1000, 2000)


class TickLag:
    def __init__(self) -> None:
        self.last_ms = 0.0
        self.max_ms = 0.0  # since start
        # Ticks whose lag fell under each bound of BOUNDS_MS (plus the rest).
        self.counts: tuple[int, ...] = (0,) * (len(BOUNDS_MS) + 1)
        self._window = WorstInWindow(WINDOW_S)

    def record(self, lag_ms: float, now: float | None = None) -> None:
        lag_ms = max(lag_ms, 0.0)
        self.last_ms = lag_ms
        self.max_ms = max(self.max_ms, lag_ms)
        slot = next((i for i, bound in enumerate(BOUNDS_MS) if lag_ms < bound), len(BOUNDS_MS))
        counts = list(self.counts)
        counts[slot] += 1
        self.counts = tuple(counts)
        self._window.record(lag_ms, now)

    def worst_ms(self, now: float | None = None) -> float:
        """The worst lag of the last WINDOW_S seconds."""
        return self._window.worst(now)

    def snapshot(self) -> dict[str, object]:
        """For /healthz: latest, worst of the window, worst since start, and counts
        per bucket (`under_<bound>` ms, and `over_<last bound>`)."""
        counts = self.counts
        buckets = {f"under_{b}": counts[i] for i, b in enumerate(BOUNDS_MS)}
        buckets[f"over_{BOUNDS_MS[-1]}"] = counts[-1]
        return {
            "last": round(self.last_ms, 1),
            "max": round(self.worst_ms(), 1),
            "window_s": WINDOW_S,
            "max_since_start": round(self.max_ms, 1),
            "ticks": buckets,
        }


__all__ = ["TickLag"]
