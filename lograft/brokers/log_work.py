"""Where a replica's blocking log work runs: on the event loop while that is
cheaper than a hop to a thread, else in the broker's storage threads.

Appends (a leader's and a follower's), truncations and reads are file I/O
and CRC work. Measured with `scripts/bench_log_io.py` on the shared 2-vCPU VM
of docs/benchmarks.md ("Blocking log work"), load average 4 and 8:

- a hop to a worker thread and back costs 40-60 us at the median on an
  idle loop, and 4-8 ms on a loop busy with Python work (the worker's
  answer waits for the loop to come round). Under load, a hop is the
  dearest part of a small request;
- an append of 64 KiB (structure and CRC checked; the records were walked
  before, off the loop) costs 40-65 us, 1 MiB 0.35-0.5 ms, 4 MiB 1.5-14 ms;
  with `flush_policy=every_batch` its fsync adds 0.3-2.7 ms (11-13 ms at
  4 MiB), and without bound on a slow or busy disk;
- a read of 64 KiB costs ~20 us, 1 MiB ~110 us, 8 MiB 12-17 ms; a
  truncation rewrites checkpoints (fsyncs) and walks every batch header of
  the log to rebuild the producer state.

So work of up to INLINE_BYTES_MAX bytes runs inline (at most about half a
millisecond of the loop), and larger work, any fsync and any truncation run
in a thread. The benchmark's 64 KiB produce requests stay on the loop: a hop
would cost them more than their append. An fsync goes to a thread even so:
on the loop it holds every other request and heartbeat of the node for as
long as the disk takes. That costs the fsynced produce throughput on a
CPU-starved machine whose disk is fast (docs/benchmarks.md: six of eight
medians fell to 0.67-0.97 of before, two rose to 1.15), and frees the loop
from the disk everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lograft.storage.config import FlushPolicy, LogConfig

T = TypeVar("T")

# Appends and reads of at most this many bytes run on the event loop.
INLINE_BYTES_MAX = 1024 * 1024
# Names of the storage threads (tests check where work ran by it).
THREAD_NAME_PREFIX = "log-work"


def append_in_thread(config: LogConfig, nbytes: int) -> bool:
    """Whether an append of `nbytes` to a log with `config` goes to a thread."""
    return config.flush_policy is FlushPolicy.EVERY_BATCH or nbytes > INLINE_BYTES_MAX


def read_in_thread(nbytes: int) -> bool:
    """Whether reads of at most `nbytes` (`Log.readable_bytes`) go to a thread."""
    return nbytes > INLINE_BYTES_MAX


class LogWork:
    """The broker's threads for blocking log work (`storage_threads_max`).

    At most `threads` jobs run at once; more wait for a thread holding only
    what their request already holds (a read allocates its bytes when it
    runs), so a flood of large reads adds waiting, not memory."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._executor = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix=THREAD_NAME_PREFIX
        )

    async def run(self, fn: Callable[[], T], *, inline: bool) -> T:
        """`fn()` in a storage thread (inline=True: here, now)."""
        if inline:
            return fn()
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def close(self) -> None:
        """Take no more work; jobs already running finish in their threads."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def drain(self) -> None:
        """Take no more work and wait (off the loop) until the jobs already
        running are done: a job whose caller was cancelled (a follower's
        fetch session stopped mid-apply) still writes its log's files, and
        closing those logs meanwhile would race it."""
        self.close()
        await asyncio.to_thread(self._executor.shutdown, wait=True)


__all__ = [
    "INLINE_BYTES_MAX",
    "THREAD_NAME_PREFIX",
    "LogWork",
    "append_in_thread",
    "read_in_thread",
]
