"""Producer, metadata and consumer logic against a scripted transport: where
requests go after errors, what is retried with which bytes, and when the
client gives up. No sockets, no broker."""

from __future__ import annotations

import asyncio

import pytest

from lograft.client import (
    AsyncConsumer,
    AsyncProducer,
    ClusterUnreachableError,
    DeliveryTimeoutError,
    Producer,
    TopicPartition,
)
from lograft.client.errors import ClientClosedError, NetworkError, SerializationError
from lograft.client.metadata import ClusterMetadata
from lograft.client.transport import HttpResponse
from lograft.errors import (
    CorruptRecordError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.batch import RecordInput, build_batch, iter_batches
from lograft.protocol.compression import Compression
from tests.unit.client.fakes import (
    Call,
    ScriptedTransport,
    brokers_doc,
    error_response,
    json_response,
    topic_doc,
)

A, B = "http://a:1", "http://b:2"
BROKERS = {1: A, 2: B}
FAST = {"retry_backoff_ms": 1, "retry_backoff_max_ms": 2, "linger_ms": 0}


def cluster_handler(
    leaders: list[int], on_batch, *, topic: str = "t", producers: list[int] | None = None
):
    """Metadata and producer ids answered by every node; batches go to `on_batch`."""
    pids = iter(producers if producers is not None else range(100, 200))

    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc(BROKERS))
        if call.path == f"/v1/topics/{topic}":
            return json_response(call, topic_doc(topic, leaders))
        if call.path.startswith("/v1/topics/"):
            if call.path.endswith("/batches"):
                return on_batch(call)
            return error_response(call, 404, "UNKNOWN_TOPIC_OR_PARTITION", True)
        if call.path == "/v1/producers":
            return json_response(call, {"producer_id": next(pids), "producer_epoch": 0}, 201)
        raise AssertionError(f"unexpected {call}")

    return handler


def ack(call: Call, base: int = 0, duplicate: bool = False):
    ((_pos, h),) = list(iter_batches(call.data))
    return json_response(
        call,
        {
            "partition": 0,
            "base_offset": base,
            "last_offset": base + h.last_offset_delta,
            "log_append_time": -1,
            "duplicate": duplicate,
        },
    )


async def test_not_leader_hint_is_followed_at_once_with_the_same_bytes():
    def on_batch(call: Call):
        if call.base == A:
            return error_response(
                call, 421, "NOT_LEADER_OR_FOLLOWER", True, leader_id=2, leader_url=B
            )
        return ack(call, base=10)

    t = ScriptedTransport(cluster_handler([1], on_batch))
    async with AsyncProducer(A, transport=t, **FAST) as p:
        meta = await p.send_and_wait("t", b"v")
    sends = t.to("/batches")
    assert [c.base for c in sends] == [A, B]
    assert sends[0].data == sends[1].data  # the retry is the same batch, byte for byte
    assert sends[0].params == {"acks": "all"}
    assert meta.offset == 10 and meta.partition == 0
    assert p.stats.retries == 1 and p.stats.requests == 2


async def test_leader_not_available_refreshes_metadata_and_backs_off():
    leaders = [-1]

    def on_batch(call: Call):
        return ack(call)

    t = ScriptedTransport(cluster_handler(leaders, on_batch))
    async with AsyncProducer(A, transport=t, **FAST) as p:
        fut = await p.send("t", b"v")
        while len(t.to("/v1/topics/t")) < 3:  # refreshed again and again while offline
            await asyncio.sleep(0.001)
        assert not fut.done() and not t.to("/batches")
        leaders[0] = 2  # elected
        meta = await fut
    assert meta.offset == 0 and [c.base for c in t.to("/batches")] == [B]


async def test_network_errors_after_sending_are_retried_and_dedup_makes_them_safe():
    answers = iter(["drop", "drop", "dup"])

    def on_batch(call: Call):
        what = next(answers)
        if what == "drop":
            raise NetworkError("connection reset (scripted)", sent=True)
        return ack(call, base=5, duplicate=True)

    t = ScriptedTransport(cluster_handler([1], on_batch))
    async with AsyncProducer(A, transport=t, **FAST) as p:
        meta = await p.send_and_wait("t", b"v")
    sends = t.to("/batches")
    assert len(sends) == 3 and len({c.data for c in sends}) == 1
    assert meta.offset == 5 and p.stats.duplicates == 1 and p.stats.retries == 2


