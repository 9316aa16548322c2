#!/usr/bin/env python3
"""A node's CPU per HTTP request on the hot routes, next to a bare aiohttp handler.

Starts ONE lograft node (controller and broker, on 127.0.0.1 ports below the
ephemeral range, scripts/loopback_ports.py) per `--tree`, each with that
tree's Python (so `--tree main=/work/main/.venv/bin/python --tree
mine=.venv/bin/python` compares two checkouts in one run), and one bare
aiohttp server (the floor: parse a request, read its body, answer a few
bytes, access log off, run by this script's Python). This process is the
client: `--connections` keep-alive connections, each sending its requests one
after another, with the requests pre-encoded so that the client costs little.

For each route, `--requests` requests per round; the figure is the server's
CPU (the sum of its threads' /proc schedstat run times) over the round, less what it spends
idle over as long (measured for `--idle-seconds` before each server's
routes: a node's Raft ticks and heartbeats, a few % of a core), divided by
the requests, in microseconds: unlike latency, it holds while the machine is
loaded. Rounds alternate the trees' order (ABBA...), and the median over
`--rounds` is printed, with the load average of each round.

Routes (the node's hot paths; each answers 200 or it is an error):

- `produce`: `POST /v1/topics/bench/partitions/0/batches` (one batch of one
  100-byte record, acks=all; the topic has one replica);
- `fetch`: `GET /v1/topics/bench/partitions/0/records?offset=0` raw (Accept:
  application/vnd.lograft.batch), max_wait_ms=0, max_bytes=1024;
- `replica-fetch`: `POST /internal/v1/replica-fetch` with the cluster secret,
  sessionless, max_wait_ms=0 (from a replica id the partition does not have:
  the answer is its per-partition error, the HTTP path is the same);
- `replica-stream`: the same fetch as one message on a kept WebSocket
  (`GET /internal/v1/replica-fetch/stream`, api/replica_stream.py), one
  stream per connection (the upgrade is not counted: it is made before the
  round starts);
- `forwarded`: `POST /internal/v1/produce` (the forwarded JSON produce form:
  one partition's batch) with the cluster secret;
- `produce-json`: `POST /v1/topics/bench/records`, bench_compare's JSON
  produce body (`JSON_RECORDS` keyless records of 100-byte string values,
  acks=all): its CPU per request is mostly per record, the others' per
  exchange;
- `produce-json-1k`: the same with 1,024-byte values (bench_compare's
  1 KiB JSON load);
- `floor-get`, `floor-post`: the bare aiohttp handler.

    .venv/bin/python scripts/bench_request_cost.py \\
        --tree main=/work/main/.venv/bin/python --tree mine=.venv/bin/python \\
        [--tree mine@uvloop=.venv/bin/python] [--requests 2000] [--rounds 3] \\
        [--routes produce-json produce-json-1k]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import http_json, log, machine  # a sibling script
from loopback_ports import free_ports  # a sibling script

from lograft.api.internal_paths import REPLICA_STREAM_PATH
from lograft.api.replica_stream import ANSWER_HEAD, REQUEST_HEAD
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import FetchPartitionRequest, PartitionFetch, ReplicaFetchRequest
from lograft.protocol.produce_wire import Acks, PartitionBatch, ProduceRequest, encode_request
from tests.integration.cluster_harness import (
    CLUSTER_SECRET,
    SECRET_HEADER,
    TEST_RAFT_TIMINGS,
    NodeSpec,
    node_config_toml,
)

TOPIC = "bench"
# How long a node may take to answer /readyz after it starts, seconds.
READY_TIMEOUT_S = 60.0
# Requests sent before each measured round, to warm caches and connections.
WARMUP_REQUESTS = 50
# Waiting for one answer, seconds.
ANSWER_TIMEOUT_S = 30.0
NODE_ROUTES = (
    "produce",
    "fetch",
    "replica-fetch",
    "replica-stream",
    "forwarded",
    "produce-json",
    "produce-json-1k",
)
FLOOR_ROUTES = ("floor-get", "floor-post")
FLOOR_ANSWER = b'{"ok":true}'
# Records per JSON produce request (bench_compare's JSON load sends as many).
JSON_RECORDS = 500
# Value bytes of each JSON produce route's records.
JSON_VALUE_BYTES = {"produce-json": 100, "produce-json-1k": 1024}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME[@LOOP]=PYTHON",
        help="a node run by this Python (its tree's code), on event loop LOOP "
        "(asyncio or uvloop; default: the node's default); default: this Python",
    )
    ap.add_argument("--requests", type=int, default=2000, help="per route per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=4, help="concurrent keep-alive ones")
    ap.add_argument(
        "--idle-seconds",
        type=float,
        default=2.0,
        help="how long each server's idle CPU is measured per round (subtracted)",
    )
    ap.add_argument(
        "--routes",
        nargs="+",
        choices=NODE_ROUTES,
        default=list(NODE_ROUTES),
        help="the node routes to measure (default: all; the floor's always)",
    )
    ap.add_argument("--floor-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# -- the floor: a bare aiohttp server ---------------------------------------------------


def run_floor_server(port: int) -> None:
    from aiohttp import web

    async def get(_request: web.Request) -> web.Response:
        return web.Response(body=FLOOR_ANSWER, content_type="application/json")

    async def post(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=FLOOR_ANSWER, content_type="application/json")

    app = web.Application()
    app.router.add_get("/floor", get)
    app.router.add_post("/floor", post)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# -- servers ------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    routes: tuple[str, ...]
    node: bool = True  # False: the bare aiohttp floor
    cpu_us: dict[str, list[float]] = field(default_factory=dict)

    def cpu_s(self) -> float:
        """CPU time of all the process's threads, s: /proc's schedstat, in ns
        (utime and stime count 10 ms ticks, too coarse for a round)."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended meanwhile
        return total / 1e9

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_node(
    name: str,
    python: str,
    workdir: Path,
    event_loop: str | None = None,
    routes: tuple[str, ...] = NODE_ROUTES,
) -> Server:
    http_port, raft_port, controller_port = free_ports(3)
    spec = NodeSpec(
        node_id=1,
        http_port=http_port,
        raft_port=raft_port,
        controller_port=controller_port,
        data_dir=workdir / "data",
        raft=dict(TEST_RAFT_TIMINGS),
        broker={"min_insync_replicas": 1},
        log_level="WARNING",
        event_loop=event_loop,
    )
    config = workdir / "node.toml"
    config.write_text(node_config_toml(spec, [spec]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGRAFT_")}
    with open(workdir / "node.log", "ab") as out:
        proc = subprocess.Popen(
            [python, "-m", "lograft.cli.main", "node", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(workdir),  # outside any checkout: the tree is the Python's own
            env=env,
            start_new_session=True,
        )
    return Server(name, http_port, proc, routes)


def start_floor(workdir: Path) -> Server:
    (port,) = free_ports(1)
    with open(workdir / "floor.log", "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--floor-server", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Server("aiohttp", port, proc, FLOOR_ROUTES, node=False)


def wait_ready(server: Server, path: str) -> None:
    """Poll until `path` answers 200 (or the server exits, or the deadline passes)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.proc.returncode}")
        try:
            http_json("GET", f"http://127.0.0.1:{server.port}{path}")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.name} did not answer {path}") from None
            time.sleep(0.1)


def create_topic(server: Server) -> None:
    url = f"http://127.0.0.1:{server.port}/v1/topics"
    http_json("POST", url, {"name": TOPIC, "partitions": 1, "replication_factor": 1})
    # The partition's leader is elected through the quorum: wait until it takes a produce.
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            asyncio.run(drive(server.port, [requests_for("produce")[0]], 1, 1))
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# -- requests -----------------------------------------------------------------------------


def _request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def requests_for(route: str) -> list[bytes]:
    batch = build_batch([RecordInput(key=None, value=b"x" * 100)], timestamp_ms=1)
    secret = {SECRET_HEADER: CLUSTER_SECRET}
    if route == "produce":
        ct = {"Content-Type": "application/vnd.lograft.batch"}
        return [_request("POST", f"/v1/topics/{TOPIC}/partitions/0/batches", ct, batch)]
    if route == "fetch":
        path = f"/v1/topics/{TOPIC}/partitions/0/records?offset=0&max_wait_ms=0&max_bytes=1024"
        return [_request("GET", path, {"Accept": "application/vnd.lograft.batch"})]
    if route == "replica-fetch":
        part = FetchPartitionRequest(TOPIC, 0, PartitionFetch(0))
        body = ReplicaFetchRequest(2, 0, 1, 1 << 20, 1024, [part]).to_json()
        headers = {**secret, "Content-Type": "application/json"}
        return [_request("POST", "/internal/v1/replica-fetch", headers, body)]
    if route == "replica-stream":
        part = FetchPartitionRequest(TOPIC, 0, PartitionFetch(0))
        body = ReplicaFetchRequest(2, 0, 1, 1 << 20, 1024, [part]).to_json()
        return [REQUEST_HEAD.pack(1) + body]
    if route == "forwarded":
        body = encode_request(ProduceRequest(TOPIC, Acks.ALL, [PartitionBatch(0, batch)]))
        headers = {**secret, "Content-Type": "application/vnd.lograft.produce"}
        return [_request("POST", "/internal/v1/produce", headers, body)]
    if route in JSON_VALUE_BYTES:
        records = [{"value": "x" * JSON_VALUE_BYTES[route]}] * JSON_RECORDS
        body = json.dumps({"value_format": "string", "records": records}).encode()
        ct = {"Content-Type": "application/json"}
        return [_request("POST", f"/v1/topics/{TOPIC}/records", ct, body)]
    if route == "floor-get":
        return [_request("GET", "/floor", {})]
    if route == "floor-post":
        return [_request("POST", "/floor", {"Content-Type": "application/octet-stream"}, batch)]
    raise ValueError(route)


async def _one_connection(port: int, requests: list[bytes], count: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in range(count):
            writer.write(requests[i % len(requests)])
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_TIMEOUT_S)
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            if status not in (200, 202):
                raise RuntimeError(f"answer {status}: {body[:300]!r}")
    finally:
        writer.close()


async def _one_stream(
    stream: aiohttp.ClientWebSocketResponse, requests: list[bytes], count: int
) -> None:
    for i in range(count):
        await stream.send_bytes(requests[i % len(requests)])
        msg = await asyncio.wait_for(stream.receive(), ANSWER_TIMEOUT_S)
        if msg.type is not aiohttp.WSMsgType.BINARY:
            raise RuntimeError(f"stream message {msg.type}: {msg.data!r}")
        _id, status = ANSWER_HEAD.unpack_from(msg.data)
        if status != 200:
            raise RuntimeError(f"answer {status}: {msg.data[:300]!r}")


async def drive(port: int, requests: list[bytes], count: int, connections: int) -> None:
    per = max(1, count // connections)
    await asyncio.gather(*(_one_connection(port, requests, per) for _ in range(connections)))


async def _measure_streams(
    server: Server, requests: list[bytes], count: int, connections: int, idle_share: float
) -> tuple[float, float]:
    """`measure` over `connections` WebSockets, opened (and warmed) before
    the round's clock starts."""
    url = f"http://127.0.0.1:{server.port}{REPLICA_STREAM_PATH}"
    per = max(1, count // connections)
    async with aiohttp.ClientSession() as session:
        streams = [
            await session.ws_connect(url, headers={SECRET_HEADER: CLUSTER_SECRET}, compress=0)
            for _ in range(connections)
        ]
        await _one_stream(streams[0], requests, WARMUP_REQUESTS)
        cpu0, wall0 = server.cpu_s(), time.perf_counter()
        await asyncio.gather(*(_one_stream(s, requests, per) for s in streams))
        cpu1, wall1 = server.cpu_s(), time.perf_counter()
        for stream in streams:
            await stream.close()
    busy = cpu1 - cpu0 - idle_share * (wall1 - wall0)
    return busy / (per * connections) * 1e6, (wall1 - wall0) / (per * connections) * 1e6


def idle_cpu_share(server: Server, seconds: float) -> float:
    """The server's CPU while it answers nothing (a node's Raft ticks,
    heartbeats, loop-lag probe), as a share of one core."""
    cpu0, wall0 = server.cpu_s(), time.perf_counter()
    time.sleep(seconds)  # measuring an interval, not waiting for a condition
    return (server.cpu_s() - cpu0) / (time.perf_counter() - wall0)


def measure(
    server: Server, route: str, count: int, connections: int, idle_share: float
) -> tuple[float, float]:
    """CPU µs per request of `server` on `route` (less its idle CPU over the
    same time), and the client's wall µs per request."""
    requests = requests_for(route)
    if route == "replica-stream":
        return asyncio.run(_measure_streams(server, requests, count, connections, idle_share))
    asyncio.run(drive(server.port, requests, WARMUP_REQUESTS, 1))
    cpu0, wall0 = server.cpu_s(), time.perf_counter()
    asyncio.run(drive(server.port, requests, count, connections))
    cpu1, wall1 = server.cpu_s(), time.perf_counter()
    sent = max(1, count // connections) * connections
    busy = cpu1 - cpu0 - idle_share * (wall1 - wall0)
    return busy / sent * 1e6, (wall1 - wall0) / sent * 1e6


# -- the run ------------------------------------------------------------------------------


def trees(args: argparse.Namespace) -> list[tuple[str, str, str | None]]:
    """(name, Python, event loop or None for the node's default) per --tree."""
    out = []
    for spec in args.tree or [f"this={sys.executable}"]:
        name, _, python = spec.partition("=")
        if not python:
            raise SystemExit(f"--tree {spec!r}: say NAME=PYTHON or NAME@LOOP=PYTHON")
        loop = name.partition("@")[2] or None
        out.append((name, os.path.abspath(python), loop))  # the node runs elsewhere
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.floor_server is not None:
        run_floor_server(args.floor_server)
        return 0
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="lograft-bench-request-cost-") as tmp:
        try:
            for name, python, loop in trees(args):
                workdir = Path(tmp) / name
                workdir.mkdir()
                log(f"starting a node of {name} ({python}) in {workdir}")
                servers.append(start_node(name, python, workdir, loop, tuple(args.routes)))
            servers.append(start_floor(Path(tmp)))
            for server in servers:
                wait_ready(server, "/readyz" if server.node else "/floor")
                if server.node:
                    create_topic(server)
            loads = run_rounds(servers, args)
            report(servers, args, loads)
        finally:
            for server in servers:
                server.stop()
    return 0


def run_rounds(servers: list[Server], args: argparse.Namespace) -> list[str]:
    loads = []
    for r in range(args.rounds):
        order = servers if r % 2 == 0 else list(reversed(servers))
        for server in order:
            idle = idle_cpu_share(server, args.idle_seconds)
            log(f"round {r + 1} {server.name:>8} idle CPU {idle * 100:.1f} % of a core")
            for route in server.routes:
                cpu_us, wall_us = measure(server, route, args.requests, args.connections, idle)
                server.cpu_us.setdefault(route, []).append(cpu_us)
                log(
                    f"round {r + 1} {server.name:>8} {route:<14} {cpu_us:7.0f} us CPU/request "
                    f"({wall_us:5.0f} us wall)"
                )
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        loads.append(load)
        log(f"round {r + 1} done, loadavg {load}")
    return loads


def report(servers: list[Server], args: argparse.Namespace, loads: list[str]) -> None:
    floor = next(s for s in servers if not s.node)
    floor_get = statistics.median(floor.cpu_us["floor-get"])
    floor_post = statistics.median(floor.cpu_us["floor-post"])
    print(f"# {machine()}")
    print(
        f"# {args.requests} requests per route per round, {args.rounds} rounds (order "
        f"alternating), {args.connections} connection(s); loadavg per round: {' | '.join(loads)}"
    )
    print(f"# floor (bare aiohttp): GET {floor_get:.0f} us, POST {floor_post:.0f} us CPU/request")
    nodes = [s for s in servers if s.node]
    print(
        f"{'route':<14}"
        + "".join(f"{s.name + ' us':>12}{'x floor':>9}" for s in nodes)
        + "".join(f"{'/' + nodes[0].name:>10}" for _ in nodes[1:])
    )
    for route in nodes[0].routes:
        base = floor_get if route == "fetch" else floor_post
        cells = ""
        medians = [statistics.median(s.cpu_us[route]) for s in nodes]
        for m in medians:
            cells += f"{m:12.0f}{m / base:9.2f}"
        for m in medians[1:]:
            cells += f"{m / medians[0]:10.2f}"
        print(f"{route:<14}{cells}")


if __name__ == "__main__":
    sys.exit(main())
