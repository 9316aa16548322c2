"""Idempotent producer state of one partition, as Kafka's ProducerStateManager.

Per producer id the leader keeps the producer epoch and the sequence and offset
ranges of that producer's last `NUM_BATCHES_TO_RETAIN` (5) batches in this
partition, all of the current epoch. An append of a batch carrying a producer
id goes in two steps around the log append:

1. `validate(producer_id, epoch, base_sequence, last_sequence)` BEFORE the
   append. In Kafka's order:
   - same epoch and exactly the sequence range of one of the cached batches:
     `Duplicate(first_offset, last_offset)`, the retry's ORIGINAL offsets;
     the caller answers with them and appends nothing;
   - epoch lower than the producer's: `InvalidProducerEpochError`;
   - epoch higher than the producer's: the new epoch must start at sequence
     0, else `OutOfOrderSequenceError`;
   - same epoch: `base_sequence` must follow the last cached batch's last
     sequence (after Int32 max comes 0), else `OutOfOrderSequenceError`;
   - unknown producer id: accepted with any sequence. This is Kafka's
     behaviour since 2.5 (KIP-360: "if there is no current producer epoch,
     possibly because all producer records have been deleted due to retention,
     accept writes with any sequence number"). With
     `unknown_producer_requires_sequence_zero=True` a nonzero sequence from an
     unknown producer gets `UnknownProducerIdError` instead (pre-2.5 Kafka),
     which catches retries of batches whose state was evicted, at the price of
     failing producers whose state merely expired.
   `validate` never changes state.
2. `record(...)` AFTER the append, with the offsets the batch got.

Validation is against the state after the last `record`, so a request holding
several batches of one producer must validate, append and record them one at a
time, or accept one idempotent batch per partition per request as Kafka's
produce v3+ does.

Invariants kept (asserted in `record`): per producer, cached batches are of one
epoch, at most five, in increasing offset order, each with
`last_offset - first_offset == last_sequence - first_sequence (mod 2**31)`.

Rebuilding: `rebuild_from_batches` replays batch headers in log order with no
validation (Kafka's REPLICATION origin) and yields the state live appends would
have built from the same log; `truncate_to` makes the state match a log cut at
an offset; `evict_below_log_start` forgets producers whose data retention
removed, as Kafka does, so that live state and a rebuild agree.

Replayed and replicated batches (`record_batch`) are never refused: a replica
must take whatever its leader's log holds, and one batch must not stop a log
from opening or a follower from replicating. A batch whose producer fields no
state can hold (a producer id below -1, an epoch outside 0..32767, a sequence
outside 0..2^31-1: a leader before the client rules of
lograft.storage.produce_rules let such batches in) is skipped for producer
state, counted in `unusable_batches`, and logged once per partition.

Bounded memory, two limits:
- `producer_ids_max` producer ids per partition (default 256). Past it the
  least recently recorded producer is forgotten. Consequence: it becomes
  unknown, so its next batch is accepted with any sequence: a retry of one of
  its last five batches is appended a second time and a sequence gap goes
  unnoticed (or, in strict mode, it gets UNKNOWN_PRODUCER_ID). Its state then
  ends at that batch, so when the retry was of an older batch than its newest,
  its next new batch is OUT_OF_ORDER_SEQUENCE_NUMBER. Kafka behaves alike
  (ProducerAppendInfo.checkSequence: an unknown producer's batch is taken
  whatever its sequence and becomes the entry's last; later batches must
  follow it), and its idempotent producer answers that error by bumping its
  epoch, which restarts sequences at 0 (TransactionManager.handleFailedBatch);
  lograft's client takes a new producer id after any failed sequenced
  batch (lograft/client/idempotence.py). Kafka has no
  such count limit per partition (KIP-936 throttles id creation instead); a
  Python dict of entries needs one.
- `producer_id_expiration_ms` (Kafka's `producer.id.expiration.ms`, default one
  day): `remove_expired(now_ms)` forgets producers whose last batch timestamp
  is that old, with the same consequence. As in Kafka, the timestamp is the
  batch's max timestamp (what a rebuild from the log sees), not the wall
  clock at append.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from lograft.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
# About 1.8 KB per producer with five cached batches (tracemalloc, CPython
# 3.11), so at most ~460 KB per partition; a broker-wide budget across its
# partitions would be the next step if 2,000 busy partitions need it.
PRODUCER_IDS_MAX = 256
PRODUCER_ID_EXPIRATION_MS = 86_400_000

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 0x7FFFFFFF
INT16_MAX = 0x7FFF
_CONTROL_BIT = 0x20  # RecordBatch v2 attributes: control batch (transaction marker)


def sequence_after(base_sequence: int, delta: int) -> int:
    """Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap at Int32 max to 0."""
    return (base_sequence + delta) & INT32_MAX


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Sequence and offset range of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """A read-only copy of one producer's state."""

    producer_id: int
    epoch: int
    batches: tuple[BatchMetadata, ...]
    last_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Ok:
    """Not a duplicate and in sequence: append it, then `record` it."""


