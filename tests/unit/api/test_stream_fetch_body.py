"""The body of `POST /internal/v1/stream-fetch` (lograft/api/stream/fetch.py):
a typed Record on the wire, refused naming the field, bounded by the serving
node's stream limits."""

from __future__ import annotations

import orjson
import pytest

from lograft.api.stream.fetch import ServeLimits, StreamFetchRequest
from lograft.brokers.replica_manager import ConsumerRead
from lograft.errors import InvalidRequestError
from lograft.protocol.topic_partition import TopicPartition

LIMITS = ServeLimits(reads_max=2, bytes_max=1000, read_bytes_max=100)
READ = {"topic": "t", "partition": 1, "offset": 42, "max_bytes": 50}


def _body(**changes: object) -> bytes:
    return orjson.dumps({"max_wait_ms": 5, "max_bytes": 100, "reads": [READ], **changes})


def test_a_request_round_trips_with_the_bytes_the_hand_built_encoder_wrote() -> None:
    request = StreamFetchRequest(5, 100, (ConsumerRead(TopicPartition("t", 1), 42, 50),))
    assert request.to_json() == _body()
    assert StreamFetchRequest.from_json(request.to_json(), LIMITS) == request


@pytest.mark.parametrize(
    ("body", "says", "detail"),
    [
        (b"{", "stream fetch: not valid JSON", None),
        (b"[]", "stream fetch: Expected `object`, got `array`", None),
        (orjson.dumps({"max_wait_ms": 5, "max_bytes": 100}), "stream fetch.reads: required", None),
        (_body(reads=[]), "stream fetch.reads: Expected `array` of length >= 1", None),
        (_body(max_wait_ms=-1), "stream fetch.max_wait_ms: Expected `int` >= 0", None),
        (_body(max_wait_ms=True), "stream fetch.max_wait_ms: Expected `int`, got `bool`", None),
        (_body(max_bytes=0), "stream fetch.max_bytes: Expected `int` >= 1", None),
        (_body(reads=[5]), "stream fetch.reads[0]: Expected `object`", None),
        (_body(reads=[{**READ, "topic": ""}]), "stream fetch.reads[0].topic:", None),
        (_body(reads=[{**READ, "offset": 2**63}]), "stream fetch.reads[0].offset:", None),
        (_body(extra=1), "stream fetch.extra: unknown field", None),
        (_body(max_bytes=1001), "exceeds remote_poll_bytes_max=1000", "remote_poll_bytes_max"),
        (_body(reads=[READ] * 3), "3 reads exceed remote_poll_partitions_max=2", None),
        (
            _body(reads=[READ, {**READ, "max_bytes": 101}]),
            "stream fetch: reads[1].max_bytes=101 exceeds chunk_bytes_max=100",
            "chunk_bytes_max",
        ),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(
    body: bytes, says: str, detail: str | None
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        StreamFetchRequest.from_json(body, LIMITS)
    assert says in str(caught.value)
    if detail is not None:
        assert caught.value.details[detail] in (1000, 100)
