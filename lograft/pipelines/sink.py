"""The sink: `df.write.format("lograft")` and `writeStream.format("lograft")`.

Columns, as in Spark's Kafka sink: `value` (binary or string, required;
null writes a null value), `key` (binary or string, optional; records with a
key go to Kafka's murmur2 partition of it), `topic` (string; the `topic`
option overrides it), `partition` (int; a record with one goes there),
`headers` (array<struct<key: string, value: binary>>). Other columns are
ignored, so what the source reads can be written back as it is.

Each Spark task writes its rows with one `lograft.client.Producer`
(with the `topic` option and no `partition` column, each Arrow batch in one
`send_arrow` call, else row by row)
(idempotent with the default acks=all): a batch the producer retries inside
the task (lost answer, leader change) is written once. The guarantee across
task retries and query restarts is at-least-once, as Spark's Kafka sink: a
task that failed after some of its records were acknowledged is run again
from its first row, and a micro-batch that was not committed before a
restart is written again. docs/pipelines.md shows how to make the result
effectively exactly-once downstream.

A task fails with the first error a record met (after the producer's own
retries, within deliveryTimeoutMs); it waits for every record it sent
before it returns, so a task that succeeded has all its rows acknowledged.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lograft.client.record_future import FutureRecordMetadata
from lograft.errors import InvalidConfigError
from lograft.pipelines.options import SinkOptions, sink_option_name

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger("lograft.pipelines")

BYTES_OR_STRING = ("binary", "string")
HEADERS_SIMPLE_STRING = "array<struct<key:string,value:binary>>"


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """Which of the sink's columns the DataFrame has (and their types)."""

    value_is_string: bool
    key: str | None  # "binary" | "string" | None (no key column)
    topic: bool
    partition: bool
    headers: bool


def sink_columns(schema: StructType, topic_option: str | None) -> SinkColumns:
    """Check the DataFrame's columns against the sink's rules (Kafka's
    KafkaWriter.validateQuery); InvalidConfigError names the column."""
    types = {f.name: f.dataType.simpleString() for f in schema.fields}

    def fail(column: str, message: str) -> InvalidConfigError:
        return InvalidConfigError(message, column=column)

    if "value" not in types:
        raise fail("value", "Required attribute 'value' not found (the lograft sink writes it)")
    if types["value"] not in BYTES_OR_STRING:
        raise fail(
            "value", f"value attribute type must be a string or binary, not {types['value']}"
        )
    key = types.get("key")
    if key is not None and key not in BYTES_OR_STRING:
        raise fail("key", f"key attribute type must be a string or binary, not {key}")
    if "topic" in types and types["topic"] != "string":
        raise fail("topic", f"topic attribute type must be a string, not {types['topic']}")
    if "topic" not in types and topic_option is None:
        raise fail(
            "topic",
            "topic option required when no 'topic' attribute is present. Use the topic option "
            "for setting a topic.",
        )
    if "partition" in types and types["partition"] != "int":
        raise fail(
            "partition", f"partition attribute type must be an int, not {types['partition']}"
        )
    if "headers" in types and types["headers"].replace(" ", "") != HEADERS_SIMPLE_STRING:
        raise fail(
            "headers",
            f"headers attribute type must be {HEADERS_SIMPLE_STRING}, not {types['headers']}",
        )
    return SinkColumns(
        value_is_string=types["value"] == "string",
        key=key,
        topic="topic" in types,
        partition="partition" in types,
        headers="headers" in types,
    )


def check_producer_settings(opts: SinkOptions) -> None:
    """Build the producer's config on the driver, so that a bad acks or limit
    fails the write before any task runs; the message names the option."""
    from lograft.client.config import ProducerConfig

    try:
        ProducerConfig(
            bootstrap_servers=opts.bootstrap,
            **dict(opts.producer_settings),
            **dict(opts.security),
        )
    except InvalidConfigError as exc:
        setting = str(exc.details.get("setting", ""))
        name = sink_option_name(setting)
        raise InvalidConfigError(f"sink option '{name}': {exc.message}", setting=name) from None


def _encode(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


class _FirstError:
    """Keeps the first failure of any record (set from the producer's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def __call__(self, fut: FutureRecordMetadata | concurrent.futures.Future[Any]) -> None:
        exc = fut.exception()
        if exc is not None:
            with self._lock:
                if self.error is None:
                    self.error = exc

    def raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error


def _arrow_columns(columns: SinkColumns) -> list[str]:
    """The columns send_arrow takes (the others, e.g. topic, are ignored)."""
    names = ["value"]
    if columns.key is not None:
        names.append("key")
    if columns.headers:
        names.append("headers")
    return names


def write_rows(opts: SinkOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row of `batches` and wait for all of them (one Spark task);
    returns how many records were written."""
    # Imported here: a reading query's planner and executors load this
    # module (through datasource.py) but never the producer's.
    from lograft.client.sync_producer import Producer

    producer = Producer(
        list(opts.bootstrap),
        client_id="lograft-spark-sink",
        **dict(opts.producer_settings),
        **dict(opts.security),
    )
    first_error = _FirstError()
    count = 0
    try:
        for batch in batches:
            if opts.topic and not columns.partition:
                # One topic, the partitioner's choice: the columnar send
                # (one call per Arrow batch, no Python row dicts).
                many = producer.send_arrow(opts.topic, batch.select(_arrow_columns(columns)))
                many.add_done_callback(first_error)
                count += batch.num_rows
                first_error.raise_if_failed()
                continue
            data = batch.to_pydict()
            n = batch.num_rows
            values = data["value"]
            keys = data["key"] if columns.key is not None else [None] * n
            topics = data["topic"] if columns.topic else [None] * n
            partitions = data["partition"] if columns.partition else [None] * n
            headers: list[Any] = data["headers"] if columns.headers else [None] * n
            for i in range(n):
                topic = opts.topic or topics[i]
                if topic is None:
                    raise InvalidConfigError(
                        "null topic present in the data. Use the topic option for setting a topic.",
                        column="topic",
                    )
                fut = producer.send(
                    topic,
                    _encode(values[i]),
                    key=_encode(keys[i]),
                    headers=[(h["key"], h["value"]) for h in headers[i]] if headers[i] else None,
                    partition=partitions[i],
                )
                fut.add_done_callback(first_error)
                count += 1
            first_error.raise_if_failed()  # stop early: the task fails anyway
        producer.flush()
        first_error.raise_if_failed()
    finally:
        producer.close()
    return count
