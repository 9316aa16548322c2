"""`Producer`: the synchronous producer (shaped like kafka-python's KafkaProducer).

    producer = Producer("http://127.0.0.1:9091", value_serializer=serializers.json)
    future = producer.send("orders", {"n": 1}, key=b"alice")
    meta = future.get(timeout=10)     # RecordMetadata
    producer.flush()
    producer.close()

An `AsyncProducer` runs on an event loop in a background thread; `send`
appends the record to its partition's open batch in the caller's thread
(the accumulator is thread-safe) and the loop only sends batches. The
common case costs one C call and one small future: a record of bytes (no
serializer, no headers, no explicit partition) going to a batch that is
already open is encoded straight into it (`OpenBatch.append`, lock-free,
see accumulator.py); its `FutureRecordMetadata` is the batch and the
record's index, its metadata computed when read. Everything else (a new
batch, serializers, headers, an explicit partition, a topic not yet known)
takes the full path: serialize and check the record, then
`RecordAccumulator.append` under its lock, waiting at most `max_block_ms`
for metadata and for buffer room when a new batch must be opened. The loop
is woken once per batch (opened or full), not per record. Records keep
their `send` order per partition: a thread's appends to a partition go
into its batches in order.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Sequence
from typing import Any

from lograft.client.accumulator import Appended, NeedMemory, RecordAccumulator
from lograft.client.arrow_columns import ArrowColumns
from lograft.client.errors import ClientClosedError, SerializationError
from lograft.client.loop_thread import LoopThread
from lograft.client.many_results import ManyResults
from lograft.client.metadata import TopicMetadata
from lograft.client.producer import (
    TIMESTAMP_MS_MAX,
    AsyncProducer,
    HeadersInput,
    check_columns,
    prepare,
    raw_column,
)
from lograft.client.producer_batch import ProducerBatch
from lograft.client.record_future import FutureRecordMetadata
from lograft.client.sender import ProducerStats
from lograft.client.transport import Transport
from lograft.client.types import RecordMetadata
from lograft.errors import UnknownTopicOrPartitionError
from lograft.protocol.partitioner import murmur2


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
        # Records of bytes as they are: the lock-free path may take them.
        self._raw = self.config.value_serializer is None and self.config.key_serializer is None
        self._thread = LoopThread("lograft-producer", self.config.event_loop)
        self._close_lock = threading.Lock()
        self._closed = False
        self._aborted = False
        self._thread.start_client(self._async.start, self._async.close)
        acc = self._async._acc
        assert acc is not None
        self._acc: RecordAccumulator = acc
        self._sticky = acc.sticky
        # Looked up with plain (topic, partition) tuples: equal to, and hashed
        # as, the TopicPartition keys, without building one per record.
        self._open: dict[Any, ProducerBatch] = acc.open
        self._cached = self._async.metadata.cached
        # Without the C OpenBatch every record takes the locked path.
        self._raw = self._raw and acc.lock_free_appends

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
        if (
            headers is None
            and partition is None
            and self._raw
            # a timestamp the encoder may take as it is (else prepare() says why not)
            and (
                timestamp_ms is None
                or (type(timestamp_ms) is int and 0 <= timestamp_ms <= TIMESTAMP_MS_MAX)
            )
        ):
            # The lock-free path: an open batch takes the record as it is.
            batch = None
            try:
                if key is None:
                    batch = self._sticky.get(topic)
                else:
                    meta = self._cached(topic)
                    if meta is not None:
                        # partition_for_key, inlined: Kafka's murmur2 partitioner
                        p = (murmur2(key) & 0x7FFFFFFF) % meta.count
                        batch = self._open.get((topic, p))
                if batch is not None:
                    i = batch.records.append(value, key, None, timestamp_ms)
                    if i >= 0:
                        if batch.records.full:
                            self._acc.filled(batch)
                        return FutureRecordMetadata(batch, i)
            except TypeError:
                pass  # not bytes: the full path says what is wrong
        return self._send(topic, value, key, headers, partition, timestamp_ms)

    def _send(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: HeadersInput,
        partition: int | None,
        timestamp_ms: int | None,
        span: tuple[ManyResults, int] | None = None,
    ) -> FutureRecordMetadata:
        if self._closed or self._aborted:
            raise ClientClosedError("the producer is closed; records can no longer be sent")
        cfg = self.config
        rec = prepare(cfg, topic, value, key, headers, partition, timestamp_ms)
        deadline = time.monotonic() + cfg.max_block_ms / 1000
        meta = self._topic(topic, partition)
        reserved = 0
        while True:
            if self._closed or self._aborted:
                if reserved:
                    self._async.pool.release(reserved)
                raise ClientClosedError("the producer is closed; records can no longer be sent")
            out = self._acc.append(
                meta,
                rec.value,
                rec.key,
                rec.headers or None,
                rec.partition,
                rec.timestamp_ms,
                reserved=reserved,
                size=rec.size,
                span=span,
            )
            if isinstance(out, Appended):
                return FutureRecordMetadata(out.batch, out.index)
            self._reserve(out, deadline)
            reserved = out.size

    def _reserve(self, need: NeedMemory, deadline: float) -> None:
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        self._async.pool.reserve_blocking(need.size, remaining_ms)

    def _topic(self, topic: str, partition: int | None) -> TopicMetadata:
        """The topic's layout for a send to `partition` (None: any), fetched
        on the loop when not cached (at most `max_block_ms`)."""
        meta = self._cached(topic)
        if meta is None or (partition is not None and partition >= meta.count):
            meta = self._thread.run(self._fetch_topic(topic, partition))
        if partition is not None and partition >= meta.count:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} does not exist; it has {meta.count}",
                topic=topic,
                partition=partition,
            )
        return meta

    def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[HeadersInput] | None = None,
        partition: int | None = None,
        timestamps_ms: Sequence[int | None] | None = None,
    ) -> concurrent.futures.Future[Sequence[RecordMetadata]]:
        """`AsyncProducer.send_many` from this thread: blocks until every
        record is queued (at most `max_block_ms` per wait for buffer room);
        the future resolves to every record's RecordMetadata, in order (a
        `RecordMetadataList`, computed when read). Keyless, headerless records
        of bytes without a value serializer are encoded a run per batch, in
        one C call each."""
        if self._closed or self._aborted:
            raise ClientClosedError("the producer is closed; records can no longer be sent")
        count = check_columns(values, keys, headers, timestamps_ms)
        if not isinstance(topic, str) or not topic:
            raise SerializationError(f"topic must be a non-empty str, got {topic!r}")
        meta = self._topic(topic, partition)
        many = ManyResults(count)
        if raw_column(self.config, values, keys, headers, partition):
            start = 0
            while start < count:
                self._check_open()
                out = self._acc.append_many(meta, values, timestamps_ms, many, start)
                while isinstance(out, NeedMemory):
                    # at most max_block_ms per wait for room
                    self._reserve(out, time.monotonic() + self.config.max_block_ms / 1000)
                    start = out.start  # the records before it are in
                    out = self._acc.append_many(
                        meta, values, timestamps_ms, many, start, reserved=out.size
                    )
                start = out
            return many.future
        now_ms = int(time.time() * 1000)
        for i in range(count):
            ts = timestamps_ms[i] if timestamps_ms is not None else None
            self._send(
                topic,
                values[i],
                keys[i] if keys is not None else None,
                headers[i] if headers is not None else None,
                partition,
                now_ms if ts is None else ts,
                (many, i),
            )
        return many.future

    def send_arrow(
        self, topic: str, batch: Any, *, partition: int | None = None
    ) -> concurrent.futures.Future[Sequence[RecordMetadata]]:
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

    def _check_open(self) -> None:
        if self._closed or self._aborted:
            raise ClientClosedError("the producer is closed; records can no longer be sent")

    async def _fetch_topic(self, topic: str, partition: int | None) -> Any:
        meta = await self._async.wait_for_topic(topic, self.config.max_block_ms)
        if partition is not None and partition >= meta.count:
            meta = await self._async.metadata.refresh(topic)
        return meta

    def abort(self) -> None:
        """Stop sending at once, from any thread, a record's callback included
        (see `AsyncProducer.abort_unsent`): records not yet sent fail with
        ClientClosedError, later sends raise it, requests in flight finish.
        Call close() afterwards to wait for those and release everything."""
        self._aborted = True
        if self._thread.in_loop_thread():
            self._async.abort_unsent()
        elif not self._closed:
            self._thread.run(self._abort())

    async def _abort(self) -> None:
        self._async.abort_unsent()

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything and wait until every record sent so far is acknowledged
        or failed (ClientTimeoutError after `timeout_ms`)."""
        self._thread.run(self._async.flush(timeout_ms))

    def close(self, timeout_ms: int | None = None) -> None:
        """Flush what is queued (at most `timeout_ms`), then release everything.
        Records still unsent at the deadline fail with ClientClosedError. Idempotent.
        Works from any thread; from a record's callback (the producer's own
        loop thread, which cannot wait for itself) it is `abort()` and returns
        at once, the loop thread finishing the close and ending by itself."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._thread.in_loop_thread():
            # As Kafka's close() from a callback, close(0): what is unsent fails.
            self._aborted = True
            self._async.abort_unsent()
            self._thread.finish_from_inside(self._async.close(timeout_ms))
            return
        try:
            self._thread.run(self._async.close(timeout_ms))
        finally:
            self._thread.stop()

    def partitions_for(self, topic: str) -> list[int]:
        return self._thread.run(self._async.partitions_for(topic))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed
