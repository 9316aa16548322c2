"""Fetched record batches -> Server-Sent Events, in blocks of bounded size.

Each record at or after the partition's position and below the high
watermark becomes one event: `id:` is the stream cursor with this partition
just past the record (`lograft.api.stream.sse`), `data:` the same JSON object the
fetch endpoint returns for it. Records before the position (a batch may start
earlier) and at or past the high watermark are skipped, so a record is never
delivered twice and never before it is committed.

Blocks are at most `block_bytes` (or one event, if a single event is larger),
so rendering never holds a whole chunk's worth of text: JSON of small records
is many times the size of their bytes.

Bounded as the fetch endpoint is (`RenderLimits`): a record whose JSON would
exceed `record_render_bytes_max` raises MESSAGE_TOO_LARGE (the stream ends
with it as `event: error`, naming the offset to go on from), and a chunk's
compressed batches inflate to at most `fetch_decompressed_bytes_max` bytes
(the first one always): the last block's position then stops before the
batch left over, which the next read starts with.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lograft.api.records_json import (
    RenderLimits,
    records_to_render,
    render_record_json,
    sections_to_render,
)
from lograft.api.stream import sse
from lograft.errors import RecordTooLargeError


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
    data: bytes,
    position: int,
    high_watermark: int,
    spec: RenderSpec,
    block_bytes: int,
    limits: RenderLimits | None = None,
) -> Iterator[Block]:
    """Blocks of events for the records of `data` in [position, high_watermark).

    The last block's position is also past batches whose last offsets hold no
    record (compaction), as the fetch endpoint's `next_offset`: a stream must
    not ask for the same empty range again.
    """
    limits = limits or RenderLimits()
    out = bytearray()
    count = 0
    try:
        for header, section in sections_to_render(data, position, limits, high_watermark):
            for rec in records_to_render(section, header, position, spec.partition, limits):
                if rec.offset >= high_watermark:
                    break
                body = render_record_json(
                    rec,
                    spec.partition,
                    spec.value_format,
                    spec.key_format,
                    bytes_max=limits.record_render_bytes_max,
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
    except RecordTooLargeError:
        if count:
            yield Block(bytes(out), position, count)  # what came before it is delivered
        raise
    yield Block(bytes(out), position, count)


__all__ = ["Block", "RenderSpec", "render_blocks"]
