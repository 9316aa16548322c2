"""`AsyncProducer`: the asyncio producer (shaped like aiokafka's AIOKafkaProducer).

    async with AsyncProducer("http://127.0.0.1:9091", value_serializer=serializers.json) as p:
        fut = await p.send("orders", {"n": 1}, key=b"alice")
        meta = await fut            # RecordMetadata(topic, partition, offset, timestamp)
        await p.send_and_wait("orders", {"n": 2})

`send` serializes, picks the partition, waits (at most `max_block_ms`) for
metadata and buffer room, appends the record to its partition's batch and
returns a future; the sender (see `sender.py`) delivers batches. Records of
one partition are acknowledged in `send` order.

Threads: the sender runs on the loop that called `start()`; records are
appended to the accumulator from any thread (the sync `Producer` appends in
its callers' threads, see sync_producer.py), and the loop is told once per
batch opened or filled (`_on_news`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from lograft.client.accumulator import Appended, NeedMemory, RecordAccumulator
from lograft.client.arrow_columns import ArrowColumns
from lograft.client.buffer_pool import BufferPool
from lograft.client.config import ProducerConfig, make_config
from lograft.client.errors import ClientClosedError, ClientTimeoutError, SerializationError
from lograft.client.idempotence import IdempotenceState
from lograft.client.many_results import ManyResults
from lograft.client.metadata import TopicMetadata, connect
from lograft.client.partitioning import StickyPartitioner
from lograft.client.producer_batch import Completion, estimate_size
from lograft.client.sender import ProducerStats, Sender
from lograft.client.serde import Serializer, bytes_serializer
from lograft.client.throttle import throttle_stats_of
from lograft.client.transport import Transport
from lograft.client.types import Header, RecordMetadata
from lograft.errors import RecordTooLargeError, UnknownTopicOrPartitionError
from lograft.protocol.batch import HEADER_SIZE

HeadersInput = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

# A record's timestamp, in milliseconds since the epoch: Kafka's producer
# refuses a negative one, and an int64 holds the rest. Two timestamps in this
# range are always less than 2^63 apart, so the timestampDelta of any record
# against its batch's first fits the varlong the format gives it.
TIMESTAMP_MS_MAX = (1 << 63) - 1


def normalize_headers(headers: HeadersInput) -> tuple[Header, ...]:
    """[(key, value)] or {key: value}; str values are UTF-8 encoded."""
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[Header] = []
    for item in items:
        try:
            k, v = item
        except (TypeError, ValueError):
            raise SerializationError(
                f"a header must be a (key, value) pair, got {item!r}"
            ) from None
        if not isinstance(k, str):
            raise SerializationError(f"header keys are str, got {type(k).__name__}")
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif v is not None and not isinstance(v, bytes):
            if not isinstance(v, bytearray | memoryview):
                raise SerializationError(
                    f"header {k!r}: values are bytes, str or None, got {type(v).__name__}"
                )
            v = bytes(v)
        out.append((k, v))
    return tuple(out)


def checked_timestamp(timestamp_ms: Any) -> int:
    """`timestamp_ms` as an int in 0..TIMESTAMP_MS_MAX (SerializationError otherwise)."""
    try:
        ts = int(timestamp_ms)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(
            f"timestamp_ms must be an int (milliseconds since the epoch), got {timestamp_ms!r}"
        ) from exc
    if not 0 <= ts <= TIMESTAMP_MS_MAX:
        raise SerializationError(
            f"timestamp_ms must be 0..{TIMESTAMP_MS_MAX} (milliseconds since the epoch), got {ts}"
        )
    return ts


def serialize(fn: Serializer | None, what: str, topic: str, data: Any) -> bytes | None:
    if data is None:
        return None
    try:
        return (fn or bytes_serializer)(data)
    except Exception as exc:
        raise SerializationError(f"cannot serialize the {what} for topic {topic!r}: {exc}") from exc


def raw_column(
    config: ProducerConfig,
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[HeadersInput] | None,
    partition: int | None,
) -> bool:
    """Whether a send_many can hand whole runs of `values` to the batch
    encoder in one call: keyless, headerless, no explicit partition, and no
    value serializer (values are bytes-like or None as they are)."""
    return (
        config.value_serializer is None and keys is None and headers is None and partition is None
    )


def check_columns(
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[HeadersInput] | None,
    timestamps_ms: Sequence[int | None] | None,
) -> int:
    """The record count of a `send_many`, once every column given has one
    entry per value (SerializationError names the one that does not)."""
    count = len(values)
    for name, column in (
        ("keys", keys),
        ("headers", headers),
        ("timestamps_ms", timestamps_ms),
    ):
        if column is not None and len(column) != count:
            raise SerializationError(f"send_many: {name} has {len(column)} entries, values {count}")
    if timestamps_ms is not None:
        # The raw path hands the column to the encoder as it is; it must not
        # take a timestamp send() would refuse.
        for i, ts in enumerate(timestamps_ms):
            # every int checked_timestamp takes, without a call per record
            if ts is not None and not (type(ts) is int and 0 <= ts <= TIMESTAMP_MS_MAX):
                try:
                    checked_timestamp(ts)
                except SerializationError as exc:
                    raise SerializationError(f"send_many: timestamps_ms[{i}]: {exc}") from None
    return count


class PreparedRecord:
    """A record serialized and sized in the caller's context, ready to append."""

    __slots__ = ("headers", "key", "partition", "size", "timestamp_ms", "topic", "value")

    def __init__(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...],
        partition: int | None,
        timestamp_ms: int,
        size: int,
    ) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.partition = partition
        self.timestamp_ms = timestamp_ms
        self.size = size


