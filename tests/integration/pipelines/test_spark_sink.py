"""The sink (`df.write.format("lograft")`, `writeStream.format("lograft")`) on a
real three-node cluster: what it writes, the source reads back; keyed records
land on Kafka's murmur2 partition of their key; explicit partitions, topic
columns and headers are honoured; a DataFrame the sink cannot write fails
before any task runs, naming the column or option."""

from __future__ import annotations

import pytest

from lograft.protocol.partitioner import partition_for_key
from tests.integration.pipelines.spark_support import collect_sent, produce

pytestmark = [pytest.mark.timeout(300)]


def _read_all(spark, bootstrap: str, topic: str, **options: str):
    reader = spark.read.format("lograft").option("bootstrap", bootstrap).option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return collect_sent(reader.load())


def test_batch_write_reads_back_with_keys_on_murmur2_partitions(spark, bootstrap, new_topic):
    topic = new_topic(3)
    rows = [(f"user-{i % 13}", f"event-{i}") for i in range(60)] + [(None, "keyless")]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    df.write.format("lograft").option("bootstrap", bootstrap).option("topic", topic).mode(
        "append"
    ).save()
    got = _read_all(spark, bootstrap, topic)
    assert sorted((s.key, s.value) for s in got if s.key is not None) == sorted(
        (k.encode(), v.encode()) for k, v in rows if k is not None
    )
    assert [s.value for s in got if s.key is None] == [b"keyless"]
    for s in got:
        if s.key is not None:
            assert s.partition == partition_for_key(s.key, 3), s


def test_topic_partition_and_headers_columns(spark, bootstrap, new_topic):
    first, second = new_topic(2), new_topic(2)
    rows = [
        (first, 1, b"k1", b"v1", [("h", b"x"), ("n", None)]),
        (second, 0, None, b"v2", []),
        (second, 1, b"k3", None, [("h", b"y")]),
    ]
    schema = (
        "topic string, partition int, key binary, value binary, "
        "headers array<struct<key: string, value: binary>>"
    )
    spark.createDataFrame(rows, schema).coalesce(1).write.format("lograft").option(
        "bootstrap", bootstrap
    ).mode("append").save()
    got = _read_all(spark, bootstrap, f"{first},{second}", includeHeaders="true")
    assert [(s.topic, s.partition, s.key, s.value, s.headers) for s in got] == sorted(
        (t, p, k, v, tuple(h)) for t, p, k, v, h in rows
    )


def test_stream_copies_a_topic_and_the_copy_reads_back_the_same(
    spark, bootstrap, new_topic, checkpoint
):
    source, target = new_topic(3), new_topic(3)
    sent = produce(
        bootstrap,
        source,
        [
            {"key": b"k%d" % (i % 7), "value": b"v%d" % i, "headers": [("i", b"%d" % i)]}
            for i in range(45)
        ],
    )
    query = (
        spark.readStream.format("lograft")
        .option("bootstrap", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", "20")
        .load()
        .select("key", "value", "headers")  # the source's rows, as the sink takes them
        .writeStream.format("lograft")
        .option("bootstrap", bootstrap)
        .option("topic", target)
        .option("lingerMs", "1")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = _read_all(spark, bootstrap, target, includeHeaders="true")
    assert sorted((s.key, s.value, s.headers) for s in got) == sorted(
        (s.key, s.value, s.headers) for s in sent
    )
    # Same key, same partition count: each record is on the partition of its source record.
    where = {s.value: s.partition for s in sent}
    assert all(s.partition == where[s.value] for s in got)


@pytest.mark.parametrize(
    ("schema", "rows", "options", "mode", "words"),
    [
        ("key string", [("a",)], {"topic": "t"}, "append", ["Required attribute 'value'"]),
        ("value int", [(1,)], {"topic": "t"}, "append", ["value attribute type"]),
        ("value string", [("a",)], {}, "append", ["topic option required"]),
        ("value string", [("a",)], {"topic": "t"}, "overwrite", ["append-only"]),
        # Spark's default save mode: refused by Spark for any Python data source.
        ("value string", [("a",)], {"topic": "t"}, "errorifexists", ["ErrorIfExists"]),
        ("value string", [("a",)], {"topic": "t", "acks": "2"}, "append", ["'acks'"]),
        ("value string", [("a",)], {"topic": "t", "subscribe": "t"}, "append", ["'subscribe'"]),
    ],
)
def test_unwritable_dataframes_fail_before_any_task(spark, schema, rows, options, mode, words):
    writer = spark.createDataFrame(rows, schema).write.format("lograft")
    writer = writer.option("bootstrap", "http://127.0.0.1:9").mode(mode)
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception) as err:  # pyspark wraps it (AnalysisException, ...)
        writer.save()
    for word in words:
        assert word in str(err.value), str(err.value)[:2000]
