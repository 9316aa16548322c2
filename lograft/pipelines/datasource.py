"""`LograftDataSource`: lograft topics as a Spark source and sink, on
PySpark's Python Data Source API (`pyspark.sql.datasource`).

    spark.dataSource.register(LograftDataSource)
    df = (spark.readStream.format("lograft")
          .option("bootstrap", "http://127.0.0.1:9091,http://127.0.0.1:9092")
          .option("subscribe", "page-views")
          .option("startingOffsets", "earliest")
          .load())

Where each piece runs:

- `schema()` (at `load()`): every option is checked (options.py), so a
  wrong or contradictory one fails there. Rules that depend on the mode
  (batch or streaming) are checked when the query is planned or started.
- The batch reader's `partitions()` and the stream reader's
  `initialOffset` / `latestOffset` / `partitions` run in Python on the
  driver: they ask the cluster for partitions and offsets
  (cluster_lookup.py) and hand Spark offset ranges, nothing else.
- `read()` runs in the executors' Python workers: each task reads its range
  from the partition leader (range_reader.py) and returns Arrow batches.
- The writers run in the executors too (sink.py), one producer per task.

Streaming offsets (offsets.py) are per-partition JSON in Spark's
checkpoint, so a restarted query resumes exactly where it stopped.
Partitions that appear while a query runs join the offsets at their log
start offset and are read from the next micro-batch on; data loss follows
`failOnDataLoss` (range_reader.report_data_loss). `maxOffsetsPerTrigger`,
`minOffsetsPerTrigger` and `maxTriggerDelay` use Spark's admission control
(`latestOffset(start, limit)`, pyspark >= 4.2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from lograft.errors import InvalidConfigError
from lograft.pipelines.arrow_rows import spark_ddl, spark_fields
from lograft.pipelines.cluster_lookup import ClusterLookup, TopicInfo
from lograft.pipelines.offset_specs import EARLIEST_SPEC, LATEST_SPEC, resolve
from lograft.pipelines.offsets import (
    OffsetRange,
    PartitionOffsets,
    cap_total,
    from_spark,
    split_ranges,
    to_spark,
    total_lag,
)
from lograft.pipelines.options import (
    OffsetSpec,
    SinkOptions,
    SourceOptions,
    check_batch_options,
    check_stream_options,
    parse_sink_options,
    parse_source_options,
)
from lograft.pipelines.range_reader import ReadSettings, read_range, report_data_loss
from lograft.pipelines.sink import SinkColumns, check_producer_settings, sink_columns, write_rows
from lograft.protocol.topic_partition import TopicPartition

log = logging.getLogger("lograft.pipelines")

_TRIGGER_ONLY = {
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
}


class RangePartition(InputPartition):
    """One Spark task: one offset range of one partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


@dataclass
class SinkCommit(WriterCommitMessage):
    """What a write task reports to the driver."""

    records: int


def _check_schema(schema: StructType, opts: SourceOptions) -> None:
    given = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    if given != spark_fields(opts.include_headers):
        raise InvalidConfigError(
            "the lograft source has a fixed schema and cannot be set with a custom one "
            f"(got {schema.simpleString()}; it is {spark_ddl(opts.include_headers)})",
            setting="schema",
        )


def _ranges(
    lookup: ClusterLookup, start: PartitionOffsets, end: PartitionOffsets, opts: SourceOptions
) -> list[RangePartition]:
    ranges = [
        OffsetRange(tp.topic, tp.partition, start[tp], stop, lookup.leader_url(tp))
        for tp, stop in sorted(end.items())
        if tp in start and stop > start[tp]
    ]
    cut = split_ranges(
        ranges,
        min_partitions=opts.min_partitions,
        max_records_per_partition=opts.max_records_per_partition,
    )
    return [RangePartition(r) for r in cut]