async def test_non_retriable_error_fails_the_records_with_the_typed_error():
    def on_batch(call: Call):
        return error_response(call, 400, "CORRUPT_MESSAGE", False)

    t = ScriptedTransport(cluster_handler([1], on_batch))
    async with AsyncProducer(A, transport=t, **FAST) as p:
        fut = await p.send("t", b"v")
        with pytest.raises(CorruptRecordError):
            await fut
    assert len(t.to("/batches")) == 1


async def test_failed_sequenced_batch_takes_a_new_producer_id_from_sequence_zero():
    """A batch that never reached the broker must not leave a sequence gap: the
    next batch goes out under a new producer id from sequence 0."""
    fail = [True]

    def on_batch(call: Call):
        if fail[0]:
            raise NetworkError("refused (scripted)", sent=False)
        return ack(call)

    t = ScriptedTransport(cluster_handler([1], on_batch, producers=[100, 101]))
    settings = {**FAST, "delivery_timeout_ms": 60, "request_timeout_ms": 50}
    async with AsyncProducer(A, transport=t, **settings) as p:
        first = await p.send("t", b"1", partition=0)
        with pytest.raises(DeliveryTimeoutError) as info:
            await first
        assert info.value.details["maybe_appended"] is False
        fail[0] = False
        await p.send_and_wait("t", b"2", partition=0)
    headers = [next(iter_batches(c.data))[1] for c in t.to("/batches")]
    assert {(h.producer_id, h.base_sequence) for h in headers[:-1]} == {(100, 0)}
    assert (headers[-1].producer_id, headers[-1].base_sequence) == (101, 0)
    assert p.stats.producer_id_resets == 1


async def test_sequences_count_records_per_partition():
    t = ScriptedTransport(cluster_handler([1, 1], ack))
    async with AsyncProducer(
        A, transport=t, **{**FAST, "linger_ms": 60_000, "linger_strict": True}
    ) as p:
        for n in (3, 2):
            futs = [await p.send("t", b"x", partition=0) for _ in range(n)]
            futs.append(await p.send("t", b"y", partition=1))
            await p.flush()
            await asyncio.gather(*futs)
    seqs = {}
    for c in t.to("/batches"):
        h = next(iter_batches(c.data))[1]
        seqs.setdefault(c.path, []).append((h.base_sequence, h.records_count))
    assert seqs == {
        "/v1/topics/t/partitions/0/batches": [(0, 3), (3, 2)],
        "/v1/topics/t/partitions/1/batches": [(0, 1), (1, 1)],
    }


async def test_acks_zero_resolves_without_offsets():
    def on_batch(call: Call):
        from lograft.client.transport import HttpResponse

        return HttpResponse(202, b"", {}, call.url)

    t = ScriptedTransport(cluster_handler([1], on_batch))
    async with AsyncProducer(A, transport=t, acks=0, **FAST) as p:
        meta = await p.send_and_wait("t", b"v", timestamp_ms=42)
    assert (meta.offset, meta.timestamp) == (-1, 42)
    header = next(iter_batches(t.to("/batches")[0].data))[1]
    assert header.producer_id == -1  # no idempotence without acks=all
    assert t.to("/batches")[0].params == {"acks": "0"} and not t.to("/v1/producers")


# -- metadata -------------------------------------------------------------------------------


async def test_bootstrap_skips_unreachable_nodes_and_remembers_the_good_one():
    def handler(call: Call):
        if call.base == A:
            raise NetworkError("refused (scripted)", sent=False)
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc({2: B}))
        return json_response(call, topic_doc("t", [2]))

    t = ScriptedTransport(handler)
    md = ClusterMetadata(t, [A, B], request_timeout_ms=1000, metadata_max_age_ms=60_000)
    assert await md.bootstrap_brokers() == {2: B}
    meta = await md.topic("t")
    assert meta.count == 1 and md.leader_url(TopicPartition("t", 0)) == B
    # After B answered, it is asked first.
    assert md.candidates()[0] == B
    assert [c.base for c in t.calls] == [A, B, B, B]


