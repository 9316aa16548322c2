"""The data plane over HTTP: produce, fetch and offsets.

- `POST /v1/topics/{topic}/records`: JSON records; any broker accepts them and
  routes each partition's batch to its leader (the `ProduceRouter`,
  lograft/brokers/produce_router.py, which appends, forwards and answers per
  partition; the handlers here parse, call it and render).
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

import functools
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from lograft.api.fetch_json import PageRequest, render_page, response_body
from lograft.api.http_errors import error_dict
from lograft.api.offsets_json import offsets_entries
from lograft.api.produce_columns import plain_columns
from lograft.api.quota_gate import request_quota
from lograft.api.record_work import INLINE_BYTES_MAX, RecordWork, worth_a_thread
from lograft.api.records_json import (
    READ_FORMATS,
    RenderLimits,
    body_acks,
    decode_produce_body,
    parse_records,
)
from lograft.api.request_ints import INT64_MAX, parse_partition, query_int
from lograft.api.services import MetadataView, PeerCalls, TopicView
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.metadata_sync import partition_of
from lograft.brokers.peer_calls import NoPeers
from lograft.brokers.produce_router import FORWARD_PATH, KeylessPartitions, ProduceRouter
from lograft.brokers.replica_manager import ReplicaManager
from lograft.echo import clip, shown
from lograft.errors import (
    InvalidRequestError,
    InvalidTopicError,
    LograftError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.batch import (
    RecordInput,
    batches_span,
    build_batch,
)
from lograft.protocol.partitioner import KeylessPartitioner, partition_for_key
from lograft.protocol.plain_batch import BuiltBatch
from lograft.protocol.produce_wire import CONTENT_TYPE as FORWARD_CONTENT_TYPE
from lograft.protocol.produce_wire import (
    Acks,
    PartitionOutcome,
    decode_request,
    encode_response,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import TimestampOffset

BATCH_CONTENT_TYPE = "application/vnd.lograft.batch"
# JSON produce bodies from this size on are decoded and built into batches
# in a worker thread, bytes. Below it the work (under 10 ms) costs less than
# the thread hand-off. The decode (msgspec: JSON straight into the body's
# Records, request_shapes) is one C call that holds the GIL, so it frees the
# loop only from the Python-level work after it (encoding values, batches).
JSON_OFF_LOOP_BYTES_MIN = 256 * 1024
# Topics only the brokers write to.
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC})
# Fetched data up to this many bytes, uncompressed, is rendered inline.
RENDER_INLINE_BYTES_MAX = INLINE_BYTES_MAX
# A fetch answer larger than this is written in pieces of this size, bytes.
SEND_PIECE_BYTES = 1024 * 1024


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
    # Where keyless records go: `local`, a partition this broker leads when
    # it leads one (nothing forwarded); `all`, every partition in turn.
    keyless_partitions: KeylessPartitions = "local"
    render: RenderLimits = field(default_factory=RenderLimits)


@dataclass(frozen=True, slots=True)
class PreparedProduce:
    """A JSON produce ready to append: a batch per partition, and which of
    the body's records (by index) each batch holds, in batch order. A batch
    of plain records comes with its encoder's account of them (`BuiltBatch`)."""

    acks: str | None
    count: int
    groups: dict[int, Sequence[int]]
    batches: dict[int, bytes | BuiltBatch]


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
        self.limits = limits or DataLimits()
        # Threads for work that grows with what a request carries: the caller's
        # (which it closes), or our own, closed with the app (see add_to).
        self.work = work or RecordWork()
        self._owns_work = work is None
        # Node-to-node calls (None: a node alone, which forwards nothing).
        self.calls = calls or NoPeers()
        # Where a produce's batches go: to each partition's leader, through
        # `calls` (in process for this broker's own, registered below).
        self.router = ProduceRouter(
            replicas,
            self.calls,
            self.work,
            # Looked up per call: `metadata` may be a view of whatever image is current.
            lambda broker_id: self.metadata.broker_url(broker_id),
            produce_decompressed_bytes_max=self.limits.produce_decompressed_bytes_max,
            forward_request_bytes_max=self.limits.forward_request_bytes_max,
            keyless_partitions=self.limits.keyless_partitions,
        )
        # A produce taken here for partitions led here goes to the router's
        # in-process append, not over HTTP to this node.
        self.calls.serve_locally(replicas.broker_id, forward_produce=self.router.produce_here)
        self.keyless = KeylessPartitioner()

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/topics/{topic}/records", self.produce_json)
        app.router.add_post("/v1/topics/{topic}/partitions/{partition}/batches", self.produce_raw)
        app.router.add_get("/v1/topics/{topic}/partitions/{partition}/records", self.fetch)
        app.router.add_get("/v1/topics/{topic}/partitions/{partition}/offsets", self.offsets)
        app.router.add_post(FORWARD_PATH, self.produce_forwarded)
        if self._owns_work:
            app.on_cleanup.append(self._close_work)

    async def _close_work(self, _app: web.Application) -> None:
        self.work.close()

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
        return partition_of(view, parse_partition(raw))

    def _require_local_leader(self, view: TopicView, tp: TopicPartition) -> None:
        self.router.require_local_leader(view, tp)

    # -- produce ----------------------------------------------------------------------

    async def produce_json(self, request: web.Request) -> web.StreamResponse:
        view = self._topic(request.match_info["topic"])
        _refuse_internal(view.name)
        body = await request.read()
        quota = request_quota(request)
        if quota is not None:
            quota.charge_produce(len(body))  # over the hard limit: 429, nothing written
        # A large body's records are decoded and encoded into batches in a
        # record-work thread: that Python work (about 0.2 s for 10,000 small
        # records) would otherwise hold the event loop. The JSON decode itself
        # holds the GIL either way (see JSON_OFF_LOOP_BYTES_MIN).
        prepared = await self.work.run(
            functools.partial(self._prepare_json, view, body),
            inline=len(body) < JSON_OFF_LOOP_BYTES_MIN,
        )
        # The query wins over the body, but a bad value is refused in either.
        parsed_acks = None if prepared.acks is None else Acks.parse(prepared.acks)
        if "acks" in request.query:
            acks = Acks.parse(request.query["acks"])
        else:
            acks = Acks.ALL if parsed_acks is None else parsed_acks
        outcomes = await self.router.produce(view, prepared.batches, acks)
        if acks is Acks.NONE:
            return web.Response(status=202)
        answer_bytes = _in_order_answer(prepared, outcomes)
        if answer_bytes is not None:
            ms = _throttle_ms(request)
            if ms > 0:
                answer_bytes = _with_throttle_field(answer_bytes, ms)
            return web.Response(body=answer_bytes, content_type="application/json")
        offsets, failed = _record_offsets(prepared, outcomes)
        if failed == len(offsets):
            # Nothing was written: answer as any other error, with the
            # per-record outcomes in details.
            first = next(o for p in prepared.groups if isinstance(o := outcomes[p], LograftError))
            first.details["offsets"] = offsets
            raise first
        answer: dict[str, Any] = {"offsets": offsets}
        _add_throttle(answer, request)
        return json_response(answer, 200 if failed == 0 else 207)

    def _prepare_json(self, view: TopicView, body: bytes) -> PreparedProduce:
        """The request decoded, its records grouped by partition, a batch per
        partition. Plain records (no headers) go as columns
        (produce_columns), others one by one (records_json); both give the
        same batches and refuse the same bodies with the same errors."""
        doc = decode_produce_body(body, records_max=self.limits.produce_records_max)
        now_ms = int(time.time() * 1000)
        columns = plain_columns(doc)
        if columns is not None:
            groups = self._partition_records(view, columns.partitions, columns.keys, len(columns))
            batches: dict[int, bytes | BuiltBatch] = {
                p: columns.batch(indices, now_ms) for p, indices in groups.items()
            }
        else:
            records = parse_records(doc)
            groups = self._partition_records(
                view,
                [r.partition for r in records],
                [r.record.key for r in records],
                len(records),
            )
            batches = {
                p: build_batch([records[i].record for i in indices], timestamp_ms=now_ms)
                for p, indices in groups.items()
            }
        return PreparedProduce(body_acks(doc), len(doc.records), groups, batches)

    def _partition_records(
        self,
        view: TopicView,
        partitions: list[int | None] | None,
        keys: list[bytes | None] | None,
        count: int,
    ) -> dict[int, Sequence[int]]:
        """Partition -> indices of its records: the record's own partition,
        else its key's (murmur2), else one partition for all keyless records
        of the request, chosen as the router says (`keyless_choices`)
        (`partitions`/`keys` None: no record has one)."""
        partition_count = len(view.partitions)
        if keys is None:
            if partitions is None:
                return {self._keyless_partition(view): range(count)}
            first = partitions[0]
            if first is not None and first < partition_count and partitions.count(first) == count:
                return {first: range(count)}  # every record names the same partition
        sticky: int | None = None
        groups: dict[int, list[int]] = defaultdict(list)
        for i in range(count):
            p = None if partitions is None else partitions[i]
            key = None if keys is None else keys[i]
            if p is not None:
                if p >= partition_count:
                    raise UnknownTopicOrPartitionError(
                        f"records[{i}].partition={p} but topic "
                        f"{view.name!r} has {partition_count} partitions",
                        topic=view.name,
                        partition=p,
                    )
            elif key is not None:
                p = partition_for_key(key, partition_count)
            else:
                if sticky is None:
                    sticky = self._keyless_partition(view)
                p = sticky
            groups[p].append(i)
        return dict(groups)

    def _keyless_partition(self, view: TopicView) -> int:
        """The partition of the next request's keyless records."""
        choices = self.router.keyless_choices(view)
        return self.keyless.next_request_partition(len(view.partitions), choices)

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
        outcomes = await self.router.append_forwarded(view, req)
        return web.Response(body=encode_response(outcomes), content_type="application/json")

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
        body = await request.read()
        quota = request_quota(request)
        if quota is not None:
            quota.charge_produce(len(body))  # over the hard limit: 429, nothing written
        result = await self.router.append_raw(view, tp, body, acks)
        if acks is Acks.NONE:
            return web.Response(status=202)
        answer: dict[str, Any] = {
            "partition": tp.partition,
            "base_offset": result.first_offset,
            "last_offset": result.last_offset,
            "log_append_time": result.log_append_time_ms,
            "duplicate": result.duplicate,
        }
        _add_throttle(answer, request)
        return json_response(answer)

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
        quota = request_quota(request)
        if quota is not None:
            quota.check_consume()  # owes more than throttle_max_ms: 429, nothing read
            quota_max = quota.consume_bytes_max()
            if quota_max is not None:
                max_bytes = min(max_bytes, quota_max)
        got = await self.replicas.fetch(
            tp,
            offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait,
            min_bytes=min_bytes,
        )
        if BATCH_CONTENT_TYPE in request.headers.get("Accept", ""):
            return await self._raw_fetch(
                request, tp, got.data, got.high_watermark, got.log_start_offset, offset
            )
        page = PageRequest(tp.partition, offset, max_records, max_bytes, value_format, key_format)

        rendered_records = 0

        def render() -> bytes:
            nonlocal rendered_records
            rendered = render_page(got.data, page, self.limits.render)
            rendered_records = len(rendered.records)
            return response_body(
                tp.topic, tp.partition, rendered, got.high_watermark, got.log_start_offset
            )

        # Decoding and rendering ~10,000 records takes ~150 ms of CPU, and one
        # compressed batch may inflate to 64 MiB: on the event loop that would
        # hold up every other request of this node, broker heartbeats and
        # controller duties included (a loaded node was fenced that way).
        body = await self.work.run(render, inline=not worth_a_thread(got.data))
        stats = self.replicas.stats
        if stats is not None:
            stats.topic(tp.topic).records_out += rendered_records
        headers: dict[str, str] = {}
        if quota is not None:
            # Counted as sent: the body as rendered (the field adds ~25 bytes).
            ms = quota.charge_consume(len(body))
            if ms > 0:
                body = await self.work.run(
                    functools.partial(_with_throttle_field, body, ms),
                    inline=len(body) <= INLINE_BYTES_MAX,
                )
            headers = await quota.wait()
        return await send_body(request, body, "application/json", headers)

    async def _raw_fetch(
        self,
        request: web.Request,
        tp: TopicPartition,
        data: bytes,
        hw: int,
        log_start: int,
        offset: int,
    ) -> web.StreamResponse:
        # The offset after the batches, and the records they hold. 50 MiB of
        # small batches is ~800,000 headers to walk.
        span_end, records = await self.work.run(
            functools.partial(batches_span, data), inline=len(data) <= INLINE_BYTES_MAX
        )
        next_offset = max(offset, span_end)
        stats = self.replicas.stats
        if stats is not None:
            stats.topic(tp.topic).records_out += records
        headers = {
            "X-Lograft-High-Watermark": str(hw),
            "X-Lograft-Log-Start-Offset": str(log_start),
            "X-Lograft-Next-Offset": str(next_offset),
        }
        quota = request_quota(request)
        if quota is not None:
            quota.charge_consume(len(data))
            headers.update(await quota.wait())
        return await send_body(request, data, BATCH_CONTENT_TYPE, headers)

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


