"""One partition of a stream, read from wherever its leader is.

Only a partition's leader serves consumer reads. When the metadata this node
follows names this node, the chunk comes from the local replica
(`ReplicaManager.fetch`, a long-poll); otherwise from the leader, through the
long-polls every stream of this node shares per leader (`stream_polls`), at
the leader's node-to-node address (the node's peer client: `[http.dial]`). The start
offsets of a partition led elsewhere come from the leader's internal
partition-offsets endpoint (cluster secret; api/partition_offsets.py), over
the streams' pool for short calls (`remote_connections_max`), which no
long-poll ever holds.

Every attempt asks the current metadata for the leader, so when leadership
moves (a failover, a preferred-leader election) the next attempt goes to the
new leader. Retriable errors (not leader, no leader yet, broker unreachable,
a replica still opening) are retried with `retry_backoff_ms` between attempts
for up to `retry_timeout_ms`, or, before the stream starts, until the start's
deadline (`start_retry_timeout_ms` after the request came); anything else, or
the topic being deleted (or deleted and created again: a new topic id), is
raised to the stream.

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

from lograft.api.services import MetadataView, PeerCalls
from lograft.api.stream.limits import SourceLimits
from lograft.api.stream.polls import RemoteReads
from lograft.brokers.peer_calls import UnreadableAnswer
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import (
    BrokerNotAvailableError,
    LeaderNotAvailableError,
    LograftError,
    OffsetOutOfRangeError,
    PeerUnreachableError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition

T = TypeVar("T")


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
        calls: PeerCalls,
        remote: RemoteReads,
        tp: TopicPartition,
        topic_id: str,
        limits: SourceLimits,
    ) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.calls = calls  # short calls to other nodes (offsets)
        self.remote = remote  # reads of partitions led elsewhere
        self.tp = tp
        self.topic_id = topic_id
        self.limits = limits

    # -- what the stream calls ---------------------------------------------------------

    async def offsets(self, *, deadline: float | None = None) -> PartitionOffsets:
        return await self._retrying(self._offsets_once, deadline)

    async def fetch(self, position: int, max_bytes: int) -> Chunk:
        """The next chunk at `position` (empty when a long-poll ran out, or the
        leader may have moved)."""
        return await self._retrying(lambda: self._fetch_once(position, max_bytes), None)

    async def check_position(self, position: int, *, deadline: float | None = None) -> None:
        """OffsetOutOfRangeError unless `position` is in [log start, log end]."""
        got = await self.offsets(deadline=deadline)
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

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], deadline: float | None) -> T:
        """`attempt()` until it succeeds or raises a non-retriable error.

        Retriable errors are retried for `retry_timeout_ms` in a row; with a
        `deadline` (`time.monotonic()`), until then instead, and no attempt
        runs past it.
        """
        give_up = deadline
        while True:
            try:
                return await (attempt() if deadline is None else self._until(deadline, attempt))
            except LograftError as exc:
                if not exc.retriable:
                    raise
                self._check_topic()
                now = time.monotonic()
                if give_up is None:
                    give_up = now + self.limits.retry_timeout_ms / 1000
                if now >= give_up:
                    raise
                pause_s = min(self.limits.retry_backoff_ms / 1000, give_up - now)
            # A back-off between attempts, not a synchronisation: the leader
            # may take a few seconds to move, and nothing signals when it has.
            await asyncio.sleep(pause_s)

    async def _until(self, deadline: float, attempt: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())) as scope:
                return await attempt()
        except TimeoutError:
            if not scope.expired():
                raise
            raise BrokerNotAvailableError(
                f"no answer about {self.tp} from its leader in time", topic=self.tp.topic
            ) from None

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
        url = self.calls.broker_url(leader)
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
        # The leader's internal offsets route, with the cluster secret: the
        # public GET .../offsets would want the client's own credentials,
        # which this node does not hold (the client was authenticated and
        # authorized here, for the stream).
        self._leader_url(leader)
        try:
            answers = await self.calls.partition_offsets(
                leader, [self.tp], None, timeout_ms=self.limits.remote_timeout_margin_ms
            )
        except PeerUnreachableError as exc:
            raise BrokerNotAvailableError(
                f"could not read the offsets of {self.tp} from broker {leader}, its leader: "
                f"{exc.message}",
                leader_id=leader,
            ) from None
        except UnreadableAnswer as exc:
            raise BrokerNotAvailableError(
                f"broker {leader}'s offsets of {self.tp}: {exc}", leader_id=leader
            ) from None
        found = answers[0]
        if isinstance(found, LograftError):
            raise found
        return PartitionOffsets(found.log_start_offset, found.high_watermark, found.log_end_offset)

    async def _fetch_once(self, position: int, max_bytes: int) -> Chunk:
        leader = self._leader()
        if leader == self.replicas.broker_id:
            got = await self.replicas.fetch(
                self.tp,
                position,
                max_bytes=max_bytes,
                max_wait_ms=self.limits.fetch_wait_ms,
                min_bytes=1,
            )
            return Chunk(self.tp.partition, got.data, got.high_watermark)
        url = self._leader_url(leader)
        answer = await self.remote.read(leader, url, self.tp, position, max_bytes)
        return Chunk(self.tp.partition, answer.data, answer.high_watermark)


__all__ = ["Chunk", "PartitionOffsets", "PartitionSource", "SourceLimits"]
