"""One partition of a stream, read from wherever its leader is.

Only a partition's leader serves consumer reads. When the metadata this node
follows names this node, the chunk comes from the local replica
(`ReplicaManager.fetch`, a long-poll); otherwise from the leader's public fetch
endpoint as raw batches (`Accept: application/vnd.lograft.batch`, the same
path the Python client uses) at the leader's node-to-node address
(`PeerUrls`, `[http.dial]`), over the stream's own HTTP connection pool so
long-polls of many streams cannot take the connections replication and
produce forwarding need.

Every attempt asks the current metadata for the leader, so when leadership
moves (a failover, a preferred-leader election) the next attempt goes to the
new leader. Retriable errors (not leader, no leader yet, broker unreachable,
a replica still opening) are retried with `retry_backoff_ms` between attempts
for up to `retry_timeout_ms`; anything else, or the topic being deleted (or
deleted and created again: a new topic id), is raised to the stream.

Reads are by position, and only below the leader's high watermark; a record
below one leader's high watermark is on every in-sync replica, so the next
leader has it at the same offset: following a new leader neither skips nor
repeats a record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import orjson

from lograft.api.peer_urls import PeerUrls
from lograft.api.routes_data import BATCH_CONTENT_TYPE
from lograft.api.services import MetadataView
from lograft.brokers.partition import TopicPartition
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import (
    BrokerNotAvailableError,
    LeaderNotAvailableError,
    LograftError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_class_for,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SourceLimits:
    # Longest long-poll of one fetch for a stream, ms (a local one is also capped
    # by the broker's fetch_wait_max_ms).
    fetch_wait_ms: int = 5_000
    # Pause between attempts after a retriable error, ms.
    retry_backoff_ms: int = 200
    # A partition failing retriably for this long ends the stream with the error, ms.
    retry_timeout_ms: int = 60_000
    # A request to a remote leader may take its long-poll plus this long, ms.
    remote_timeout_margin_ms: int = 10_000


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole batches from the leader, starting with the one holding the position."""

    partition: int
    data: bytes
    high_watermark: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    earliest: int  # log start
    latest: int  # high watermark
    log_end: int