OK = Ok()


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: answer with these offsets."""

    first_offset: int
    last_offset: int


ValidationResult = Ok | Duplicate


class ProducerBatchInfo(Protocol):
    """The header fields a rebuild needs; `lograft.protocol.batch.BatchHeader` has them."""

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def attributes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """A plain `ProducerBatchInfo`, for callers that have no parsed header."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset_delta: int
    max_timestamp: int = -1
    attributes: int = 0


class _Entry:
    __slots__ = ("batches", "epoch", "last_timestamp_ms")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp_ms = -1


class ProducerStateManager:
    """The idempotent producer state of one partition. Not thread-safe: the
    partition's owner serialises validate / append / record."""

    def __init__(
        self,
        *,
        producer_ids_max: int = PRODUCER_IDS_MAX,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        unknown_producer_requires_sequence_zero: bool = False,
        owner: str = "",
    ) -> None:
        if producer_ids_max < 1:
            raise ValueError(f"producer_ids_max must be >= 1, got {producer_ids_max}")
        if producer_id_expiration_ms < 1:
            raise ValueError(
                f"producer_id_expiration_ms must be >= 1, got {producer_id_expiration_ms}"
            )
        self.producer_ids_max = producer_ids_max
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.unknown_producer_requires_sequence_zero = unknown_producer_requires_sequence_zero
        # Insertion order is recency of `record`: the first key is the LRU victim.
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self.evicted_count = 0  # producers dropped by producer_ids_max, for metrics
        # Whose state this is (a partition's name), for log lines.
        self.owner = owner
        # Replayed or replicated batches skipped because their producer fields
        # are unusable (see the module docstring); warned about once.
        self.unusable_batches = 0
        self._warned_unusable = False

    # -- reading -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._entries

    def producer(self, producer_id: int) -> ProducerSnapshot | None:
        entry = self._entries.get(producer_id)
        return None if entry is None else _snapshot(producer_id, entry)

    def snapshot(self) -> dict[int, ProducerSnapshot]:
        return {pid: _snapshot(pid, e) for pid, e in self._entries.items()}

    # -- before the append -------------------------------------------------------

    def validate(
        self, producer_id: int, epoch: int, base_sequence: int, last_sequence: int
    ) -> ValidationResult:
        """Decide on a batch before it is appended; raises on a refusal."""
        if producer_id == NO_PRODUCER_ID:
            return OK  # not an idempotent batch: nothing to check
        _check_fields(producer_id, epoch, base_sequence, last_sequence)
        entry = self._entries.get(producer_id)
        if entry is None:
            if self.unknown_producer_requires_sequence_zero and base_sequence != 0:
                raise UnknownProducerIdError(
                    f"producer {producer_id} is unknown to this partition and sent "
                    f"sequence {base_sequence}, not 0",
                    producer_id=producer_id,
                    sequence=base_sequence,
                )
            return OK
        # Kafka looks for a duplicate before any other check: a retry is answered
        # even if the producer has since moved on in sequence.
        if epoch == entry.epoch:
            for b in entry.batches:
                if b.first_seq == base_sequence and b.last_seq == last_sequence:
                    return Duplicate(b.first_offset, b.last_offset)
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} sent epoch {epoch}, older than its epoch {entry.epoch}",
                producer_id=producer_id,
                epoch=epoch,
                current_epoch=entry.epoch,
            )
        if epoch > entry.epoch:
            if base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} began epoch {epoch} at sequence "
                    f"{base_sequence}; a new epoch starts at 0",
                    producer_id=producer_id,
                    epoch=epoch,
                    sequence=base_sequence,
                    current_epoch=entry.epoch,
                )
            return OK
        expected = sequence_after(entry.batches[-1].last_seq, 1)
        if base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} sent sequence {base_sequence}, expected {expected}",
                producer_id=producer_id,
                epoch=epoch,
                sequence=base_sequence,
                expected_sequence=expected,
            )
        return OK

    # -- after the append --------------------------------------------------------

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        last_sequence: int,
        first_offset: int,
        last_offset: int,
        timestamp_ms: int,
    ) -> int | None:
        """Remember an appended batch. Returns the producer id evicted to stay
        within `producer_ids_max`, if any."""
        if producer_id == NO_PRODUCER_ID:
            return None
        _check_fields(producer_id, epoch, base_sequence, last_sequence)
        assert 0 <= first_offset <= last_offset, (first_offset, last_offset)
        assert (last_sequence - base_sequence) & INT32_MAX == last_offset - first_offset, (
            "sequence span must equal offset span",
            base_sequence,
            last_sequence,
            first_offset,
            last_offset,
        )
        evicted = None
        entry = self._entries.get(producer_id)
        if entry is None:
            if len(self._entries) >= self.producer_ids_max:
                evicted, _ = self._entries.popitem(last=False)
                self.evicted_count += 1
            entry = _Entry(epoch)
            self._entries[producer_id] = entry
        else:
            self._entries.move_to_end(producer_id)
            assert first_offset > entry.batches[-1].last_offset, (
                "a producer's batches must be recorded in offset order",
                producer_id,
                first_offset,
                entry.batches[-1].last_offset,
            )
        if epoch != entry.epoch:
            # Kafka's maybeUpdateProducerEpoch: another epoch's batches can
            # never be retried, so they are dropped. Replay may meet a lower
            # epoch (unclean history) and follows the log, as Kafka does.
            entry.batches.clear()
            entry.epoch = epoch
        entry.batches.append(BatchMetadata(base_sequence, last_sequence, first_offset, last_offset))
        entry.last_timestamp_ms = timestamp_ms
        return evicted

    def record_batch(self, batch: ProducerBatchInfo) -> int | None:
        """`record` from a batch header that already carries its offsets (a
        replayed or replicated batch: never refused, see the module docstring)."""
        if batch.producer_id == NO_PRODUCER_ID or batch.attributes & _CONTROL_BIT:
            # Control batches (transaction markers) carry no data sequences;
            # lograft has no transactions, so they do not touch this state.
            return None
        problem = _unusable(batch)
        if problem is not None:
            self._skip_unusable(batch, problem)
            return None
        return self.record(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            sequence_after(batch.base_sequence, batch.last_offset_delta),
            batch.base_offset,
            batch.base_offset + batch.last_offset_delta,
            batch.max_timestamp,
        )

    def _skip_unusable(self, batch: ProducerBatchInfo, problem: str) -> None:
        self.unusable_batches += 1
        if self._warned_unusable:
            return
        self._warned_unusable = True
        log.warning(
            "%s: the batch at offset %d has %s; no producer state can hold it, so it is "
            "skipped for idempotence (its records stay in the log). Later such batches "
            "are counted, not logged",
            self.owner or "producer state",
            batch.base_offset,
            problem,
        )

    # -- rebuilding and forgetting ---------------------------------------------------

    def rebuild_from_batches(
        self, batches: Iterable[ProducerBatchInfo], now_ms: int | None = None
    ) -> None:
        """Replace the state with the one the log's batch headers (in log
        order) imply; with `now_ms`, drop producers already expired then."""
        self._entries.clear()
        self.unusable_batches = 0  # counted again by the replay
        for batch in batches:
            self.record_batch(batch)
        if now_ms is not None:
            self.remove_expired(now_ms)

    def truncate_to(
        self,
        offset: int,
        batches: Iterable[ProducerBatchInfo],
        now_ms: int | None = None,
    ) -> bool:
        """Make the state match the log cut to end before `offset`.

        `batches` are the log's headers in order (those at or after `offset`
        are ignored, so the log from before the cut will do); pass a generator:
        it is only read when a cached batch lies at or after `offset`. When
        none does, no producer's last five batches change, so nothing is
        rebuilt. Returns whether a rebuild happened.
        """
        if not any(e.batches[-1].last_offset >= offset for e in self._entries.values()):
            return False
        self.rebuild_from_batches(_below(batches, offset), now_ms)
        return True

    def evict_below_log_start(self, log_start_offset: int) -> list[int]:
        """Forget producers whose every cached batch retention has removed
        (Kafka's evictUnretainedProducers), so that the state equals a rebuild
        from the remaining log."""
        gone = [
            pid for pid, e in self._entries.items() if e.batches[-1].last_offset < log_start_offset
        ]
        for pid in gone:
            del self._entries[pid]
        return gone

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers whose last batch is `producer_id_expiration_ms` old."""
        limit = self.producer_id_expiration_ms
        gone = [pid for pid, e in self._entries.items() if now_ms - e.last_timestamp_ms >= limit]
        for pid in gone:
            del self._entries[pid]
        return gone

    def clear(self) -> None:
        self._entries.clear()


def _below(batches: Iterable[ProducerBatchInfo], offset: int) -> Iterator[ProducerBatchInfo]:
    for b in batches:
        if b.base_offset + b.last_offset_delta >= offset:
            return
        yield b


def _snapshot(producer_id: int, entry: _Entry) -> ProducerSnapshot:
    return ProducerSnapshot(producer_id, entry.epoch, tuple(entry.batches), entry.last_timestamp_ms)


def _unusable(batch: ProducerBatchInfo) -> str | None:
    """Why a batch's producer fields cannot enter the state, or None if they can."""
    if batch.producer_id < 0:
        return f"producer id {batch.producer_id}"
    if not 0 <= batch.producer_epoch <= INT16_MAX:
        return f"producer {batch.producer_id} with producer epoch {batch.producer_epoch}"
    if not 0 <= batch.base_sequence <= INT32_MAX:
        return f"producer {batch.producer_id} with base sequence {batch.base_sequence}"
    if batch.base_offset < 0 or batch.last_offset_delta < 0:
        return f"offsets {batch.base_offset}+{batch.last_offset_delta}"
    return None


def _check_fields(producer_id: int, epoch: int, base_sequence: int, last_sequence: int) -> None:
    # A batch that claims a producer id must carry an epoch and sequences;
    # Kafka would answer such a batch with an out-of-order error, this names it.
    if producer_id < 0:
        raise InvalidRecordError(f"invalid producer id {producer_id}", producer_id=producer_id)
    if not 0 <= epoch <= INT16_MAX:
        raise InvalidRecordError(
            f"producer {producer_id} sent producer epoch {epoch}", producer_id=producer_id
        )
    if not (0 <= base_sequence <= INT32_MAX and 0 <= last_sequence <= INT32_MAX):
        raise InvalidRecordError(
            f"producer {producer_id} sent sequences {base_sequence}..{last_sequence}",
            producer_id=producer_id,
        )