class LograftDataSource(DataSource):
    """The `lograft` format: batch and streaming reads, batch and streaming writes."""

    @classmethod
    def name(cls) -> str:
        return "lograft"

    def schema(self) -> str:
        return spark_ddl(parse_source_options(self.options).include_headers)

    def reader(self, schema: StructType) -> LograftBatchReader:
        opts = parse_source_options(self.options)
        _check_schema(schema, opts)
        check_batch_options(opts)
        for low, name in _TRIGGER_ONLY.items():
            if low in opts.given:
                log.warning("%s option ignored in batch queries", name)
        return LograftBatchReader(opts)

    def streamReader(self, schema: StructType) -> LograftStreamReader:
        opts = parse_source_options(self.options)
        _check_schema(schema, opts)
        check_stream_options(opts)
        return LograftStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> LograftBatchWriter:
        if overwrite:
            raise InvalidConfigError(
                "lograft topics are append-only: save mode 'overwrite' is not supported; use "
                "append",
                setting="mode",
            )
        opts = parse_sink_options(self.options)
        check_producer_settings(opts)
        return LograftBatchWriter(opts, sink_columns(schema, opts.topic))

    def streamWriter(self, schema: StructType, overwrite: bool) -> LograftStreamWriter:
        # Complete/update output modes append to the topic, as Kafka's sink does.
        opts = parse_sink_options(self.options)
        check_producer_settings(opts)
        return LograftStreamWriter(opts, sink_columns(schema, opts.topic))


# -- batch reads ----------------------------------------------------------------------------


class LograftBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = ReadSettings.of(opts)

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        with ClusterLookup(opts) as lookup:
            tps = lookup.partitions(opts.subscription, lookup.topics())
            if not tps:
                return []
            bounds = lookup.bounds(tps)
            no_match = opts.timestamp_no_match
            start = resolve(
                opts.starting or EARLIEST_SPEC,
                tps,
                bounds,
                lookup,
                is_start=True,
                no_match=no_match,
            )
            end = resolve(
                opts.ending or LATEST_SPEC, tps, bounds, lookup, is_start=False, no_match=no_match
            )
            for tp in tps:
                if start[tp] > end[tp]:
                    raise InvalidConfigError(
                        f"the start offset {start[tp]} of {tp} is after its end offset "
                        f"{end[tp]}: the starting and ending options do not leave a range to "
                        "read",
                        setting=(opts.ending or LATEST_SPEC).option,
                    )
            return list(_ranges(lookup, start, end, opts))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())  # no partitions to read: Spark plans one empty task
        return read_range(self.settings, partition.range)


# -- streaming reads ----------------------------------------------------------------------


class LograftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"topic": {"partition": next offset}} (Kafka's JSON).

    The driver-side state (a cluster connection, the initial offset, the
    topic ids seen, the last trigger time) lives in the one reader Spark
    keeps for the query's run; a copy of the reader is pickled to the
    executors for `read()`, which uses only the options."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = ReadSettings.of(opts)
        self._lookup: ClusterLookup | None = None
        self._initial: dict[str, dict[str, int]] | None = None
        self._topic_ids: dict[str, str] = {}
        self._latest: PartitionOffsets | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow's end
        self._last_trigger_ms = 0.0  # Kafka starts at 0: the first trigger never waits

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lookup"] = None  # a loop and connections: never pickled
        return state

    def _cluster(self) -> ClusterLookup:
        if self._lookup is None:
            self._lookup = ClusterLookup(self.opts)
        return self._lookup

    def _snapshot(self) -> tuple[dict[str, TopicInfo], dict[TopicPartition, Any]]:
        lookup = self._cluster()
        topics = lookup.topics()
        tps = lookup.partitions(self.opts.subscription, topics)
        return topics, lookup.bounds(tps)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        # Spark asks more than once in a run; "latest" must not move between
        # the answers, or the first micro-batch would not start where planned.
        if self._initial is None:
            topics, bounds = self._snapshot()
            self._remember_ids(topics, set())
            start = resolve(
                self.opts.starting or OffsetSpec("latest", option="startingOffsets"),
                sorted(bounds),
                bounds,
                self._cluster(),
                is_start=True,
                no_match=self.opts.timestamp_no_match,
            )
            self._initial = to_spark(start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        """(min, max) offsets for this trigger. Spark passes one limit; the
        other bound of Kafka's composite limit comes from the options."""
        if isinstance(limit, ReadAllAvailable):
            return None, None
        low, high = self.opts.min_offsets_per_trigger, self.opts.max_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            high = limit.max_rows
        elif isinstance(limit, ReadMinRows):
            low = limit.min_rows
        return low, high

    def prepareForTriggerAvailableNow(self) -> None:
        _topics, bounds = self._snapshot()
        self._target = {tp: b.latest for tp, b in bounds.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_spark(start)
        topics, bounds = self._snapshot()
        self._remember_ids(topics, {tp.topic for tp in begin})
        self._latest = {tp: b.latest for tp, b in bounds.items()}
        fail = self.opts.fail_on_data_loss
        missing = [tp for tp in begin if tp not in bounds]
        gone = sorted(self._cluster().really_gone(missing)) if missing else []
        lagging = [tp for tp in missing if tp not in gone]
        if lagging:  # the node asked had not caught up: they are still there
            bounds = {**bounds, **self._cluster().bounds(lagging)}
        if gone:
            report_data_loss(
                f"{', '.join(map(str, gone))} are gone (topic deleted, or no longer subscribed).",
                fail,
            )
        end: PartitionOffsets = {}
        for tp, b in sorted(bounds.items()):
            if tp not in begin:
                if self._target is not None and tp not in self._target:
                    continue  # appeared after Trigger.AvailableNow's target was taken
                # A new partition joins at its log start; read from the next batch on.
                end[tp] = b.earliest
                if b.earliest > 0:
                    report_data_loss(
                        f"Added partition {tp} starts from {b.earliest} instead of 0; records "
                        "below were deleted before the query could read them.",
                        fail,
                    )
                continue
            if b.latest < begin[tp]:
                report_data_loss(
                    f"{tp}'s offset was changed from {begin[tp]} to {b.latest} (the topic was "
                    "re-created or its log truncated); offsets in between are skipped.",
                    fail,
                )
            end[tp] = b.latest
            if self._target is not None:
                end[tp] = min(end[tp], max(self._target.get(tp, begin[tp]), begin[tp]))
        low, high = self._limits(limit)
        if high is not None:
            end = cap_total(begin, end, high)
        now_ms = time.time() * 1000
        if (
            low is not None
            and self._target is None
            and total_lag(begin, end) < low
            and now_ms - self._last_trigger_ms < self.opts.max_trigger_delay_ms
        ):
            return start  # wait for minOffsetsPerTrigger, or for maxTriggerDelay
        if end != begin:
            self._last_trigger_ms = now_ms
        return to_spark(end)

    def _remember_ids(self, topics: dict[str, TopicInfo], reading: set[str]) -> None:
        """A topic read by the query that got a new id was deleted and
        re-created while the query ran: its records below the offsets the
        query had reached were never read."""
        for name in sorted(reading):
            old, info = self._topic_ids.get(name), topics.get(name)
            if old and info is not None and info.topic_id and info.topic_id != old:
                report_data_loss(
                    f"topic {name} was deleted and re-created while the query ran (id {old} -> "
                    f"{info.topic_id}); records of the new topic below the offsets the query "
                    "had reached are skipped.",
                    self.opts.fail_on_data_loss,
                )
        self._topic_ids.update({n: i.topic_id for n, i in topics.items() if i.topic_id})

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else to_spark(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = from_spark(start), from_spark(end)
        if not any(tp in begin and off > begin[tp] for tp, off in stop.items()):
            return []
        return _ranges(self._cluster(), begin, stop, self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition), partition
        return read_range(self.settings, partition.range)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in lograft."""

    def stop(self) -> None:
        if self._lookup is not None:
            self._lookup.close()
            self._lookup = None


# -- writes --------------------------------------------------------------------------------


class LograftBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, columns: SinkColumns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return SinkCommit(write_rows(self.opts, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        written = sum(m.records for m in messages if isinstance(m, SinkCommit))
        log.info("lograft sink: %d records written", written)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # What the successful tasks wrote stays in the topics (at-least-once).
        written = sum(m.records for m in messages if isinstance(m, SinkCommit))
        log.warning("lograft sink: write failed; %d records of it were written", written)


class LograftStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, columns: SinkColumns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return SinkCommit(write_rows(self.opts, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task waited for its records' acknowledgements."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = sum(m.records for m in messages if isinstance(m, SinkCommit))
        log.warning(
            "lograft sink: micro-batch %d failed; %d records of it were written", batchId, written
        )
