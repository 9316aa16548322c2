"""Fetched record batches -> Server-Sent Events, in blocks of bounded size.

Each record at or after the partition's position and below the high
watermark becomes one event: `id:` is the stream cursor with this partition
just past the record (`lograft.api.sse`), `data:` the same JSON object the
fetch endpoint returns for it. Records before the position (a batch may start
earlier) and at or past the high watermark are skipped, so a record is never
delivered twice and never before it is committed.

Blocks are at most `block_bytes` (or one event, if a single event is larger),
so rendering never holds a whole chunk's worth of text: JSON of small records
is many times the size of their bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from lograft.api import sse
from lograft.api.records_json import render_record
from lograft.storage.batch import iter_batch_records, iter_batches


@dataclass(frozen=True, slots=True)
class RenderSpec:
    """What a chunk of one partition renders with."""

    partition: int
    value_format: str
    key_format: str
    # The cursor around this partition's position (`sse.cursor_template`).
    id_prefix: str
    id_suffix: str


@dataclass(frozen=True, slots=True)
class Block:
    data: bytes  # whole events; empty when the chunk had no record left to deliver
    position: int  # the partition's position once `data` is delivered
    records: int


def render_blocks(
    data: bytes, position: int, high_watermark: int, spec: RenderSpec, block_bytes: int
) -> Iterator[Block]:
    """Blocks of events for the records of `data` in [position, high_watermark).

    The last block's position is also past batches whose last offsets hold no
    record (compaction), as the fetch endpoint's `next_offset`: a stream must
    not ask for the same empty range again.
    """
    out = bytearray()
    count = 0
    for pos, header in iter_batches(data):
        if header.base_offset >= high_watermark:
            break
        for rec in iter_batch_records(data, pos, header):
            if rec.offset < position:
                continue
            if rec.offset >= high_watermark:
                break
            body = orjson.dumps(
                render_record(rec, spec.partition, spec.value_format, spec.key_format)
            )
            position = rec.offset + 1
            out += sse.event(body, event_id=f"{spec.id_prefix}{position}{spec.id_suffix}")
            count += 1
            if len(out) >= block_bytes:
                yield Block(bytes(out), position, count)
                out.clear()
                count = 0
        if header.next_offset <= high_watermark:
            position = max(position, header.next_offset)
    yield Block(bytes(out), position, count)


__all__ = ["Block", "RenderSpec", "render_blocks"]
