"""Which leading segments retention may delete: a pure decision.

A segment is deletable only if it is not the active (last) segment and, when
an upper bound is given (the high watermark), every offset in it is below
that bound. Rules, each applied to the oldest segments first, stopping at the
first segment a rule keeps (a log never gets holes in the middle):

- below the log start offset: next offset <= log start offset;
- time: now - largest timestamp > retention_ms. A segment without record
  timestamps (largest timestamp -1: all its batches carry none, or
  compaction emptied it) is judged by its file's last-modified time
  instead, as Kafka's LogSegment.largestTimestamp does; without it such a
  segment would hold back time retention of every later one. With neither
  known it is kept;
- size: while the log minus this segment is still >= retention_bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int
    # The .log file's last-modified time in ms, -1 if unknown; used only
    # when largest_timestamp is -1.
    last_modified_ms: int = -1

    @property
    def retention_timestamp(self) -> int:
        """The time retention measures this segment's age from (-1: none)."""
        return self.largest_timestamp if self.largest_timestamp >= 0 else self.last_modified_ms


def deletable_prefix(
    segments: Sequence[SegmentInfo],
    *,
    now_ms: int,
    log_start_offset: int,
    retention_ms: int,
    retention_bytes: int,
    delete_enabled: bool,
    max_offset: int | None = None,
) -> int:
    """How many segments, from the oldest, may be deleted now."""
    candidates = len(segments) - 1  # never the active segment
    total = sum(s.size_bytes for s in segments)
    count = 0
    while count < candidates:
        seg = segments[count]
        if max_offset is not None and seg.next_offset > max_offset:
            break
        if seg.next_offset <= log_start_offset:
            total -= seg.size_bytes
            count += 1
            continue
        if not delete_enabled:
            break
        newest = seg.retention_timestamp
        expired = retention_ms >= 0 and newest >= 0 and now_ms - newest > retention_ms
        oversize = retention_bytes >= 0 and total - seg.size_bytes >= retention_bytes
        if not (expired or oversize):
            break
        total -= seg.size_bytes
        count += 1
    return count
