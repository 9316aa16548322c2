"""Offsets as Spark keeps them, the ranges a read is cut into, and the
per-trigger limits.

A streaming offset is Kafka's per-partition JSON, `{"topic": {"0": 23,
"1": 7}}`: the next offset to read of every partition. Spark writes it to the
query's checkpoint (the offset log) before a micro-batch runs, and a
restarted query resumes from the last one, so it must be canonical: the
same positions always give the same JSON (topics and partitions sorted),
because Spark compares offsets as JSON to decide whether there is new data.

An `OffsetRange` is what one Spark task reads: offsets [start, end) of one
partition, plus the leader the driver last saw, so the executor can go
straight to it.

Pure functions, no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from lograft.protocol.topic_partition import TopicPartition

PartitionOffsets = dict[TopicPartition, int]


def to_spark(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{tp: offset} -> {"topic": {"partition": offset}}, sorted."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_spark(doc: Mapping[str, Mapping[str, int]] | None) -> PartitionOffsets:
    """The inverse of `to_spark` (an offset from Spark's checkpoint)."""
    out: PartitionOffsets = {}
    for topic, parts in (doc or {}).items():
        for p, off in parts.items():
            out[TopicPartition(topic, int(p))] = int(off)
    return out


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition: one Spark task's read."""

    topic: str
    partition: int
    start: int
    end: int
    leader_url: str | None = None  # a hint; the executor follows leader changes itself

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def split_ranges(
    ranges: list[OffsetRange],
    *,
    min_partitions: int | None,
    max_records_per_partition: int | None,
) -> list[OffsetRange]:
    """Cut ranges into more tasks, as Spark's Kafka source does.

    `maxRecordsPerPartition`: a range longer than that is cut into equal
    pieces of at most that many offsets. `minPartitions`: if there are fewer
    ranges than that, each range larger than the ideal size (total /
    minPartitions) is cut into about size / ideal pieces, so the big
    partitions are spread and the small ones stay whole. Empty ranges are
    dropped.
    """
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        cut: list[OffsetRange] = []
        for r in out:
            pieces = math.ceil(r.size / max_records_per_partition)
            cut.extend(_pieces(r, pieces))
        out = cut
    if min_partitions is not None and len(out) < min_partitions:
        total = sum(r.size for r in out)
        ideal = total / min_partitions
        cut = []
        for r in out:
            if r.size > ideal:
                cut.extend(_pieces(r, max(1, round(r.size / ideal))))
            else:
                cut.append(r)
        out = cut
    return out


def _pieces(r: OffsetRange, pieces: int) -> list[OffsetRange]:
    """`pieces` contiguous ranges covering r, sizes differing by at most one."""
    if pieces <= 1:
        return [r]
    bounds = [r.start + (r.size * i) // pieces for i in range(pieces + 1)]
    return [
        OffsetRange(r.topic, r.partition, a, b, r.leader_url)
        for a, b in itertools.pairwise(bounds)
        if b > a
    ]


def cap_total(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], limit: int
) -> PartitionOffsets:
    """`end` moved back so that at most `limit` offsets lie between start and
    end in total, shared in proportion to each partition's lag (Kafka's
    maxOffsetsPerTrigger). Each partition gets floor(limit * lag / total);
    the offsets left over go one each to the partitions with the largest
    remainders, so the total is exactly min(limit, total lag) and a partition
    with a small lag is not starved for ever. Partitions not in `start` keep
    their `end`."""
    lags = {tp: end[tp] - start[tp] for tp in end if tp in start and end[tp] > start[tp]}
    total = sum(lags.values())
    if total <= limit:
        return dict(end)
    shares = {tp: limit * lag / total for tp, lag in lags.items()}
    take = {tp: math.floor(s) for tp, s in shares.items()}
    left = limit - sum(take.values())
    by_remainder = sorted(lags, key=lambda tp: (-(shares[tp] - take[tp]), tp))
    for tp in by_remainder[:left]:
        take[tp] += 1
    out = dict(end)
    for tp in lags:
        out[tp] = start[tp] + min(take[tp], lags[tp])
    return out


def total_lag(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    return sum(max(0, end[tp] - start[tp]) for tp in end if tp in start)
