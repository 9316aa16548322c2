"""Pure pieces of the client: config rules, bootstrap parsing, serializers,
backoff, error decoding, the buffer pool, batches and the accumulator."""

from __future__ import annotations

import asyncio
import threading

import orjson
import pytest

from lograft.client.accumulator import RecordAccumulator
from lograft.client.backoff import backoff_ms
from lograft.client.buffer_pool import BufferPool
from lograft.client.config import ConsumerConfig, ProducerConfig, make_config, parse_bootstrap
from lograft.client.errors import BufferFullError, UnexpectedResponseError, error_from_response
from lograft.client.producer import normalize_headers, prepare
from lograft.client.producer_batch import BatchState, estimate_size
from lograft.client.serde import deserializers, serializers
from lograft.client.types import RecordMetadata
from lograft.errors import (
    InvalidConfigError,
    LograftError,
    NotLeaderOrFollowerError,
    RecordTooLargeError,
)
from lograft.protocol.batch import RecordInput, build_batch, iter_batches
from lograft.protocol.compression import Compression
from lograft.protocol.topic_partition import TopicPartition

# -- config ------------------------------------------------------------------------------


def test_bootstrap_parsing_normalises_and_dedups():
    assert parse_bootstrap("127.0.0.1:9091, http://h:2/,http://h:2") == (
        "http://127.0.0.1:9091",
        "http://h:2",
    )
    assert parse_bootstrap(["https://a:1"]) == ("https://a:1",)
    for bad in ("", " , ", "ftp://h:1", "http://h:1/path", "http://h:notaport"):
        with pytest.raises(InvalidConfigError):
            parse_bootstrap(bad)


def test_producer_defaults_are_idempotent_acks_all():
    cfg = ProducerConfig()
    assert cfg.acks_value == "all" and cfg.idempotent
    assert cfg.max_in_flight_per_partition == 1
    # acks=1 turns idempotence off unless asked for, and asking for it is an error.
    assert not ProducerConfig(acks=1).idempotent
    assert ProducerConfig(acks=-1).acks_value == "all"
    with pytest.raises(InvalidConfigError, match="acks='all'"):
        ProducerConfig(acks=1, enable_idempotence=True)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_in_flight_per_partition": 6}, "must be at most 5 with idempotence"),
        ({"batch_bytes": 2 << 20}, "exceeds max_request_bytes"),
        ({"compression_type": "snappy"}, "compression_type"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"delivery_timeout_ms": 1000}, "delivery_timeout_ms"),
        ({"acks": 2}, "acks"),
        ({"retry_backoff_max_ms": 10}, "retry_backoff_max_ms"),
    ],
)
def test_producer_config_rules(settings, message):
    with pytest.raises(InvalidConfigError, match=message):
        ProducerConfig(**settings)


def test_in_flight_above_one_is_allowed_without_idempotence():
    cfg = ProducerConfig(enable_idempotence=False, max_in_flight_per_partition=5)
    assert not cfg.idempotent and cfg.max_in_flight_per_partition == 5


def test_unknown_setting_is_named():
    with pytest.raises(InvalidConfigError, match="lingerms"):
        make_config(ProducerConfig, None, {"lingerms": 5})


def test_consumer_settings_are_checked():
    assert ConsumerConfig(group_id="g").auto_commit
    assert not ConsumerConfig(group_id="g", enable_auto_commit=False).auto_commit
    assert not ConsumerConfig().auto_commit  # nothing to commit to without a group
    with pytest.raises(InvalidConfigError, match="group_id"):
        ConsumerConfig(group_id="")
    with pytest.raises(InvalidConfigError, match="group_assignor"):
        ConsumerConfig(group_id="g", group_assignor="roundrobin")
    with pytest.raises(InvalidConfigError, match="session_timeout_ms"):
        ConsumerConfig(group_id="g", session_timeout_ms=0)
    with pytest.raises(InvalidConfigError, match="auto_commit_interval_ms"):
        ConsumerConfig(group_id="g", auto_commit_interval_ms=-1)
    with pytest.raises(InvalidConfigError, match="fetch_max_wait_ms"):
        ConsumerConfig(request_timeout_ms=500, fetch_max_wait_ms=500)
    with pytest.raises(InvalidConfigError, match="auto_offset_reset"):
        ConsumerConfig(auto_offset_reset="smallest")


