"""Offsets of partitions wherever their leaders are: log start, high watermark,
log end and, on request, the first offset at a timestamp.

Topic describe, group describe (lag), reset offsets and a new member's start
offsets need them for partitions this broker may not lead. A local leader
answers from its replica; every remote leader is asked once for all of its
partitions, through `POST /internal/v1/partition-offsets` (cluster secret
required), in requests of at most `PARTITION_OFFSETS_BATCH_MAX` partitions.
One request per partition would let one anonymous describe of a topic with
thousands of partitions open thousands of requests at once (issue 9: 2,000 of
them stalled a node's event loop for 352 ms). At most
`PARTITION_OFFSETS_CONCURRENT_MAX` such batches are in flight for one caller,
each bounded by the caller's timeout.

Request (JSON)::

    {"partitions": [{"topic": "t", "partition": 0}, ...], "timestamp": 1700000000000}

(`timestamp` optional.) Response: `{"partitions": [...]}`, one entry per
partition in request order: `{"log_start_offset", "high_watermark",
"log_end_offset", "offset_for_timestamp", "size_bytes"}` (the leader's log
bytes) or `{"error": {...}}` (the HTTP
error body's form), e.g. NOT_LEADER_OR_FOLLOWER when leadership moved.

The asks go through the peer calls' `partition_offsets` operation, one per
leader and batch, this node's own included: for this node it runs
`offsets_here` in process (registered by `add_partition_offsets_route`, the
same function that answers other nodes), for any other over HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Annotated, Any

import msgspec
import orjson
from aiohttp import web

from lograft.api.http_errors import error_body
from lograft.api.request_ints import INT64_MAX
from lograft.api.services import MetadataView, PeerCalls
from lograft.brokers.groups.admin import PartitionBounds
from lograft.brokers.peer_calls import LeaderOffsets, UnreadableAnswer
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    LograftError,
    NotLeaderOrFollowerError,
    PeerAddressUnknownError,
    PeerAnswerUnreadableError,
    PeerUnreachableError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.typed import Record, decode_json, encode_json

PATH = "/internal/v1/partition-offsets"
# Batched requests to partition leaders in flight at once for one caller.
PARTITION_OFFSETS_CONCURRENT_MAX = 4
# Partitions in one batched request: its JSON stays well under a megabyte
# (about 100 bytes a partition) and cheap to parse and render either side.
PARTITION_OFFSETS_BATCH_MAX = 2_000
# A leader gives its event loop back after this many timestamp lookups (each
# may read the time index and a segment from disk).
_TIMESTAMP_LOOKUPS_PER_YIELD = 64


def to_bounds(found: LeaderOffsets) -> PartitionBounds:
    return PartitionBounds(found.log_start_offset, found.high_watermark, found.offset_for_timestamp)


def leader_offsets(
    replicas: ReplicaManager,
    metadata: MetadataView,
    tp: TopicPartition,
    timestamp_ms: int | None,
) -> LeaderOffsets:
    """The offsets of a partition this broker leads (else the error saying why not)."""
    view = metadata.topic(tp.topic)
    if view is None or tp.partition not in view.partitions:
        raise UnknownTopicOrPartitionError(
            f"{tp} does not exist", topic=tp.topic, partition=tp.partition
        )
    leader = view.partitions[tp.partition].leader
    if leader != replicas.broker_id:
        raise NotLeaderOrFollowerError(
            f"broker {replicas.broker_id} is not the leader of {tp}; broker {leader} is",
            topic=tp.topic,
            partition=tp.partition,
        )
    part = replicas.partition(tp)
    at = None
    if timestamp_ms is not None:
        found = part.log.offset_for_timestamp(timestamp_ms)
        if found is not None and found.offset < part.high_watermark:
            at = found.offset
    return LeaderOffsets(
        part.log.log_start_offset,
        part.high_watermark,
        part.log.log_end_offset,
        at,
        part.log.size_bytes,
    )


class PartitionOffsets:
    def __init__(self, metadata: MetadataView, calls: PeerCalls) -> None:
        """`metadata` names each partition's leader; `calls` asks it (this
        node's own partitions in process, when the node registered them)."""
        self.metadata = metadata
        self.calls = calls
        # Observable: batched asks of each leader, this node included (tests count them).
        self.requests_sent: dict[int, int] = {}

    async def offsets(
        self,
        tps: Collection[TopicPartition],
        timeout_ms: int,
        timestamp_ms: int | None = None,
    ) -> dict[TopicPartition, LeaderOffsets | LograftError]:
        """Each partition's offsets, or the error that kept us from learning them."""
        out: dict[TopicPartition, LeaderOffsets | LograftError] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            view = self.metadata.topic(tp.topic)
            if view is None or tp.partition not in view.partitions:
                out[tp] = UnknownTopicOrPartitionError(
                    f"{tp} does not exist", topic=tp.topic, partition=tp.partition
                )
                continue
            leader = view.partitions[tp.partition].leader
            if leader < 0:
                out[tp] = _no_leader(tp)
            else:
                by_leader.setdefault(leader, []).append(tp)
        limit = asyncio.Semaphore(PARTITION_OFFSETS_CONCURRENT_MAX)

        async def batch(leader: int, part: Sequence[TopicPartition]) -> None:
            async with limit:
                out.update(await self._ask(leader, part, timeout_ms, timestamp_ms))

        await asyncio.gather(
            *(
                batch(leader, part[i : i + PARTITION_OFFSETS_BATCH_MAX])
                for leader, part in by_leader.items()
                for i in range(0, len(part), PARTITION_OFFSETS_BATCH_MAX)
            )
        )
        return {tp: out[tp] for tp in tps}

    async def bounds(
        self,
        tps: Collection[TopicPartition],
        timeout_ms: int,
        timestamp_ms: int | None = None,
    ) -> dict[TopicPartition, PartitionBounds | LograftError]:
        """Each partition's bounds, or the error that kept us from learning them."""
        found = await self.offsets(tps, timeout_ms, timestamp_ms)
        return {tp: to_bounds(o) if isinstance(o, LeaderOffsets) else o for tp, o in found.items()}

    async def high_watermarks(
        self, tps: Collection[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, int]:
        """High watermarks of the partitions whose leader answered in time."""
        found = await self.offsets(tps, timeout_ms)
        return {tp: o.high_watermark for tp, o in found.items() if isinstance(o, LeaderOffsets)}

    async def _ask(
        self,
        leader: int,
        tps: Sequence[TopicPartition],
        timeout_ms: int,
        timestamp_ms: int | None,
    ) -> dict[TopicPartition, LeaderOffsets | LograftError]:
        """One batched ask of one leader (in process when it is this node);
        any failure is every partition's error."""
        try:
            answers = await self.calls.partition_offsets(
                leader, tps, timestamp_ms, timeout_ms=timeout_ms
            )
        except PeerAddressUnknownError:
            # Nothing was sent: the leader has no address (yet).
            return {tp: _no_leader(tp) for tp in tps}
        except (PeerUnreachableError, ValueError, KeyError, TypeError) as exc:
            self._sent(leader)
            reason = exc.message if isinstance(exc, LograftError) else repr(exc)
            failure: LograftError = LeaderNotAvailableError(
                f"could not ask broker {leader} for the offsets of {len(tps)} partition(s) "
                f"it leads: {reason}",
                leader_id=leader,
            )
        except LograftError as exc:
            self._sent(leader)
            failure = exc
        else:
            self._sent(leader)
            return dict(zip(tps, answers, strict=True))
        return dict.fromkeys(tps, failure)

    def _sent(self, leader: int) -> None:
        self.requests_sent[leader] = self.requests_sent.get(leader, 0) + 1


def _no_leader(tp: TopicPartition) -> LograftError:
    return LeaderNotAvailableError(
        f"{tp} has no reachable leader right now", topic=tp.topic, partition=tp.partition
    )


# -- the wire form of one ask (the node's PeerClient encodes and decodes it) --------------


NonNegative64 = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]