async def test_unreachable_cluster_names_every_url():
    def handler(call: Call):
        raise NetworkError(f"could not connect to {call.url} (scripted)", sent=False)

    md = ClusterMetadata(
        ScriptedTransport(handler), [A, B], request_timeout_ms=1000, metadata_max_age_ms=1
    )
    with pytest.raises(ClusterUnreachableError) as info:
        await md.bootstrap_brokers()
    assert A in info.value.message and B in info.value.message
    assert info.value.details["urls"] == [A, B]


async def test_unknown_topic_is_unknown_only_when_every_node_says_so():
    lagging = {A}

    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc(BROKERS))
        if call.base in lagging:
            return error_response(call, 404, "UNKNOWN_TOPIC_OR_PARTITION", True)
        return json_response(call, topic_doc("t", [1]))

    t = ScriptedTransport(handler)
    md = ClusterMetadata(t, [A, B], request_timeout_ms=1000, metadata_max_age_ms=60_000)
    assert (await md.refresh("t")).count == 1  # A had not applied it yet; B had
    lagging.add(B)
    with pytest.raises(UnknownTopicOrPartitionError):
        await md.refresh("t")


async def test_concurrent_refreshes_share_one_request():
    gate = asyncio.Event()

    class Slow(ScriptedTransport):
        async def request(self, method, url, **kw):
            if url.endswith("/v1/topics/t"):
                await gate.wait()
            return await super().request(method, url, **kw)

    t = Slow(cluster_handler([1], ack))
    md = ClusterMetadata(t, [A], request_timeout_ms=1000, metadata_max_age_ms=60_000)
    waiters = [asyncio.create_task(md.refresh("t")) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*waiters)
    assert len({id(r) for r in results}) == 1 and len(t.to("/v1/topics/t")) == 1


async def test_unknown_topic_raises_from_send():
    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc(BROKERS))
        return error_response(call, 404, "UNKNOWN_TOPIC_OR_PARTITION", True)

    async with AsyncProducer(A, transport=ScriptedTransport(handler), **FAST) as p:
        with pytest.raises(UnknownTopicOrPartitionError):
            await p.send("nope", b"v")


# -- consumer -------------------------------------------------------------------------------


def fetch_handler(log: list[bytes], *, hw: int, start: int = 0):
    """A partition whose log is `log` (raw batches back to back)."""
    data = b"".join(log)

    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc({1: A}))
        if call.path == "/v1/topics/t":
            return json_response(call, topic_doc("t", [1]))
        if call.path.endswith("/offsets"):
            return json_response(call, {"earliest": start, "latest": hw, "log_end_offset": hw})
        if call.path.endswith("/records"):
            assert call.headers == {"Accept": "application/vnd.lograft.batch"}
            offset = int(call.params["offset"])
            if not start <= offset <= hw:
                return error_response(call, 416, "OFFSET_OUT_OF_RANGE", False)
            out, nxt = b"", offset
            for pos, h in iter_batches(data):
                if h.next_offset > offset and h.base_offset < hw:
                    out += data[pos : pos + h.size]
                    nxt = max(nxt, h.next_offset)
            from lograft.client.transport import HttpResponse

            return HttpResponse(
                200,
                out,
                {"X-Lograft-Next-Offset": str(nxt), "X-Lograft-High-Watermark": str(hw)},
                call.url,
            )
        raise AssertionError(call)

    return handler


def batch(base: int, values: list[bytes], **kw) -> bytes:
    return build_batch([RecordInput(v) for v in values], timestamp_ms=1000, base_offset=base, **kw)


async def test_consumer_skips_records_below_the_position_and_control_batches():
    log = [
        batch(0, [b"a", b"b", b"c", b"d"]),
        batch(4, [b"marker"], is_control=True),
        batch(5, [b"e"]),
    ]
    t = ScriptedTransport(fetch_handler(log, hw=6))
    async with AsyncConsumer(A, transport=t, fetch_max_wait_ms=0) as c:
        tp = TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, 2)
        got = []
        while len(got) < 3:
            got += [r for rs in (await c.poll(timeout_ms=1000)).values() for r in rs]
        assert [(r.offset, r.value) for r in got] == [(2, b"c"), (3, b"d"), (5, b"e")]
        assert await c.position(tp) == 6 and c.highwater(tp) == 6


