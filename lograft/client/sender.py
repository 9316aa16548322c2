"""The producer's sender: moves ready batches to partition leaders, with retries.

One task (`run`) loops on the event loop: it expires batches that waited
longer than `delivery_timeout_ms`, starts a send task for every partition
whose first batch is ready and that has fewer than
`max_in_flight_per_partition` requests out, and sleeps until the next
lingering batch is due or something wakes it (a full or new batch, a
completed request, flush, close).

Adaptive linger (unless `linger_strict`): a batch lingers only while a
produce request to its partition's leader is in flight, so there is
something to batch behind; with none out it is ready at once. Under load
requests are always out and batches fill for up to `linger_ms` (or until
the request ahead completes, which wakes the loop); at a trickle each
record goes out without waiting (franz-go's rule, Nagle's for TCP).

One send task per batch (`_send`): it seals the batch (producer id, epoch,
sequence, compression: once), then POSTs the same bytes to
`/v1/topics/{t}/partitions/{p}/batches` on the leader until one of:
- a 2xx answer: the records get `base_offset + i` (the broker's
  `"duplicate": true` is a success with the original offsets);
- a non-retriable error: the batch fails with it;
- `delivery_timeout_ms` since the batch was created: DeliveryTimeoutError
  (the last error chained).
Retriable errors and network failures back off exponentially
(`retry_backoff_ms` doubling up to `retry_backoff_max_ms`, with jitter) and
mark the topic's metadata stale where the error says the layout moved
(NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION,
FENCED_LEADER_EPOCH, network failures). A NOT_LEADER_OR_FOLLOWER naming the
new leader (`details.leader_url`) is retried there at once.

A back-off after such an error ends early once the metadata names another
leader (Kafka's KIP-951 skips the back-off on a leader change too): it
re-reads the topic's layout every `retry_backoff_ms` (at most one refresh per
topic per interval, whatever the number of waiting batches) and retries at
once at the new leader, counting attempts afresh. Without it a dead leader's
partition was retried on the doubling schedule (0.1, 0.3, 0.7, 1.5, 2.5 s
after the first failure), so a new leader elected at 1.6 s was first tried
at 2.5 s.

Ordering: without idempotence a partition's next batch is not sent before
the previous one is done unless `max_in_flight_per_partition` > 1 (then a
retry can reorder). With idempotence up to that many (at most
IDEMPOTENT_IN_FLIGHT_MAX) go at once and stay in order: the leader's
sequence check refuses a batch that overtakes, and `SequenceLanes`
(sequence_lanes.py) decides when a batch may overlap the ones ahead, sends
a refused one again once they are finished, and completes records in
offset order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field

from lograft.client.accumulator import RecordAccumulator
from lograft.client.backoff import backoff_ms
from lograft.client.buffer_pool import BufferPool
from lograft.client.config import ProducerConfig
from lograft.client.errors import (
    ClientClosedError,
    DeliveryTimeoutError,
    NetworkError,
    UnexpectedResponseError,
)
from lograft.client.idempotence import IdempotenceState
from lograft.client.metadata import STALE_METADATA_ERRORS, ClusterMetadata
from lograft.client.producer_batch import BatchState, ProducerBatch
from lograft.client.sequence_lanes import SequenceLanes
from lograft.client.throttle import ThrottleStats
from lograft.client.transport import BATCH_CONTENT_TYPE, HttpResponse, Transport
from lograft.errors import (
    LograftError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
)
from lograft.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ProducerStats:
    """Counters since the producer started (read them on its loop, or after flush)."""

    requests: int = 0  # produce requests sent (attempts)
    batches_sent: int = 0  # batches acknowledged
    records_sent: int = 0  # records acknowledged
    retries: int = 0  # attempts after the first
    duplicates: int = 0  # acknowledgements with "duplicate": true
    batches_failed: int = 0
    producer_id_resets: int = 0
    # What quotas cost: throttled answers, the throttle time announced, 429s
    # (the transport's counters, lograft/client/throttle.py).
    throttle: ThrottleStats = field(default_factory=ThrottleStats)


class Sender:
    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        metadata: ClusterMetadata,
        transport: Transport,
        pool: BufferPool,
        idempotence: IdempotenceState | None,
        stats: ProducerStats,
    ) -> None:
        self.config = config
        self.acc = accumulator
        self.metadata = metadata
        self.transport = transport
        self.pool = pool
        self.idempotence = idempotence
        self.stats = stats
        self.in_flight: dict[TopicPartition, int] = {}
        self.lanes = SequenceLanes()
        # Produce requests on the wire per leader URL (adaptive linger).
        self.to_leader: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self.flushing = 0  # flush() calls in progress: every batch is ready
        self.closing = False  # close() in progress: send everything, then stop
        self._delivery_timeout_s = config.delivery_timeout_ms / 1000

    def wakeup(self) -> None:
        self._wake.set()

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Until close: send ready batches; returns once closing and all is sent."""
        max_in_flight = self.config.max_in_flight_per_partition
        while True:
            self._wake.clear()
            now = self.acc.now()
            for batch in self.acc.expire(now, self._delivery_timeout_s):
                self._finish(
                    batch,
                    DeliveryTimeoutError(
                        f"expiring {batch.record_count} record(s) for {batch.tp}: "
                        f"{self.config.delivery_timeout_ms} ms have passed since the batch was "
                        "created and it was never sent (no leader reachable in time?)",
                        topic=batch.tp.topic,
                        partition=batch.tp.partition,
                    ),
                )
            force = self.closing or self.flushing > 0 or self.pool.has_waiters
            next_wait: float | None = None
            for tp in list(self.acc.queues):
                while self.in_flight.get(tp, 0) < max_in_flight:
                    ready, wait = self.acc.head_ready(
                        tp, force=force, now=now, linger=self._lingers(tp)
                    )
                    if not ready:
                        if wait is not None:
                            next_wait = wait if next_wait is None else min(next_wait, wait)
                        break
                    self._start(self.acc.drain(tp))
            if self.closing and not self.acc.has_queued() and not self._tasks:
                return
            # Queued batches expire at the delivery timeout even if never ready.
            expiry = self.acc.next_expiry(self._delivery_timeout_s)
            if expiry is not None:
                until = max(expiry - now, 0.0)
                next_wait = until if next_wait is None else min(next_wait, until)
            # asyncio.timeout, not wait_for, which on Python 3.11 can swallow a cancel.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(next_wait):
                    await self._wake.wait()

    def _lingers(self, tp: TopicPartition) -> bool:
        """Whether `tp`'s open batch may wait for `linger_ms`: always with
        `linger_strict`, else only behind a request to its leader in flight
        (an unknown leader: nothing to wait behind)."""
        if self.config.linger_strict:
            return True
        url = self.metadata.leader_url(tp)
        return url is not None and url in self.to_leader

    def _start(self, batch: ProducerBatch) -> None:
        tp = batch.tp
        self.in_flight[tp] = self.in_flight.get(tp, 0) + 1
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        # Wake the loop only now: before this the task still counts as running.
        self._tasks.discard(task)
        self.wakeup()

    # -- one batch ------------------------------------------------------------------------

    async def _send(self, batch: ProducerBatch) -> None:
        error: BaseException | None = None
        try:
            await self._deliver(batch)
        except asyncio.CancelledError:
            error = ClientClosedError(
                f"the producer was closed before {batch.record_count} record(s) for "
                f"{batch.tp} were acknowledged; they may or may not be in the log",
                topic=batch.tp.topic,
                partition=batch.tp.partition,
            )
        except LograftError as exc:
            error = exc
        except Exception as exc:  # a bug must fail the records, not hang them
            log.exception("producer: unexpected error sending %r", batch)
            error = exc
        finally:
            self.in_flight[batch.tp] -= 1
            self._finish(batch, error)
            # After its records are resolved: a batch behind it completes its own next.
            self.lanes.finished(batch)
            self.wakeup()

    def _finish(self, batch: ProducerBatch, error: BaseException | None) -> None:
        """Release the batch's memory and resolve it (error None: already completed)."""
        if error is not None:
            self.stats.batches_failed += 1
            if batch.has_sequence and self.idempotence is not None:
                self.idempotence.on_sequenced_batch_failed(batch.producer_id)
                self.stats.producer_id_resets = self.idempotence.resets
            if batch.state is not BatchState.DONE:
                batch.fail(error)
        self.pool.release(batch.reserved_bytes)
        self.acc.done(batch)

    async def _seal(self, batch: ProducerBatch, deadline: float) -> None:
        if self.idempotence is None:
            batch.seal(self.config.compression)
            return
        attempt = 0
        while True:
            try:
                await self.idempotence.ensure_identity()
                break
            except LograftError as exc:
                if not exc.retriable:
                    raise
                attempt += 1
                await self._backoff(batch, deadline, attempt, exc)
        pid, epoch, seq = self.idempotence.assign(batch.tp, batch.record_count)
        batch.seal(
            self.config.compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq
        )
        self.lanes.sealed(batch)

    async def _deliver(self, batch: ProducerBatch) -> None:
        loop = asyncio.get_running_loop()
        deadline = batch.created + self._delivery_timeout_s
        await self._seal(batch, deadline)
        assert batch.data is not None
        sequenced = batch.has_sequence
        if sequenced:
            await self._lane_wait(self.lanes.wait_may_go(batch), batch, deadline, None)
        tp = batch.tp
        path = f"/v1/topics/{tp.topic}/partitions/{tp.partition}/batches"
        params = {"acks": self.config.acks_value}
        headers = {"Content-Type": BATCH_CONTENT_TYPE}
        attempt = 0
        redirected = False
        # The error of the attempt before, for the timeout's message: a
        # back-off can end a fraction of a millisecond before the deadline
        # (asyncio wakes timers up to its clock resolution early), and the
        # timeout then comes here, not from the back-off.
        last_error: LograftError | None = None
        while True:
            url_or_error = await self._leader_url(tp)
            if isinstance(url_or_error, LograftError):
                error: LograftError = url_or_error
            else:
                remaining_ms = int((deadline - loop.time()) * 1000)
                if remaining_ms <= 0:
                    raise self._timeout(batch, last_error)
                self.stats.requests += 1
                if batch.attempts:
                    self.stats.retries += 1
                batch.attempts += 1
                leader = url_or_error
                self.to_leader[leader] = self.to_leader.get(leader, 0) + 1
                try:
                    resp = await self.transport.request(
                        "POST",
                        leader + path,
                        params=params,
                        data=batch.data,
                        headers=headers,
                        timeout_ms=min(self.config.request_timeout_ms, remaining_ms),
                    )
                except NetworkError as exc:
                    if exc.details.get("sent", True):
                        batch.maybe_appended = True
                    error = exc
                else:
                    if resp.ok:
                        if sequenced:
                            self.lanes.acknowledged(batch)
                            # In offset order; unbounded: this one is in the
                            # log, so the ones ahead are too and get answered.
                            await self.lanes.wait_ahead_finished(batch)
                        self._acknowledge(batch, resp)
                        return
                    error = resp.error()
                    if isinstance(error, RequestTimedOutError):
                        batch.maybe_appended = True  # appended, not confirmed by the ISR
                finally:
                    self._off_the_wire(leader)
            last_error = error
            if sequenced and isinstance(error, OutOfOrderSequenceError) and self.lanes.ahead(batch):
                # It overtook a batch still in flight: again once that one is done.
                await self._lane_wait(self.lanes.wait_ahead_finished(batch), batch, deadline, error)
                redirected = False
                continue
            if not error.retriable:
                raise error
            if isinstance(error, STALE_METADATA_ERRORS):
                self.metadata.request_update(tp.topic)
            if isinstance(error, NotLeaderOrFollowerError) and not redirected:
                hint = error.details
                if self.metadata.apply_leader_hint(
                    tp, hint.get("leader_id"), hint.get("leader_url")
                ):
                    redirected = True  # once in a row: a stale hint must not ping-pong
                    continue
            redirected = False
            attempt += 1
            failed_at = None if isinstance(url_or_error, LograftError) else url_or_error
            if await self._backoff(batch, deadline, attempt, error, failed_at):
                attempt = 0  # a new leader: its failures count from the start

    async def _lane_wait(
        self,
        wait: Coroutine[object, object, None],
        batch: ProducerBatch,
        deadline: float,
        error: LograftError | None,
    ) -> None:
        """`wait` for the batches ahead (sequence_lanes.py), at most until the
        batch's delivery deadline."""
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                await wait
        except TimeoutError:
            raise self._timeout(batch, error) from error

    def _off_the_wire(self, leader: str) -> None:
        left = self.to_leader[leader] - 1
        if left:
            self.to_leader[leader] = left
        else:
            del self.to_leader[leader]

    async def _leader_url(self, tp: TopicPartition) -> str | LograftError:
        try:
            return await self.metadata.find_leader_url(tp)
        except LograftError as exc:
            return exc

    async def _backoff(
        self,
        batch: ProducerBatch,
        deadline: float,
        attempt: int,
        error: LograftError,
        failed_leader: str | None = None,
    ) -> bool:
        """Wait before the next attempt. True when the wait ended early because
        the metadata names a leader other than `failed_leader` (given when
        the attempt reached a leader and failed with a stale-metadata error)."""
        loop = asyncio.get_running_loop()
        delay = backoff_ms(attempt, self.config.retry_backoff_ms, self.config.retry_backoff_max_ms)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise self._timeout(batch, error) from error
        log.debug("producer: %r attempt %d failed (%s); retrying", batch, attempt, error)
        # Batches that lingered behind the failed request need not wait for
        # this back-off (a batch that is done wakes the loop in `_send`, after
        # its records' callbacks were scheduled, so that an abort_unsent from
        # one of them runs before the next batch is taken).
        self.wakeup()
        wait_s = min(delay / 1000, remaining)
        moved = False
        if failed_leader is not None and isinstance(error, STALE_METADATA_ERRORS):
            moved = await self._await_new_leader(batch.tp, failed_leader, wait_s)
        else:
            await asyncio.sleep(wait_s)
        if deadline - loop.time() <= 0:
            raise self._timeout(batch, error) from error
        return moved

    async def _await_new_leader(self, tp: TopicPartition, failed: str, wait_s: float) -> bool:
        """Sleep up to `wait_s`, re-reading `tp`'s topic every `retry_backoff_ms`;
        True as soon as it names a leader other than `failed`."""
        loop = asyncio.get_running_loop()
        end = loop.time() + wait_s
        poll_s = self.config.retry_backoff_ms / 1000
        while (left := end - loop.time()) > 0:
            await asyncio.sleep(min(poll_s, left))  # the back-off itself, in slices
            left = end - loop.time()
            if left <= 0:
                return False
            # A refresh that fails or outlasts the back-off changes nothing:
            # the attempt after it refreshes in the foreground.
            with contextlib.suppress(LograftError, TimeoutError):
                async with asyncio.timeout(left):
                    await self.metadata.refresh_at_most_every(tp.topic, poll_s)
            url = self.metadata.leader_url(tp)
            if url is not None and url != failed:
                return True
        return False

    def _timeout(self, batch: ProducerBatch, error: LograftError | None) -> DeliveryTimeoutError:
        last = f"; last error: {error.code}: {error.message}" if error is not None else ""
        return DeliveryTimeoutError(
            f"{batch.record_count} record(s) for {batch.tp} not acknowledged within "
            f"delivery_timeout_ms={self.config.delivery_timeout_ms} after {batch.attempts} "
            f"attempt(s){last}",
            topic=batch.tp.topic,
            partition=batch.tp.partition,
            attempts=batch.attempts,
            maybe_appended=batch.maybe_appended,
        )

    def _acknowledge(self, batch: ProducerBatch, resp: HttpResponse) -> None:
        count = batch.record_count
        if resp.status == 202 or not resp.body:  # acks=0: no answer to wait for
            batch.complete(-1, -1)
        else:
            doc = resp.json()
            try:
                base = int(doc["base_offset"])
                last = int(doc["last_offset"])
                append_time = int(doc.get("log_append_time", -1))
            except (KeyError, TypeError, ValueError):
                raise UnexpectedResponseError(
                    f"produce answer from {resp.url} lacks offsets: {resp.body[:200]!r}"
                ) from None
            if last - base + 1 != count:
                raise UnexpectedResponseError(
                    f"{batch.tp}: {count} records sent, {resp.url} acknowledged offsets "
                    f"{base}..{last}"
                )
            if doc.get("duplicate"):
                self.stats.duplicates += 1
            batch.complete(base, append_time)
        self.stats.batches_sent += 1
        self.stats.records_sent += count

    # -- shutdown -------------------------------------------------------------------------

    def abort_queued(self) -> None:
        """Fail every batch not yet sent (ClientClosedError); sends in progress go on."""
        for batch in self.acc.abort_all():
            self._finish(
                batch,
                ClientClosedError(
                    f"the producer was closed before {batch.record_count} record(s) for "
                    f"{batch.tp} were sent",
                    topic=batch.tp.topic,
                    partition=batch.tp.partition,
                    sent=False,
                ),
            )
        self.wakeup()

    async def abort(self) -> None:
        """Fail every queued batch and cancel every send in progress."""
        self.abort_queued()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.wakeup()
