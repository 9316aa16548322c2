"""What the Spark driver asks the cluster: which partitions a subscription
covers, their earliest and latest offsets, offsets for timestamps, leaders.

The driver side of the source (the batch reader's planning, the stream
reader's `initialOffset` / `latestOffset` / `partitions`) runs synchronous
Python; this wraps the asyncio client (`ClusterMetadata`, the consumer's
`Fetcher` for `GET .../offsets` on each leader) behind blocking calls on a
private event loop, with no thread. Lookups of many partitions run
concurrently; a retriable failure (leader moving, node down) is retried with
the client's backoff until `offsetLookupTimeoutMs`, then raised.

"latest" is the high watermark: a query never plans to read a record that is
not committed, so a failover cannot take back what a batch has read.

The object holds a loop and connections: build it where it is used (it is
not picklable) and `close()` it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from lograft.client.backoff import backoff_ms
from lograft.client.config import ConsumerConfig
from lograft.client.errors import UnexpectedResponseError
from lograft.client.fetcher import Fetcher, Missing, PartitionState
from lograft.client.metadata import connect
from lograft.errors import LograftError, UnknownTopicOrPartitionError
from lograft.pipelines.options import SourceOptions, Subscription
from lograft.protocol.topic_partition import TopicPartition

T = TypeVar("T")

# Kafka consumers leave internal topics out of pattern subscriptions
# (exclude.internal.topics); so does this source. Equal to
# lograft.brokers.groups.placement.CONSUMER_OFFSETS_TOPIC (the client imports
# no server code).
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's log start offset and high watermark."""

    earliest: int
    latest: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: str
    partitions: int


class ClusterLookup:
    def __init__(self, opts: SourceOptions) -> None:
        self._config = ConsumerConfig(
            bootstrap_servers=opts.bootstrap,
            request_timeout_ms=opts.request_timeout_ms,
            default_api_timeout_ms=opts.offset_lookup_timeout_ms,
            client_id="lograft-spark-driver",
            **dict(opts.security),
        )
        self._loop = asyncio.new_event_loop()
        self._transport, self.metadata = connect(self._config, None)
        self._fetcher = Fetcher(self._config, self.metadata, self._transport, lambda: None)
        self._closed = False

    def _run(self, coro: Awaitable[T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.metadata.close())
            self._run(self._transport.close())
        finally:
            self._loop.close()

    def __enter__(self) -> ClusterLookup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics and partitions ------------------------------------------------------------

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic the cluster has now (`GET /v1/topics` on any node)."""

        async def fetch() -> Any:
            return await self._retry(None, self._list_topics)

        doc = self._run(fetch())
        try:
            return {
                str(t["name"]): TopicInfo(str(t.get("topic_id", "")), int(t["partitions"]))
                for t in doc["topics"]
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise UnexpectedResponseError(f"topic list is malformed: {exc!r}") from None

    async def _list_topics(self) -> Any:
        resp = await self.metadata.request_any("GET", "/v1/topics")
        return resp.ok_json()

    def partitions(
        self, subscription: Subscription, topics: dict[str, TopicInfo]
    ) -> list[TopicPartition]:
        """The partitions a subscription covers now. A subscribed topic that
        does not exist has none (as a Kafka subscription); an assigned
        partition that does not exist is an error."""
        if subscription.kind == "assign":
            for tp in subscription.assigned:
                info = topics.get(tp.topic)
                if info is None or tp.partition >= info.partitions:
                    have = "does not exist" if info is None else f"has {info.partitions} partitions"
                    raise UnknownTopicOrPartitionError(
                        f"option 'assign' names {tp}, but topic {tp.topic!r} {have}",
                        topic=tp.topic,
                        partition=tp.partition,
                    )
            return sorted(subscription.assigned)
        out: list[TopicPartition] = []
        for name, info in topics.items():
            if subscription.kind == "subscribePattern" and name in INTERNAL_TOPICS:
                continue
            if subscription.matches(name):
                out.extend(TopicPartition(name, p) for p in range(info.partitions))
        return sorted(out)

    def really_gone(self, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Of partitions missing from a `topics()` answer, those that are gone.

        One node's view can lag the others' (a node catching up on the
        metadata log), and a partition count never shrinks while a topic
        lives: ask for each topic's layout again (`ClusterMetadata.refresh`
        calls a topic unknown only when every reachable node says so) before
        calling its partitions gone."""

        async def layouts(topics: list[str]) -> list[Any]:
            return await asyncio.gather(
                *(self.metadata.refresh(t) for t in topics), return_exceptions=True
            )

        tps = list(tps)
        topics = sorted({tp.topic for tp in tps})
        counts: dict[str, int] = {}
        for topic, answer in zip(topics, self._run(layouts(topics)), strict=True):
            if isinstance(answer, UnknownTopicOrPartitionError):
                counts[topic] = 0
            elif isinstance(answer, BaseException):
                raise answer
            else:
                counts[topic] = answer.count
        return {tp for tp in tps if tp.partition >= counts[tp.topic]}

    # -- offsets ---------------------------------------------------------------------------

    def bounds(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Bounds]:
        """Log start offset and high watermark of each partition, concurrently."""
        tps = list(tps)

        async def all_bounds() -> list[dict[str, Any]]:
            return await asyncio.gather(*(self._offsets_doc(tp) for tp in tps))

        docs = self._run(all_bounds())
        return {
            tp: Bounds(int(doc["earliest"]), int(doc["latest"]))
            for tp, doc in zip(tps, docs, strict=True)
        }

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """Per partition, the offset of the first record at or after the
        timestamp (ms) below the high watermark, or None if there is none."""
        tps = list(timestamps)

        async def lookups() -> list[dict[str, Any]]:
            return await asyncio.gather(*(self._offsets_doc(tp, timestamps[tp]) for tp in tps))

        out: dict[TopicPartition, int | None] = {}
        for tp, doc in zip(tps, self._run(lookups()), strict=True):
            found = doc.get("offset_for_timestamp")
            out[tp] = int(found["offset"]) if found else None
        return out

    def leader_url(self, tp: TopicPartition) -> str | None:
        """The partition's leader per the cached metadata (a hint for executors)."""
        return self.metadata.leader_url(tp)

    async def _offsets_doc(self, tp: TopicPartition, timestamp: int | None = None) -> Any:
        return await self._retry(tp, lambda: self._fetcher.list_offsets(tp, timestamp))

    async def _retry(self, tp: TopicPartition | None, call: Any) -> Any:
        """`call()` until it succeeds, a non-retriable error, or the lookup timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.default_api_timeout_ms / 1000
        scratch = PartitionState()  # the backoff counter of this lookup
        while True:
            try:
                return await call()
            except Missing as exc:
                raise exc.error from None
            except LograftError as exc:
                if not exc.retriable or loop.time() >= deadline:
                    raise
                if tp is None:
                    scratch.failures += 1
                    cfg = self._config
                    pause_ms = backoff_ms(
                        scratch.failures, cfg.retry_backoff_ms, cfg.retry_backoff_max_ms
                    )
                    await asyncio.sleep(pause_ms / 1000)
                else:
                    await self._fetcher.on_retriable(tp, scratch, exc)
