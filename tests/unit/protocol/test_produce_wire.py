"""The forwarded-produce wire format: round trips and refusals of bad input."""

from __future__ import annotations

import struct

import orjson
import pytest

from lograft.errors import (
    InvalidRequestError,
    LograftError,
    NotLeaderOrFollowerError,
    RecordTooLargeError,
)
from lograft.protocol.produce_wire import (
    Acks,
    AppendResult,
    PartitionBatch,
    ProduceRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from lograft.protocol.record_scan import RecordsSummary


def _request() -> ProduceRequest:
    return ProduceRequest(
        "orders",
        Acks.ALL,
        [PartitionBatch(7, b"batch-seven"), PartitionBatch(0, b""), PartitionBatch(3, b"\x00\xff")],
    )


def _frame(header: object, tail: bytes = b"") -> bytes:
    head = orjson.dumps(header)
    return struct.pack(">I", len(head)) + head + tail


def test_a_request_round_trips_with_its_order_and_bytes() -> None:
    for acks in Acks:
        req = ProduceRequest("orders", acks, _request().partitions)
        assert decode_request(encode_request(req)) == req
    assert _request().size == len(b"batch-seven") + 2


def test_an_encoders_account_of_a_batch_never_crosses_the_wire() -> None:
    """A leader that gets a batch over HTTP walks it whole: the sender's
    `built` account stays in the sender's process."""
    built = PartitionBatch(7, b"batch-seven", RecordsSummary(0, 5, 1))
    [got] = decode_request(encode_request(ProduceRequest("orders", Acks.ALL, [built]))).partitions
    assert got == PartitionBatch(7, b"batch-seven") and got.built is None


def test_a_response_round_trips_results_and_errors() -> None:
    err = NotLeaderOrFollowerError("not me", topic="orders", partition=3, leader_id=2)
    outcomes: list[tuple[int, AppendResult | LograftError]] = [
        (7, AppendResult(40, 41, -1)),
        (0, AppendResult(5, 5, 1_700_000_000_000, duplicate=True)),
        (3, err),
    ]
    got = decode_response(encode_response(outcomes), [7, 0, 3])
    assert got[:2] == [AppendResult(40, 41, -1), AppendResult(5, 5, 1_700_000_000_000, True)]
    assert isinstance(got[2], NotLeaderOrFollowerError)
    assert got[2].to_dict() == err.to_dict()


def test_an_unknown_error_code_keeps_its_code_and_retriable_flag() -> None:
    """A newer leader's code (LograftError.from_dict): not UNKNOWN_SERVER_ERROR."""
    body = orjson.dumps(
        {
            "partitions": [
                {"partition": 1, "error": {"code": "NEW", "message": "m", "retriable": True}}
            ]
        }
    )
    (got,) = decode_response(body, [1])
    assert isinstance(got, LograftError) and got.message == "m"
    assert got.code == "NEW" and got.retriable


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "shorter than its 4-byte header length"),
        (b"\x00\x00\x01\x00{}", "header length 256 is out of range"),
        (_frame([1]), "header must be a JSON object"),
        (struct.pack(">I", 3) + b"{x}", "not valid JSON"),
        (_frame({"topic": "t", "acks": "all"}), "missing fields ['partitions']"),
        (
            _frame({"topic": "t", "acks": "all", "partitions": [], "extra": 1}),
            "unknown fields ['extra']",
        ),
        (_frame({"topic": "", "acks": "all", "partitions": []}), "topic must be a non-empty"),
        (_frame({"topic": "t", "acks": "all", "partitions": {}}), "partitions must be a list"),
        (
            _frame({"topic": "t", "acks": "all", "partitions": [{"partition": 0}]}),
            "partitions[0]: missing fields ['bytes']",
        ),
        (
            _frame({"topic": "t", "acks": "all", "partitions": [{"partition": True, "bytes": 0}]}),
            "partitions[0].partition must be an integer >= 0",
        ),
        (
            _frame({"topic": "t", "acks": "all", "partitions": [{"partition": 0, "bytes": -1}]}),
            "partitions[0].bytes must be an integer >= 0",
        ),
        (
            _frame(
                {"topic": "t", "acks": "all", "partitions": [{"partition": 0, "bytes": 5}]}, b"abc"
            ),
            "body ends inside partition 0's batches",
        ),
        (
            _frame(
                {"topic": "t", "acks": "all", "partitions": [{"partition": 0, "bytes": 1}]}, b"ab"
            ),
            "1 bytes after the last partition's batches",
        ),
        (
            _frame(
                {
                    "topic": "t",
                    "acks": "all",
                    "partitions": [{"partition": 2, "bytes": 0}, {"partition": 2, "bytes": 0}],
                }
            ),
            "partition 2 appears twice",
        ),
    ],
)
def test_malformed_requests_are_refused_with_a_clear_error(body: bytes, words: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_request(body)
    assert "malformed forwarded produce request" in caught.value.message
    assert words in caught.value.message


def test_a_truncated_request_is_refused_wherever_it_is_cut() -> None:
    full = encode_request(_request())
    for cut in range(len(full)):
        with pytest.raises(InvalidRequestError):
            decode_request(full[:cut])


def test_bad_acks_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="acks"):
        decode_request(_frame({"topic": "t", "acks": "2", "partitions": []}))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{", "not a partitions list"),
        (orjson.dumps({"partitions": [{"partition": 1}]}), "names partitions [1], the request [0]"),
        (
            orjson.dumps({"partitions": [{"partition": 0, "base_offset": 1}]}),
            "missing fields ['duplicate', 'last_offset', 'log_append_time']",
        ),
        (
            orjson.dumps({"partitions": [{"partition": 0, "error": {"message": "m"}}]}),
            "needs a non-empty string code",
        ),
        (
            orjson.dumps({"partitions": [{"partition": 0, "error": {"code": "X"}, "more": 1}]}),
            "unknown fields ['more']",
        ),
    ],
)
def test_malformed_responses_are_refused(body: bytes, words: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_response(body, [0])
    assert "malformed forwarded produce response" in caught.value.message
    assert words in caught.value.message


def test_error_details_survive_the_trip() -> None:
    err = RecordTooLargeError("too big", topic="t", partition=0, size=99)
    (got,) = decode_response(encode_response([(0, err)]), [0])
    assert isinstance(got, RecordTooLargeError)
    assert got.details == {"topic": "t", "partition": 0, "size": 99}
