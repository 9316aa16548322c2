"""JSON <-> records at the HTTP edge.

Produce body (`POST /v1/topics/{topic}/records`, `request_shapes.ProduceBody`)::

    {"value_format": "json" | "string" | "base64",     default "json"
     "key_format":   "string" | "base64" | "json",     default "string"
     "records": [{"key": ..., "value": ..., "headers": {"name": "text", ...}
                  or [{"key": "name", "value": "text" | null}, ...],
                  "partition": 0, "timestamp": 1700000000000}, ...]}

`json` values are stored as their compact UTF-8 JSON text (integers of any
size exactly as sent); `string` as
UTF-8; `base64` as the decoded bytes. Header values are UTF-8 strings, or
base64 with `"header_format": "base64"`.

Fetched records are rendered with the same formats; `auto` (the default for
reading) shows a value as JSON when it parses as JSON, else as a string when
it is UTF-8, else as base64 with `"value_encoding": "base64"` beside it, so a
person with curl always sees something faithful.

Rendering is bounded (`RenderLimits`): one record's JSON may take at most
`record_render_bytes_max` bytes (a string of control characters renders to
six times its size: a 63 MiB value of zeros was once rendered as a 378 MiB
body), and a fetch or a stream read inflates at most
`fetch_decompressed_bytes_max` bytes of compressed batches.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from lograft.api import request_shapes as shapes
from lograft.api.request_shapes import ProduceBody, decode_body
from lograft.errors import InvalidRequestError, RecordTooLargeError
from lograft.protocol.batch import (
    BatchHeader,
    Header,
    Record,
    RecordInput,
    decode_records,
    iter_batches,
    records_section,
)
from lograft.protocol.compression import Compression, DecompressionBudget

# The read formats and the record renderer are the protocol's (`lograft consume`
# renders what it fetches raw the same way); re-exported for the routes.
from lograft.protocol.record_json import READ_FORMATS as READ_FORMATS
from lograft.protocol.record_json import render_record

RAW_CONTENT_TYPE = "application/vnd.lograft.batch"


@dataclass(frozen=True, slots=True)
class RenderLimits:
    # Largest JSON one record may render to, bytes; a larger record is refused
    # with MESSAGE_TOO_LARGE (read it raw). Rendering one record holds the
    # interpreter for its whole length (~8 ms per MiB of output in the worst
    # case), so this also bounds how long one record can hold up the node.
    record_render_bytes_max: int = 8 * 1024 * 1024
    # Decompressed bytes one JSON fetch (or one stream read) may inflate; the
    # first batch is always inflated (up to the 64 MiB one-batch bound).
    fetch_decompressed_bytes_max: int = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """One record of a produce request, with its requested partition (or None)."""

    index: int
    partition: int | None
    record: RecordInput


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    records: list[ProduceRecord]
    acks: str | None


def parse_produce_body(body: bytes, *, records_max: int) -> ProduceRequest:
    """The produce body (`request_shapes.ProduceBody`), its records encoded
    one by one (the node takes plain bodies as columns: produce_columns)."""
    doc = decode_produce_body(body, records_max=records_max)
    return ProduceRequest(parse_records(doc), body_acks(doc))


def decode_produce_body(body: bytes, *, records_max: int) -> ProduceBody:
    """The produce body decoded and checked (`request_shapes.ProduceBody`),
    at most `records_max` records."""
    doc = decode_body(body, ProduceBody, empty=None)
    if len(doc.records) > records_max:
        raise InvalidRequestError(
            f"{len(doc.records)} records in one request; the limit is {records_max}",
            limit=records_max,
        )
    return doc


def body_acks(doc: ProduceBody) -> str | None:
    """The body's `acks` as text, for `Acks.parse` (None: not given)."""
    return None if doc.acks is None else str(doc.acks)


def parse_records(doc: ProduceBody) -> list[ProduceRecord]:
    """Each record of a decoded body encoded in its formats; the first bad
    key, value or header (in record order, key before value) raises."""
    return [
        _parse_record(i, r, doc.value_format, doc.key_format, doc.header_format)
        for i, r in enumerate(doc.records)
    ]


def _parse_record(
    i: int, raw: shapes.ProduceRecord, value_format: str, key_format: str, header_format: str
) -> ProduceRecord:
    where = f"records[{i}]"
    key = encode_value(raw.key, key_format, f"{where}.key")
    value = encode_value(raw.value, value_format, f"{where}.value")
    headers = _parse_headers(raw.headers, header_format, f"{where}.headers")
    return ProduceRecord(i, raw.partition, RecordInput(value, key, headers, raw.timestamp))