def prepare(
    config: ProducerConfig,
    topic: str,
    value: Any,
    key: Any,
    headers: HeadersInput,
    partition: int | None,
    timestamp_ms: int | None,
) -> PreparedRecord:
    if not isinstance(topic, str) or not topic:
        raise SerializationError(f"topic must be a non-empty str, got {topic!r}")
    if partition is not None and (not isinstance(partition, int) or partition < 0):
        raise SerializationError(f"partition must be an int >= 0, got {partition!r}")
    key_b = serialize(config.key_serializer, "key", topic, key)
    value_b = serialize(config.value_serializer, "value", topic, value)
    hdrs = normalize_headers(headers)
    size = estimate_size(key_b, value_b, hdrs)
    if size + HEADER_SIZE > config.max_request_bytes:
        raise RecordTooLargeError(
            f"a record of ~{size} bytes does not fit in max_request_bytes="
            f"{config.max_request_bytes}",
            size=size,
        )
    ts = int(time.time() * 1000) if timestamp_ms is None else checked_timestamp(timestamp_ms)
    return PreparedRecord(topic, key_b, value_b, hdrs, partition, ts, size)


class AsyncProducer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transport: Transport | None = None,
        **settings: Any,
    ) -> None:
        """Settings: see `ProducerConfig` (and docs/client.md). `transport`
        replaces the HTTP transport (tests wrap it)."""
        self.config: ProducerConfig = make_config(ProducerConfig, bootstrap_servers, settings)
        self._transport, self.metadata = connect(self.config, transport)
        self.pool = BufferPool(self.config.buffer_memory_bytes)
        self.stats = ProducerStats(throttle=throttle_stats_of(self._transport))
        self._partitioner = StickyPartitioner()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._acc: RecordAccumulator | None = None
        self._sender: Sender | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._start_lock: asyncio.Lock | None = None
        self._closed = False

    # -- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Bind to the running loop, read the broker list from any bootstrap node
        (ClusterUnreachableError names every URL if none answers), start the sender.
        Idempotent; `send` calls it if needed."""
        if self._sender_task is not None:
            return
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._sender_task is not None:
                return
            loop = asyncio.get_running_loop()
            await self.metadata.bootstrap_brokers()
            self._loop = loop
            self._acc = RecordAccumulator(
                batch_bytes=self.config.batch_bytes,
                linger_ms=self.config.linger_ms,
                loop=loop,
                batch_records=self.config.batch_records,
                pool=self.pool,
                max_request_bytes=self.config.max_request_bytes,
                partitioner=self._partitioner,
                on_news=self._on_news,
            )
            idem = IdempotenceState(self._init_producer_id) if self.config.idempotent else None
            self._sender = Sender(
                self.config, self._acc, self.metadata, self._transport, self.pool, idem, self.stats
            )
            self._sender_task = loop.create_task(self._sender.run())
            # A send waiting for buffer room makes every batch ready (thread-safe:
            # the sync Producer's callers wait in their own threads).
            self.pool.on_wait = partial(loop.call_soon_threadsafe, self._sender.wakeup)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _init_producer_id(self) -> tuple[int, int]:
        resp = await self.metadata.request_any("POST", "/v1/producers")
        doc = resp.ok_json()
        return int(doc["producer_id"]), int(doc["producer_epoch"])

    # -- sending ------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: HeadersInput = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves to its RecordMetadata
        (or the typed error). Raises at once for a closed producer, a record
        that cannot be serialized or is too large, an unknown topic or
        partition, and BufferFullError after `max_block_ms` without room."""
        self._check_open()
        if self._sender_task is None:
            await self.start()
        rec = prepare(self.config, topic, value, key, headers, partition, timestamp_ms)
        loop = self._loop
        assert loop is not None
        meta = self.metadata.cached(topic)  # the fast path: no await per record
        if meta is None or (partition is not None and partition >= meta.count):
            deadline = loop.time() + self.config.max_block_ms / 1000
            meta = await self.wait_for_topic(topic, self.config.max_block_ms)
            if partition is not None and partition >= meta.count:
                meta = await self.metadata.refresh(topic)  # partitions may have been added
            remaining_ms = max(0, int((deadline - loop.time()) * 1000))
        else:
            remaining_ms = self.config.max_block_ms
        fut: asyncio.Future[RecordMetadata] = loop.create_future()
        out = await self._append(rec, meta, fut, remaining_ms)
        if out.index == 0 or out.batch.is_full():
            # A send that never suspends would starve the sender: a caller
            # looping over `await send(...)` yields once per batch.
            await asyncio.sleep(0)
        return fut

    async def _append(
        self,
        rec: PreparedRecord,
        meta: TopicMetadata,
        completion: Completion | None,
        remaining_ms: int,
        span: tuple[ManyResults, int] | None = None,
    ) -> Appended:
        """Append a prepared record, waiting (at most `remaining_ms`) for room
        in the buffer pool when a new batch is needed."""
        acc = self._acc
        assert acc is not None, "start() first"
        reserved = 0
        while True:
            self._check_open()
            out = acc.append(
                meta,
                rec.value,
                rec.key,
                rec.headers or None,
                rec.partition,
                rec.timestamp_ms,
                completion,
                reserved=reserved,
                size=rec.size,
                span=span,
            )
            if isinstance(out, Appended):
                return out
            await self.pool.reserve(out.size, remaining_ms)
            reserved = out.size

    async def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[HeadersInput] | None = None,
        partition: int | None = None,
        timestamps_ms: Sequence[int | None] | None = None,
    ) -> asyncio.Future[Sequence[RecordMetadata]]:
        """Queue many records of one topic in one call: `values[i]` with
        `keys[i]`, `headers[i]`, `timestamps_ms[i]` (each column optional, of
        the same length). Each record is serialized, partitioned and
        acknowledged exactly as `send` would (same order, same partitioner,
        same idempotent sequences); what is saved is the per-record await and
        future. The returned future resolves to the RecordMetadata of every
        record in order, or fails with the first record's error. Raises as
        `send` does; when it raises part-way, the records before the one
        that failed are queued (and the returned future was never made)."""
        many = await self.queue_many(topic, values, keys, headers, partition, timestamps_ms)
        assert self._loop is not None
        return asyncio.wrap_future(many, loop=self._loop)

    async def queue_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[HeadersInput] | None,
        partition: int | None,
        timestamps_ms: Sequence[int | None] | None,
    ) -> concurrent.futures.Future[Sequence[RecordMetadata]]:
        """`send_many` answering with a thread-safe future (the sync Producer's)."""
        self._check_open()
        if self._sender_task is None:
            await self.start()
        count = check_columns(values, keys, headers, timestamps_ms)
        meta = await self._topic_for(topic, partition)
        many = ManyResults(count)
        acc = self._acc
        assert acc is not None
        if raw_column(self.config, values, keys, headers, partition):
            start = 0
            while start < count:
                self._check_open()
                ran = acc.append_many(meta, values, timestamps_ms, many, start)
                while isinstance(ran, NeedMemory):
                    await self.pool.reserve(ran.size, self.config.max_block_ms)
                    start = ran.start  # the records before it are in
                    ran = acc.append_many(
                        meta, values, timestamps_ms, many, start, reserved=ran.size
                    )
                start = ran
                await asyncio.sleep(0)  # let the sender run, as send does once per batch
            return many.future
        now_ms = int(time.time() * 1000)
        config = self.config
        news = False
        for i in range(count):
            ts = timestamps_ms[i] if timestamps_ms is not None else None
            rec = prepare(
                config,
                topic,
                values[i],
                keys[i] if keys is not None else None,
                headers[i] if headers is not None else None,
                partition,
                now_ms if ts is None else ts,
            )
            out = await self._append(rec, meta, None, config.max_block_ms, (many, i))
            news = news or out.index == 0
        if news:
            await asyncio.sleep(0)  # let the sender run, as send does once per batch
        return many.future

    async def send_arrow(
        self, topic: str, batch: Any, *, partition: int | None = None
    ) -> asyncio.Future[Sequence[RecordMetadata]]:
        """`send_many` from the columns of a pyarrow RecordBatch or Table:
        `value` (binary or string), optional `key`, `timestamp` (int64 ms or
        an Arrow timestamp) and `headers` (list<struct<key: string, value:
        binary>>); see lograft.client.arrow_columns."""
        cols = ArrowColumns(batch)
        return await self.send_many(
            topic,
            cols.values,
            cols.keys,
            headers=cols.headers,
            partition=partition,
            timestamps_ms=cols.timestamps_ms,
        )

    async def _topic_for(self, topic: str, partition: int | None) -> TopicMetadata:
        """The topic's layout for a send to `partition` (None: any)."""
        meta = self.metadata.cached(topic)
        if meta is None or (partition is not None and partition >= meta.count):
            meta = await self.wait_for_topic(topic, self.config.max_block_ms)
            if partition is not None and partition >= meta.count:
                meta = await self.metadata.refresh(topic)
        if partition is not None and partition >= meta.count:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} does not exist; it has {meta.count}",
                topic=topic,
                partition=partition,
            )
        return meta

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: HeadersInput = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        fut = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await fut

    async def wait_for_topic(self, topic: str, timeout_ms: int) -> TopicMetadata:
        """The topic's layout, from the cache or fetched (bounded by `timeout_ms`).
        An unknown topic raises UnknownTopicOrPartitionError once every reachable
        node says so; an unreachable cluster raises ClusterUnreachableError."""
        meta = self.metadata.cached(topic)
        if meta is not None:
            # Stale leaders do not matter here (the sender refreshes before it
            # sends); the partition count is all a send needs.
            return meta
        try:
            # asyncio.timeout, not wait_for, which on Python 3.11 can swallow a cancel.
            async with asyncio.timeout(timeout_ms / 1000):
                return await self.metadata.refresh(topic)
        except TimeoutError:
            raise ClientTimeoutError(
                f"no metadata for topic {topic!r} within max_block_ms={timeout_ms}", topic=topic
            ) from None

    def _on_news(self, topic: str) -> None:
        """A batch opened or filled (any thread): wake the sender, and pick up
        added partitions now and then."""
        loop = self._loop
        assert loop is not None
        if asyncio._get_running_loop() is loop:
            self._news_on_loop(topic)
        else:
            loop.call_soon_threadsafe(self._news_on_loop, topic)

    def _news_on_loop(self, topic: str) -> None:
        if self._sender is not None:
            self._sender.wakeup()
        self.metadata.refresh_if_old(topic)

    # -- flush and close ----------------------------------------------------------------

    async def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now (ignoring linger) and wait until every record
        sent before this call is acknowledged or failed. Raises ClientTimeoutError
        if that takes longer than `timeout_ms`. Failures stay on the records' futures."""
        acc, sender = self._acc, self._sender
        if acc is None or sender is None:
            return
        pending = acc.pending_done()
        if not pending:
            return
        sender.flushing += 1
        sender.wakeup()
        try:
            _done, not_done = await asyncio.wait(
                pending, timeout=None if timeout_ms is None else timeout_ms / 1000
            )
        finally:
            sender.flushing -= 1
        if not_done:
            raise ClientTimeoutError(
                f"flush: {len(not_done)} batch(es) still unacknowledged after {timeout_ms} ms"
            )

    async def close(self, timeout_ms: int | None = None) -> None:
        """Stop accepting records, send what is queued and wait for it (at most
        `timeout_ms`; None: until every batch is done, which delivery_timeout_ms
        bounds). What is still unsent at the deadline fails with ClientClosedError.
        Idempotent."""
        if self._closed and self._sender_task is None:
            return
        self._closed = True
        if self._acc is not None:
            self._acc.close_appends()
        sender, task = self._sender, self._sender_task
        if sender is not None and task is not None:
            sender.closing = True
            sender.wakeup()
            _done, pending = await asyncio.wait(
                [task], timeout=None if timeout_ms is None else timeout_ms / 1000
            )
            if pending:
                await sender.abort()
                await asyncio.wait([task], timeout=5)
                if not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            elif task.exception() is not None:  # pragma: no cover - a sender bug
                raise task.exception()  # type: ignore[misc]
        self._sender_task = None
        await self.metadata.close()
        await self._transport.close()

    def abort_unsent(self) -> None:
        """Stop at once, on the producer's loop (a record's callback runs there):
        records not yet sent fail with ClientClosedError (`details["sent"]`
        False), later sends raise it; requests in flight finish and resolve
        their records. Kafka's `close(0)` from a callback, the way to keep the
        records after a failed one out of the log. close() still waits for
        what is in flight and releases the connections."""
        self._closed = True
        if self._acc is not None:
            self._acc.close_appends()
        if self._sender is not None:
            self._sender.abort_queued()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the producer is closed; records can no longer be sent")

    # -- information ----------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        meta = await self.wait_for_topic(topic, self.config.max_block_ms)
        return list(range(meta.count))

    @property
    def closed(self) -> bool:
        return self._closed
