"""`Producer`: the synchronous producer (shaped like kafka-python's KafkaProducer).

    producer = Producer("http://127.0.0.1:9091", value_serializer=serializers.json)
    future = producer.send("orders", {"n": 1}, key=b"alice")
    meta = future.get(timeout=10)     # RecordMetadata
    producer.flush()
    producer.close()

An `AsyncProducer` runs on an event loop in a background thread. `send`
does the per-record work in the caller's thread (serialize, size, reserve
buffer memory, blocking at most `max_block_ms`), then hands the record to
the loop through a queue; the loop is woken once per handful of records,
not once per record. The hand-off queue holds only records whose memory is
reserved, so it is bounded by `buffer_memory_bytes`. Records keep their
`send` order per partition (one queue, drained in order on the loop).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Sequence
from typing import Any

from lograft.client.arrow_columns import ArrowColumns
from lograft.client.errors import ClientClosedError
from lograft.client.loop_thread import LoopThread
from lograft.client.producer import AsyncProducer, HeadersInput, PreparedRecord, prepare
from lograft.client.record_future import FutureRecordMetadata
from lograft.client.sender import ProducerStats
from lograft.client.transport import Transport
from lograft.client.types import RecordMetadata
from lograft.errors import UnknownTopicOrPartitionError


class Producer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transport: Transport | None = None,
        **settings: Any,
    ) -> None:
        """Settings: see `ProducerConfig`. Connects at once: an unreachable
        cluster raises ClusterUnreachableError naming every bootstrap URL."""
        self._async = AsyncProducer(bootstrap_servers, transport=transport, **settings)
        self.config = self._async.config
        self._thread = LoopThread("lograft-producer")
        self._lock = threading.Lock()
        self._queue: list[tuple[PreparedRecord, FutureRecordMetadata]] = []
        self._drain_scheduled = False
        self._closed = False
        self._aborted = False
        self._thread.start_client(self._async.start, self._async.close)

    @property
    def stats(self) -> ProducerStats:
        return self._async.stats

    def metadata_refreshes(self) -> int:
        """Topic metadata refreshes so far (the initial load counts)."""
        return self._async.metadata.refreshes

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: HeadersInput = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; the future resolves to its RecordMetadata. Raises at
        once as `AsyncProducer.send` does (closed, serialization, too large,
        unknown topic or partition, BufferFullError after `max_block_ms`)."""
        if self._closed or self._aborted:
            raise ClientClosedError("the producer is closed; records can no longer be sent")
        cfg = self.config
        rec = prepare(cfg, topic, value, key, headers, partition, timestamp_ms)
        deadline = time.monotonic() + cfg.max_block_ms / 1000
        meta = self._async.metadata.cached(topic)
        if meta is None or (partition is not None and partition >= meta.count):
            meta = self._thread.run(self._topic(topic, partition))
        if partition is not None and partition >= meta.count:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} does not exist; it has {meta.count}",
                topic=topic,
                partition=partition,
            )
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        self._async.pool.reserve_blocking(rec.size, remaining_ms)
        fut = FutureRecordMetadata()
        with self._lock:
            if self._closed:
                self._thread.call_soon(self._async.pool.release, rec.size)
                raise ClientClosedError("the producer is closed; records can no longer be sent")
            self._queue.append((rec, fut))
            if self._drain_scheduled:
                return fut
            self._drain_scheduled = True
        self._thread.call_soon(self._drain)
        return fut

    def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[HeadersInput] | None = None,
        partition: int | None = None,
        timestamps_ms: Sequence[int | None] | None = None,
    ) -> concurrent.futures.Future[list[RecordMetadata]]:
        """`AsyncProducer.send_many` from this thread: blocks until every
        record is queued (at most `max_block_ms` per wait for buffer room);
        the future resolves to every record's RecordMetadata, in order."""
        return self._thread.run(
            self._send_many(topic, values, keys, headers, partition, timestamps_ms)
        )

    def send_arrow(
        self, topic: str, batch: Any, *, partition: int | None = None
    ) -> concurrent.futures.Future[list[RecordMetadata]]:
        """`send_many` from the columns of a pyarrow RecordBatch or Table
        (see `AsyncProducer.send_arrow`)."""
        cols = ArrowColumns(batch)
        return self.send_many(
            topic,
            cols.values,
            cols.keys,
            headers=cols.headers,
            partition=partition,
            timestamps_ms=cols.timestamps_ms,
        )

    async def _send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[HeadersInput] | None,
        partition: int | None,
        timestamps_ms: Sequence[int | None] | None,
    ) -> concurrent.futures.Future[list[RecordMetadata]]:
        if self._closed or self._aborted:
            raise ClientClosedError("the producer is closed; records can no longer be sent")
        self._drain()  # records sent before this call go first (send order per partition)
        return await self._async.queue_many(topic, values, keys, headers, partition, timestamps_ms)

    async def _topic(self, topic: str, partition: int | None) -> Any:
        meta = await self._async.wait_for_topic(topic, self.config.max_block_ms)
        if partition is not None and partition >= meta.count:
            meta = await self._async.metadata.refresh(topic)
        return meta

    def _drain(self) -> None:
        """On the loop: append every handed-over record, in order."""
        while True:
            with self._lock:
                items, self._queue = self._queue, []
                if not items:
                    self._drain_scheduled = False
                    return
            for rec, fut in items:
                if self._aborted:
                    self._async.pool.release(rec.size)
                    fut.set_exception(_not_sent())
                    continue
                # The caller saw the topic's metadata; entries are replaced, never removed.
                meta = self._async.metadata.cached(rec.topic)
                try:
                    assert meta is not None
                    self._async._append_nowait(rec, meta, fut)
                except BaseException as exc:
                    self._async.pool.release(rec.size)
                    if not fut.done():
                        fut.set_exception(exc)

    async def _drained(self) -> None:
        """Runs on the loop after every earlier call_soon(_drain): the queue is empty."""
        self._drain()

    def abort(self) -> None:
        """Stop sending at once, from any thread, a record's callback included
        (see `AsyncProducer.abort_unsent`): records not yet sent fail with
        ClientClosedError, later sends raise it, requests in flight finish.
        Call close() afterwards to wait for those and release everything."""
        with self._lock:
            self._aborted = True
        if self._thread.in_loop_thread():
            self._abort_on_loop()
        elif not self._closed:
            self._thread.run(self._abort())

    async def _abort(self) -> None:
        self._abort_on_loop()

    def _abort_on_loop(self) -> None:
        self._drain()  # fails what was handed over and not yet appended
        self._async.abort_unsent()

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything and wait until every record sent so far is acknowledged
        or failed (ClientTimeoutError after `timeout_ms`)."""
        self._thread.run(self._flush(timeout_ms))

    async def _flush(self, timeout_ms: int | None) -> None:
        await self._drained()
        await self._async.flush(timeout_ms)

    def close(self, timeout_ms: int | None = None) -> None:
        """Flush what is queued (at most `timeout_ms`), then release everything.
        Records still unsent at the deadline fail with ClientClosedError. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._thread.run(self._close(timeout_ms))
        finally:
            self._thread.stop()

    async def _close(self, timeout_ms: int | None) -> None:
        await self._drained()
        await self._async.close(timeout_ms)

    def partitions_for(self, topic: str) -> list[int]:
        return self._thread.run(self._async.partitions_for(topic))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed


def _not_sent() -> ClientClosedError:
    return ClientClosedError(
        "the producer was stopped (abort) before this record was sent", sent=False
    )
