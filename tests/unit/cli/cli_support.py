"""Servers for the CLI tests.

The CLI is synchronous (urllib), so the aiohttp servers it talks to run on an
event loop in a background thread (`LoopThread`); tests stay plain functions.

- `Broker`: a real one-broker ReplicaManager behind the real DataRoutes, with a
  fake metadata view shared by the brokers of a `FakeCluster` (so a second
  broker can answer NOT_LEADER_OR_FOLLOWER naming the first), plus a stand-in
  for `GET /v1/topics/{topic}` in routes_admin's shape (the CLI's consume
  reads the partition list from it).
- `RealNode`: one `lograft node` process (controller+broker, one voter) on
  free ports in a temp dir, stopped by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from lograft.api.app import create_app
from lograft.api.routes_data import DataRoutes, json_response
from lograft.api.services import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.cli.common import Streams
from lograft.cli.main import main
from lograft.errors import UnknownTopicOrPartitionError
from lograft.node.peer_client import PeerClient
from lograft.protocol.topic_partition import TopicPartition
from tests.process_leash import leashed

# Any wait in these tests ends by this deadline, s.
DEADLINE_S = 30.0


class LoopThread:
    """An asyncio loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(DEADLINE_S)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(DEADLINE_S)
        self.loop.close()


class FakeCluster:
    """Topics and broker addresses, as every broker's metadata view sees them."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicView] = {}
        self.urls: dict[int, str] = {}
        self.producer_ids = 1000

    def add_topic(
        self, name: str, partitions: int, leader: int = 1, config: dict[str, Any] | None = None
    ) -> TopicView:
        a = Assignment((leader,), (leader,), leader, 1, 0)
        view = TopicView(name, f"id-{name}", {p: a for p in range(partitions)}, config or {})
        self.topics[name] = view
        return view


class _MetadataView:
    """The MetadataView the data routes read, over the shared FakeCluster."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def topic(self, name: str) -> TopicView | None:
        return self.cluster.topics.get(name)

    def topics(self) -> list[TopicView]:
        return list(self.cluster.topics.values())

    def broker_url(self, broker_id: int) -> str | None:
        return self.cluster.urls.get(broker_id)

    def live_brokers(self) -> list[int]:
        return sorted(self.cluster.urls)


class Broker:
    """One broker (id `broker_id`) serving the data routes on 127.0.0.1:<free port>."""

    def __init__(self, loop: LoopThread, cluster: FakeCluster, broker_id: int, data: Path):
        self.loop = loop
        self.cluster = cluster
        self.broker_id = broker_id
        self.data = data
        self.url = ""
        loop.run(self._start())
        cluster.urls[broker_id] = self.url

    async def _start(self) -> None:
        self.replicas = ReplicaManager(
            self.broker_id, self.data, BrokerSettings(min_insync_replicas=1)
        )
        await self.replicas.start()
        metadata = _MetadataView(self.cluster)
        self.session = PeerClient(cluster_secret="s", metadata=metadata)
        app = create_app(cluster_secret="s", request_bytes_max=1 << 22, ready=lambda: (True, {}))
        DataRoutes(self.replicas, metadata, self.session).add_to(app)
        app.router.add_get("/v1/topics/{topic}", self._describe)
        app.router.add_get("/v1/brokers", self._brokers)
        app.router.add_post("/v1/producers", self._init_producer)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def host_topics(self) -> None:
        """Become the replica of every partition the cluster assigns to this broker."""
        hosted = {
            TopicPartition(t.name, p): PartitionMeta(t.topic_id, a, dict(t.config))
            for t in self.cluster.topics.values()
            for p, a in t.partitions.items()
            if self.broker_id in a.replicas
        }

        async def apply() -> None:
            self.replicas.apply_metadata(hosted)

        self.loop.run(apply())

    async def _brokers(self, _request: web.Request) -> web.Response:
        """routes_admin.brokers' shape: every broker of the FakeCluster."""
        brokers = [
            {"id": b, "fenced": False, "endpoints": {"http": url}}
            for b, url in sorted(self.cluster.urls.items())
        ]
        return json_response({"brokers": brokers})

    async def _init_producer(self, _request: web.Request) -> web.Response:
        """node/producer_ids' shape: a fresh producer id per call."""
        self.cluster.producer_ids += 1
        return json_response({"producer_id": self.cluster.producer_ids, "producer_epoch": 0})

    async def _describe(self, request: web.Request) -> web.Response:
        """routes_admin.describe_topic's shape (offsets left out)."""
        name = request.match_info["topic"]
        view = self.cluster.topics.get(name)
        if view is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", topic=name)
        return json_response(
            {
                "name": view.name,
                "topic_id": view.topic_id,
                "configs": dict(view.config),
                "partitions": [
                    {
                        "partition": p,
                        "leader": a.leader,
                        "leader_epoch": a.leader_epoch,
                        "replicas": list(a.replicas),
                        "isr": list(a.isr),
                        "offline": a.leader < 0,
                    }
                    for p, a in sorted(view.partitions.items())
                ],
            }
        )

    def stop(self) -> None:
        async def stop() -> None:
            await self.runner.cleanup()
            await self.session.close()
            await self.replicas.stop()

        self.loop.run(stop())