class OffsetsAsk(Record, frozen=True):
    topic: str
    partition: NonNegative64


class OffsetsRequest(Record, frozen=True, omit_defaults=True):
    partitions: list[OffsetsAsk]
    timestamp: NonNegative64 | None = None


class OffsetsAnswerItem(Record, frozen=True, omit_defaults=True):
    """One partition's answer: its offsets, or `error` (an HTTP error body's
    inner object) and nothing else."""

    log_start_offset: int | None = None
    high_watermark: int | None = None
    log_end_offset: int | None = None
    offset_for_timestamp: int | None = None
    size_bytes: int | None = None
    error: dict[str, Any] | None = None


class OffsetsAnswer(Record, frozen=True):
    partitions: list[OffsetsAnswerItem]


def encode_offsets_request(tps: Sequence[TopicPartition], timestamp_ms: int | None) -> bytes:
    return encode_json(
        OffsetsRequest(
            partitions=[OffsetsAsk(topic=tp.topic, partition=tp.partition) for tp in tps],
            timestamp=timestamp_ms,
        )
    )


def decode_offsets_answer(
    tps: Sequence[TopicPartition], raw: bytes
) -> list[LeaderOffsets | LograftError]:
    """A leader's answer, one entry per asked partition in order;
    UnreadableAnswer (a ValueError) naming the field when it is not one."""
    try:
        doc = decode_json(
            raw, OffsetsAnswer, error=PeerAnswerUnreadableError, where="partition offsets answer"
        )
    except PeerAnswerUnreadableError as exc:
        raise UnreadableAnswer(exc.message) from None
    if len(doc.partitions) != len(tps):
        raise UnreadableAnswer(f"{len(doc.partitions)} answers for {len(tps)} partitions")
    return [_answer(tp, i, a) for i, (tp, a) in enumerate(zip(tps, doc.partitions, strict=True))]


