"""Producer -> consumer round trips of every value type, and the consumer's
positions, seeks and long-poll, against a real node."""

from __future__ import annotations

import asyncio

import pytest

from lograft.client import (
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    NoOffsetForPartitionError,
    Producer,
    TimestampType,
    TopicPartition,
    deserializers,
    serializers,
)
from lograft.errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tests.integration.client.support import CountingTransport

LONG_LINGER = {"linger_ms": 60_000, "linger_strict": True}  # batches wait for flush


def consume_all(url: str, topic: str, partitions: int, expected: int, **settings):
    with Consumer(url, auto_offset_reset="earliest", consumer_timeout_ms=2000, **settings) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        out = []
        for record in c:
            out.append(record)
            if len(out) == expected:
                break
        return out


CASES = [
    # (value, key, headers) as sent with the bytes serializers
    (b"plain bytes", None, None),
    (b"", b"", None),
    (None, b"tombstone-key", None),
    (bytes(range(256)), b"\x00\xff", [("bin", bytes(range(10))), ("null", None)]),
    (b"v", b"k", {"trace": "abc", "unicode-\u00e9": "\u2603"}),
]


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4", "zstd"])
def test_bytes_keys_values_and_headers_round_trip(node, topic, compression):
    t = topic(partitions=2)
    with Producer(node.url, compression_type=compression, **LONG_LINGER) as p:
        futs = [
            p.send(t, v, key=k, headers=h, partition=i % 2) for i, (v, k, h) in enumerate(CASES)
        ]
        p.flush()
        metas = [f.get(10) for f in futs]
    got = {(r.partition, r.offset): r for r in consume_all(node.url, t, 2, len(CASES))}
    for (value, key, headers), meta in zip(CASES, metas, strict=True):
        r = got[(meta.partition, meta.offset)]
        assert (r.value, r.key) == (value, key)
        want = []
        if headers:
            items = headers.items() if isinstance(headers, dict) else headers
            want = [(hk, hv.encode() if isinstance(hv, str) else hv) for hk, hv in items]
        assert list(r.headers) == want
        assert r.timestamp == meta.timestamp and r.timestamp_type is TimestampType.CREATE_TIME


def test_str_and_json_serializers_round_trip(node, topic):
    t = topic()
    values = [{"n": 1, "s": "\u00e9", "l": [1, 2.5, None], "b": True}, [1, 2], "text", 42, None]
    with Producer(
        node.url, value_serializer=serializers.json, key_serializer=serializers.str, **LONG_LINGER
    ) as p:
        for i, v in enumerate(values):
            p.send(t, v, key=f"key-{i}", timestamp_ms=1_700_000_000_000 + i)
        p.flush()
    records = consume_all(
        node.url,
        t,
        1,
        len(values),
        value_deserializer=deserializers.json,
        key_deserializer=deserializers.str,
    )
    assert [r.value for r in records] == values  # None stays a null value, not JSON null
    assert [r.key for r in records] == [f"key-{i}" for i in range(len(values))]
    assert [r.timestamp for r in records] == [1_700_000_000_000 + i for i in range(len(values))]


