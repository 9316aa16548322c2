#!/usr/bin/env python3
"""CPU of one node-to-node call on the calling side: the pool against the kept channel.

A replica fetch is a POST of a small JSON body answered with a small body,
hundreds of times a second per node under load. This starts an aiohttp
server in a child process on 127.0.0.1 (a port below the ephemeral range,
scripts/loopback_ports.py) whose handler answers a replica fetch's shape at
once, then sends `--calls` calls one at a time from this process, in
alternating rounds, through `PeerClient.post` (aiohttp's client and its pool)
and `PeerClient.exchange` (node/peer_channel.py's kept connection), and
prints this process's CPU time per call (`time.process_time`, so the
server's CPU is not counted) for each round, and the ratio of the medians.

    .venv/bin/python scripts/bench_peer_calls.py [--calls 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loopback_ports import free_ports  # a sibling script

from lograft.node.peer_client import PeerClient

PATH = "/internal/v1/replica-fetch"
BODY = (
    b'{"replica_id":2,"max_wait_ms":500,"min_bytes":1,"max_bytes":8388608,'
    b'"partition_max_bytes":1048576,"partitions":[{"topic":"t","partition":7,'
    b'"fetch_offset":1234,"last_fetched_epoch":3,"current_leader_epoch":3,'
    b'"durable_offset":-1}],"session_id":12345,"session_epoch":42,"forgotten":[]}'
)
SERVER = """
import sys
from aiohttp import web
ANSWER = b"\\x00\\x00\\x00\\x30" + b'{"partitions":[],"session_id":12345}' + b" " * 12
async def handle(request):
    await request.read()
    return web.Response(body=ANSWER, content_type="application/vnd.lograft.fetch")
app = web.Application()
app.router.add_post(sys.argv[2], handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


class _Peer:
    def __init__(self, url: str) -> None:
        self.url = url

    def broker_url(self, broker_id: int) -> str | None:
        return self.url


async def _per_call_us(client: PeerClient, kept: bool, calls: int) -> float:
    send = client.exchange if kept else client.post
    for _ in range(100):  # warm: the connection, caches
        await send(2, PATH, BODY)
    t0 = time.process_time()
    for _ in range(calls):
        await send(2, PATH, BODY)
    return (time.process_time() - t0) / calls * 1e6


async def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)  # the child is starting; nothing to await on
            continue
        w.close()
        return


async def main(args: argparse.Namespace) -> None:
    (port,) = free_ports(1)
    child = subprocess.Popen([sys.executable, "-c", SERVER, str(port), PATH])
    try:
        await _wait_listening(port)
        client = PeerClient(cluster_secret="bench", metadata=_Peer(f"http://127.0.0.1:{port}"))  # type: ignore[arg-type]
        pool: list[float] = []
        kept: list[float] = []
        try:
            for r in range(args.rounds):
                pool.append(await _per_call_us(client, False, args.calls))
                kept.append(await _per_call_us(client, True, args.calls))
                print(
                    f"round {r + 1}: pool (aiohttp client) {pool[-1]:.0f} us/call, "
                    f"kept channel {kept[-1]:.0f} us/call; load {_load()}"
                )
        finally:
            await client.close()
    finally:
        child.terminate()
        child.wait(10)
    p, k = statistics.median(pool), statistics.median(kept)
    print(f"median: pool {p:.0f} us/call, kept channel {k:.0f} us/call, ratio {k / p:.2f}")


def _load() -> str:
    return (
        " ".join(Path("/proc/loadavg").read_text().split()[:3])
        if os.path.exists("/proc/loadavg")
        else "?"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000, help="calls per round and way")
    ap.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(ap.parse_args()))
