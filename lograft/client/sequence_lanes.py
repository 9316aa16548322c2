"""Idempotent batches in flight per partition: when one may overtake none.

With idempotence the producer keeps up to `max_in_flight_per_partition`
(at most `IDEMPOTENT_IN_FLIGHT_MAX`) produce requests in flight per
partition, each on its own kept HTTP/1.1 connection, so a later batch can
reach the leader before an earlier one. What keeps the log exact is the
leader's sequence check (brokers/producer_state.py): it appends a batch of
a producer it knows only if the batch's base sequence follows the last one
it appended, refuses one that comes early with OUT_OF_ORDER_SEQUENCE_NUMBER
(appending nothing), and answers a retry of one of the producer's last five
batches as a duplicate with the original offsets. The client's part, kept
here per partition as the list of sealed batches not yet finished, in
sequence order (sequences are assigned in that order, at seal):

- A batch goes while batches ahead of it are still in flight only when
  they all carry its producer id and epoch AND the leader has acknowledged
  a batch of that producer id on this partition before (`may_overlap`).
  The leader accepts ANY sequence from a producer id it does not know
  (Kafka's rule since KIP-360), so the first batches of a new producer id
  on a partition must go one at a time, or the second could be appended
  first; a batch of a new id (taken after a failure) must also wait for the
  old id's batches ahead of it, which the sequence check cannot order.
  An acknowledged batch is in the ISR, so a new leader knows the id too.
- A batch refused OUT_OF_ORDER_SEQUENCE_NUMBER while batches ahead of it
  are unfinished was overtaking: it is sent again once they are finished
  (`wait_ahead_finished`), with no back-off; with none ahead the refusal
  is final, as with one in flight.
- A batch's records are completed only after every batch ahead of it is
  finished, so callbacks and futures of a partition resolve in offset
  order, as with one in flight.

`IDEMPOTENT_IN_FLIGHT_MAX` (client/config.py) is the broker's duplicate window
(`NUM_BATCHES_TO_RETAIN`, 5, as Kafka's `max.in.flight.requests.per.connection`
limit with idempotence): a retry of any batch still in flight is one of the
producer's last five on the partition, so it is recognised as a duplicate.
"""

from __future__ import annotations

import asyncio

from lograft.client.producer_batch import ProducerBatch
from lograft.protocol.topic_partition import TopicPartition


class SequenceLanes:
    """Per partition, the sealed batches not finished yet, in sequence order,
    and the producer id the partition's leader has acknowledged last."""

    def __init__(self) -> None:
        self._lanes: dict[TopicPartition, list[ProducerBatch]] = {}
        self._known: dict[TopicPartition, int] = {}
        # Resolved at the partition's next change (a batch finished or acknowledged).
        self._changed: dict[TopicPartition, asyncio.Future[None]] = {}

    def sealed(self, batch: ProducerBatch) -> None:
        """`batch` just got its sequence: it is the partition's newest."""
        self._lanes.setdefault(batch.tp, []).append(batch)

    def acknowledged(self, batch: ProducerBatch) -> None:
        self._known[batch.tp] = batch.producer_id
        self._wake(batch.tp)

    def finished(self, batch: ProducerBatch) -> None:
        lane = self._lanes.get(batch.tp)
        if lane is None or batch not in lane:
            return
        lane.remove(batch)
        if not lane:
            del self._lanes[batch.tp]
        self._wake(batch.tp)

    def ahead(self, batch: ProducerBatch) -> list[ProducerBatch]:
        lane = self._lanes.get(batch.tp, [])
        try:
            return lane[: lane.index(batch)]
        except ValueError:
            return []

    def may_overlap(self, batch: ProducerBatch) -> bool:
        """Whether `batch` may be sent with the batches ahead of it in flight."""
        ahead = self.ahead(batch)
        if not ahead:
            return True
        if self._known.get(batch.tp) != batch.producer_id:
            return False
        return all(
            b.producer_id == batch.producer_id and b.producer_epoch == batch.producer_epoch
            for b in ahead
        )

    async def wait_may_go(self, batch: ProducerBatch) -> None:
        while not self.may_overlap(batch):
            await self._next_change(batch.tp)

    async def wait_ahead_finished(self, batch: ProducerBatch) -> None:
        while self.ahead(batch):
            await self._next_change(batch.tp)

    def _next_change(self, tp: TopicPartition) -> asyncio.Future[None]:
        fut = self._changed.get(tp)
        if fut is None or fut.done():
            fut = asyncio.get_running_loop().create_future()
            self._changed[tp] = fut
        # Shielded: a waiter cancelled (the producer closing) must not cancel
        # the future the partition's other waiters share.
        return asyncio.shield(fut)

    def _wake(self, tp: TopicPartition) -> None:
        fut = self._changed.pop(tp, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
