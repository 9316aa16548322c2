"""An append, an offset wait or a status call of RaftAdapter cancelled while
it waits ends cancelled, even when the cancel lands in the step its wait ends
(Python 3.11's asyncio.wait_for returned the result then and dropped the
cancel), and leaves nothing pending behind."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import FAIL_REASON

from lograft.quorum.raft.adapter import RaftAdapter
from tests.raft_support import eventually_async
from tests.unit.quorum.test_raft_adapter import single_config, started_leader

WAIT_S = 10.0

pytestmark = pytest.mark.timeout(120)


async def ended(task: asyncio.Task[Any]) -> None:
    await asyncio.wait({task}, timeout=WAIT_S)
    assert task.cancelled(), "the call went on after it was cancelled"


@pytest.mark.parametrize("as_it_commits", [False, True])
async def test_a_cancelled_append_ends_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_it_commits: bool
) -> None:
    adapter = await started_leader(single_config(tmp_path))
    try:
        # Submitted appends never get an answer from Raft: the test gives one.
        monkeypatch.setattr(adapter._core, "submit", lambda batch, on_result: None)
        task = asyncio.create_task(adapter.append(b"x"))
        await eventually_async(lambda: adapter._pending, WAIT_S, "the append to wait")
        (fut,) = adapter._pending
        if as_it_commits:
            adapter._settle_append(fut, adapter.last_applied, FAIL_REASON.SUCCESS)
        task.cancel()
        await ended(task)
        assert not adapter._pending and fut.done()
    finally:
        await adapter.stop()


@pytest.mark.parametrize("as_it_is_applied", [False, True])
async def test_a_cancelled_offset_wait_ends_cancelled(
    tmp_path: Path, as_it_is_applied: bool
) -> None:
    adapter = await started_leader(single_config(tmp_path))
    try:
        task = asyncio.create_task(adapter.wait_for_offset(adapter.last_applied + 1_000, 60_000))
        await eventually_async(lambda: adapter._waiters, WAIT_S, "the offset wait")
        fut = adapter._waiters[0][2]
        if as_it_is_applied:
            fut.set_result(adapter.last_applied)  # as _on_applied does
        task.cancel()
        await ended(task)
        assert fut.done()  # dropped by _on_applied or the bound on waiters
    finally:
        await adapter.stop()


@pytest.mark.parametrize("as_it_answers", [False, True])
async def test_a_cancelled_status_call_ends_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_it_answers: bool
) -> None:
    adapter: RaftAdapter = await started_leader(single_config(tmp_path))
    try:
        answer: concurrent.futures.Future[object] = concurrent.futures.Future()
        monkeypatch.setattr(adapter._core, "call", lambda fn: answer)
        task = asyncio.create_task(adapter.status())
        await asyncio.sleep(0)  # status() runs up to its wait for the answer
        if as_it_answers:
            answer.set_result(object())
            await asyncio.sleep(0)  # the answer is copied onto the loop now...
        task.cancel()  # ...and the cancel lands before status resumes
        await ended(task)
        assert answer.done()
    finally:
        await adapter.stop()
