"""The one place that turns lograft errors into HTTP responses.

Body shape, for every error::

    {"error": {"code": "NOT_LEADER_OR_FOLLOWER", "message": "...",
               "retriable": true, "details": {...}}}

`code` is stable and documented; `message` is for a person; `details` is
machine-readable context (a leader's address, a valid offset range, a limit).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from types import MappingProxyType
from typing import Any

import orjson
from aiohttp import web

from lograft import errors as e
from lograft.api.client_faults import (
    CLIENT_DISCONNECTED,
    ClientFaultLog,
    client_fault_kind,
    describe,
    quote,
)

log = logging.getLogger(__name__)

REQUEST_BYTES_MAX_KEY = web.AppKey("request_bytes_max", int)
# Where an error answer carries its error's code (a response's own mapping).
ERROR_CODE_KEY = web.ResponseKey("lograft.error_code", str)
# Where the app's handlers log client faults (`ClientFaultLog`); the node sets
# it with its `[http] client_fault_log_interval_ms`.
CLIENT_FAULTS_KEY = web.AppKey("client_faults", ClientFaultLog)
_DEFAULT_FAULTS = ClientFaultLog()

# Every registered error class has its status here, chosen for what the
# error means (tests/unit/api/test_error_status_map.py fails for a class left
# out, and for a retriable error answered with 500). What a status says:
# 4xx the request must change (or, 409, the state it assumed has moved on);
# 421 the right node exists and `details` name it; 503 this node cannot do it
# now, retry after `Retry-After` seconds (every 503 is retriable); 504 the
# request went out to replicas or the quorum and its outcome is unknown;
# 500 a fault of the server itself (a record that should never have been
# written, a Raft that cannot start), never the client's doing.
_STATUS: dict[type[e.LograftError], int] = {
    # -- input and request errors
    e.InvalidRequestError: 400,
    e.InvalidConfigError: 400,
    e.CorruptRecordError: 400,
    e.InvalidRecordError: 400,
    e.InvalidTimestampError: 400,
    e.InvalidTopicError: 400,
    e.InvalidPartitionsError: 400,
    e.InvalidReplicationFactorError: 400,
    e.UnsupportedCompressionError: 400,
    # 403: understood and valid, but refused whoever asks (not an auth failure).
    e.InternalTopicProtectedError: 403,
    e.ResourceNotFoundError: 404,
    e.RecordTooLargeError: 413,
    e.UnknownTopicOrPartitionError: 404,
    e.TopicAlreadyExistsError: 409,
    # 416 Range Not Satisfiable: the offset is outside [log start, log end];
    # details carry the valid range.
    e.OffsetOutOfRangeError: 416,
    # -- storage faults: the disk, not the request; retry once it recovers.
    e.StorageError: 503,
    e.LogClosedError: 503,
    # -- replication and cluster
    # 421 Misdirected Request: the right server exists; details name it.
    e.NotLeaderOrFollowerError: 421,
    e.NotControllerError: 421,
    e.NotEnoughReplicasError: 503,
    e.NotEnoughReplicasAfterAppendError: 503,
    e.LeaderNotAvailableError: 503,
    e.BrokerNotAvailableError: 503,
    e.RequestTimedOutError: 504,
    # 409: the epoch, version or sequence the request assumed has moved on.
    e.FencedLeaderEpochError: 409,
    e.UnknownLeaderEpochError: 409,
    e.FetchSessionIdNotFoundError: 409,
    e.InvalidFetchSessionEpochError: 409,
    e.StaleBrokerEpochError: 409,
    e.InvalidUpdateVersionError: 409,
    e.IneligibleReplicaError: 409,
    e.OutOfOrderSequenceError: 409,
    e.InvalidProducerEpochError: 409,
    e.UnknownProducerIdError: 409,
    e.ProducerIdNotAllocatedError: 409,
    # -- the Raft quorum adapter (seen through controller calls)
    # 504 as REQUEST_TIMED_OUT: the entry went to the quorum and may or may not
    # be committed; a 503 would say it was not.
    e.RaftCommitOutcomeUnknownError: 504,
    # Back-pressure and a stopped adapter: nothing was appended; retry.
    e.RaftQueueFullError: 503,
    e.RaftStoppedError: 503,
    e.RaftStartupError: 500,
    # -- metadata quorum. A record that does not decode or replay is a
    # controller bug, never the caller's input (inputs are INVALID_REQUEST).
    e.MetadataRecordError: 500,
    e.UnknownMetadataRecordTypeError: 500,
    e.UnsupportedMetadataRecordVersionError: 500,
    # Another incarnation of the broker still holds a live session: a conflict
    # with state that resolves itself when that session expires (retriable).
    e.DuplicateBrokerRegistrationError: 409,
    # Kafka's answer to a heartbeat from an unknown broker: register again;
    # like UNKNOWN_MEMBER_ID for a group member.
    e.BrokerIdNotRegisteredError: 409,
    e.IsrWithoutLeaderError: 400,
    # -- consumer groups. 421 as for data: the right coordinator exists and
    # details name it; 409 for a member whose epoch or id no longer fits.
    e.NotCoordinatorError: 421,
    e.CoordinatorLoadInProgressError: 503,
    e.CoordinatorNotAvailableError: 503,
    e.InvalidGroupIdError: 400,
    e.UnsupportedAssignorError: 400,
    e.OffsetMetadataTooLargeError: 400,
    e.GroupSubscriptionTooLargeError: 400,
    e.GroupIdNotFoundError: 404,
    e.NoOffsetError: 404,
    e.UnknownMemberIdError: 409,
    e.FencedMemberEpochError: 409,
    e.StaleMemberEpochError: 409,
    e.OutOfOrderHeartbeatError: 409,
    e.NonEmptyGroupError: 409,
    e.GroupMaxSizeReachedError: 409,
    e.GroupsLimitReachedError: 409,
    # A __consumer_offsets record that does not decode or replay: a
    # coordinator bug, as for metadata records.
    e.GroupRecordError: 500,
    # -- limits of this node: another node, or this one shortly, can serve it.
    e.StreamsLimitReachedError: 503,
    e.ConnectionsLimitReachedError: 503,
    e.RequestBytesInflightLimitReachedError: 503,
    # 408: the client did not send its body in time (the node closes after).
    e.RequestBodyTimeoutError: 408,
    # 415: content the node does not take (a Content-Encoding on a body).
    e.UnsupportedContentEncodingError: 415,
    # -- authorization: the caller is known and may not (api/access.py).
    e.TopicAuthorizationFailedError: 403,
    e.GroupAuthorizationFailedError: 403,
    e.ClusterAuthorizationFailedError: 403,
    # 429 Too Many Requests: over a client quota by more than the node delays
    # an answer for; Retry-After says when (api/quota_gate.py).
    e.ThrottlingQuotaExceededError: 429,
    # -- HTTP itself
    # 401: the caller did not prove who it is (details.reason says why).
    e.SaslAuthenticationFailedError: 401,
    e.NotFoundError: 404,
    e.MethodNotAllowedError: 405,
    # UNKNOWN_SERVER_ERROR: an unexpected exception of the node's own.
    e.LograftError: 500,
}

# The deliberate status of each error class, for the test that checks every
# class has one and for the docs; read-only.
STATUS_BY_CLASS: Mapping[type[e.LograftError], int] = MappingProxyType(_STATUS)

# Seconds a client should wait before retrying after a 503 (RFC 9110
# Retry-After; whole seconds only). Kafka clients back off 100 ms
# (`retry.backoff.ms`); one second is the smallest the header can say.
RETRY_AFTER_S = 1

# Defined with the other errors so that one node (or a client) re-raises them
# as themselves from another's answer, not as UNKNOWN_SERVER_ERROR.
SaslAuthenticationFailedError = e.SaslAuthenticationFailedError
NotFoundError = e.NotFoundError
MethodNotAllowedError = e.MethodNotAllowedError


def status_for(error: e.LograftError) -> int:
    """The HTTP status of `error`: its class's entry above. A class outside the
    registry (a code from a newer node relayed through this one, a module's
    private error) takes its nearest mapped ancestor's status, but a retriable
    error is never a 500: it is a 503, so the client retries."""
    status = _STATUS.get(type(error))
    if status is not None:
        return status
    status = next(_STATUS[c] for c in type(error).__mro__ if c in _STATUS)
    return 503 if status == 500 and error.retriable else status


def _headers(status: int, error: e.LograftError) -> dict[str, str]:
    if status == 503:
        return {"Retry-After": str(RETRY_AFTER_S)}
    if status == 429:
        return {"Retry-After": str(retry_after_s(error.details.get("retry_after_ms")))}
    return {}


def retry_after_s(retry_after_ms: object) -> int:
    """Retry-After in whole seconds (RFC 9110), rounded up so a client that
    waits it is never early; at least 1."""
    if not isinstance(retry_after_ms, int) or isinstance(retry_after_ms, bool):
        return RETRY_AFTER_S
    return max(1, -(-retry_after_ms // 1000))


def error_dict(error: e.LograftError) -> dict[str, Any]:
    """`error.to_dict()` with only what JSON can carry, for an error embedded
    in a larger body (per-record and per-partition outcomes)."""
    body = error.to_dict()
    try:
        orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _renderable(body)
    return body


def error_body(error: e.LograftError) -> dict[str, Any]:
    return {"error": error_dict(error)}


def render_error(error: e.LograftError) -> bytes:
    """The JSON error body of `error`; never raises. A detail orjson cannot
    encode (an integer beyond 64 bits, a lone surrogate, an object) is left
    out rather than turning the answer into a failure of its own."""
    try:
        return orjson.dumps({"error": error.to_dict()})
    except Exception:
        pass
    try:
        return orjson.dumps({"error": _renderable(error.to_dict())})
    except Exception:
        log.exception("could not render error %s", type(error).__name__)
        return _LAST_RESORT


def _renderable(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "code": _text(body.get("code")),
        "message": _text(body.get("message")),
        "retriable": body.get("retriable") is True,
    }
    details = body.get("details")
    if isinstance(details, dict):
        kept: dict[str, Any] = {}
        for key, value in details.items():
            try:
                orjson.dumps({key: value})
            except TypeError:
                continue
            kept[key] = value
        dropped = sorted(str(k) for k in set(details) - set(kept))
        if dropped:
            # Only a value that slipped past validation gets here: say which.
            log.warning("error %s: details %s left out: not JSON", out["code"], dropped)
        if kept:
            out["details"] = kept
    return out


def _text(value: Any) -> str:
    """`value` as a str that UTF-8 (and so JSON) can carry."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


