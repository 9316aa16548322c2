"""The active controller runs on its own thread and loop, and serves brokers
on its own listener: a main loop blocked for longer than a broker session
delays no heartbeat answer and fences no broker.

A real single-voter Raft (started on the test's loop, as the node's main
loop) and MetadataStore; the real ControllerRuntime and controller listener
on a ControllerThread; two brokers heartbeating over HTTP from plain threads,
so they keep going while the test's loop is blocked."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lograft.api.controller_listener import controller_app, listener_http_config
from lograft.api.controller_listener_config import ControllerListenerConfig
from lograft.api.http_config import HttpConfig
from lograft.api.http_server import HttpServer
from lograft.api.routes_internal import ControllerRpc
from lograft.node.controller_client import LocalController
from lograft.node.controller_thread import ControllerThread
from lograft.protocol import controller_wire as w
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.raft.adapter import RaftAdapter, RaftConfig
from tests.raft_support import FAST_TIMINGS, RAFT_TEST_PASSWORD, eventually_async, free_port

pytestmark = pytest.mark.timeout(60)

SECRET = "controller-thread-secret"
CONFIG = ControllerConfig()  # heartbeats every 500 ms, sessions of 1500 ms
STALL_S = 3 * CONFIG.broker_session_timeout_ms / 1000
# A heartbeat answered later than this after it was sent is late: the broker
# gives up on it after one interval (heartbeat_thread.py).
LATE_S = CONFIG.broker_heartbeat_interval_ms / 1000


@dataclass
class Controller:
    raft: RaftAdapter
    store: MetadataStore
    thread: ControllerThread
    port: int


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[Controller]:
    store = MetadataStore()
    raft = RaftAdapter(
        RaftConfig(
            node_id="1",
            data_dir=tmp_path / "raft",
            peers={},
            listen_address=f"127.0.0.1:{free_port()}",
            **{**FAST_TIMINGS, "password": RAFT_TEST_PASSWORD},  # type: ignore[arg-type]
        ),
        store,
    )
    port = free_port()
    http = listener_http_config(HttpConfig(), ControllerListenerConfig(), f"127.0.0.1:{port}")

    def listener(runtime: ControllerRuntime) -> HttpServer:
        app = controller_app(
            ControllerRpc(runtime),
            cluster_secret=SECRET,
            request_bytes_max=http.request_bytes_max,
            active=lambda: runtime.active,
        )
        return HttpServer(app, http)

    thread = ControllerThread(lambda: ControllerRuntime(raft, store, CONFIG), listener)
    await raft.start()
    try:
        await thread.start()
        await eventually_async(lambda: thread.active, 10, "the runtime to become active")
        yield Controller(raft, store, thread, port)
    finally:
        assert await thread.stop(10), "the controller thread did not end"
        await raft.stop()
    assert thread.loop is not None and thread.loop.is_closed()


def post(
    conn: http.client.HTTPConnection, name: str, body: Any, secret: str | None = SECRET
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Lograft-Cluster-Secret"] = secret
    conn.request("POST", f"/internal/v1/controller/{name}", data, headers)
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read() or b"null")


@dataclass
class Broker:
    """A broker's heartbeats, from a plain thread (as the heartbeat thread sends them)."""

    broker_id: int
    port: int
    epoch: int = -1
    metadata_offset: int = 0
    # (sent at, answered after seconds, fenced) per heartbeat.
    beats: list[tuple[float, float, bool]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    failure: list[BaseException] = field(default_factory=list)

    def register(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        request = w.RegisterBrokerRequest(
            broker_id=self.broker_id,
            incarnation_id=f"inc-{self.broker_id}",
            endpoints={"http": f"http://127.0.0.1:{9000 + self.broker_id}"},
            previous_broker_epoch=-1,
        )
        status, answer = post(conn, "register", w.body_of(request))
        conn.close()
        assert status == 200, answer
        self.epoch, self.metadata_offset = answer["broker_epoch"], answer["metadata_offset"]

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        interval = CONFIG.broker_heartbeat_interval_ms / 1000
        try:
            while not self.stop.is_set():
                request = w.heartbeat_request(self.broker_id, self.epoch, self.metadata_offset)
                sent = time.monotonic()
                status, answer = post(conn, "heartbeat", w.body_of(request))
                assert status == 200, answer
                self.beats.append((sent, time.monotonic() - sent, answer["fenced"]))
                self.stop.wait(interval)  # the heartbeat period
        except BaseException as exc:
            self.failure.append(exc)
        finally:
            conn.close()


async def test_a_blocked_main_loop_delays_no_heartbeat_and_fences_no_broker(
    controller: Controller,
) -> None:
    brokers = [Broker(2, controller.port), Broker(3, controller.port)]
    for broker in brokers:
        await asyncio.to_thread(broker.register)
    threads = [threading.Thread(target=b.run, name=f"broker-{b.broker_id}") for b in brokers]
    for t in threads:
        t.start()
    try:
        await eventually_async(
            lambda: all(b.beats and not b.beats[-1][2] for b in brokers),
            10,
            "both brokers unfenced",
        )
        # The stall: the main loop (where the Raft adapter lives) runs
        # nothing for three sessions.
        start = time.monotonic()
        time.sleep(STALL_S)
        end = time.monotonic()
    finally:
        for b in brokers:
            b.stop.set()
        for t in threads:
            await asyncio.to_thread(t.join, 10)
    for broker in brokers:
        assert not broker.failure, broker.failure
        during = [beat for beat in broker.beats if start <= beat[0] <= end]
        # Answered every ~500 ms throughout, each within one interval, unfenced.
        assert len(during) >= STALL_S / LATE_S - 2, during
        assert max(took for _sent, took, _f in during) < LATE_S, during
        assert not any(fenced for _s, _t, fenced in during), during
    image = controller.store.image
    assert not image.brokers[2].fenced and not image.brokers[3].fenced
    # The controller's own loop kept its time (what /healthz reports).
    assert controller.thread.loop_lag()["max"] < LATE_S * 1000, controller.thread.loop_lag()


async def test_the_listener_refuses_bad_input_with_json_4xx(controller: Controller) -> None:
    def calls() -> list[tuple[int, Any]]:
        conn = http.client.HTTPConnection("127.0.0.1", controller.port, timeout=10)
        try:
            return [
                post(conn, "heartbeat", {"broker_id": 2}, secret=None),
                post(conn, "heartbeat", {"broker_id": 2}, secret="wrong"),
                post(conn, "heartbeat", b"{not json"),
                post(conn, "heartbeat", {"broker_id": "two"}),
                post(conn, "no-such-call", {}),
                post(conn, "heartbeat", w.body_of(w.heartbeat_request(99, 1, 0))),
                post(conn, "heartbeat", b"[" * (5 * 1024 * 1024)),
            ]
        finally:
            conn.close()

    answers = await asyncio.to_thread(calls)
    statuses = [status for status, _body in answers]
    assert statuses[:5] == [401, 401, 400, 400, 400], answers
    # An unknown broker: the runtime's own refusal, as a 4xx.
    assert 400 <= statuses[5] < 500 and answers[5][1]["error"]["code"], answers[5]
    assert statuses[6] == 413, answers[6]
    for _status, body in answers:
        assert set(body["error"]) >= {"code", "message"}, body


async def test_local_calls_from_any_loop_run_on_the_controller_loop(
    controller: Controller,
) -> None:
    local = LocalController(controller.thread)
    assert local.active
    seen: list[asyncio.AbstractEventLoop] = []
    runtime = controller.thread.runtime
    assert runtime is not None
    original = runtime.run

    async def recording_run(handler: Any) -> Any:
        seen.append(asyncio.get_running_loop())
        return await original(handler)

    runtime.run = recording_run  # type: ignore[method-assign]
    request = w.RegisterBrokerRequest(
        broker_id=4, incarnation_id="inc-4", endpoints={"http": "http://127.0.0.1:9004"}
    )
    answer = await local.call("register", w.body_of(request))
    assert answer["broker_epoch"] >= 0
    assert seen == [controller.thread.loop]
    assert controller.store.image.brokers[4].broker_epoch == answer["broker_epoch"]


async def test_a_listener_that_cannot_bind_fails_the_start_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    store = MetadataStore()
    raft = RaftAdapter(
        RaftConfig(
            node_id="1",
            data_dir=tmp_path / "raft",
            peers={},
            listen_address=f"127.0.0.1:{free_port()}",
            **{**FAST_TIMINGS, "password": RAFT_TEST_PASSWORD},  # type: ignore[arg-type]
        ),
        store,
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        http = listener_http_config(HttpConfig(), ControllerListenerConfig(), address)

        def listener(runtime: ControllerRuntime) -> HttpServer:
            app = controller_app(
                ControllerRpc(runtime),
                cluster_secret=SECRET,
                request_bytes_max=http.request_bytes_max,
                active=lambda: runtime.active,
            )
            return HttpServer(app, http)

        thread = ControllerThread(lambda: ControllerRuntime(raft, store, CONFIG), listener)
        await raft.start()
        try:
            with pytest.raises(OSError):
                await thread.start()
        finally:
            await raft.stop()
    assert not thread.alive
    assert thread.loop is not None and thread.loop.is_closed()
    assert thread.runtime is not None and not thread.runtime.active
    assert thread.runtime._task is None and thread.runtime._watch is None
