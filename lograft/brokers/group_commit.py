"""Group commit of one replica's log (`flush_policy = group_commit`).

Appends under this policy land in the page cache as under `none`; what
changes is when an acks=all produce is answered: the leader's high watermark
advances only to the smallest *durable* offset (fsynced) of the ISR, its own
included (partition.py), so every ISR member has the batch on disk first.

The fsyncs are shared, as Redpanda does it: at most one `Log.commit` of a log
runs at a time, in a storage thread (never on the event loop), and one that
starts covers every append made before it, by any number of producers.
An append while a commit runs asks for another, which starts as soon as the
running one ends; so under load a commit takes all the appends that arrived
during the previous one, and on an idle log an append waits for one fsync.

A leader kicks its committer after each append and moves the high watermark
when a commit ends (`on_durable`); a follower awaits a commit of what it
fetched before its next fetch, which reports the durable offset to the
leader (replica_fetcher.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lograft.brokers.log_work import LogWork
from lograft.storage.log import Log

log = logging.getLogger(__name__)

# After a failed commit (a disk error), wait this long before taking the next, ms.
RETRY_BACKOFF_MS = 200


class GroupCommitter:
    """The fsyncs of one log, one at a time, each covering every append before it."""

    def __init__(self, target: Log, work: LogWork, on_durable: Callable[[int], None]) -> None:
        self.log = target
        self._work = work
        # Called on the loop after a commit moved the durable offset.
        self._on_durable = on_durable
        self._task: asyncio.Task[None] | None = None
        self._wanted = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.commits = 0  # commits run (tests and profiles)
        self.failures = 0  # commits that raised (a disk error)

    @property
    def durable_offset(self) -> int:
        return self.log.durable_offset

    def kick(self) -> None:
        """Make what is appended now durable soon (no waiting)."""
        if self.log.closed or self.log.durable_offset >= self.log.log_end_offset:
            return
        self._wanted = True
        if self._task is None or self._task.done():
            self._idle.clear()
            self._task = asyncio.create_task(self._run(), name=f"group-commit {self.log.directory}")

    async def sync(self) -> int:
        """Wait until what is appended now is durable, the log closed or a
        commit failed (then the durable offset lags, and the caller goes
        on: a follower's fetch session must not stall on one bad disk);
        returns the durable offset."""
        if not self.log.closed and self.log.durable_offset < self.log.log_end_offset:
            self.kick()
            await self._idle.wait()
        return self.log.durable_offset

    async def _run(self) -> None:
        try:
            while self._wanted and not self.log.closed:
                self._wanted = False
                before = self.log.durable_offset
                try:
                    durable = await self._work.run(self.log.commit, inline=False)
                except Exception as exc:
                    if self.log.closed:
                        return
                    # The next append (or a follower's next fetch) asks again;
                    # meanwhile the durable offset, and so the HW, holds.
                    self.failures += 1
                    log.warning("group commit of %s failed: %r", self.log.directory, exc)
                    await asyncio.sleep(RETRY_BACKOFF_MS / 1000)  # back-off, not a sync point
                    return
                self.commits += 1
                if durable != before:
                    self._on_durable(durable)
                if durable < self.log.log_end_offset:
                    self._wanted = True  # appends arrived during this commit
        finally:
            self._idle.set()

    async def close(self) -> None:
        """Stop committing (the replica went away); a running commit finishes."""
        self._wanted = False
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


__all__ = ["GroupCommitter"]
