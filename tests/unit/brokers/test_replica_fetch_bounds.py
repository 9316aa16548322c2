"""A leader serves a follower's fetch within its own bounds
(brokers/replica_fetch_bounds.py): sizes capped at its replica fetch sizes,
a fetch naming too many partitions or one twice refused, whoever sends it."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from lograft.brokers.partition import Assignment
from lograft.brokers.replica_fetch_bounds import within_bounds
from lograft.brokers.replica_manager import (
    SERVE_YIELD_EVERY,
    BrokerSettings,
    PartitionMeta,
    ReplicaManager,
)
from lograft.errors import InvalidRequestError
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import (
    FetchPartitionRequest,
    PartitionFetch,
    ReplicaFetchRequest,
    decode_answer,
    encode_answer,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.brokers.test_replica_manager import FAST, TP, Cluster, _batch


def fetch(
    partitions: list[tuple[str, int]],
    *,
    max_bytes: int = 1 << 62,
    partition_max_bytes: int = 1 << 62,
    forgotten: tuple[tuple[str, int], ...] = (),
    offsets: dict[tuple[str, int], int] | None = None,
) -> ReplicaFetchRequest:
    """Follower 2's fetch of `partitions`, each from offset 0 unless `offsets` says."""
    at = offsets or {}
    return ReplicaFetchRequest(
        replica_id=2,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max_bytes,
        partitions=[
            FetchPartitionRequest(t, p, PartitionFetch(at.get((t, p), 0))) for t, p in partitions
        ],
        forgotten=forgotten,
    )


def test_sizes_past_the_leaders_are_served_at_the_leaders() -> None:
    req = within_bounds(
        fetch([("t", 0)]), max_bytes=8 << 20, partition_max_bytes=1 << 20, partitions_max=10
    )
    assert (req.max_bytes, req.partition_max_bytes) == (8 << 20, 1 << 20)


def test_sizes_within_the_leaders_are_served_as_asked() -> None:
    asked = fetch([("t", 0)], max_bytes=4096, partition_max_bytes=1024)
    assert (
        within_bounds(asked, max_bytes=8 << 20, partition_max_bytes=1 << 20, partitions_max=1)
        is asked
    )


def test_a_fetch_naming_more_partitions_than_the_bound_is_refused() -> None:
    req = fetch([("t", 0), ("t", 1)], forgotten=(("t", 2),))
    with pytest.raises(InvalidRequestError, match=r"at most 2 partitions.*names 3"):
        within_bounds(req, max_bytes=1, partition_max_bytes=1, partitions_max=2)


def test_a_fetch_naming_a_partition_twice_is_refused() -> None:
    req = fetch([("t", 0), ("u", 1), ("t", 0)])
    with pytest.raises(InvalidRequestError, match="partition t-0 more than once"):
        within_bounds(req, max_bytes=1, partition_max_bytes=1, partitions_max=10)


@pytest.mark.parametrize("field", ["max_bytes", "partition_max_bytes"])
@pytest.mark.parametrize("value", [0, -1])
def test_sizes_below_one_do_not_parse(field: str, value: int) -> None:
    body = msgspec.json.decode(fetch([("t", 0)]).to_json())
    body[field] = value
    with pytest.raises(InvalidRequestError, match=field):
        ReplicaFetchRequest.from_json(msgspec.json.encode(body))


async def test_a_leader_answers_a_greedy_fetch_with_at_most_its_own_sizes(tmp_path) -> None:
    settings = msgspec.structs.replace(
        FAST, replica_fetch_max_bytes=4096, replica_fetch_partition_max_bytes=2048
    )
    c = Cluster(tmp_path, settings)
    await c.start()
    try:
        for i in range(40):  # ~100 KB of log, in batches of ~300 bytes
            await c.brokers[1].produce(TP, _batch(f"b{i}", n=10), Acks.ALL)
        answer = await c.brokers[1].replica_fetch(fetch([(TP.topic, TP.partition)]))
        (part,) = answer.partitions
        assert 0 < len(part.data) <= 2048
        assert len(encode_answer(answer)) < 4096
        twice = fetch([(TP.topic, TP.partition)] * 2)
        with pytest.raises(InvalidRequestError, match="more than once"):
            await c.brokers[1].replica_fetch(twice)
        assert decode_answer(encode_answer(answer)).partitions[0].data == part.data
    finally:
        await c.stop()


def one_kib_batch(tag: int) -> bytes:
    return build_batch([RecordInput(None, bytes([65 + tag % 26]) * 1000)], timestamp_ms=1)


