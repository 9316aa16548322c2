"""The worst value of the last few seconds: a leaf, importing nothing of ours.

Both lag probes keep it: the event loop's (node/loop_lag.py) and the Raft
thread's ticks (quorum/raft/tick_lag.py). `quorum` may not import `node`, so
it lives here, below both.

Kept as one (whole second of time.monotonic(), worst value in it) per second
with a sample, oldest first, so memory is bounded by the window's seconds.
Written by one thread; `worst` may be read from any other (it copies the
deque before it walks it).
"""

from __future__ import annotations

import time
from collections import deque

__all__ = ["WorstInWindow"]


class WorstInWindow:
    def __init__(self, window_s: int) -> None:
        self.window_s = window_s
        self._seconds: deque[tuple[int, float]] = deque()

    def record(self, value: float, now: float | None = None) -> None:
        second = int(time.monotonic() if now is None else now)
        if self._seconds and self._seconds[-1][0] == second:
            if value > self._seconds[-1][1]:
                self._seconds[-1] = (second, value)
        else:
            self._seconds.append((second, value))
        while self._seconds and self._seconds[0][0] <= second - self.window_s:
            self._seconds.popleft()

    def worst(self, now: float | None = None) -> float:
        """The worst value of the last `window_s` seconds (0.0 with none)."""
        since = int(time.monotonic() if now is None else now) - self.window_s
        return max((v for second, v in list(self._seconds) if second > since), default=0.0)
