"""Request bodies: read whole before the handler, within a node-wide budget and a deadline.

A body can be `request_bytes_max` (16 MiB) and a node holds up to
`connections_max` connections, so without more, bodies alone could ask for
tens of GiB at once. Every request body is therefore read here, by the
innermost middleware, before its handler runs (`request.read()`, `.json()`
and `.text()` then return it; `request.content` is spent), under three rules
(`[http]` in the node config, docs/api.md "Request bodies"):

- **Budget** (`request_bytes_inflight_max`): a body's bytes are taken from a
  node-wide budget before it is read and given back when its handler returns,
  on every path. A body that announces its length (`Content-Length`) takes it
  all up front; a chunked one takes what it has received as it grows. As
  Kafka's `queued.max.request.bytes` stops reading from sockets while the
  queued requests' bytes are over the limit, a body that does not fit is left
  unread (its client is held back by TCP) until room comes free, for at most
  `request_bytes_inflight_wait_ms`; then it is answered `503
  REQUEST_BYTES_INFLIGHT_LIMIT_REACHED` (retriable). Unlike Kafka the wait is
  bounded, so a client learns what happened instead of timing out. A chunked
  body that does not fit is refused at once: it already holds part of the
  budget, and holders that wait for more can wait on each other.
  Bodies of at most `UNCOUNTED_BODY_BYTES_MAX` are not counted: every
  connection may buffer that much anyway (aiohttp's read buffer), and so a
  small request (a JSON produce of a few records, a heartbeat) is never held
  up behind large ones.
- **Two budgets, one size**: authenticated node-to-node requests
  (`/internal/`, behind the cluster secret, checked before this middleware)
  take from a budget of their own. A client produce holds its body while its
  node forwards it to the partition's leader (`POST /internal/v1/produce`);
  if the leader's forwarded bodies needed room in the budget its own clients
  fill, two nodes full of client bodies forwarding to each other would wait
  on each other until every one is refused. Internal requests never make
  further internal requests that carry bodies, so the internal budget has no
  such cycle. What peers send is bounded anyway: a node forwards only bodies
  it holds under its own client budget.
- **Deadline** (`body_read_timeout_ms`): a body must arrive whole within this
  long of the node starting to read it (after any wait for the budget), or
  it is answered `408 REQUEST_BODY_TIMEOUT` and the connection is closed.
  Without it a client that sends its headers and then a byte now and then
  would hold its connection and its share of the budget for as long as it
  likes. A body already whole when the node starts to read it (a small
  one arrives with its headers) is read without arming the deadline's
  timer: its read cannot wait.

Bodies are taken only as they are: a `Content-Encoding` other than
`identity`, or a `Transfer-Encoding` other than `chunked`, is answered `415
UNSUPPORTED_CONTENT_ENCODING` before anything is read (the listener turns
off aiohttp's own decompression, http_server.py).
Decompressing would let a small body grow past every limit above, and what
is worth compressing, records, is compressed inside their batches.

A body longer than `request_bytes_max` is answered `413 MESSAGE_TOO_LARGE`,
before reading when `Content-Length` says so. Only produce requests
(`FULL_SIZE_BODY_ROUTES`) and node-to-node requests may be that long: every
other body (group join, sync, heartbeat and commit, admin and config
changes) is JSON that no legitimate client makes larger than a few
kilobytes, decoded on the event loop in one C call that cannot be moved off
it (msgspec, into the body's Records of request_shapes, holds the GIL
throughout, so a worker thread would not free the loop), so it is held to
`admin_request_bytes_max` (1 MiB: about 10 ms of decoding) and answered the
same 413 past it. Every refusal above carries
`Connection: close`: the body is left unread, and the listener reads and
drops what is left of it for a short while (`UNREAD_BODY_DRAIN_MS`,
http_server.py) so that the answer reaches the client, then closes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import hdrs, web

from lograft import errors as e
from lograft.api.app import INTERNAL_PREFIX
from lograft.api.byte_budget import ByteBudget
from lograft.api.client_faults import BODY_TIMEOUT, REQUEST_BYTES_LIMIT, ClientFaultLog, quote
from lograft.api.http_errors import error_response

# Bodies up to this size take nothing from the budget, bytes: no more than
# the read buffer every connection has anyway (http_server.py passes it to
# aiohttp as `read_bufsize`).
UNCOUNTED_BODY_BYTES_MAX = 64 * 1024
# The routes whose bodies may be `request_bytes_max` long (produce: records);
# every other public route's body is held to `admin_request_bytes_max`.
FULL_SIZE_BODY_ROUTES = frozenset(
    {"/v1/topics/{topic}/records", "/v1/topics/{topic}/partitions/{partition}/batches"}
)
# Content-Encoding values that mean "as it is".
_IDENTITY = frozenset({"", "identity"})


@dataclass(slots=True)
class _Held:
    """The bytes one request holds of its budget."""

    budget: ByteBudget
    size: int = 0

    def release(self) -> None:
        self.budget.give_back(self.size)
        self.size = 0


class RequestBodies:
    """The node's request-body budgets and the middleware that reads bodies under them."""

    def __init__(
        self,
        *,
        request_bytes_max: int,
        request_bytes_inflight_max: int,
        admin_request_bytes_max: int | None = None,
        request_bytes_inflight_wait_ms: int,
        body_read_timeout_ms: int,
        faults: ClientFaultLog,
    ) -> None:
        self.request_bytes_max = request_bytes_max
        self.admin_request_bytes_max = min(
            admin_request_bytes_max or request_bytes_max, request_bytes_max
        )
        self.inflight_max = request_bytes_inflight_max
        self.wait_ms = request_bytes_inflight_wait_ms
        self.read_timeout_ms = body_read_timeout_ms
        self.faults = faults
        self.clients = ByteBudget(request_bytes_inflight_max)
        self.peers = ByteBudget(request_bytes_inflight_max)
        # Observable (tests, and anyone debugging memory).
        self.refused_total = 0
        self.timeouts_total = 0

    def middleware(self) -> Any:
        """The innermost middleware: after routing and the cluster-secret check."""

        @web.middleware
        async def bounded_body(request: web.Request, handler: Any) -> web.StreamResponse:
            if not request.body_exists or request.match_info.http_exception is not None:
                return await handler(request)  # no body, or a 404/405 that reads none
            taken = await self.take(request)
            if isinstance(taken, web.Response):
                return taken
            try:
                return await handler(request)
            finally:
                taken.release()

        return bounded_body

    async def take(self, request: web.Request) -> _Held | web.Response:
        """Read the body of `request` (which has one, and a route) under the
        rules above: what it holds of its budget, which the caller gives back
        (`release()`) once the handler returns, or the refusal to answer."""
        held = _Held(self.peers if request.path.startswith(INTERNAL_PREFIX) else self.clients)
        try:
            body = await self._receive(request, held)
        except (
            e.UnsupportedContentEncodingError,
            e.RecordTooLargeError,
            e.RequestBytesInflightLimitReachedError,
            e.RequestBodyTimeoutError,
        ) as refused:
            held.release()
            response = error_response(refused)
            response.force_close()  # the rest of the body is not read
            if isinstance(refused, e.UnsupportedContentEncodingError):
                # What a 415 for a coding names (RFC 9110, 12.5.3).
                response.headers[hdrs.ACCEPT_ENCODING] = "identity"
            return response
        except BaseException:
            held.release()
            raise
        # What request.read() (and .json(), .text()) return from now on:
        # aiohttp's own cache of the body (a declared attribute of its
        # requests since 3.x; test_request_bodies.py checks it). A
        # handler must read its body that way, never from
        # request.content, which is spent.
        request._read_bytes = body
        return held

    def _limit(self, request: web.Request) -> tuple[int, str]:
        """The longest body this request may have, and the setting's name."""
        full = self.request_bytes_max, "request_bytes_max"
        if self.admin_request_bytes_max >= self.request_bytes_max:
            return full  # the smaller limit is not smaller: name the one that binds
        if request.path.startswith(INTERNAL_PREFIX):
            return full
        route = request.match_info.route.resource
        if route is not None and route.canonical in FULL_SIZE_BODY_ROUTES:
            return full
        return self.admin_request_bytes_max, "admin_request_bytes_max"

    async def _receive(self, request: web.Request, held: _Held) -> bytes:
        _check_codings(request)
        limit = self._limit(request)
        length = request.content_length
        if length is not None and length > limit[0]:
            raise self._too_large(limit)
        if length is not None and length > UNCOUNTED_BODY_BYTES_MAX:
            if not await held.budget.take(length, self.wait_ms / 1000):
                raise self._over_budget(request, length)
            held.size = length
        if request.content.is_eof():
            # All of it is here already (a small body comes in the headers'
            # read): reading cannot wait, so no deadline timer is armed.
            return await self._read(request, held, limit)
        try:
            async with asyncio.timeout(self.read_timeout_ms / 1000):
                return await self._read(request, held, limit)
        except TimeoutError:
            self.timeouts_total += 1
            self.faults.event(
                BODY_TIMEOUT,
                "%s %s from %s: the body did not arrive within %d ms (body_read_timeout_ms)",
                request.method,
                quote(request.path),
                request.remote,
                self.read_timeout_ms,
            )
            raise e.RequestBodyTimeoutError(
                f"the request body did not arrive within {self.read_timeout_ms} ms "
                "(body_read_timeout_ms); send it faster, or smaller",
                body_read_timeout_ms=self.read_timeout_ms,
            ) from None

    async def _read(self, request: web.Request, held: _Held, limit: tuple[int, str]) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while chunk := await request.content.readany():
            size += len(chunk)
            if size > limit[0]:
                raise self._too_large(limit)
            if size > held.size and size > UNCOUNTED_BODY_BYTES_MAX:
                # A chunked body, past the uncounted size: take what it grew by,
                # never waiting while holding part of the budget.
                if not held.budget.try_take(size - held.size):
                    raise self._over_budget(request, size)
                held.size = size
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def _too_large(limit: tuple[int, str]) -> e.RecordTooLargeError:
        size, name = limit
        return e.RecordTooLargeError(
            f"request body exceeds the limit of {size} bytes ({name})", **{name: size}
        )

    def _over_budget(
        self, request: web.Request, size: int
    ) -> e.RequestBytesInflightLimitReachedError:
        self.refused_total += 1
        self.faults.event(
            REQUEST_BYTES_LIMIT,
            "%s %s from %s: no room for a body of %d bytes (request_bytes_inflight_max)",
            request.method,
            quote(request.path),
            request.remote,
            size,
        )
        return e.RequestBytesInflightLimitReachedError(
            f"this node already holds {self.inflight_max} bytes of request bodies "
            "(request_bytes_inflight_max); retry later or use another node",
            request_bytes_inflight_max=self.inflight_max,
        )


def _check_codings(request: web.Request) -> None:
    """Refuse a body that is coded (compressed): it is taken only as it is."""
    content = request.headers.get(hdrs.CONTENT_ENCODING, "").strip().lower()
    if content not in _IDENTITY:
        raise _coded(f"Content-Encoding {content[:40]!r}")
    # aiohttp reads chunked framing and ignores any other transfer coding,
    # which would hand the handler bytes still coded.
    transfer = request.headers.get(hdrs.TRANSFER_ENCODING)
    if transfer is not None and transfer.strip().lower() != "chunked":
        raise _coded(f"Transfer-Encoding {transfer[:40]!r}")


def _coded(what: str) -> e.UnsupportedContentEncodingError:
    return e.UnsupportedContentEncodingError(
        f"request bodies are taken as they are: {what} is not accepted; send the body "
        "uncompressed (records are compressed inside their batches: compression_type)",
        accepted="identity",
    )
