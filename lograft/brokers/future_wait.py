"""Waiting for one future with a deadline, for the waits every hot request makes.

An acks=all produce waits for its partition's high watermark, a consumer's
long-poll for news: each is one future of the caller's own, waited for at
most some time. `asyncio.timeout` does that for any block of code, at ~5.6 us
per use on uvloop (a `Timeout` object, the current task looked up, a timer
rescheduled, and on the way out the task's cancel count checked), measured
against a bare await of the same future; a timer that completes the future
itself costs ~1.6 us (docs/benchmarks.md, "Request CPU on the hot routes").

The rules `asyncio.timeout` was chosen for (over `wait_for`, which on Python
3.11 can swallow a cancel that lands as the future completes) hold here too:
a cancel of the waiting task cancels the future and is raised, whether or
not the deadline or the result came in the same loop turn; the deadline
never cancels the task, it only completes the future.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["wait_future"]


async def wait_future(fut: asyncio.Future[Any], timeout_s: float) -> bool:
    """Await `fut` for at most `timeout_s` seconds: True when it completed (its
    exception, if it has one, is raised), False when the time ran out. The
    future must be the caller's alone to complete on expiry: it then holds a
    `TimeoutError`, so whoever would have completed it finds it done."""
    timer = asyncio.get_running_loop().call_later(timeout_s, _expire, fut)
    try:
        await fut
    except _Expired:
        return False
    finally:
        timer.cancel()
    return True


class _Expired(TimeoutError):
    """What an expired future holds: a TimeoutError, told apart from one the
    future's own producer might set."""


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(_Expired())
