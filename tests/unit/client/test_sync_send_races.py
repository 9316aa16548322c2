"""The sync Producer's caller-thread appends against a scripted broker: many
threads sending into the same partitions while the loop drains and seals
batches. Every record is acknowledged exactly once at the offset its future
names, each thread's records keep their order per partition, and the
idempotent sequences of each partition are contiguous. No sockets."""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lograft.client import Producer, accumulator
from lograft.client.errors import ClientClosedError, SerializationError
from lograft.protocol.batch import iter_batch_records, iter_batches
from lograft.protocol.open_batch import OpenBatchPython
from tests.unit.client.fakes import Call, ScriptedTransport, error_response, json_response
from tests.unit.client.test_scripted import A, cluster_handler

PARTITIONS = 3


class FakeLog:
    """Partition logs that check each producer's sequences are contiguous
    (a gap or a repeat fails the test) and answer with base offsets."""

    def __init__(self) -> None:
        self.records: dict[int, list[bytes | None]] = {}
        self.next_seq: dict[tuple[int, int], int] = {}
        self.errors: list[str] = []

    def on_batch(self, call: Call):
        p = int(call.path.split("/")[-2])
        assert call.data is not None
        ((pos, h),) = list(iter_batches(call.data))
        log = self.records.setdefault(p, [])
        if h.producer_id >= 0:
            want = self.next_seq.get((h.producer_id, p), 0)
            if h.base_sequence != want:
                self.errors.append(f"partition {p}: sequence {h.base_sequence}, expected {want}")
            self.next_seq[(h.producer_id, p)] = h.base_sequence + h.records_count
        base = len(log)
        log.extend(r.value for r in iter_batch_records(call.data, pos, h))
        body = {
            "partition": p,
            "base_offset": base,
            "last_offset": base + h.last_offset_delta,
            "log_append_time": -1,
            "duplicate": False,
        }
        return json_response(call, body)


