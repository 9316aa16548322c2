"""Wire format of replica fetches between brokers (internal HTTP).

Request (`POST /internal/v1/replica-fetch`, JSON)::

    {"replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 8388608,
     "partition_max_bytes": 1048576,
     "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 42,
                     "last_fetched_epoch": 3, "current_leader_epoch": 4,
                     "durable_offset": 40}, ...],
     "session_id": 0, "session_epoch": 0, "forgotten": [["t", 3], ...]}

`durable_offset`: below it the follower's log is fsynced (-1, or left out:
not tracked). A leader under `flush_policy = group_commit` moves its high
watermark by these, not by the fetch offsets (brokers/group_commit.py).

Fetch sessions (Kafka's KIP-227; leader side brokers/fetch_session_cache.py):
`session_id` 0 with `session_epoch` 0 is a full fetch that asks for a
session, with `session_epoch` -1 (the default: older senders) a full fetch
without one. The answer's `session_id` is the session the leader created (0:
none, e.g. its cache is full). Later fetches send that id and the next epoch
(1, 2, ...) and name only the partitions whose fetch state changed or that
join the session, plus `forgotten` ones leaving it; the leader answers only
partitions with news (data, a new high watermark or log start offset, a
diverging epoch, an error). A session the leader does not have, or a wrong
epoch, is answered with the top-level `error` (FETCH_SESSION_ID_NOT_FOUND,
INVALID_FETCH_SESSION_EPOCH) and no partitions: the follower then fetches in
full again.

Response (`application/vnd.lograft.fetch`): a 4-byte big-endian length, that
many bytes of JSON header, then the raw record batches of every partition
concatenated in header order::

    {"partitions": [{"topic": "t", "partition": 0, "high_watermark": 40,
                     "log_start_offset": 0, "log_end_offset": 50,
                     "bytes": 1234,                       length of its batches
                     "diverging": {"epoch": 3, "end_offset": 38} | null,
                     "error": {"code": ..., "message": ...} | null}, ...],
     "session_id": 0, "error": {"code": ..., "message": ...} | null}

Batches travel as the bytes stored on disk: no JSON per record, no re-encode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from lograft.errors import InvalidRequestError, LograftError
from lograft.typed import NonNegative, Positive, Record, decode_json

CONTENT_TYPE = "application/vnd.lograft.fetch"
_LEN = struct.Struct(">I")
# A response header larger than this is refused as corrupt, bytes. It is
# above the header of any answer to a fetch within the default [http]
# request_bytes_max (16 MiB): every partition answered with an error and
# topic names of 249 characters, the largest answer a partition can get,
# take 2.7-2.8 times the bytes that named them, about 45 MiB in all.
# (At 16 MiB, a follower refused the leader's answer to a fetch of more
# than about 43,000-107,000 partitions, by topic name length.)
HEADER_BYTES_MAX = 64 * 1024 * 1024


# The most bytes of a replica fetch request's JSON (`ReplicaFetchRequest.to_json`)
# apart from its partitions, per named partition, and per forgotten one: topic
# names of 249 characters and every number at its widest.
REQUEST_ENVELOPE_BYTES_MAX = 211
NAMED_PARTITION_BYTES_MAX = 423
FORGOTTEN_PARTITION_BYTES_MAX = 265


def partitions_within(request_bytes: int) -> int:
    """How many partitions a follower's fetch may name and forget so that it
    stays within `request_bytes` (a leader's [http] request_bytes_max),
    counting one forgotten partition more (a fetch may forget the partition
    it names alone: replica_fetcher.py); at least 1."""
    room = request_bytes - REQUEST_ENVELOPE_BYTES_MAX - FORGOTTEN_PARTITION_BYTES_MAX
    return max(1, room // NAMED_PARTITION_BYTES_MAX)


# An epoch field the sender left out (Kafka's UNDEFINED_EPOCH).
UNDEFINED_EPOCH = -1

# Fetch session ids and epochs (Kafka's FetchMetadata): no session; the epoch
# of a full fetch asking for a new session; of a full fetch without one.
NO_SESSION_ID = 0
INITIAL_SESSION_EPOCH = 0
SESSIONLESS_EPOCH = -1


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition of a fetch request; -1 means "not sent" for the epochs."""

    fetch_offset: int
    last_fetched_epoch: int = UNDEFINED_EPOCH
    current_leader_epoch: int = UNDEFINED_EPOCH
    # Below this the follower's log is fsynced; -1: not tracked.
    durable_offset: int = -1


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
    session_id: int = NO_SESSION_ID
    session_epoch: int = SESSIONLESS_EPOCH
    # Partitions leaving an incremental session.
    forgotten: tuple[tuple[str, int], ...] = ()

    @property
    def incremental(self) -> bool:
        return self.session_id != NO_SESSION_ID

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
                        "durable_offset": p.fetch.durable_offset,
                    }
                    for p in self.partitions
                ],
                "session_id": self.session_id,
                "session_epoch": self.session_epoch,
                "forgotten": self.forgotten,
            }
        )

    @classmethod
    def from_json(cls, body: bytes) -> ReplicaFetchRequest:
        doc = decode_json(
            body,
            _ReplicaFetchBody,
            error=InvalidRequestError,
            where="replica fetch request",
        )
        return cls(
            doc.replica_id,
            doc.max_wait_ms,
            doc.min_bytes,
            doc.max_bytes,
            doc.partition_max_bytes,
            [
                FetchPartitionRequest(
                    p.topic,
                    p.partition,
                    PartitionFetch(
                        p.fetch_offset,
                        p.last_fetched_epoch,
                        p.current_leader_epoch,
                        p.durable_offset,
                    ),
                )
                for p in doc.partitions
            ],
            doc.session_id,
            doc.session_epoch,
            tuple(doc.forgotten),
        )


