"""An asyncio event loop in a background thread, for the synchronous clients.

`run(coro, timeout_s)` runs a coroutine on the loop and waits for its result
in the calling thread; `call_soon(fn)` schedules a plain callback. Calling
`run` from the loop's own thread would deadlock and raises instead.
`stop()` cancels what is left on the loop, stops it and joins the thread,
which closes its loop itself (async generators, the default executor, the
loop), so `stop()` works from any other thread, one running an event loop of
its own included; `finish_from_inside(coro)` is the same for a callback
running on the loop's thread, which cannot wait for its own loop: it runs
`coro`, then stops the loop, and returns at once. The thread is a daemon so
a forgotten `close()` cannot hang interpreter exit.

The loop is uvloop's by default (the client setting `event_loop`): it runs
the same asyncio API for less CPU, in the HTTP exchanges and in each
`run`'s hand-off between threads; where uvloop cannot be imported (a
platform it does not build on) the standard library's loop is used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from lograft.client.config import EventLoopName
from lograft.client.errors import ClientTimeoutError

T = TypeVar("T")

log = logging.getLogger(__name__)


def new_loop(kind: EventLoopName) -> asyncio.AbstractEventLoop:
    """A new event loop of the kind asked for (uvloop's falls back to asyncio's
    where uvloop is not installed)."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _cancel_started(started: list[Any]) -> None:
    if started and isinstance(started[0], asyncio.Task):
        started[0].cancel()


class LoopThread:
    def __init__(self, name: str, event_loop: EventLoopName = "uvloop") -> None:
        self.loop = new_loop(event_loop)
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._started.wait()
        self._stopped = False

    def _main(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._started.set)
        try:
            loop.run_forever()
        finally:
            # The loop is closed by the thread that runs it: the thread that
            # calls stop() may be running a loop of its own (an async app or
            # a notebook using the sync client), where run_until_complete
            # raises "another loop is running".
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a synchronous client method was called from its own loop thread")
        if self._stopped:
            coro.close()
            raise RuntimeError("the client's loop thread is stopped")
        # One plain lock released when the task is done, rather than
        # run_coroutine_threadsafe's concurrent Future (a Condition, chained
        # callbacks both ways): every sync call, and every Consumer.poll,
        # crosses threads here, and this costs about half as much CPU.
        done = threading.Lock()
        done.acquire()
        started: list[asyncio.Task[T] | BaseException] = []

        def start() -> None:
            try:
                task = self.loop.create_task(coro)
            except BaseException as exc:  # e.g. the loop is closing
                coro.close()
                started.append(exc)
                done.release()
                return
            started.append(task)
            task.add_done_callback(lambda _: done.release())

        try:
            self.loop.call_soon_threadsafe(start)
        except RuntimeError:
            coro.close()
            raise
        if not done.acquire(timeout=-1 if timeout_s is None else timeout_s):
            # `start` runs before this on the loop (callbacks run in order).
            self.loop.call_soon_threadsafe(_cancel_started, started)
            raise ClientTimeoutError(f"no result within {timeout_s} s") from None
        outcome = started[0]
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome.cancelled():
            # As from a concurrent Future: a cancel (stop()) is no asyncio
            # CancelledError in a thread that is no task.
            raise concurrent.futures.CancelledError()
        return outcome.result()

    def start_client(
        self,
        start: Callable[[], Coroutine[Any, Any, Any]],
        close: Callable[[], Coroutine[Any, Any, Any]],
    ) -> None:
        """Start an async client on this loop; if that fails, close the client
        and stop the thread before re-raising, so nothing is left running."""
        try:
            self.run(start())
        except BaseException:
            self.run(close())
            self.stop()
            raise

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.in_loop_thread():
            raise RuntimeError("stop() from the loop's own thread")
        asyncio.run_coroutine_threadsafe(_cancel_rest(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()

    def finish_from_inside(self, last: Coroutine[Any, Any, Any]) -> None:
        """`stop()` for the loop's own thread (a callback running on it), which
        cannot wait for the loop: `last` runs as a task, then what is left is
        cancelled and the loop stops; the thread closes its loop and ends by
        itself. Returns at once."""
        if not self.in_loop_thread():
            last.close()
            raise RuntimeError("finish_from_inside() from another thread than the loop's")
        if self._stopped:
            last.close()
            return
        self._stopped = True

        async def finish() -> None:
            try:
                await last
            except Exception:
                log.exception("closing a client from its own loop thread failed")
            finally:
                await _cancel_rest()
                asyncio.get_running_loop().stop()

        self.loop.create_task(finish())


async def _cancel_rest() -> None:
    """Cancel every task of the running loop but the caller's, and wait for them."""
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
