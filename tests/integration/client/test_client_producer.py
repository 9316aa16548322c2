"""The producer against a real node: batching, partitioning, idempotent
retries, flush and close, typed errors."""

from __future__ import annotations

import asyncio
import itertools
import socket

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from lograft.client import (
    AsyncProducer,
    ClientClosedError,
    ClientTimeoutError,
    ClusterUnreachableError,
    Consumer,
    Producer,
    serializers,
)
from lograft.errors import RecordTooLargeError, UnknownTopicOrPartitionError
from lograft.protocol.batch import iter_batches
from tests.integration.client.support import CountingTransport, DropFirstAnswer, Gate, SwapPairs

LONG_LINGER = {"linger_ms": 60_000, "linger_strict": True}  # batches wait for flush


def test_records_within_linger_go_out_in_one_request(node, topic):
    t = topic()
    transport = CountingTransport()
    with Producer(node.url, transport=transport, **LONG_LINGER) as p:
        futs = [p.send(t, b"r%d" % i) for i in range(500)]
        p.flush()
        metas = [f.get(10) for f in futs]
    assert len(transport.produce_requests()) == 1
    assert [m.offset for m in metas] == list(range(500))
    (body,) = [s.body for s in transport.produce_requests()]
    assert [h.records_count for _pos, h in iter_batches(body)] == [500]
    assert node.end_offset(t, 0) == 500


def test_without_linger_the_same_records_take_many_requests(node, topic):
    """The counterpart of the test above: batching is what made it one request."""
    t = topic()
    transport = CountingTransport()
    with Producer(node.url, transport=transport, linger_ms=0, batch_bytes=1024) as p:
        futs = [p.send(t, b"r%d" % i) for i in range(500)]
        p.flush()
        assert [f.get(10).offset for f in futs] == list(range(500))
    assert len(transport.produce_requests()) > 1
    # No request carries more than batch_bytes of records.
    assert all(len(s.body) <= 1024 for s in transport.produce_requests())


def test_a_full_batch_is_sent_without_waiting_for_linger(node, topic):
    t = topic()
    transport = CountingTransport()
    with Producer(node.url, transport=transport, batch_bytes=4096, **LONG_LINGER) as p:
        futs = [p.send(t, b"x" * 100) for _ in range(100)]
        # No flush: the first batches filled up, so they went out on their own.
        assert futs[0].get(timeout=30).offset == 0
        done = sum(f.done() for f in futs)
        assert 0 < done < 100  # the last batch is still lingering
        p.flush()
    sizes = [len(s.body) for s in transport.produce_requests()]
    assert len(sizes) >= 100 * 136 // 4096 and max(sizes) <= 4096


def test_linger_sends_a_lone_record_without_flush(node, topic):
    t = topic()
    with Producer(node.url, linger_ms=20) as p:
        assert p.send(t, b"alone").get(timeout=30).offset == 0


def test_keyed_records_land_on_kafkas_murmur2_partition(node, topic):
    t = topic(partitions=5)
    keys = [f"user-{i}".encode() for i in range(60)] + [b"", b"\xff\x00"]
    with Producer(node.url, **LONG_LINGER) as p:
        futs = {k: p.send(t, b"v", key=k) for k in keys}
        p.flush()
        placed = {k: f.get(10).partition for k, f in futs.items()}
    expected = {k: (kafka_python_murmur2(k) & 0x7FFFFFFF) % 5 for k in keys}
    assert placed == expected
    assert len(set(placed.values())) == 5
    for p_ in range(5):
        assert sorted(r.key for r in node.read_partition(t, p_)) == sorted(
            k for k, part in expected.items() if part == p_
        )


