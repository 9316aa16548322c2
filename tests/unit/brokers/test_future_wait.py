"""wait_future: a future awaited with a deadline, without asyncio.timeout."""

from __future__ import annotations

import asyncio

import pytest

from lograft.brokers.future_wait import wait_future

# Far longer than any test here waits: the deadline that must not fire, s.
LONG_S = 60.0


async def test_true_when_the_future_completes() -> None:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(fut.set_result, None)
    assert await wait_future(fut, LONG_S) is True


async def test_false_at_the_deadline_and_the_future_is_done() -> None:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    assert await wait_future(fut, 0.01) is False
    # Done, so whoever would complete it (a HW move, a notify) skips it.
    assert fut.done() and isinstance(fut.exception(), TimeoutError)


async def test_the_futures_own_error_is_raised_even_a_timeout() -> None:
    loop = asyncio.get_running_loop()
    for error in (ValueError("x"), TimeoutError("its own")):
        fut: asyncio.Future[None] = loop.create_future()
        loop.call_soon(fut.set_exception, error)
        with pytest.raises(type(error)):
            await wait_future(fut, LONG_S)


async def test_a_cancel_is_raised_and_cancels_the_future() -> None:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(wait_future(fut, LONG_S))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fut.cancelled()


async def test_a_cancel_landing_with_the_result_is_not_swallowed() -> None:
    # The case wait_for gets wrong on Python 3.11: the future completes and
    # the task is cancelled in the same loop turn.
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(wait_future(fut, LONG_S))
    await asyncio.sleep(0)
    fut.set_result(None)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