def test_seek_position_and_max_records(node, topic):
    t = topic()
    with Producer(node.url, **LONG_LINGER) as p:
        for i in range(10):
            p.send(t, b"%d" % i)
        p.flush()  # one batch of ten records
    tp = TopicPartition(t, 0)
    with Consumer(node.url, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([tp])
        assert c.position(tp) == 0
        c.seek(tp, 5)  # inside the batch: records 0..4 come back and are skipped
        got = c.poll(timeout_ms=10_000, max_records=3)[tp]
        assert [(r.offset, r.value) for r in got] == [(5, b"5"), (6, b"6"), (7, b"7")]
        assert c.position(tp) == 8
        c.seek_to_end(tp)
        assert c.position(tp) == 10
        c.seek_to_beginning()
        assert c.position(tp) == 0
        assert c.beginning_offsets([tp]) == {tp: 0} and c.end_offsets([tp]) == {tp: 10}
        assert c.partitions_for_topic(t) == {0}
        assert [r.offset for r in c.poll(timeout_ms=10_000)[tp]] == list(range(10))
        assert c.highwater(tp) == 10


def test_latest_reset_reads_only_new_records(node, topic):
    t = topic()
    tp = TopicPartition(t, 0)
    with Producer(node.url) as p:
        p.send(t, b"old").get(10)
        with Consumer(node.url, fetch_max_wait_ms=100) as c:  # default: latest
            c.assign([tp])
            assert c.position(tp) == 1
            p.send(t, b"new").get(10)
            got = c.poll(timeout_ms=10_000)[tp]
    assert [r.value for r in got] == [b"new"]


def test_offset_out_of_range_and_no_reset(node, topic):
    t = topic()
    tp = TopicPartition(t, 0)
    with Producer(node.url) as p:
        p.send(t, b"only").get(10)
    with Consumer(node.url, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            c.poll(timeout_ms=100)
        c.seek(tp, 50)
        with pytest.raises(OffsetOutOfRangeError):
            c.poll(timeout_ms=10_000)
    with Consumer(node.url, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 50)  # out of range: back to earliest
        assert [r.value for r in c.poll(timeout_ms=10_000)[tp]] == [b"only"]


def test_unknown_topic_raises_from_poll_and_offset_lookups(node, topic):
    t = topic()
    with Consumer(node.url, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("no-such-topic", 0), TopicPartition(t, 5)])
        with pytest.raises(UnknownTopicOrPartitionError):
            c.poll(timeout_ms=10_000)
        with pytest.raises(UnknownTopicOrPartitionError):
            c.poll(timeout_ms=10_000)  # again, while they do not exist
        with pytest.raises(UnknownTopicOrPartitionError):
            c.end_offsets([TopicPartition("no-such-topic", 0)])
        with pytest.raises(UnknownTopicOrPartitionError):
            c.partitions_for_topic("no-such-topic")


def test_group_features_need_a_group_id(node):
    with Consumer(node.url) as c:
        with pytest.raises(InvalidConfigError, match="group_id"):
            c.subscribe(["t"])
        with pytest.raises(InvalidConfigError, match="group_id"):
            c.commit()


async def test_long_poll_returns_when_a_record_arrives(node, topic):
    t = topic()
    tp = TopicPartition(t, 0)
    transport = CountingTransport()
    async with AsyncConsumer(node.url, transport=transport, fetch_max_wait_ms=30_000) as c:
        c.assign([tp])
        assert await c.position(tp) == 0
        poll = asyncio.create_task(c.poll(timeout_ms=60_000))
        while not transport.fetch_requests():  # the long-poll is out
            await asyncio.sleep(0.01)
        assert not poll.done()
        async with AsyncProducer(node.url) as p:
            await p.send_and_wait(t, b"wake up")
        got = await asyncio.wait_for(poll, 30)
    assert [r.value for r in got[tp]] == [b"wake up"]
    # The one long-poll at offset 0 carried it; any later fetch is the next prefetch.
    offsets = [f.params["offset"] for f in transport.fetch_requests()]
    assert offsets[0] == "0" and set(offsets[1:]) <= {"1"}
    fetch = transport.fetch_requests()[0]
    assert fetch.headers == {"Accept": "application/vnd.lograft.batch"}
    assert fetch.params["max_wait_ms"] == "30000"


async def test_async_iteration_reads_many_partitions(node, topic):
    t = topic(partitions=3)
    async with AsyncProducer(node.url, value_serializer=serializers.str) as p:
        futs = [await p.send(t, f"v{i}", key=b"%d" % i) for i in range(300)]
        await asyncio.gather(*futs)
    seen = []
    async with AsyncConsumer(
        node.url,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
        value_deserializer=deserializers.str,
    ) as c:
        c.assign([TopicPartition(t, p) for p in range(3)])
        async for record in c:
            seen.append(record)
    assert sorted(r.value for r in seen) == sorted(f"v{i}" for i in range(300))
    for part in range(3):
        offsets = [r.offset for r in seen if r.partition == part]
        assert offsets == list(range(len(offsets)))
