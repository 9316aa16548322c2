"""Node-to-node reads for streams: many partitions of one leader in one long-poll.

`POST /internal/v1/stream-fetch` (cluster secret required) is what a node
serving a stream sends to the leader of partitions it does not lead
(`stream_polls` multiplexes every stream's reads of one leader into a few such
requests). The leader answers as it answers a consumer's fetch: whole batches
below the high watermark, `OFFSET_OUT_OF_RANGE` outside the log, and not
being the leader is an error of that partition.

Request (JSON)::

    {"max_wait_ms": 5000, "max_bytes": 4194304,
     "reads": [{"topic": "t", "partition": 0, "offset": 42, "max_bytes": 65536}, ...]}

Response: the replica fetch's format (`lograft.protocol.fetch_wire`): a JSON
header with one entry per read, in request order, then the raw batches.
The leader answers as soon as one read has data or an error, else after
`max_wait_ms` (capped by the broker's `fetch_wait_max_ms`); `max_bytes` bounds
the whole answer, taken by the reads in request order (the first read with
data may exceed it by one batch).

The leader bounds what one request may ask with its own stream limits:
`remote_poll_partitions_max` reads, `remote_poll_bytes_max` in all and
`chunk_bytes_max` per read; a request beyond them is refused (400).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec
from aiohttp import web

from lograft.brokers.replica_manager import ConsumerRead, ReplicaManager
from lograft.errors import InvalidRequestError
from lograft.protocol.fetch_wire import CONTENT_TYPE, encode_response
from lograft.protocol.topic_partition import TopicPartition
from lograft.typed import Record, decode_json, encode_json

PATH = "/internal/v1/stream-fetch"
# Largest integer a request field may hold (offsets, byte counts, waits).
_INT_MAX = 2**63 - 1
_Count = Annotated[int, msgspec.Meta(ge=0, le=_INT_MAX)]
_Bytes = Annotated[int, msgspec.Meta(ge=1, le=_INT_MAX)]


@dataclass(frozen=True, slots=True)
class ServeLimits:
    """What the leader accepts in one request (the serving node's stream limits)."""

    reads_max: int
    bytes_max: int
    read_bytes_max: int


class ReadBody(Record, frozen=True):
    """One read of the request, as on the wire (field order is the wire's)."""

    topic: Annotated[str, msgspec.Meta(min_length=1)]
    partition: _Count
    offset: _Count
    max_bytes: _Bytes


class StreamFetchBody(Record, frozen=True):
    """The request as on the wire; the serving limits are checked after."""

    max_wait_ms: _Count
    max_bytes: _Bytes
    reads: Annotated[list[ReadBody], msgspec.Meta(min_length=1)]


@dataclass(frozen=True, slots=True)
class StreamFetchRequest:
    max_wait_ms: int
    max_bytes: int
    reads: tuple[ConsumerRead, ...]

    def to_json(self) -> bytes:
        return encode_json(
            StreamFetchBody(
                max_wait_ms=self.max_wait_ms,
                max_bytes=self.max_bytes,
                reads=[
                    ReadBody(
                        topic=r.tp.topic,
                        partition=r.tp.partition,
                        offset=r.offset,
                        max_bytes=r.max_bytes,
                    )
                    for r in self.reads
                ],
            )
        )

    @classmethod
    def from_json(cls, body: bytes, limits: ServeLimits) -> StreamFetchRequest:
        doc = decode_json(body, StreamFetchBody, error=InvalidRequestError, where="stream fetch")
        if len(doc.reads) > limits.reads_max:
            raise InvalidRequestError(
                f"stream fetch: {len(doc.reads)} reads exceed remote_poll_partitions_max="
                f"{limits.reads_max}",
                remote_poll_partitions_max=limits.reads_max,
            )
        if doc.max_bytes > limits.bytes_max:
            raise InvalidRequestError(
                f"stream fetch: max_bytes={doc.max_bytes} exceeds remote_poll_bytes_max="
                f"{limits.bytes_max}",
                remote_poll_bytes_max=limits.bytes_max,
            )
        for i, read in enumerate(doc.reads):
            if read.max_bytes > limits.read_bytes_max:
                raise InvalidRequestError(
                    f"stream fetch: reads[{i}].max_bytes={read.max_bytes} exceeds "
                    f"chunk_bytes_max={limits.read_bytes_max}",
                    chunk_bytes_max=limits.read_bytes_max,
                )
        return cls(
            doc.max_wait_ms,
            doc.max_bytes,
            tuple(
                ConsumerRead(TopicPartition(r.topic, r.partition), r.offset, r.max_bytes)
                for r in doc.reads
            ),
        )


def add_stream_fetch_route(
    app: web.Application, replicas: ReplicaManager, limits: ServeLimits
) -> None:
    async def handle(request: web.Request) -> web.Response:
        req = StreamFetchRequest.from_json(await request.read(), limits)
        parts = await replicas.consumer_fetch(
            req.reads, max_wait_ms=req.max_wait_ms, max_bytes=req.max_bytes
        )
        return web.Response(body=encode_response(parts), content_type=CONTENT_TYPE)

    app.router.add_post(PATH, handle)


__all__ = ["PATH", "ServeLimits", "StreamFetchRequest", "add_stream_fetch_route"]
