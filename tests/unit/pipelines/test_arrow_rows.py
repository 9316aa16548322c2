"""The source's rows as Arrow batches: the schema pyspark expects, and the values
(held equal to what the client's record-by-record decoder reads)."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (the spark extra)")

from lograft.client.fetcher import decode  # noqa: E402
from lograft.errors import CorruptRecordError  # noqa: E402
from lograft.pipelines.arrow_rows import (  # noqa: E402
    FetchRows,
    arrow_schema,
    fetch_rows,
    spark_fields,
)
from lograft.protocol.batch import (  # noqa: E402
    CRC_POS,
    HEADER_SIZE,
    RecordInput,
    build_batch,
    compute_crc,
    header_key_bytes,
    set_log_append_time,
)
from lograft.protocol.compression import Compression  # noqa: E402


@pytest.mark.parametrize("headers", [False, True])
def test_schema_is_what_pyspark_derives_from_the_spark_schema(headers):
    types = pytest.importorskip("pyspark.sql.types", reason="pyspark is not installed")
    from pyspark.sql.pandas.types import to_arrow_schema

    fields = [
        types.StructField("key", types.BinaryType()),
        types.StructField("value", types.BinaryType()),
        types.StructField("topic", types.StringType()),
        types.StructField("partition", types.IntegerType()),
        types.StructField("offset", types.LongType()),
        types.StructField("timestamp", types.TimestampType()),
        types.StructField("timestampType", types.IntegerType()),
    ]
    if headers:
        header = types.StructType(
            [
                types.StructField("key", types.StringType()),
                types.StructField("value", types.BinaryType()),
            ]
        )
        fields.append(types.StructField("headers", types.ArrayType(header)))
    spark_schema = types.StructType(fields)
    # pyspark accepts a RecordBatch from read() only with exactly this schema.
    assert to_arrow_schema(spark_schema, timezone="UTC").equals(arrow_schema(headers))
    assert [(f.name, f.dataType.simpleString()) for f in spark_schema.fields] == spark_fields(
        headers
    )


def _batch(base: int, recs: list[RecordInput], **kw) -> bytes:
    return build_batch(recs, timestamp_ms=1_700_000_000_000, base_offset=base, **kw)


def expected_rows(body: bytes, start: int, end: int, headers: bool) -> list[dict]:
    """What the rows must be: the client's own decoder, record by record."""
    out = []
    for rec, ts_type in decode(body, start, check_crcs=True):
        if rec.offset >= end:
            continue
        row = {
            "key": rec.key,
            "value": rec.value,
            "topic": "orders",
            "partition": 2,
            "offset": rec.offset,
            "timestamp": rec.timestamp * 1000,
            "timestampType": int(ts_type),
        }
        if headers:
            hs = [(header_key_bytes(k), v) for k, v in rec.headers]
            row["headers"] = [{"key": k.decode("utf-8", "replace"), "value": v} for k, v in hs]
        out.append(row)
    return out


def rows_of(rows: FetchRows) -> list[dict]:
    if rows.batch is None:
        return []
    batch = rows.batch.set_column(5, "timestamp", rows.batch.column("timestamp").cast(pa.int64()))
    return batch.to_pylist()


record_st = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=30)),
    key=st.one_of(st.none(), st.binary(max_size=10)),
    headers=st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
    ),
    timestamp=st.one_of(st.none(), st.integers(0, 1 << 45)),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(record_st, min_size=1, max_size=8), min_size=1, max_size=4),
    st.integers(0, 40),
    st.integers(0, 40),
    st.booleans(),
    st.booleans(),
)
def test_fetch_rows_are_the_records_of_the_range(batches, start, span, headers, gzip):
    body, base = b"", 10
    for i, recs in enumerate(batches):
        body += _batch(
            base, recs, compression=Compression.GZIP if gzip and i % 2 else Compression.NONE
        )
        base += len(recs)
    end = start + span
    rows = fetch_rows("orders", 2, body, start, end, headers)
    want = expected_rows(body, start, end, headers)
    assert rows_of(rows) == want
    if rows.batch is not None:
        assert rows.batch.schema.equals(arrow_schema(headers))
    assert rows.last_offset == (want[-1]["offset"] if want else None)
    assert rows.beyond == bool(decode(body, start, check_crcs=True))


def test_fetch_rows_values_and_header_keys():
    body = _batch(5, [RecordInput(b"v", key=b"k", headers=[("a", b"1"), ("b", None)])])
    body += _batch(6, [RecordInput(None, key=None, headers=[("\udcff-raw", b"x")])])
    rows = rows_of(fetch_rows("orders", 2, body, 0, 100, True))
    assert [r["offset"] for r in rows] == [5, 6]
    assert rows[0]["key"] == b"k" and rows[1]["key"] is None and rows[1]["value"] is None
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
    # A header key that is not UTF-8 arrives with U+FFFD, as Kafka's Java client decodes it.
    assert rows[1]["headers"] == [{"key": "\ufffd-raw", "value": b"x"}]


def test_fetch_rows_log_append_time():
    batch = bytearray(_batch(0, [RecordInput(b"a"), RecordInput(b"b", timestamp=5)]))
    set_log_append_time(batch, 0, len(batch), 1_800_000_000_000)
    rows = rows_of(fetch_rows("orders", 2, bytes(batch), 0, 10, False))
    assert [(r["timestamp"], r["timestampType"]) for r in rows] == [
        (1_800_000_000_000_000, 1),
        (1_800_000_000_000_000, 1),
    ]


def test_fetch_rows_refuses_a_bad_crc_and_malformed_records():
    good = _batch(0, [RecordInput(b"abc")])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        fetch_rows("t", 0, bytes(bad_crc), 0, 10, False)
    # A section whose record length lies, CRC recomputed: the scanner's verdict.
    bad = bytearray(good)
    bad[HEADER_SIZE] = 0x7E  # length 63, past the section
    struct.pack_into(">I", bad, CRC_POS, compute_crc(bad))
    with pytest.raises(CorruptRecordError) as err:
        fetch_rows("t", 0, bytes(bad), 0, 10, False)
    assert err.value.details["reason"] == "record_length"


def _gzip_batch(base: int, values: list[bytes]) -> bytes:
    return build_batch(
        [RecordInput(v) for v in values],
        timestamp_ms=1_700_000_000_000,
        base_offset=base,
        compression=Compression.GZIP,
    )


def test_a_response_is_cut_before_the_batch_that_would_inflate_it_past_the_budget():
    budget = 64 * 1024
    bomb = _gzip_batch(10, [b"\0" * (1 << 20)] * 4)  # a few KiB, 4 MiB inflated
    body = _gzip_batch(0, [b"a"] * 10) + bomb + _gzip_batch(14, [b"b"] * 10)
    tracemalloc.start()
    try:
        rows = fetch_rows("t", 0, body, 0, 100, False, decompressed_max=budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r["offset"] for r in rows_of(rows)] == list(range(10))
    assert rows.resume_at == 10
    assert peak < 1 << 20  # the bomb stopped inflating at the budget, not at 4 MiB
    # Read on from there: the big batch comes first, so it inflates (a
    # response always makes progress), and the budget stops before the next.
    rows = fetch_rows("t", 0, body, 10, 100, False, decompressed_max=budget)
    assert [r["offset"] for r in rows_of(rows)] == [10, 11, 12, 13]
    assert rows.resume_at == 14
    # Without a budget the whole response is read.
    rows = fetch_rows("t", 0, body, 0, 100, False)
    assert rows.last_offset == 23 and rows.resume_at is None
