"""max_poll_interval_ms against the scripted coordinator of
test_group_scripted.py, with an injected clock (no real waiting for the
interval): a member whose application stops polling leaves without
committing, stays out, and the next poll rejoins with on_lost; waiting for
records inside poll does not count."""

from __future__ import annotations

import asyncio
import logging
import threading

import orjson
import pytest

from lograft.client import AsyncConsumer, Consumer, TopicPartition
from lograft.client.config import ConsumerConfig
from lograft.client.poll_timer import PollTimer
from lograft.client.transport import HttpResponse
from lograft.errors import InvalidConfigError
from tests.raft_support import eventually, eventually_async
from tests.unit.client.fakes import Call, ScriptedTransport, json_response
from tests.unit.client.test_group_scripted import (
    FAST,
    T0,
    T1,
    WAIT_S,
    A,
    FakeCoordinator,
    poll_until,
)

# A member that never stops heartbeating against the synchronous scripted
# transport never yields to the loop: a broken build hangs rather than fails.
pytestmark = pytest.mark.timeout(60)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_max_poll_interval_ms_is_checked():
    assert ConsumerConfig().max_poll_interval_ms == 300_000  # Kafka's default
    for bad in (0, -5, 1.5, True, None):
        with pytest.raises(InvalidConfigError, match="max_poll_interval_ms: Expected `int`"):
            ConsumerConfig(group_id="g", max_poll_interval_ms=bad)


def test_poll_timer_counts_from_the_last_poll_but_not_while_poll_waits():
    clock = FakeClock()
    timer = PollTimer(1_000, clock)
    clock.now += 0.999
    assert not timer.overdue() and timer.check_in_s() == pytest.approx(0.001)
    clock.now += 0.001
    assert timer.overdue() and timer.check_in_s() == 0.0
    timer.polled()
    assert not timer.overdue()
    with timer.waiting():
        clock.now += 60
        assert not timer.overdue() and timer.poll_waiting
        assert timer.check_in_s() == 1.0  # look again within one interval
    assert timer.since_poll_ms() == 0  # counted again from the end of the wait
    clock.now += 1.0
    assert timer.overdue() and timer.since_poll_ms() == 1_000


def new_consumer(fake: FakeCoordinator, clock: FakeClock) -> AsyncConsumer:
    """A group consumer on `fake` (not started) whose 1 s poll interval runs on `clock`."""
    return AsyncConsumer(
        A,
        group_id="g",
        transport=ScriptedTransport(fake),
        clock=clock,
        max_poll_interval_ms=1_000,
        **FAST,
    )


async def test_a_member_that_stops_polling_leaves_without_committing_and_rejoins_at_poll(caplog):
    fake = FakeCoordinator({T0, T1})
    clock = FakeClock()
    lost: list[list[TopicPartition]] = []
    revoked: list[list[TopicPartition]] = []
    consumer = new_consumer(fake, clock)
    await consumer.start()
    consumer.subscribe(["t"], on_lost=lost.append, on_revoke=revoked.append)
    await poll_until(consumer, lambda: consumer.assignment() == {T0, T1}, "both assigned")
    consumer.seek(T0, 5)  # a consumed position auto-commit would commit on a revocation
    group = consumer.group
    assert group is not None and group.membership is not None

    with caplog.at_level(logging.WARNING, logger="lograft.client.membership"):
        clock.now += 1.0  # the application "processes" for max_poll_interval_ms
        await eventually_async(lambda: "leave" in fake.kinds(), WAIT_S, "the leave")
    left_at = fake.kinds().index("leave")
    assert "join" not in fake.kinds()[left_at:]  # stays out until the application polls
    assert consumer.assignment() == set()  # nothing fetched or returned after leaving
    assert group.membership.left_for_poll and group.membership.poll_timeouts == 1
    assert "commit" not in fake.kinds() and fake.committed == {}
    assert lost == [] and revoked == []  # callbacks run in poll, not in the background
    assert (
        "poll() not called for 1000 ms, more than max_poll_interval_ms=1000: leaving group g "
        "so its partitions can be consumed by others; process fewer records per poll "
        "(max_poll_records) or raise max_poll_interval_ms"
    ) in caplog.text

    await poll_until(consumer, lambda: consumer.assignment() == {T0, T1}, "assigned again")
    assert lost == [[T0, T1]] and revoked == []
    after = fake.log[left_at + 1 :]
    # Out of the group until the poll: the next group request is the rejoin,
    # with the same member id, not a heartbeat of the old membership.
    first_group_request = next(k for k, _b in after if k != "lookup")
    assert first_group_request == "join"
    assert next(b for k, b in after if k == "join")["member_id"] == "m1"
    assert "commit" not in fake.kinds()
    await consumer.close()