# -- serializers ---------------------------------------------------------------------------


def test_serializers_round_trip():
    assert deserializers.json(serializers.json({"a": [1, "é"]})) == {"a": [1, "é"]}
    assert deserializers.str(serializers.str("héllo")) == "héllo"
    assert serializers.bytes(bytearray(b"x")) == b"x"
    with pytest.raises(TypeError, match="serializer"):
        serializers.bytes("not bytes")
    with pytest.raises(TypeError):
        serializers.str(b"bytes")


def test_prepare_serializes_and_never_passes_none():
    seen = []

    def ser(v):
        seen.append(v)
        return b"s"

    cfg = ProducerConfig(value_serializer=ser, key_serializer=ser)
    rec = prepare(cfg, "t", None, None, {"h": "v", "n": None}, None, 7)
    assert (rec.key, rec.value, rec.timestamp_ms) == (None, None, 7)
    assert rec.headers == (("h", b"v"), ("n", None))
    assert seen == []
    rec = prepare(cfg, "t", 1, 2, None, 3, None)
    assert (rec.key, rec.value, rec.partition) == (b"s", b"s", 3) and seen == [2, 1]


def test_prepare_rejects_what_cannot_be_sent():
    cfg = ProducerConfig(max_request_bytes=1000, batch_bytes=1000, buffer_memory_bytes=4000)
    with pytest.raises(RecordTooLargeError):
        prepare(cfg, "t", b"x" * 1000, None, None, None, None)
    with pytest.raises(LograftError, match="serialize the value"):
        prepare(cfg, "t", "a str with the bytes serializer", None, None, None, None)
    with pytest.raises(LograftError, match="header"):
        normalize_headers([("k", 5)])


def test_estimate_is_an_upper_bound_of_the_encoded_record():
    cases = [
        (None, None, ()),
        (b"k", b"v" * 300, ()),
        (b"", b"", (("h", b"x" * 200), ("n", None))),
        (b"k" * 70000, b"v" * 70000, (("é" * 40, b"y"),)),
    ]
    for key, value, headers in cases:
        one = build_batch([RecordInput(value, key, headers, 1)], timestamp_ms=1)
        two = build_batch(
            [RecordInput(b"", None, (), 1), RecordInput(value, key, headers, 2**40)],
            timestamp_ms=1,
        )
        empty = build_batch([RecordInput(b"", None, (), 1)], timestamp_ms=1)
        assert len(one) - 61 <= estimate_size(key, value, headers)
        assert len(two) - len(empty) <= estimate_size(key, value, headers)


# -- backoff -------------------------------------------------------------------------------


def test_backoff_doubles_to_the_cap_within_jitter():
    lo = [backoff_ms(a, 100, 1000, rand=lambda: 0.0) for a in (1, 2, 3, 4, 5, 60, 10_000)]
    hi = [backoff_ms(a, 100, 1000, rand=lambda: 1.0) for a in (1, 2, 3)]
    assert lo == pytest.approx([80, 160, 320, 640, 800, 800, 800])
    assert hi == pytest.approx([120, 240, 480])
    with pytest.raises(ValueError):
        backoff_ms(0, 100, 1000)


# -- error bodies --------------------------------------------------------------------------


