"""In-process behaviour of RaftAdapter: appends, offsets, waits, subscriptions,
errors, fail-stop, persistence across restarts, and a three-node cluster."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from lograft.errors import (
    InvalidRequestError,
    NotControllerError,
    RaftQueueFullError,
    RaftStartupError,
    RaftStoppedError,
    RecordTooLargeError,
    RequestTimedOutError,
)
from lograft.quorum.raft.adapter import AdapterState, RaftAdapter, RaftConfig
from lograft.quorum.raft.snapshot import MAGIC
from lograft.quorum.raft.status import RaftRole
from tests.raft_support import (
    FAST_TIMINGS,
    RAFT_TEST_PASSWORD,
    ListStateMachine,
    eventually_async,
    free_port,
)
from tests.unit.quorum.raft_inproc import InProcessCluster

pytestmark = pytest.mark.timeout(120)


def single_config(tmp_path: Path, port: int | None = None, **extra: object) -> RaftConfig:
    return RaftConfig(
        node_id="solo",
        data_dir=tmp_path / "solo",
        peers={},
        listen_address=f"127.0.0.1:{port or free_port()}",
        **{**FAST_TIMINGS, "password": RAFT_TEST_PASSWORD, **extra},  # type: ignore[arg-type]
    )


async def started_leader(cfg: RaftConfig, sm: ListStateMachine | None = None) -> RaftAdapter:
    adapter = RaftAdapter(cfg, sm or ListStateMachine())
    await adapter.start()
    await eventually_async(lambda: adapter.is_leader, 10, "single node to elect itself")
    return adapter


async def test_append_returns_increasing_offsets_applied_in_order(tmp_path: Path) -> None:
    sm = ListStateMachine()
    adapter = await started_leader(single_config(tmp_path), sm)
    try:
        offsets = [await adapter.append(b"batch-%d" % i) for i in range(20)]
        assert offsets == sorted(offsets) and len(set(offsets)) == 20
        assert sm.items == [(o, b"batch-%d" % i) for i, o in enumerate(offsets)]
        # An append resolves only once applied locally.
        assert adapter.last_applied >= offsets[-1]
        status = await adapter.status()
        assert status.role is RaftRole.LEADER and status.leader_id == "solo"
        assert status.commit_index >= offsets[-1] and status.last_applied >= offsets[-1]
        # The offset is the Raft index: the last entry sits at the commit index.
        assert status.commit_index == offsets[-1]
    finally:
        await adapter.stop()


async def test_concurrent_appends_all_commit_once(tmp_path: Path) -> None:
    sm = ListStateMachine()
    adapter = await started_leader(single_config(tmp_path), sm)
    try:
        payloads = [b"c-%d" % i for i in range(50)]
        offsets = await asyncio.gather(*(adapter.append(p) for p in payloads))
        assert len(set(offsets)) == 50
        assert sorted(sm.batches) == sorted(payloads)
        by_offset = dict(sm.items)
        assert all(by_offset[o] == p for o, p in zip(offsets, payloads, strict=True))
    finally:
        await adapter.stop()


async def test_wait_for_offset_and_subscription(tmp_path: Path) -> None:
    adapter = await started_leader(single_config(tmp_path))
    try:
        sub = adapter.subscribe()
        waiter = asyncio.create_task(adapter.wait_for_offset(adapter.last_applied + 3, 5000))
        offsets = [await adapter.append(b"w%d" % i) for i in range(3)]
        assert await waiter >= offsets[0]
        assert await adapter.wait_for_offset(offsets[-1], 10) >= offsets[-1]
        seen = await asyncio.wait_for(sub.get(), 5)
        assert seen.offset >= offsets[0]
        # Latest-value semantics: keep reading until the last offset shows up.
        while seen.offset < offsets[-1]:
            seen = await asyncio.wait_for(sub.get(), 5)
        assert seen.offset == offsets[-1] and not seen.restored
        with pytest.raises(RequestTimedOutError) as info:
            await adapter.wait_for_offset(offsets[-1] + 1000, 50)
        assert info.value.details["offset"] == offsets[-1] + 1000
        sub.close()
    finally:
        await adapter.stop()


async def test_subscription_ends_when_adapter_stops(tmp_path: Path) -> None:
    adapter = await started_leader(single_config(tmp_path))
    sub = adapter.subscribe()
    await adapter.append(b"x")
    await adapter.stop()
    seen = [a.offset async for a in sub]
    assert len(seen) <= 1  # at most the pending latest value, then the iterator ends


async def test_invalid_and_oversized_batches_rejected(tmp_path: Path) -> None:
    adapter = await started_leader(single_config(tmp_path, max_batch_bytes=100))
    try:
        with pytest.raises(RecordTooLargeError):
            await adapter.append(b"x" * 101)
        with pytest.raises(InvalidRequestError):
            await adapter.append("not bytes")  # type: ignore[arg-type]
        assert await adapter.append(b"x" * 100) > 0
    finally:
        await adapter.stop()


async def test_binary_batch_round_trips_bytes_exactly(tmp_path: Path) -> None:
    sm = ListStateMachine()
    adapter = await started_leader(single_config(tmp_path), sm)
    try:
        payload = bytes(range(256)) * 40
        offset = await adapter.append(payload)
        assert dict(sm.items)[offset] == payload
    finally:
        await adapter.stop()


async def test_pending_appends_are_bounded(tmp_path: Path) -> None:
    adapter = await started_leader(single_config(tmp_path, max_pending_appends=1))
    try:
        first = asyncio.create_task(adapter.append(b"one"))
        second = asyncio.create_task(adapter.append(b"two"))
        with pytest.raises(RaftQueueFullError):
            await second
        assert await first > 0
    finally:
        await adapter.stop()


async def test_stop_fails_pending_and_later_calls(tmp_path: Path) -> None:
    adapter = await started_leader(single_config(tmp_path))
    waiter = asyncio.create_task(adapter.wait_for_offset(10**9, 60_000))
    await asyncio.sleep(0)  # let the waiter register
    await adapter.stop()
    with pytest.raises(RaftStoppedError):
        await waiter
    with pytest.raises(RaftStoppedError):
        await adapter.append(b"late")
    assert adapter.state is AdapterState.STOPPED
    assert (await adapter.status()).role is RaftRole.STOPPED
    await adapter.stop()  # idempotent


async def test_state_machine_failure_halts_node(tmp_path: Path) -> None:
    sm = ListStateMachine(fail_on=b"poison")
    adapter = await started_leader(single_config(tmp_path), sm)
    try:
        ok = await adapter.append(b"fine")
        with pytest.raises(RaftStoppedError):
            await adapter.append(b"poison")
        await eventually_async(lambda: adapter.state is AdapterState.FAILED, 5, "fail-stop")
        # The node waits on this to stop itself (node/server.py `until_stopped`).
        halted = await asyncio.wait_for(adapter.wait_halted(), 5)
        assert "poison" in repr(halted)
        status = await adapter.status()
        assert status.role is RaftRole.STOPPED and "poison" in (status.failure or "")
        with pytest.raises(RaftStoppedError):
            await adapter.append(b"after")
        assert sm.items == [(ok, b"fine")]
    finally:
        await adapter.stop()


async def test_restart_rebuilds_state_from_journal_and_snapshot(tmp_path: Path) -> None:
    cfg = single_config(tmp_path, log_compaction_min_entries=1000)
    sm = ListStateMachine()
    adapter = await started_leader(cfg, sm)
    try:
        before = [await adapter.append(b"a%d" % i) for i in range(10)]
        adapter.request_log_compaction()
        await eventually_async(
            _snapshot_at_least(adapter, before[-1]), 10, "a snapshot covering the first batches"
        )
        after = [await adapter.append(b"b%d" % i) for i in range(5)]
    finally:
        await adapter.stop()
    expected = sm.items
    assert [o for o, _ in expected] == before + after
    assert cfg.snapshot_path.read_bytes().startswith(MAGIC), "snapshot is ours, not a pickle"

    sm2 = ListStateMachine()
    again = RaftAdapter(cfg, sm2)
    await again.start()
    try:
        # start() returns with the snapshot restored; the journal tail follows.
        assert sm2.restores and sm2.restores[0] >= before[-1]
        await again.wait_for_offset(after[-1], 10_000)
        assert sm2.items == expected
    finally:
        await again.stop()


def _snapshot_at_least(adapter: RaftAdapter, offset: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        status = await adapter.status()
        return status.snapshot_offset is not None and status.snapshot_offset >= offset

    return check


async def test_corrupt_snapshot_refuses_to_start(tmp_path: Path) -> None:
    cfg = single_config(tmp_path)
    adapter = await started_leader(cfg)
    try:
        await adapter.append(b"x")
        adapter.request_log_compaction()
        await eventually_async(_snapshot_at_least(adapter, 1), 10, "a snapshot")
    finally:
        await adapter.stop()
    data = bytearray(cfg.snapshot_path.read_bytes())
    data[-1] ^= 0xFF
    cfg.snapshot_path.write_bytes(bytes(data))
    broken = RaftAdapter(cfg, ListStateMachine())
    with pytest.raises(RaftStartupError):
        await broken.start()
    assert broken.state is AdapterState.FAILED
    await broken.stop()


async def test_port_in_use_fails_fast(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        cfg = single_config(tmp_path, port, bind_timeout_ms=200)
        adapter = RaftAdapter(cfg, ListStateMachine())
        started = time.monotonic()
        with pytest.raises(RaftStartupError):
            await adapter.start()
        assert time.monotonic() - started < 5
        await adapter.stop()


async def test_three_voters_replicate_in_order_and_followers_name_leader(tmp_path: Path) -> None:
    async with InProcessCluster(tmp_path, ["a", "b", "c"]) as cluster:
        await cluster.start()
        leader = await cluster.leader()
        offsets = [await leader.adapter.append(b"m%d" % i) for i in range(10)]
        for follower in cluster.followers(leader):
            with pytest.raises(NotControllerError) as info:
                await follower.adapter.append(b"from follower")
            assert info.value.details["leader_id"] == leader.node_id
            assert info.value.retriable
            await follower.adapter.wait_for_offset(offsets[-1], 10_000)
        items = [m.sm.items for m in cluster.members.values()]
        assert all(i == items[0] for i in items)
        assert [b for _o, b in items[0]] == [b"m%d" % i for i in range(10)]

        status = await leader.adapter.status()
        assert status.role is RaftRole.LEADER and status.has_quorum
        assert [v.node_id for v in status.voters] == ["a", "b", "c"]
        assert all(v.connected for v in status.voters)
        assert all((v.match_index or 0) >= offsets[-1] for v in status.voters if not v.is_self)
        follower_status = await cluster.followers(leader)[0].adapter.status()
        assert follower_status.role is RaftRole.FOLLOWER
        assert follower_status.leader_id == leader.node_id
        assert follower_status.term == status.term


async def test_leader_stop_elects_new_leader_that_keeps_appending(tmp_path: Path) -> None:
    async with InProcessCluster(tmp_path, ["a", "b", "c"]) as cluster:
        await cluster.start()
        old = await cluster.leader()
        first = await old.adapter.append(b"before")
        await cluster.stop_member(old.node_id)
        new = await cluster.leader(timeout_s=15)
        assert new.node_id != old.node_id
        second = await new.adapter.append(b"after")
        assert second > first
        for member in cluster.members.values():
            await member.adapter.wait_for_offset(second, 10_000)
            assert member.sm.batches == [b"before", b"after"]


async def test_a_failing_pysyncobj_tick_is_survived(tmp_path: Path) -> None:
    adapter = await started_leader(single_config(tmp_path))
    try:
        syncobj = adapter._core._syncobj
        assert syncobj is not None
        real_tick = syncobj.doTick
        failures: list[float] = []

        def flaky_tick(time_to_wait: float = 0.0) -> None:
            if not failures:
                failures.append(time_to_wait)
                raise EOFError("a pysyncobj message handler tripped")
            real_tick(time_to_wait)

        syncobj.doTick = flaky_tick  # type: ignore[method-assign]
        await eventually_async(lambda: failures, 5, "the injected tick failure")
        assert await adapter.append(b"still alive") > 0
        assert adapter.state is AdapterState.RUNNING
    finally:
        await adapter.stop()


async def test_largest_binary_batches_replicate_to_followers(tmp_path: Path) -> None:
    # High bytes double in pysyncobj's pickling; entries of every size up to the
    # limit must stay on its plain path (its chunked path garbles some sizes).
    limit = 3000
    async with InProcessCluster(tmp_path, ["a", "b", "c"], max_batch_bytes=limit) as cluster:
        await cluster.start()
        leader = await cluster.leader()
        payloads = [b"\xff" * n for n in range(limit - 120, limit + 1, 7)]
        offsets = [await leader.adapter.append(p) for p in payloads]
        for member in cluster.members.values():
            await member.adapter.wait_for_offset(offsets[-1], 10_000)
            assert member.sm.batches == payloads


@pytest.mark.parametrize("limit", [1, 100, 3000, 1 << 20])
def test_largest_entry_stays_below_pysyncobj_chunking_threshold(limit: int) -> None:
    import struct

    import pysyncobj.pickle as pysyncobj_pickle

    from lograft.quorum.raft.core import build_syncobj_conf

    cfg = single_config(Path("/nonexistent"), port=1, max_batch_bytes=limit)
    conf = build_syncobj_conf(cfg, lambda *_: None, lambda *_: ())
    worst = b"\xff" * limit  # every byte becomes two in pysyncobj's protocol-2 pickle
    command = struct.pack("B", 0) + pysyncobj_pickle.dumps((99, (worst,)))
    assert len(command) < conf.appendEntriesBatchSizeBytes


async def test_lagging_follower_catches_up_from_the_leaders_snapshot(tmp_path: Path) -> None:
    async with InProcessCluster(tmp_path, ["a", "b", "c"]) as cluster:
        await cluster.start()
        leader = await cluster.leader()
        laggard = cluster.followers(leader)[0]
        first = await leader.adapter.append(b"seen by all")
        await laggard.adapter.wait_for_offset(first, 10_000)
        await cluster.stop_member(laggard.node_id)

        missed = [await leader.adapter.append(b"missed-%d" % i) for i in range(20)]
        for member in cluster.members.values():
            await member.adapter.wait_for_offset(missed[-1], 10_000)
            member.adapter.request_log_compaction()
        for member in cluster.members.values():
            await eventually_snapshot(member.adapter, missed[-1])

        back = await cluster.start_member(laggard.node_id)
        await back.adapter.wait_for_offset(missed[-1], 15_000)
        assert back.sm.items == leader.sm.items
        # Its journal ended before the leader's first entry: only a snapshot helps.
        assert back.sm.restores and back.sm.restores[-1] >= missed[-1]


async def eventually_snapshot(adapter: RaftAdapter, offset: int) -> None:
    await eventually_async(_snapshot_at_least(adapter, offset), 10, "a snapshot")


async def test_stop_releases_threads_sockets_and_files(tmp_path: Path) -> None:
    import os
    import threading

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    cfg = single_config(tmp_path)
    # One warm-up cycle: asyncio's executor threads and lazy imports stay around.
    warm = await started_leader(cfg)
    await warm.stop()
    fds_before = open_fds()
    for i in range(3):
        adapter = await started_leader(cfg)
        await adapter.append(b"cycle-%d" % i)
        await adapter.stop()
        assert adapter._core._thread is not None and not adapter._core._thread.is_alive()
    assert open_fds() == fds_before, "pysyncobj sockets, pipes or files leaked"
    assert not [t.name for t in threading.enumerate() if t.name.startswith("raft-")]
    # The port is free again: a fresh bind succeeds at once.
    again = RaftAdapter(cfg, ListStateMachine())
    await again.start()
    await again.stop()
