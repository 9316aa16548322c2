"""Histogram buckets cheap enough for the request path: a leaf, importing nothing of ours.

`Buckets.observe` is one `bisect` and two additions on plain lists and
floats, about 0.3 us, against 2 to 3 us for prometheus-client's `Histogram`
(a lock and a `MutexValue` per bucket). The node's request metrics observe
four of them per request (api/metrics/request_metrics.py), so the
difference is what keeps metrics within a few percent of produce
throughput (docs/benchmarks.md, "Metrics"). The exposition is still
prometheus-client's: a collector turns `snapshot()` into a
`HistogramMetricFamily` at scrape time.

Invariants: `counts[i]` counts the observations `v` with
`bounds[i-1] < v <= bounds[i]` (Prometheus' `le`), the last one those above
every bound (`+Inf`); `bounds` is strictly increasing; counts and `total`
only grow. `Buckets` is for one thread (the event loop); `LockedBuckets`
for observations from several (storage threads' fsyncs).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

__all__ = ["LATENCY_BOUNDS_S", "Buckets", "BucketsSnapshot", "LockedBuckets"]

# Request and fsync latencies, seconds: 0.5 ms to 30 s (Kafka's request
# metrics report ms; Prometheus wants base units).
LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


@dataclass(frozen=True, slots=True)
class BucketsSnapshot:
    """Cumulative counts per upper bound, `+Inf` last, and the sum."""

    buckets: tuple[tuple[str, float], ...]
    total: float

    @property
    def count(self) -> float:
        return self.buckets[-1][1]


class Buckets:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS_S) -> None:
        if not bounds or any(a >= b for a, b in pairwise(bounds)):
            raise ValueError(f"bounds must be strictly increasing and not empty: {bounds}")
        self.bounds = list(bounds)
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> BucketsSnapshot:
        counts = list(self.counts)
        total = self.total
        return _cumulative(self.bounds, counts, total)


class LockedBuckets(Buckets):
    """`Buckets` observed from several threads."""

    __slots__ = ("_lock",)

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS_S) -> None:
        super().__init__(bounds)
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self.counts[bisect_left(self.bounds, value)] += 1
            self.total += value

    def snapshot(self) -> BucketsSnapshot:
        with self._lock:
            counts = list(self.counts)
            total = self.total
        return _cumulative(self.bounds, counts, total)


def _cumulative(bounds: list[float], counts: list[int], total: float) -> BucketsSnapshot:
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(bounds, counts, strict=False):
        running += count
        out.append((_le(bound), float(running)))
    running += counts[-1]
    out.append(("+Inf", float(running)))
    return BucketsSnapshot(tuple(out), total)


def _le(bound: float) -> str:
    # prometheus-client's own rendering of a bound (floatToGoString): 1.0 -> "1.0".
    return repr(float(bound))