# -- running the CLI in-process -----------------------------------------------------------------


class LineWatch(io.StringIO):
    """A stdout that lets another thread wait for the n-th line."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()

    def write(self, s: str) -> int:
        with self._cond:
            n = super().write(s)
            self._cond.notify_all()
            return n

    def lines(self) -> list[str]:
        with self._cond:
            return self.getvalue().splitlines()

    def wait_lines(self, n: int, timeout_s: float = DEADLINE_S) -> list[str]:
        with self._cond:
            self._cond.wait_for(lambda: self.getvalue().count("\n") >= n, timeout_s)
            return self.getvalue().splitlines()


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def run_cli(argv: Sequence[str], stdin: bytes = b"", stdout: io.StringIO | None = None) -> Result:
    out = stdout if stdout is not None else io.StringIO()
    err = io.StringIO()
    code = main(list(argv), Streams(io.BytesIO(stdin), out, err))
    return Result(code, out.getvalue(), err.getvalue())


def http_json(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """One plain HTTP exchange (no client logic): (status, decoded JSON body)."""
    data = None if body is None else orjson.dumps(body)
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=DEADLINE_S) as resp:
            return resp.status, orjson.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, orjson.loads(exc.read() or b"null")


def dead_urls(n: int = 2) -> list[str]:
    """URLs on which nothing listens (ports just released by the kernel)."""
    return [f"http://127.0.0.1:{port}" for port in free_ports(n)]


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


# -- a real node process ----------------------------------------------------------------------


class RealNode:
    """`lograft node` with roles controller+broker and itself as the only voter."""

    def __init__(self, root: Path) -> None:
        http_port, raft_port = free_ports(2)
        self.url = f"http://127.0.0.1:{http_port}"
        self.log_path = root / "node.log"
        config = root / "node.toml"
        config.write_text(
            f"""node_id = 1
roles = ["controller", "broker"]
data_dir = "{root / "data"}"
cluster_id = "cli-test"
cluster_secret = "cli-test-cluster-secret"
[http]
host = "127.0.0.1"
port = {http_port}
[[voters]]
id = 1
raft = "127.0.0.1:{raft_port}"
http = "127.0.0.1:{http_port}"
[broker]
min_insync_replicas = 1
"""
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGRAFT_")}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                leashed(
                    [sys.executable, "-m", "lograft.cli.main", "node", "--config", str(config)]
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited: {self.log_path.read_text()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as resp,
            ):
                if resp.status == 200:
                    return
            time.sleep(0.1)  # polling a condition with a deadline
        raise RuntimeError(f"node not ready in {DEADLINE_S}s: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(DEADLINE_S)
