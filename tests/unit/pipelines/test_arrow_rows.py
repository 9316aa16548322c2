"""The source's rows as Arrow batches: the schema pyspark expects, and the values."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (the spark extra)")

from lograft.client.types import TimestampType  # noqa: E402
from lograft.pipelines.arrow_rows import arrow_schema, record_batch, spark_fields  # noqa: E402
from lograft.storage.batch import Record  # noqa: E402


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


def test_record_batch_values():
    recs = [
        (Record(5, 1_700_000_000_123, b"k", b"v", (("a", b"1"), ("b", None))), TimestampType(0)),
        (Record(6, 1_700_000_000_456, None, None, (("\udcff-raw", b"x"),)), TimestampType(1)),
    ]
    batch = record_batch("orders", 2, recs, include_headers=True)
    assert batch.schema.equals(arrow_schema(True))
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [5, 6]
    assert rows[0]["key"] == b"k" and rows[1]["key"] is None and rows[1]["value"] is None
    assert {r["topic"] for r in rows} == {"orders"} and {r["partition"] for r in rows} == {2}
    assert [r["timestampType"] for r in rows] == [0, 1]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [
        1_700_000_000_123_000,
        1_700_000_000_456_000,
    ]
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
    # A header key that is not UTF-8 arrives with U+FFFD, as Kafka's Java client decodes it.
    assert rows[1]["headers"] == [{"key": "\ufffd-raw", "value": b"x"}]
    assert record_batch("t", 0, recs, include_headers=False).schema.equals(arrow_schema(False))
