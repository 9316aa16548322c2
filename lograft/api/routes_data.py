"""The data plane over HTTP: produce, fetch and offsets.

- `POST /v1/topics/{topic}/records`: JSON records; any broker accepts them and
  routes each partition's batch to its leader.
- `POST /v1/topics/{topic}/partitions/{p}/batches`: raw RecordBatch v2 bytes
  (`application/vnd.lograft.batch`), appended as they are, on the leader.
- `GET /v1/topics/{topic}/partitions/{p}/records`: long-poll fetch, JSON or raw.
- `GET /v1/topics/{topic}/partitions/{p}/offsets`: earliest, latest, by time.
- `POST /internal/v1/produce`: the partitions of one JSON produce that this
  broker leads, forwarded by the node that accepted it, in one request
  (`lograft/protocol/produce_wire.py`).

Limits (named, with units): `produce_records_max` records per JSON request,
`produce_decompressed_bytes_max` bytes inflated per raw (or forwarded)
produce request (`produce_batches_max`, batches per partition, is the
broker's), `fetch_bytes_max` bytes per fetch, `fetch_records_max` records per
JSON fetch, and the rendering bounds of `RenderLimits`
(`lograft/api/fetch_json.py`).

Work that grows with what a request carries (decompressing and validating
batches, parsing a large JSON body, rendering records, walking a large raw
answer, a timestamp lookup inside a batch) runs in the node's `RecordWork`
threads, never on the event loop, unless it is small (`worth_a_thread`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from lograft.api.fetch_json import PageRequest, render_page, response_body
from lograft.api.http_errors import error_dict
from lograft.api.record_work import INLINE_BYTES_MAX, RecordWork, worth_a_thread
from lograft.api.records_json import (
    READ_FORMATS,
    ProduceRecord,
    RenderLimits,
    parse_produce_body,
)
from lograft.api.records_json import ProduceRequest as ParsedProduce
from lograft.api.request_ints import INT64_MAX, parse_partition, query_int
from lograft.api.services import MetadataView, PeerCalls, TopicView
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.partition import Partition, check_batch_count
from lograft.brokers.peer_calls import NoPeers
from lograft.brokers.replica_manager import ReplicaManager
from lograft.echo import clip, shown
from lograft.errors import (
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    LograftError,
    NotLeaderOrFollowerError,
    PeerAddressUnknownError,
    PeerAnswerUnreadableError,
    PeerUnreachableError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.batch import (
    RecordInput,
    build_batch,
    iter_batches,
)
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.partitioner import KeylessPartitioner, partition_for_key
from lograft.protocol.produce_wire import CONTENT_TYPE as FORWARD_CONTENT_TYPE
from lograft.protocol.produce_wire import (
    Acks,
    PartitionBatch,
    PartitionOutcome,
    ProduceRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import TimestampOffset

BATCH_CONTENT_TYPE = "application/vnd.lograft.batch"
# JSON produce bodies from this size on are decoded and built into batches
# in a worker thread, bytes. Below it the work (under 10 ms) costs less than
# the thread hand-off. Only the Python-level work leaves the loop: orjson's
# parse is one C call that holds the GIL, about 10 ms a MiB of JSON here.
JSON_OFF_LOOP_BYTES_MIN = 256 * 1024
# Topics only the brokers write to.
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC})
# Fetched data up to this many bytes, uncompressed, is rendered inline.
RENDER_INLINE_BYTES_MAX = INLINE_BYTES_MAX
# A fetch answer larger than this is written in pieces of this size, bytes.
SEND_PIECE_BYTES = 1024 * 1024
FORWARD_PATH = "/internal/v1/produce"
# What a forwarded produce's header costs per partition and in all, bytes; a
# generous bound, so that a request cut at the limit fits the peer's limit.
FORWARD_PARTITION_OVERHEAD = 64
FORWARD_REQUEST_OVERHEAD = 1024


@dataclass(frozen=True, slots=True)
class DataLimits:
    produce_records_max: int = 10_000
    # Bytes the compressed batches of one produce request may inflate to, in
    # all; past it the request is refused (413) as soon as inflation passes it.
    produce_decompressed_bytes_max: int = 64 * 1024 * 1024
    fetch_bytes_max: int = 50 * 1024 * 1024
    fetch_bytes_default: int = 1024 * 1024
    fetch_records_max: int = 10_000
    fetch_records_default: int = 500
    fetch_wait_default_ms: int = 0
    # A produce forwarded to one leader is cut into requests of at most this
    # many bytes: the leader refuses a larger body (its request_bytes_max).
    forward_request_bytes_max: int = 16 * 1024 * 1024
    render: RenderLimits = field(default_factory=RenderLimits)


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


class DataRoutes:
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataView,
        calls: PeerCalls | None = None,
        limits: DataLimits | None = None,
        work: RecordWork | None = None,
    ) -> None:
        self.replicas = replicas
        self.metadata = metadata
        # Where to forward a produce for another leader (node-to-node; None:
        # a node alone, which forwards nothing).
        self.calls = calls or NoPeers()
        self.limits = limits or DataLimits()
        # Threads for work that grows with what a request carries.
        self.work = work or RecordWork()
        self.keyless = KeylessPartitioner()

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/topics/{topic}/records", self.produce_json)
        app.router.add_post("/v1/topics/{topic}/partitions/{partition}/batches", self.produce_raw)
        app.router.add_get("/v1/topics/{topic}/partitions/{partition}/records", self.fetch)
        app.router.add_get("/v1/topics/{topic}/partitions/{partition}/offsets", self.offsets)
        app.router.add_post(FORWARD_PATH, self.produce_forwarded)

    # -- helpers --------------------------------------------------------------------

    def _topic(self, name: str) -> TopicView:
        view = self.metadata.topic(name)
        if view is None:
            raise UnknownTopicOrPartitionError(
                f"topic {shown(name)} does not exist", topic=clip(name)
            )
        return view

    def _tp(self, request: web.Request) -> tuple[TopicView, TopicPartition]:
        view = self._topic(request.match_info["topic"])
        return view, self._partition_of(view, request.match_info["partition"])

    @staticmethod
    def _partition_of(view: TopicView, raw: str) -> TopicPartition:
        """A malformed number is INVALID_REQUEST; a number the topic lacks is
        UNKNOWN_TOPIC_OR_PARTITION (it may exist once partitions are added)."""
        partition = parse_partition(raw)
        if partition not in view.partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {view.name!r} has no partition {partition}; it has "
                f"{len(view.partitions)} (0..{len(view.partitions) - 1})",
                topic=view.name,
                partition=partition,
            )
        return TopicPartition(view.name, partition)

    def _require_local_leader(self, view: TopicView, tp: TopicPartition) -> None:
        a = view.partitions[tp.partition]
        if a.leader == self.replicas.broker_id:
            if tp in self.replicas.partitions:
                return
            # Not "ask broker N" when N is this broker: its replica failed.
            self.replicas.raise_if_failed(tp)
        raise self._not_leader(view, tp)

    def _not_leader(self, view: TopicView, tp: TopicPartition) -> LograftError:
        a = view.partitions[tp.partition]
        if a.leader < 0:
            return LeaderNotAvailableError(
                f"{tp} has no leader right now; retry shortly",
                topic=tp.topic,
                partition=tp.partition,
            )
        return NotLeaderOrFollowerError(
            f"broker {self.replicas.broker_id} is not the leader of {tp}; "
            f"broker {a.leader} is, at {self.metadata.broker_url(a.leader)}",
            topic=tp.topic,
            partition=tp.partition,
            leader_id=a.leader,
            leader_url=self.metadata.broker_url(a.leader),
        )

    # -- produce ----------------------------------------------------------------------

    async def produce_json(self, request: web.Request) -> web.StreamResponse:
        view = self._topic(request.match_info["topic"])
        _refuse_internal(view.name)
        body = await request.read()
        # A large body's records are decoded and encoded into batches in a
        # record-work thread: that Python work (about 0.2 s for 10,000 small
        # records) would otherwise hold the event loop. orjson's own parse
        # holds the GIL either way (see JSON_OFF_LOOP_BYTES_MIN).
        parsed, groups, batches = await self.work.run(
            functools.partial(self._prepare_json, view, body),
            inline=len(body) < JSON_OFF_LOOP_BYTES_MIN,
        )
        # The query wins over the body, but a bad value is refused in either.
        body_acks = None if parsed.acks is None else Acks.parse(parsed.acks)
        if "acks" in request.query:
            acks = Acks.parse(request.query["acks"])
        else:
            acks = Acks.ALL if body_acks is None else body_acks
        outcomes = await self._produce_batches(view, batches, acks)
        results = [outcomes[p] for p in groups]
        if acks is Acks.NONE:
            return web.Response(status=202)
        offsets: list[dict[str, Any] | None] = [None] * len(parsed.records)
        for (p, recs), outcome in zip(groups.items(), results, strict=True):
            for i, rec in enumerate(recs):
                if isinstance(outcome, LograftError):
                    offsets[rec.index] = {"partition": p, "error": error_dict(outcome)}
                else:
                    offsets[rec.index] = {
                        "partition": p,
                        "offset": outcome.first_offset + i,
                        **({"duplicate": True} if outcome.duplicate else {}),
                    }
        failed = sum(1 for o in offsets if o is not None and "error" in o)
        if failed == len(offsets):
            # Nothing was written: answer as any other error, with the
            # per-record outcomes in details.
            first = next(r for r in results if isinstance(r, LograftError))
            first.details["offsets"] = offsets
            raise first
        return json_response({"offsets": offsets}, 200 if failed == 0 else 207)

    def _prepare_json(
        self, view: TopicView, body: bytes
    ) -> tuple[ParsedProduce, dict[int, list[ProduceRecord]], dict[int, bytes]]:
        """The request parsed, its records grouped by partition, a batch per partition."""
        parsed = parse_produce_body(body, records_max=self.limits.produce_records_max)
        groups = self._partition_records(view, parsed.records)
        return parsed, groups, _build_batches(groups, int(time.time() * 1000))

    def _partition_records(
        self, view: TopicView, records: list[ProduceRecord]
    ) -> dict[int, list[ProduceRecord]]:
        count = len(view.partitions)
        sticky: int | None = None
        groups: dict[int, list[ProduceRecord]] = defaultdict(list)
        for rec in records:
            if rec.partition is not None:
                if rec.partition >= count:
                    raise UnknownTopicOrPartitionError(
                        f"records[{rec.index}].partition={rec.partition} but topic "
                        f"{view.name!r} has {count} partitions",
                        topic=view.name,
                        partition=rec.partition,
                    )
                p = rec.partition
            elif rec.record.key is not None:
                p = partition_for_key(rec.record.key, count)
            else:
                if sticky is None:
                    sticky = self.keyless.next_request_partition(count)
                p = sticky
            groups[p].append(rec)
        return dict(groups)

    async def _produce_batches(
        self, view: TopicView, batches: dict[int, bytes], acks: Acks
    ) -> dict[int, PartitionOutcome]:
        """Every partition's outcome: local ones go to the replica manager,
        the others to their leader, one request per leader (as a Kafka client
        sends one ProduceRequest per broker), all concurrently."""
        outcomes: dict[int, PartitionOutcome] = {}
        by_leader: dict[int, list[PartitionBatch]] = defaultdict(list)
        calls: list[Awaitable[dict[int, PartitionOutcome]]] = []
        for p, data in batches.items():
            leader = view.partitions[p].leader
            if leader == self.replicas.broker_id:
                calls.append(self._produce_local(TopicPartition(view.name, p), data, acks))
            elif leader < 0:
                outcomes[p] = self._not_leader(view, TopicPartition(view.name, p))
            else:
                by_leader[leader].append(PartitionBatch(p, data))
        for leader, parts in by_leader.items():
            for chunk in self._forward_chunks(parts):
                calls.append(self._forward(view, leader, ProduceRequest(view.name, acks, chunk)))
        for answered in await asyncio.gather(*calls):
            outcomes.update(answered)
        return outcomes

    async def _produce_local(
        self, tp: TopicPartition, data: bytes, acks: Acks
    ) -> dict[int, PartitionOutcome]:
        try:
            # A batch built here from the request's JSON: its records are
            # walked (and judged by the topic's rules) off the loop all the same.
            check = functools.partial(
                self.replicas.partition(tp).check_records, data, self._produce_budget()
            )
            await self.work.run(check, inline=not worth_a_thread(data))
            return {tp.partition: await self.replicas.produce(tp, data, acks, records_checked=True)}
        except LograftError as exc:
            return {tp.partition: exc}

    def _forward_chunks(self, parts: list[PartitionBatch]) -> list[list[PartitionBatch]]:
        """`parts` cut into requests the leader's body limit accepts; almost
        always one. A single batch over the limit still goes (alone), to be
        refused by the leader as it would be on its own."""
        budget = self.limits.forward_request_bytes_max - FORWARD_REQUEST_OVERHEAD
        chunks: list[list[PartitionBatch]] = [[]]
        used = 0
        for part in parts:
            size = len(part.data) + FORWARD_PARTITION_OVERHEAD
            if chunks[-1] and used + size > budget:
                chunks.append([])
                used = 0
            chunks[-1].append(part)
            used += size
        return chunks

    async def _forward(
        self, view: TopicView, leader: int, req: ProduceRequest
    ) -> dict[int, PartitionOutcome]:
        """One request carrying `req`'s partitions to their leader; each
        partition's outcome is the one the leader's raw produce would give."""
        partitions = [b.partition for b in req.partitions]
        try:
            body = await self.calls.post(
                leader, FORWARD_PATH, encode_request(req), content_type=FORWARD_CONTENT_TYPE
            )
        except PeerAddressUnknownError:
            return {p: self._not_leader(view, TopicPartition(view.name, p)) for p in partitions}
        except PeerUnreachableError as exc:
            return {p: _unreachable(leader, TopicPartition(view.name, p), exc) for p in partitions}
        except PeerAnswerUnreadableError as exc:
            # Not retriable: the leader may have appended the records before
            # whatever answered (a proxy) lost its answer.
            status = exc.details.get("status")
            return {p: LograftError(f"broker {leader} answered {status}") for p in partitions}
        except LograftError as exc:
            # The whole request was refused: every partition gets the error (a
            # fresh instance each: the produce answer may still extend one's details).
            return {p: LograftError.from_dict(exc.to_dict()) for p in partitions}
        try:
            return dict(zip(partitions, decode_response(body, partitions), strict=True))
        except InvalidRequestError as exc:
            return {
                p: LograftError(f"broker {leader} answered a produce unreadably: {exc.message}")
                for p in partitions
            }

    async def produce_forwarded(self, request: web.Request) -> web.StreamResponse:
        """Partitions of one JSON produce, forwarded by the node that took it:
        each is appended exactly as `produce_raw` would append it, all
        concurrently, and answered per partition."""
        if request.content_type != FORWARD_CONTENT_TYPE:
            raise InvalidRequestError(
                f"send a forwarded produce with Content-Type: {FORWARD_CONTENT_TYPE} "
                f"(got {request.content_type or 'none'})"
            )
        req = decode_request(await request.read())
        view = self._topic(req.topic)
        _refuse_internal(view.name)
        checks = await self._check_partitions(view, req.partitions)
        outcomes = await asyncio.gather(
            *(
                self._append_as_leader(view, b, req.acks, checks[b.partition])
                for b in req.partitions
            )
        )
        partitions = [b.partition for b in req.partitions]
        return web.Response(
            body=encode_response(list(zip(partitions, outcomes, strict=True))),
            content_type="application/json",
        )

    async def _check_partitions(
        self, view: TopicView, parts: list[PartitionBatch]
    ) -> dict[int, LograftError | None]:
        """Each partition's batches checked as produce_raw checks them, sharing
        one request's budget, in one job; per partition, its refusal or None."""
        hosted = {
            b.partition: part
            for b in parts
            if (part := self.replicas.partitions.get(TopicPartition(view.name, b.partition)))
        }
        budget = self._produce_budget()

        def check_all() -> dict[int, LograftError | None]:
            out: dict[int, LograftError | None] = {}
            for b in parts:
                try:
                    if b.partition in hosted:  # else refused below, as produce_raw would
                        self._check_batches(hosted[b.partition], b.data, budget)
                    out[b.partition] = None
                except LograftError as exc:
                    out[b.partition] = exc
            return out

        inline = not any(worth_a_thread(b.data) for b in parts)
        return await self.work.run(check_all, inline=inline)

    async def _append_as_leader(
        self, view: TopicView, batch: PartitionBatch, acks: Acks, refused: LograftError | None
    ) -> PartitionOutcome:
        try:
            # The partition as text, as produce_raw gets it from its URL, so
            # that an unknown partition's error details are the same.
            tp = self._partition_of(view, str(batch.partition))
            self._require_local_leader(view, tp)
            if refused is not None:
                return refused
            return await self.replicas.produce(tp, batch.data, acks, records_checked=True)
        except LograftError as exc:
            return exc

    def _produce_budget(self) -> DecompressionBudget:
        return DecompressionBudget(
            self.limits.produce_decompressed_bytes_max, "produce_decompressed_bytes_max"
        )

    def _check_batches(self, part: Partition, data: bytes, budget: DecompressionBudget) -> None:
        """Every batch and record of a produce, as the leader's append checks
        them (structure, CRC, sizes, the client rules on records, every record
        decompressed within `budget`), before anything is appended."""
        # Before anything else: a body of tiny batches would be walked whole.
        check_batch_count(data, self.replicas.settings.produce_batches_max)
        part.check_records(data, budget)

    async def produce_raw(self, request: web.Request) -> web.StreamResponse:
        view, tp = self._tp(request)
        _refuse_internal(view.name)
        if request.content_type != BATCH_CONTENT_TYPE:
            raise InvalidRequestError(
                f"send record batches with Content-Type: {BATCH_CONTENT_TYPE} "
                f"(got {request.content_type or 'none'})"
            )
        acks = Acks.parse(request.query.get("acks", "all"))
        self._require_local_leader(view, tp)
        data = await request.read()
        check = functools.partial(
            self._check_batches, self.replicas.partition(tp), data, self._produce_budget()
        )
        await self.work.run(check, inline=not worth_a_thread(data))
        result = await self.replicas.produce(tp, data, acks, records_checked=True)
        if acks is Acks.NONE:
            return web.Response(status=202)
        return json_response(
            {
                "partition": tp.partition,
                "base_offset": result.first_offset,
                "last_offset": result.last_offset,
                "log_append_time": result.log_append_time_ms,
                "duplicate": result.duplicate,
            }
        )

    # -- fetch --------------------------------------------------------------------------

    async def fetch(self, request: web.Request) -> web.StreamResponse:
        view, tp = self._tp(request)
        q = request.query
        offset = query_int(q, "offset", None)
        max_bytes = query_int(q, "max_bytes", self.limits.fetch_bytes_default, minimum=1)
        if max_bytes > self.limits.fetch_bytes_max:
            raise InvalidRequestError(
                f"max_bytes={max_bytes} exceeds fetch_bytes_max={self.limits.fetch_bytes_max}"
            )
        max_records = query_int(q, "max_records", self.limits.fetch_records_default, minimum=1)
        if max_records > self.limits.fetch_records_max:
            raise InvalidRequestError(
                f"max_records={max_records} exceeds the limit of {self.limits.fetch_records_max}"
            )
        # Longer waits are cut to the broker's fetch_wait_max_ms.
        max_wait = query_int(q, "max_wait_ms", self.limits.fetch_wait_default_ms)
        min_bytes = query_int(q, "min_bytes", 1)
        value_format = q.get("format", "auto")
        key_format = q.get("key_format", "auto")
        for name, fmt in (("format", value_format), ("key_format", key_format)):
            if fmt not in READ_FORMATS:
                raise InvalidRequestError(
                    f"{name}={shown(fmt)}; use one of {', '.join(READ_FORMATS)}"
                )
        self._require_local_leader(view, tp)
        got = await self.replicas.fetch(
            tp,
            offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait,
            min_bytes=min_bytes,
            offload=self.work.run,
        )
        if BATCH_CONTENT_TYPE in request.headers.get("Accept", ""):
            return await self._raw_fetch(
                request, got.data, got.high_watermark, got.log_start_offset, offset
            )
        page = PageRequest(tp.partition, offset, max_records, max_bytes, value_format, key_format)

        def render() -> bytes:
            rendered = render_page(got.data, page, self.limits.render)
            return response_body(
                tp.topic, tp.partition, rendered, got.high_watermark, got.log_start_offset
            )

        # Decoding and rendering ~10,000 records takes ~150 ms of CPU, and one
        # compressed batch may inflate to 64 MiB: on the event loop that would
        # hold up every other request of this node, broker heartbeats and
        # controller duties included (a loaded node was fenced that way).
        body = await self.work.run(render, inline=not worth_a_thread(got.data))
        return await send_body(request, body, "application/json")

    async def _raw_fetch(
        self, request: web.Request, data: bytes, hw: int, log_start: int, offset: int
    ) -> web.StreamResponse:
        def last_offset() -> int:
            next_offset = offset
            for _pos, h in iter_batches(data):
                next_offset = max(next_offset, h.next_offset)
            return next_offset

        # 50 MiB of small batches is ~800,000 headers to walk.
        next_offset = await self.work.run(last_offset, inline=len(data) <= INLINE_BYTES_MAX)
        return await send_body(
            request,
            data,
            BATCH_CONTENT_TYPE,
            {
                "X-Lograft-High-Watermark": str(hw),
                "X-Lograft-Log-Start-Offset": str(log_start),
                "X-Lograft-Next-Offset": str(next_offset),
            },
        )

    # -- offsets -------------------------------------------------------------------------

    async def offsets(self, request: web.Request) -> web.StreamResponse:
        view, tp = self._tp(request)
        self._require_local_leader(view, tp)
        part = self.replicas.partition(tp)
        body: dict[str, Any] = {
            "topic": tp.topic,
            "partition": tp.partition,
            "earliest": part.log.log_start_offset,
            "latest": part.high_watermark,
            "log_end_offset": part.log.log_end_offset,
        }
        if "timestamp" in request.query:
            ts = query_int(request.query, "timestamp", None, maximum=INT64_MAX)
            # Decodes the records of the batch holding it (inflated up to 64 MiB).
            found: TimestampOffset | None = await self.work.run(
                functools.partial(part.log.offset_for_timestamp, ts)
            )
            if found is None or found.offset >= part.high_watermark:
                body["offset_for_timestamp"] = None
            else:
                body["offset_for_timestamp"] = {
                    "offset": found.offset,
                    "timestamp": found.timestamp,
                }
        return json_response(body)