def test_keyless_records_stick_to_a_partition_per_batch(node, topic):
    t = topic(partitions=3)
    transport = CountingTransport()
    with Producer(node.url, transport=transport, batch_bytes=1024, **LONG_LINGER) as p:
        futs = [p.send(t, b"x" * 100) for _ in range(60)]
        p.flush()
        parts = [f.get(10).partition for f in futs]
    runs: dict[int, list[int]] = {}
    for part, group in itertools.groupby(parts):
        runs.setdefault(part, []).append(len(list(group)))
    batches: dict[int, list[int]] = {}
    for s in transport.produce_requests():
        part = int(s.path.split("/")[-2])
        batches.setdefault(part, []).extend(h.records_count for _p, h in iter_batches(s.body))
    # Each run of one partition (in send order) is exactly one batch: when the
    # batch closes, the next keyless record moves on to another partition.
    assert runs == batches
    assert sum(len(r) for r in runs.values()) > 3 and len(runs) == 3


def test_idempotent_retries_write_each_record_exactly_once(node, topic):
    t = topic(partitions=2)
    transport = DropFirstAnswer()
    with Producer(
        node.url, transport=transport, batch_bytes=2048, retry_backoff_ms=5, **LONG_LINGER
    ) as p:
        futs = [p.send(t, b"value-%04d" % i, key=b"k%d" % (i % 10)) for i in range(400)]
        p.flush()
        metas = [f.get(10) for f in futs]
        stats = p.stats
    assert transport.dropped >= 4  # several batches, each answered once and lost
    assert set(transport.attempts.values()) == {2}  # each retried once, same bytes
    assert stats.duplicates == transport.dropped == stats.retries
    log = {m.partition: node.read_partition(t, m.partition) for m in metas}
    stored = [r.value for recs in log.values() for r in recs]
    assert sorted(stored) == sorted(b"value-%04d" % i for i in range(400))
    for part, recs in log.items():
        assert [r.offset for r in recs] == list(range(len(recs)))
        by_offset = {r.offset: r.value for r in recs}
        for i, m in enumerate(metas):
            if m.partition == part:
                assert by_offset[m.offset] == b"value-%04d" % i


def test_idempotent_batches_that_overtake_are_refused_and_land_in_order(node, topic):
    """Two requests in flight per partition, each pair sent to the node in
    swapped order: the node refuses the early one (OUT_OF_ORDER_SEQUENCE_NUMBER),
    the producer sends it again after the one ahead, and the log is exact."""
    t = topic()
    transport = SwapPairs()
    with Producer(
        node.url,
        transport=transport,
        batch_bytes=2048,
        max_in_flight_per_partition=2,
        **LONG_LINGER,
    ) as p:
        futs = [p.send(t, b"value-%04d" % i) for i in range(400)]
        p.flush()
        metas = [f.get(30) for f in futs]
    assert transport.refused >= 1  # (how many depends on how pairs form)
    assert [m.offset for m in metas] == list(range(400))
    stored = node.read_partition(t, 0)
    assert [r.value for r in stored] == [b"value-%04d" % i for i in range(400)]


def test_without_idempotence_the_same_faults_duplicate(node, topic):
    """The fault really appends before it drops the answer: with idempotence
    off, every batch is in the log twice. (What the test above guards against.)"""
    t = topic()
    transport = DropFirstAnswer()
    with Producer(
        node.url,
        transport=transport,
        enable_idempotence=False,
        retry_backoff_ms=5,
        **LONG_LINGER,
    ) as p:
        futs = [p.send(t, b"v%d" % i) for i in range(50)]
        p.flush()
        assert all(f.get(10) for f in futs)
    assert transport.dropped == 1
    assert len(node.read_partition(t, 0)) == 100


def test_a_broker_refusal_is_the_typed_error_and_the_producer_goes_on(node, topic):
    t = topic(max_message_bytes=1000)
    with Producer(node.url, **LONG_LINGER) as p:
        big = p.send(t, b"x" * 2000)
        p.flush()
        with pytest.raises(RecordTooLargeError):
            big.get(10)
        # The refused batch had a sequence: the next one must not look like a gap.
        ok = p.send(t, b"small")
        p.flush()
        assert ok.get(10).offset == 0
        assert p.stats.producer_id_resets == 1
    assert [r.value for r in node.read_partition(t, 0)] == [b"small"]


