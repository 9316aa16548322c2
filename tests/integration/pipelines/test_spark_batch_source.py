"""Batch reads (`spark.read.format("lograft")`) of exact ranges from a real
three-node cluster, checked record by record against what the producer was
told: key, value, topic, partition, offset, timestamp, headers."""

from __future__ import annotations

import pytest

from tests.integration.pipelines.spark_support import (
    Sent,
    collect_sent,
    produce,
    spark_offsets,
)

pytestmark = [pytest.mark.timeout(300)]

BASE_TS = 1_700_000_000_000


def _records(partitions: int, per_partition: int) -> list[dict]:
    """Records with distinct keys, values, headers and increasing timestamps."""
    out = []
    for i in range(per_partition):
        for p in range(partitions):
            out.append(
                {
                    "partition": p,
                    "key": None if i % 5 == 4 else f"k{p}-{i}".encode(),
                    "value": f"v{p}-{i}".encode(),
                    "headers": [("trace", f"t{i}".encode()), ("empty", None)] if i % 2 else [],
                    "timestamp_ms": BASE_TS + i * 1000,
                }
            )
    return out


def test_batch_reads_earliest_to_latest_record_by_record(spark, bootstrap, new_topic):
    topic = new_topic(3)
    sent = produce(bootstrap, topic, _records(3, 7))
    df = (
        spark.read.format("lograft")
        .option("bootstrap", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    got = collect_sent(df)
    assert got == sorted(sent, key=lambda s: (s.topic, s.partition, s.offset))
    assert {r["timestampType"] for r in df.select("timestampType").collect()} == {0}


def _read(spark, bootstrap, **options):
    reader = spark.read.format("lograft").option("bootstrap", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _by_tp(sent: list[Sent]) -> dict[tuple[str, int], list[Sent]]:
    out: dict[tuple[str, int], list[Sent]] = {}
    for s in sorted(sent, key=lambda s: (s.topic, s.partition, s.offset)):
        out.setdefault((s.topic, s.partition), []).append(s)
    return out


def test_batch_reads_exact_json_offset_ranges(spark, bootstrap, new_topic):
    topic = new_topic(3)
    parts = _by_tp(produce(bootstrap, topic, _records(3, 8)))
    start = {topic: {0: 2, 1: -2, 2: 5}}
    end = {topic: {0: 6, 1: 3, 2: -1}}
    got = collect_sent(
        _read(
            spark,
            bootstrap,
            subscribe=topic,
            includeHeaders="true",
            startingOffsets=spark_offsets(start),
            endingOffsets=spark_offsets(end),
        )
    )
    want = parts[(topic, 0)][2:6] + parts[(topic, 1)][0:3] + parts[(topic, 2)][5:8]
    assert got == want


def test_batch_reads_timestamp_ranges_and_assigned_partitions(spark, bootstrap, new_topic):
    topic = new_topic(3)
    parts = _by_tp(produce(bootstrap, topic, _records(3, 8)))
    # Records i of each partition carry BASE_TS + i s: start at i=3, end before i=6.
    got = collect_sent(
        _read(
            spark,
            bootstrap,
            subscribe=topic,
            startingTimestamp=str(BASE_TS + 2500),
            endingOffsetsByTimestamp=spark_offsets(
                {topic: {0: BASE_TS + 6000, 1: BASE_TS + 6000, 2: BASE_TS + 99_000}}
            ),
        )
    )
    strip = [Sent(s.topic, s.partition, s.offset, s.timestamp, s.key, s.value) for s in got]
    want = parts[(topic, 0)][3:6] + parts[(topic, 1)][3:6] + parts[(topic, 2)][3:8]
    assert strip == [
        Sent(s.topic, s.partition, s.offset, s.timestamp, s.key, s.value) for s in want
    ]

    # assign: only the named partitions, all of them.
    got = collect_sent(_read(spark, bootstrap, assign=f'{{"{topic}":[2,0]}}'))
    assert [(s.partition, s.offset) for s in got] == [
        (s.partition, s.offset) for s in parts[(topic, 0)] + parts[(topic, 2)]
    ]


def test_batch_reads_pattern_subscription_split_for_min_partitions(spark, bootstrap, new_topic):
    first, second = new_topic(1), new_topic(2)
    sent = produce(bootstrap, first, [{"value": b"a%d" % i, "partition": 0} for i in range(40)])
    sent += produce(
        bootstrap, second, [{"value": b"b%d" % i, "partition": i % 2} for i in range(6)]
    )
    pattern = f"({first}|{second})"
    df = _read(spark, bootstrap, subscribePattern=pattern, minPartitions="6")
    # The 40-offset partition is cut so that there are at least 6 tasks.
    assert df.rdd.getNumPartitions() >= 6
    got = collect_sent(df)
    assert [(s.topic, s.partition, s.offset, s.value) for s in got] == sorted(
        (s.topic, s.partition, s.offset, s.value) for s in sent
    )
