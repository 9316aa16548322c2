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
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from lograft.api.access import reauthorize
from lograft.api.authentication import reauthenticate
from lograft.api.http_errors import error_body
from lograft.api.quota_gate import RequestQuota
from lograft.api.record_work import RecordWork, worth_a_thread
from lograft.api.records_json import RenderLimits
from lograft.api.stream import sse
from lograft.api.stream.events import Block, RenderSpec, render_blocks
from lograft.api.stream.group import GroupMember
from lograft.api.stream.source import Chunk, PartitionSource
from lograft.brokers.broker_stats import TopicStats
from lograft.errors import LograftError

log = logging.getLogger(__name__)

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
    render: RenderLimits = field(default_factory=RenderLimits)


def memory_bound_bytes(max_bytes: int, write_block_bytes: int) -> int:
    """The documented bound on what one stream buffers, bytes, when no batch is
    larger than its partition's share of `max_bytes` and no single event is
    larger than a block."""
    return (
        max_bytes + 2 * write_block_bytes + TRANSPORT_HIGH_WATER_BYTES + AIOHTTP_DRAIN_EVERY_BYTES
    )


@dataclass(frozen=True, slots=True)
class GroupBinding:
    """What a stream that consumes as a group member needs besides its member."""

    member: GroupMember
    make_source: Callable[[int], PartitionSource]
    commit_interval_ms: int
    resume: Mapping[int, int]  # positions from the client's cursor (Last-Event-ID)


