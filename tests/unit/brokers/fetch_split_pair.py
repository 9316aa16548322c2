"""Two replica managers in one event loop, wired by an in-process transport:
broker 1 leads every partition, broker 2 follows them all and names at
most `LIMIT` partitions in one fetch (`replica_fetch_request_partitions_max`).
The transport records every fetch and can hold them, one by one."""

from __future__ import annotations

import asyncio

from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import (
    NO_SESSION_ID,
    PartitionFetch,
    ReplicaFetchRequest,
    encode_answer,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition

PARTITIONS = [TopicPartition("wide", p) for p in range(12)]
LIMIT = 5
SETTINGS = BrokerSettings(
    min_insync_replicas=2,
    replica_fetch_wait_max_ms=200,
    replica_fetch_backoff_ms=10,
    isr_check_interval_ms=20,
    replica_lag_time_max_ms=60_000,
    produce_timeout_ms=10_000,
    replica_fetch_request_partitions_max=LIMIT,
)


class Fake:
    """A partition whose fetch state the test sets."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def follower_fetch_request(self) -> PartitionFetch:
        return PartitionFetch(self.offset)


class Pair:
    def __init__(self, tmp_path, leader_settings: BrokerSettings, partitions=PARTITIONS) -> None:
        self.partitions = partitions
        self.requests: list[ReplicaFetchRequest] = []
        self.hold = False
        self.held: list[asyncio.Future[None]] = []
        self.leader = ReplicaManager(1, tmp_path / "b1", leader_settings)
        self.follower = ReplicaManager(2, tmp_path / "b2", SETTINGS, fetch_transport=self._send)

    async def _send(self, leader: int, body: bytes, timeout: float) -> bytes:
        if leader != 1:
            await asyncio.sleep(3600)  # a leader that never answers
        req = ReplicaFetchRequest.from_json(body)
        self.requests.append(req)
        if self.hold:
            fut = asyncio.get_running_loop().create_future()
            self.held.append(fut)
            await fut
        return encode_answer(await self.leader.replica_fetch(req))

    async def release_next(self) -> None:
        for _ in range(100):
            if self.held:
                self.held.pop(0).set_result(None)
                return
            await asyncio.sleep(0.01)

    async def start(self) -> None:
        await self.leader.start()
        await self.follower.start()
        a = Assignment((1, 2), (1, 2), 1, 1, 0)
        metas = {tp: PartitionMeta("topic-id-wide", a) for tp in self.partitions}
        self.leader.apply_metadata(metas)
        self.follower.apply_metadata(metas)

    async def stop(self) -> None:
        self.hold = False
        for f in self.held:
            if not f.done():
                f.set_result(None)
        await self.follower.stop()
        await self.leader.stop()

    async def produce(self, tps, tag: str, acks: Acks = Acks.LEADER) -> None:
        """One record to each of `tps`, one after the other."""
        for tp in tps:
            batch = build_batch(
                [RecordInput(f"{tag}-{tp.partition}".encode(), b"k")], timestamp_ms=1
            )
            await self.leader.produce(tp, batch, acks)


async def until(condition, what: str, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def settled(pair: Pair) -> None:
    for _ in range(300):
        sess = pair.follower.fetcher._fetch_sessions.get(1)
        if (
            sess is not None
            and sess.session_id != NO_SESSION_ID
            and not sess.pending
            and len(sess.sent) == len(pair.partitions)
            and sess.poll is not None
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("session never settled")


__all__ = ["LIMIT", "PARTITIONS", "SETTINGS", "Fake", "Pair", "settled", "until"]
