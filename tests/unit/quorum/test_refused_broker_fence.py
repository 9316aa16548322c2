"""The active controller fences a broker whose node's Raft port refused a
connection after its last Raft message, at the duty tick that finds its
last heartbeat older than half a session (`refused_overdue_ms`), unless the
broker heartbeated after that refusal (sessions.py, "one rule for every
voter"). Without a refusal, the session timeout decides as before.

Before, only a new controller used a refusal (for the former leader's
broker); a kill of any other node waited for `broker_session_timeout_ms`
(1.5 s) and the fence check after it: 2.0-2.3 s from the kill to the
first acknowledged write in 4 of 15 kills measured (docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lograft.quorum import controller as c
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.sessions import BrokerSessions

from .controller_fakes import Clock, InstantRaft, store_of
from .metadata_cluster import cluster_of

CONFIG = c.ControllerConfig()
SESSION = CONFIG.broker_session_timeout_ms
OVERDUE = CONFIG.refused_overdue_ms
T0 = 100_000


def test_the_rule_on_sessions():
    s = BrokerSessions.starting([1, 2, 3], T0)
    # No refusal: the session timeout alone.
    assert s.alive(2, T0 + SESSION, SESSION, OVERDUE)
    assert not s.alive(2, T0 + SESSION + 1, SESSION, OVERDUE)
    # Refused after its last heartbeat: gone once that heartbeat is overdue.
    refused = s.with_refusals({2: T0 + 10})
    assert OVERDUE == 750, "one and a half heartbeat intervals at the defaults"
    assert not refused.proven_gone(2, T0 + OVERDUE, OVERDUE)
    assert refused.alive(2, T0 + OVERDUE, SESSION, OVERDUE)
    late = T0 + OVERDUE + 1
    assert refused.proven_gone(2, late, OVERDUE) and not refused.alive(2, late, SESSION, OVERDUE)
    assert refused.alive(1, late, SESSION, OVERDUE) and refused.alive(3, late, SESSION, OVERDUE)
    # A heartbeat after the refusal (a restart, or a port that only looked
    # closed): alive, on its session as before.
    back = refused.heartbeat(2, T0 + 20)
    assert not back.proven_gone(2, T0 + 20 + SESSION, OVERDUE)
    assert back.alive(2, T0 + 20 + SESSION, SESSION, OVERDUE)
    assert not back.alive(2, T0 + 21 + SESSION, SESSION, OVERDUE)
    # A refusal forgotten (the voter spoke Raft again) proves nothing.
    assert not refused.with_refusals({}).proven_gone(2, late, OVERDUE)


async def _active() -> tuple[ControllerRuntime, InstantRaft, Clock, str]:
    """Brokers 1-3, a topic with partitions led by each; node 1 active."""
    cluster = cluster_of([1, 2, 3])
    topic_id = cluster.create("t", 6, 3)
    store = store_of(cluster)
    raft = InstantRaft(store)
    clock = Clock(T0)
    rt = ControllerRuntime(raft, store, CONFIG, clock=clock)  # type: ignore[arg-type]
    await rt._activate()
    return rt, raft, clock, topic_id


def _fenced(rt: ControllerRuntime) -> set[int]:
    return {b.broker_id for b in rt.store.image.brokers.values() if b.fenced}


def _leaders(rt: ControllerRuntime, topic_id: str) -> list[int]:
    return [p.leader for p in rt.store.image.topics[topic_id].partitions]


async def _heartbeat(rt: ControllerRuntime, broker_id: int) -> c.HeartbeatResponse:
    broker = rt.store.image.brokers[broker_id]
    request = c.HeartbeatRequest(broker_id, broker.broker_epoch, rt.store.image.offset)
    return await rt.run(lambda img, s, now: c.broker_heartbeat(img, s, request, now, CONFIG))


async def test_a_voter_refused_after_its_heartbeat_is_fenced_once_that_is_overdue():
    rt, raft, clock, topic_id = await _active()
    assert 2 in _leaders(rt, topic_id), "the test needs partitions led by broker 2"
    clock.now = T0 + 100
    await _heartbeat(rt, 2)
    raft.contact.heard("2", T0 + 150)
    raft.contact.refused("2", T0 + 200)  # SIGKILLed: its port refuses
    clock.now = T0 + 100 + OVERDUE  # its next heartbeat could still come
    assert not rt._note_refusals(clock.now)
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set()
    clock.now += 1  # overdue, well inside its session
    assert rt._note_refusals(clock.now), "the fence is due at this tick"
    await rt._periodic(rt._fence)
    assert _fenced(rt) == {2}
    assert 2 not in _leaders(rt, topic_id)
    # Restarted: it speaks Raft again (the refusal ends) and heartbeats.
    raft.contact.heard("2", T0 + 900)
    clock.now = T0 + 900
    assert not rt._note_refusals(clock.now)
    assert not (await _heartbeat(rt, 2)).fenced, "caught up: unfenced as after any fence"
    assert _fenced(rt) == set()


async def test_a_voter_that_heartbeats_after_its_refusal_is_not_fenced():
    """A port that refuses while the process lives (a proxy in between, the
    chaos suite's cut): its heartbeats keep it, as before."""
    rt, raft, clock, _ = await _active()
    raft.contact.heard("2", T0 + 50)
    raft.contact.refused("2", T0 + 100)
    clock.now = T0 + 120
    await _heartbeat(rt, 2)
    assert not rt._note_refusals(clock.now)
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set()
    await _fence_checks_until(rt, clock, T0 + 120 + SESSION)
    assert _fenced(rt) == {1, 3}, "1 and 3 last heartbeated at T0"
    await _fence_checks_until(rt, clock, T0 + 121 + SESSION)
    assert _fenced(rt) == {1, 2, 3}, "and silent past its session, 2 is fenced as before"


async def test_a_fenced_voter_whose_port_still_refuses_comes_back_at_its_heartbeat():
    rt, raft, clock, _ = await _active()
    raft.contact.refused("3", T0 + 100)
    clock.now = T0 + OVERDUE + 1  # its last heartbeat, at T0, overdue
    assert rt._note_refusals(clock.now)
    await rt._periodic(rt._fence)
    assert _fenced(rt) == {3}
    clock.now += 300  # the Raft port still refuses (the cut lasts)
    assert not (await _heartbeat(rt, 3)).fenced
    assert not rt._note_refusals(clock.now)
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set(), "not fenced again for the same refusal"


async def test_without_a_refusal_the_session_timeout_decides():
    rt, _raft, clock, _ = await _active()
    clock.now = T0 + SESSION
    assert not rt._note_refusals(clock.now)
    await rt._periodic(rt._fence)
    assert _fenced(rt) == set()
    clock.now = T0 + SESSION + 1
    await rt._periodic(rt._fence)
    assert _fenced(rt) == {1, 2, 3}


async def test_the_duty_loop_fences_a_refused_voter_without_waiting_for_its_session():
    """Through the runtime's own loop (50 ms duty ticks); the clock stays
    inside every session, so only the refusal can fence."""
    rt, raft, clock, _ = await _active()
    await rt.start()
    try:
        raft.contact.refused("2", T0 + 1)
        clock.now = T0 + 2
        await _eventually(lambda: rt._sessions is not None and 2 in rt._sessions.refused_ms)
        assert _fenced(rt) == set(), "its last heartbeat, at T0, is not overdue yet"
        # In steps shorter than a heartbeat interval: a longer jump between
        # two duty ticks reads as a stall of the controller's loop.
        clock.now = T0 + 400
        await _eventually(lambda: rt._last_tick == T0 + 400)
        assert _fenced(rt) == set()
        clock.now = T0 + OVERDUE + 1
        await _eventually(lambda: _fenced(rt) == {2})
        assert rt.active
    finally:
        await rt.stop()


async def _fence_checks_until(rt: ControllerRuntime, clock: Clock, end: int) -> None:
    """Fence checks every `fence_check_interval_ms` up to `end` (a jump longer
    than a heartbeat interval would read as a stall of the controller loop)."""
    while clock.now < end:
        clock.now = min(end, clock.now + CONFIG.fence_check_interval_ms)
        await rt._periodic(rt._fence)


async def _eventually(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)  # the runtime ticks every 50 ms of real time
