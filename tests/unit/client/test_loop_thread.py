"""The sync clients' background loop: uvloop's by default, asyncio's on request."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest
import uvloop

from lograft.client import Admin, Consumer, Producer
from lograft.client.errors import ClientClosedError, ClientTimeoutError
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


# -- closing from any thread ------------------------------------------------------------------


def run_in_own_loop(kind: str, main) -> None:
    """`main()` on an event loop of `kind` running in this thread (an async
    application, a notebook cell) that calls the sync clients."""
    loop = uvloop.new_event_loop() if kind == "uvloop" else asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def ended(thread: LoopThread) -> bool:
    return not thread._thread.is_alive() and thread.loop.is_closed()


@pytest.mark.parametrize("caller_loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("client_loop", ["asyncio", "uvloop"])
def test_a_sync_producer_closes_from_a_thread_running_its_own_loop(caller_loop, client_loop):
    """LoopThread.stop ran shutdown_asyncgens on the caller's thread: RuntimeError
    ("Cannot run the event loop while another loop is running") there."""
    t = ScriptedTransport(cluster_handler([1], ack))
    closed: list[Producer] = []

    async def main() -> None:
        p = Producer(A, transport=t, event_loop=client_loop, **FAST)
        closed.append(p)
        assert p.send("t", b"v").get(10).offset == 0
        p.close()

    run_in_own_loop(caller_loop, main)
    assert closed[0].closed and t.closed
    assert ended(closed[0]._thread)


@pytest.mark.parametrize("caller_loop", ["asyncio", "uvloop"])
def test_a_sync_consumer_and_admin_close_from_a_thread_running_its_own_loop(caller_loop):
    transports = [ScriptedTransport(cluster_handler([1], ack)) for _ in range(2)]
    made: list[Consumer | Admin] = []

    async def main() -> None:
        consumer = Consumer(A, transport=transports[0])
        made.append(consumer)
        consumer.close()
        admin = Admin(A, transport=transports[1])
        made.append(admin)
        admin.close()

    run_in_own_loop(caller_loop, main)
    assert len(made) == 2 and all(t.closed for t in transports)
    assert all(ended(client._thread) for client in made)


def test_a_loop_thread_stops_from_a_thread_running_its_own_loop():
    thread = LoopThread("t")

    async def agen():
        yield 1

    async def start_a_generator():
        gen = agen()
        await gen.__anext__()  # left suspended: the loop's shutdown_asyncgens closes it

    thread.run(start_a_generator())

    async def main() -> None:
        thread.stop()

    asyncio.run(main())
    assert ended(thread)


def test_a_sync_producer_closes_from_a_records_callback():
    """The callback runs on the producer's loop thread, which cannot wait for
    itself: close() there aborts what is unsent and returns; the thread
    finishes the close and ends by itself."""
    registered = threading.Event()

    def on_batch(call: Call):
        # The answer waits for the callback, so that it runs on the loop thread.
        assert registered.wait(10)
        return ack(call)

    t = ScriptedTransport(cluster_handler([1], on_batch))
    p = Producer(A, transport=t, **FAST)
    returned: list[threading.Thread] = []
    errors: list[BaseException] = []

    def close_here(_fut) -> None:
        try:
            p.close()
            returned.append(threading.current_thread())
        except BaseException as exc:
            errors.append(exc)

    p.send("t", b"v").add_done_callback(close_here)
    registered.set()
    p._thread._thread.join(10)
    assert not errors and returned == [p._thread._thread]
    assert ended(p._thread) and t.closed and p.closed
    with pytest.raises(ClientClosedError):
        p.send("t", b"late")
    p.close()  # a second close does nothing
