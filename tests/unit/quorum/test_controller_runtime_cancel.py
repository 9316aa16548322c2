"""Cancelling a ControllerRuntime request at any await leaves the runtime sound.

A local caller (this node is the active controller) may wrap a call in a
timeout; stop() cancels the duty loop. The Raft commit a cancelled request
already submitted goes on regardless (as pysyncobj's does), so the runtime
must not let the next decision be taken against an image without it, must
release its lock, and must go on serving heartbeats, AlterPartition and
registrations.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from lograft.errors import InvalidUpdateVersionError, RequestTimedOutError
from lograft.quorum import controller as c
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.image import MetadataImage
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.records import endpoints_from
from lograft.quorum.sessions import BrokerSessions

from .metadata_cluster import Cluster, cluster_of


class _Raft:
    """A Raft leader whose commits the test releases one by one.

    As with the real adapter, a submitted batch commits and applies even when
    the coroutine that appended it was cancelled: only its answer is lost."""

    node_id = "0"
    is_leader = True
    leader_id = "0"

    def refused_peers(self) -> dict[str, int]:
        return {}  # no voter's Raft port refused

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.pending: list[tuple[bytes, asyncio.Future[int]]] = []

    async def append(self, batch: bytes, *, timeout_ms: int | None = None) -> int:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.pending.append((batch, fut))
        return await fut

    def commit_next(self) -> int:
        batch, fut = self.pending.pop(0)
        offset = self.store.image.offset + 1
        self.store.apply(offset, batch)
        if not fut.done():
            fut.set_result(offset)
        return offset


async def _until(cond: Callable[[], bool]) -> None:
    """Run the loop until `cond` holds (yields only; no wall-clock waits)."""
    for _ in range(100):
        if cond():
            return
        await asyncio.sleep(0)  # one event-loop iteration, not a delay
    raise AssertionError("condition never held")


class _Setup:
    def __init__(self) -> None:
        # Brokers 0-2 unfenced, a topic of 6 partitions at RF 3, and broker 3
        # registered but still fenced (its heartbeat will unfence it).
        cluster: Cluster = cluster_of(range(3))
        self.topic_id = cluster.create("t", 6, 3)
        cluster.register(3)
        self.cluster = cluster
        store = MetadataStore()
        records = cluster.image.to_records()
        store._image = MetadataImage.empty().apply_batch(cluster.image.offset, records)
        self.store = store
        self.raft = _Raft(store)
        self.rt = ControllerRuntime(self.raft, store, c.ControllerConfig())  # type: ignore[arg-type]
        self.rt._set_sessions(BrokerSessions.starting(store.image.brokers, 0))
        self.rt.clock = lambda: 0
        # Offset of the image every handler decided against, in call order.
        self.decided_at: list[tuple[str, int]] = []

    def epoch(self, broker_id: int) -> int:
        return self.store.image.brokers[broker_id].broker_epoch

    def traced(
        self, name: str, handler: Callable[[MetadataImage, BrokerSessions, int], Any]
    ) -> Any:
        def run(img: MetadataImage, s: BrokerSessions, now: int) -> Any:
            self.decided_at.append((name, img.offset))
            return handler(img, s, now)

        return self.rt.run(run)

    # -- the kinds of request, each one producing records -----------------------

    def heartbeat(self, broker_id: int) -> Any:
        req = c.HeartbeatRequest(broker_id, self.epoch(broker_id), self.store.image.offset)
        return self.traced(
            "heartbeat", lambda img, s, now: c.broker_heartbeat(img, s, req, now, self.rt.config)
        )

    def register(self, broker_id: int) -> Any:
        req = c.RegisterBrokerRequest(
            broker_id, str(uuid.uuid4()), endpoints_from({"http": "http://x"})
        )
        return self.traced(
            "register", lambda img, s, now: c.register_broker(img, s, req, now, self.rt.config)
        )

    def shrink(self) -> Any:
        """The leader of partition 0 drops its last follower from the ISR."""
        p = self.store.image.partition(self.topic_id, 0)
        assert p is not None
        isr = tuple(b for b in p.isr if b == p.leader or b != p.replicas[-1])
        item = c.AlterPartitionItem(p.topic_id, 0, p.leader_epoch, p.partition_epoch, isr)
        req = c.AlterPartitionsRequest(p.leader, self.epoch(p.leader), (item,))
        return self.traced("alter", lambda img, _s, _n: c.alter_partitions(img, req))

    def expand(self) -> Any:
        """The leader of partition 0 adds every replica back to the ISR."""
        p = self.store.image.partition(self.topic_id, 0)
        assert p is not None
        item = c.AlterPartitionItem(p.topic_id, 0, p.leader_epoch, p.partition_epoch, p.replicas)
        req = c.AlterPartitionsRequest(p.leader, self.epoch(p.leader), (item,))
        return self.traced("alter", lambda img, _s, _n: c.alter_partitions(img, req))

    def victim(self, kind: str) -> Any:
        if kind == "heartbeat":
            return self.heartbeat(3)  # unfences broker 3: records
        if kind == "register":
            return self.register(4)  # a new broker: records
        return self.shrink()

    async def drain(self) -> None:
        """Commit whatever is submitted until the runtime is idle."""
        for _ in range(20):
            await _until(lambda: bool(self.raft.pending) or not self.rt._lock.locked())
            if not self.raft.pending:
                return
            self.raft.commit_next()
            await asyncio.sleep(0)  # let the committer resume
        raise AssertionError("runtime never went idle")

    async def served(self, coro: Any) -> Any:
        """Run a request to completion, committing its batch."""
        task = asyncio.ensure_future(coro)
        while not task.done():
            await _until(lambda: task.done() or bool(self.raft.pending))
            if self.raft.pending:
                self.raft.commit_next()
        return task.result()

    async def check_still_serves(self) -> None:
        """Heartbeats, batched AlterPartition and registration all succeed, and
        the image is what one-at-a-time application gives."""
        for b in (0, 1, 2):
            assert not (await self.served(self.heartbeat(b))).fenced
        shrunk = await self.served(self.shrink())
        assert not isinstance(shrunk[0], Exception), shrunk
        expanded = await self.served(self.expand())
        assert not isinstance(expanded[0], Exception), expanded
        p = self.store.image.partition(self.topic_id, 0)
        assert p is not None
        assert p.isr == p.replicas and expanded[0].isr == p.isr
        assert expanded[0].partition_epoch == p.partition_epoch
        reg = await self.served(self.register(5))
        assert self.store.image.brokers[5].broker_epoch == reg.broker_epoch
        assert not self.rt._lock.locked()
        assert not self.raft.pending


KINDS = ["heartbeat", "register", "alter"]


@pytest.mark.parametrize("kind", KINDS)
async def test_cancelled_while_waiting_for_the_lock_decides_nothing(kind: str) -> None:
    s = _Setup()
    blocker = asyncio.ensure_future(s.heartbeat(0))  # holds the lock, no records
    blocker_with_commit = asyncio.ensure_future(s.shrink())
    await _until(lambda: len(s.raft.pending) == 1)
    victim = asyncio.ensure_future(s.victim(kind))
    await asyncio.sleep(0)  # the victim is now queued on the lock
    victim.cancel()
    s.raft.commit_next()
    await blocker
    await blocker_with_commit
    with pytest.raises(asyncio.CancelledError):
        await victim
    assert [name for name, _ in s.decided_at] == ["heartbeat", "alter"]
    await s.check_still_serves()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("point", ["first_iteration", "submitted"])
async def test_cancelled_mid_commit_holds_the_next_decision_until_it_applies(
    kind: str, point: str
) -> None:
    s = _Setup()
    victim = asyncio.ensure_future(s.victim(kind))
    if point == "first_iteration":
        await asyncio.sleep(0)  # decided, the commit not necessarily submitted yet
        assert s.decided_at
    else:
        await _until(lambda: bool(s.raft.pending))
    victim.cancel()
    with pytest.raises(asyncio.CancelledError):
        await victim
    # A request arriving now must wait for the abandoned commit: decided
    # against the image without it, its records could silently undo it.
    follow = asyncio.ensure_future(s.expand())
    await _until(lambda: bool(s.raft.pending))
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(s.decided_at) == 1, "decided before the abandoned batch applied"
    committed = s.raft.commit_next()
    answer = await s.served(follow)
    assert s.decided_at[1] == ("alter", committed)
    if kind == "alter":
        # Built from the image before the shrink: a compare-and-set that must
        # now fail (against the stale image it passed, and re-added the
        # follower the shrink had removed while answering epochs off by one).
        assert isinstance(answer[0], InvalidUpdateVersionError), answer
    else:
        assert not isinstance(answer[0], Exception), answer
    # The abandoned batch did apply: its effect is in the image.
    image = s.store.image
    if kind == "heartbeat":
        assert not image.brokers[3].fenced
    elif kind == "register":
        assert 4 in image.brokers
    await s.check_still_serves()


async def test_a_failed_abandoned_commit_releases_the_lock() -> None:
    s = _Setup()
    victim = asyncio.ensure_future(s.shrink())
    await _until(lambda: bool(s.raft.pending))
    victim.cancel()
    with pytest.raises(asyncio.CancelledError):
        await victim
    assert s.rt._lock.locked(), "held while the submitted batch may still commit"
    _batch, fut = s.raft.pending.pop(0)
    fut.set_exception(RequestTimedOutError("not committed in time", outcome="unknown"))
    await _until(lambda: not s.rt._lock.locked())
    await s.check_still_serves()
