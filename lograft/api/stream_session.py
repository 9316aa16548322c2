"""One running stream: fetch per partition, render, write, with back-pressure.

Each partition has at most one fetch in flight, and a partition's next fetch
starts only after its previous chunk has been written to the client. A write
awaits the transport's drain (aiohttp drains once 64 KiB were written since
the last drain, and the transport pauses the writer above its 64 KiB high
water mark), so a reader that stops reading stops the stream from reading the
log: nothing is buffered for it beyond the bound below.

Memory one stream holds (`buffered_bytes` reports the live figure):

- raw batches: at most `max_bytes`, split evenly between the stream's
  partitions (a batch larger than its partition's share still comes whole,
  as in Kafka's fetch, so add one batch per partition when batches exceed
  `max_bytes / partitions`);
- rendered events: at most `write_block_bytes` plus one event;
- the transport's buffer: at most its high water mark (64 KiB) plus the 64 KiB
  aiohttp writes between drains, plus one block.

With the defaults (`max_bytes` 256 KiB, blocks of 64 KiB) that is at most
512 KiB per stream (`memory_bound_bytes`), plus the kernel's socket buffers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
from aiohttp import web

from lograft.api import sse
from lograft.api.http_errors import error_body
from lograft.api.routes_data import RENDER_INLINE_BYTES_MAX
from lograft.api.stream_events import Block, RenderSpec, render_blocks
from lograft.api.stream_source import Chunk, PartitionSource
from lograft.errors import LograftError

HEARTBEAT = sse.comment("keep-alive")
# asyncio's default write buffer high water mark, bytes (aiohttp keeps it).
TRANSPORT_HIGH_WATER_BYTES = 64 * 1024
# aiohttp's StreamWriter drains once this many bytes were written since the last drain.
AIOHTTP_DRAIN_EVERY_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class SessionSettings:
    value_format: str
    key_format: str
    max_bytes: int  # raw batch bytes per round of fetches, all partitions together
    write_block_bytes: int
    heartbeat_interval_ms: int
    liveness_check_ms: int


def memory_bound_bytes(max_bytes: int, write_block_bytes: int) -> int:
    """The documented bound on what one stream buffers, bytes, when no batch is
    larger than its partition's share of `max_bytes` and no single event is
    larger than a block."""
    return (
        max_bytes + 2 * write_block_bytes + TRANSPORT_HIGH_WATER_BYTES + AIOHTTP_DRAIN_EVERY_BYTES
    )


class StreamSession:
    def __init__(
        self,
        request: web.Request,
        response: web.StreamResponse,
        sources: Mapping[int, PartitionSource],
        positions: Mapping[int, int],
        settings: SessionSettings,
    ) -> None:
        self.request = request
        self.response = response
        self.sources = dict(sources)
        self.positions = dict(positions)
        self.settings = settings
        self.share_bytes = max(1, settings.max_bytes // len(self.sources))
        # Observable state (tests, and anyone debugging a slow consumer).
        self.records_delivered = 0
        self.fetched_bytes_total = 0
        self.held_bytes = 0  # fetched raw bytes and rendered bytes not yet written
        self._last_write = time.monotonic()

    @property
    def cursor(self) -> str:
        return sse.format_cursor(self.positions)

    def buffered_bytes(self) -> int:
        """Bytes this stream holds right now: chunks, a rendered block, the transport's buffer."""
        transport = self.request.transport
        in_transport = transport.get_write_buffer_size() if transport is not None else 0
        return self.held_bytes + in_transport

    async def run(self) -> None:
        """Stream until the client goes, or an error ends the stream with `event: error`."""
        tasks: dict[asyncio.Task[Chunk], int] = {}
        try:
            await self._write(sse.id_only(self.cursor))
            for p in sorted(self.sources):
                tasks[self._start_fetch(p)] = p
            while not self._client_gone():
                done, _ = await asyncio.wait(
                    tasks, timeout=self._wait_s(), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    await self._heartbeat_if_due()
                    continue
                for task in sorted(done, key=lambda t: tasks[t]):
                    p = tasks.pop(task)
                    await self._deliver(task.result())
                    tasks[self._start_fetch(p)] = p
        except LograftError as exc:
            await self._send_error(exc)
        except ConnectionError:
            return  # the client went away while we wrote
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # -- fetching ---------------------------------------------------------------------

    def _start_fetch(self, partition: int) -> asyncio.Task[Chunk]:
        return asyncio.create_task(
            self._fetch(partition), name=f"stream-fetch-{self.sources[partition].tp}"
        )

    async def _fetch(self, partition: int) -> Chunk:
        chunk = await self.sources[partition].fetch(self.positions[partition], self.share_bytes)
        self.held_bytes += len(chunk.data)
        self.fetched_bytes_total += len(chunk.data)
        return chunk

    # -- writing ----------------------------------------------------------------------

    async def _deliver(self, chunk: Chunk) -> None:
        p = chunk.partition
        prefix, suffix = sse.cursor_template(self.positions, p)
        spec = RenderSpec(p, self.settings.value_format, self.settings.key_format, prefix, suffix)
        blocks = render_blocks(
            chunk.data,
            self.positions[p],
            chunk.high_watermark,
            spec,
            self.settings.write_block_bytes,
        )
        # Rendering thousands of records is CPU the event loop must not spend
        # in one go (see the fetch route); each block is rendered in a thread.
        offload = len(chunk.data) > RENDER_INLINE_BYTES_MAX
        try:
            while True:
                block: Block | None = (
                    await asyncio.to_thread(next, blocks, None) if offload else next(blocks, None)
                )
                if block is None:
                    return
                if block.data:
                    self.held_bytes += len(block.data)
                    try:
                        await self._write(block.data)
                    finally:
                        self.held_bytes -= len(block.data)
                self.records_delivered += block.records
                self.positions[p] = block.position
        finally:
            self.held_bytes -= len(chunk.data)

    async def _write(self, data: bytes) -> None:
        await self.response.write(data)  # awaits the transport's drain
        self._last_write = time.monotonic()

    async def _heartbeat_if_due(self) -> None:
        if time.monotonic() - self._last_write >= self.settings.heartbeat_interval_ms / 1000:
            await self._write(HEARTBEAT)

    def _wait_s(self) -> float:
        due = self._last_write + self.settings.heartbeat_interval_ms / 1000 - time.monotonic()
        return max(0.0, min(due, self.settings.liveness_check_ms / 1000))

    def _client_gone(self) -> bool:
        # aiohttp does not cancel a handler whose client left; an idle stream
        # notices here, a busy one when its next write fails.
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def _send_error(self, exc: LograftError) -> None:
        with contextlib.suppress(ConnectionError):
            await self._write(sse.event(orjson.dumps(error_body(exc)), name="error"))


__all__ = ["SessionSettings", "StreamSession", "memory_bound_bytes"]
