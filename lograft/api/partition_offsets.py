"""Offsets of partitions wherever their leaders are: log start, high watermark
and, on request, the first offset at a timestamp.

Group describe (lag) and reset offsets need them for partitions this broker
may not lead. A local leader answers from its replica; a remote one through
its public `GET /v1/topics/{t}/partitions/{p}/offsets`. At most
`PARTITION_OFFSETS_CONCURRENT_MAX` such requests are in flight at once, each
bounded by the caller's timeout.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Collection

import aiohttp

from lograft.api.peer_urls import PeerUrls
from lograft.api.services import MetadataView
from lograft.brokers.group_admin import PartitionBounds
from lograft.brokers.partition import TopicPartition
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import LeaderNotAvailableError, LograftError, UnknownTopicOrPartitionError

# Requests to partition leaders in flight at once for one caller.
PARTITION_OFFSETS_CONCURRENT_MAX = 32


class PartitionOffsets:
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataView,
        session: aiohttp.ClientSession,
        peers: PeerUrls,
    ) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.session = session
        self.peers = peers

    async def bounds(
        self,
        tps: Collection[TopicPartition],
        timeout_ms: int,
        timestamp_ms: int | None = None,
    ) -> dict[TopicPartition, PartitionBounds | LograftError]:
        """Each partition's bounds, or the error that kept us from learning them."""
        limit = asyncio.Semaphore(PARTITION_OFFSETS_CONCURRENT_MAX)

        async def one(tp: TopicPartition) -> PartitionBounds | LograftError:
            async with limit:
                try:
                    return await self._bounds(tp, timeout_ms, timestamp_ms)
                except LograftError as exc:
                    return exc

        ordered = list(tps)
        results = await asyncio.gather(*(one(tp) for tp in ordered))
        return dict(zip(ordered, results, strict=True))

    async def high_watermarks(
        self, tps: Collection[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, int]:
        """High watermarks of the partitions whose leader answered in time."""
        found = await self.bounds(tps, timeout_ms)
        return {tp: b.high_watermark for tp, b in found.items() if isinstance(b, PartitionBounds)}

    async def _bounds(
        self, tp: TopicPartition, timeout_ms: int, timestamp_ms: int | None
    ) -> PartitionBounds:
        view = self.metadata.topic(tp.topic)
        if view is None or tp.partition not in view.partitions:
            raise UnknownTopicOrPartitionError(
                f"{tp} does not exist", topic=tp.topic, partition=tp.partition
            )
        leader = view.partitions[tp.partition].leader
        if leader == self.replicas.broker_id:
            return self._local(tp, timestamp_ms)
        url = self.peers.broker(self.metadata, leader) if leader >= 0 else None
        if url is None:
            raise LeaderNotAvailableError(
                f"{tp} has no reachable leader right now", topic=tp.topic, partition=tp.partition
            )
        params = {} if timestamp_ms is None else {"timestamp": str(timestamp_ms)}
        topic = urllib.parse.quote(tp.topic, safe="")
        try:
            async with self.session.get(
                f"{url}/v1/topics/{topic}/partitions/{tp.partition}/offsets",
                params=params,
                timeout=aiohttp.ClientTimeout(total=timeout_ms / 1000),
            ) as resp:
                doc = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise LeaderNotAvailableError(
                f"could not ask broker {leader}, the leader of {tp}: {exc!r}",
                topic=tp.topic,
                partition=tp.partition,
            ) from None
        if resp.status != 200 or not isinstance(doc, dict):
            raise LeaderNotAvailableError(
                f"broker {leader}, the leader of {tp}, answered {resp.status}",
                topic=tp.topic,
                partition=tp.partition,
            )
        at = doc.get("offset_for_timestamp")
        return PartitionBounds(
            int(doc["earliest"]),
            int(doc["latest"]),
            int(at["offset"]) if isinstance(at, dict) else None,
        )

    def _local(self, tp: TopicPartition, timestamp_ms: int | None) -> PartitionBounds:
        part = self.replicas.partition(tp)
        at = None
        if timestamp_ms is not None:
            found = part.log.offset_for_timestamp(timestamp_ms)
            if found is not None and found.offset < part.high_watermark:
                at = found.offset
        return PartitionBounds(part.log.log_start_offset, part.high_watermark, at)
