"""The one place that turns lograft errors into HTTP responses.

Body shape, for every error::

    {"error": {"code": "NOT_LEADER_OR_FOLLOWER", "message": "...",
               "retriable": true, "details": {...}}}

`code` is stable and documented; `message` is for a person; `details` is
machine-readable context (a leader's address, a valid offset range, a limit).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
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
# Where the app's handlers log client faults (`ClientFaultLog`); the node sets
# it with its `[http] client_fault_log_interval_ms`.
CLIENT_FAULTS_KEY = web.AppKey("client_faults", ClientFaultLog)
_DEFAULT_FAULTS = ClientFaultLog()

_STATUS: dict[type[e.LograftError], int] = {
    e.InvalidRequestError: 400,
    e.InvalidConfigError: 400,
    e.CorruptRecordError: 400,
    e.InvalidRecordError: 400,
    e.InvalidTimestampError: 400,
    e.InvalidTopicError: 400,
    e.InvalidPartitionsError: 400,
    e.InvalidReplicationFactorError: 400,
    # 403: understood and valid, but refused whoever asks (not an auth failure).
    e.InternalTopicProtectedError: 403,
    e.UnsupportedCompressionError: 400,
    e.RecordTooLargeError: 413,
    e.UnknownTopicOrPartitionError: 404,
    e.TopicAlreadyExistsError: 409,
    # 416 Range Not Satisfiable: the offset is outside [log start, log end];
    # details carry the valid range.
    e.OffsetOutOfRangeError: 416,
    # 421 Misdirected Request: the right server exists; details name it.
    e.NotLeaderOrFollowerError: 421,
    e.NotControllerError: 421,
    e.FencedLeaderEpochError: 409,
    e.UnknownLeaderEpochError: 409,
    e.StaleBrokerEpochError: 409,
    e.InvalidUpdateVersionError: 409,
    e.IneligibleReplicaError: 409,
    e.OutOfOrderSequenceError: 409,
    e.InvalidProducerEpochError: 409,
    e.UnknownProducerIdError: 409,
    e.ProducerIdNotAllocatedError: 409,
    e.NotEnoughReplicasError: 503,
    e.NotEnoughReplicasAfterAppendError: 503,
    e.LeaderNotAvailableError: 503,
    e.BrokerNotAvailableError: 503,
    e.StorageError: 503,
    e.LogClosedError: 503,
    e.StreamsLimitReachedError: 503,
    e.ConnectionsLimitReachedError: 503,
    e.RequestBytesInflightLimitReachedError: 503,
    # 408: the client did not send its body in time (the node closes after).
    e.RequestBodyTimeoutError: 408,
    # 415: content the node does not take (a Content-Encoding on a body).
    e.UnsupportedContentEncodingError: 415,
    e.RequestTimedOutError: 504,
    # Consumer groups. 421 as for data: the right coordinator exists and
    # details name it; 409 for a member whose epoch or id no longer fits.
    e.NotCoordinatorError: 421,
    e.CoordinatorLoadInProgressError: 503,
    e.CoordinatorNotAvailableError: 503,
    e.InvalidGroupIdError: 400,
    e.UnsupportedAssignorError: 400,
    e.OffsetMetadataTooLargeError: 400,
    e.GroupIdNotFoundError: 404,
    e.NoOffsetError: 404,
    e.UnknownMemberIdError: 409,
    e.FencedMemberEpochError: 409,
    e.StaleMemberEpochError: 409,
    e.OutOfOrderHeartbeatError: 409,
    e.NonEmptyGroupError: 409,
    e.GroupMaxSizeReachedError: 409,
    e.GroupsLimitReachedError: 409,
}


# Defined with the other errors so that one node (or a client) re-raises them
# as themselves from another's answer, not as UNKNOWN_SERVER_ERROR.
UnauthorizedError = e.UnauthorizedError
NotFoundError = e.NotFoundError
MethodNotAllowedError = e.MethodNotAllowedError


_STATUS[UnauthorizedError] = 401
_STATUS[NotFoundError] = 404
_STATUS[MethodNotAllowedError] = 405


def status_for(error: e.LograftError) -> int:
    for cls in type(error).__mro__:
        status = _STATUS.get(cls)  # type: ignore[arg-type]
        if status is not None:
            return status
    return 500


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
    return web.Response(
        status=status_for(error), body=render_error(error), content_type="application/json"
    )


def raw_error_response(error: e.LograftError) -> bytes:
    """The whole HTTP/1.1 response for `error`, with `Connection: close`: for
    answering below aiohttp, on a connection refused before its request is read."""
    status = status_for(error)
    body = render_error(error)
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error leaves as the JSON body above; nothing leaks a traceback.

    What a client causes (a body that does not parse, a connection dropped
    before the answer) is a client fault: 400, or nothing to answer, and a
    rate-limited log line. Anything else is logged with its traceback: 500."""
    try:
        return await handler(request)
    except e.LograftError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error_response(_from_http(exc, request))
        if exc.status == 405 and "Allow" in exc.headers:
            # RFC 9110: a 405 lists the methods the resource does allow.
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception as exc:  # the last line of defence: log and answer 500
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
        request.app.logger.exception("unhandled error in %s %s", request.method, request.path)
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
