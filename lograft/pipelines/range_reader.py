"""The executor side of the source: read one offset range of one partition
straight from its leader, as Arrow record batches.

A Spark task gets an `OffsetRange` [start, end) and reads it here with the
client's pieces: `GET .../records` with `Accept: application/vnd.lograft.batch`
(raw RecordBatch v2 bytes, CRC-checked and decoded once, straight into
Arrow columns by `arrow_rows.fetch_rows`), on the leader the driver named,
then wherever the metadata says the leader is (the client's `Fetcher.leader_url` / `on_retriable`: a
NOT_LEADER answer naming the new leader is followed at once, other retriable
errors refresh the metadata and back off). Nothing but the range passed
through the driver.

Every record of the range is returned once, in offset order, and nothing
outside it: a batch may start before `start` (its earlier records are
skipped) or run past `end` (its later records belong to the next range).
Offsets with no record (compaction, control batches) are stepped over by
`X-Lograft-Next-Offset`.

Data loss, under `failOnDataLoss` (raise `DataLossError`, or log a WARNING
and go on): records deleted by retention before they were read
(OFFSET_OUT_OF_RANGE below the log start: continue from the log start), a
log that ends below the range (the topic was deleted and re-created, or an
unclean election truncated it: stop), a partition that no longer exists.

A range that makes no progress for `kafkaConsumer.pollTimeoutMs` (no
leader, or a new leader whose high watermark has not caught up) fails the
task with the last error, unless the log turned out to end below the range
(data loss, above).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lograft.client.config import ConsumerConfig
from lograft.client.errors import ClientTimeoutError
from lograft.client.fetcher import Fetcher, Missing, PartitionState
from lograft.client.metadata import connect
from lograft.client.transport import BATCH_CONTENT_TYPE, NEXT_OFFSET_HEADER, Transport
from lograft.errors import LograftError, OffsetOutOfRangeError
from lograft.pipelines.arrow_rows import FetchRows, fetch_rows
from lograft.pipelines.offsets import OffsetRange
from lograft.pipelines.options import DEFAULT_FETCH_MAX_DECOMPRESSED_BYTES, SourceOptions

log = logging.getLogger("lograft.pipelines")

# Long-poll of one fetch, ms: returns at once when records are there; only
# waits when the leader's high watermark is below the range (after a failover).
FETCH_WAIT_MS = 500

FAIL_HINT = (
    " Some data may have been lost because they are not available in lograft any more; either "
    "the data was deleted by retention or the topic was deleted (or re-created) before all its "
    "data was processed. If you don't want your query to fail on such cases, set the source "
    'option "failOnDataLoss" to "false".'
)
WARN_HINT = (
    " Some data may have been lost because they are not available in lograft any more; either "
    "the data was deleted by retention or the topic was deleted (or re-created) before all its "
    "data was processed. If you want your query to fail on such cases, set the source option "
    '"failOnDataLoss" to "true".'
)


class DataLossError(LograftError):
    """Records a query was to read are gone (retention, topic re-created or
    deleted, log truncated) and failOnDataLoss is true. Client-side: no
    server sends it, so it is not in lograft.errors' registry."""

    code = "DATA_LOSS"


def report_data_loss(message: str, fail: bool) -> None:
    """Kafka's reportDataLoss: raise, or log a WARNING and go on."""
    if fail:
        raise DataLossError(message + FAIL_HINT)
    log.warning("%s%s", message, WARN_HINT)


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """What an executor needs of the source options (picklable)."""

    bootstrap: tuple[str, ...]
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    fetch_max_bytes: int
    request_timeout_ms: int
    fetch_max_decompressed_bytes: int = DEFAULT_FETCH_MAX_DECOMPRESSED_BYTES
    # TLS and credential client settings (options.CLIENT_SECURITY_OPTIONS); not in the repr.
    security: tuple[tuple[str, Any], ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, opts: SourceOptions) -> ReadSettings:
        return cls(
            opts.bootstrap,
            opts.fail_on_data_loss,
            opts.include_headers,
            opts.poll_timeout_ms,
            opts.fetch_max_bytes,
            opts.request_timeout_ms,
            opts.fetch_max_decompressed_bytes,
            opts.security,
        )


def read_range(
    settings: ReadSettings, rng: OffsetRange, *, transport: Transport | None = None
) -> Iterator[pa.RecordBatch]:
    """The records of `rng`, one Arrow batch per fetch response. `transport`:
    the client's seam (HTTP unless given; unit tests script one)."""
    if rng.size == 0:
        return
    reader = _RangeReader(settings, rng, transport)
    try:
        yield from reader.batches()
    finally:
        reader.close()


