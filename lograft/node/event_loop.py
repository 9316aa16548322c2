"""The node's event loop: asyncio's own or uvloop's (`event_loop` in the node config).

uvloop (libuv, with TLS in Cython) runs the same asyncio API; the node's
TLS listener (api/connection_guard.py's `loop.start_tls`), aiohttp's server
and client, the signal handlers and the loop-lag probe run on either. Threads
that run loops of their own (the heartbeat thread, the client's loop thread)
keep asyncio's. docs/benchmarks.md ("Security") has what it changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

EventLoopName = Literal["asyncio", "uvloop"]
T = TypeVar("T")


def loop_factory(name: EventLoopName) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of the kind `name`."""
    if name == "uvloop":
        import uvloop  # imported only when chosen

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run_on(name: EventLoopName, main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on a new loop of the kind `name`."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        return runner.run(main)


def running_loop_name() -> EventLoopName:
    """The kind of the loop this runs on (what /healthz reports)."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.partition(".")[0] == "uvloop" else "asyncio"
