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

import struct
from bisect import bisect_left
from dataclasses import dataclass

import pyarrow as pa

from lograft.errors import CorruptRecordError
from lograft.protocol.batch import (
    BatchHeader,
    iter_batches,
    records_section_within,
    validate_batch,
)
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.record_columns import RecordColumns, decode_columns

_I32 = struct.Struct("=i")  # native, as Arrow's buffers

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


@dataclass(frozen=True, slots=True)
class FetchRows:
    """The rows one fetch response gives a range: `batch` (None when no
    record falls in the range), `last_offset` (the offset of its last row),
    `beyond` (whether the response held records at or after the fetch
    offset at all, in the range or past its end) and `resume_at` (not None:
    the rows stop before the response's end, read on from this offset)."""

    batch: pa.RecordBatch | None
    last_offset: int | None
    beyond: bool
    resume_at: int | None = None


class _Sections:
    """Columns of successive sections, joined into one Arrow batch."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.parts: list[RecordColumns] = []
        self.types: list[bytes] = []
        self.count = 0
        self.key_len = 0
        self.value_len = 0

    def room_for(self, section_bytes: int) -> bool:
        # Keys and values of a section take at most its bytes; Arrow's
        # binary type counts them with int32 offsets.
        return max(self.key_len, self.value_len) + section_bytes <= _INT32_MAX

    def add(self, data: bytes | memoryview, header: BatchHeader) -> None:
        cols = decode_columns(
            data,
            header.records_count,
            header.last_offset_delta,
            base_offset=header.base_offset,
            base_timestamp=header.base_timestamp,
            log_append_time=header.max_timestamp if header.is_log_append_time else None,
            key_base=self.key_len,
            value_base=self.value_len,
            want_headers=self.include_headers,
        )
        n = len(cols.offsets) // 8
        self.parts.append(cols)
        self.types.append(_TS_TYPE[header.is_log_append_time] * n)
        self.count += n
        self.key_len += len(cols.key_data)
        self.value_len += len(cols.value_data)

    def batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n, parts = self.count, self.parts
        columns: list[pa.Array] = [
            _binary(n, parts, True, self.key_len),
            _binary(n, parts, False, self.value_len),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, _joined([p.offsets for p in parts])]),
            pa.Array.from_buffers(_TIMESTAMP, n, [None, _joined([p.timestamps_us for p in parts])]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(b"".join(self.types))]),
        ]
        if self.include_headers:
            columns.append(
                pa.array(
                    [
                        [{"key": _header_key(k), "value": v} for k, v in hs]
                        for part in parts
                        for hs in part.headers or ()
                    ],
                    HEADERS_TYPE,
                )
            )
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self.include_headers))


_INT32_MAX = (1 << 31) - 1
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_TS_TYPE = {False: _I32.pack(0), True: _I32.pack(1)}  # CreateTime, LogAppendTime


def _joined(chunks: list[bytes]) -> pa.Buffer:
    if len(chunks) == 1:
        return pa.py_buffer(chunks[0])
    return pa.py_buffer(b"".join(chunks))


def _binary(n: int, parts: list[RecordColumns], key: bool, data_len: int) -> pa.Array:
    """The key or value column: data, int32 offsets (the sections' start
    offsets are already counted from the bytes before them) and validity."""
    cols = [
        (p.key_data, p.key_offsets, p.key_valid, p.key_nulls)
        if key
        else (p.value_data, p.value_offsets, p.value_valid, p.value_nulls)
        for p in parts
    ]
    nulls = sum(c[3] for c in cols)
    validity = None
    if nulls:
        flags = pa.Array.from_buffers(pa.uint8(), n, [None, _joined([c[2] for c in cols])])
        validity = flags.cast(pa.bool_()).buffers()[1]
    offsets = pa.py_buffer(b"".join([*(c[1] for c in cols), _I32.pack(data_len)]))
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, offsets, _joined([c[0] for c in cols])], null_count=nulls
    )


def fetch_rows(
    topic: str,
    partition: int,
    body: bytes,
    start: int,
    end: int,
    include_headers: bool,
    decompressed_max: int | None = None,
) -> FetchRows:
    """The rows of a raw fetch response (RecordBatch v2 bytes) with offsets in
    [start, end), as one Arrow batch: CRCs checked, control batches skipped,
    each record decoded once and straight into columns (no Python object per
    record but its headers, when asked for). The response is cut short at a
    batch boundary (`resume_at` says where to read on) before a compressed
    batch that would inflate the response past `decompressed_max` bytes (the
    first one always inflates, up to the one-batch bound; as the consumer's
    `max_partition_fetch_decompressed_bytes`), and before keys or values
    that would pass Arrow's 2 GiB binary offsets."""
    sections = _Sections(include_headers)
    budget = DecompressionBudget(
        decompressed_max if decompressed_max is not None else 1 << 62, "fetchMaxDecompressedBytes"
    )
    past_end = False  # a batch of records at or after `end` was reached
    resume_at: int | None = None
    for pos, header in iter_batches(body):
        if header.next_offset <= start or header.is_control or header.records_count == 0:
            continue
        if header.base_offset >= end:
            past_end = True
            break
        validate_batch(body, pos, available=header.size)
        data = records_section_within(body, pos, header, budget)
        if data is not None and not sections.room_for(len(data)):
            if sections.count == 0:
                raise CorruptRecordError(
                    f"a batch of {len(data)} decompressed bytes is past what one Arrow "
                    "batch holds (2 GiB of keys or values)",
                    position=pos,
                )
            data = None
        if data is None:
            resume_at = max(header.base_offset, start)
            break
        sections.add(data, header)
    if sections.count == 0:
        return FetchRows(None, None, past_end, resume_at)
    # Offsets increase through the response: the range is one slice of it.
    # (A compacted batch may hold no record at or after `start` at all.)
    offsets = memoryview(b"".join(p.offsets for p in sections.parts)).cast("q")
    lo, hi = bisect_left(offsets, start), bisect_left(offsets, end)
    if lo == hi:
        return FetchRows(None, None, past_end or lo < len(offsets), resume_at)
    batch = sections.batch(topic, partition)
    return FetchRows(batch.slice(lo, hi - lo), offsets[hi - 1], True, resume_at)


def _header_key(key: bytes) -> str:
    # Arrow strings must be valid UTF-8: bytes that are not become U+FFFD,
    # as Kafka's Java client decodes them.
    return key.decode("utf-8", "replace")
