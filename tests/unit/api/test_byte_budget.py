"""ByteBudget: bytes taken and given back, waiters served in order, every wait bounded."""

from __future__ import annotations

import asyncio

import pytest

from lograft.api.byte_budget import ByteBudget


async def until(condition: object, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0)


def test_takes_what_fits_and_gives_it_back() -> None:
    budget = ByteBudget(100)
    assert budget.try_take(60) and budget.try_take(40)
    assert not budget.try_take(1)
    budget.give_back(40)
    assert budget.used == 60 and budget.try_take(40)


def test_sizes_outside_the_budget_are_a_bug() -> None:
    budget = ByteBudget(100)
    for size in (0, -1, 101):
        with pytest.raises(ValueError):
            budget.try_take(size)
    with pytest.raises(RuntimeError):
        budget.give_back(1)  # nothing taken


async def test_a_waiter_gets_bytes_given_back() -> None:
    budget = ByteBudget(100)
    assert budget.try_take(100)
    taking = asyncio.ensure_future(budget.take(50, timeout_s=5))
    await until(lambda: budget.waiting == 1)
    budget.give_back(50)
    assert await taking
    assert budget.used == 100 and budget.waiting == 0


async def test_a_wait_ends_at_its_timeout_with_nothing_held() -> None:
    budget = ByteBudget(100)
    assert budget.try_take(100)
    assert not await budget.take(1, timeout_s=0.05)
    assert (budget.used, budget.waiting) == (100, 0)


async def test_waiters_are_served_in_order() -> None:
    # A large waiter is not overtaken by smaller ones that would fit sooner.
    budget = ByteBudget(100)
    assert budget.try_take(100)
    large = asyncio.ensure_future(budget.take(80, timeout_s=5))
    await until(lambda: budget.waiting == 1)
    small = asyncio.ensure_future(budget.take(10, timeout_s=5))
    await until(lambda: budget.waiting == 2)
    assert not budget.try_take(10)  # nobody jumps the line either
    budget.give_back(30)  # grants are made here, synchronously: none yet
    assert budget.waiting == 2 and budget.used == 70
    budget.give_back(70)
    assert await large and await small
    assert budget.used == 90


async def test_a_first_waiter_that_gives_up_lets_the_next_one_in() -> None:
    budget = ByteBudget(100)
    assert budget.try_take(50)
    large = asyncio.ensure_future(budget.take(80, timeout_s=0.05))
    await until(lambda: budget.waiting == 1)
    small = asyncio.ensure_future(budget.take(40, timeout_s=5))
    assert not await large
    assert await small
    assert (budget.used, budget.waiting) == (90, 0)


async def test_a_cancelled_waiter_holds_nothing() -> None:
    budget = ByteBudget(100)
    assert budget.try_take(100)
    taking = asyncio.ensure_future(budget.take(50, timeout_s=5))
    await until(lambda: budget.waiting == 1)
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    budget.give_back(100)
    assert (budget.used, budget.waiting) == (0, 0)


async def test_a_grant_cancelled_before_its_waiter_runs_is_given_back() -> None:
    budget = ByteBudget(100)
    assert budget.try_take(100)
    taking = asyncio.ensure_future(budget.take(50, timeout_s=5))
    await until(lambda: budget.waiting == 1)
    budget.give_back(100)  # granted: used 50 ...
    taking.cancel()  # ... but the taker is cancelled before it sees it
    with pytest.raises(asyncio.CancelledError):
        await taking
    assert budget.used == 0
