"""How late the node's event loop runs a timer: its stalls as every task sees them.

A task sleeps `INTERVAL_MS` (or the probe's `interval_ms`) over and over and
records how much later than asked it woke. Anything that holds the loop (a
handler doing CPU work inline, a blocking call, the GIL held by another
thread) shows up here, whatever caused it. `/healthz` reports the latest lag
and the worst of the last `WINDOW_S` seconds (`loop_lag_ms`); a stall of
`WARN_MS` or more is logged at WARNING. scripts/bench_stall.py reads it after
each attack it runs. With metrics on, every sample also goes to a histogram of
seconds (`lograft_event_loop_lag_seconds`, api/metrics/node_collector.py).
"""

from __future__ import annotations

import asyncio
import logging

from lograft.histogram import Buckets
from lograft.worst_window import WorstInWindow

log = logging.getLogger(__name__)

INTERVAL_MS = 20
WINDOW_S = 10
WARN_MS = 1000


class LoopLagProbe:
    def __init__(
        self,
        histogram: Buckets | None = None,
        name: str = "event loop",
        interval_ms: int = INTERVAL_MS,
    ) -> None:
        # How often the probe wakes, ms: a stall is measured to within this.
        self.interval_ms = interval_ms
        # Every sample, in seconds (None: not kept).
        self.histogram = histogram
        # Which loop, in the stall warning (the main one, or the controller's).
        self.name = name
        self.last_ms = 0.0
        self._window = WorstInWindow(WINDOW_S)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.interval_ms / 1000
        while True:
            start = loop.time()
            await asyncio.sleep(interval)  # the probe itself: how late does this wake?
            self.record((loop.time() - start - interval) * 1000)

    def record(self, lag_ms: float, now: float | None = None) -> None:
        lag_ms = max(lag_ms, 0.0)
        self.last_ms = lag_ms
        if self.histogram is not None:
            self.histogram.observe(lag_ms / 1000)
        self._window.record(lag_ms, now)
        if lag_ms >= WARN_MS:
            log.warning("%s stalled for %d ms", self.name, lag_ms)

    def worst_ms(self, now: float | None = None) -> float:
        """The worst lag of the last WINDOW_S seconds."""
        return self._window.worst(now)

    def snapshot(self) -> dict[str, float]:
        return {
            "last": round(self.last_ms, 1),
            "max": round(self.worst_ms(), 1),
            "window_s": WINDOW_S,
        }


__all__ = ["LoopLagProbe"]