def encode_value(value: Any, fmt: str, where: str) -> bytes | None:
    if value is None:
        return None
    if fmt == "json":
        # Compact JSON text of what the client sent; msgspec keeps integers
        # past 64 bits exact (orjson would have made them floats).
        return msgspec.json.encode(value)
    if not isinstance(value, str):
        raise InvalidRequestError(f"{where} must be a string with format {fmt}", field=where)
    if fmt == "string":
        return value.encode()
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"{where} is not valid base64", field=where) from None


def _parse_headers(
    raw: dict[str, str | None] | list[shapes.HeaderItem] | None, fmt: str, where: str
) -> tuple[Header, ...]:
    if raw is None:
        return ()
    pairs = list(raw.items()) if isinstance(raw, dict) else [(h.key, h.value) for h in raw]
    return tuple((name, encode_value(value, fmt, f"{where}.{name}")) for name, value in pairs)


def record_size(rec: Record) -> int:
    """Bytes of a record's key, value and headers: what its JSON takes at least
    (except JSON values whose text shrinks when re-rendered)."""
    size = len(rec.key or b"") + len(rec.value or b"")
    for name, value in rec.headers:
        size += len(name) + len(value or b"")
    return size


def render_record_json(
    rec: Record, partition: int, value_format: str, key_format: str, *, bytes_max: int
) -> bytes:
    """One record as JSON text of at most `bytes_max` bytes; a record whose key,
    value and headers alone exceed it is refused before anything is rendered,
    one whose JSON does right after (RecordTooLargeError, with the offset to
    go on from)."""
    size = record_size(rec)
    if size <= bytes_max:
        body = orjson.dumps(render_record(rec, partition, value_format, key_format))
        if len(body) <= bytes_max:
            return body
    raise too_large_to_render(rec.offset, partition, size, bytes_max)


def too_large_to_render(
    offset: int, partition: int, size: int, bytes_max: int
) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"the record at offset {offset} of partition {partition} ({size} bytes) renders to "
        f"more than record_render_bytes_max={bytes_max} bytes of JSON; read it raw "
        f"(Accept: {RAW_CONTENT_TYPE}) or go on from offset {offset + 1}",
        partition=partition,
        offset=offset,
        next_offset=offset + 1,
        record_bytes=size,
        limit=bytes_max,
        limit_name="record_render_bytes_max",
    )


def records_to_render(
    section: bytes | memoryview,
    header: BatchHeader,
    start_offset: int,
    partition: int,
    limits: RenderLimits,
) -> Iterator[Record]:
    """The records of one batch at or after `start_offset`; one too large to
    render raises (as `render_record_json` would) before it is even copied."""
    try:
        yield from decode_records(
            section,
            header,
            start_offset=start_offset,
            record_bytes_max=limits.record_render_bytes_max,
        )
    except RecordTooLargeError as exc:
        d = exc.details
        raise too_large_to_render(d["offset"], partition, d["record_bytes"], d["limit"]) from None


def sections_to_render(
    data: bytes, position: int, limits: RenderLimits, stop_offset: int | None = None
) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
    """(header, records section) of each batch of `data` that ends after
    `position` and starts before `stop_offset`, decompressed. Compressed
    sections inflate to at most `limits.fetch_decompressed_bytes_max` bytes
    in all (the first always inflates, up to the one-batch bound); the walk
    ends before the batch that would take more."""
    budget = DecompressionBudget(
        limits.fetch_decompressed_bytes_max, "fetch_decompressed_bytes_max"
    )
    inflated = False
    for pos, header in iter_batches(data):
        if stop_offset is not None and header.base_offset >= stop_offset:
            return
        if header.next_offset <= position:
            continue  # wholly before the position: nothing in it to show
        if header.compression == Compression.NONE:
            yield header, records_section(data, pos, header)
            continue
        if inflated and budget.remaining == 0:
            return
        try:
            section = records_section(
                data, pos, header, decompressed_max=budget.remaining if inflated else None
            )
        except RecordTooLargeError:
            if not inflated:
                raise
            return  # the budget is spent: this batch is the next read's
        budget.spend(len(section))
        inflated = True
        yield header, section
