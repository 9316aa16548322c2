"""A stream source asks a remote leader for a partition's offsets on the
internal partition-offsets route (the cluster secret, not the client's
credentials) and reads its answer as a typed Record: a malformed answer is a
retriable BROKER_NOT_AVAILABLE naming the field (it was a KeyError or
ValueError out of the stream); an error the leader gives is raised as it is."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from lograft.api.partition_offsets import decode_offsets_answer
from lograft.api.stream.limits import SourceLimits
from lograft.api.stream.source import PartitionOffsets, PartitionSource
from lograft.errors import BrokerNotAvailableError, NotLeaderOrFollowerError
from lograft.protocol.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


class Calls:
    """The peer client's typed partition-offsets call, over a canned answer."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.asked: list[tuple[int, list[TopicPartition]]] = []

    def broker_url(self, _broker_id: int) -> str:
        return "http://leader"

    async def partition_offsets(
        self, broker_id: int, tps: Sequence[TopicPartition], _ts: int | None, *, timeout_ms: int
    ) -> Any:
        self.asked.append((broker_id, list(tps)))
        return decode_offsets_answer(tps, self.answer)


class Metadata:
    def topic(self, _name: str) -> Any:
        return SimpleNamespace(topic_id="id", partitions={0: SimpleNamespace(leader=2)})


def source(answer: bytes) -> tuple[PartitionSource, Calls]:
    limits = SourceLimits(retry_backoff_ms=1, retry_timeout_ms=1)
    replicas: Any = SimpleNamespace(broker_id=1)
    remote: Any = None  # reads only; offsets never use it
    calls = Calls(answer)
    return PartitionSource(replicas, Metadata(), calls, remote, TP, "id", limits), calls


def answer(**item: Any) -> bytes:
    return orjson.dumps({"partitions": [item]})


async def test_a_leaders_answer_is_read_from_its_internal_route() -> None:
    found, calls = source(answer(log_start_offset=3, high_watermark=7, log_end_offset=9))
    assert await found.offsets() == PartitionOffsets(3, 7, 9)
    assert calls.asked == [(2, [TP])]


async def test_an_error_of_the_leader_is_raised() -> None:
    error = NotLeaderOrFollowerError("moved").to_dict()
    found, _ = source(answer(error=error))
    with pytest.raises(NotLeaderOrFollowerError):
        await found.offsets()  # retriable: retried for retry_timeout_ms (1 ms), then raised


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"<html>", "not valid JSON"),
        (answer(log_start_offset=0, high_watermark=1), "needs log_start_offset"),
        (answer(log_start_offset="0", high_watermark=1, log_end_offset=1), "Expected `int"),
        (orjson.dumps({"partitions": []}), "0 answers for 1 partitions"),
    ],
)
async def test_a_malformed_answer_is_a_retriable_error_naming_the_field(
    raw: bytes, says: str
) -> None:
    found, _ = source(raw)
    with pytest.raises(BrokerNotAvailableError) as caught:
        await found.offsets()  # retried for retry_timeout_ms (1 ms), then raised
    assert says in caught.value.message
    assert caught.value.message.startswith("broker 2's offsets of ")
