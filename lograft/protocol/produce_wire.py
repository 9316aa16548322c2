"""Wire format of a produce forwarded to a leader (internal HTTP).

A node that accepts a JSON produce sends every partition another broker leads
to that broker in one request, as a Kafka client sends one ProduceRequest per
broker, instead of one HTTP request per partition.

Request (`POST /internal/v1/produce`, `application/vnd.lograft.produce`): a
4-byte big-endian length, that many bytes of JSON header, then the raw record
batches of every partition concatenated in header order::

    {"topic": "t", "acks": "all",
     "partitions": [{"partition": 0, "bytes": 1234}, ...]}

Response (JSON), one entry per request partition, in request order::

    {"partitions": [{"partition": 0, "base_offset": 40, "last_offset": 41,
                     "log_append_time": -1, "duplicate": false},
                    {"partition": 3, "error": {"code": ..., "message": ...,
                                               "retriable": ..., "details": {...}}}]}

Unknown fields, a header that does not add up to the body, or a partition
named twice are refused with INVALID_REQUEST: both ends are one version.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

import orjson

from lograft.errors import InvalidRequestError, LograftError
from lograft.protocol.record_scan import RecordsSummary

CONTENT_TYPE = "application/vnd.lograft.produce"
_LEN = struct.Struct(">I")
# A request header larger than this is refused as corrupt, bytes.
HEADER_BYTES_MAX = 16 * 1024 * 1024

_REQUEST_KEYS = frozenset({"topic", "acks", "partitions"})
_PARTITION_KEYS = frozenset({"partition", "bytes"})
_RESULT_KEYS = frozenset(
    {"partition", "base_offset", "last_offset", "log_append_time", "duplicate"}
)
_ERROR_KEYS = frozenset({"partition", "error"})


class Acks(enum.Enum):
    NONE = "0"
    LEADER = "1"
    ALL = "all"

    @classmethod
    def parse(cls, raw: object) -> Acks:
        text = str(raw).lower()
        if text in ("-1", "all"):
            return cls.ALL
        for a in cls:
            if a.value == text:
                return a
        raise InvalidRequestError(f"acks={raw!r}; use 0, 1 or all")


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time_ms: int
    duplicate: bool = False


PartitionOutcome = AppendResult | LograftError


@dataclass(frozen=True, slots=True)
class PartitionBatch:
    partition: int
    data: bytes
    # What the encoder saw of the records of a batch this process built
    # itself (`plain_batch.BuiltBatch`), for the leader's check when the
    # batch stays in this process; never sent: a batch that crosses the
    # wire arrives without it and is walked whole.
    built: RecordsSummary | None = None


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    topic: str
    acks: Acks
    partitions: list[PartitionBatch]

    @property
    def size(self) -> int:
        """Bytes of batches carried (the header is small next to them)."""
        return sum(len(p.data) for p in self.partitions)


# -- request ---------------------------------------------------------------------------------


def encode_request(req: ProduceRequest) -> bytes:
    head = orjson.dumps(
        {
            "topic": req.topic,
            "acks": req.acks.value,
            "partitions": [
                {"partition": p.partition, "bytes": len(p.data)} for p in req.partitions
            ],
        }
    )
    return b"".join([_LEN.pack(len(head)), head, *(p.data for p in req.partitions)])


def decode_request(body: bytes) -> ProduceRequest:
    doc, pos = _split_header(body)
    _exact_keys(doc, _REQUEST_KEYS, "request")
    topic = doc["topic"]
    if not isinstance(topic, str) or not topic:
        raise _bad("topic must be a non-empty string")
    acks = Acks.parse(doc["acks"])
    entries = doc["partitions"]
    if not isinstance(entries, list):
        raise _bad("partitions must be a list")
    parts: list[PartitionBatch] = []
    seen: set[int] = set()
    for i, entry in enumerate(entries):
        partition, size = _partition_entry(entry, i)
        if partition in seen:
            # Two batches for one partition would make the order between them
            # depend on the receiver; the sender never builds that.
            raise _bad(f"partitions[{i}]: partition {partition} appears twice")
        seen.add(partition)
        data = body[pos : pos + size]
        if len(data) != size:
            raise _bad(f"body ends inside partition {partition}'s batches")
        pos += size
        parts.append(PartitionBatch(partition, data))
    if pos != len(body):
        raise _bad(f"{len(body) - pos} bytes after the last partition's batches")
    return ProduceRequest(topic, acks, parts)


def _split_header(body: bytes) -> tuple[dict[str, Any], int]:
    if len(body) < _LEN.size:
        raise _bad("body is shorter than its 4-byte header length")
    (n,) = _LEN.unpack_from(body, 0)
    if n > HEADER_BYTES_MAX or _LEN.size + n > len(body):
        raise _bad(f"header length {n} is out of range for a body of {len(body)} bytes")
    try:
        doc = orjson.loads(body[_LEN.size : _LEN.size + n])
    except orjson.JSONDecodeError as exc:
        raise _bad(f"header is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _bad("header must be a JSON object")
    return doc, _LEN.size + n


def _partition_entry(entry: Any, i: int) -> tuple[int, int]:
    if not isinstance(entry, dict):
        raise _bad(f"partitions[{i}] must be an object")
    _exact_keys(entry, _PARTITION_KEYS, f"partitions[{i}]")
    return _count(entry, "partition", i), _count(entry, "bytes", i)


def _count(entry: dict[str, Any], key: str, i: int) -> int:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(f"partitions[{i}].{key} must be an integer >= 0, got {value!r}")
    return value


# -- response --------------------------------------------------------------------------------


def encode_response(outcomes: list[tuple[int, PartitionOutcome]]) -> bytes:
    return orjson.dumps({"partitions": [_outcome_doc(p, o) for p, o in outcomes]})


def _outcome_doc(partition: int, outcome: PartitionOutcome) -> dict[str, Any]:
    if isinstance(outcome, LograftError):
        return {"partition": partition, "error": outcome.to_dict()}
    return {
        "partition": partition,
        "base_offset": outcome.first_offset,
        "last_offset": outcome.last_offset,
        "log_append_time": outcome.log_append_time_ms,
        "duplicate": outcome.duplicate,
    }


def decode_response(body: bytes, partitions: list[int]) -> list[PartitionOutcome]:
    """Outcomes in request order; `partitions` is what the request carried,
    and an answer about any other list is refused."""
    try:
        doc = orjson.loads(body)
        entries = doc["partitions"]
        got = [e["partition"] for e in entries]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise _bad(f"response is not a partitions list: {exc!r}", "response") from None
    if got != partitions:
        raise _bad(f"response names partitions {got}, the request {partitions}", "response")
    return [_outcome(e) for e in entries]


def _outcome(entry: dict[str, Any]) -> PartitionOutcome:
    if "error" in entry:
        _exact_keys(entry, _ERROR_KEYS, f"partition {entry['partition']}", "response")
        return _error_from(entry["error"])
    _exact_keys(entry, _RESULT_KEYS, f"partition {entry['partition']}", "response")
    try:
        return AppendResult(
            int(entry["base_offset"]),
            int(entry["last_offset"]),
            int(entry["log_append_time"]),
            bool(entry["duplicate"]),
        )
    except (TypeError, ValueError) as exc:
        raise _bad(f"partition {entry['partition']}: {exc}", "response") from None


def _error_from(err: Any) -> LograftError:
    """The error as the leader raised it: same class, message and details."""
    try:
        return LograftError.from_dict(err)
    except ValueError as exc:
        raise _bad(str(exc), "response") from None


# -- shared ----------------------------------------------------------------------------------


def _exact_keys(
    doc: dict[str, Any], keys: frozenset[str], where: str, what: str = "request"
) -> None:
    missing = sorted(keys - doc.keys())
    unknown = sorted(doc.keys() - keys)
    if missing or unknown:
        raise _bad(f"{where}: missing fields {missing}, unknown fields {unknown}", what)


def _bad(message: str, what: str = "request") -> InvalidRequestError:
    return InvalidRequestError(f"malformed forwarded produce {what}: {message}")
