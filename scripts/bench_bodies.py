#!/usr/bin/env python3
"""What hostile request bodies cost a node: gzip bombs and many large bodies at once.

Starts a temporary three-node cluster (scripts/bench.py's `TempCluster`,
default node settings, stopped by pid at the end) and sends everything to
node 1:

1. `--bombs` (10) produce requests at once, each `Content-Encoding: gzip` of
   `--bomb-mib` (100) MiB of zeros (about 100 KiB on the wire);
2. `--bodies` (64) produce requests at once, each a body of `--body-mib` (16)
   MiB that is not JSON (the node must read it whole before it can say so).

For each: the answers' statuses, wall time until all are answered, node 1's
CPU seconds and the growth of its peak RSS (VmHWM, reset before the case),
and the slowest of the `GET /healthz` probes sent every 10 ms meanwhile (how
long the node's event loop was kept from answering).

    .venv/bin/python scripts/bench_bodies.py [--bombs 10] [--bodies 64]

To measure another checkout's server, put it first on the nodes' path (run
from outside the repository, so that the current directory does not win):

    cd /tmp && PYTHONPATH=/path/to/checkout /work/main/.venv/bin/python \\
        /work/main/scripts/bench_bodies.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import TempCluster, cpu_seconds, progress  # a sibling script

TOPIC = "bench-bodies"
PROBE_INTERVAL_S = 0.01


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bombs", type=int, default=10)
    ap.add_argument("--bomb-mib", type=int, default=100)
    ap.add_argument("--bodies", type=int, default=64)
    ap.add_argument("--body-mib", type=int, default=16)
    return ap.parse_args(argv)


def gzip_of_zeros(mib: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(z.compress(bytes(1 << 20)) for _ in range(mib)) + z.flush()


def request(body: bytes, *headers: str) -> bytes:
    lines = [f"POST /v1/topics/{TOPIC}/records HTTP/1.1", "Host: x", "Connection: close"]
    lines += ["Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def status_of(host: str, port: int, raw: bytes) -> str:
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(raw)
        line = await asyncio.wait_for(reader.readline(), 120)
        writer.close()
        return line.split(b" ")[1].decode() if line else "closed"
    except (ConnectionError, TimeoutError) as exc:
        return type(exc).__name__


def probe(host: str, port: int, stop: threading.Event) -> float:
    """The slowest /healthz answer until `stop` is set, s. In a thread of its
    own, so that the senders' event loop does not delay it."""
    slowest = 0.0
    while not stop.is_set():
        started = time.monotonic()
        with socket.create_connection((host, port), timeout=120) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            conn.recv(1024)
        slowest = max(slowest, time.monotonic() - started)
        stop.wait(PROBE_INTERVAL_S)
    return slowest


def peak_rss(pid: int, reset: bool = False) -> int:
    if reset:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for {pid}")


async def case(
    name: str, host: str, port: int, pid: int, send: Callable[[], Awaitable[list[str]]]
) -> dict[str, Any]:
    progress(f"{name} ...")
    before = peak_rss(pid, reset=True)
    cpu_before = cpu_seconds([pid]) or 0.0
    stop = threading.Event()
    prober = asyncio.ensure_future(asyncio.to_thread(probe, host, port, stop))
    started = time.monotonic()
    statuses = await send()
    elapsed = time.monotonic() - started
    stop.set()
    return {
        "case": name,
        "statuses": dict(Counter(statuses)),
        "seconds": round(elapsed, 2),
        "node_cpu_s": round((cpu_seconds([pid]) or 0.0) - cpu_before, 2),
        "peak_rss_growth_mib": round((peak_rss(pid) - before) / 2**20, 1),
        "slowest_healthz_ms": round(await prober * 1000, 1),
    }


async def run(args: argparse.Namespace, bootstrap: str, pid: int) -> list[dict[str, Any]]:
    url = urlsplit(bootstrap)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    topic = {"name": TOPIC, "partitions": 1, "replication_factor": 1}
    created = await status_of(
        host,
        port,
        request(json.dumps(topic).encode()).replace(
            f"/v1/topics/{TOPIC}/records".encode(), b"/v1/topics", 1
        ),
    )
    if created not in ("201", "409"):
        raise RuntimeError(f"creating {TOPIC} answered {created}")
    bomb = request(gzip_of_zeros(args.bomb_mib), "Content-Encoding: gzip")
    big = request(b"x" * (args.body_mib << 20))

    async def bombs() -> list[str]:
        return list(await asyncio.gather(*(status_of(host, port, bomb) for _ in range(args.bombs))))

    async def bodies() -> list[str]:
        return list(await asyncio.gather(*(status_of(host, port, big) for _ in range(args.bodies))))

    return [
        await case(
            f"{args.bombs} gzip bombs of {args.bomb_mib} MiB ({len(bomb) >> 10} KiB each)",
            host,
            port,
            pid,
            bombs,
        ),
        await case(f"{args.bodies} bodies of {args.body_mib} MiB at once", host, port, pid, bodies),
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = TempCluster()
    cluster.start()
    try:
        pid = cluster.pids()[0]
        results = asyncio.run(run(args, cluster.bootstrap, pid))
    finally:
        cluster.stop(keep=False)
    for result in results:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
