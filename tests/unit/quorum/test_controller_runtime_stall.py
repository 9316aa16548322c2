"""The active controller does not fence brokers for its own loop's stall."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lograft.quorum.controller import ControllerConfig
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.image import MetadataImage
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.records import RegisterBroker, endpoints_from
from lograft.quorum.sessions import BrokerSessions


class _Raft:
    node_id = "1"
    is_leader = True
    leader_id = "1"

    def refused_peers(self) -> dict[str, int]:
        return {}  # no voter's Raft port refused


def _runtime() -> ControllerRuntime:
    store = MetadataStore()
    store._image = MetadataImage.empty().apply_batch(
        1,
        [RegisterBroker(2, "inc", 1, endpoints_from({"http": "http://x"}), None, fenced=False)],
    )
    rt = ControllerRuntime(_Raft(), store, ControllerConfig())  # type: ignore[arg-type]
    rt._set_sessions(BrokerSessions.starting([2], 0))
    return rt


def test_a_stall_longer_than_a_heartbeat_interval_refreshes_every_session():
    rt = _runtime()
    cfg = rt.config
    assert not rt.absorb_stall(100)
    assert not rt.absorb_stall(100 + cfg.broker_heartbeat_interval_ms)
    late = 100 + cfg.broker_heartbeat_interval_ms + cfg.broker_session_timeout_ms * 3
    assert rt._sessions is not None
    assert not rt._sessions.alive(2, late, cfg.broker_session_timeout_ms, cfg.refused_overdue_ms)
    assert rt.absorb_stall(late), "a 4.5 s gap between 50 ms ticks is a stall"
    assert rt._sessions.alive(2, late, cfg.broker_session_timeout_ms, cfg.refused_overdue_ms)


def test_regular_ticks_do_not_refresh_sessions():
    rt = _runtime()
    cfg = rt.config
    now = 0
    for _ in range(100):
        now += 50
        assert not rt.absorb_stall(now)
    assert rt._sessions is not None
    assert not rt._sessions.alive(2, now, cfg.broker_session_timeout_ms, cfg.refused_overdue_ms), (
        "expiry still happens"
    )


async def test_the_stall_watch_sleeps_while_not_active_and_runs_once_activated(monkeypatch):
    """A follower's watch sets no timer (issue 14: idle wake-ups are the
    controller thread's idle CPU); activation starts it watching again."""
    loop = asyncio.get_running_loop()
    timers: list[float] = []
    real_call_at = loop.call_at

    def counting_call_at(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        timers.append(when)
        return real_call_at(when, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    clock_read = asyncio.Event()

    def clock() -> int:
        clock_read.set()
        return 1000

    rt = ControllerRuntime(_Raft(), MetadataStore(), ControllerConfig(), clock=clock)  # type: ignore[arg-type]
    watch = asyncio.create_task(rt._watch_loop())
    try:
        for _ in range(20):
            await asyncio.sleep(0)  # one loop iteration each, no wall-clock wait
        assert timers == [], "a follower's stall watch must not wake periodically"
        assert not clock_read.is_set()
        rt._set_sessions(BrokerSessions.starting([2], 0))
        await asyncio.wait_for(clock_read.wait(), timeout=10)
        assert timers, "the active controller's watch ticks on a timer"
        assert rt._last_tick == 1000
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