async def test_consumer_respects_max_records_and_resets_out_of_range():
    log = [batch(10, [bytes([i]) for i in range(6)])]
    t = ScriptedTransport(fetch_handler(log, hw=16, start=10))
    async with AsyncConsumer(A, transport=t, auto_offset_reset="earliest") as c:
        tp = TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, 99)  # past the end: reset to earliest (10)
        first = (await c.poll(timeout_ms=2000, max_records=4))[tp]
        assert [r.offset for r in first] == [10, 11, 12, 13]
        assert await c.position(tp) == 14
        rest = (await c.poll(timeout_ms=2000))[tp]
        assert [r.offset for r in rest] == [14, 15]

    async with AsyncConsumer(A, transport=t, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 99)
        with pytest.raises(OffsetOutOfRangeError):
            await c.poll(timeout_ms=2000)


async def test_consumer_detects_corrupt_batches():
    good = bytearray(batch(0, [b"abc"]))
    good[-1] ^= 0xFF  # flip a bit inside the CRC's range
    t = ScriptedTransport(fetch_handler([bytes(good)], hw=1))
    async with AsyncConsumer(A, transport=t, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("t", 0)])
        with pytest.raises(CorruptRecordError):
            await c.poll(timeout_ms=2000)


async def test_a_hostile_server_cannot_make_the_consumer_inflate_gigabytes():
    """Every compressed batch the server sends inflates to 8 MiB of zeros; the
    consumer inflates at most max_partition_fetch_decompressed_bytes per
    response (the first batch always) and fetches the rest again later."""
    one = build_batch(
        [RecordInput(bytes(8 << 20))], timestamp_ms=1000, compression=Compression.ZSTD
    )
    log = [batch(0, [b"plain"])] + [
        build_batch(
            [RecordInput(bytes(8 << 20))],
            timestamp_ms=1000,
            base_offset=i,
            compression=Compression.ZSTD,
        )
        for i in range(1, 6)
    ]
    assert len(one) < 1000
    t = ScriptedTransport(fetch_handler(log, hw=6))
    async with AsyncConsumer(
        A, transport=t, fetch_max_wait_ms=0, max_partition_fetch_decompressed_bytes=4 << 20
    ) as c:
        tp = TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, 0)
        sizes = []
        while len(sizes) < 6:
            for rs in (await c.poll(timeout_ms=2000, max_records=1)).values():
                sizes += [len(r.value or b"") for r in rs]
        assert sizes == [5] + [8 << 20] * 5
        fetches = [call for call in t.calls if call.path.endswith("/records")]
        # A response of five bombs is decoded one bomb at a time.
        assert [call.params["offset"] for call in fetches][:5] == ["0", "2", "3", "4", "5"]
        # And the answer itself is bounded: what was asked plus one batch.
        assert {call.body_max_bytes for call in fetches} == {(1 << 20) + (64 << 20)}


class GatedTransport(ScriptedTransport):
    """Produce requests wait for `gate`; everything else answers at once."""

    def __init__(self, handler) -> None:
        super().__init__(handler)
        self.gate = asyncio.Event()
        self.waiting = 0

    async def request(self, method, url, **kw):
        if url.endswith("/batches"):
            self.waiting += 1
            await self.gate.wait()
        return await super().request(method, url, **kw)


async def test_batches_queued_behind_a_stuck_one_expire_unsent():
    t = GatedTransport(cluster_handler([1], ack))
    settings = {**FAST, "delivery_timeout_ms": 300, "request_timeout_ms": 250, "batch_bytes": 200}
    async with AsyncProducer(A, transport=t, **settings) as p:
        first = await p.send("t", b"a" * 100, partition=0)
        while not t.waiting:  # the first batch is in flight, stuck
            await asyncio.sleep(0.001)
        second = await p.send("t", b"b" * 100, partition=0)
        with pytest.raises(DeliveryTimeoutError, match="never sent"):
            await second
        assert not first.done() and t.waiting == 1  # nothing overtook the stuck batch
        t.gate.set()
        assert (await first).offset == 0