class StreamSession:
    def __init__(
        self,
        request: web.Request,
        response: web.StreamResponse,
        sources: Mapping[int, PartitionSource],
        positions: Mapping[int, int],
        settings: SessionSettings,
        group: GroupBinding | None = None,
        *,
        work: RecordWork,
        quota: RequestQuota | None = None,
        counts: TopicStats | None = None,
    ) -> None:
        self.request = request
        # The topic's broker counters (records sent out), None: metrics off.
        self.counts = counts
        self.response = response
        self.sources = dict(sources)
        self.positions = dict(positions)
        self.settings = settings
        self.group = group
        # Threads that render chunks worth one (the routes', shared; their
        # owner closes them, a session never builds its own).
        self.work = work
        # The client's quotas: each push is counted as consumer bytes, and
        # one over the quota is followed by `: throttle_ms=N` and a wait.
        self.quota = quota
        self.throttle_ms_total = 0
        # Fetch in flight -> its partition: at most one per partition.
        self._fetches: dict[asyncio.Task[Chunk], int] = {}
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
        group = self.group
        member_task: asyncio.Task[None] | None = None
        change_task: asyncio.Task[bool] | None = None
        try:
            if group is None:
                await self._write(sse.id_only(self.cursor))
            for p in sorted(self.sources):
                self._start_fetch(p)
            if group is not None:
                member_task = asyncio.create_task(
                    group.member.run(lambda: dict(self.positions), group.commit_interval_ms),
                    name=f"stream-member-{group.member.group_id}",
                )
                await self._reconcile(group)
                change_task = asyncio.create_task(group.member.changed.wait())
            while not self._client_gone():
                waiting: set[asyncio.Future[Any]] = set(self._fetches)
                waiting.update(t for t in (member_task, change_task) if t is not None)
                done, _ = await asyncio.wait(
                    waiting, timeout=self._wait_s(), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    await self._heartbeat_if_due()
                    continue
                if member_task in done:
                    member_task.result()  # it only ends by raising what ends the stream
                if group is not None and change_task in done:
                    await self._reconcile(group)
                    change_task = asyncio.create_task(group.member.changed.wait())
                fetched = [t for t in done if t in self._fetches]
                for task in sorted(fetched, key=lambda t: self._fetches[t]):
                    p = self._fetches.pop(task)
                    await self._deliver(task.result())
                    self._start_fetch(p)
        except LograftError as exc:
            await self._send_error(exc)
        except ConnectionError:
            return  # the client went away while we wrote
        except Exception:  # the stream has started: no JSON answer can follow
            log.exception("stream of %s ended by an unexpected error", self.request.path)
            await self._send_error(LograftError("internal error; see the node's log"))
        finally:
            fetches = list(self._fetches)
            self._fetches.clear()
            try:
                await cancel_and_wait(*fetches, change_task, member_task)
            finally:
                if group is not None:
                    await group.member.leave(dict(self.positions))

    # -- group membership -------------------------------------------------------------

    async def _reconcile(self, group: GroupBinding) -> None:
        """Hold exactly the member's assigned partitions: revoked ones are committed
        and given up first, new ones start at their committed offset."""
        member = group.member
        member.changed.clear()
        wanted = member.assigned
        revoked = sorted(set(self.sources) - wanted)
        for p in revoked:
            for task, tp in list(self._fetches.items()):
                if tp == p:
                    del self._fetches[task]
                    await cancel_and_wait(task)
                    self._release_held(task)
            position = self.positions.pop(p)
            del self.sources[p]
            # A revoked partition's position is committed; a lost one's is not.
            await member.release(p, position)
        added = wanted - set(self.sources)
        taken = False
        if added:
            starts = await member.start_positions(set(added))
            for p in sorted(added):
                if not member.hold(p):
                    continue  # taken away meanwhile: `changed` is set again
                # A cursor from this client (Last-Event-ID) may be ahead of the
                # last commit: it has seen those records already.
                self.positions[p] = max(starts[p], group.resume.get(p, -1))
                self.sources[p] = group.make_source(p)
                self._start_fetch(p)
                taken = True
        if revoked or taken:
            await self._write(self._assignment_event(group))

    def _assignment_event(self, group: GroupBinding) -> bytes:
        member = group.member
        body = {
            "group_id": member.group_id,
            "member_id": member.core.member_id,
            "member_epoch": member.core.member_epoch,
            "topic": member.topic,
            "partitions": sorted(self.sources),
        }
        return sse.event(orjson.dumps(body), event_id=self.cursor, name="assignment")

    # -- fetching ---------------------------------------------------------------------

    def _start_fetch(self, partition: int) -> None:
        task = asyncio.create_task(
            self._fetch(partition), name=f"stream-fetch-{self.sources[partition].tp}"
        )
        self._fetches[task] = partition

    async def _fetch(self, partition: int) -> Chunk:
        share = max(1, self.settings.max_bytes // max(1, len(self.sources)))
        chunk = await self.sources[partition].fetch(self.positions[partition], share)
        self.held_bytes += len(chunk.data)
        self.fetched_bytes_total += len(chunk.data)
        return chunk

    def _release_held(self, task: asyncio.Task[Chunk]) -> None:
        """A fetched chunk that will not be delivered no longer counts as held."""
        if task.done() and not task.cancelled() and task.exception() is None:
            self.held_bytes -= len(task.result().data)

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
            self.settings.render,
        )
        # Rendering thousands of records, or inflating a compressed batch, is
        # CPU the event loop must not spend (see the fetch route); each block
        # is rendered in a worker thread.
        inline = not worth_a_thread(chunk.data)
        try:
            # The caller's ACLs of now, not of when the stream started: an
            # ACL removed meanwhile ends the stream with a 403 error event
            # before anything more is sent (api/access.py `reauthorize`).
            # Likewise a token that has expired since the stream started
            # (api/authentication.py `reauthenticate`): 401 error event.
            reauthenticate(self.request)
            reauthorize(self.request)
            while True:
                block: Block | None = await self.work.run(
                    functools.partial(next, blocks, None), inline=inline
                )
                if block is None:
                    return
                if block.data:
                    self.held_bytes += len(block.data)
                    try:
                        await self._write(block.data)
                    finally:
                        self.held_bytes -= len(block.data)
                    await self._pace(len(block.data))
                self.records_delivered += block.records
                if self.counts is not None:
                    self.counts.records_out += block.records
                self.positions[p] = block.position
        finally:
            self.held_bytes -= len(chunk.data)

    async def _write(self, data: bytes) -> None:
        await self.response.write(data)  # awaits the transport's drain
        self._last_write = time.monotonic()

    async def _pace(self, sent: int) -> None:
        """Throttle between pushes: a push over the consumer quota is
        followed by its throttle time as a comment, then that wait."""
        if self.quota is None:
            return
        ms = self.quota.charge_consume(sent)
        if ms > 0:
            await self._write(b": throttle_ms=%d\n\n" % ms)
            self.throttle_ms_total += ms
            await self.quota.gate.sleep(ms)

    async def _heartbeat_if_due(self) -> None:
        if time.monotonic() - self._last_write >= self.settings.heartbeat_interval_ms / 1000:
            await self._write(HEARTBEAT)

    def _wait_s(self) -> float:
        due = self._last_write + self.settings.heartbeat_interval_ms / 1000 - time.monotonic()
        return max(0.0, min(due, self.settings.liveness_check_ms / 1000))

    def _client_gone(self) -> bool:
        # aiohttp does not cancel a handler whose client left; an idle stream
        # notices here, a busy one when its next write fails.
        return client_gone(self.request)

    async def _send_error(self, exc: LograftError) -> None:
        with contextlib.suppress(ConnectionError):
            await self._write(sse.event(orjson.dumps(error_body(exc)), name="error"))


def client_gone(request: web.Request) -> bool:
    """The client's connection is closed or closing."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel `tasks` and wait until every one has ended (its own cleanup included).

    Their outcomes are dropped. A cancellation of the caller is not swallowed:
    it is raised once the tasks have ended, so the cleanup still finishes first.
    """
    todo = [t for t in tasks if t is not None]
    for task in todo:
        task.cancel()
    cancelled = False
    while pending := [t for t in todo if not t.done()]:
        try:
            await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True  # ours: finish waiting for the tasks, then raise it
    for task in todo:
        if not task.cancelled():
            task.exception()  # retrieved: nobody else will
    if cancelled:
        raise asyncio.CancelledError


__all__ = [
    "GroupBinding",
    "SessionSettings",
    "StreamSession",
    "cancel_and_wait",
    "client_gone",
    "memory_bound_bytes",
]