@contextmanager
def fine_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so appends and
    drains interleave at every point they can."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_many_threads_into_the_same_partitions_every_record_once_in_order():
    log = FakeLog()
    t = ScriptedTransport(cluster_handler([1] * PARTITIONS, log.on_batch))
    threads_n, per_thread = 6, 1500
    futures: dict[int, list] = {}
    with Producer(A, transport=t, batch_bytes=512, linger_ms=0, retry_backoff_ms=1) as prod:
        assert prod._raw is prod._acc.lock_free_appends

        def run(tid: int) -> None:
            out = futures[tid] = []
            for n in range(per_thread):
                value = f"{tid}:{n}".encode()
                if n % 3 == 0:
                    out.append((value, prod.send("t", value)))  # keyless: sticky batches
                else:
                    out.append((value, prod.send("t", value, key=b"k%d" % (n % 7))))

        with fine_switching():
            workers = [threading.Thread(target=run, args=(i,)) for i in range(threads_n)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        prod.flush()
        assert log.errors == []
        seen: set[tuple[int, int]] = set()
        for tid, sent in futures.items():
            last: dict[int, int] = {}
            for value, fut in sent:
                meta = fut.get(timeout=30)
                assert log.records[meta.partition][meta.offset] == value
                assert (meta.partition, meta.offset) not in seen
                seen.add((meta.partition, meta.offset))
                assert meta.offset > last.get(meta.partition, -1), f"thread {tid} reordered"
                last[meta.partition] = meta.offset
    total = sum(len(r) for r in log.records.values())
    assert total == len(seen) == threads_n * per_thread
    assert prod._async.pool.used == 0


def test_an_append_refused_by_a_closed_open_batch_goes_to_the_next_batch():
    """The lock-free path racing a drain: the C batch is closed between the
    lookup and the append; the record must go to a new batch, not be lost."""
    log = FakeLog()
    t = ScriptedTransport(cluster_handler([1], log.on_batch))
    with Producer(A, transport=t, linger_ms=60_000, linger_strict=True) as prod:
        first = prod.send("t", b"a")
        batch = prod._open[("t", 0)]
        batch.records.close()  # what drain does, between lookup and append
        second = prod.send("t", b"b")
        keyed = prod.send("t", b"c", key=b"k")
        assert prod._open[("t", 0)] is not batch
        prod.flush()
        metas = [f.get(timeout=30) for f in (first, second, keyed)]
    assert [m.offset for m in metas] == [0, 1, 2]
    assert log.records[0] == [b"a", b"b", b"c"]
    assert prod._async.pool.used == 0


def test_send_after_close_raises_on_the_lock_free_path_too():
    log = FakeLog()
    t = ScriptedTransport(cluster_handler([1], log.on_batch))
    prod = Producer(A, transport=t, linger_ms=0)
    prod.send("t", b"a").get(timeout=30)
    prod.close()
    with pytest.raises(ClientClosedError):
        prod.send("t", b"b")
    with pytest.raises(ClientClosedError):
        prod.send("t", b"b", key=b"k")


def test_a_send_between_send_many_runs_does_not_shift_their_offsets(monkeypatch):
    """A lock-free send can enter the sticky batch between send_many's
    lookup of the batch and its C call: the run's records must still resolve
    to their own offsets."""
    log = FakeLog()
    t = ScriptedTransport(cluster_handler([1], log.on_batch))
    with Producer(A, transport=t, linger_ms=60_000, linger_strict=True) as prod:
        first = prod.send("t", b"first")
        many_calls = accumulator._many

        def with_intruder(records, values, timestamps, start):
            intruder.append(prod.send("t", b"intruder"))  # the lock-free path
            return many_calls(records, values, timestamps, start)

        intruder: list = []
        monkeypatch.setattr(accumulator, "_many", with_intruder)
        many = prod.send_many("t", [b"m0", b"m1"])
        monkeypatch.setattr(accumulator, "_many", many_calls)
        prod.flush()
        metas = many.result(timeout=30)
        assert [log.records[0][m.offset] for m in metas] == [b"m0", b"m1"]
        assert log.records[0][intruder[0].get(timeout=30).offset] == b"intruder"
        assert first.get(timeout=30).offset == 0


@pytest.mark.parametrize("value", [123, "text", object()])
def test_send_many_of_a_value_not_bytes_like_raises_and_gives_its_memory_back(value):
    """The batch opened for the bad record is dropped: its reservation must
    go back to the pool (an int must not be taken as a size to allocate)."""
    log = FakeLog()
    t = ScriptedTransport(cluster_handler([1], log.on_batch))
    with Producer(A, transport=t, linger_ms=0) as prod:
        prod.send("t", b"a").get(timeout=30)
        with pytest.raises(SerializationError):
            prod.send_many("t", [value])
        prod.flush()
        assert prod._async.pool.used == 0
        assert prod.send_many("t", [b"b"]).result(timeout=30)[0].offset == 1


def test_without_the_c_open_batch_concurrent_sends_take_the_lock(monkeypatch):
    """The pure-Python OpenBatch's append is not atomic: with it, no send may
    take the lock-free path, and the concurrent run still delivers every
    record once, in order."""
    monkeypatch.setattr(accumulator, "OpenBatch", OpenBatchPython)
    locked = []
    append = accumulator.RecordAccumulator.append

    def counted(self, *args, **kwargs):
        locked.append(1)
        return append(self, *args, **kwargs)

    monkeypatch.setattr(accumulator.RecordAccumulator, "append", counted)
    test_many_threads_into_the_same_partitions_every_record_once_in_order()
    assert len(locked) == 6 * 1500  # every record went through the lock


def test_sends_racing_close_are_either_refused_or_delivered():
    """Threads keep sending while another closes the producer: each send
    either raises ClientClosedError or returns a future that close() has
    resolved, and every acknowledged record is in the log at its offset."""
    log = FakeLog()
    t = ScriptedTransport(cluster_handler([1] * PARTITIONS, log.on_batch))
    prod = Producer(A, transport=t, batch_bytes=256, linger_ms=0)
    started = threading.Barrier(4)
    sent: dict[int, list] = {}

    def run(tid: int) -> None:
        out = sent[tid] = []
        started.wait()
        n = 0
        while True:
            value = f"{tid}:{n}".encode()
            try:
                fut = prod.send("t", value, key=None if n % 2 else b"k%d" % (n % 5))
            except ClientClosedError:
                return
            out.append((value, fut))
            n += 1

    with fine_switching():
        workers = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for w in workers:
            w.start()
        started.wait()
        while sum(len(s) for s in sent.values()) < 3000 and all(w.is_alive() for w in workers):
            prod.flush()  # let the senders run ahead; flush is not a timer
        prod.close()
        for w in workers:
            w.join()
    for out in sent.values():
        for value, fut in out:
            assert fut.done(), "close() returned with a record neither sent nor failed"
            meta = fut.get(timeout=0)
            assert log.records[meta.partition][meta.offset] == value
    assert prod._async.pool.used == 0


def test_concurrent_sends_with_retried_batches_keep_sequences_and_order():
    """Every 7th produce request fails retriably (not appended): the retried
    batches keep their sequences (contiguous per partition at the log) and
    each thread's records their order, while other threads keep appending."""
    log = FakeLog()
    calls = itertools.count()

    def flaky(call: Call):
        if next(calls) % 7 == 3:
            return error_response(call, 503, "LEADER_NOT_AVAILABLE", True)
        return log.on_batch(call)

    t = ScriptedTransport(cluster_handler([1] * PARTITIONS, flaky))
    sent: dict[int, list] = {}
    settings = {
        "batch_bytes": 512,
        "linger_ms": 0,
        "retry_backoff_ms": 1,
        "retry_backoff_max_ms": 2,
    }
    with Producer(A, transport=t, **settings) as prod:

        def run(tid: int) -> None:
            out = sent[tid] = []
            for n in range(800):
                value = f"{tid}:{n}".encode()
                out.append((value, prod.send("t", value, key=b"k%d" % (n % 5))))

        with fine_switching():
            workers = [threading.Thread(target=run, args=(i,)) for i in range(4)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        prod.flush()
        assert prod.stats.retries > 0
        assert log.errors == []
        for out in sent.values():
            last: dict[int, int] = {}
            for value, fut in out:
                meta = fut.get(timeout=30)
                assert log.records[meta.partition][meta.offset] == value
                assert meta.offset > last.get(meta.partition, -1)
                last[meta.partition] = meta.offset
    assert sum(len(r) for r in log.records.values()) == 4 * 800