def test_error_bodies_become_typed_errors():
    body = orjson.dumps(
        {
            "error": {
                "code": "NOT_LEADER_OR_FOLLOWER",
                "message": "go there",
                "retriable": True,
                "details": {"leader_id": 2, "leader_url": "http://b:2"},
            }
        }
    )
    err = error_from_response(421, body, "http://a:1/x")
    assert isinstance(err, NotLeaderOrFollowerError)
    assert err.details == {
        "leader_id": 2,
        "leader_url": "http://b:2",
        "http_status": 421,
        "url": "http://a:1",
    }
    future = orjson.dumps({"error": {"code": "SOMETHING_NEW", "message": "m", "retriable": True}})
    err = error_from_response(503, future, "u")
    assert err.code == "SOMETHING_NEW" and err.retriable and isinstance(err, LograftError)
    err = error_from_response(502, b"<html>bad gateway</html>", "http://a:1/x")
    assert isinstance(err, UnexpectedResponseError) and "bad gateway" in err.message


# -- buffer pool -----------------------------------------------------------------------------


def test_pool_bounds_and_times_out():
    pool = BufferPool(100)
    assert pool.try_reserve(60) and not pool.try_reserve(41) and pool.try_reserve(40)
    with pytest.raises(BufferFullError, match="buffer_memory_bytes=100"):
        pool.reserve_blocking(1, timeout_ms=0)
    with pytest.raises(RecordTooLargeError):
        pool.try_reserve(101)
    pool.release(100)
    assert pool.used == 0


def test_pool_wakes_a_blocked_thread_on_release():
    pool = BufferPool(10)
    assert pool.try_reserve(10)
    done = threading.Event()

    def blocked():
        pool.reserve_blocking(5, timeout_ms=30_000)
        done.set()

    t = threading.Thread(target=blocked)
    t.start()
    while not pool.has_waiters:  # the thread is inside the wait
        threading.Event().wait(0.001)
    assert not done.is_set()
    pool.release(10)
    t.join(10)
    assert done.is_set() and pool.used == 5


async def test_pool_wakes_an_async_waiter_on_release():
    pool = BufferPool(10)
    assert pool.try_reserve(10)
    waiter = asyncio.create_task(pool.reserve(4, timeout_ms=30_000))
    while not pool.has_waiters:
        await asyncio.sleep(0)
    assert not waiter.done()
    pool.release(10)
    await asyncio.wait_for(waiter, 10)
    assert pool.used == 4
    with pytest.raises(BufferFullError):
        await pool.reserve(7, timeout_ms=1)


# -- batches and the accumulator ---------------------------------------------------------------


def _meta(name: str = "t", partitions: int = 1):
    from lograft.client.metadata import PartitionMetadata, TopicMetadata

    parts = tuple(
        PartitionMetadata(partition=i, leader=1, leader_epoch=0, replicas=(1,), isr=(1,))
        for i in range(partitions)
    )
    return TopicMetadata(name, parts, 0.0)


# A record of a one-byte value, no key, no headers, timestamp delta < 64: 8 bytes encoded.
ONE_BYTE_RECORD = 8


async def test_accumulator_batches_by_size_and_keeps_order():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=61 + 3 * ONE_BYTE_RECORD, linger_ms=60_000, loop=loop)
    tp = TopicPartition("t", 0)
    futs = []
    for i in range(7):
        f = loop.create_future()
        futs.append(f)
        acc.append(_meta(), bytes([i]), None, None, 0, 1000 + i, f)
    batches = list(acc.queues[tp])
    assert [b.record_count for b in batches] == [3, 3, 1]
    assert [b.state for b in batches] == [BatchState.CLOSED, BatchState.CLOSED, BatchState.OPEN]
    now = loop.time()
    assert acc.head_ready(tp, force=False, now=now)[0]  # not the last: ready
    first = acc.drain(tp)
    first.seal(Compression.NONE, producer_id=7, producer_epoch=0, base_sequence=0)
    data = first.data
    assert data is not None
    assert data == build_batch(
        [RecordInput(bytes([i]), None, (), 1000 + i) for i in range(3)],
        timestamp_ms=0,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
    )
    ((_, header),) = list(iter_batches(data))
    assert (header.producer_id, header.base_sequence, header.records_count) == (7, 0, 3)
    first.complete(40, -1)
    assert [f.result() for f in futs[:3]] == [
        RecordMetadata("t", 0, 40 + i, 1000 + i) for i in range(3)
    ]
    acc.drain(tp)
    ready, wait = acc.head_ready(tp, force=False, now=now)
    assert not ready and wait is not None and wait > 59  # lingering
    assert acc.head_ready(tp, force=True, now=now)[0]
    assert acc.head_ready(tp, force=False, now=now + 61)[0]


