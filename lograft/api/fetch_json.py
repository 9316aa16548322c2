"""A JSON fetch's records, rendered within bounds, and its response body.

`render_page` walks the fetched batches and renders records at or after the
fetch offset until the next one would not fit:

- at most `max_records` records;
- at most `max_bytes` bytes of rendered records: a record that would take the
  page past it is left for the next fetch, except the page's first record,
  which comes whatever its size (as Kafka returns the first batch past
  `fetch.max.bytes`), so a consumer always makes progress;
- no record whose JSON exceeds `record_render_bytes_max`: as the page's first
  record it is refused with MESSAGE_TOO_LARGE naming the offset to go on from
  (it can only be read raw), later in a page it ends the page;
- compressed batches inflate to at most `fetch_decompressed_bytes_max` bytes
  in all; the first batch with records to show is always inflated.

`next_offset` is where the next fetch starts: past the last record rendered,
or past the last batch when a batch was rendered whole (compaction leaves
batches whose last offsets hold no record, and a consumer following records
only would ask for the same empty range forever).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from lograft.api.records_json import (
    RenderLimits,
    record_size,
    records_to_render,
    render_record_json,
    sections_to_render,
)
from lograft.errors import RecordTooLargeError


@dataclass(frozen=True, slots=True)
class Page:
    records: list[bytes]  # each record's JSON
    next_offset: int


@dataclass(frozen=True, slots=True)
class PageRequest:
    partition: int
    offset: int
    max_records: int
    max_bytes: int
    value_format: str
    key_format: str


def render_page(data: bytes, req: PageRequest, limits: RenderLimits) -> Page:
    """The records of `data` (whole batches) that fit the bounds; see the module."""
    records: list[bytes] = []
    used = 0  # rendered bytes, separators included
    next_offset = req.offset
    for header, section in sections_to_render(data, req.offset, limits):
        try:
            for rec in records_to_render(section, header, req.offset, req.partition, limits):
                if len(records) >= req.max_records:
                    return Page(records, next_offset)
                if records and record_size(rec) > req.max_bytes - used:
                    return Page(records, next_offset)  # cannot fit: no need to render it
                body = render_record_json(
                    rec,
                    req.partition,
                    req.value_format,
                    req.key_format,
                    bytes_max=limits.record_render_bytes_max,
                )
                if records and used + len(body) + 1 > req.max_bytes:
                    return Page(records, next_offset)
                records.append(body)
                used += len(body) + 1
                next_offset = rec.offset + 1
        except RecordTooLargeError:
            if not records:
                raise
            return Page(records, next_offset)  # the next fetch starts with it, and refuses it
        next_offset = max(next_offset, header.next_offset)
    return Page(records, next_offset)


def response_body(
    topic: str, partition: int, page: Page, high_watermark: int, log_start_offset: int
) -> bytes:
    """The fetch answer, with the records' JSON spliced in as rendered."""
    head = orjson.dumps({"topic": topic, "partition": partition})
    tail = orjson.dumps(
        {
            "next_offset": page.next_offset,
            "high_watermark": high_watermark,
            "log_start_offset": log_start_offset,
        }
    )
    return b"".join((head[:-1], b',"records":[', b",".join(page.records), b"],", tail[1:]))


__all__ = ["Page", "PageRequest", "render_page", "response_body"]
