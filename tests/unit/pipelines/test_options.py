"""The Spark source and sink options: Kafka's names and rules, every refusal
naming the option at fault."""

from __future__ import annotations

import pytest

from lograft.errors import InvalidConfigError
from lograft.pipelines.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    check_batch_options,
    check_stream_options,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)
from lograft.protocol.topic_partition import TopicPartition

BOOT = {"bootstrap": "http://127.0.0.1:9091"}


def source(**options: str):
    return parse_source_options({**BOOT, **options})


def refused(options: dict[str, str], *, batch: bool = False, stream: bool = False) -> str:
    with pytest.raises(InvalidConfigError) as err:
        opts = parse_source_options(options)
        if batch:
            check_batch_options(opts)
        if stream:
            check_stream_options(opts)
    return err.value.message


def test_defaults_follow_kafka():
    opts = source(subscribe="a, b ,,a")
    assert opts.subscription.kind == "subscribe"
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting is None and opts.ending is None
    assert opts.fail_on_data_loss is True
    assert opts.include_headers is False
    assert opts.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    assert opts.bootstrap == ("http://127.0.0.1:9091",)


def test_the_executor_decompression_budget_is_an_option():
    assert source(subscribe="t").fetch_max_decompressed_bytes == 64 * 1024 * 1024
    opts = source(subscribe="t", fetchMaxDecompressedBytes="65536")
    assert opts.fetch_max_decompressed_bytes == 65536
    assert "fetchMaxDecompressedBytes" in refused(
        {**BOOT, "subscribe": "t", "fetchMaxDecompressedBytes": "0"}
    )


def test_option_names_are_case_insensitive():
    opts = parse_source_options(
        {"BOOTSTRAP": "127.0.0.1:9091", "SubScribe": "t", "STARTINGOFFSETS": "earliest"}
    )
    assert opts.starting is not None and opts.starting.kind == "earliest"
    assert opts.bootstrap == ("http://127.0.0.1:9091",)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"subscribe": "t"}, ["Option 'bootstrap' must be specified"]),
        (BOOT, ["One of the following options must be specified", "subscribePattern"]),
        ({**BOOT, "subscribe": "t", "assign": '{"t":[0]}'}, ["Only one of", "subscribe, assign"]),
        (
            {**BOOT, "subscribe": "t", "subscribePattern": "t.*"},
            ["Only one of", "subscribe, subscribePattern"],
        ),
        ({**BOOT, "subscribe": " , "}, ["No topics to subscribe to", "'subscribe'"]),
        ({**BOOT, "subscribePattern": "  "}, ["Pattern to subscribe is empty"]),
        ({**BOOT, "subscribePattern": "a(b"}, ["'subscribePattern'", "not a valid regular"]),
        ({**BOOT, "assign": "t"}, ["No topicpartitions to assign", "'assign'"]),
        ({**BOOT, "assign": '{"t": 0}'}, ["'assign'", "expected e.g."]),
        ({**BOOT, "assign": '{"t": [-1]}'}, ["'assign'", "not a partition number"]),
        ({**BOOT, "subscribe": "t", "startingOffsets": "{nope"}, ["'startingOffsets'"]),
        (
            {**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'},
            ["'startingOffsets'", "t-0", ">= -2"],
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"x":1}}'},
            ["'startingOffsets'", "expected e.g."],
        ),
        ({**BOOT, "subscribe": "t", "startingTimestamp": "soon"}, ["'startingTimestamp'"]),
        (
            {**BOOT, "subscribe": "t", "startingOffsetsByTimestamp": '{"t":{"0":-5}}'},
            ["'startingOffsetsByTimestamp'"],
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsetsByTimestampStrategy": "maybe"},
            ["startingOffsetsByTimestampStrategy"],
        ),
        ({**BOOT, "subscribe": "t", "failOnDataLoss": "yes"}, ["'failOnDataLoss'"]),
        ({**BOOT, "subscribe": "t", "includeHeaders": "1"}, ["'includeHeaders'"]),
        ({**BOOT, "subscribe": "t", "minPartitions": "0"}, ["minPartitions must be positive"]),
        ({**BOOT, "subscribe": "t", "maxRecordsPerPartition": "-1"}, ["maxRecordsPerPartition"]),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "x"}, ["'maxOffsetsPerTrigger'"]),
        (
            {**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            ["minOffsetPerTrigger(10) is higher than the maxOffsetsPerTrigger(5)"],
        ),
        ({**BOOT, "subscribe": "t", "maxTriggerDelay": "soon"}, ["'maxTriggerDelay'"]),
        ({**BOOT, "subscribe": "t", "startingOffset": "earliest"}, ["unknown option", "Known"]),
        (
            {**BOOT, "subscribe": "t", "kafka.bootstrap.servers": "h:1"},
            ["'kafka.bootstrap.servers'", "'bootstrap'"],
        ),
        ({**BOOT, "subscribe": "t", "kafka.group.id": "g"}, ["'kafka.group.id'", "kafka.*"]),
        ({**BOOT, "subscribe": "t", "groupIdPrefix": "g"}, ["'groupIdPrefix'"]),
        ({"bootstrap": "ftp://x:1", "subscribe": "t"}, ["'bootstrap'", "http://host:port"]),
    ],
)
def test_bad_options_are_refused_naming_the_option(options, words):
    message = refused(options)
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"startingOffsets": "latest"}, ["starting offset can't be latest"]),
        ({"startingOffsets": '{"t":{"0":-1}}'}, ["startingOffsets for t-0 can't be latest"]),
        ({"endingOffsets": "earliest"}, ["ending offset can't be earliest"]),
        ({"endingOffsets": '{"t":{"0":-2}}'}, ["ending offset for t-0 can't be earliest"]),
        (
            {"startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"0":5,"1":3}}'},
            ["must name the same partitions"],
        ),
        (
            {"startingOffsets": '{"t":{"0":7}}', "endingOffsets": '{"t":{"0":5}}'},
            ["startingOffsets for t-0 (7) is after endingOffsets"],
        ),
    ],
)
def test_batch_rules(options, words):
    message = refused({**BOOT, "subscribe": "t", **options}, batch=True)
    for word in words:
        assert word in message, message


