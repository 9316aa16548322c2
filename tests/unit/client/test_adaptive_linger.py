"""The producer's adaptive linger (sender.py): a batch lingers only while a
produce request to its leader is in flight; `linger_strict` restores Kafka's
rule. Against a scripted transport whose produce answers wait for a gate."""

from __future__ import annotations

import asyncio

from lograft.client import AsyncProducer
from lograft.client.transport import HttpResponse
from lograft.protocol.batch import iter_batches
from tests.unit.client.fakes import Call, ScriptedTransport
from tests.unit.client.test_scripted import A, ack, cluster_handler

LONG = {"linger_ms": 60_000, "retry_backoff_ms": 1, "retry_backoff_max_ms": 2}
# Loop turns a condition below may take to come true (it takes a few).
TURNS_MAX = 1_000
# A bound that turns a batch wrongly lingering its 60 s into a failure, s.
GUARD_S = 30


class GatedTransport(ScriptedTransport):
    """Produce requests are answered only once `gate` is set."""

    def __init__(self) -> None:
        super().__init__(cluster_handler([1, 1], ack))
        self.gate = asyncio.Event()

    async def request(self, method: str, url: str, **kw) -> HttpResponse:  # type: ignore[override]
        answer = await super().request(method, url, **kw)
        if url.endswith("/batches"):
            await self.gate.wait()
        return answer


def records_per_request(t: ScriptedTransport) -> list[tuple[str, int]]:
    out = []
    for c in t.to("/batches"):
        ((_pos, h),) = list(iter_batches(c.data))
        out.append((c.path.split("/")[5], h.records_count))
    return out


async def until(condition) -> None:
    for _ in range(TURNS_MAX):
        if condition():
            return
        await asyncio.sleep(0)  # one loop turn; the condition is what is awaited
    raise AssertionError("the condition did not come true")


async def sender_decided(p: AsyncProducer) -> None:
    """Until the sender ran the pass a send woke it for: it clears its wake-up
    at the top of a pass and decides every partition before it waits again."""
    sender = p._sender
    assert sender is not None
    await until(lambda: not sender._wake.is_set())


async def test_a_batch_goes_at_once_with_nothing_in_flight_and_lingers_behind_a_request():
    t = GatedTransport()
    async with AsyncProducer(A, transport=t, **LONG) as p:
        try:
            f0 = await p.send("t", b"0", partition=0)
            # Nothing in flight: on the wire at once, not after 60 s of linger.
            await until(lambda: len(t.to("/batches")) == 1)
            f1 = await p.send("t", b"1", partition=1)  # same leader, one request out
            await sender_decided(p)
            assert len(t.to("/batches")) == 1  # partition 1's batch lingers
            f2 = await p.send("t", b"2", partition=1)
        finally:
            t.gate.set()  # also when failing: close() then sends and is answered
        # Answered: the lingering batch goes at once, not at its linger_ms.
        async with asyncio.timeout(GUARD_S):
            metas = await asyncio.gather(f0, f1, f2)
    assert records_per_request(t) == [("0", 1), ("1", 2)]
    assert [m.offset for m in metas] == [0, 0, 1]


async def test_strict_linger_waits_for_linger_ms_with_nothing_in_flight():
    t = GatedTransport()
    t.gate.set()
    async with AsyncProducer(A, transport=t, linger_strict=True, **LONG) as p:
        f0 = await p.send("t", b"0", partition=0)
        await sender_decided(p)
        assert not t.to("/batches") and not f0.done()  # lingering
        f1 = await p.send("t", b"1", partition=0)
        await p.flush()
        await asyncio.gather(f0, f1)
    assert records_per_request(t) == [("0", 2)]


async def test_a_failed_request_leaves_no_count_behind():
    """Requests on the wire are counted per leader; a failed one and its
    retry are uncounted again (else its leader's batches would linger on)."""
    answers = iter(["fail", "ok", "ok"])

    def on_batch(call: Call) -> HttpResponse:
        if next(answers) == "fail":
            from tests.unit.client.fakes import error_response

            return error_response(call, 503, "LEADER_NOT_AVAILABLE", True)
        return ack(call)

    t = ScriptedTransport(cluster_handler([1, 1], on_batch))
    async with AsyncProducer(A, transport=t, **LONG) as p:
        f0 = await p.send("t", b"0", partition=0)
        await until(lambda: len(t.to("/batches")) >= 1)
        f1 = await p.send("t", b"1", partition=1)
        async with asyncio.timeout(GUARD_S):
            await asyncio.gather(f0, f1)
        assert p._sender is not None and not p._sender.to_leader
