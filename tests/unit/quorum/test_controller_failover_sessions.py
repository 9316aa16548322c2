"""A new active controller fences a broker that died with the former
controller as soon as its real session has lapsed, and no live broker.

Before, every broker got a fresh session at the takeover, so a broker killed
together with the Raft leader (one process in combined mode) kept its
partitions for an election timeout plus a whole session (7.5 s measured from
the kill to a produce acknowledged again)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lograft.quorum import controller as c
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.sessions import sessions_after_failover

from .controller_fakes import Clock, InstantRaft, store_of
from .metadata_cluster import cluster_of

CONFIG = c.ControllerConfig()
SESSION = CONFIG.broker_session_timeout_ms
OVERDUE = CONFIG.refused_overdue_ms
# The Raft election that follows the former leader's last message (the default minimum).
ELECTION_MS = 2000
KILLED_AT = 10_000


def _setup() -> tuple[ControllerRuntime, InstantRaft, Clock, str]:
    # Brokers 0-2 (broker 0 on the Raft leader's node), a topic led by each.
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 6, 3)
    store = store_of(cluster)
    raft = InstantRaft(store, leader_id="0")
    clock = Clock(KILLED_AT)
    rt = ControllerRuntime(raft, store, CONFIG, clock=clock)  # type: ignore[arg-type]
    return rt, raft, clock, topic_id


def _leaders(rt: ControllerRuntime, topic_id: str) -> list[int]:
    parts = rt.store.image.topics[topic_id].partitions
    return [p.leader for p in parts]


def _fenced(rt: ControllerRuntime) -> set[int]:
    return {b.broker_id for b in rt.store.image.brokers.values() if b.fenced}


async def _take_over(rt: ControllerRuntime, raft: InstantRaft, clock: Clock) -> None:
    """Follow node 0 until it dies (heard last at KILLED_AT), then win the election."""
    raft.contact.heard("0", KILLED_AT)
    rt._note_leader()
    clock.now = KILLED_AT + ELECTION_MS
    raft.elected()
    await rt._activate()


def test_sessions_after_failover_dates_only_the_named_brokers():
    cluster = cluster_of(range(3))
    s = sessions_after_failover(cluster.image, 5_000, {0: 1_000, 2: 9_000, 7: 1})
    # Never later than now; an unregistered id is ignored; the rest start now.
    assert dict(s.last_heartbeat_ms) == {0: 1_000, 1: 5_000, 2: 5_000}
    assert dict(sessions_after_failover(cluster.image, 5_000).last_heartbeat_ms) == {
        0: 5_000,
        1: 5_000,
        2: 5_000,
    }


def test_a_refused_broker_has_no_session_until_it_heartbeats():
    cluster = cluster_of(range(3))
    s = sessions_after_failover(cluster.image, 5_000, {0: 4_900}, {0: 4_950, 7: 1})
    assert dict(s.refused_ms) == {0: 4_950}, "an unregistered id is ignored"
    assert s.alive(0, 4_900 + OVERDUE, SESSION, OVERDUE), "its last contact not overdue yet"
    assert not s.alive(0, 4_901 + OVERDUE, SESSION, OVERDUE), (
        "then gone, long before its session ends"
    )
    assert s.alive(1, 5_000, SESSION, OVERDUE)
    assert s.heartbeat(0, 5_001).alive(0, 5_001, SESSION, OVERDUE), "a heartbeat proves it alive"
    assert not s.without(0).refused_ms


def test_a_refused_broker_never_heard_from_starts_at_its_refusal():
    cluster = cluster_of(range(3))
    s = sessions_after_failover(cluster.image, 5_000, refused_ms={2: 4_000})
    assert s.last_heartbeat_ms[2] == 4_000
    assert s.proven_gone(2, 5_000, OVERDUE) and not s.alive(2, 5_000, SESSION, OVERDUE)


async def test_a_former_controller_whose_port_refused_is_fenced_right_after_the_barrier():
    """An early election (raft/peer_loss.py) comes a few hundred ms after the
    kill, long before the dead broker's session would lapse: a refused Raft
    port proves its process gone once its last message is overdue (half a
    session), so the fence comes then, not a session after it."""
    rt, raft, clock, topic_id = _setup()
    raft.contact.heard("0", KILLED_AT)
    rt._note_leader()
    raft.contact.refused("0", KILLED_AT + 5)
    clock.now = KILLED_AT + 300
    raft.elected()
    await rt._activate()
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set(), "its last message is not overdue yet"
    clock.now = KILLED_AT + OVERDUE + 1
    assert rt._note_refusals(clock.now)
    await rt._periodic(rt._fence)
    assert _fenced(rt) == {0}, "broker 0 fenced 751 ms after its last message, the others not"
    assert 0 not in _leaders(rt, topic_id)


async def test_a_former_controller_heard_after_its_refusal_is_not_gone():
    rt, raft, clock, _ = _setup()
    raft.contact.refused("0", KILLED_AT - 50)
    raft.contact.heard("0", KILLED_AT)  # it came back (restarted) and spoke
    rt._note_leader()
    clock.now = KILLED_AT + 300
    raft.elected()
    await rt._activate()
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set()


async def test_a_broker_that_died_with_the_former_controller_is_fenced_at_the_first_check():
    rt, raft, clock, topic_id = _setup()
    led_by_0 = [p for p, leader in enumerate(_leaders(rt, topic_id)) if leader == 0]
    assert led_by_0, "the test needs partitions led by broker 0"
    await _take_over(rt, raft, clock)
    await rt._periodic(rt._fence)
    assert _fenced(rt) == {0}, "broker 0 fenced, the live brokers not"
    leaders = _leaders(rt, topic_id)
    assert all(leaders[p] in (1, 2) for p in led_by_0), leaders
    assert 0 not in leaders


async def test_live_brokers_keep_a_full_session_from_the_takeover():
    rt, raft, clock, _ = _setup()
    await _take_over(rt, raft, clock)
    took_over = clock.now
    # Brokers 1 and 2 heartbeated the old controller just before it died and
    # have not found the new one yet: a whole session from the takeover.
    clock.now = took_over + SESSION
    await rt._periodic(rt._fence)
    assert _fenced(rt) == {0}
    clock.now = took_over + SESSION + 1
    await rt._periodic(rt._fence)
    assert _fenced(rt) == {0, 1, 2}, "silent past their session, they are fenced too"


async def test_the_former_controller_heard_recently_is_not_fenced():
    # A leadership handover, or the old leader reconnected and answered the
    # barrier: its last message is recent, so its broker's session is too.
    rt, raft, clock, _ = _setup()
    rt._note_leader()
    clock.now = KILLED_AT + ELECTION_MS
    raft.contact.heard("0", clock.now - 100)
    raft.elected()
    await rt._activate()
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set()
    clock.now += SESSION - 100
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set(), "a session is counted from the last message, not sooner"


async def test_a_former_controller_never_heard_from_gets_a_fresh_session():
    rt, raft, clock, _ = _setup()
    rt._note_leader()
    clock.now = KILLED_AT + ELECTION_MS
    raft.elected()
    await rt._activate()
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set()


async def test_the_duty_loop_remembers_the_leader_and_fences_on_takeover():
    """End to end through the runtime's own loop (50 ms duty ticks)."""
    rt, raft, clock, _ = _setup()
    raft.contact.heard("0", KILLED_AT)
    await rt.start()
    try:
        await _eventually(lambda: rt._former_leader == "0")
        clock.now = KILLED_AT + ELECTION_MS
        raft.elected()
        await _eventually(lambda: _fenced(rt) == {0})
        assert rt.active
    finally:
        await rt.stop()


async def _eventually(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)  # the runtime ticks every 50 ms of real time
