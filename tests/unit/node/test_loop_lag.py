"""The event-loop lag probe and its report in /healthz."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.node import loop_lag
from lograft.node.loop_lag import LoopLagProbe


def test_the_worst_lag_is_that_of_the_last_window():
    probe = LoopLagProbe()
    probe.record(5.0, now=100.0)
    probe.record(300.0, now=101.2)
    probe.record(2.0, now=101.9)
    assert probe.worst_ms(now=102.0) == 300.0
    assert probe.last_ms == 2.0
    later = 101.0 + loop_lag.WINDOW_S
    probe.record(1.0, now=later)
    assert probe.worst_ms(now=later) == 1.0, "a stall older than the window is forgotten"
    probe.record(-3.0, now=later)  # a timer that fired early is no lag
    assert probe.last_ms == 0.0


def test_a_long_stall_is_logged(caplog):
    probe = LoopLagProbe()
    with caplog.at_level("WARNING", logger="lograft.node.loop_lag"):
        probe.record(loop_lag.WARN_MS - 1, now=1.0)
        probe.record(loop_lag.WARN_MS + 500, now=2.0)
    assert [r.getMessage() for r in caplog.records] == [
        f"event loop stalled for {loop_lag.WARN_MS + 500} ms"
    ]


async def test_the_probe_sees_a_blocked_loop_and_healthz_reports_it():
    probe = LoopLagProbe()
    task = asyncio.create_task(probe.run())
    await asyncio.sleep(0.1)
    time.sleep(0.3)  # block this loop, as a CPU-bound handler would
    await asyncio.sleep(0.1)
    app = create_app(
        cluster_secret="s",
        request_bytes_max=1024,
        ready=lambda: (True, {}),
        health=lambda: {"loop_lag_ms": probe.snapshot()},
    )
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/healthz")
        body: dict[str, Any] = await resp.json()
    task.cancel()
    assert body["status"] == "ok"
    assert body["loop_lag_ms"]["max"] >= 250
    assert body["loop_lag_ms"]["window_s"] == loop_lag.WINDOW_S


async def test_a_probe_wakes_at_its_own_interval(monkeypatch):
    loop = asyncio.get_running_loop()
    delays: list[float] = []
    real_call_at = loop.call_at

    def counting_call_at(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        delays.append(when - loop.time())
        return real_call_at(when, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    task = asyncio.create_task(LoopLagProbe(interval_ms=50).run())
    try:
        for _ in range(5):
            await asyncio.sleep(0)  # one loop iteration each: the probe arms its timer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert delays and 0.04 < delays[0] <= 0.05


def test_the_controller_loop_probe_wakes_less_often_than_the_main_loop_probe():
    # issue 14: the controller's otherwise idle loop was woken every 20 ms.
    from lograft.node import controller_thread

    assert LoopLagProbe().interval_ms == loop_lag.INTERVAL_MS
    assert controller_thread.CONTROLLER_LOOP_LAG_INTERVAL_MS > loop_lag.INTERVAL_MS


def test_the_probe_backs_off_while_idle_and_returns_when_busy_or_late():
    base, top = loop_lag.INTERVAL_MS, loop_lag.IDLE_INTERVAL_MS_MAX
    idle = loop_lag.IDLE_CPU_FRACTION / 2
    assert loop_lag.next_interval_ms(base, base, top, idle, 0.0) == 2 * base
    assert loop_lag.next_interval_ms(top, base, top, idle, 0.0) == top, "never past the top"
    assert loop_lag.next_interval_ms(top, base, top, loop_lag.IDLE_CPU_FRACTION, 0.0) == base
    assert loop_lag.next_interval_ms(top, base, top, 0.0, base) == base, "a late wake is a stall"
    assert loop_lag.next_interval_ms(50, 50, 20, idle, 0.0) == 50, "a top below the base"


async def _until(condition: Any, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_an_idle_loop_is_probed_less_often_and_a_busy_one_at_the_interval():
    probe = LoopLagProbe(interval_ms=5, idle_interval_ms_max=40)
    task = asyncio.create_task(probe.run())
    busy = True

    async def work() -> None:
        # CPU on this loop's thread in 1 ms slices: busy, with no long stall.
        while busy:
            spin_until = time.thread_time() + 0.001
            while time.thread_time() < spin_until:
                pass
            await asyncio.sleep(0)

    try:
        await _until(lambda: probe.current_interval_ms == 40)
        assert probe.snapshot()["interval_ms"] == 40
        worker = asyncio.create_task(work())
        await _until(lambda: probe.current_interval_ms == 5)
        busy = False
        await worker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
