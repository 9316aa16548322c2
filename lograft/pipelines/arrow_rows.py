"""The rows the source produces, as Arrow record batches.

The columns are those of Spark's Kafka source, in its order: `key` binary,
`value` binary, `topic` string, `partition` int, `offset` long, `timestamp`
timestamp, `timestampType` int (0 CreateTime, 1 LogAppendTime), and with
`includeHeaders` `headers` array<struct<key: string, value: binary>>.

Spark's Python Data Source API takes `pyarrow.RecordBatch`es from `read()`
when their schema equals the one it derives from the Spark schema
(timestamps in microseconds, UTC; list items named "element"), so a task
hands over whole columns instead of one Python tuple per record. The Arrow
schema is written out here (the executor needs no pyspark type machinery for
it); a unit test holds it equal to what pyspark derives.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from lograft.client.types import TimestampType
from lograft.storage.batch import Record

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
SCHEMA = pa.schema(_BASE_FIELDS)
SCHEMA_WITH_HEADERS = pa.schema([*_BASE_FIELDS, pa.field("headers", HEADERS_TYPE)])

# The same, as the DDL Spark takes from DataSource.schema().
SPARK_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
SPARK_DDL_WITH_HEADERS = SPARK_DDL + ", headers array<struct<key: string, value: binary>>"


# (name, Spark's simpleString of the type), to check a schema Spark passes in.
_SPARK_FIELDS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]
_SPARK_HEADERS_FIELD = ("headers", "array<struct<key:string,value:binary>>")


def spark_fields(include_headers: bool) -> list[tuple[str, str]]:
    return [*_SPARK_FIELDS, _SPARK_HEADERS_FIELD] if include_headers else list(_SPARK_FIELDS)


def arrow_schema(include_headers: bool) -> pa.Schema:
    return SCHEMA_WITH_HEADERS if include_headers else SCHEMA


def spark_ddl(include_headers: bool) -> str:
    return SPARK_DDL_WITH_HEADERS if include_headers else SPARK_DDL


def _header_key(key: str) -> str:
    # Record header keys are str decoded with surrogateescape (bytes that are
    # not UTF-8 survive); Arrow strings must be valid UTF-8, so such bytes
    # become U+FFFD here, as Kafka's Java client decodes them.
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return key


def record_batch(
    topic: str,
    partition: int,
    records: Sequence[tuple[Record, TimestampType]],
    include_headers: bool,
) -> pa.RecordBatch:
    """One Arrow batch of the records of one partition (one fetch's worth)."""
    n = len(records)
    recs = [r for r, _ in records]
    columns: list[pa.Array] = [
        pa.array([r.key for r in recs], pa.binary()),
        pa.array([r.value for r in recs], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([r.offset for r in recs], pa.int64()),
        pa.array([r.timestamp * 1000 for r in recs], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([int(t) for _, t in records], pa.int32()),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": _header_key(k), "value": v} for k, v in r.headers] for r in recs],
                HEADERS_TYPE,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
