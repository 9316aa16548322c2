"""A small pool of threads for the CPU work records cost a request.

Decompressing and validating produced batches, rendering fetched records as
JSON or Server-Sent Events, looking a timestamp up inside a batch: each can
take tens of milliseconds (a compressed batch inflates up to 64 MiB), and on
the event loop that time is taken from every other request of the node,
broker heartbeats and controller duties included (a 2 KB produce request
once held a node's loop for 10 s and got it fenced). Such work runs here.

- At most `threads` jobs run at once (`[http] record_threads_max`); more wait
  for a thread, holding only what their request already holds. What a job
  allocates (inflated batches, rendered text) exists only while it runs, so
  a flood of requests adds waiting, not memory.
- The loop keeps running meanwhile: decompression, CRC and the C record
  scanner release the GIL; Python code in a job gives it up every switch
  interval (5 ms).
- Small work (`worth_a_thread` says no) runs inline: a thread hop costs
  more than a small uncompressed request's checks.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lograft.protocol.batch import any_compressed

T = TypeVar("T")

# Uncompressed data up to this many bytes is checked or rendered inline:
# ~1,000 small records, well under a millisecond of work.
INLINE_BYTES_MAX = 64 * 1024
DEFAULT_THREADS = 2

# Seconds of thread time the current request's jobs took, where a
# request_percentage quota measures its handler (api/quota_gate.py sets it
# for the request's task; None: nobody is counting).
WORK_TIME: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "lograft_record_work_time", default=None
)


def worth_a_thread(data: bytes) -> bool:
    """Whether work on these batches belongs in a worker thread: more than
    INLINE_BYTES_MAX bytes, or any compressed batch (which may inflate to
    64 MiB whatever its size)."""
    return len(data) > INLINE_BYTES_MAX or any_compressed(data)


class RecordWork:
    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="record-work")

    async def run(self, fn: Callable[[], T], *, inline: bool = False) -> T:
        """`fn()` in a worker thread (inline=True: here, now)."""
        if inline:
            return fn()
        tally = WORK_TIME.get()
        if tally is not None:
            fn = _timed(fn, tally)
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    @staticmethod
    def worth_a_thread(data: bytes) -> bool:
        """`worth_a_thread(data)`, for callers that only hold the worker."""
        return worth_a_thread(data)

    def close(self) -> None:
        """Stop taking work; jobs already running finish in their threads."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def _timed(fn: Callable[[], T], tally: list[float]) -> Callable[[], T]:
    def timed() -> T:
        started = time.perf_counter()
        try:
            return fn()
        finally:
            tally.append(time.perf_counter() - started)  # list.append is atomic

    return timed


__all__ = ["INLINE_BYTES_MAX", "WORK_TIME", "RecordWork", "worth_a_thread"]
