"""The replica fetch answer carries each partition's error as the leader raised it."""

from __future__ import annotations

import struct

import orjson
import pytest

from lograft.api.http_config import HttpConfig
from lograft.errors import FencedLeaderEpochError, InvalidRequestError, NotLeaderOrFollowerError
from lograft.protocol.fetch_wire import (
    FORGOTTEN_PARTITION_BYTES_MAX,
    HEADER_BYTES_MAX,
    NAMED_PARTITION_BYTES_MAX,
    REQUEST_ENVELOPE_BYTES_MAX,
    FetchPartitionRequest,
    FetchPartitionResponse,
    PartitionFetch,
    ReplicaFetchRequest,
    decode_response,
    encode_response,
    partitions_within,
)


def test_a_partition_error_comes_back_with_its_class_and_details() -> None:
    error = FencedLeaderEpochError("epoch 3 is fenced", leader_epoch=4)
    sent = [
        FetchPartitionResponse("t", 0, 10, 0, 12, b"data"),
        FetchPartitionResponse("t", 1, 0, 0, 0, error=error),
    ]
    ok, failed = decode_response(encode_response(sent))
    assert ok.error is None and ok.data == b"data"
    assert type(failed.error) is FencedLeaderEpochError
    assert failed.error.to_dict() == error.to_dict()


@pytest.mark.parametrize("error", [{"message": "no code"}, {"code": "X", "details": []}, "X"])
def test_an_error_that_is_not_an_error_object_refuses_the_answer(error: object) -> None:
    head = orjson.dumps(
        {
            "partitions": [
                {
                    "topic": "t",
                    "partition": 0,
                    "high_watermark": 0,
                    "log_start_offset": 0,
                    "log_end_offset": 0,
                    "bytes": 0,
                    "diverging": None,
                    "error": error,
                }
            ]
        }
    )
    with pytest.raises(InvalidRequestError, match="replica fetch response"):
        decode_response(struct.pack(">I", len(head)) + head)


def _head(**changes: object) -> bytes:
    part = {
        "topic": "t",
        "partition": 0,
        "high_watermark": 0,
        "log_start_offset": 0,
        "log_end_offset": 0,
        "bytes": 0,
        "diverging": None,
        "error": None,
        **changes,
    }
    head = orjson.dumps({"partitions": [part]})
    return struct.pack(">I", len(head)) + head


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (_head(high_watermark="5"), "replica fetch response.partitions[0].high_watermark:"),
        (_head(bytes=-1), "replica fetch response.partitions[0].bytes: Expected `int` >= 0"),
        (_head(diverging={"epoch": 1}), "partitions[0].diverging.end_offset: required"),
        (_head(bytes=3), "ends inside a partition's data"),
        (struct.pack(">I", 2) + b"{]", "replica fetch response: not valid JSON"),
    ],
)
def test_a_malformed_response_header_is_refused_naming_the_field(body: bytes, says: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_response(body)
    assert says in caught.value.message


def test_a_request_round_trips_and_a_bad_one_names_the_field() -> None:
    request = ReplicaFetchRequest(
        2, 100, 1, 1 << 20, 1 << 16, [FetchPartitionRequest("t", 3, PartitionFetch(7, 1, 2))]
    )
    assert ReplicaFetchRequest.from_json(request.to_json()) == request
    # The defaults older senders relied on.
    minimal = {"replica_id": 2, "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 5}]}
    parsed = ReplicaFetchRequest.from_json(orjson.dumps(minimal))
    assert (parsed.max_wait_ms, parsed.min_bytes, parsed.max_bytes) == (500, 1, 8 << 20)
    assert parsed.partitions[0].fetch == PartitionFetch(5, -1, -1)
    bad = {**minimal, "partitions": [{"topic": "t", "partition": "0", "fetch_offset": 5}]}
    with pytest.raises(
        InvalidRequestError, match=r"replica fetch request\.partitions\[0\]\.partition:"
    ):
        ReplicaFetchRequest.from_json(orjson.dumps(bad))
    with pytest.raises(InvalidRequestError, match="replica fetch request: not valid JSON"):
        ReplicaFetchRequest.from_json(b"{")


def test_the_answer_to_any_fetch_within_the_request_limit_is_decoded() -> None:
    """The largest answer per partition named: a topic name of 249 characters
    (Kafka's limit) and an error with its details. A fetch of as many such
    partitions as the default request_bytes_max holds is answered with a
    header the follower takes (it refused one past 16 MiB, so replication from
    a leader stopped at about 43,000 such partitions)."""
    name, count = "t" * 249, 1000
    big = 2**62  # the widest offsets and epochs JSON carries here
    fetch = PartitionFetch(big, 2**31 - 1, 2**31 - 1, big)
    request = ReplicaFetchRequest(
        2**31 - 1, 500, 1, 8 << 20, 1 << 20,
        [FetchPartitionRequest(name, 2**31 - 1 - i, fetch) for i in range(count)],
    )  # fmt: skip
    error = NotLeaderOrFollowerError(
        f"broker {2**31 - 1} is not the leader of {name}-{2**31 - 1}",
        topic=name, partition=2**31 - 1, leader_id=2**31 - 1, leader_epoch=2**31 - 1,
    )  # fmt: skip
    answer = encode_response(
        [
            FetchPartitionResponse(name, 2**31 - 1 - i, big, big, big, error=error)
            for i in range(count)
        ]
    )
    request_max = HttpConfig().request_bytes_max
    partitions_in_a_request = request_max // (len(request.to_json()) / count)
    header_per_partition = len(answer) / count
    assert partitions_in_a_request * header_per_partition < HEADER_BYTES_MAX
    assert len(decode_response(answer)) == count


def _widest_request(named: int, forgotten: int) -> ReplicaFetchRequest:
    """A fetch whose every field is at its widest: 249-character topic names,
    the largest partition numbers, offsets, epochs and session ids."""
    name, i32, i64 = "t" * 249, 2**31 - 1, 2**63 - 1
    fetch = PartitionFetch(i64, i32, i32, i64)
    return ReplicaFetchRequest(
        i32, i32, i32, i32, i32,
        [FetchPartitionRequest(name, i32, fetch) for _ in range(named)],
        session_id=i32, session_epoch=i32,
        forgotten=tuple((name, i32) for _ in range(forgotten)),
    )  # fmt: skip


def test_the_request_bounds_are_those_of_the_encoder() -> None:
    def size(named: int, forgotten: int) -> int:
        return len(_widest_request(named, forgotten).to_json())

    assert size(0, 0) == REQUEST_ENVELOPE_BYTES_MAX
    assert size(2, 0) - size(1, 0) == NAMED_PARTITION_BYTES_MAX
    assert size(0, 2) - size(0, 1) == FORGOTTEN_PARTITION_BYTES_MAX


@pytest.mark.parametrize("request_bytes", [1_024, 64 << 10, 256 << 10, 16 << 20])
def test_a_fetch_of_as_many_partitions_as_fit_stays_within_the_request_bound(
    request_bytes: int,
) -> None:
    """`partitions_within` names, with one partition more forgotten (a
    fetch may forget the one it names), fit the leader's request bound."""
    fits = partitions_within(request_bytes)
    assert len(_widest_request(fits, 1).to_json()) <= request_bytes
    assert len(_widest_request(fits + 2, 0).to_json()) > request_bytes
