"""The replica fetch answer carries each partition's error as the leader raised it."""

from __future__ import annotations

import struct

import orjson
import pytest

from lograft.errors import FencedLeaderEpochError, InvalidRequestError
from lograft.protocol.fetch_wire import FetchPartitionResponse, decode_response, encode_response


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
