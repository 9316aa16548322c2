"""`Consumer`: the synchronous consumer (shaped like kafka-python's KafkaConsumer).

    consumer = Consumer("http://127.0.0.1:9091", auto_offset_reset="earliest",
                        consumer_timeout_ms=1000)
    consumer.assign([TopicPartition("orders", 0)])
    for record in consumer:        # stops after consumer_timeout_ms without records
        print(record.offset, record.value)
    consumer.close()

An `AsyncConsumer` runs on an event loop in a background thread; every
method runs there and waits for its result. Fetches keep running in that
thread between polls.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from lograft.client.consumer import AsyncConsumer
from lograft.client.loop_thread import LoopThread
from lograft.client.transport import Transport
from lograft.client.types import ConsumerRecord, TopicPartition


class Consumer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transport: Transport | None = None,
        **settings: Any,
    ) -> None:
        """Settings: see `ConsumerConfig`. Connects at once: an unreachable
        cluster raises ClusterUnreachableError naming every bootstrap URL."""
        self._async = AsyncConsumer(bootstrap_servers, transport=transport, **settings)
        self.config = self._async.config
        self._thread = LoopThread("lograft-consumer")
        self._closed = False
        self._thread.start_client(self._async.start, self._async.close)

    def _call(self, fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)

        return self._thread.run(call())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._call(self._async.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._call(self._async.assignment)

    def subscribe(self, topics: Iterable[str]) -> None:
        self._async.subscribe(topics)

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
        return self._thread.run(self._async.poll(timeout_ms, max_records))

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

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._async.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def fetch_requests(self) -> int:
        return self._async.fetch_requests
