"""A heartbeat counts as contact when it reaches the active controller, not
when its turn comes: requests are served one at a time, each waiting for its
metadata commit, and a live broker must not be fenced for that backlog."""

from __future__ import annotations

import asyncio

from lograft.api.routes_internal import ControllerRpc
from lograft.quorum.controller import ControllerConfig
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.image import MetadataImage
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.records import RegisterBroker, endpoints_from
from lograft.quorum.result import ControllerResult
from lograft.quorum.sessions import BrokerSessions

CONFIG = ControllerConfig()


class SlowRaft:
    """A Raft leader whose commits wait until the test releases them."""

    node_id = "1"
    is_leader = True
    leader_id = "1"

    def refused_peers(self) -> dict[str, int]:
        return {}  # no voter's Raft port refused

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def append(self, batch: bytes) -> int:
        await self.release.wait()
        return 0


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def runtime(raft: SlowRaft, clock: Clock) -> ControllerRuntime:
    store = MetadataStore()
    store._image = MetadataImage.empty().apply_batch(
        1,
        [RegisterBroker(2, "inc", 7, endpoints_from({"http": "http://x"}), None, fenced=False)],
    )
    rt = ControllerRuntime(raft, store, CONFIG, clock=clock)  # type: ignore[arg-type]
    rt._set_sessions(BrokerSessions.starting([2], 0))
    return rt


def heartbeat(epoch: int) -> dict[str, object]:
    return {"broker_id": 2, "broker_epoch": epoch, "metadata_offset": 1, "want_shutdown": False}


async def test_a_heartbeat_queued_behind_a_commit_extends_the_session_on_arrival():
    raft, clock = SlowRaft(), Clock()
    rt = runtime(raft, clock)
    rpc = ControllerRpc(rt)
    # A request whose commit is slow holds the runtime (a batched AlterPartition, say).
    busy = asyncio.create_task(
        rt.run(
            lambda img, s, now: ControllerResult(
                (RegisterBroker(3, "b", 1, endpoints_from({}), None),), None
            )
        )
    )
    await asyncio.sleep(0)  # let it take the lock and wait on the commit
    clock.now = CONFIG.broker_session_timeout_ms - 10
    queued = asyncio.create_task(rpc.methods["heartbeat"](heartbeat(7)))
    await asyncio.sleep(0)
    assert not queued.done()  # still waiting its turn...
    clock.now += CONFIG.broker_session_timeout_ms - 10
    assert rt._sessions is not None
    # ...yet its arrival counted: without it the session ended at timeout_ms.
    assert rt._sessions.alive(
        2, clock.now, CONFIG.broker_session_timeout_ms, CONFIG.refused_overdue_ms
    )
    raft.release.set()
    await busy
    await queued


async def test_a_stale_epoch_is_no_contact():
    raft, clock = SlowRaft(), Clock()
    rt = runtime(raft, clock)
    clock.now = CONFIG.broker_session_timeout_ms + 1
    rt.touch(2, 6)
    rt.touch(9, 7)
    assert rt._sessions is not None
    assert not rt._sessions.alive(
        2, clock.now, CONFIG.broker_session_timeout_ms, CONFIG.refused_overdue_ms
    )
    assert 9 not in rt._sessions.last_heartbeat_ms
    rt.touch(2, 7)
    assert rt._sessions.alive(
        2, clock.now, CONFIG.broker_session_timeout_ms, CONFIG.refused_overdue_ms
    )


async def test_the_time_another_node_was_active_is_not_a_stall():
    raft, clock = SlowRaft(), Clock()
    rt = runtime(raft, clock)
    assert not rt.absorb_stall(0)
    clock.now = 60_000  # a minute as a follower, then elected again
    raft.release.set()
    await rt._activate()
    assert not rt.absorb_stall(clock.now + 50)


def test_a_fence_decision_right_after_a_stall_fences_nobody():
    """The fence check may run the moment the loop comes back from a stall
    (it waited for its turn meanwhile): the stall's unread heartbeats must not
    expire sessions."""
    raft, clock = SlowRaft(), Clock()
    rt = runtime(raft, clock)
    rt.absorb_stall(0)  # last time the loop was seen running
    clock.now = 3 * CONFIG.broker_session_timeout_ms
    assert rt._sessions is not None
    result = rt._fence(rt.store.image, rt._sessions, clock.now)
    assert result.response == ()


def test_a_dead_broker_is_fenced_while_the_loop_keeps_running():
    """Ticks every 50 ms (the watch task): a long wait for the fence check's
    turn is not a stall, and an expired session is fenced."""
    raft, clock = SlowRaft(), Clock()
    rt = runtime(raft, clock)
    while clock.now <= CONFIG.broker_session_timeout_ms + 100:
        rt.absorb_stall(clock.now)
        clock.now += 50
    assert rt._sessions is not None
    result = rt._fence(rt.store.image, rt._sessions, clock.now)
    assert result.response == (2,)
