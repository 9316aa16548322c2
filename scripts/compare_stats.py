"""The pure parts of scripts/bench_compare.py: percentiles, medians, ratios, the table.

No I/O and no third-party imports, so tests/unit/test_bench_compare.py checks
them without starting anything.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (0 < q <= 100); None for no values.
    An infinite value (a record that never arrived) sorts last, so a
    percentile that falls on it is infinite."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latencies_from_schedule(
    start: float, rate: float, count: int, received: Mapping[int, float]
) -> list[float]:
    """Latency of record i, seconds, from its scheduled send time start + i/rate
    (not from when the sender got round to it: no coordinated omission) to
    `received[i]`; a record never received counts as infinite."""
    return [received.get(i, math.inf) - (start + i / rate) for i in range(count)]


def failover_seconds(
    pairs: Sequence[Sequence[float]],
    killed_at: float,
    partitions: Collection[int] | None = None,
) -> float | None:
    """From (sent, acked) wall-clock pairs of a producer's records: seconds from
    the kill to the first ack of a record sent at or after it (records in flight
    at the kill may be acked by the old leader's last breath; they do not count).
    A third item names the record's partition: with `partitions` given, only
    those records count (the ones the killed node led). None when no record
    sent after the kill was acked."""
    acks = [
        p[1]
        for p in pairs
        if p[0] >= killed_at and (partitions is None or len(p) < 3 or p[2] in partitions)
    ]
    return min(acks) - killed_at if acks else None


@dataclass(frozen=True)
class Spread:
    """The median of a cell's rounds with their minimum and maximum."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        finite = [v for v in values if v is not None]
        if not finite:
            return None
        return cls(statistics.median(finite), min(finite), max(finite))


def ratio(ours: Spread | None, theirs: Spread | None) -> float | None:
    """ours.median / theirs.median (lograft ÷ Kafka); None when either is missing,
    zero or infinite."""
    if ours is None or theirs is None or theirs.median == 0:
        return None
    if math.isinf(ours.median) or math.isinf(theirs.median):
        return None
    return ours.median / theirs.median


def fmt_number(v: float) -> str:
    """Up to 3 significant figures (no trailing zeros), k/M for large values;
    "lost" for infinite."""
    if math.isinf(v):
        return "lost"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def fmt_spread(s: Spread | None) -> str:
    if s is None:
        return "—"
    if s.low == s.high:
        return fmt_number(s.median)
    return f"{fmt_number(s.median)} ({fmt_number(s.low)}-{fmt_number(s.high)})"


def fmt_ratio(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}"


def render_table(
    rows: Sequence[str],
    systems: Sequence[str],
    cells: Mapping[tuple[str, str], Spread | None],
    ratios: Sequence[tuple[str, str, str]],
) -> str:
    """A Markdown table: one row per figure, a column per system (median
    (min-max)), then a column per (heading, ours, theirs) ratio of medians."""
    head = ["figure", *systems, *(h for h, _, _ in ratios)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        out = [row]
        out += [fmt_spread(cells.get((row, s))) for s in systems]
        out += [fmt_ratio(ratio(cells.get((row, a)), cells.get((row, b)))) for _, a, b in ratios]
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines)
