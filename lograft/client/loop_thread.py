"""An asyncio event loop in a background thread, for the synchronous clients.

`run(coro, timeout_s)` runs a coroutine on the loop and waits for its result
in the calling thread; `call_soon(fn)` schedules a plain callback. Calling
`run` from the loop's own thread would deadlock and raises instead.
`stop()` cancels what is left on the loop, stops it and joins the thread.
The thread is a daemon so a forgotten `close()` cannot hang interpreter exit.

The loop is uvloop's by default (the client setting `event_loop`): it runs
the same asyncio API for less CPU, in the HTTP exchanges and in each
`run`'s hand-off between threads; where uvloop cannot be imported (a
platform it does not build on) the standard library's loop is used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from lograft.client.config import EventLoopName
from lograft.client.errors import ClientTimeoutError

T = TypeVar("T")


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


class LoopThread:
    def __init__(self, name: str, event_loop: EventLoopName = "uvloop") -> None:
        self.loop = new_loop(event_loop)
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._started.wait()
        self._stopped = False

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a synchronous client method was called from its own loop thread")
        if self._stopped:
            coro.close()
            raise RuntimeError("the client's loop thread is stopped")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise ClientTimeoutError(f"no result within {timeout_s} s") from None

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

        async def cancel_rest() -> None:
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_rest(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()
