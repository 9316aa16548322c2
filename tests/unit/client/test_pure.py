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
from lograft.protocol.batch import RecordInput, build_batch, iter_batches, iter_records
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
        ({"max_in_flight_per_partition": 2}, "must be 1 with idempotence"),
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


async def test_accumulator_batches_by_size_and_keeps_order():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=61 + 3 * 40, linger_ms=60_000, loop=loop)
    tp = TopicPartition("t", 0)
    futs = []
    for i in range(7):
        f = loop.create_future()
        futs.append(f)
        acc.append(tp, RecordInput(bytes([i]), None, (), 1000 + i), 40, f)
    batches = list(acc.queues[tp])
    assert [b.record_count for b in batches] == [3, 3, 1]
    assert [b.state for b in batches] == [BatchState.CLOSED, BatchState.CLOSED, BatchState.OPEN]
    now = loop.time()
    assert acc.head_ready(tp, force=False, now=now)[0]  # not the last: ready
    first = acc.drain(tp)
    first.seal(Compression.NONE, producer_id=7, producer_epoch=0, base_sequence=0)
    data = first.data
    assert data is not None
    assert [r.value for r in iter_records(data)] == [b"\x00", b"\x01", b"\x02"]
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


async def test_keyless_append_aborts_instead_of_opening_a_batch():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=200, linger_ms=5, loop=loop)
    tp = TopicPartition("t", 1)
    rec = RecordInput(b"x", None, (), 1)
    assert not acc.append(tp, rec, 40, loop.create_future(), abort_on_new_batch=True).appended
    out = acc.append(tp, rec, 40, loop.create_future())
    assert out.appended and out.new_batch
    assert acc.append(tp, rec, 40, loop.create_future(), abort_on_new_batch=True).appended
    acc.drain(tp)  # sent: closed for appends
    assert not acc.append(tp, rec, 40, loop.create_future(), abort_on_new_batch=True).appended


async def test_a_batch_seals_once_and_resolves_once():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=1000, linger_ms=0, loop=loop)
    tp = TopicPartition("t", 0)
    cancelled = loop.create_future()
    acc.append(tp, RecordInput(b"a", None, (), 5), 40, cancelled)
    cancelled.cancel()  # a caller giving up does not break completion
    batch = acc.drain(tp)
    batch.seal(Compression.NONE)
    with pytest.raises(AssertionError):
        batch.seal(Compression.NONE)
    batch.fail(RuntimeError("x"))
    assert batch.done.done()
    with pytest.raises(AssertionError):
        batch.complete(0, -1)


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


async def test_accumulator_batches_by_record_count_too():
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_bytes=10_000, linger_ms=60_000, loop=loop, batch_records=2)
    tp = TopicPartition("t", 0)
    outcomes = [
        acc.append(tp, RecordInput(b"x", None, (), 1), 40, loop.create_future()) for _ in range(5)
    ]
    assert [o.batch_full for o in outcomes] == [False, True, False, True, False]
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