# The JSON of a request and of a response header, as typed Records (the
# defaults are those older senders relied on).


class _FetchPartitionBody(Record, frozen=True, kw_only=True):
    topic: str
    partition: int
    fetch_offset: int
    last_fetched_epoch: int = UNDEFINED_EPOCH
    current_leader_epoch: int = UNDEFINED_EPOCH
    durable_offset: int = -1


class _ReplicaFetchBody(Record, frozen=True, kw_only=True):
    replica_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: Positive = 8 << 20
    partition_max_bytes: Positive = 1 << 20
    partitions: list[_FetchPartitionBody]
    session_id: int = NO_SESSION_ID
    session_epoch: int = SESSIONLESS_EPOCH
    forgotten: list[tuple[str, int]] = msgspec.field(default_factory=list)


class _DivergingHead(Record, frozen=True):
    epoch: int
    end_offset: int


class _PartitionHead(Record, frozen=True, kw_only=True):
    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    size: NonNegative = msgspec.field(name="bytes")
    diverging: _DivergingHead | None = None
    error: dict[str, Any] | None = None


class _ResponseHead(Record, frozen=True, kw_only=True):
    partitions: list[_PartitionHead]
    session_id: int = NO_SESSION_ID
    error: dict[str, Any] | None = None


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


@dataclass(frozen=True, slots=True)
class ReplicaFetchAnswer:
    """A whole answer: its partitions, the fetch session it belongs to
    (NO_SESSION_ID: none) and a session error (then no partitions)."""

    partitions: list[FetchPartitionResponse]
    session_id: int = NO_SESSION_ID
    error: LograftError | None = None


def encode_answer(answer: ReplicaFetchAnswer, *, prefix: bytes = b"") -> bytes:
    """The answer's bytes, after `prefix` (a stream message's head: joined
    once, rather than copying the whole answer to put it in front)."""
    return encode_response(
        answer.partitions, session_id=answer.session_id, error=answer.error, prefix=prefix
    )


def encode_response(
    parts: list[FetchPartitionResponse],
    *,
    session_id: int = NO_SESSION_ID,
    error: LograftError | None = None,
    prefix: bytes = b"",
) -> bytes:
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
    doc: dict[str, Any] = {"partitions": header}
    if session_id != NO_SESSION_ID:
        doc["session_id"] = session_id
    if error is not None:
        doc["error"] = error.to_dict()
    head = orjson.dumps(doc)
    return b"".join([prefix, _LEN.pack(len(head)), head, *(p.data for p in parts)])


def decode_response(body: bytes) -> list[FetchPartitionResponse]:
    return decode_answer(body).partitions


def decode_answer(body: bytes) -> ReplicaFetchAnswer:
    if len(body) < _LEN.size:
        raise InvalidRequestError("replica fetch response is too short")
    (n,) = _LEN.unpack_from(body, 0)
    if n > HEADER_BYTES_MAX or _LEN.size + n > len(body):
        raise InvalidRequestError(
            f"replica fetch response header length {n} is out of range: at most "
            f"{min(HEADER_BYTES_MAX, len(body) - _LEN.size)} bytes (the answer's "
            f"{len(body)} bytes, HEADER_BYTES_MAX {HEADER_BYTES_MAX})"
        )
    doc = decode_json(
        body[_LEN.size : _LEN.size + n],
        _ResponseHead,
        error=InvalidRequestError,
        where="replica fetch response",
    )
    pos = _LEN.size + n
    out: list[FetchPartitionResponse] = []
    for p in doc.partitions:
        data = body[pos : pos + p.size]
        if len(data) != p.size:
            raise InvalidRequestError("replica fetch response ends inside a partition's data")
        pos += p.size
        try:
            error = None if p.error is None else LograftError.from_dict(p.error)
        except ValueError as exc:
            raise InvalidRequestError(f"replica fetch response: {exc}") from None
        div = p.diverging
        out.append(
            FetchPartitionResponse(
                p.topic,
                p.partition,
                p.high_watermark,
                p.log_start_offset,
                p.log_end_offset,
                data,
                None if div is None else EpochEndOffset(div.epoch, div.end_offset),
                error,
            )
        )
    try:
        session_error = None if doc.error is None else LograftError.from_dict(doc.error)
    except ValueError as exc:
        raise InvalidRequestError(f"replica fetch response: {exc}") from None
    return ReplicaFetchAnswer(out, doc.session_id, session_error)