# The answer when even an error's code and message cannot be rendered (which
# _renderable rules out): the middleware's last line.
_LAST_RESORT = orjson.dumps(
    {
        "error": {
            "code": e.LograftError.code,
            "message": "internal error while rendering an error; see the node's log",
            "retriable": False,
        }
    }
)


def error_response(error: e.LograftError) -> web.Response:
    status = status_for(error)
    response = web.Response(
        status=status,
        body=render_error(error),
        content_type="application/json",
        headers=_headers(status, error),
    )
    # The code, for the request metrics' errors by code (api/metrics/).
    response[ERROR_CODE_KEY] = error.code
    return response


def raw_error_response(error: e.LograftError) -> bytes:
    """The whole HTTP/1.1 response for `error`, with `Connection: close`: for
    answering below aiohttp, on a connection refused before its request is read."""
    status = status_for(error)
    body = render_error(error)
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in _headers(status, error).items())
        + "Connection: close\r\n\r\n"
    )
    return head.encode() + body


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error leaves as the JSON body above; nothing leaks a traceback
    (`error_answer`). The app runs this step in its one request pipeline
    (request_pipeline.py); this middleware is for apps built without it."""
    try:
        return await handler(request)
    except Exception as exc:
        answer = error_answer(exc, request)
        if answer is None:
            raise
        return answer


def error_answer(exc: Exception, request: web.Request) -> web.Response | None:
    """The answer to `exc`, raised while handling `request`; None: not an
    error to answer (an HTTP redirect), the caller re-raises it.

    What a client causes (a body that does not parse, a connection dropped
    before the answer) is a client fault: 400, or nothing to answer, and a
    rate-limited log line. Anything else is logged with its traceback: 500."""
    if isinstance(exc, e.LograftError):
        return error_response(exc)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            return None
        response = error_response(_from_http(exc, request))
        if exc.status == 405 and "Allow" in exc.headers:
            # RFC 9110: a 405 lists the methods the resource does allow.
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    # The last line of defence: log and answer 500.
    fault = _client_fault(exc, request)
    if fault is not None:
        faults = request.app.get(CLIENT_FAULTS_KEY, _DEFAULT_FAULTS)
        faults.event(
            fault,
            "%s %s from %s: %s",
            request.method,
            quote(request.path),
            request.remote,
            describe(exc),
        )
        # A client that is gone reads no answer; aiohttp drops it quietly.
        return error_response(
            e.InvalidRequestError(f"the request could not be read: {describe(exc)}")
        )
    request.app.logger.exception(
        "unhandled error in %s %s", request.method, request.path, exc_info=exc
    )
    return error_response(
        e.LograftError(f"internal error: {type(exc).__name__}; see the node's log")
    )


def _client_fault(exc: Exception, request: web.Request) -> str | None:
    """A client fault's kind, or None. A ConnectionError counts only when the
    client's own connection is gone: a handler's call to another node can
    fail the same way, and that is no fault of the client."""
    kind = client_fault_kind(exc)
    if kind == CLIENT_DISCONNECTED:
        transport = request.transport
        if transport is not None and not transport.is_closing():
            return None
    return kind


def _from_http(exc: web.HTTPException, request: web.Request) -> e.LograftError:
    if exc.status == 404:
        return NotFoundError(f"no route for {request.method} {request.path}")
    if exc.status == 405:
        return MethodNotAllowedError(f"{request.method} is not allowed on {request.path}")
    if exc.status == 413:
        return e.RecordTooLargeError(
            f"request body exceeds the limit of {request.app.get(REQUEST_BYTES_MAX_KEY, '?')} bytes"
        )
    return e.InvalidRequestError(exc.text or exc.reason)