class _RangeReader:
    def __init__(
        self, settings: ReadSettings, rng: OffsetRange, transport: Transport | None
    ) -> None:
        self.settings = settings
        self.rng = rng
        self.config = ConsumerConfig(
            bootstrap_servers=settings.bootstrap,
            request_timeout_ms=max(settings.request_timeout_ms, FETCH_WAIT_MS + 1),
            fetch_max_wait_ms=FETCH_WAIT_MS,
            max_partition_fetch_bytes=settings.fetch_max_bytes,
            max_partition_fetch_decompressed_bytes=settings.fetch_max_decompressed_bytes,
            client_id="lograft-spark-executor",
            **dict(settings.security),
        )
        self.loop = asyncio.new_event_loop()
        self.transport, self.metadata = connect(self.config, transport)
        self.fetcher = Fetcher(self.config, self.metadata, self.transport, lambda: None)
        self.leader_hint = rng.leader_url
        self.failures = PartitionState()  # the backoff counter
        self.offset = rng.start  # the next offset to read

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.metadata.close())
            self.loop.run_until_complete(self.transport.close())
        finally:
            self.loop.close()

    def batches(self) -> Iterator[pa.RecordBatch]:
        self.offset = self.rng.start
        try:
            yield from self._batches()
        except Missing as exc:
            # The metadata (every node asked) has no such partition any more,
            # found by a fetch or by an offsets lookup.
            report_data_loss(
                f"{self.rng.tp} does not exist any more ({exc.error.message}); offsets "
                f"[{self.offset}, {self.rng.end}) were not read.",
                self.settings.fail_on_data_loss,
            )

    def _batches(self) -> Iterator[pa.RecordBatch]:
        rng, tp = self.rng, self.rng.tp
        offset = self.offset
        progress_at = time.monotonic()
        while offset < rng.end:
            self.offset = offset
            try:
                rows, next_offset = self.loop.run_until_complete(self._fetch(offset))
            except OffsetOutOfRangeError:
                offset = self._out_of_range(offset)
                progress_at = time.monotonic()
                continue
            except LograftError as exc:
                if not exc.retriable:
                    raise
                if self._stalled(progress_at):
                    self._give_up(offset, exc)
                    return
                self.leader_hint = None
                self.loop.run_until_complete(self.fetcher.on_retriable(tp, self.failures, exc))
                continue
            self.failures.failures = 0
            before = offset
            if rows.batch is not None:
                yield rows.batch
            # Past the last record returned, and over offsets without records
            # (compaction, control batches) up to where the response ended;
            # records at or past the end belong to the next range.
            if rows.last_offset is not None:
                last = rows.last_offset + 1
            else:
                last = rng.end if rows.beyond else offset
            # A response cut short (the decompressed-bytes budget, Arrow's
            # 2 GiB per column) goes on from the batch it stopped before,
            # not from where the response ended.
            if rows.resume_at is not None:
                offset = min(rows.resume_at, rng.end)
            else:
                offset = max(last, min(next_offset, rng.end))
            if offset > before:
                progress_at = time.monotonic()
            elif self._stalled(progress_at):
                self._give_up(offset, None)
                return

    def _stalled(self, since: float) -> bool:
        return (time.monotonic() - since) * 1000 >= self.settings.poll_timeout_ms

    async def _fetch(self, offset: int) -> tuple[FetchRows, int]:
        tp = self.rng.tp
        url = self.leader_hint or await self.fetcher.leader_url(tp)
        resp = await self.transport.request(
            "GET",
            f"{url}/v1/topics/{tp.topic}/partitions/{tp.partition}/records",
            params={
                "offset": str(offset),
                "max_bytes": str(self.config.max_partition_fetch_bytes),
                "max_wait_ms": str(FETCH_WAIT_MS),
                "min_bytes": "1",
            },
            headers={"Accept": BATCH_CONTENT_TYPE},
            timeout_ms=self.config.request_timeout_ms,
            body_max_bytes=self.config.fetch_response_max_bytes,
        )
        if not resp.ok:
            raise resp.error()
        next_offset = int(resp.headers.get(NEXT_OFFSET_HEADER, offset))
        rows = fetch_rows(
            tp.topic,
            tp.partition,
            resp.body,
            offset,
            self.rng.end,
            self.settings.include_headers,
            self.config.max_partition_fetch_decompressed_bytes,
        )
        return rows, next_offset

    def _offsets(self) -> dict[str, Any]:
        """The partition's offsets doc, retrying retriable errors up to
        pollTimeoutMs; `Missing` if the partition does not exist."""
        tp = self.rng.tp
        started = time.monotonic()
        scratch = PartitionState()
        while True:
            try:
                return self.loop.run_until_complete(self.fetcher.list_offsets(tp))
            except LograftError as exc:  # Missing (not a LograftError) goes up to batches()
                if not exc.retriable or self._stalled(started):
                    raise
                self.loop.run_until_complete(self.fetcher.on_retriable(tp, scratch, exc))

    def _out_of_range(self, offset: int) -> int:
        """OFFSET_OUT_OF_RANGE at `offset`: where to go on (data loss reported)."""
        rng, tp = self.rng, self.rng.tp
        doc = self._offsets()
        earliest, log_end = int(doc["earliest"]), int(doc["log_end_offset"])
        if offset < earliest:
            resume = min(earliest, rng.end)
            report_data_loss(
                f"Offsets [{offset}, {resume}) of {tp} were deleted before they were read "
                f"(the log now starts at {earliest}).",
                self.settings.fail_on_data_loss,
            )
            return resume
        report_data_loss(
            f"{tp} now ends at offset {log_end}, below offset {offset} this query was to read "
            f"from; offsets [{offset}, {rng.end}) are gone (the topic was re-created, or the "
            "log was truncated).",
            self.settings.fail_on_data_loss,
        )
        return rng.end

    def _give_up(self, offset: int, last_error: LograftError | None) -> None:
        """No progress for pollTimeoutMs: data loss if the log now ends at or
        below `offset` (nothing more can come), else fail the task with a
        timeout naming the last error."""
        rng, tp = self.rng, self.rng.tp
        try:
            log_end: int | None = int(self._offsets()["log_end_offset"])
        except LograftError:
            log_end = None
        if log_end is not None and log_end <= offset:
            report_data_loss(
                f"{tp} now ends at offset {log_end}: offsets [{offset}, {rng.end}) that this "
                "query planned to read are gone (the log was truncated, or the topic re-created).",
                self.settings.fail_on_data_loss,
            )
            return
        why = (
            f"; last error: {last_error.message}"
            if last_error is not None
            else "; the leader returned no records below the range's end"
        )
        raise ClientTimeoutError(
            f"could not read {tp} at offset {offset} (range [{rng.start}, {rng.end})) within "
            f"kafkaConsumer.pollTimeoutMs={self.settings.poll_timeout_ms} ms{why}",
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
        )
