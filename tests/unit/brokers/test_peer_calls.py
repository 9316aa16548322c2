"""`LocalFirst`, the one place a typed peer operation aimed at this node's own
broker becomes an in-process call: which calls run the registered handler
(with the caller's values, no encoding) and which go to the remote side."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

import pytest

from lograft.brokers.metadata_sync import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.peer_calls import GroupListing, LeaderOffsets, NoPeers
from lograft.errors import LograftError, PeerAddressUnknownError
from lograft.protocol.produce_wire import (
    Acks,
    AppendResult,
    PartitionBatch,
    PartitionOutcome,
    ProduceRequest,
)
from lograft.protocol.topic_partition import TopicPartition

VIEW = TopicView("t", "id-t", MappingProxyType({0: Assignment((1,), (1,), 1, 0, 0)}))


class Here:
    """In-process handlers that record what they were handed."""

    def __init__(self) -> None:
        self.produced: list[ProduceRequest] = []
        self.asked: list[tuple[list[TopicPartition], int | None]] = []

    async def produce(self, view: TopicView, req: ProduceRequest) -> list[PartitionOutcome]:
        self.produced.append(req)
        return [AppendResult(0, 0, -1) for _ in req.partitions]

    async def offsets(
        self, tps: Sequence[TopicPartition], timestamp_ms: int | None
    ) -> list[LeaderOffsets | LograftError]:
        self.asked.append((list(tps), timestamp_ms))
        return [LeaderOffsets(0, 5, 5) for _ in tps]

    def groups(self) -> GroupListing:
        return {"broker_id": 1, "groups": [], "loading_partitions": []}


def wired() -> tuple[NoPeers, Here]:
    calls, here = NoPeers(), Here()
    calls.serve_locally(1, forward_produce=here.produce, partition_offsets=here.offsets)
    calls.serve_locally(1, list_groups=here.groups)  # adds, keeps the others
    return calls, here


async def test_calls_to_this_broker_run_in_process_with_the_callers_values() -> None:
    calls, here = wired()
    data = b"batch bytes"
    req = ProduceRequest("t", Acks.ALL, [PartitionBatch(0, data)])
    assert await calls.forward_produce(1, VIEW, req) == [AppendResult(0, 0, -1)]
    assert here.produced[0] is req and here.produced[0].partitions[0].data is data
    tp = TopicPartition("t", 0)
    assert await calls.partition_offsets(1, [tp], 7, timeout_ms=1) == [LeaderOffsets(0, 5, 5)]
    assert here.asked == [([tp], 7)]
    assert (await calls.list_groups(1, timeout_ms=1))["broker_id"] == 1


async def test_calls_to_other_brokers_go_to_the_remote_side() -> None:
    calls, here = wired()
    req = ProduceRequest("t", Acks.ALL, [PartitionBatch(0, b"x")])
    with pytest.raises(PeerAddressUnknownError):
        await calls.forward_produce(2, VIEW, req)
    with pytest.raises(PeerAddressUnknownError):
        await calls.partition_offsets(2, [TopicPartition("t", 0)], None, timeout_ms=1)
    with pytest.raises(PeerAddressUnknownError):
        await calls.list_groups(2, timeout_ms=1)
    assert here.produced == [] and here.asked == []


async def test_an_operation_without_a_handler_is_not_served_in_process() -> None:
    calls = NoPeers()
    calls.serve_locally(1, list_groups=Here().groups)
    with pytest.raises(PeerAddressUnknownError):
        await calls.partition_offsets(1, [TopicPartition("t", 0)], None, timeout_ms=1)


def test_one_client_serves_one_broker_in_process() -> None:
    calls, _ = wired()
    with pytest.raises(ValueError, match="serve broker 1"):
        calls.serve_locally(2, list_groups=Here().groups)
