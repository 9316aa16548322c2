"""What wakes whom on the acks=all path (issue 14, end-to-end latency): every
wait here is a long-poll of 60 s, so a step that waited for a timer instead
of being woken would fail the guard. Three replica managers in one loop."""

from __future__ import annotations

import asyncio
import dataclasses

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
    """The append leaves the HW where it was, so it does not wake the parked
    consumer fetches (they could read nothing); the follower fetch that
    moves the HW must wake them with the records, not leave them to their
    60 s."""
    c = HeldAnswers(tmp_path, SLOW)
    await c.start()
    try:
        leader = c.brokers[1]
        async with asyncio.timeout(GUARD_S):  # followers caught up and parked
            await leader.produce(TP, _batch("a"), Acks.ALL)
        hw = leader.partitions[TP].high_watermark
        c.gate.clear()
        reads = Reads(leader.partitions[TP])
        fetches = [
            asyncio.create_task(leader.fetch(TP, hw, max_bytes=1 << 20, max_wait_ms=LONG_MS)),
            asyncio.create_task(
                leader.consumer_fetch(
                    [ConsumerRead(TP, hw, 1 << 20)], max_wait_ms=LONG_MS, max_bytes=1 << 20
                )
            ),
        ]
        parked = leader._changes._readers
        await until(lambda: len(parked.get(TP, ())) == 2)
        waiting = set(parked[TP])
        assert reads.count == 2  # each read once on arrival
        produce = asyncio.create_task(leader.produce(TP, _batch("x"), Acks.ALL))
        # Appended below an unmoved HW: both still parked on the same
        # wait, neither woken to read again.
        await until(lambda: leader.partitions[TP].log.log_end_offset == hw + 5)
        for _ in range(20):
            await asyncio.sleep(0)  # turns in which a wrongly woken fetch would read
        assert leader.partitions[TP].high_watermark == hw and not produce.done()
        assert set(parked.get(TP, ())) == waiting
        assert not any(f.done() for f in waiting)
        assert reads.count == 2
        c.gate.set()
        async with asyncio.timeout(GUARD_S):
            await produce
            single, (part,) = await fetches[0], await fetches[1]
        assert next(r.value for r in iter_records(single.data)) == b"x-0"
        assert next(r.value for r in iter_records(part.data)) == b"x-0"
    finally:
        c.gate.set()
        await c.stop()


async def test_an_append_that_moves_the_high_watermark_wakes_parked_consumer_fetches(tmp_path):
    """With the leader alone in the ISR (min ISR 1) the append itself moves
    the HW: it must wake the parked consumer fetch."""
    c = Cluster(tmp_path, SLOW)
    await c.start()
    try:
        leader = c.brokers[1]
        async with asyncio.timeout(GUARD_S):
            await leader.produce(TP, _batch("a"), Acks.ALL)
        part = leader.partitions[TP]
        hw = part.high_watermark
        fetch = asyncio.create_task(leader.fetch(TP, hw, max_bytes=1 << 20, max_wait_ms=LONG_MS))
        await until(lambda: len(leader._changes._readers.get(TP, ())) == 1)
        # As if the followers had left the ISR: the next append moves the HW.
        part.isr = (leader.broker_id,)
        part.settings = dataclasses.replace(part.settings, min_insync_replicas=1)
        async with asyncio.timeout(GUARD_S):
            await leader.produce(TP, _batch("y"), Acks.LEADER)
            got = await fetch
        assert part.high_watermark == hw + 5
        assert next(r.value for r in iter_records(got.data)) == b"y-0"
    finally:
        await c.stop()


class Reads:
    """Counts the consumer reads of one partition."""

    def __init__(self, part) -> None:
        self.count = 0
        read = part.read_for_consumer

        def counted(offset: int, max_bytes: int) -> bytes:
            self.count += 1
            return read(offset, max_bytes)

        part.read_for_consumer = counted
