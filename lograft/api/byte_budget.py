"""A count of bytes a node may hold at once, taken before and given back after.

The request-body budget (`[http] request_bytes_inflight_max`,
request_bodies.py) is one of these: a body's bytes are taken before it is
read and given back when its request is done, so that the bodies held at
once never exceed the limit however many connections send them.

Takers wait in arrival order (FIFO): when bytes are given back, the first
waiter gets them as soon as its whole amount fits, and no later, smaller
taker goes ahead of it. A large body therefore cannot be starved by a stream
of small ones; the price is that a small one may wait behind a large one. A
wait is always bounded by the caller's timeout.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class _Waiter:
    size: int
    granted: asyncio.Future[None]


class ByteBudget:
    """At most `limit` bytes taken at once."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a budget needs at least one byte, got {limit}")
        self.limit = limit
        self.used = 0
        self._waiters: deque[_Waiter] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_take(self, size: int) -> bool:
        """Take `size` bytes now if they fit and nobody waits ahead; never waits."""
        self._check(size)
        if self._waiters or self.used + size > self.limit:
            return False
        self.used += size
        return True

    async def take(self, size: int, timeout_s: float) -> bool:
        """Take `size` bytes, waiting up to `timeout_s` for them; False if they
        did not come free in time (nothing is then held)."""
        if self.try_take(size):
            return True
        waiter = _Waiter(size, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                # Shielded: a timeout or a cancel must not cancel a grant that
                # has already happened; the except below sees it instead.
                await asyncio.shield(waiter.granted)
        except BaseException as exc:
            if waiter.granted.done():  # granted at the last moment
                if isinstance(exc, TimeoutError):
                    return True
                self.give_back(size)
                raise
            waiter.granted.cancel()
            self._waiters.remove(waiter)
            # It may have been first in line, holding back smaller ones that fit.
            self._grant_waiters()
            if isinstance(exc, TimeoutError):
                return False
            raise
        return True

    def give_back(self, size: int) -> None:
        if size <= 0:
            return
        if size > self.used:
            raise RuntimeError(f"giving back {size} bytes, but only {self.used} are taken")
        self.used -= size
        self._grant_waiters()

    def _grant_waiters(self) -> None:
        while self._waiters and self.used + self._waiters[0].size <= self.limit:
            waiter = self._waiters.popleft()
            self.used += waiter.size
            waiter.granted.set_result(None)

    def _check(self, size: int) -> None:
        if not 0 < size <= self.limit:
            raise ValueError(f"cannot take {size} bytes of a budget of {self.limit}")
