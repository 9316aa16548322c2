"""A stream source reads a remote leader's offsets answer as a typed Record:
a malformed answer is a retriable BROKER_NOT_AVAILABLE naming the field
(it was a KeyError or ValueError out of the stream), extra fields pass."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from lograft.api.stream.limits import SourceLimits
from lograft.api.stream.source import PartitionOffsets, PartitionSource
from lograft.errors import BrokerNotAvailableError
from lograft.protocol.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


class Calls:
    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    def broker_url(self, _broker_id: int) -> str:
        return "http://leader"

    async def call(self, *_args: Any, **_kwargs: Any) -> bytes:
        return self.answer


class Metadata:
    def topic(self, _name: str) -> Any:
        return SimpleNamespace(topic_id="id", partitions={0: SimpleNamespace(leader=2)})


def source(answer: bytes) -> PartitionSource:
    limits = SourceLimits(retry_backoff_ms=1, retry_timeout_ms=1)
    replicas: Any = SimpleNamespace(broker_id=1)
    remote: Any = None  # reads only; offsets never use it
    return PartitionSource(replicas, Metadata(), Calls(answer), remote, TP, "id", limits)


async def test_a_leaders_answer_is_read_with_extra_fields_let_through() -> None:
    answer = orjson.dumps(
        {"topic": "t", "partition": 0, "earliest": 3, "latest": 7, "log_end_offset": 9, "x": 1}
    )
    assert await source(answer).offsets() == PartitionOffsets(3, 7, 9)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"<html>", "not valid JSON"),
        (b'{"earliest": 0, "latest": 1}', "log_end_offset: required"),
        (b'{"earliest": "0", "latest": 1, "log_end_offset": 1}', "earliest: Expected `int`"),
    ],
)
async def test_a_malformed_answer_is_a_retriable_error_naming_the_field(
    answer: bytes, says: str
) -> None:
    with pytest.raises(BrokerNotAvailableError) as caught:
        await source(answer).offsets()  # retried for retry_timeout_ms (1 ms), then raised
    assert says in caught.value.message
    assert caught.value.message.startswith("broker 2's offsets of ")
