"""Errors the client raises, and the decoding of the server's error bodies.

Server errors (`{"error": {"code", "message", "retriable", "details"}}`) are
re-raised as the `lograft.errors` class for their code
(`LograftError.from_dict`), with `details` kept, the HTTP status in
`details["http_status"]` and the node that answered in `details["url"]`; a
code this version does not know becomes a `LograftError` subclass carrying
that code and the server's `retriable` flag.

The classes below are client-side conditions with no server code, for this
package and for the `lograft` command line alike (each is defined once,
here). They are deliberately not registered in `lograft.errors`' registry: no
server sends them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import orjson

from lograft.errors import LograftError


class NetworkError(LograftError):
    """The HTTP exchange with a node failed (Kafka's NetworkException).

    `details["sent"]` is False when the connection could not be made (the
    request never reached the node) and True when it broke or timed out after
    the request may have been delivered: the outcome of a produce is unknown.
    """

    code = "NETWORK_EXCEPTION"
    kafka_code = 13
    retriable = True


class ClusterUnreachableError(LograftError):
    """None of the nodes tried (bootstrap URLs and known brokers) could be reached.
    The message and `details` (`errors` here, `tried` from the command line)
    name every URL tried."""

    code = "CLUSTER_UNREACHABLE"
    retriable = True


class ClientTimeoutError(LograftError):
    """A client-side wait ran out (flush, close, metadata, position)."""

    code = "CLIENT_TIMEOUT"
    retriable = True


class DeliveryTimeoutError(ClientTimeoutError):
    """A batch was not acknowledged within `delivery_timeout_ms` of its creation.
    The records may or may not be in the log (a last attempt may have landed)."""

    code = "DELIVERY_TIMEOUT"


class BufferFullError(ClientTimeoutError):
    """`send` waited `max_block_ms` for room in `buffer_memory_bytes` and got none
    (Kafka's BufferExhaustedException)."""

    code = "BUFFER_EXHAUSTED"


class ClientClosedError(LograftError):
    """The producer or consumer is closed (or was closed before this record went out)."""

    code = "CLIENT_CLOSED"


class SerializationError(LograftError):
    """A key or value serializer / deserializer failed; the cause is chained."""

    code = "SERIALIZATION_ERROR"


class NoOffsetForPartitionError(LograftError):
    """A partition has no position and `auto_offset_reset="none"`."""

    code = "NO_OFFSET_FOR_PARTITION"


class CommitFailedError(LograftError):
    """An offset commit was refused for good: this consumer is no longer the
    member that owns the partitions (fenced or removed from the group), so
    another member may have consumed and committed them (Kafka's
    CommitFailedException). The server's error is chained."""

    code = "COMMIT_FAILED"


class OutcomeUnknownError(LograftError):
    """A request that is not safe to repeat (a produce, an admin change) was
    sent, but its answer never came back: it may or may not have taken effect.
    Not retriable: repeating it could apply it twice. (The producer instead
    retries under idempotence; see NetworkError.)"""

    code = "OUTCOME_UNKNOWN"


class UnexpectedResponseError(LograftError):
    """A node answered something that is not the API's response (wrong body or
    status); often a proxy or another service on that port."""

    code = "UNEXPECTED_RESPONSE"


def error_from_response(status: int, body: bytes, url: str) -> LograftError:
    """The typed error for an HTTP answer with status >= 400."""
    try:
        doc: Any = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    try:
        error = LograftError.from_dict(doc.get("error") if isinstance(doc, dict) else None)
    except ValueError:
        snippet = body[:200].decode("utf-8", errors="replace")
        return UnexpectedResponseError(
            f"{url} answered HTTP {status} without an API error body: {snippet!r}",
            http_status=status,
            url=url,
        )
    error.details.setdefault("http_status", status)
    error.details.setdefault("url", node_url(url))
    return error


def node_url(url: str) -> str:
    """`http://h:1/v1/topics/t` -> `http://h:1`: the node that answered."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else url