async def leader_of(tmp_path, partitions: int, batches: int) -> ReplicaManager:
    """Broker 1 leading `partitions` partitions of topic "t" (replicas 1, 2),
    each holding `batches` batches of about 1 KiB."""
    rm = ReplicaManager(1, tmp_path / "b1", BrokerSettings())
    assignment = Assignment((1, 2), (1, 2), 1, 0, 0)
    rm.apply_metadata(
        {TopicPartition("t", p): PartitionMeta("id-t", assignment) for p in range(partitions)}
    )
    for p in range(partitions):
        for i in range(batches):
            await rm.produce(TopicPartition("t", p), one_kib_batch(i), Acks.LEADER)
    return rm


async def test_each_partition_reads_only_the_budget_left(tmp_path) -> None:
    rm = await leader_of(tmp_path, partitions=5, batches=4)
    try:
        batch_len = len(rm.partitions[TopicPartition("t", 0)].log.read(0, 1))
        req = fetch([("t", p) for p in range(5)], max_bytes=5000, partition_max_bytes=3000)
        answer = await rm.replica_fetch(req)
        sizes = [len(p.data) for p in answer.partitions]
        # 2 whole batches within 3000 each, then one batch past what is left.
        assert sizes == [2 * batch_len, 2 * batch_len, batch_len, 0, 0]
        assert sum(sizes) <= 5000 + batch_len
    finally:
        await rm.stop()


async def test_a_batch_larger_than_what_is_left_is_still_served(tmp_path) -> None:
    """No rotation of partitions here: a partition whose next batch is larger
    than the budget the partitions before it leave gets it whole, or it
    would never be served while those have data."""
    rm = await leader_of(tmp_path, partitions=2, batches=4)
    try:
        big = build_batch([RecordInput(None, b"B" * 3000)], timestamp_ms=1)
        tp1 = TopicPartition("t", 1)
        end = rm.partitions[tp1].log.log_end_offset
        await rm.produce(tp1, big, Acks.LEADER)
        req = fetch(
            [("t", 0), ("t", 1)], max_bytes=3000, partition_max_bytes=2000, offsets={("t", 1): end}
        )
        first, second = (await rm.replica_fetch(req)).partitions
        assert first.data and len(second.data) > 3000
    finally:
        await rm.stop()


async def test_the_first_batch_goes_whole_even_past_the_budget(tmp_path) -> None:
    rm = await leader_of(tmp_path, partitions=2, batches=2)
    try:
        batch_len = len(rm.partitions[TopicPartition("t", 0)].log.read(0, 1))
        answer = await rm.replica_fetch(
            fetch([("t", 0), ("t", 1)], max_bytes=10, partition_max_bytes=10)
        )
        assert [len(p.data) for p in answer.partitions] == [batch_len, 0]
    finally:
        await rm.stop()


async def test_a_fetch_of_many_partitions_lets_the_loop_run_between_slices(tmp_path) -> None:
    rm = ReplicaManager(1, tmp_path / "b1", BrokerSettings())
    try:
        # Unknown partitions: each answered with an error, no read, no await.
        req = fetch([("nope", p) for p in range(3 * SERVE_YIELD_EVERY)])
        task = asyncio.create_task(rm.replica_fetch(req))
        seen: list[bool] = []
        asyncio.get_running_loop().call_soon(lambda: seen.append(task.done()))
        answer = await task
        assert len(answer.partitions) == 3 * SERVE_YIELD_EVERY
        assert seen == [False]  # ran while the fetch was under way
    finally:
        await rm.stop()


async def test_an_answer_decided_before_a_yield_is_checked_against_a_leadership_move(
    tmp_path,
) -> None:
    rm = await leader_of(tmp_path, partitions=1, batches=2)
    try:
        tp0 = TopicPartition("t", 0)
        # Partition t-0 is decided first; the yield comes after SERVE_YIELD_EVERY.
        req = fetch([("t", 0)] + [("nope", p) for p in range(SERVE_YIELD_EVERY)])
        task = asyncio.create_task(rm.replica_fetch(req))
        moved = PartitionMeta("id-t", Assignment((1, 2), (1, 2), 2, 1, 1))
        asyncio.get_running_loop().call_soon(lambda: rm.apply_metadata({tp0: moved}))
        answer = (await task).partitions[0]
        assert not answer.data
        assert answer.error is not None
    finally:
        await rm.stop()