class PartitionSource:
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataView,
        session: aiohttp.ClientSession,
        tp: TopicPartition,
        topic_id: str,
        limits: SourceLimits,
        peers: PeerUrls,
    ) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.session = session
        self.tp = tp
        self.topic_id = topic_id
        self.limits = limits
        self.peers = peers

    # -- what the stream calls ---------------------------------------------------------

    async def offsets(self, *, retry_timeout_ms: int | None = None) -> PartitionOffsets:
        return await self._retrying(self._offsets_once, retry_timeout_ms)

    async def fetch(self, position: int, max_bytes: int) -> Chunk:
        """The next chunk at `position` (empty when the long-poll ran out)."""
        return await self._retrying(lambda: self._fetch_once(position, max_bytes), None)

    async def check_position(self, position: int, *, retry_timeout_ms: int | None = None) -> None:
        """OffsetOutOfRangeError unless `position` is in [log start, log end]."""
        got = await self.offsets(retry_timeout_ms=retry_timeout_ms)
        if not got.earliest <= position <= got.log_end:
            raise OffsetOutOfRangeError(
                f"offset {position} of {self.tp} is outside [{got.earliest}, {got.log_end}]",
                topic=self.tp.topic,
                partition=self.tp.partition,
                offset=position,
                log_start_offset=got.earliest,
                log_end_offset=got.log_end,
            )

    # -- retries --------------------------------------------------------------------

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], timeout_ms: int | None) -> T:
        """`attempt()` until it succeeds, a non-retriable error, or `timeout_ms`
        (default `retry_timeout_ms`) of retriable errors in a row."""
        timeout_s = (self.limits.retry_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        deadline: float | None = None
        while True:
            try:
                return await attempt()
            except LograftError as exc:
                if not exc.retriable:
                    raise
                self._check_topic()
                now = time.monotonic()
                if deadline is None:
                    deadline = now + timeout_s
                if now >= deadline:
                    raise
            # A back-off between attempts, not a synchronisation: the leader
            # may take a few seconds to move, and nothing signals when it has.
            await asyncio.sleep(self.limits.retry_backoff_ms / 1000)

    def _check_topic(self) -> None:
        view = self.metadata.topic(self.tp.topic)
        if view is None or view.topic_id != self.topic_id:
            raise UnknownTopicOrPartitionError(
                f"topic {self.tp.topic!r} was deleted", topic=self.tp.topic
            )

    def _leader(self) -> int:
        self._check_topic()
        view = self.metadata.topic(self.tp.topic)
        assert view is not None
        leader = view.partitions[self.tp.partition].leader
        if leader < 0:
            raise LeaderNotAvailableError(
                f"{self.tp} has no leader right now",
                topic=self.tp.topic,
                partition=self.tp.partition,
            )
        return leader

    def _leader_url(self, leader: int) -> str:
        url = self.peers.broker(self.metadata, leader)
        if url is None:
            raise BrokerNotAvailableError(
                f"broker {leader}, the leader of {self.tp}, has no registered address",
                leader_id=leader,
            )
        return url

    # -- one attempt ----------------------------------------------------------------

    async def _offsets_once(self) -> PartitionOffsets:
        leader = self._leader()
        if leader == self.replicas.broker_id:
            part = self.replicas.partition(self.tp)
            if not part.is_leader:
                raise LeaderNotAvailableError(f"{self.tp} is still becoming leader here")
            return PartitionOffsets(
                part.log.log_start_offset, part.high_watermark, part.log.log_end_offset
            )
        url = self._leader_url(leader)
        path = f"/v1/topics/{self.tp.topic}/partitions/{self.tp.partition}/offsets"
        body, _headers = await self._remote(leader, url + path, {}, self.limits.fetch_wait_ms)
        doc = orjson.loads(body)
        return PartitionOffsets(
            int(doc["earliest"]), int(doc["latest"]), int(doc["log_end_offset"])
        )

    async def _fetch_once(self, position: int, max_bytes: int) -> Chunk:
        leader = self._leader()
        wait_ms = self.limits.fetch_wait_ms
        if leader == self.replicas.broker_id:
            got = await self.replicas.fetch(
                self.tp, position, max_bytes=max_bytes, max_wait_ms=wait_ms, min_bytes=1
            )
            return Chunk(self.tp.partition, got.data, got.high_watermark)
        url = self._leader_url(leader)
        path = f"/v1/topics/{self.tp.topic}/partitions/{self.tp.partition}/records"
        params = {"offset": position, "max_bytes": max_bytes, "max_wait_ms": wait_ms}
        body, headers = await self._remote(
            leader, url + path, params, wait_ms, accept=BATCH_CONTENT_TYPE
        )
        return Chunk(self.tp.partition, body, int(headers["X-Lograft-High-Watermark"]))

    async def _remote(
        self,
        leader: int,
        url: str,
        params: dict[str, int],
        wait_ms: int,
        *,
        accept: str = "application/json",
    ) -> tuple[bytes, dict[str, str]]:
        timeout = aiohttp.ClientTimeout(
            total=(wait_ms + self.limits.remote_timeout_margin_ms) / 1000
        )
        try:
            async with self.session.get(
                url, params=params, headers={"Accept": accept}, timeout=timeout
            ) as resp:
                body = await resp.read()
                headers = dict(resp.headers)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BrokerNotAvailableError(
                f"could not read {self.tp} from broker {leader}, its leader: "
                f"{type(exc).__name__}: {exc}",
                leader_id=leader,
            ) from None
        if status >= 400:
            raise _decode_error(leader, status, body)
        return body, headers


def _decode_error(leader: int, status: int, body: bytes) -> LograftError:
    try:
        err = orjson.loads(body)["error"]
        return error_class_for(err["code"])(err["message"], **err.get("details", {}))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return BrokerNotAvailableError(
            f"broker {leader} answered HTTP {status}: {body[:200]!r}", leader_id=leader
        )


__all__ = ["Chunk", "PartitionOffsets", "PartitionSource", "SourceLimits"]
