"""A restarted broker acts only on current metadata (lograft/node/metadata_catch_up.py):
its replica manager is given no metadata, its data routes refuse and /readyz
says not ready until its image has reached the quorum's offset as of its
registration."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lograft.errors import BrokerNotAvailableError
from lograft.node.broker_agent import AgentState
from lograft.node.config import parse_config
from lograft.node.metadata_catch_up import MetadataCatchUp
from lograft.quorum.image import MetadataImage

V = [{"id": 1, "raft": "h:1", "http": "h:2"}]


class Applied:
    """A stand-in for a Raft applied-offset subscription, driven by the test."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[int] = asyncio.Queue()

    async def get(self) -> int:
        return await self.queue.get()

    def __aiter__(self) -> Applied:
        return self

    async def __anext__(self) -> int:
        return await self.get()


class Store:
    def __init__(self, offset: int) -> None:
        self.image = image_at(offset)


def image_at(offset: int) -> MetadataImage:
    return MetadataImage.empty().apply_batch(offset, ())


async def _turns(n: int = 20) -> None:
    """Give the loop's other tasks turns (a gate that was missing would act here)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_gate_waits_for_registration_then_for_the_offset() -> None:
    gate = MetadataCatchUp(7)
    offset = [5]
    applied = Applied()
    waiter = asyncio.create_task(gate.wait(lambda: offset[0], applied))
    await _turns()
    assert not waiter.done()  # not registered: nothing to reach yet
    refusal = gate.refusal()
    assert isinstance(refusal, BrokerNotAvailableError)
    assert "not registered" in refusal.message
    gate.registered(9)
    gate.registered(20)  # a later registration does not move the target
    await _turns()
    assert not waiter.done()  # the image (5) is behind the quorum (9)
    assert gate.refusal() is not None
    offset[0] = 9
    applied.queue.put_nowait(9)
    assert await asyncio.wait_for(waiter, 5) == 9
    assert gate.refusal() is not None  # serving only once done() is called
    gate.done()
    assert gate.refusal() is None
    assert gate.ready_detail() == {"metadata_caught_up": True, "metadata_offset_to_reach": 9}


async def test_an_image_already_past_the_target_needs_no_new_commit() -> None:
    gate = MetadataCatchUp(7)
    gate.registered(3)
    assert await asyncio.wait_for(gate.wait(lambda: 4, Applied()), 5) == 3


async def test_a_restarted_broker_gives_its_replicas_no_metadata_before_catching_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's journal image (offset 5) is what it had before the restart;
    the quorum registered it at offset 9. Nothing is applied to the replica
    manager, /readyz is not ready and data is refused until the image is at 9."""
    from lograft.brokers.replica_manager import ReplicaManager
    from lograft.node import server as node_module

    applies: list[int] = []
    agents: list[Any] = []

    class FakeAgent:
        unfenced = True
        broker_epoch = 1

        def __init__(self, *args: Any, on_registered: Any = None, **kwargs: Any) -> None:
            self.on_registered = on_registered
            self.state = AgentState.ACTIVE
            agents.append(self)

        async def start(self) -> None:
            pass

    cfg = parse_config(
        {
            "node_id": 5,
            "roles": ["broker"],
            "data_dir": str(tmp_path),
            "cluster_secret": "unit-test-cluster-secret",
            "voters": V,
            "http": {"host": "127.0.0.1", "port": 0},
        }
    )
    n = node_module.Node(cfg)
    applied = Applied()
    store = Store(5)

    async def nothing() -> None:
        pass

    original = ReplicaManager.apply_metadata

    def apply_metadata(self: ReplicaManager, wanted: Any) -> None:
        applies.append(store.image.offset)
        original(self, wanted)

    monkeypatch.setattr(n.raft, "start", nothing)
    monkeypatch.setattr(n.raft, "subscribe", lambda: applied)
    monkeypatch.setattr(n, "store", store)
    monkeypatch.setattr(n, "_leader_id", lambda: 1)
    monkeypatch.setattr(ReplicaManager, "apply_metadata", apply_metadata)
    monkeypatch.setattr(node_module, "BrokerAgent", FakeAgent)
    try:
        await n.start()
        await _turns()
        assert applies == []  # the journal's image (offset 5) is not acted on
        assert n.catch_up.refusal() is not None
        (agent,) = agents
        agent.on_registered(9)
        store.image = image_at(7)
        applied.queue.put_nowait(7)
        await _turns()
        assert applies == []  # 7 is still behind what the quorum had at registration
        ok, detail = n.ready()
        assert not ok
        assert detail["metadata_caught_up"] is False
        assert detail["metadata_offset_to_reach"] == 9
        store.image = image_at(9)
        applied.queue.put_nowait(9)
        async with asyncio.timeout(5):
            while not n.catch_up.caught_up:
                await n._applied_changed.wait()
        assert applies == [9]
        assert n.catch_up.refusal() is None
        ok, detail = n.ready()
        assert detail["metadata_caught_up"] is True
        assert ok, detail
    finally:
        n.agent = None
        await n.stop()
