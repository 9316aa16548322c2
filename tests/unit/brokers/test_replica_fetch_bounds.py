"""A leader serves a follower's fetch within its own bounds
(brokers/replica_fetch_bounds.py): sizes capped at its replica fetch sizes,
a fetch naming too many partitions or one twice refused, whoever sends it."""

from __future__ import annotations

import msgspec
import pytest

from lograft.brokers.replica_fetch_bounds import within_bounds
from lograft.errors import InvalidRequestError
from lograft.protocol.fetch_wire import (
    FetchPartitionRequest,
    PartitionFetch,
    ReplicaFetchRequest,
    decode_answer,
    encode_answer,
)
from lograft.protocol.produce_wire import Acks
from tests.unit.brokers.test_replica_manager import FAST, TP, Cluster, _batch


def fetch(
    partitions: list[tuple[str, int]],
    *,
    max_bytes: int = 1 << 62,
    partition_max_bytes: int = 1 << 62,
    forgotten: tuple[tuple[str, int], ...] = (),
) -> ReplicaFetchRequest:
    return ReplicaFetchRequest(
        replica_id=2,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max_bytes,
        partitions=[FetchPartitionRequest(t, p, PartitionFetch(0)) for t, p in partitions],
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