def _answer(tp: TopicPartition, i: int, item: OffsetsAnswerItem) -> LeaderOffsets | LograftError:
    if item.error is not None:
        return LograftError.from_dict(item.error)  # ValueError if it is not one
    if item.log_start_offset is None or item.high_watermark is None or item.log_end_offset is None:
        raise UnreadableAnswer(
            f"partition offsets answer.partitions[{i}] ({tp}): needs log_start_offset, "
            "high_watermark and log_end_offset, or error"
        )
    return LeaderOffsets(
        item.log_start_offset,
        item.high_watermark,
        item.log_end_offset,
        item.offset_for_timestamp,
        item.size_bytes,
    )


def _parse_request(body: bytes) -> tuple[list[TopicPartition], int | None]:
    doc = decode_json(body, OffsetsRequest, error=InvalidRequestError, where="partition offsets")
    if len(doc.partitions) > PARTITION_OFFSETS_BATCH_MAX:
        raise InvalidRequestError(
            f"partition offsets: partitions must be a list of at most "
            f"{PARTITION_OFFSETS_BATCH_MAX} objects",
            partitions_max=PARTITION_OFFSETS_BATCH_MAX,
        )
    return [TopicPartition(p.topic, p.partition) for p in doc.partitions], doc.timestamp


async def offsets_here(
    replicas: ReplicaManager,
    metadata: MetadataView,
    tps: Sequence[TopicPartition],
    timestamp_ms: int | None,
) -> list[LeaderOffsets | LograftError]:
    """The leader's side of an ask, for another node's request or this
    node's own: each partition's offsets (or why not), in order."""
    answers: list[LeaderOffsets | LograftError] = []
    for i, tp in enumerate(tps):
        if timestamp_ms is not None and i and i % _TIMESTAMP_LOOKUPS_PER_YIELD == 0:
            await asyncio.sleep(0)
        try:
            answers.append(leader_offsets(replicas, metadata, tp, timestamp_ms))
        except LograftError as exc:
            answers.append(exc)
    return answers


def add_partition_offsets_route(
    app: web.Application,
    replicas: ReplicaManager,
    metadata: MetadataView,
    calls: PeerCalls | None = None,
) -> None:
    """Answer other nodes' asks at PATH; and this node's own, in process,
    through `calls` (the peer calls its PartitionOffsets use)."""

    async def here(
        tps: Sequence[TopicPartition], timestamp_ms: int | None
    ) -> list[LeaderOffsets | LograftError]:
        return await offsets_here(replicas, metadata, tps, timestamp_ms)

    async def handle(request: web.Request) -> web.Response:
        tps, timestamp_ms = _parse_request(await request.read())
        answers = [
            a.to_dict() if isinstance(a, LeaderOffsets) else error_body(a)
            for a in await here(tps, timestamp_ms)
        ]
        return web.Response(
            body=orjson.dumps({"partitions": answers}), content_type="application/json"
        )

    app.router.add_post(PATH, handle)
    if calls is not None:
        calls.serve_locally(replicas.broker_id, partition_offsets=here)


__all__ = [
    "PARTITION_OFFSETS_BATCH_MAX",
    "PARTITION_OFFSETS_CONCURRENT_MAX",
    "PATH",
    "LeaderOffsets",
    "PartitionOffsets",
    "add_partition_offsets_route",
    "decode_offsets_answer",
    "encode_offsets_request",
    "leader_offsets",
    "offsets_here",
    "to_bounds",
]
