"""Bounded per-partition and per-group series: the largest values first, the rest counted.

An operator looks for the biggest log, the most lagging replica or group:
those are kept when a node has more series than its cap
(`[metrics] partition_series_max`, `group_series_max`), and
`lograft_metrics_series_dropped{metric}` says how many were left out, so a
dashboard can show that the list is cut.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import TypeVar

K = TypeVar("K")

__all__ = ["DroppedSeries", "largest"]


def largest(values: Iterable[tuple[float, K]], cap: int) -> tuple[list[tuple[float, K]], int]:
    """At most `cap` of (value, key), the largest values first, and how many were left out."""
    items = list(values)
    if len(items) <= cap:
        return items, 0
    return heapq.nlargest(cap, items, key=lambda item: item[0]), len(items) - cap


class DroppedSeries:
    """Series each metric family left out at one scrape."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, metric: str, count: int) -> None:
        self.counts[metric] = self.counts.get(metric, 0) + count

    def items(self) -> Sequence[tuple[str, int]]:
        return sorted(self.counts.items())