def _add_throttle(answer: dict[str, Any], request: web.Request) -> None:
    """`throttle_time_ms` in a JSON answer the quotas delay (Kafka's field;
    absent when not throttled). The header says the same."""
    ms = _throttle_ms(request)
    if ms > 0:
        answer["throttle_time_ms"] = ms


def _throttle_ms(request: web.Request) -> int:
    """Milliseconds the quotas delay this request's answer (0: none)."""
    quota = request_quota(request)
    return 0 if quota is None else quota.settle()


def _with_throttle_field(body: bytes, ms: int) -> bytes:
    """A JSON object's bytes with `"throttle_time_ms": ms` added last."""
    return b"".join((body[:-1], b',"throttle_time_ms":', str(ms).encode(), b"}"))


def _in_order_answer(
    prepared: PreparedProduce, outcomes: dict[int, PartitionOutcome]
) -> bytes | None:
    """The answer's JSON when every record went to one partition that took
    them (most requests: keyless records, or all for one partition), rendered
    without a dict per record; None otherwise. The same bytes as orjson gives
    for `_record_offsets`' list (one group holds every record, in body order)."""
    if len(prepared.groups) != 1:
        return None
    (p,) = prepared.groups
    outcome = outcomes[p]
    if isinstance(outcome, LograftError):
        return None
    entries = offsets_entries(p, outcome.first_offset, prepared.count, duplicate=outcome.duplicate)
    return f'{{"offsets":[{entries}]}}'.encode()


def _record_offsets(
    prepared: PreparedProduce, outcomes: dict[int, PartitionOutcome]
) -> tuple[list[dict[str, Any] | None], int]:
    """Each record's outcome in body order (its partition and offset, or its
    partition's error), and how many records failed."""
    offsets: list[dict[str, Any] | None] = [None] * prepared.count
    failed = 0
    for p, indices in prepared.groups.items():
        outcome = outcomes[p]
        if isinstance(outcome, LograftError):
            entry = {"partition": p, "error": error_dict(outcome)}
            for i in indices:
                offsets[i] = entry
            failed += len(indices)
            continue
        first = outcome.first_offset
        if outcome.duplicate:
            for n, i in enumerate(indices):
                offsets[i] = {"partition": p, "offset": first + n, "duplicate": True}
        else:
            for n, i in enumerate(indices):
                offsets[i] = {"partition": p, "offset": first + n}
    return offsets, failed


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


__all__ = ["BATCH_CONTENT_TYPE", "DataLimits", "DataRoutes", "RecordInput", "json_response"]