async def test_send_blocks_then_raises_when_the_buffer_is_full():
    from lograft.client import BufferFullError

    t = GatedTransport(cluster_handler([1], ack))
    settings = {
        **FAST,
        "buffer_memory_bytes": 1000,
        "max_request_bytes": 1000,
        "batch_bytes": 500,
        "max_block_ms": 50,
    }
    async with AsyncProducer(A, transport=t, **settings) as p:
        futs = [await p.send("t", b"x" * 200, partition=0) for _ in range(3)]
        # A batch reserves batch_bytes when it opens: the first (sent at once,
        # held by the gate) kept what its record took (61 + 209 bytes), the
        # second reserved 500 and holds two records; a third batch has no room.
        assert p.pool.used == 270 + 500
        with pytest.raises(BufferFullError, match="buffer_memory_bytes=1000"):
            await p.send("t", b"x" * 200, partition=0)
        t.gate.set()  # acknowledgements free the memory
        await asyncio.gather(*futs)
        assert p.pool.used == 0
        await p.send_and_wait("t", b"x" * 200, partition=0)


async def test_a_send_waiting_for_room_makes_lingering_batches_go_out():
    t = ScriptedTransport(cluster_handler([1], ack))
    settings = {
        **FAST,
        "linger_ms": 60_000,
        "linger_strict": True,
        "buffer_memory_bytes": 1000,
        "max_request_bytes": 1000,
        "batch_bytes": 1000,
        "max_block_ms": 10_000,
    }
    async with AsyncProducer(A, transport=t, **settings) as p:
        # Four records of 157 bytes: one batch, not full (a fifth like them
        # would fit), lingering; it reserved batch_bytes (the whole pool).
        futs = [await p.send("t", b"x" * 150, partition=0) for _ in range(4)]
        for _ in range(50):  # let the sender settle into its 60 s linger wait
            await asyncio.sleep(0)
        assert not t.to("/batches") and p.pool.used == 1000
        # A record of 407 bytes does not fit (939 bytes of records at most) and
        # a new batch must wait for room; the waiting wakes the sender, which sends
        # the lingering batch, instead of sitting out the linger (and the send
        # failing with BufferFullError after max_block_ms).
        futs.append(await p.send("t", b"x" * 400, partition=0))
        assert len(t.to("/batches")) == 1 and [f.done() for f in futs] == [True] * 4 + [False]
        await p.flush()
        assert [f.result().offset for f in futs] == [0, 1, 2, 3, 0]


async def test_consumer_reads_a_partition_added_after_the_layout_was_cached():
    partitions = [1]  # the topic's leaders; grows to two partitions below

    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc({1: A}))
        if call.path == "/v1/topics/t":
            return json_response(call, topic_doc("t", partitions))
        if call.path.endswith("/offsets"):
            return json_response(call, {"earliest": 0, "latest": 1, "log_end_offset": 1})
        if call.path.endswith("/records"):
            data = batch(0, [call.path.encode()]) if call.params["offset"] == "0" else b""
            return HttpResponse(200, data, {"X-Lograft-Next-Offset": "1"}, call.url)
        raise AssertionError(call)

    t = ScriptedTransport(handler)
    async with AsyncConsumer(A, transport=t, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("t", 0)])
        assert await c.poll(timeout_ms=2000)  # caches a one-partition layout
        partitions.append(1)  # partition 1 is added
        c.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        got = await c.poll(timeout_ms=2000)
        # Before: UnknownTopicOrPartitionError from the cached count, no node asked.
        assert [r.value for r in got[TopicPartition("t", 1)]] == [
            b"/v1/topics/t/partitions/1/records"
        ]


async def test_abort_from_a_failed_records_callback_keeps_its_successors_unsent():
    """Kafka's close(0) from a callback: nothing queued behind a failed batch goes
    out, and sends after the abort are refused."""

    def on_batch(call: Call):
        return error_response(call, 400, "CORRUPT_MESSAGE", False)

    t = GatedTransport(cluster_handler([1], on_batch))
    async with AsyncProducer(A, transport=t, batch_records=1, **FAST) as p:
        first = await p.send("t", b"1")
        first.add_done_callback(lambda _f: p.abort_unsent())
        later = [await p.send("t", bytes([i])) for i in range(3)]  # queued behind it
        t.gate.set()
        with pytest.raises(CorruptRecordError):
            await first
        for fut in later:
            with pytest.raises(ClientClosedError) as info:
                await fut
            assert info.value.details["sent"] is False
        with pytest.raises(ClientClosedError):
            await p.send("t", b"after")
    assert len(t.to("/batches")) == 1


