"""Invalid options through Spark itself: every combination the source refuses
fails at `load()` with its message naming the option (no cluster is
contacted); the rules of one mode fail when that read is planned (batch) or
started (streaming), since `load()` cannot tell the two apart."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.timeout(300)]

NOWHERE = "http://127.0.0.1:9"  # never contacted: options are checked first

# (options, words the message must contain)
AT_LOAD: list[tuple[dict[str, str], list[str]]] = [
    ({"subscribe": "t", "bootstrap": ""}, ["'bootstrap'"]),
    ({}, ["One of the following options must be specified", "subscribe, subscribePattern"]),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, ["Only one of", "assign"]),
    ({"subscribe": "t", "subscribePattern": "t.*"}, ["Only one of", "subscribePattern"]),
    ({"subscribePattern": "t.*", "assign": '{"t":[0]}'}, ["Only one of"]),
    ({"subscribe": ","}, ["No topics to subscribe to", "'subscribe'"]),
    ({"subscribePattern": "a(b"}, ["'subscribePattern'"]),
    ({"assign": "t-0"}, ["'assign'"]),
    ({"subscribe": "t", "startingOffsets": "newest"}, ["'startingOffsets'"]),
    ({"subscribe": "t", "endingOffsets": '{"t":{"0":-7}}'}, ["'endingOffsets'"]),
    ({"subscribe": "t", "startingTimestamp": "yesterday"}, ["'startingTimestamp'"]),
    ({"subscribe": "t", "startingOffsetsByTimestamp": "{}"}, ["'startingOffsetsByTimestamp'"]),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "x"}, ["ByTimestampStrategy"]),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, ["'failOnDataLoss'"]),
    ({"subscribe": "t", "minPartitions": "0"}, ["minPartitions must be positive"]),
    ({"subscribe": "t", "maxRecordsPerPartition": "0"}, ["maxRecordsPerPartition"]),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, ["maxOffsetsPerTrigger"]),
    (
        {"subscribe": "t", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"},
        ["minOffsetPerTrigger(9) is higher than the maxOffsetsPerTrigger(3)"],
    ),
    ({"subscribe": "t", "maxTriggerDelay": "later"}, ["'maxTriggerDelay'"]),
    ({"subscribe": "t", "includeHeaders": "y"}, ["'includeHeaders'"]),
    ({"subscribe": "t", "startingOffset": "earliest"}, ["unknown option 'startingoffset'"]),
    ({"subscribe": "t", "kafka.bootstrap.servers": "h:1"}, ["'bootstrap'"]),
]


def _message(err: BaseException) -> str:
    return str(err)


def test_every_invalid_combination_fails_at_load_naming_the_option(spark):
    failures = []
    for options, words in AT_LOAD:
        reader = spark.read.format("lograft")
        if "bootstrap" not in options:
            reader = reader.option("bootstrap", NOWHERE)
        for name, value in options.items():
            reader = reader.option(name, value)
        try:
            reader.load()
        except Exception as exc:  # pyspark's AnalysisException carries our message
            text = _message(exc)
            missing = [w for w in words if w not in text]
            if missing:
                failures.append(f"{options}: {missing} not in {text[:600]}")
        else:
            failures.append(f"{options}: load() succeeded")
    assert not failures, "\n".join(failures)


def test_batch_only_rules_fail_when_the_read_is_planned(spark):
    for options, word in [
        ({"startingOffsets": "latest"}, "starting offset can't be latest"),
        ({"endingOffsets": "earliest"}, "ending offset can't be earliest"),
        (
            {"startingOffsets": '{"t":{"0":9}}', "endingOffsets": '{"t":{"0":4}}'},
            "startingOffsets for t-0 (9) is after endingOffsets",
        ),
    ]:
        reader = spark.read.format("lograft").option("bootstrap", NOWHERE).option("subscribe", "t")
        for name, value in options.items():
            reader = reader.option(name, value)
        df = reader.load()  # valid for a streaming read: load() cannot know
        with pytest.raises(Exception) as err:
            df.collect()
        assert word in _message(err.value), _message(err.value)[:2000]


def test_streaming_only_rules_fail_when_the_query_starts(spark, tmp_path):
    df = (
        spark.readStream.format("lograft")
        .option("bootstrap", NOWHERE)
        .option("subscribe", "t")
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(Exception) as err:
        query = (
            df.writeStream.format("console")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(60)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    assert "ending offset not valid in streaming queries" in _message(err.value)

    with pytest.raises(Exception) as err:
        spark.readStream.format("lograft").option("bootstrap", NOWHERE).option(
            "subscribe", "t"
        ).schema("value binary").load().writeStream.format("console").option(
            "checkpointLocation", str(tmp_path / "cp2")
        ).start().awaitTermination(60)
    assert "fixed schema" in _message(err.value)
