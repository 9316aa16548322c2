"""The consumer's fetcher: per-partition positions, long-poll fetches, buffers.

For each assigned partition (`PartitionState`):
- `position` is the offset of the next record `poll` returns (None until
  resolved by a seek, or by `reset_to` = earliest / latest through
  `GET .../offsets` on the leader).
- At most one fetch is in flight, and none while records fetched earlier
  are still buffered, so memory is bounded by one response
  (`max_partition_fetch_bytes`, or one larger batch) per partition, and
  what it inflates to by `max_partition_fetch_decompressed_bytes` (or one
  batch): decoding stops before the batch that would pass it, and the next
  fetch starts there.
- A fetch is `GET .../records?offset=<position>` with
  `Accept: application/vnd.lograft.batch` (raw RecordBatch v2 bytes) and
  `max_wait_ms` (long-poll). Batches may start before the position; records
  below it are skipped, as are control batches. After the buffer is used up
  the position moves to `X-Lograft-Next-Offset` if that is further (it steps
  over offsets compaction removed).
- `epoch` bumps on every seek or reset; a fetch that started under an older
  epoch is discarded when it returns.

Errors: retriable ones (not leader, no leader, unknown partition, network)
mark metadata stale and back off inside the fetch task (the task holds the
partition's fetch slot while it waits, so a failing leader is not hammered);
a NOT_LEADER_OR_FOLLOWER naming the leader is retried there at once.
OFFSET_OUT_OF_RANGE resets the position by `auto_offset_reset`, or with
"none" is raised from the next poll; other errors are raised from the next
poll too, as is a topic or partition that the metadata (every node asked)
says does not exist.

Loop-bound.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from lograft.client.backoff import backoff_ms
from lograft.client.config import ConsumerConfig
from lograft.client.metadata import STALE_METADATA_ERRORS, ClusterMetadata
from lograft.client.transport import (
    BATCH_CONTENT_TYPE,
    HIGH_WATERMARK_HEADER,
    NEXT_OFFSET_HEADER,
    Transport,
)
from lograft.client.types import ConsumerRecord, TimestampType
from lograft.errors import (
    LograftError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.batch import (
    Record,
    iter_batches,
    records_section_within,
    validate_batch,
)
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.record_decode import decode_consumer_records, decode_record_list
from lograft.protocol.topic_partition import TopicPartition


class Missing(Exception):
    """The metadata (every node asked) says the topic or partition does not
    exist. Unlike an UNKNOWN_TOPIC_OR_PARTITION answer to a fetch (a leader
    that has not created its replica yet: retried), this is raised from poll."""

    def __init__(self, error: UnknownTopicOrPartitionError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    reset_to: str | None = None  # "earliest" | "latest": resolve the position lazily
    epoch: int = 0
    # (Record, TimestampType) pairs, or ConsumerRecords when the consumer has
    # no deserializers (Fetcher.raw_records): those are built while decoding.
    buffer: deque[Any] = field(default_factory=deque)
    buffer_next_offset: int = 0  # X-Lograft-Next-Offset of the buffered response
    task: asyncio.Task[None] | None = None  # the fetch or offset lookup in flight
    high_watermark: int | None = None
    failures: int = 0  # consecutive retriable failures (for backoff)
    error: LograftError | None = None  # to raise from the next poll
    # Not fetched nor returned by poll: a group partition whose on_assign has
    # not run yet, or that is being given up.
    paused: bool = False

    def seek(self, offset: int | None, reset_to: str | None = None, *, cancel: bool = True) -> None:
        """New position (or a pending reset); drops buffered records, and the
        fetch in flight (cancel=False from inside that fetch itself)."""
        self.position = offset
        self.reset_to = reset_to
        self.epoch += 1
        self.buffer.clear()
        self.buffer_next_offset = 0
        self.error = None
        if cancel and self.task is not None:
            self.task.cancel()
            self.task = None


def decode(data: bytes, fetch_offset: int, check_crcs: bool) -> list[tuple[Record, TimestampType]]:
    """Records at or after `fetch_offset` in a raw fetch response, control batches skipped."""
    return decode_within(data, fetch_offset, check_crcs, None)[0]


def decode_within(
    data: bytes,
    fetch_offset: int,
    check_crcs: bool,
    decompressed_max: int | None,
    records_of: TopicPartition | None = None,
) -> tuple[list[Any], int | None]:
    """`decode`, with compressed batches inflating to at most `decompressed_max`
    bytes in all (the first one always), and where to fetch next when that
    stopped decoding early (None: the whole response was decoded).

    The items are (Record, TimestampType) pairs, or with `records_of` (a
    consumer without deserializers) the ConsumerRecords of that partition,
    key and value as bytes, built in the same C call as the decoding."""
    out: list[Any] = []
    budget = DecompressionBudget(
        decompressed_max if decompressed_max is not None else 1 << 62,
        "max_partition_fetch_decompressed_bytes",
    )
    for pos, header in iter_batches(data):
        if header.next_offset <= fetch_offset or header.is_control:
            continue
        if check_crcs:
            validate_batch(data, pos, available=header.size)
        ts_type = (
            TimestampType.LOG_APPEND_TIME
            if header.is_log_append_time
            else TimestampType.CREATE_TIME
        )
        section = records_section_within(data, pos, header, budget)
        if section is None:
            return out, max(header.base_offset, fetch_offset)
        # One C call per batch (record_decode); the scanner's read rules first.
        if records_of is not None:
            out += decode_consumer_records(
                section,
                header,
                fetch_offset,
                records_of.topic,
                records_of.partition,
                ts_type,
                ConsumerRecord,
            )
        else:
            out.extend(zip(decode_record_list(section, header, fetch_offset), repeat(ts_type)))
    return out, None


class Fetcher:
    def __init__(
        self,
        config: ConsumerConfig,
        metadata: ClusterMetadata,
        transport: Transport,
        on_change: Callable[[], None],
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.transport = transport
        self.on_change = on_change  # a fetch or lookup finished: poll may have work
        # Keys and values are handed out as bytes: decode straight into
        # ConsumerRecords (no deserializer can fail on one of them).
        self.raw_records = config.key_deserializer is None and config.value_deserializer is None
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.requests = 0

    # -- scheduling -----------------------------------------------------------------------

    def start_work(self) -> None:
        """Start a lookup or fetch for every partition that needs one and has none."""
        loop = asyncio.get_running_loop()
        for tp, st in self.partitions.items():
            if st.task is not None or st.error is not None or st.buffer:
                continue
            if st.position is None:
                # Even when paused: position() in on_assign resolves a reset.
                if st.reset_to is None:
                    continue
                st.task = loop.create_task(self._run(st, self._reset, tp, st.epoch))
            elif not st.paused:
                st.task = loop.create_task(self._run(st, self._fetch, tp, st.epoch))

    async def _run(
        self,
        st: PartitionState,
        work: Callable[[TopicPartition, PartitionState, int], Coroutine[Any, Any, None]],
        tp: TopicPartition,
        epoch: int,
    ) -> None:
        me = asyncio.current_task()
        try:
            await work(tp, st, epoch)
        except Missing as exc:
            st.error = exc.error
        except LograftError as exc:
            st.error = exc
        finally:
            if st.task is me:
                st.task = None
            self.on_change()

    # -- requests to leaders -------------------------------------------------------------

    async def leader_url(self, tp: TopicPartition) -> str:
        try:
            return await self.metadata.find_leader_url(tp)
        except UnknownTopicOrPartitionError as exc:
            raise Missing(exc) from exc

    async def on_retriable(self, tp: TopicPartition, st: PartitionState, exc: LograftError) -> None:
        """Refresh what the error says is stale, then back off (unless redirected)."""
        if isinstance(exc, STALE_METADATA_ERRORS):
            self.metadata.request_update(tp.topic)
        if isinstance(exc, NotLeaderOrFollowerError) and st.failures == 0:
            hint = exc.details
            if self.metadata.apply_leader_hint(tp, hint.get("leader_id"), hint.get("leader_url")):
                st.failures += 1
                return
        st.failures += 1
        cfg = self.config
        await asyncio.sleep(
            backoff_ms(st.failures, cfg.retry_backoff_ms, cfg.retry_backoff_max_ms) / 1000
        )

    async def list_offsets(
        self, tp: TopicPartition, timestamp: int | None = None
    ) -> dict[str, Any]:
        """One `GET .../offsets` on the leader (typed error on failure)."""
        url = await self.leader_url(tp)
        params = {"timestamp": str(timestamp)} if timestamp is not None else None
        self.requests += 1
        resp = await self.transport.request(
            "GET",
            f"{url}/v1/topics/{tp.topic}/partitions/{tp.partition}/offsets",
            params=params,
            timeout_ms=self.config.request_timeout_ms,
        )
        doc = resp.ok_json()
        assert isinstance(doc, dict)
        return doc

    async def _reset(self, tp: TopicPartition, st: PartitionState, epoch: int) -> None:
        try:
            doc = await self.list_offsets(tp)
        except LograftError as exc:
            if not exc.retriable:
                raise
            await self.on_retriable(tp, st, exc)
            return
        if st.epoch != epoch or st.reset_to is None:
            return
        key = "earliest" if st.reset_to == "earliest" else "latest"
        st.position = int(doc[key])
        st.reset_to = None
        st.failures = 0

    async def _fetch(self, tp: TopicPartition, st: PartitionState, epoch: int) -> None:
        offset = st.position
        assert offset is not None
        cfg = self.config
        try:
            url = await self.leader_url(tp)
            self.requests += 1
            resp = await self.transport.request(
                "GET",
                f"{url}/v1/topics/{tp.topic}/partitions/{tp.partition}/records",
                params={
                    "offset": str(offset),
                    "max_bytes": str(cfg.max_partition_fetch_bytes),
                    "max_wait_ms": str(cfg.fetch_max_wait_ms),
                    "min_bytes": str(cfg.fetch_min_bytes),
                },
                headers={"Accept": BATCH_CONTENT_TYPE},
                timeout_ms=cfg.request_timeout_ms,
                body_max_bytes=cfg.fetch_response_max_bytes,
            )
            if not resp.ok:
                raise resp.error()
        except OffsetOutOfRangeError:
            if st.epoch != epoch:
                return
            if cfg.auto_offset_reset == "none":
                raise
            st.seek(None, cfg.auto_offset_reset, cancel=False)
            return
        except LograftError as exc:
            if not exc.retriable:
                raise
            await self.on_retriable(tp, st, exc)
            return
        if st.epoch != epoch:
            return  # a seek happened while we waited
        st.failures = 0
        hw = resp.headers.get(HIGH_WATERMARK_HEADER)
        if hw is not None:
            st.high_watermark = int(hw)
        next_offset = int(resp.headers.get(NEXT_OFFSET_HEADER, offset))
        records, cut_at = decode_within(
            resp.body,
            offset,
            cfg.check_crcs,
            cfg.max_partition_fetch_decompressed_bytes,
            tp if self.raw_records else None,
        )
        if cut_at is not None:
            next_offset = cut_at  # the rest of the response is fetched again
        if records:
            st.buffer.extend(records)
            st.buffer_next_offset = next_offset
        elif next_offset > offset:
            st.position = next_offset  # only control batches or compacted-away offsets

    # -- assignment ------------------------------------------------------------------------

    def assign(self, tps: list[TopicPartition], default_reset: str) -> None:
        keep = {tp: self.partitions[tp] for tp in tps if tp in self.partitions}
        for tp, st in self.partitions.items():
            if tp not in keep:
                st.seek(None)
        for tp in tps:
            if tp not in keep:
                keep[tp] = PartitionState(
                    reset_to=None if default_reset == "none" else default_reset
                )
        self.partitions = keep

    def add(self, tp: TopicPartition, state: PartitionState) -> None:
        """Take one more partition (a group assignment); replaces any old state."""
        old = self.partitions.pop(tp, None)
        if old is not None:
            old.seek(None)
        self.partitions[tp] = state

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            st = self.partitions.pop(tp, None)
            if st is not None:
                st.seek(None)  # cancels its fetch

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            st = self.partitions.get(tp)
            if st is not None:
                st.paused = True

    def drop_all(self) -> frozenset[TopicPartition]:
        """Forget every partition (a group member lost them); returns them."""
        had = frozenset(self.partitions)
        self.remove(had)
        return had

    async def close(self) -> None:
        tasks = [st.task for st in self.partitions.values() if st.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