async def test_keyless_records_stick_to_a_partition_until_its_batch_closes():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=61 + 2 * ONE_BYTE_RECORD, linger_ms=5, loop=loop)
    meta = _meta(partitions=3)
    first = acc.append(meta, b"x", None, None, None, 1)
    second = acc.append(meta, b"x", None, None, None, 1)
    assert first.batch is second.batch and (first.index, second.index) == (0, 1)
    third = acc.append(meta, b"x", None, None, None, 1)  # full: the next partition
    assert third.batch.tp != first.batch.tp and third.index == 0
    assert acc.sticky["t"] is third.batch
    acc.drain(third.batch.tp)  # sent: closed for appends, so the sticky partition moves
    fourth = acc.append(meta, b"x", None, None, None, 1)
    assert fourth.batch.tp not in (third.batch.tp,) and fourth.index == 0


async def test_a_batch_seals_once_and_resolves_once():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=1000, linger_ms=0, loop=loop)
    tp = TopicPartition("t", 0)
    cancelled = loop.create_future()
    acc.append(_meta(), b"a", None, None, 0, 5, cancelled)
    cancelled.cancel()  # a caller giving up does not break completion
    batch = acc.drain(tp)
    batch.seal(Compression.NONE)
    with pytest.raises(AssertionError):
        batch.seal(Compression.NONE)
    batch.fail(RuntimeError("x"))
    assert batch.done.done()
    with pytest.raises(AssertionError):
        batch.complete(0, -1)


async def test_a_batch_reserves_batch_bytes_once_and_gives_back_the_rest_when_drained():
    loop = asyncio.get_running_loop()
    pool = BufferPool(10_000)
    acc = RecordAccumulator(batch_bytes=1000, linger_ms=60_000, loop=loop, pool=pool)
    for _ in range(10):
        acc.append(_meta(), b"a", None, None, 0, 5)
    assert pool.used == 1000  # one batch: one reservation, not one per record
    batch = acc.drain(TopicPartition("t", 0))
    assert pool.used == batch.reserved_bytes == 61 + 10 * ONE_BYTE_RECORD
    assert batch.records.closed


async def test_a_new_batch_without_room_appends_nothing_and_asks_for_memory():
    from lograft.client.accumulator import NeedMemory

    loop = asyncio.get_running_loop()
    pool = BufferPool(1500)
    acc = RecordAccumulator(batch_bytes=1000, linger_ms=60_000, loop=loop, pool=pool)
    meta = _meta(partitions=2)
    acc.append(meta, b"a", None, None, 0, 5)
    out = acc.append(meta, b"b", None, None, 1, 5)
    assert out == NeedMemory(1000) and pool.used == 1000
    assert TopicPartition("t", 1) not in acc.open
    acc.drain(TopicPartition("t", 0))  # 61 + 8 bytes kept
    assert not isinstance(acc.append(meta, b"b", None, None, 1, 5), NeedMemory)
    assert pool.used == 69 + 1000


def test_a_sync_send_waits_for_a_batch_worth_of_room_then_raises_buffer_full():
    """The sync producer's path: no room for a new batch blocks at most
    max_block_ms (BufferFullError after); a release in time lets it go on."""
    pool = BufferPool(1500)
    loop = asyncio.new_event_loop()
    try:
        acc = RecordAccumulator(batch_bytes=1000, linger_ms=60_000, loop=loop, pool=pool)
        meta = _meta(partitions=2)
        acc.append(meta, b"a", None, None, 0, 5)
        need = acc.append(meta, b"b", None, None, 1, 5)
        with pytest.raises(BufferFullError):
            pool.reserve_blocking(need.size, timeout_ms=30)
        releaser = threading.Timer(0.05, lambda: acc.drain(TopicPartition("t", 0)))
        releaser.start()
        pool.reserve_blocking(need.size, timeout_ms=30_000)  # woken by the drain's release
        releaser.join()
        out = acc.append(meta, b"b", None, None, 1, 5, reserved=need.size)
        assert out.index == 0 and pool.used == 69 + 1000
    finally:
        loop.close()


