"""Leader epoch cache: which leader epoch started at which offset.

Persisted as `leader-epoch-checkpoint` in the partition directory, in Kafka's
format (version 0, count, then `<epoch> <start offset>` per line). Invariants:
epochs strictly increase and start offsets never decrease; after any
truncation of the log the cache holds no entry starting at or beyond the new
log end, and no entry before the log start is needed except the one that
covers the log start.

`end_offset_for(epoch)` answers a follower's OffsetsForLeaderEpoch question
(KIP-101/279): "where did my epoch end on your log?". It returns the largest
epoch <= the requested one and the start offset of the next larger epoch (or
the log end offset when the requested epoch is the latest).

Durability. Every change is written (`write_entries`: two fsyncs) before the
call returns, except `assign_deferred`, which a new leader uses: its entry
changes the cache in memory and marks it dirty, and `flush` (a worker thread)
or the next durable change writes it. The rule that keeps the file safe:
**no batch reaches the log unless the cache state it was appended under is
on disk.** `assign` is the append path's call (the log calls it for every
batch before writing), and it writes a dirty cache even when its own entry
changes nothing, so the first append of a new leader's epoch makes the
deferred entry durable before any batch of that epoch is written (Kafka's
order). Until then the entry describes no data: a crash that loses it leaves
a log whose newest epoch ends at the log end offset, which is exactly what
the lost entry said (`end_offset_for` answers followers the same either
way), so a follower that truncated by the leader's answer is consistent with
the leader's log after the crash too.
"""

from __future__ import annotations

import bisect
import logging
import threading
from pathlib import Path

from lograft.storage import checkpoint

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path, *, persist: bool = True) -> None:
        self.path = directory / FILE_NAME
        self._persist = persist
        self._lock = threading.Lock()
        self._epochs: list[int] = []
        self._starts: list[int] = []
        # The state in memory is ahead of the file (an `assign_deferred`).
        self._dirty = False
        entries = checkpoint.read_entries(self.path, 2) if persist else None
        try:
            parsed = [(int(epoch_s), int(start_s)) for epoch_s, start_s in entries or []]
        except ValueError:
            raise checkpoint.CorruptCheckpointError(
                f"checkpoint {self.path} holds a non-integer epoch or offset"
            ) from None
        if not _well_ordered(parsed):
            raise checkpoint.CorruptCheckpointError(
                f"checkpoint {self.path} breaks the cache's order: epochs must increase "
                "and start offsets must be >= 0 and never decrease"
            )
        for epoch, start in parsed:
            self._epochs.append(epoch)
            self._starts.append(start)

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Set every entry at once and persist them (a rebuild from the log)."""
        if not _well_ordered(entries):
            raise ValueError(f"epoch entries out of order: {entries}")
        with self._lock:
            self._commit([e for e, _s in entries], [s for _e, s in entries])

    def _commit(self, epochs: list[int], starts: list[int]) -> None:
        """Persist, then adopt, a new state: if the checkpoint cannot be
        written (OSError) the cache in memory is unchanged too."""
        if self._persist:
            checkpoint.write_entries(self.path, list(zip(epochs, starts, strict=True)))
        self._epochs, self._starts = epochs, starts
        self._dirty = False

    @property
    def dirty(self) -> bool:
        """The cache holds a change that is not on disk yet."""
        return self._dirty

    def flush(self) -> bool:
        """Write a dirty cache (blocking: call it off the event loop). True if written.

        On OSError the cache stays dirty, so the next durable change or flush
        tries again."""
        with self._lock:
            if not self._dirty:
                return False
            self._commit(self._epochs, self._starts)
            return True

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        with self._lock:
            return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (from an appended batch).

        Kafka's LeaderEpochFileCache.assign exactly: nothing changes unless
        the epoch differs from the latest or starts earlier than it; then
        every entry at the end with an epoch >= `epoch` or a start offset >=
        `start_offset` is removed (the log was rewritten from there) before
        the new entry is added. A negative epoch (a batch stamped with none)
        is ignored.
        """
        with self._lock:
            new = self._assigned(epoch, start_offset)
            if new is not None:
                self._commit(*new)
            elif self._dirty:
                # A deferred entry: this batch may belong to its epoch, so it
                # must be on disk before the batch is written.
                self._commit(self._epochs, self._starts)

    def assign_deferred(self, epoch: int, start_offset: int) -> None:
        """`assign` in memory only: the file is written by `flush` or by the
        next durable change. For a new leader's epoch, which describes no
        batch until the first append (whose `assign` writes it first)."""
        with self._lock:
            new = self._assigned(epoch, start_offset)
            if new is not None:
                self._epochs, self._starts = new
                self._dirty = self._persist

    def _assigned(self, epoch: int, start_offset: int) -> tuple[list[int], list[int]] | None:
        """The entries after assigning, or None when nothing changes. Caller holds the lock."""
        if epoch < 0:
            return None
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return None
        epochs, starts = list(self._epochs), list(self._starts)
        removed: list[tuple[int, int]] = []
        while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
            removed.append((epochs.pop(), starts.pop()))
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            log.warning(
                "%s: epoch %d at offset %d replaces entries %s",
                self.path,
                epoch,
                start_offset,
                removed,
            )
        epochs.append(epoch)
        starts.append(start_offset)
        return epochs, starts

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= epoch, end offset of that epoch)."""
        with self._lock:
            if epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if epoch == self._epochs[-1]:
                return epoch, log_end_offset
            higher = bisect.bisect_right(self._epochs, epoch)
            if higher == len(self._epochs):
                # Larger than any epoch we know of.
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                # Smaller than any epoch we know of: it ended where ours began.
                return epoch, self._starts[0]
            return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that was leading when `offset` was written."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after end_offset (the log was truncated)."""
        with self._lock:
            keep = bisect.bisect_left(self._starts, end_offset)
            if keep < len(self._starts):
                self._commit(self._epochs[:keep], self._starts[:keep])

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at start_offset: drop entries wholly before it and
        move the one that covers it up to start_offset."""
        with self._lock:
            i = bisect.bisect_right(self._starts, start_offset) - 1
            if i < 0 or (i == 0 and self._starts[0] == start_offset):
                return
            self._commit(self._epochs[i:], [start_offset, *self._starts[i + 1 :]])

    def clear(self) -> None:
        with self._lock:
            self._commit([], [])


def _well_ordered(entries: list[tuple[int, int]]) -> bool:
    prev_epoch, prev_start = -1, 0
    for epoch, start in entries:
        if epoch <= prev_epoch or start < prev_start:
            return False
        prev_epoch, prev_start = epoch, start
    return True
