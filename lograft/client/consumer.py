"""`AsyncConsumer`: the asyncio consumer, by assignment or in a consumer group.

    consumer = AsyncConsumer("http://127.0.0.1:9091", auto_offset_reset="earliest",
                             value_deserializer=deserializers.json)
    await consumer.start()
    consumer.assign([TopicPartition("orders", 0)])
    batch = await consumer.poll(timeout_ms=1000)   # {TopicPartition: [ConsumerRecord]}
    async for record in consumer: ...
    await consumer.close()

    consumer = AsyncConsumer("http://127.0.0.1:9091", group_id="billing")
    await consumer.start()
    consumer.subscribe(["orders"], on_assign=..., on_revoke=...)
    async for record in consumer: ...   # then commit(), or auto-commit

Without a `group_id`, positions are the consumer's own (nothing is
committed). `seek`, `seek_to_beginning` and `seek_to_end` are lazy as in
Kafka: they take effect at the next `poll` or `position`. A partition
without a position starts at `auto_offset_reset` (earliest / latest; "none"
raises NoOffsetForPartitionError from poll).

With a `group_id`, `subscribe(topics, on_assign=, on_revoke=, on_lost=)`
makes it a member of the group: the coordinator assigns the partitions
(heartbeats in the background, `membership.py`), `poll` runs the rebalance
callbacks (`consumer_group.py`), a new partition starts at its committed
offset (else `auto_offset_reset`), and `commit()` / auto-commit store
positions on the brokers. `assign()` with a `group_id` reads chosen
partitions and commits as a non-member (allowed while the group is empty).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from lograft.client.config import ConsumerConfig, make_config
from lograft.client.consumer_group import ConsumerGroup, RebalanceCallback, RebalanceListener
from lograft.client.errors import (
    ClientClosedError,
    ClientTimeoutError,
    NoOffsetForPartitionError,
    SerializationError,
)
from lograft.client.fetcher import Fetcher, Missing, PartitionState
from lograft.client.membership import RebalanceEvent
from lograft.client.metadata import connect
from lograft.client.serde import Deserializer
from lograft.client.throttle import ThrottleStats, throttle_stats_of
from lograft.client.transport import Transport
from lograft.client.types import ConsumerRecord
from lograft.errors import InvalidConfigError, InvalidRequestError, LograftError
from lograft.protocol.batch import Record
from lograft.protocol.topic_partition import TopicPartition


def _deserialize(
    fn: Deserializer | None, what: str, tp: TopicPartition, offset: int, data: bytes | None
) -> Any:
    if data is None or fn is None:
        return data
    try:
        return fn(data)
    except Exception as exc:
        raise SerializationError(
            f"cannot deserialize the {what} of {tp} at offset {offset}: {exc}; seek past it "
            "to go on",
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
        ) from exc


class AsyncConsumer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.monotonic,
        **settings: Any,
    ) -> None:
        """Settings: see `ConsumerConfig` (and docs/client.md). `clock`
        (monotonic seconds) times max_poll_interval_ms; tests inject one."""
        self.config: ConsumerConfig = make_config(ConsumerConfig, bootstrap_servers, settings)
        self._transport, self.metadata = connect(self.config, transport)
        self._fetcher = Fetcher(self.config, self.metadata, self._transport, self._on_change)
        self._group: ConsumerGroup | None = None
        if self.config.group_id is not None:
            self._group = ConsumerGroup(
                self.config.group_id,
                self.config,
                self.metadata,
                self._transport,
                self._fetcher,
                self._on_change,
                clock,
            )
        self._manual = False  # assign() was used: subscribe() is refused
        self._close_prepared = False
        self._changed: asyncio.Event | None = None
        self._next_start = 0
        self._started = False
        self._closed = False

    # -- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Read the broker list from any bootstrap node (ClusterUnreachableError
        names every URL if none answers). Idempotent; poll calls it if needed."""
        self._check_open()
        if self._started:
            return
        await self.metadata.bootstrap_brokers()
        self._changed = asyncio.Event()
        self._started = True
        if self._group is not None:
            self._group.start()

    async def close(self, timeout_ms: int | None = None) -> None:
        """With a group: commit consumed positions (auto-commit), call on_revoke
        for every partition held, leave the group (its partitions move at once),
        all within `timeout_ms` (default default_api_timeout_ms); then release
        the connections."""
        if self._closed:
            return
        deadline = self._deadline(timeout_ms)
        try:
            if self._group is not None and self._started:
                try:
                    event = await self._prepare_close(deadline)
                    if event is not None:
                        await _invoke(self._group.callback(event), event)
                finally:
                    # Leave (and stop heartbeating) even if on_revoke raised.
                    await self._group.close(deadline)
        finally:
            self._closed = True
            await self._fetcher.close()
            await self.metadata.close()
            await self._transport.close()

    async def _prepare_close(self, deadline: float) -> RebalanceEvent | None:
        """The commit before leaving; the revocation of what is held, once."""
        if self._group is None or self._close_prepared or not self._started:
            return None
        self._close_prepared = True
        return await self._group.prepare_close(deadline)

    def _deadline(self, timeout_ms: int | None) -> float:
        limit = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return asyncio.get_running_loop().time() + limit / 1000

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    def _on_change(self) -> None:
        if self._changed is not None:
            self._changed.set()

    # -- assignment ----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing the previous assignment).
        Partitions kept keep their positions; new ones start at the group's
        committed offset (with a group_id), else per auto_offset_reset."""
        self._check_open()
        if self._group is not None and self._group.subscribed:
            raise InvalidRequestError("assign() cannot be mixed with subscribe()")
        tps = [TopicPartition(*tp) for tp in partitions]
        self._manual = True
        new = [tp for tp in tps if tp not in self._fetcher.partitions]
        self._fetcher.assign(tps, self.config.auto_offset_reset)
        if self._group is not None:
            self._group.assigned_manually(new)

    def assignment(self) -> set[TopicPartition]:
        """The partitions held (with a group: assigned by the coordinator)."""
        return set(self._fetcher.partitions)

    def subscribe(
        self,
        topics: Iterable[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join the consumer group (group_id) for these topics; the coordinator
        assigns their partitions among its members. Callbacks get a sorted list
        of TopicPartition and run inside poll (or close); they may be
        coroutine functions. on_revoke runs after the positions of the
        partitions given up are committed (auto-commit) and before the
        coordinator may hand them to another member; on_lost (default:
        on_revoke) when they were taken away (fenced, the session ran out, or
        the member left because poll was not called for max_poll_interval_ms).
        Calling it again changes the subscription."""
        self._check_open()
        if self._group is None:
            raise InvalidConfigError(
                "subscribe() needs a group_id; without one use assign() with the partitions "
                "to read (partitions_for_topic() lists them)",
                setting="group_id",
            )
        if self._manual:
            raise InvalidRequestError("subscribe() cannot be mixed with assign()")
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise InvalidRequestError(f"subscribe() needs topic names, got {topics!r}")
        self._group.subscribe(frozenset(names), RebalanceListener(on_assign, on_revoke, on_lost))
        if self._started:
            self._group.start()

    async def unsubscribe(self, timeout_ms: int | None = None) -> None:
        """Leave the group as close() does (commit with auto-commit, on_revoke
        for what is held, leave) but keep the consumer, which may subscribe()
        or assign() again. Nothing to do without a subscription."""
        if self._group is None or not self._group.subscribed or not self._started:
            return
        deadline = self._deadline(timeout_ms)
        try:
            event = await self._group.prepare_close(deadline)
            if event is not None:
                await _invoke(self._group.callback(event), event)
        finally:
            await self._group.unsubscribe(deadline)

    async def partitions_for_topic(self, topic: str) -> set[int]:
        await self.start()
        meta = await self.metadata.topic(topic)
        return set(range(meta.count))

    def _state(self, tp: TopicPartition) -> PartitionState:
        st = self._fetcher.partitions.get(TopicPartition(*tp))
        if st is None:
            raise InvalidRequestError(f"{tp} is not assigned to this consumer", partition=str(tp))
        return st

    # -- positions ------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next poll returns records of `partition` from `offset` on."""
        if not isinstance(offset, int) or offset < 0:
            raise InvalidRequestError(f"offset must be an int >= 0, got {offset!r}")
        self._state(partition).seek(offset)
        self._on_change()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Lazily move to the log start of these (default: all assigned) partitions."""
        for tp in partitions or tuple(self._fetcher.partitions):
            self._state(tp).seek(None, "earliest")
        self._on_change()

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Lazily move to the high watermark (the next record to be written)."""
        for tp in partitions or tuple(self._fetcher.partitions):
            self._state(tp).seek(None, "latest")
        self._on_change()

    async def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record poll returns, resolving a pending seek or reset
        first (ClientTimeoutError after `timeout_ms`, default default_api_timeout_ms)."""
        await self.start()
        st = self._state(partition)
        loop = asyncio.get_running_loop()
        limit = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = loop.time() + limit / 1000
        if self._group is not None:
            await self._group.resolve_committed(deadline)
        while st.position is None:
            self._raise_errors([TopicPartition(*partition)])
            if st.reset_to is None:
                raise NoOffsetForPartitionError(
                    f"{partition} has no position and auto_offset_reset is none; seek() first",
                    partition=str(partition),
                )
            self._fetcher.start_work()
            if not await self._wait_change(deadline):
                raise ClientTimeoutError(f"position of {partition} not known within {limit} ms")
        return st.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of `partition` reported (None before one)."""
        return self._state(partition).high_watermark

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await self._offsets(partitions, "earliest")

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._offsets(partitions, "latest")

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Per partition, (offset, timestamp) of the first record at or after the
        timestamp, or None if there is none below the high watermark."""
        out: dict[TopicPartition, tuple[int, int] | None] = {}
        for tp, ts in timestamps.items():
            doc = await self._list_offsets(TopicPartition(*tp), ts)
            found = doc.get("offset_for_timestamp")
            out[TopicPartition(*tp)] = (
                (int(found["offset"]), int(found["timestamp"])) if found else None
            )
        return out

    async def _offsets(
        self, partitions: Iterable[TopicPartition], key: str
    ) -> dict[TopicPartition, int]:
        tps = [TopicPartition(*tp) for tp in partitions]
        docs = await asyncio.gather(*(self._list_offsets(tp) for tp in tps))
        return {tp: int(doc[key]) for tp, doc in zip(tps, docs, strict=True)}

    async def _list_offsets(self, tp: TopicPartition, ts: int | None = None) -> dict[str, Any]:
        """GET .../offsets on the leader, retrying retriable errors up to
        default_api_timeout_ms."""
        await self.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.default_api_timeout_ms / 1000
        scratch = PartitionState()  # backoff counter for this lookup only
        while True:
            try:
                return await self._fetcher.list_offsets(tp, ts)
            except Missing as exc:
                raise exc.error from None
            except LograftError as exc:
                if not exc.retriable or loop.time() >= deadline:
                    raise
                await self._fetcher.on_retriable(tp, scratch, exc)

    # -- polling ---------------------------------------------------------------------------

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned partitions, at most `max_records`
        (default max_poll_records), waiting up to `timeout_ms` for the first.
        Fetches keep running between polls (one per partition), so a poll
        loop is a pipeline. Raises the error a fetch met (typed), once. With a
        group it first runs pending rebalance callbacks and the auto-commit."""
        return await self._poll(timeout_ms, max_records, callbacks=True)

    async def _poll(
        self, timeout_ms: int, max_records: int | None, *, callbacks: bool
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """`poll`; with callbacks=False (the sync consumer, which runs them in
        its caller's thread) it returns at once when a rebalance event waits."""
        await self.start()
        limit = self.config.max_poll_records if max_records is None else max_records
        if limit < 1:
            raise InvalidRequestError(f"max_records must be >= 1, got {limit}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        if self._group is not None:
            self._group.polled()
        while True:
            if self._group is not None:
                err = self._group.take_error()
                if err is not None:
                    raise err
                if callbacks:
                    await self._run_rebalance()
                elif self._group.has_events():
                    return {}
                await self._group.resolve_committed(self._deadline(None))
                self._group.maybe_auto_commit()
            self._raise_errors(list(self._fetcher.partitions))
            out = self._collect(limit)
            self._fetcher.start_work()
            if out:
                return out
            if not await self._wait_for_records(deadline):
                return {}

    async def _wait_for_records(self, deadline: float) -> bool:
        """`_wait_change` inside poll: with a group, waiting for records is
        not time without a poll (max_poll_interval_ms)."""
        if self._group is None:
            return await self._wait_change(deadline)
        with self._group.poll_waiting():
            return await self._wait_change(deadline)

    async def _run_rebalance(self) -> None:
        """Work through pending rebalance events, callbacks included."""
        assert self._group is not None
        while (event := await self._group.begin()) is not None:
            try:
                await _invoke(self._group.callback(event), event)
            finally:
                self._group.finish(event)

    # -- committed offsets --------------------------------------------------------------

    def _need_group(self, what: str) -> ConsumerGroup:
        if self._group is None:
            raise InvalidConfigError(f"{what} needs a group_id", setting="group_id")
        return self._group

    async def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, timeout_ms: int | None = None
    ) -> None:
        """Commit the consumed positions of every partition held (the offsets
        after the records poll returned), or the given {tp: next offset to
        consume}; returns once the brokers committed them (acks=all). Retries
        retriable errors within `timeout_ms` (default default_api_timeout_ms);
        CommitFailedError if this consumer is no longer the member that owns
        the partitions."""
        await self.start()
        group = self._need_group("commit()")
        if offsets is None:
            chosen = group.positions()
        else:
            chosen = {}
            for tp, off in offsets.items():
                if not isinstance(off, int) or isinstance(off, bool) or off < 0:
                    raise InvalidRequestError(f"offset of {tp} must be an int >= 0, got {off!r}")
                chosen[TopicPartition(*tp)] = off
        await group.committer.commit(chosen, self._deadline(timeout_ms))

    async def committed(
        self, partition: TopicPartition, timeout_ms: int | None = None
    ) -> int | None:
        """The group's committed offset of `partition` (None if nothing is committed)."""
        await self.start()
        group = self._need_group("committed()")
        tp = TopicPartition(*partition)
        found = await group.committer.fetch([tp], self._deadline(timeout_ms))
        return found.get(tp)

    async def _wait_change(self, deadline: float) -> bool:
        """Wait for a fetch or lookup to finish (or a seek); False at the deadline."""
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        self._changed.clear()
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
            # cancel that lands as the wait ends, and the cancelled poll would
            # run on to its deadline.
            async with asyncio.timeout(remaining):
                await self._changed.wait()
        except TimeoutError:
            return False
        return True

    def _raise_errors(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            st = self._fetcher.partitions.get(tp)
            if st is None or st.paused:
                continue
            if st.error is not None:
                err, st.error = st.error, None
                raise err
            if st.position is None and st.reset_to is None:
                raise NoOffsetForPartitionError(
                    f"{tp} has no position and auto_offset_reset is none; seek() first",
                    partition=str(tp),
                )

    def _collect(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        count = 0
        items = list(self._fetcher.partitions.items())
        if not items:
            return out
        # Start one partition further each poll, so a busy partition cannot starve the rest.
        start = self._next_start % len(items)
        self._next_start = start + 1
        for tp, st in items[start:] + items[:start]:
            if st.paused:
                continue
            if st.buffer and count < limit and self._fetcher.raw_records:
                # The fetcher built ConsumerRecords while decoding: hand them over.
                buf = st.buffer
                taken = [buf.popleft() for _ in range(min(len(buf), limit - count))]
                st.position = taken[-1].offset + 1
                out.setdefault(tp, []).extend(taken)
                count += len(taken)
            while st.buffer and count < limit:
                rec, ts_type = st.buffer[0]
                try:
                    item = self._to_consumer_record(tp, rec, ts_type)
                except SerializationError:
                    if count:
                        return out  # hand out what came before; raise on the next poll
                    raise
                st.buffer.popleft()
                st.position = rec.offset + 1
                out.setdefault(tp, []).append(item)
                count += 1
            if not st.buffer and st.buffer_next_offset and st.position is not None:
                # The response is used up: step over offsets it covered without records.
                st.position = max(st.position, st.buffer_next_offset)
                st.buffer_next_offset = 0
            if count >= limit:
                break
        return out

    def _to_consumer_record(self, tp: TopicPartition, rec: Record, ts_type: Any) -> ConsumerRecord:
        cfg = self.config
        return ConsumerRecord(
            topic=tp.topic,
            partition=tp.partition,
            offset=rec.offset,
            timestamp=rec.timestamp,
            timestamp_type=ts_type,
            key=_deserialize(cfg.key_deserializer, "key", tp, rec.offset, rec.key),
            value=_deserialize(cfg.value_deserializer, "value", tp, rec.offset, rec.value),
            headers=rec.headers,
        )

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        """Records one by one; stops after consumer_timeout_ms without one (if set)."""
        idle_ms = self.config.consumer_timeout_ms
        while True:
            got = await self.poll(timeout_ms=idle_ms if idle_ms is not None else 1000)
            if not got:
                if idle_ms is not None:
                    return
                continue
            for records in got.values():
                for record in records:
                    yield record

    @property
    def fetch_requests(self) -> int:
        return self._fetcher.requests

    @property
    def throttle_stats(self) -> ThrottleStats:
        """What quotas cost this consumer (client/throttle.py)."""
        return throttle_stats_of(self._transport)

    @property
    def group(self) -> ConsumerGroup | None:
        """The group side (membership, committer), for stats and tests."""
        return self._group


async def _invoke(callback: RebalanceCallback | None, event: RebalanceEvent) -> None:
    """Call a rebalance callback with the event's partitions (sorted)."""
    if callback is None:
        return
    result = callback(sorted(event.partitions))
    if inspect.isawaitable(result):
        await result
