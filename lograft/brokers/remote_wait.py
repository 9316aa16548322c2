"""How long a request waited on others: the remote part of its time (Kafka's RemoteTimeMs).

The request metrics (api/metrics/request_metrics.py) put a `RequestClock`
in a context variable for each request they time; the waits below add to
it, wherever they run in that request's task (or a task it started, which
copies the context and so shares the clock):

- an acks=all produce waiting for the in-sync replicas (the high watermark);
- a long-poll (consumer, replica or stream fetch) waiting for data;
- a call to another node made for the request (node/peer_client.py):
  forwarding a produce to its leader, asking the controller, the leaders'
  offsets.

Overlapping waits (a produce forwarded to three leaders at once) count once:
the clock measures from the first wait entered to the last one left.
Without a clock (a task no timed request started) a wait costs one context
variable lookup.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from types import TracebackType

__all__ = ["RequestClock", "current_clock", "remote_wait", "use_clock"]


class RequestClock:
    """One request's times, `time.perf_counter()` seconds."""

    __slots__ = ("_depth", "_since", "handler_at", "remote_s", "started_at")

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        # When its route's handler began (None: not reached, or not marked).
        self.handler_at: float | None = None
        self.remote_s = 0.0
        self._depth = 0
        self._since = 0.0

    def enter(self) -> None:
        if self._depth == 0:
            self._since = time.perf_counter()
        self._depth += 1

    def leave(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.remote_s += time.perf_counter() - self._since


_CURRENT: ContextVar[RequestClock | None] = ContextVar("lograft_request_clock", default=None)


def current_clock() -> RequestClock | None:
    return _CURRENT.get()


def use_clock(clock: RequestClock | None) -> object:
    """Make `clock` the current request's; returns the token `reset_clock` takes."""
    return _CURRENT.set(clock)


def reset_clock(token: object) -> None:
    _CURRENT.reset(token)  # type: ignore[arg-type]


class remote_wait:
    """Count the time inside the block as the current request's remote time."""

    __slots__ = ("_clock",)

    def __enter__(self) -> None:
        self._clock = clock = _CURRENT.get()
        if clock is not None:
            clock.enter()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._clock is not None:
            self._clock.leave()