async def test_waiting_for_records_inside_poll_is_not_time_without_a_poll():
    fake = FakeCoordinator({T0})
    clock = FakeClock()
    consumer = new_consumer(fake, clock)
    await consumer.start()
    consumer.subscribe(["t"])
    await poll_until(consumer, lambda: consumer.assignment() == {T0}, "assigned")
    long_poll = asyncio.ensure_future(consumer.poll(timeout_ms=60_000))  # no records come
    group = consumer.group
    assert group is not None

    await eventually_async(lambda: group.poll_timer.poll_waiting, WAIT_S, "wait")
    clock.now += 30.0  # far past the limit, all of it waiting inside poll
    beats = fake.kinds().count("heartbeat")
    # Heartbeats (every 10 ms) after the jump each checked the timer: none left.
    await eventually_async(
        lambda: fake.kinds().count("heartbeat") >= beats + 3, WAIT_S, "heartbeats"
    )
    assert "leave" not in fake.kinds() and consumer.assignment() == {T0}
    long_poll.cancel()
    await asyncio.gather(long_poll, return_exceptions=True)
    await consumer.close()


async def test_the_leave_is_not_late_by_a_heartbeat_interval():
    # The coordinator asks for a heartbeat a minute apart; with a real clock
    # the member must still leave about max_poll_interval_ms after its poll.
    fake = FakeCoordinator({T0})

    def handler(call: Call) -> HttpResponse:
        resp = fake(call)
        if call.path.endswith("/members") or call.path.endswith("/heartbeat"):
            doc = orjson.loads(resp.body)
            doc["heartbeat_interval_ms"] = 60_000
            doc["session_timeout_ms"] = 180_000
            return json_response(call, doc)
        return resp

    consumer = AsyncConsumer(
        A, group_id="g", transport=ScriptedTransport(handler), max_poll_interval_ms=300, **FAST
    )
    await consumer.start()
    consumer.subscribe(["t"])
    await poll_until(consumer, lambda: consumer.assignment() == {T0}, "assigned")
    await eventually_async(lambda: "leave" in fake.kinds(), WAIT_S, "the leave")
    await consumer.close()


def test_the_sync_consumer_leaves_too_and_calls_on_lost_in_the_polling_thread():
    fake = FakeCoordinator({T0})
    clock = FakeClock()
    lost: list[tuple[list[TopicPartition], str]] = []
    consumer = Consumer(
        A,
        group_id="g",
        transport=ScriptedTransport(fake),
        clock=clock,
        max_poll_interval_ms=1_000,
        **FAST,
    )
    try:
        consumer.subscribe(
            ["t"], on_lost=lambda tps: lost.append((tps, threading.current_thread().name))
        )
        eventually(
            lambda: consumer.poll(timeout_ms=10) is not None and consumer.assignment(),
            WAIT_S,
            "assigned",
        )
        clock.now += 1.0
        eventually(lambda: "leave" in fake.kinds(), WAIT_S, "the leave")
        assert consumer.assignment() == set() and not lost
        eventually(
            lambda: consumer.poll(timeout_ms=10) is not None and consumer.assignment() == {T0},
            WAIT_S,
            "assigned again",
        )
        assert lost == [([T0], threading.current_thread().name)]
        assert "commit" not in fake.kinds()
    finally:
        consumer.close()
