"""The sync clients' background loop: uvloop's by default, asyncio's on request."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from lograft.client import Producer
from lograft.client.errors import ClientTimeoutError
from lograft.client.loop_thread import LoopThread
from lograft.errors import InvalidConfigError
from tests.unit.client.fakes import Call, ScriptedTransport
from tests.unit.client.test_scripted import FAST, A, ack, cluster_handler


def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


def run_on(thread: LoopThread) -> str:
    async def where() -> str:
        return loop_module()

    try:
        return thread.run(where(), timeout_s=10)
    finally:
        thread.stop()


def test_the_loop_thread_runs_uvloop_by_default():
    assert run_on(LoopThread("t")) == "uvloop"


def test_the_loop_thread_runs_asyncio_when_asked():
    assert run_on(LoopThread("t", "asyncio")) == "asyncio"


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_a_sync_producer_sends_from_the_loop_its_setting_names(event_loop):
    seen: list[str] = []

    def on_batch(call: Call):
        seen.append(loop_module())
        return ack(call)

    t = ScriptedTransport(cluster_handler([1], on_batch))
    with Producer(A, transport=t, event_loop=event_loop, **FAST) as p:
        assert p.send("t", b"v").get(10).offset == 0
    assert seen == [event_loop]


def test_an_unknown_event_loop_is_refused_by_name():
    with pytest.raises(InvalidConfigError) as caught:
        Producer(A, transport=ScriptedTransport(cluster_handler([1], ack)), event_loop="tokio")
    assert caught.value.details["setting"] == "event_loop"


def test_run_returns_the_result_and_raises_the_error_of_the_coroutine():
    thread = LoopThread("t")
    try:

        async def ok() -> int:
            await asyncio.sleep(0)
            return 7

        async def bad() -> None:
            raise KeyError("k")

        assert thread.run(ok()) == 7
        with pytest.raises(KeyError):
            thread.run(bad())
    finally:
        thread.stop()


def test_run_past_its_timeout_cancels_the_coroutine():
    thread = LoopThread("t")
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    try:
        with pytest.raises(ClientTimeoutError):
            thread.run(slow(), timeout_s=0.05)
        assert cancelled.wait(10)
    finally:
        thread.stop()


def test_a_call_waiting_when_the_thread_stops_is_cancelled():
    thread = LoopThread("t")
    entered = threading.Event()
    outcome: list[BaseException] = []

    async def forever() -> None:
        entered.set()
        await asyncio.sleep(30)

    def call() -> None:
        try:
            thread.run(forever())
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert entered.wait(10)
    thread.stop()
    caller.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], concurrent.futures.CancelledError)
