"""Producer id and per-partition sequence numbers of an idempotent producer.

The producer id comes from `POST /v1/producers` (epoch 0). Each partition's
batches carry sequences 0, n0, n0+n1, ... (the first record's number; the
count wraps at 2**31 as Kafka's does).

Invariants:
- A batch's (producer id, epoch, base sequence) are assigned once, at its
  first send, and never change: retries resend the same bytes, so the broker
  answers a retry of an appended batch with `"duplicate": true` and the
  original offsets.
- With one batch in flight per partition, sequences are assigned in send
  order and each partition's sequences are dense.
- After a batch with a sequence fails, nobody knows whether the broker
  appended it, so neither reusing nor skipping its sequence is safe (reuse
  could be taken for a duplicate, a skip is OUT_OF_ORDER_SEQUENCE_NUMBER).
  The producer then takes a new producer id; every partition starts again at
  sequence 0 under it with its next batch (the broker accepts any sequence
  from an id it has not seen). Batches already sealed keep their old id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lograft.protocol.topic_partition import TopicPartition

SEQUENCE_MASK = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    producer_id: int
    producer_epoch: int
    generation: int  # bumps with every new id this producer takes


class IdempotenceState:
    def __init__(self, fetch_identity: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._fetch = fetch_identity
        self._identity: ProducerIdentity | None = None
        self._generation = 0
        self._lock = asyncio.Lock()
        # tp -> (generation the sequence belongs to, next sequence)
        self._next: dict[TopicPartition, tuple[int, int]] = {}
        self.resets = 0

    @property
    def identity(self) -> ProducerIdentity | None:
        return self._identity

    async def ensure_identity(self) -> ProducerIdentity:
        async with self._lock:
            if self._identity is None:
                pid, epoch = await self._fetch()
                self._generation += 1
                self._identity = ProducerIdentity(pid, epoch, self._generation)
            return self._identity

    def assign(self, tp: TopicPartition, record_count: int) -> tuple[int, int, int]:
        """(producer id, epoch, base sequence) for the partition's next batch."""
        ident = self._identity
        assert ident is not None, "ensure_identity() first"
        gen, seq = self._next.get(tp, (ident.generation, 0))
        if gen != ident.generation:
            seq = 0
        self._next[tp] = (ident.generation, (seq + record_count) & SEQUENCE_MASK)
        return ident.producer_id, ident.producer_epoch, seq

    def on_sequenced_batch_failed(self, producer_id: int) -> None:
        """A sealed batch of `producer_id` failed: take a new id before the next
        sequence (unless that already happened for this id)."""
        if self._identity is not None and self._identity.producer_id == producer_id:
            self._identity = None
            self.resets += 1
