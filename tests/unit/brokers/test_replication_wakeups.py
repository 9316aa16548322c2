"""What wakes whom on the acks=all path (issue 14, end-to-end latency): every
wait here is a long-poll of 60 s, so a step that waited for a timer instead
of being woken would fail the guard. Three replica managers in one loop."""

from __future__ import annotations

import asyncio

from lograft.brokers.replica_manager import BrokerSettings, ConsumerRead
from lograft.protocol.batch import iter_records
from lograft.protocol.produce_wire import Acks
from tests.unit.brokers.test_replica_manager import TP, Cluster, _batch

LONG_MS = 60_000
SLOW = BrokerSettings(
    replica_fetch_wait_max_ms=LONG_MS,
    replica_fetch_serve_wait_max_ms=LONG_MS,
    fetch_wait_max_ms=LONG_MS,
    produce_timeout_ms=LONG_MS,
    # The ISR check's rescan of fetch sessions marks a partition whose leader
    # moved on (a safety net): not within a test.
    isr_check_interval_ms=LONG_MS,
)
# Turns a step that sat out a 60 s long-poll into a failure, s.
GUARD_S = 30
# Loop turns a condition below may take to come true.
TURNS_MAX = 1_000


async def test_acks_all_is_answered_by_wake_ups_not_by_long_polls_running_out(tmp_path):
    """The followers' parked fetches wake on the append, each follower fetches
    again at once after applying, and the fetch that moves the HW answers
    the produce."""
    c = Cluster(tmp_path, SLOW)
    await c.start()
    try:
        leader = c.brokers[1]
        for tag in ("a", "b"):  # the second with every follower parked
            async with asyncio.timeout(GUARD_S):
                res = await leader.produce(TP, _batch(tag), Acks.ALL)
            assert leader.partitions[TP].high_watermark == res.last_offset + 1
    finally:
        await c.stop()


class HeldAnswers(Cluster):
    """Followers get their fetch answers only once `gate` is set."""

    def __init__(self, tmp_path, settings: BrokerSettings) -> None:
        super().__init__(tmp_path, settings)
        self.gate = asyncio.Event()
        self.gate.set()

    def _transport(self, me: int):
        send = super()._transport(me)

        async def held(leader: int, body: bytes, timeout: float) -> bytes:
            answer = await send(leader, body, timeout)
            await self.gate.wait()
            return answer

        return held


async def until(condition) -> None:
    for _ in range(TURNS_MAX):
        if condition():
            return
        await asyncio.sleep(0)  # one loop turn; the condition is what is awaited
    raise AssertionError("the condition did not come true")


async def test_a_parked_consumer_fetch_returns_when_the_high_watermark_moves(tmp_path):
    """The append wakes it below an unmoved HW (nothing to read: it parks
    again); the follower fetch that moves the HW must wake it with the
    records, not leave it to its 60 s."""
    c = HeldAnswers(tmp_path, SLOW)
    await c.start()
    try:
        leader = c.brokers[1]
        async with asyncio.timeout(GUARD_S):  # followers caught up and parked
            await leader.produce(TP, _batch("a"), Acks.ALL)
        hw = leader.partitions[TP].high_watermark
        c.gate.clear()
        fetches = [
            asyncio.create_task(leader.fetch(TP, hw, max_bytes=1 << 20, max_wait_ms=LONG_MS)),
            asyncio.create_task(
                leader.consumer_fetch(
                    [ConsumerRead(TP, hw, 1 << 20)], max_wait_ms=LONG_MS, max_bytes=1 << 20
                )
            ),
        ]
        parked = leader._changes._waiters
        await until(lambda: len(parked.get(TP, ())) == 2)
        produce = asyncio.create_task(leader.produce(TP, _batch("x"), Acks.ALL))
        # Appended, woken, nothing below the HW yet: both parked again.
        await until(lambda: leader.partitions[TP].log.log_end_offset == hw + 5)
        await until(lambda: len(parked.get(TP, ())) == 2)
        assert leader.partitions[TP].high_watermark == hw and not produce.done()
        c.gate.set()
        async with asyncio.timeout(GUARD_S):
            await produce
            single, (part,) = await fetches[0], await fetches[1]
        assert next(r.value for r in iter_records(single.data)) == b"x-0"
        assert next(r.value for r in iter_records(part.data)) == b"x-0"
    finally:
        c.gate.set()
        await c.stop()
