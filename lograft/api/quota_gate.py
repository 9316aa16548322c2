"""Client quotas enforced on the public API, as Kafka enforces them.

The quotas (`image.client_quotas`, set with `POST /v1/quotas`) are measured
by `lograft.security.quotas.ClientQuotas`, one per kind, on this node, for
the requests this node received from clients (`/v1/...`). Internal routes
(`/internal/...`: replica fetches, forwarded produces, a stream's reads from
a leader) are never counted: the node that took the client's request counts
it once, wherever the partition's leader is.

What counts, per request, against the quota that applies to its caller (the
principal's name and `X-Lograft-Client-Id`, Kafka's eight-entity precedence):

- `producer_byte_rate`: a produce request's body as received (JSON records
  or raw batches), before anything is written;
- `consumer_byte_rate`: a fetch answer's body as sent, and each block of
  events a stream sends;
- `request_percentage`: the handler's own time: its steps on the event loop
  and the record-work threads it waits for (not the time it waits for I/O,
  other nodes, a long-poll or a throttle); 100 is one thread's worth per
  second. Streams are exempt (their pushes count as consumer bytes).

A request over a quota is answered after the throttle delay, with the delay
in `X-Lograft-Throttle-Ms` (and `throttle_time_ms` in the produce and fetch
JSON answers). The wait holds no lock, thread or connection slot of anyone
else: it is an `asyncio.sleep` in the request's own task, after its work is
done. One whose throttle would exceed `[quotas] throttle_max_ms` is refused
instead: HTTP 429 THROTTLING_QUOTA_EXCEEDED with Retry-After, with nothing
written (a produce is refused before it is appended, and its bytes are
taken back) or read (a fetch or stream is refused before it reads, when the
throttle its caller already owes is over the maximum). A stream is paced:
after each push over the quota it sends `: throttle_ms=N` and waits.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any

from aiohttp import web

from lograft.api.caller import caller_of
from lograft.api.http_errors import error_response
from lograft.api.record_work import WORK_TIME as _WORK_TIME
from lograft.errors import LograftError, ThrottlingQuotaExceededError
from lograft.security.quotas import (
    ClientQuotas,
    QuotaConfig,
    QuotaEntity,
    QuotaKey,
    Throttle,
)

__all__ = [
    "QUOTA_GATE_KEY",
    "THROTTLE_HEADER",
    "QuotaGate",
    "QuotaSource",
    "RequestQuota",
    "request_quota",
    "serve_with_quotas",
]

# The throttle an answer was delayed by, ms (Kafka's throttle_time_ms).
THROTTLE_HEADER = "X-Lograft-Throttle-Ms"
# Only the public API is quota'd; internal routes are the cluster's own.
QUOTA_PREFIX = "/v1/"

QuotaSource = Callable[[], Mapping[QuotaEntity, Mapping[QuotaKey, float]]]
Sleep = Callable[[float], Awaitable[None]]


class QuotaGate:
    """The node's client quotas, kept in step with the metadata image."""

    def __init__(
        self,
        config: QuotaConfig,
        source: QuotaSource,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config
        self._source = source
        self._sleep = sleep
        self.quotas = {key: ClientQuotas(key, config, clock=clock) for key in QuotaKey}
        self._seen: object = _NOTHING
        self._active: frozenset[QuotaKey] = frozenset()

    def sync(self) -> None:
        """Apply the image's quotas when they changed (the image keeps the
        same object while no quota record was replayed). Usage measured so
        far is kept: a changed quota applies to the same budget."""
        current = self._source()
        if current is self._seen:
            return
        self._seen = current
        for key, quotas in self.quotas.items():
            wanted = {entity: values[key] for entity, values in current.items() if key in values}
            have = quotas.quotas()
            for entity in have.keys() - wanted.keys():
                quotas.set(entity, None)
            for entity, value in wanted.items():
                if have.get(entity) != value:
                    quotas.set(entity, value)
        self._active = frozenset(key for key, quotas in self.quotas.items() if quotas.quotas())

    def active(self, key: QuotaKey) -> bool:
        return key in self._active

    @property
    def any_active(self) -> bool:
        return bool(self._active)

    async def sleep(self, ms: int) -> None:
        await self._sleep(ms / 1000)

    def bytes_fitting(self, quota: float) -> int:
        """The most bytes one request may carry at `quota` bytes/s and still
        be throttled no longer than throttle_max_ms when it comes alone: one
        rate span's worth (its shortest) plus throttle_max_ms's."""
        config = self.config
        span_ms = config.window_size_ms * config.rate_span_min_windows
        return max(1, int(quota * (span_ms + config.throttle_max_ms) / 1000))


_NOTHING = object()

# Where the app keeps its gate (absent: no quotas enforced).
QUOTA_GATE_KEY = web.AppKey("lograft.quota_gate", QuotaGate)


class RequestQuota:
    """One request's dealings with the quotas: what it was charged, and the
    throttle its answer carries."""

    def __init__(self, gate: QuotaGate, user: str, client_id: str) -> None:
        self.gate = gate
        self.user = user
        self.client_id = client_id
        self.throttle_ms = 0
        self.waited = False  # the handler waited the throttle itself
        self.time_exempt = False  # a stream: its time is not request time
        self.settled = False
        self.timer: _Timed | None = None
        self.work_time: list[float] = []

    # -- bytes ------------------------------------------------------------------------

    def charge_produce(self, nbytes: int) -> None:
        """Count a produce request's `nbytes` before it is written; over the
        hard limit: taken back and refused (429), so nothing is written."""
        if not self.gate.active(QuotaKey.PRODUCER_BYTE_RATE):
            return
        quotas = self.gate.quotas[QuotaKey.PRODUCER_BYTE_RATE]
        throttle = quotas.record(self.user, self.client_id, nbytes)
        if throttle.capped:
            quotas.unrecord(self.user, self.client_id, nbytes)
            raise self._refusal(throttle, QuotaKey.PRODUCER_BYTE_RATE, nbytes)
        self._add(throttle.ms)

    def check_consume(self) -> None:
        """Before a fetch or stream reads anything: refused (429) when the
        throttle its caller already owes is over the maximum."""
        if not self.gate.active(QuotaKey.CONSUMER_BYTE_RATE):
            return
        quotas = self.gate.quotas[QuotaKey.CONSUMER_BYTE_RATE]
        owed = quotas.record(self.user, self.client_id, 0)
        if owed.capped:
            raise self._refusal(owed, QuotaKey.CONSUMER_BYTE_RATE, 0)

    def consume_bytes_max(self) -> int | None:
        """The most one fetch may read for this caller (None: no consumer
        quota applies): what fits under its quota in one window plus
        throttle_max_ms, so that no single answer needs a longer throttle
        than the maximum (Kafka caps a fetch the same way, at what the quota
        allows in its window: ClientQuotaManager.getMaxValueInQuotaWindow).
        At least one batch is always read, whatever its size."""
        if not self.gate.active(QuotaKey.CONSUMER_BYTE_RATE):
            return None
        found = self.gate.quotas[QuotaKey.CONSUMER_BYTE_RATE].resolve(self.user, self.client_id)
        return None if found is None else self.gate.bytes_fitting(found[1])

    def charge_consume(self, nbytes: int) -> int:
        """Count `nbytes` about to be sent to a consumer; the throttle (ms,
        at most throttle_max_ms) it costs."""
        if not self.gate.active(QuotaKey.CONSUMER_BYTE_RATE):
            return 0
        quotas = self.gate.quotas[QuotaKey.CONSUMER_BYTE_RATE]
        ms = quotas.record(self.user, self.client_id, nbytes).ms
        self._add(ms)
        return ms

    async def pace(self, nbytes: int) -> int:
        """A stream sent `nbytes`: wait the throttle they cost (ms, returned)."""
        ms = self.charge_consume(nbytes)
        if ms > 0:
            await self.gate.sleep(ms)
        return ms

    # -- time -------------------------------------------------------------------------

    def settle(self) -> int:
        """Record the handler's time so far (once) and return the throttle
        its answer carries: the larger of the byte and request-time ones
        (Kafka's max). For the answer's JSON body, built just after."""
        if not self.settled:
            self.settled = True
            if self.timer is not None and not self.time_exempt:
                seconds = self.timer.elapsed() + sum(self.work_time)
                throttle = self.gate.quotas[QuotaKey.REQUEST_PERCENTAGE].record_request_time(
                    self.user, self.client_id, seconds
                )
                self._add(throttle.ms)
        return self.throttle_ms

    async def wait(self) -> dict[str, str]:
        """Settle, wait the throttle now (before a large answer is prepared),
        and the header the answer carries."""
        ms = self.settle()
        self.waited = True
        if ms > 0:
            await self.gate.sleep(ms)
        return throttle_headers(ms)

    def _add(self, ms: int) -> None:
        self.throttle_ms = max(self.throttle_ms, ms)

    def _refusal(self, throttle: Throttle, key: QuotaKey, nbytes: int) -> LograftError:
        config = self.gate.config
        wait_ms = max(1, throttle.wanted_ms - config.throttle_max_ms)
        entity = throttle.entity.describe() if throttle.entity is not None else "?"
        quota = throttle.quota or 0.0
        details: dict[str, Any] = {
            "quota": key.value,
            "quota_value": quota,
            "entity": entity,
            "throttle_time_ms": wait_ms,
            "retry_after_ms": wait_ms,
            "throttle_max_ms": config.throttle_max_ms,
        }
        message = (
            f"over the {key.value} quota of {quota:g} for {entity}: the throttle would be "
            f"{throttle.wanted_ms} ms, more than throttle_max_ms={config.throttle_max_ms}; "
            f"retry after {wait_ms} ms"
        )
        # A request too large for the quota on its own never fits: say so.
        fits = self.gate.bytes_fitting(quota)
        if nbytes > fits:
            details["request_bytes"] = nbytes
            details["request_bytes_max"] = fits
            message += f"; this request alone is {nbytes} bytes, send requests of at most {fits}"
        return ThrottlingQuotaExceededError(message, **details)


# The request served with quotas in this task, and its dealings. A context
# variable, not a key of the request: looking a missing key up in a request
# (no quota set, nearly every request) raised and caught a KeyError, twice
# per produce.
_REQUEST_QUOTA: contextvars.ContextVar[tuple[web.Request, RequestQuota] | None] = (
    contextvars.ContextVar("lograft.request_quota", default=None)
)


def request_quota(request: web.Request) -> RequestQuota | None:
    """The request's quota dealings; None when no quota is enforced for it."""
    found = _REQUEST_QUOTA.get()
    return found[1] if found is not None and found[0] is request else None


def throttle_headers(ms: int) -> dict[str, str]:
    return {THROTTLE_HEADER: str(ms)} if ms > 0 else {}


async def serve_with_quotas(
    gate: QuotaGate, request: web.Request, handler: Any
) -> web.StreamResponse:
    """Count and throttle one public request while some quota is set (the
    caller checked `gate.any_active` after `gate.sync()`)."""
    caller = caller_of(request)
    rq = RequestQuota(gate, caller.user, caller.client_id)
    serving = _REQUEST_QUOTA.set((request, rq))
    token: contextvars.Token[list[float] | None] | None = None
    try:
        if gate.active(QuotaKey.REQUEST_PERCENTAGE):
            token = _WORK_TIME.set(rq.work_time)
            rq.timer = _Timed(handler(request))
            response: web.StreamResponse = await rq.timer
        else:
            response = await handler(request)
    except ThrottlingQuotaExceededError:
        raise  # answered at once: the refusal is the back-off
    except LograftError as exc:
        # An error answer is throttled too (Kafka throttles every answer).
        ms = rq.settle()
        if ms <= 0 or rq.waited:
            raise
        response = error_response(exc)
    finally:
        if token is not None:
            _WORK_TIME.reset(token)
        _REQUEST_QUOTA.reset(serving)
    ms = rq.settle()
    if ms > 0 and not rq.waited and not response.prepared:
        response.headers[THROTTLE_HEADER] = str(ms)
        await gate.sleep(ms)
    return response


class _Timed:
    """Awaits a coroutine and adds up the time of its steps on the event
    loop (the time it runs, not the time it waits)."""

    __slots__ = ("_coro", "_started", "seconds")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.seconds = 0.0
        self._started: float | None = None

    def elapsed(self) -> float:
        """The time so far, the step running now included."""
        running = 0.0 if self._started is None else time.perf_counter() - self._started
        return self.seconds + running

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            self._started = time.perf_counter()
            try:
                if error is not None:
                    step, error = coro.throw(error), None
                else:
                    step = coro.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                self.seconds += time.perf_counter() - self._started
                self._started = None
            try:
                value = yield step
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                value, error = None, exc