def test_batch_allows_what_streaming_refuses_and_back():
    opts = source(subscribe="t", endingOffsets='{"t":{"0":-1}}', startingOffsets="earliest")
    check_batch_options(opts)
    assert "ending offset not valid in streaming queries" in refused(
        {**BOOT, "subscribe": "t", "endingOffsets": "latest"}, stream=True
    )
    assert "ending timestamp not valid in streaming queries" in refused(
        {**BOOT, "subscribe": "t", "endingTimestamp": "5"}, stream=True
    )
    check_stream_options(source(subscribe="t", startingOffsets="latest"))


def test_timestamp_options_win_over_offsets_as_in_kafka():
    opts = source(
        subscribe="t",
        startingOffsets="earliest",
        startingOffsetsByTimestamp='{"t":{"0":5}}',
        startingTimestamp="7",
    )
    assert opts.starting is not None
    assert (opts.starting.kind, opts.starting.timestamp) == ("timestamp", 7)
    opts = source(
        subscribe="t", startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}'
    )
    assert opts.starting is not None and opts.starting.kind == "timestamps"
    assert opts.starting.per_partition() == {TopicPartition("t", 0): 5}


def test_assign_and_offsets_json():
    opts = source(assign='{"b":[1,0],"a":[3]}', startingOffsets='{"a":{"3":-2},"b":{"0":4,"1":-1}}')
    assert opts.subscription.assigned == (
        TopicPartition("b", 1),
        TopicPartition("b", 0),
        TopicPartition("a", 3),
    )
    assert opts.starting is not None
    assert opts.starting.per_partition() == {
        TopicPartition("a", 3): -2,
        TopicPartition("b", 0): 4,
        TopicPartition("b", 1): -1,
    }


def test_pattern_matches_whole_names():
    sub = source(subscribePattern="page-.*").subscription
    assert sub.matches("page-views") and not sub.matches("my-page-views")


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("15m", 900_000),
        ("30s", 30_000),
        ("250", 250),
        ("2h", 7_200_000),
        ("500ms", 500),
        ("1 min", 60_000),
    ],
)
def test_durations(text, ms):
    assert parse_duration_ms("maxTriggerDelay", text) == ms


def test_sink_options():
    opts = parse_sink_options(
        {
            **BOOT,
            "topic": " out ",
            "acks": "1",
            "lingerMs": "20",
            "batchBytes": "1024",
            "checkpointLocation": "/tmp/x",  # Spark passes it to streaming sinks
            "queryName": "counts",  # and this, to a query given a name
        }
    )
    assert opts.topic == "out"
    assert dict(opts.producer_settings) == {"acks": "1", "linger_ms": 20, "batch_bytes": 1024}
    for bad, word in [
        ({"subscribe": "t"}, "unknown option 'subscribe' for the lograft sink"),
        ({"topic": " "}, "'topic' is empty"),
        ({"lingerMs": "soon"}, "'lingerMs'"),
    ]:
        with pytest.raises(InvalidConfigError) as err:
            parse_sink_options({**BOOT, **bad})
        assert word in err.value.message


def test_tls_and_credential_options_reach_the_clients_and_never_the_repr():
    from lograft.pipelines.range_reader import ReadSettings

    secure = {
        "bootstrap": "https://127.0.0.1:9091",
        "sslCaFile": "/etc/lograft/ca.pem",
        "bearerTokenFile": "/run/token",
    }
    opts = parse_source_options({**secure, "subscribe": "t"})
    assert dict(opts.security) == {
        "ssl_cafile": "/etc/lograft/ca.pem",
        "bearer_token_file": "/run/token",
    }
    assert dict(ReadSettings.of(opts).security) == dict(opts.security)
    sink = parse_sink_options(
        {"bootstrap": "https://n:1", "USERNAME": "etl", "password": "pw-not-shown"}
    )
    assert dict(sink.security) == {"username": "etl", "password": "pw-not-shown"}
    assert "pw-not-shown" not in repr(sink)
    token = parse_source_options({**BOOT, "subscribe": "t", "bearerToken": "tok.not.shown"})
    assert "tok.not.shown" not in repr(token)
    assert "tok.not.shown" not in repr(ReadSettings.of(token))
