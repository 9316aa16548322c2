"""aiohttp's own error answers, given lograft's JSON error body.

Some requests never reach the application's middlewares, so the error
middleware (http_errors.py) cannot answer them:

- a request line or header that does not parse (garbage, a TLS handshake on
  the plain port, an over-long line): aiohttp's protocol answers it itself
  through `RequestHandler.handle_error`, in plain text;
- an `Expect` header other than `100-continue`: aiohttp's application raises
  `417` before any middleware runs.

`JsonErrorRequestHandler` overrides `handle_error` and `json_http_errors`
wraps the server's request handler, so these too answer the JSON body of
every other error: `400 INVALID_REQUEST` (Kafka's code for a request the
broker cannot make sense of), with a message saying what did not parse. Both
hooks are in aiohttp since 3.9, the lower bound in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.web_request import BaseRequest

from lograft import errors as e
from lograft.api.client_faults import describe, quote, redact_request_bytes
from lograft.api.http_errors import error_response

Handler = Callable[[BaseRequest], Awaitable[web.StreamResponse]]
# Longest description of what did not parse in an answer, characters.
MESSAGE_CHARS_MAX = 200


class JsonErrorRequestHandler(web.RequestHandler):
    """aiohttp's HTTP/1.1 protocol, answering its own errors in JSON."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's own: logs the error (through the server's logger, which
        # makes a malformed request a client fault), and raises if part of an
        # answer has gone out already. Its plain-text answer is dropped.
        super().handle_error(request, status, exc, message)
        response = error_response(protocol_error(status, exc, message))
        response.force_close()  # as aiohttp's own: the rest cannot be trusted
        return response


def protocol_error(status: int, exc: BaseException | None, message: str | None) -> e.LograftError:
    """The lograft error for an answer aiohttp's protocol would give."""
    if status < 500:
        # aiohttp's message (without the status it prefixes to str(exc)),
        # quoting the bytes at fault: on one line, bounded.
        what = " ".join((message or (describe(exc) if exc else "bad request")).split())
        # Never the request's bytes: a header line may be a credential.
        what = redact_request_bytes(what)
        if len(what) > MESSAGE_CHARS_MAX:
            what = what[:MESSAGE_CHARS_MAX] + "..."
        return e.InvalidRequestError(f"the request is not valid HTTP/1.1: {what}")
    if status == 504:
        return e.RequestTimedOutError("the request took too long to handle")
    return e.LograftError("internal error; see the node's log")


def json_http_errors(handler: Handler) -> Handler:
    """`handler` (the application's), with an HTTP error raised outside every
    middleware (aiohttp's `417` for an unknown `Expect`) answered in JSON."""

    async def handle(request: BaseRequest) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            what = quote(exc.text or exc.reason)
            return error_response(e.InvalidRequestError(f"the request cannot be served: {what}"))

    return handle