# -- the sync producer's record future -------------------------------------------------------


def test_record_future_wakes_a_waiting_thread_and_runs_callbacks():
    from lograft.client.errors import ClientTimeoutError
    from lograft.client.record_future import FutureRecordMetadata

    fut = FutureRecordMetadata()
    seen = []
    fut.add_done_callback(lambda f: seen.append(f.get(0)))
    with pytest.raises(ClientTimeoutError):
        fut.get(timeout=0.01)
    got = []
    waiter = threading.Thread(target=lambda: got.append(fut.get(timeout=30)))
    waiter.start()
    meta = RecordMetadata("t", 0, 5, 9)
    fut.set_result(meta)
    waiter.join(30)
    assert got == [meta] and seen == [meta] and fut.succeeded() and not fut.cancel()
    with pytest.raises(RuntimeError):
        fut.set_result(meta)  # resolved once
    late = []
    fut.add_done_callback(late.append)  # already done: runs at once
    assert late == [fut]

    failed = FutureRecordMetadata()
    failed.set_exception(RecordTooLargeError("too big"))
    assert failed.failed() and isinstance(failed.exception(0), RecordTooLargeError)
    with pytest.raises(RecordTooLargeError):
        failed.result(0)


async def test_record_futures_compute_their_metadata_from_the_batch_when_read():
    from lograft.client.record_future import FutureRecordMetadata

    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=1000, linger_ms=60_000, loop=loop)
    futs = []
    for i in range(3):
        out = acc.append(_meta(), b"v", None, None, 0, 500 + i)
        futs.append(FutureRecordMetadata(out.batch, out.index))
    assert not any(f.done() for f in futs)
    seen, boom = [], []
    futs[1].add_done_callback(seen.append)
    futs[0].add_done_callback(lambda f: boom.append(1 / 0))  # logged, not propagated
    got = []
    waiter = threading.Thread(target=lambda: got.append(futs[2].get(timeout=30)))
    waiter.start()
    batch = acc.drain(TopicPartition("t", 0))
    batch.seal(Compression.NONE)
    batch.complete(100, -1)
    waiter.join(30)
    expected = [RecordMetadata("t", 0, 100 + i, 500 + i) for i in range(3)]
    assert [f.get(0) for f in futs] == expected and got == [expected[2]]
    assert seen == [futs[1]] and boom == [] and futs[0].succeeded()
    assert batch.data is None  # the encoded records are given up once done
    with pytest.raises(RuntimeError):
        futs[0].set_result(expected[0])  # a batch's futures are resolved by the batch


async def test_a_failed_batch_fails_every_record_future_and_append_time_wins():
    from lograft.client.record_future import FutureRecordMetadata

    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=1000, linger_ms=60_000, loop=loop)
    meta = _meta(partitions=2)
    a = acc.append(meta, b"v", None, None, 0, 5)
    b = acc.append(meta, b"v", None, None, 1, 5)
    fa, fb = FutureRecordMetadata(a.batch, 0), FutureRecordMetadata(b.batch, 0)
    a.batch.fail(RecordTooLargeError("no"))
    assert fa.failed() and isinstance(fa.exception(0), RecordTooLargeError)
    with pytest.raises(RecordTooLargeError):
        fa.get(0)
    bb = acc.drain(TopicPartition("t", 1))
    bb.seal(Compression.NONE)
    bb.complete(7, 99_000)  # LogAppendTime: the broker's time is every record's
    assert fb.get(0) == RecordMetadata("t", 1, 7, 99_000)


