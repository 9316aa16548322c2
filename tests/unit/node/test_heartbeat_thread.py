"""Heartbeats go out from their own thread: a blocked main loop (a saturated
broker) does not make them late, and their answers are applied on the main
loop. The fake controller runs on a plain HTTP server thread, so it answers
while the test's loop is blocked."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lograft.node.broker_agent import AgentState, BrokerAgent
from lograft.node.config import NodeConfig, parse_config
from lograft.node.controller_client import ControllerClient
from lograft.node.heartbeat_thread import Outcome
from lograft.node.peer_client import PeerClient
from lograft.node.peer_urls import PeerUrls

INTERVAL_MS = 500  # the defaults of [controller]
SESSION_MS = 1500
STALL_S = 3 * SESSION_MS / 1000


class FakeController:
    """Records when each heartbeat arrives; answers as an active controller."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.lock = threading.Lock()
        self.registered = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                name = self.path.rsplit("/", 1)[-1]
                answer = fake.answer(name, body)
                data = json.dumps(answer).encode()
                self.send_response(409 if "error" in answer else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if name == "register":
            self.registered.set()
            return {"broker_epoch": 7, "metadata_offset": 5}
        if body["want_shutdown"]:
            return heartbeat_answer(should_shut_down=True)
        with self.lock:
            self.arrivals.append(time.monotonic())
        return heartbeat_answer(should_shut_down=False)

    def arrivals_between(self, start: float, end: float) -> list[float]:
        with self.lock:
            return [t for t in self.arrivals if start <= t <= end]


def heartbeat_answer(*, should_shut_down: bool) -> dict[str, Any]:
    return {
        "fenced": False,
        "in_controlled_shutdown": should_shut_down,
        "should_shut_down": should_shut_down,
        "metadata_offset": 5,
    }


def controller_client(config: NodeConfig) -> ControllerClient:
    calls = PeerClient(cluster_secret="s", peers=PeerUrls(config.http.dial))
    return ControllerClient(config, calls, None, lambda: 1)


@pytest.fixture
def controller() -> Iterator[FakeController]:
    fake = FakeController()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def broker_config(port: int) -> NodeConfig:
    # The voter's own address is dead: only the [http.dial] entry reaches the
    # fake, so the thread's client must go through PeerUrls.
    return parse_config(
        {
            "node_id": 2,
            "roles": ["broker"],
            "data_dir": "d",
            "voters": [{"id": 1, "raft": "127.0.0.1:1", "http": "127.0.0.1:1"}],
            "http": {"port": 9092, "dial": {"1": f"127.0.0.1:{port}"}},
        }
    )


async def test_heartbeats_keep_time_while_the_main_loop_is_blocked(controller: FakeController):
    config = broker_config(controller.port)
    main_client = controller_client(config)
    agent = BrokerAgent(
        2,
        {"http": "http://127.0.0.1:9092"},
        None,
        main_client,
        lambda: 5,
        heartbeat_interval_ms=INTERVAL_MS,
        client_factory=lambda: controller_client(config),
    )
    applied_on: list[int] = []
    active, applied = asyncio.Event(), asyncio.Event()
    apply = agent._apply

    def recording_apply(outcome: Outcome) -> None:
        applied_on.append(threading.get_ident())
        apply(outcome)
        applied.set()
        if agent.state is AgentState.ACTIVE:
            active.set()

    agent._apply = recording_apply  # type: ignore[method-assign]
    try:
        await agent.start()
        await asyncio.wait_for(active.wait(), 10)
        applied.clear()
        # The stall being simulated: the loop runs nothing for 3 sessions.
        start = time.monotonic()
        time.sleep(STALL_S)
        end = time.monotonic()
        during = controller.arrivals_between(start, end)
        beats = [start, *during, end]
        gaps = [b - a for a, b in itertools.pairwise(beats)]
        # Every ~500 ms; a session (1.5 s) without one would fence the broker.
        assert max(gaps) < SESSION_MS / 1000, gaps
        assert len(during) >= 3, during
        # The answers queued during the stall are applied once the loop runs,
        # on the loop's own thread, never the heartbeat thread's.
        await asyncio.wait_for(applied.wait(), 10)
        assert set(applied_on) == {threading.get_ident()}
        assert agent.broker_epoch == 7 and agent.unfenced
    finally:
        done = await agent.shutdown(10_000)
        await main_client.calls.close()
    assert done  # the controlled shutdown was agreed
    assert agent.state is AgentState.STOPPED
    assert agent._thread is not None and not agent._thread.alive
    assert agent._thread.session_closed


async def test_stopping_right_after_start_joins_the_thread(controller: FakeController):
    config = broker_config(controller.port)
    main_client = controller_client(config)
    agent = BrokerAgent(
        2,
        {"http": "http://127.0.0.1:9092"},
        None,
        main_client,
        lambda: 5,
        heartbeat_interval_ms=INTERVAL_MS,
        client_factory=lambda: controller_client(config),
    )
    try:
        await agent.start()
        began = time.monotonic()
        await agent.shutdown(2_000)
        assert agent._thread is not None and not agent._thread.alive
        assert agent._thread.session_closed
        # Cancelled, not waited out: well inside the node's shutdown bounds.
        assert time.monotonic() - began < 5
    finally:
        await main_client.calls.close()


class SessionLosingController(FakeController):
    """Answers the first heartbeat STALE_BROKER_EPOCH (the session was lost,
    say across a controller failover) and records every registration's body."""

    def __init__(self) -> None:
        super().__init__()
        self.registrations: list[dict[str, Any]] = []
        self.second_registration = threading.Event()

    def answer(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if name == "register":
                self.registrations.append(body)
                if len(self.registrations) == 2:
                    self.second_registration.set()
                return {"broker_epoch": 7 + len(self.registrations), "metadata_offset": 5}
            if len(self.registrations) == 1 and not body["want_shutdown"]:
                return {"error": {"code": "STALE_BROKER_EPOCH", "message": "lost session"}}
        return heartbeat_answer(should_shut_down=bool(body["want_shutdown"]))


@pytest.fixture
def session_losing() -> Iterator[SessionLosingController]:
    fake = SessionLosingController()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


async def test_registrations_name_the_previous_epoch_of_the_broker_or_of_this_process(
    session_losing: SessionLosingController,
):
    # The first registration says what the clean-shutdown file said (3); one
    # made again within the process (its logs never left) names the epoch it
    # held (8), so the controller does not take it as an unclean restart.
    config = broker_config(session_losing.port)
    main_client = controller_client(config)
    agent = BrokerAgent(
        2,
        {"http": "http://127.0.0.1:9092"},
        None,
        main_client,
        lambda: 5,
        heartbeat_interval_ms=INTERVAL_MS,
        client_factory=lambda: controller_client(config),
        previous_broker_epoch=3,
    )
    try:
        await agent.start()
        got = await asyncio.to_thread(session_losing.second_registration.wait, 10)
        assert got, session_losing.registrations
        first, second = session_losing.registrations
        assert (first["previous_broker_epoch"], second["previous_broker_epoch"]) == (3, 8)
    finally:
        await agent.shutdown(2_000)
        await main_client.calls.close()