def test_flush_waits_for_every_record_sent_before_it(node, topic):
    t = topic(partitions=3)
    with Producer(node.url, **LONG_LINGER) as p:
        futs = [p.send(t, b"v", key=b"%d" % i) for i in range(90)]
        assert not any(f.done() for f in futs)  # lingering
        p.flush()
        assert all(f.done() for f in futs)
        assert all(f.get(0).offset >= 0 for f in futs)


def test_close_delivers_what_is_queued_then_refuses_sends(node, topic):
    t = topic()
    p = Producer(node.url, **LONG_LINGER)
    futs = [p.send(t, b"v%d" % i) for i in range(10)]
    p.close()
    assert [f.get(0).offset for f in futs] == list(range(10))
    with pytest.raises(ClientClosedError):
        p.send(t, b"late")
    p.close()  # idempotent
    assert node.end_offset(t, 0) == 10


def test_close_with_a_deadline_fails_what_cannot_be_sent(node, topic):
    t = topic()
    gate = Gate()  # the broker never gets the batch
    p = Producer(node.url, transport=gate, linger_ms=0)
    fut = p.send(t, b"stuck")
    with pytest.raises(ClientTimeoutError):
        p.flush(timeout_ms=200)
    p.close(timeout_ms=200)
    with pytest.raises(ClientClosedError):
        fut.get(0)
    assert node.end_offset(t, 0) == 0


def test_unknown_topic_raises_the_typed_error_from_send(node):
    with Producer(node.url) as p, pytest.raises(UnknownTopicOrPartitionError):
        p.send("no-such-topic", b"v")


def test_unknown_partition_raises_from_send(node, topic):
    t = topic(partitions=2)
    with Producer(node.url) as p, pytest.raises(UnknownTopicOrPartitionError, match="partition 7"):
        p.send(t, b"v", partition=7)


def _dead_urls(n: int) -> list[str]:
    """URLs of ports that were free a moment ago (nothing listens there)."""
    urls = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            urls.append(f"http://127.0.0.1:{s.getsockname()[1]}")
    return urls


def test_unreachable_bootstrap_names_every_url():
    urls = _dead_urls(2)
    with pytest.raises(ClusterUnreachableError) as info:
        Producer(",".join(urls))
    for url in urls:
        assert url in str(info.value)
    with pytest.raises(ClusterUnreachableError, match=urls[0]):
        Consumer(urls)


def test_bootstrap_goes_on_to_the_next_url(node, topic):
    t = topic()
    (dead,) = _dead_urls(1)
    with Producer([dead, node.url]) as p:
        assert p.send(t, b"v").get(30).offset == 0


async def test_async_producer_round_trip_and_errors(node, topic):
    t = topic(partitions=2)
    async with AsyncProducer(
        node.url, value_serializer=serializers.json, key_serializer=serializers.str, linger_ms=2
    ) as p:
        futs = [await p.send(t, {"n": i}, key=f"k{i % 3}") for i in range(30)]
        metas = await asyncio.gather(*futs)
        one = await p.send_and_wait(t, {"n": 30}, partition=1, timestamp_ms=1234)
        with pytest.raises(UnknownTopicOrPartitionError):
            await p.send("no-such-topic", {"n": 0})
        assert await p.partitions_for(t) == [0, 1]
    assert one.partition == 1 and one.timestamp == 1234
    by_part: dict[int, list[int]] = {}
    for m in metas:
        by_part.setdefault(m.partition, []).append(m.offset)
    for offsets in by_part.values():
        assert offsets == sorted(offsets)  # send order is offset order per partition
    with pytest.raises(ClientClosedError):
        await p.send(t, {"n": -1})
