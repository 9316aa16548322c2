"""How late the node's event loop runs a timer: its stalls as every task sees them.

A task sleeps over and over and records how much later than asked it woke.
Anything that holds the loop (a handler doing CPU work inline, a blocking
call, the GIL held by another thread) shows up here, whatever caused it.
`/healthz` reports the latest lag and the worst of the last `WINDOW_S`
seconds (`loop_lag_ms`, with the interval the probe sleeps now); a stall of
`WARN_MS` or more is logged at WARNING. scripts/bench_stall.py reads it after
each attack it runs. With metrics on, every sample also goes to a histogram of
seconds (`lograft_event_loop_lag_seconds`, api/metrics/node_collector.py).

The probe sleeps `INTERVAL_MS` (or its `interval_ms`) while the loop works.
While the loop idles it backs off (issue 14: at 50 wake-ups a second the
probe was over a third of an idle 2,000-partition node's event-loop time, and
~1.2 % of a core on its own): after a sleep in which the loop's thread used
less than `IDLE_CPU_FRACTION` of a core and the timer was not late by
`INTERVAL_MS` or more, the next sleep is twice as long, up to
`IDLE_INTERVAL_MS_MAX`; any busier or late sleep returns it to the short
interval. So a loop that works is sampled as before, and an idle one every
`IDLE_INTERVAL_MS_MAX` at most: a stall that starts on an idle loop is
measured only if the probe's timer falls due inside it (the probability is
the stall's length over the interval), and the histogram holds fewer samples
of idle time than of busy time.
"""

from __future__ import annotations

import asyncio
import logging
import time

from lograft.histogram import Buckets
from lograft.worst_window import WorstInWindow

log = logging.getLogger(__name__)

# The probe's sleep while the loop works, ms: a stall is measured to within this.
INTERVAL_MS = 20
# The longest sleep it backs off to while the loop idles, ms.
IDLE_INTERVAL_MS_MAX = 320
# Below this share of a core (0-1) used by the loop's thread over a sleep, the
# loop counts as idle: an idle 2,000-partition node's event-loop thread uses
# 0.8-1.6 % of a core, one under scripts/bench_scale.py's load 15-22 %
# (docs/benchmarks.md, "Scale: 2,000 partitions").
IDLE_CPU_FRACTION = 0.04
WINDOW_S = 10
WARN_MS = 1000


def next_interval_ms(
    current_ms: float,
    base_ms: float,
    max_ms: float,
    cpu_fraction: float,
    lag_ms: float,
) -> float:
    """The probe's next sleep, ms: twice `current_ms` (at most `max_ms`) after an
    idle sleep, `base_ms` after a busy one or one that woke `base_ms` late."""
    if cpu_fraction >= IDLE_CPU_FRACTION or lag_ms >= base_ms:
        return base_ms
    return min(current_ms * 2, max(max_ms, base_ms))


class LoopLagProbe:
    def __init__(
        self,
        histogram: Buckets | None = None,
        name: str = "event loop",
        interval_ms: int = INTERVAL_MS,
        idle_interval_ms_max: int = IDLE_INTERVAL_MS_MAX,
    ) -> None:
        # How often the probe wakes while the loop works, ms: a stall is
        # measured to within this.
        self.interval_ms = interval_ms
        # How long it sleeps at most while the loop idles, ms.
        self.idle_interval_ms_max = idle_interval_ms_max
        # The sleep the probe takes now, ms (interval_ms .. idle_interval_ms_max).
        self.current_interval_ms: float = interval_ms
        # Every sample, in seconds (None: not kept).
        self.histogram = histogram
        # Which loop, in the stall warning (the main one, or the controller's).
        self.name = name
        self.last_ms = 0.0
        self._window = WorstInWindow(WINDOW_S)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            interval = self.current_interval_ms / 1000
            start = loop.time()
            cpu_start = time.thread_time()  # this loop's thread: its own work only
            await asyncio.sleep(interval)  # the probe itself: how late does this wake?
            elapsed = loop.time() - start
            lag_ms = (elapsed - interval) * 1000
            self.record(lag_ms)
            cpu_fraction = (time.thread_time() - cpu_start) / elapsed if elapsed > 0 else 1.0
            self.current_interval_ms = next_interval_ms(
                self.current_interval_ms,
                self.interval_ms,
                self.idle_interval_ms_max,
                cpu_fraction,
                lag_ms,
            )

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
            "interval_ms": round(self.current_interval_ms),
        }


__all__ = ["LoopLagProbe", "next_interval_ms"]
