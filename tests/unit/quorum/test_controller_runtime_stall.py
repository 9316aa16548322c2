"""The active controller does not fence brokers for its own loop's stall."""

from __future__ import annotations

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
    assert not rt._sessions.alive(2, late, cfg.broker_session_timeout_ms)
    assert rt.absorb_stall(late), "a 4.5 s gap between 50 ms ticks is a stall"
    assert rt._sessions.alive(2, late, cfg.broker_session_timeout_ms)


def test_regular_ticks_do_not_refresh_sessions():
    rt = _runtime()
    cfg = rt.config
    now = 0
    for _ in range(100):
        now += 50
        assert not rt.absorb_stall(now)
    assert rt._sessions is not None
    assert not rt._sessions.alive(2, now, cfg.broker_session_timeout_ms), "expiry still happens"
