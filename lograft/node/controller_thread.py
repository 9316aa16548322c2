"""The active controller's own thread and event loop (Kafka's controller event thread).

A node with the controller role runs its `ControllerRuntime` here, not on
the main loop: the heartbeats it receives, the broker sessions, the fence
check and the stall watch. With a controller listener configured (the
voter's `controller` address, api/controller_listener.py) the controller
RPCs brokers send are served by this thread's loop as well, so a main loop
held for seconds by produce, fetch and replication (2-6 s at 2,000
partitions under load) neither delays a heartbeat's answer nor makes the
fence check expire a live broker's session.

Ownership, so that no state is raced from two loops:

- the runtime (its lock, sessions, tasks) and the listener live on this
  thread's loop only; they are built, started and stopped there;
- other threads call into it only through `call` (the coroutine runs here,
  `asyncio.run_coroutine_threadsafe`; cancelling the caller cancels it here,
  which the runtime is safe against: controller_runtime.py, "Cancellation");
- they read only `status`, the runtime's immutable `ControllerStatus`, and
  Raft's leadership (read from the Raft thread's last tick);
- the Raft adapter settles this loop's appends on this loop (adapter.py).

The thread lives as long as the node: a voter that is not (or no longer)
the active controller keeps its listener, which answers NOT_CONTROLLER
naming the one that is, as Kafka's inactive controllers do; the runtime
drops its broker sessions when it loses Raft leadership and starts fresh
ones when it gains it again. `stop` closes the listener (open connections
included), stops the runtime's tasks, closes the loop and joins the thread,
on every way out, a failed start included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from lograft.node.loop_lag import LoopLagProbe
from lograft.quorum.controller_runtime import ControllerRuntime, ControllerStatus

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long starting the thread (the runtime, and binding the listener) may take, s.
CONTROLLER_THREAD_START_TIMEOUT_S = 30.0
# How often the controller loop's lag is published for /healthz, s.
LOOP_LAG_PUBLISH_INTERVAL_S = 0.5
# The controller loop's lag probe wakes this often while that loop works, ms
# (node/loop_lag.py: it backs off while the loop idles). Its stalls matter at
# hundreds of ms (a broker heartbeat interval, absorb_stall in
# controller_runtime.py), so 50 ms resolution is enough; the main loop's 20 ms
# probe woke this otherwise idle loop 50 times a second (issue 14).
CONTROLLER_LOOP_LAG_INTERVAL_MS = 50


class Listener(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


# Builds the listener on the controller's loop (None: no controller listener).
ListenerFactory = Callable[[ControllerRuntime], Listener]


class ControllerThread:
    def __init__(
        self,
        runtime: Callable[[], ControllerRuntime],
        listener: ListenerFactory | None = None,
        *,
        name: str = "controller",
    ) -> None:
        self._make_runtime = runtime
        self._make_listener = listener
        self._name = name
        self.runtime: ControllerRuntime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        # The controller loop's lag (loop_lag.py's snapshot), replaced whole
        # by that loop; other threads only read it.
        self._loop_lag: dict[str, float] = {}

    # -- any thread ------------------------------------------------------------------------

    @property
    def status(self) -> ControllerStatus:
        runtime = self.runtime
        return ControllerStatus() if runtime is None else runtime.status

    @property
    def active(self) -> bool:
        runtime = self.runtime
        return runtime is not None and runtime.active

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def loop_lag(self) -> dict[str, float]:
        """How late the controller's loop runs a timer (for /healthz), as of
        its last publication."""
        return dict(self._loop_lag)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def call(self, fn: Callable[[ControllerRuntime], Awaitable[T]]) -> T:
        """`fn(runtime)` run on the controller's loop, awaited from the caller's."""
        loop, runtime = self._loop, self.runtime
        if loop is None or runtime is None:
            raise RuntimeError("the controller thread is not running")

        async def run() -> T:
            return await fn(runtime)

        if loop is _running_loop_or_none():
            return await run()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), loop))

    # -- the starting thread (the node's main loop) ----------------------------------------

    async def start(self, timeout_s: float = CONTROLLER_THREAD_START_TIMEOUT_S) -> None:
        """Start the thread, the runtime and the listener; raise what failed."""
        self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
        self._thread.start()
        started = await asyncio.to_thread(self._started.wait, timeout_s)
        if self._failure is not None or not started:
            await self.stop(timeout_s)
            if self._failure is not None:
                raise self._failure
            raise TimeoutError(f"the controller thread did not start within {timeout_s} s")

    async def stop(self, timeout_s: float = CONTROLLER_THREAD_START_TIMEOUT_S) -> bool:
        """Stop the listener and the runtime, close the loop, join; True if it ended in time."""
        thread = self._thread
        if thread is None:
            return True
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            # RuntimeError: its loop already closed, the thread is ending.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)
        await asyncio.to_thread(thread.join, timeout_s)
        return not thread.is_alive()

    # -- the controller thread -------------------------------------------------------------

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(); after it, logged
            if self._started.is_set():
                log.exception("the controller thread failed")
            self._failure = exc
        finally:
            self._started.set()
            try:
                _cancel_remaining(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        runtime = self._make_runtime()
        listener: Listener | None = None
        probe = LoopLagProbe(
            name="controller event loop", interval_ms=CONTROLLER_LOOP_LAG_INTERVAL_MS
        )
        watch = asyncio.gather(probe.run(), self._publish_lag(probe))
        try:
            await runtime.start()
            self.runtime = runtime
            if self._make_listener is not None:
                listener = self._make_listener(runtime)
                await listener.start()
            self._started.set()
            await self._stopping.wait()
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            try:
                if listener is not None:
                    await listener.stop()
            finally:
                await runtime.stop()

    async def _publish_lag(self, probe: LoopLagProbe) -> None:
        while True:
            self._loop_lag = probe.snapshot()  # a new dict: replaced, never changed
            await asyncio.sleep(LOOP_LAG_PUBLISH_INTERVAL_S)  # the publication period


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await what is left on the loop (as asyncio.run does): a
    commit a cancelled request left running (controller_runtime.py) ends
    here instead of being destroyed pending with the loop."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def _running_loop_or_none() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