def _build_batches(groups: dict[int, list[ProduceRecord]], now_ms: int) -> dict[int, bytes]:
    """One batch per partition of a JSON produce's records."""
    return {
        p: build_batch([r.record for r in recs], timestamp_ms=now_ms) for p, recs in groups.items()
    }


async def send_body(
    request: web.Request,
    body: bytes,
    content_type: str,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Answer with `body`; a large one goes out in pieces of SEND_PIECE_BYTES.

    Handed whole to the transport, a 50 MiB body is copied into its buffer at
    once on the event loop (~100 ms); in pieces, each write waits for the
    socket to drain, and the loop runs between them."""
    if len(body) <= SEND_PIECE_BYTES:
        return web.Response(body=body, content_type=content_type, headers=headers)
    resp = web.StreamResponse(headers=headers)
    resp.content_type = content_type
    resp.content_length = len(body)
    await resp.prepare(request)
    with memoryview(body) as view:
        for start in range(0, len(body), SEND_PIECE_BYTES):
            await resp.write(view[start : start + SEND_PIECE_BYTES])
    await resp.write_eof()
    return resp


def _refuse_internal(topic: str) -> None:
    # Only the group coordinator writes its records there; one record from a
    # client that does not decode would stop every later coordinator from
    # loading the partition (Kafka refuses the same way).
    if topic in INTERNAL_TOPICS:
        raise InvalidTopicError(f"cannot produce to the internal topic {topic}", topic=topic)


def _unreachable(leader: int, tp: TopicPartition, exc: PeerUnreachableError) -> LograftError:
    return LeaderNotAvailableError(
        f"could not reach broker {leader}, the leader of {tp}: {exc.message}; retry shortly",
        leader_id=leader,
    )


__all__ = ["BATCH_CONTENT_TYPE", "DataLimits", "DataRoutes", "RecordInput", "json_response"]
