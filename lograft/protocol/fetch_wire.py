"""Wire format of replica fetches between brokers (internal HTTP).

Request (`POST /internal/v1/replica-fetch`, JSON)::

    {"replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 8388608,
     "partition_max_bytes": 1048576,
     "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 42,
                     "last_fetched_epoch": 3, "current_leader_epoch": 4}, ...]}

Response (`application/vnd.lograft.fetch`): a 4-byte big-endian length, that
many bytes of JSON header, then the raw record batches of every partition
concatenated in header order::

    {"partitions": [{"topic": "t", "partition": 0, "high_watermark": 40,
                     "log_start_offset": 0, "log_end_offset": 50,
                     "bytes": 1234,                       length of its batches
                     "diverging": {"epoch": 3, "end_offset": 38} | null,
                     "error": {"code": ..., "message": ...} | null}, ...]}

Batches travel as the bytes stored on disk: no JSON per record, no re-encode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import orjson

from lograft.errors import InvalidRequestError, LograftError

CONTENT_TYPE = "application/vnd.lograft.fetch"
_LEN = struct.Struct(">I")
# A response header larger than this is refused as corrupt, bytes.
HEADER_BYTES_MAX = 16 * 1024 * 1024


# An epoch field the sender left out (Kafka's UNDEFINED_EPOCH).
UNDEFINED_EPOCH = -1


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition of a fetch request; -1 means "not sent" for the epochs."""

    fetch_offset: int
    last_fetched_epoch: int = UNDEFINED_EPOCH
    current_leader_epoch: int = UNDEFINED_EPOCH


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    topic: str
    partition: int
    fetch: PartitionFetch


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partition_max_bytes: int
    partitions: list[FetchPartitionRequest]

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "replica_id": self.replica_id,
                "max_wait_ms": self.max_wait_ms,
                "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes,
                "partition_max_bytes": self.partition_max_bytes,
                "partitions": [
                    {
                        "topic": p.topic,
                        "partition": p.partition,
                        "fetch_offset": p.fetch.fetch_offset,
                        "last_fetched_epoch": p.fetch.last_fetched_epoch,
                        "current_leader_epoch": p.fetch.current_leader_epoch,
                    }
                    for p in self.partitions
                ],
            }
        )

    @classmethod
    def from_json(cls, body: bytes) -> ReplicaFetchRequest:
        try:
            doc = orjson.loads(body)
            parts = [
                FetchPartitionRequest(
                    str(p["topic"]),
                    int(p["partition"]),
                    PartitionFetch(
                        int(p["fetch_offset"]),
                        int(p.get("last_fetched_epoch", -1)),
                        int(p.get("current_leader_epoch", -1)),
                    ),
                )
                for p in doc["partitions"]
            ]
            return cls(
                int(doc["replica_id"]),
                int(doc.get("max_wait_ms", 500)),
                int(doc.get("min_bytes", 1)),
                int(doc.get("max_bytes", 8 << 20)),
                int(doc.get("partition_max_bytes", 1 << 20)),
                parts,
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"malformed replica fetch request: {exc}") from None


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    data: bytes = b""
    diverging: EpochEndOffset | None = None
    error: LograftError | None = None


def encode_response(parts: list[FetchPartitionResponse]) -> bytes:
    header: list[dict[str, Any]] = []
    for p in parts:
        header.append(
            {
                "topic": p.topic,
                "partition": p.partition,
                "high_watermark": p.high_watermark,
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "bytes": len(p.data),
                "diverging": None
                if p.diverging is None
                else {"epoch": p.diverging.epoch, "end_offset": p.diverging.end_offset},
                "error": None if p.error is None else p.error.to_dict(),
            }
        )
    head = orjson.dumps({"partitions": header})
    return b"".join([_LEN.pack(len(head)), head, *(p.data for p in parts)])


def decode_response(body: bytes) -> list[FetchPartitionResponse]:
    if len(body) < _LEN.size:
        raise InvalidRequestError("replica fetch response is too short")
    (n,) = _LEN.unpack_from(body, 0)
    if n > HEADER_BYTES_MAX or _LEN.size + n > len(body):
        raise InvalidRequestError("replica fetch response header length is out of range")
    doc = orjson.loads(body[_LEN.size : _LEN.size + n])
    pos = _LEN.size + n
    out: list[FetchPartitionResponse] = []
    for p in doc["partitions"]:
        size = int(p["bytes"])
        data = body[pos : pos + size]
        if len(data) != size:
            raise InvalidRequestError("replica fetch response ends inside a partition's data")
        pos += size
        div = p.get("diverging")
        err = p.get("error")
        try:
            error = None if err is None else LograftError.from_dict(err)
        except ValueError as exc:
            raise InvalidRequestError(f"replica fetch response: {exc}") from None
        out.append(
            FetchPartitionResponse(
                p["topic"],
                int(p["partition"]),
                int(p["high_watermark"]),
                int(p["log_start_offset"]),
                int(p["log_end_offset"]),
                data,
                None if div is None else EpochEndOffset(int(div["epoch"]), int(div["end_offset"])),
                error,
            )
        )
    return out
