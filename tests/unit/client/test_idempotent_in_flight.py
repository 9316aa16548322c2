"""Two or more idempotent produce requests in flight per partition
(client/sequence_lanes.py): a batch that overtakes the one ahead of it is
refused by the leader's sequence check and sent again, retries are answered
as duplicates, and the log stays exact and in order.

The leader here is a model with the broker's own sequence rules
(`lograft.brokers.producer_state.ProducerStateManager`) behind a transport
that holds each produce request until the test lets it "arrive", so the
test decides the order in which requests reach the leader. No sockets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from lograft.brokers.producer_state import Duplicate, ProducerStateManager
from lograft.client import AsyncProducer
from lograft.client.errors import DeliveryTimeoutError, NetworkError
from lograft.client.transport import HttpResponse
from lograft.errors import LograftError
from lograft.protocol.batch import iter_batches, iter_records
from tests.unit.client.fakes import Call, ScriptedTransport, error_response, json_response
from tests.unit.client.test_adaptive_linger import TURNS_MAX, until
from tests.unit.client.test_scripted import A, cluster_handler

SETTINGS = {
    "linger_ms": 0,
    "retry_backoff_ms": 1,
    "retry_backoff_max_ms": 2,
    "max_in_flight_per_partition": 2,
}


@dataclass
class ModelLeader:
    """One partition's log with the broker's producer-state checks."""

    log: list[bytes] = field(default_factory=list)  # record values in offset order
    producers: ProducerStateManager = field(default_factory=ProducerStateManager)
    refusals: int = 0

    def produce(self, call: Call) -> HttpResponse:
        ((_pos, h),) = list(iter_batches(call.data))
        last_seq = h.base_sequence + h.last_offset_delta
        try:
            verdict = self.producers.validate(
                h.producer_id, h.producer_epoch, h.base_sequence, last_seq
            )
        except LograftError as exc:
            self.refusals += 1
            return error_response(call, 409, exc.code, exc.retriable)
        if isinstance(verdict, Duplicate):
            first, last = verdict.first_offset, verdict.last_offset
        else:
            first = len(self.log)
            self.log.extend(r.value for r in iter_records(call.data))
            last = len(self.log) - 1
            self.producers.record(
                h.producer_id, h.producer_epoch, h.base_sequence, last_seq, first, last, 0
            )
        body = {"partition": 0, "base_offset": first, "last_offset": last,
                "log_append_time": -1, "duplicate": isinstance(verdict, Duplicate)}  # fmt: skip
        return json_response(call, body)


@dataclass
class Held:
    call: Call
    arrive: asyncio.Future[str]  # "deliver" or "lose-answer"

    @property
    def value(self) -> bytes:
        return next(iter(iter_records(self.call.data))).value


class HoldingTransport(ScriptedTransport):
    """Produce requests wait until the test releases them; a released one
    reaches the model leader then (`deliver`), or reaches it and its answer
    is lost on the way back (`lose_answer`: a NetworkError after sending).
    `release_all` (each test's teardown) lets every request through, so a
    failed assertion ends the test instead of leaving the producer's close
    waiting for held requests."""

    def __init__(self, leader: ModelLeader) -> None:
        super().__init__(cluster_handler([1], leader.produce))
        self.leader = leader
        self.held: list[Held] = []
        self.open = False

    async def request(self, method: str, url: str, **kw) -> HttpResponse:  # type: ignore[override]
        if self.open or not url.endswith("/batches"):
            return await super().request(method, url, **kw)
        held = Held(Call(method, url, kw.get("params"), kw.get("data"), kw.get("headers")),
                    asyncio.get_running_loop().create_future())  # fmt: skip
        self.held.append(held)
        how = await held.arrive
        answer = await super().request(method, url, **kw)
        if how == "lose-answer":
            raise NetworkError("answer lost (scripted)", sent=True)
        return answer

    async def waiting(self, n: int) -> list[Held]:
        await until(lambda: len(self.pending()) >= n)
        return self.pending()

    def pending(self) -> list[Held]:
        return [h for h in self.held if not h.arrive.done()]

    def release_all(self) -> None:
        self.open = True
        for h in self.pending():
            h.arrive.set_result("deliver")


@contextlib.asynccontextmanager
async def producer(t: HoldingTransport) -> AsyncIterator[AsyncProducer]:
    async with AsyncProducer(A, transport=t, **SETTINGS) as p:
        try:
            yield p
        finally:
            t.release_all()


async def known_producer(p: AsyncProducer, t: HoldingTransport) -> None:
    """One acknowledged batch: the leader knows the producer id, so batches
    behind it may overlap."""
    fut = await p.send("t", b"first")
    (h,) = await t.waiting(1)
    h.arrive.set_result("deliver")
    await fut


async def test_a_batch_that_overtakes_is_refused_then_sent_again_in_order():
    leader = ModelLeader()
    t = HoldingTransport(leader)
    async with producer(t) as p:
        await known_producer(p, t)
        done_order: list[bytes] = []
        fa = await p.send("t", b"a")
        await t.waiting(1)
        fb = await p.send("t", b"b")
        ha, hb = await t.waiting(2)  # both in flight at once
        assert (ha.value, hb.value) == (b"a", b"b")
        fa.add_done_callback(lambda _f: done_order.append(b"a"))
        fb.add_done_callback(lambda _f: done_order.append(b"b"))
        hb.arrive.set_result("deliver")  # b reaches the leader first: refused
        await until(lambda: leader.refusals == 1)
        ha.arrive.set_result("deliver")
        (hb2,) = await t.waiting(1)  # b again, once a is done
        assert hb2.value == b"b" and hb2.call.data == hb.call.data  # the same bytes
        hb2.arrive.set_result("deliver")
        ma, mb = await fa, await fb
    assert leader.log == [b"first", b"a", b"b"]
    assert (ma.offset, mb.offset) == (1, 2)
    assert done_order == [b"a", b"b"]


async def test_a_lost_answer_is_retried_as_a_duplicate_behind_the_next_batch():
    leader = ModelLeader()
    t = HoldingTransport(leader)
    async with producer(t) as p:
        await known_producer(p, t)
        fa = await p.send("t", b"a")
        await t.waiting(1)
        fb = await p.send("t", b"b")
        ha, hb = await t.waiting(2)
        done_order: list[bytes] = []
        fa.add_done_callback(lambda _f: done_order.append(b"a"))
        fb.add_done_callback(lambda _f: done_order.append(b"b"))
        ha.arrive.set_result("lose-answer")  # appended, the client cannot tell
        hb.arrive.set_result("deliver")  # in sequence: appended
        (ha2,) = await t.waiting(1)
        assert ha2.call.data == ha.call.data
        ha2.arrive.set_result("deliver")  # a duplicate: the original offsets
        ma, mb = await fa, await fb
        assert p._sender.stats.duplicates == 1
    assert leader.log == [b"first", b"a", b"b"]
    assert (ma.offset, mb.offset) == (1, 2)
    assert done_order == [b"a", b"b"]  # b's answer came first; its records wait for a


async def test_a_new_producer_id_sends_one_batch_at_a_time_until_acknowledged():
    # The leader takes any sequence from a producer id it does not know, so a
    # second batch that overtook the first would be appended before it.
    leader = ModelLeader()
    t = HoldingTransport(leader)
    async with producer(t) as p:
        fa = await p.send("t", b"a")
        fb = await p.send("t", b"b")
        fc = await p.send("t", b"c")
        (ha,) = await t.waiting(1)
        for _ in range(50):
            await asyncio.sleep(0)  # turns in which a wrong second request would start
        assert len(t.pending()) == 1
        ha.arrive.set_result("deliver")
        await fa
        assert len(await t.waiting(2)) == 2  # b and c overlap now
        for _ in range(TURNS_MAX):
            if fb.done() and fc.done():
                break
            for h in t.pending():
                h.arrive.set_result("deliver")
            await asyncio.sleep(0)  # one loop turn; the futures are what is awaited
        await fb, await fc
    assert leader.log == [b"a", b"b", b"c"]


async def test_when_the_batch_ahead_fails_the_one_behind_fails_and_nothing_is_reordered():
    leader = ModelLeader()
    t = HoldingTransport(leader)
    refused = {"on": False}
    produce = leader.produce

    def refusing(call: Call) -> HttpResponse:
        if refused["on"]:
            refused["on"] = False
            return error_response(call, 400, "CORRUPT_MESSAGE", False)
        return produce(call)

    leader.produce = refusing  # type: ignore[method-assign]
    t.handler = cluster_handler([1], refusing)
    async with producer(t) as p:
        await known_producer(p, t)
        fa = await p.send("t", b"a")
        await t.waiting(1)
        fb = await p.send("t", b"b")
        ha, hb = await t.waiting(2)
        hb.arrive.set_result("deliver")  # early: refused, waits for a
        await until(lambda: leader.refusals == 1)
        refused["on"] = True
        ha.arrive.set_result("deliver")  # a is refused for good
        (hb2,) = await t.waiting(1)
        hb2.arrive.set_result("deliver")  # b is still out of order: fails too
        ea = await asyncio.gather(fa, return_exceptions=True)
        eb = await asyncio.gather(fb, return_exceptions=True)
    assert isinstance(ea[0], LograftError) and ea[0].code == "CORRUPT_MESSAGE"
    assert isinstance(eb[0], LograftError) and eb[0].code == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert leader.log == [b"first"]


async def test_a_batch_waiting_for_the_ones_ahead_expires_at_its_delivery_timeout():
    leader = ModelLeader()
    t = HoldingTransport(leader)
    settings = {**SETTINGS, "delivery_timeout_ms": 300, "request_timeout_ms": 250}
    async with AsyncProducer(A, transport=t, **settings) as p:
        try:
            await p.send("t", b"a")  # a new producer id's first batch: held, stuck
            await t.waiting(1)
            fb = await p.send("t", b"b")  # may not overlap it: waits, then expires
            (eb,) = await asyncio.gather(fb, return_exceptions=True)
            assert isinstance(eb, DeliveryTimeoutError)
            assert len(t.held) == 1  # b never went out
        finally:
            t.release_all()