async def test_the_leader_lookup_asks_again_for_a_partition_past_the_cached_layout():
    """The producer and the consumer share one lookup: a partition added after
    the layout was cached is found by asking the nodes once more, not called
    missing; a partition without a leader is LEADER_NOT_AVAILABLE."""
    layouts = iter([[1], [1, -1, 2]])
    current: list[int] = []

    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc(BROKERS))
        current[:] = next(layouts, current)
        return json_response(call, topic_doc("t", current))

    t = ScriptedTransport(handler)
    md = ClusterMetadata(t, [A], request_timeout_ms=1000, metadata_max_age_ms=60_000)
    assert await md.find_leader_url(TopicPartition("t", 0)) == A
    assert await md.find_leader_url(TopicPartition("t", 2)) == B  # added since
    assert len(t.to("/v1/topics/t")) == 2
    with pytest.raises(LeaderNotAvailableError):
        await md.find_leader_url(TopicPartition("t", 1))
    with pytest.raises(UnknownTopicOrPartitionError):
        await md.find_leader_url(TopicPartition("t", 3))


def test_sync_sends_from_several_threads_land_once_each_in_send_order():
    """The sync Producer appends in its callers' threads (lock-free into open
    batches) while its loop drains them: every record is sent exactly once,
    each thread's records keep their order, and each future reports where its
    record landed."""
    import threading
    from collections import defaultdict

    from lograft.client import Producer
    from lograft.protocol.batch import iter_records

    logs: dict[int, list[bytes | None]] = defaultdict(list)

    def on_batch(call: Call):
        partition = int(call.path.split("/partitions/")[1].split("/")[0])
        base = len(logs[partition])
        logs[partition].extend(r.value for r in iter_records(call.data))
        return ack(call, base)

    t = ScriptedTransport(cluster_handler([1, 1, 1], on_batch))
    per_thread, threads_n = 3000, 4
    futures: list[list] = [[] for _ in range(threads_n)]
    with Producer(A, transport=t, batch_bytes=2000, **FAST) as p:

        def work(w: int) -> None:
            for i in range(per_thread):
                key = None if i % 3 else b"k%d" % (i % 7)  # the keyed path too
                futures[w].append((p.send("t", b"%d-%05d" % (w, i), key), i))

        threads = [threading.Thread(target=work, args=(w,)) for w in range(threads_n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        p.flush(30_000)
    everything = [v for log in logs.values() for v in log]
    assert len(everything) == len(set(everything)) == per_thread * threads_n
    for w, futs in enumerate(futures):
        seen: dict[int, int] = {}
        for fut, i in futs:
            meta = fut.get(0)
            assert logs[meta.partition][meta.offset] == b"%d-%05d" % (w, i)
            assert seen.get(meta.partition, -1) < meta.offset  # send order per partition
            seen[meta.partition] = meta.offset


def never_sent(call: Call):
    raise AssertionError(f"nothing may be sent: {call}")


COLUMNS = ["keys", "headers", "timestamps_ms"]


@pytest.mark.parametrize("column", COLUMNS)
async def test_async_send_many_refuses_a_column_of_another_length(column):
    t = ScriptedTransport(cluster_handler([1], never_sent))
    async with AsyncProducer(A, transport=t, **FAST) as p:
        with pytest.raises(SerializationError, match=f"{column} has 2 entries, values 3"):
            await p.send_many("t", [b"a", b"b", b"c"], **{column: [None, None]})


@pytest.mark.parametrize("column", COLUMNS)
def test_sync_send_many_refuses_a_column_of_another_length(column):
    t = ScriptedTransport(cluster_handler([1], never_sent))
    message = f"{column} has 2 entries, values 3"
    with Producer(A, transport=t, **FAST) as p, pytest.raises(SerializationError, match=message):
        p.send_many("t", [b"a", b"b", b"c"], **{column: [None, None]})
