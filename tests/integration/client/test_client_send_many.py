"""send_many and send_arrow against a real node: the same partitions,
order, idempotent sequences and bytes a loop of `send` gives."""

from __future__ import annotations

import asyncio

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from lograft.client import AsyncProducer, Consumer, Producer, TopicPartition
from lograft.client.errors import SerializationError
from lograft.protocol.batch import iter_batches
from tests.integration.client.support import CountingTransport

LONG_LINGER = {"linger_ms": 60_000, "linger_strict": True}  # batches wait for flush


def _read_all(url: str, topic: str, count: int) -> list:
    out: list = []
    with Consumer(url, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        while len(out) < count:
            out.extend(r for recs in c.poll(timeout_ms=2000).values() for r in recs)
    return out


def test_send_many_keeps_order_offsets_and_one_batch(node, topic):
    t = topic()
    transport = CountingTransport()
    values = [b"r%d" % i for i in range(300)]
    with Producer(node.url, transport=transport, **LONG_LINGER) as p:
        first = p.send(t, b"before")  # a send before send_many goes first
        fut = p.send_many(t, values, timestamps_ms=[1_000 + i for i in range(300)])
        p.flush()
        metas = fut.result(timeout=30)
        assert first.get(10).offset == 0
    assert [m.offset for m in metas] == list(range(1, 301))
    assert [m.timestamp for m in metas] == [1_000 + i for i in range(300)]
    (body,) = [s.body for s in transport.produce_requests()]
    (header,) = [h for _pos, h in iter_batches(body)]
    assert header.records_count == 301 and header.producer_id >= 0 and header.base_sequence == 0
    assert node.end_offset(t, 0) == 301


def test_send_many_keys_go_to_murmur2_partitions(node, topic):
    t = topic(partitions=4)
    keys = [f"user-{i}".encode() for i in range(40)]
    with Producer(node.url, **LONG_LINGER) as p:
        fut = p.send_many(t, [b"v"] * len(keys), keys, headers=[[("h", b"1")]] * len(keys))
        p.flush()
        metas = fut.result(timeout=30)
    for k, m in zip(keys, metas, strict=True):
        assert m.partition == (kafka_python_murmur2(k) & 0x7FFFFFFF) % 4


def test_async_send_many_and_arrow(node, topic):
    pa = pytest.importorskip("pyarrow")
    t = topic()
    batch = pa.record_batch(
        {
            "key": pa.array([b"a", None, b"c"], pa.binary()),
            "value": pa.array(["x", "y", None], pa.string()),
            "timestamp": pa.array([5_000, 6_000, 7_000], pa.timestamp("ms")),
            "headers": pa.array(
                [[{"key": "k", "value": b"v"}], [], None],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )

    async def go() -> list:
        async with AsyncProducer(node.url, **LONG_LINGER) as p:
            fut = await p.send_arrow(t, batch)
            many = await p.send_many(t, [b"m1", b"m2"])
            await p.flush()
            return [*(await fut), *(await many)]

    metas = asyncio.run(go())
    assert [m.offset for m in metas] == [0, 1, 2, 3, 4]
    assert [m.timestamp for m in metas[:3]] == [5_000, 6_000, 7_000]
    got = _read_all(node.url, t, 5)
    assert [(r.key, r.value) for r in got] == [
        (b"a", b"x"),
        (None, b"y"),
        (b"c", None),
        (None, b"m1"),
        (None, b"m2"),
    ]
    assert [list(r.headers) for r in got[:3]] == [[("k", b"v")], [], []]


def test_send_many_refuses_columns_of_other_lengths(node, topic):
    t = topic()
    with Producer(node.url) as p:
        with pytest.raises(SerializationError):
            p.send_many(t, [b"a", b"b"], [b"k"])
        with pytest.raises(SerializationError):
            p.send_many(t, [b"a"], timestamps_ms=[1, 2])
        assert p.send_many(t, []).result(timeout=5) == []


def test_spark_sink_rows_go_through_send_arrow_and_read_back(node, topic):
    """write_rows (one Spark task) without Spark: with the topic option and no
    partition column each Arrow batch goes through send_arrow."""
    pa = pytest.importorskip("pyarrow")
    from lograft.pipelines.options import SinkOptions
    from lograft.pipelines.sink import SinkColumns, write_rows

    t = topic()
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batches = [
        pa.record_batch(
            {
                "value": pa.array([f"v{i}" for i in range(start, start + 3)], pa.string()),
                "key": pa.array([b"k", None, b"k"], pa.binary()),
                "topic": pa.array(["ignored"] * 3, pa.string()),  # the option wins
                "headers": pa.array([[{"key": "h", "value": b"1"}], None, []], header_type),
            }
        )
        for start in (0, 3)
    ]
    opts = SinkOptions(bootstrap=(node.url,), topic=t, producer_settings=())
    columns = SinkColumns(
        value_is_string=True, key="binary", topic=True, partition=False, headers=True
    )
    assert write_rows(opts, columns, iter(batches)) == 6
    got = _read_all(node.url, t, 6)
    assert [r.value for r in got] == [b"v%d" % i for i in range(6)]
    assert [r.key for r in got] == [b"k", None, b"k"] * 2
    assert [list(r.headers) for r in got] == [[("h", b"1")], [], []] * 2
