"""`Consumer`: the synchronous consumer (shaped like kafka-python's KafkaConsumer).

    consumer = Consumer("http://127.0.0.1:9091", auto_offset_reset="earliest",
                        consumer_timeout_ms=1000)
    consumer.assign([TopicPartition("orders", 0)])
    for record in consumer:        # stops after consumer_timeout_ms without records
        print(record.offset, record.value)
    consumer.close()

An `AsyncConsumer` runs on an event loop in a background thread; every
method runs there and waits for its result. Fetches and (with a group) the
heartbeats keep running in that thread between polls. Rebalance callbacks
run in the thread that calls `poll` or `close`, as in kafka-python, so they
may call the consumer (`commit`, `seek`, `position`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from lograft.client.consumer import AsyncConsumer
from lograft.client.consumer_group import RebalanceCallback, RebalanceListener
from lograft.client.loop_thread import LoopThread
from lograft.client.membership import RebalanceEvent
from lograft.client.throttle import ThrottleStats
from lograft.client.transport import Transport
from lograft.client.types import ConsumerRecord
from lograft.protocol.topic_partition import TopicPartition


class Consumer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.monotonic,
        **settings: Any,
    ) -> None:
        """Settings: see `ConsumerConfig`. Connects at once: an unreachable
        cluster raises ClusterUnreachableError naming every bootstrap URL.
        `clock`: see `AsyncConsumer`."""
        self._async = AsyncConsumer(bootstrap_servers, transport=transport, clock=clock, **settings)
        self.config = self._async.config
        self._thread = LoopThread("lograft-consumer", self.config.event_loop)
        self._closed = False
        self._listener = RebalanceListener()
        self._thread.start_client(self._async.start, self._async.close)

    def _call(self, fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)

        return self._thread.run(call())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._call(self._async.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._call(self._async.assignment)

    def subscribe(
        self,
        topics: Iterable[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """See `AsyncConsumer.subscribe`; the callbacks run in the thread
        calling poll/close."""
        names = [topics] if isinstance(topics, str) else list(topics)
        self._call(self._async.subscribe, names)
        self._listener = RebalanceListener(on_assign, on_revoke, on_lost)

    def unsubscribe(self, timeout_ms: int | None = None) -> None:
        """See `AsyncConsumer.unsubscribe`; on_revoke runs in this thread."""
        group = self._async.group
        if group is None or not group.subscribed:
            return
        limit = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + limit / 1000

        async def prepare() -> RebalanceEvent | None:
            return await group.prepare_close(self._async._deadline(limit))

        async def leave(left_ms: int) -> None:
            await group.unsubscribe(self._async._deadline(left_ms))

        try:
            event = self._thread.run(prepare())
            if event is not None:
                self._callback(event)
        finally:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            self._thread.run(leave(left))
            self._listener = RebalanceListener()

    def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, timeout_ms: int | None = None
    ) -> None:
        """See `AsyncConsumer.commit`."""
        self._thread.run(self._async.commit(None if offsets is None else dict(offsets), timeout_ms))

    def committed(self, partition: TopicPartition, timeout_ms: int | None = None) -> int | None:
        return self._thread.run(self._async.committed(partition, timeout_ms))

    def _run_rebalance(self) -> None:
        """Pending rebalance events, each callback in this thread."""
        group = self._async.group
        # Read from this thread without a hop to the loop: an event queued just
        # after is seen by the next poll (the async poll returns early for it).
        if group is None or not group.has_events():
            return
        while (event := self._thread.run(group.begin())) is not None:
            try:
                self._callback(event)
            finally:
                self._call(group.finish, event)

    def _callback(self, event: RebalanceEvent) -> None:
        callback = self._listener.callback(event.kind)
        if callback is not None:
            callback(sorted(event.partitions))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._call(self._async.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._call(self._async.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._call(self._async.seek_to_end, *partitions)

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        return self._thread.run(self._async.position(partition, timeout_ms))

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._call(self._async.highwater, partition)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._thread.run(self._async.partitions_for_topic(topic))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._async.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._async.end_offsets(list(partitions)))

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        return self._thread.run(self._async.offsets_for_times(dict(timestamps)))

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._run_rebalance()
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            got = self._thread.run(self._async._poll(remaining_ms, max_records, callbacks=False))
            if got or time.monotonic() >= deadline:
                if not got:
                    self._run_rebalance()  # events that arrived at the very end
                return got

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one; stops after consumer_timeout_ms without one (if set)."""
        idle_ms = self.config.consumer_timeout_ms
        last = time.monotonic()
        while True:
            wait = (
                1000 if idle_ms is None else max(0, idle_ms - int((time.monotonic() - last) * 1000))
            )
            got = self.poll(timeout_ms=wait)
            if got:
                for records in got.values():
                    yield from records
                last = time.monotonic()
            elif idle_ms is not None and (time.monotonic() - last) * 1000 >= idle_ms:
                return

    def close(self, timeout_ms: int | None = None) -> None:
        """See `AsyncConsumer.close`; on_revoke runs in this thread."""
        if self._closed:
            return
        self._closed = True
        try:
            limit = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
            deadline = time.monotonic() + limit / 1000
            try:
                event = self._thread.run(self._prepare_close(limit))
                if event is not None:
                    self._callback(event)
            finally:
                # Leave and release the connections even if on_revoke raised.
                left = max(0, int((deadline - time.monotonic()) * 1000))
                self._thread.run(self._async.close(left))
        finally:
            self._thread.stop()

    async def _prepare_close(self, timeout_ms: int) -> RebalanceEvent | None:
        return await self._async._prepare_close(self._async._deadline(timeout_ms))

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def fetch_requests(self) -> int:
        return self._async.fetch_requests

    @property
    def throttle_stats(self) -> ThrottleStats:
        """What quotas cost this consumer (client/throttle.py)."""
        return self._async.throttle_stats