async def test_send_many_results_are_computed_from_the_batches_when_read():
    from lograft.client.many_results import ManyResults

    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=61 + 2 * ONE_BYTE_RECORD, linger_ms=60_000, loop=loop)
    many = ManyResults(5)
    for i in range(5):
        acc.append(_meta(), bytes([i]), None, None, 0, 10 + i, span=(many, i))
    batches = [acc.drain(TopicPartition("t", 0)) for _ in range(3)]
    assert [len(b.spans) for b in batches] == [1, 1, 1]  # one span per batch, not per record
    for b, base in zip(reversed(batches), (50, 30, 20), strict=True):
        assert not many.future.done()
        b.seal(Compression.NONE)
        b.complete(base, -1)
    metas = many.future.result(0)
    expected = [RecordMetadata("t", 0, o, 10 + i) for i, o in enumerate([20, 21, 30, 31, 50])]
    assert metas == expected and expected == metas and len(metas) == 5
    assert metas[-1] == expected[-1] and metas[1:3] == expected[1:3] and list(metas) == expected
    assert ManyResults(0).future.result(0) == []
    failing = ManyResults(1)
    acc.append(_meta(), b"x", None, None, 0, 1, span=(failing, 0))
    acc.drain(TopicPartition("t", 0)).fail(RecordTooLargeError("no"))
    assert isinstance(failing.future.exception(0), RecordTooLargeError)


async def test_send_many_waiting_for_room_goes_on_where_it_stopped():
    from lograft.client.accumulator import NeedMemory
    from lograft.client.many_results import ManyResults

    loop = asyncio.get_running_loop()
    pool = BufferPool(2500)
    acc = RecordAccumulator(batch_bytes=1000, linger_ms=60_000, loop=loop, pool=pool)
    values = [b"%03d" % i + b"x" * 97 for i in range(20)]  # 107 bytes encoded: 8 a batch
    many = ManyResults(len(values))
    out = acc.append_many(_meta(), values, None, many, 0)
    # Two batches of 8 took 2,000 bytes; a third has no room: the first 16 are in.
    assert out == NeedMemory(1000, 16) and pool.used == 2000
    first = acc.drain(TopicPartition("t", 0))
    first.seal(Compression.NONE)
    first.complete(0, -1)
    pool.release(first.reserved_bytes)  # what the sender does when a batch is done
    pool.reserve_blocking(out.size, timeout_ms=0)
    assert acc.append_many(_meta(), values, None, many, out.start, reserved=out.size) == 20
    batches = [first, *acc.queues[TopicPartition("t", 0)]]
    assert [b.record_count for b in batches] == [8, 8, 4]  # each record once
    for b, base in zip(batches[1:], (8, 16), strict=True):
        acc.drain(b.tp)
        b.seal(Compression.NONE)
        b.complete(base, -1)
    assert [m.offset for m in many.future.result(0)] == list(range(20))


async def test_accumulator_batches_by_record_count_too():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=10_000, linger_ms=60_000, loop=loop, batch_records=2)
    tp = TopicPartition("t", 0)
    full_after = []
    for _ in range(5):
        full_after.append(acc.append(_meta(), b"x", None, None, 0, 1).batch.records.full)
    assert full_after == [False, True, False, True, False]
    assert [b.record_count for b in acc.queues[tp]] == [2, 2, 1]
    assert acc.head_ready(tp, force=False, now=loop.time())[0]  # full: no lingering


@pytest.mark.parametrize(
    ("settings", "name"),
    [
        ({"lingerms": 5}, "lingerms"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"linger_ms": "5"}, "linger_ms"),
        ({"batch_records": 0}, "batch_records"),
        ({"acks": 1, "enable_idempotence": True}, "enable_idempotence"),
    ],
)
def test_a_bad_setting_is_named_in_the_error_details(settings, name):
    with pytest.raises(InvalidConfigError) as caught:
        make_config(ProducerConfig, None, settings)
    assert caught.value.details["setting"] == name
    assert name in caught.value.message
