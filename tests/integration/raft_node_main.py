"""One Raft node process for the integration tests.

Runs a RaftAdapter over a ListStateMachine (in memory only: after a restart
the state must come back from the Raft journal and snapshot alone) and a tiny
HTTP control API on 127.0.0.1:<control_port>:

    GET  /status          RaftStatus as JSON, plus "pid"
    GET  /state           {"items": [[offset, hex batch], ...], "restores": [...]}
    POST /append          body = the raw batch -> {"offset": n} or {"error": {...}}
    POST /compact         ask pysyncobj to write a snapshot now
    POST /bench?count=N   N sequential appends on this node -> latencies in ms

Usage: python tests/integration/raft_node_main.py CONFIG.json, where the JSON
is {"raft": {RaftConfig fields}, "control_port": N}. SIGTERM stops cleanly;
the tests mostly SIGKILL it by pid.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lograft.errors import InvalidConfigError, LograftError
from lograft.quorum.raft.adapter import RaftAdapter, RaftConfig
from lograft.typed import build
from tests.raft_support import ListStateMachine

BENCH_COUNT_MAX = 10_000


def build_app(adapter: RaftAdapter, sm: ListStateMachine) -> web.Application:
    async def status(_request: web.Request) -> web.Response:
        body = (await adapter.status()).to_dict()
        body["pid"] = os.getpid()
        return web.json_response(body)

    async def state(_request: web.Request) -> web.Response:
        items = [[o, b.hex()] for o, b in sm.items]
        return web.json_response({"items": items, "restores": sm.restores})

    async def append(request: web.Request) -> web.Response:
        batch = await request.read()
        try:
            offset = await adapter.append(batch)
        except LograftError as exc:
            return web.json_response({"error": exc.to_dict()}, status=409)
        return web.json_response({"offset": offset})

    async def compact(_request: web.Request) -> web.Response:
        adapter.request_log_compaction()
        return web.json_response({"requested": True})

    async def bench(request: web.Request) -> web.Response:
        count = min(int(request.query.get("count", "100")), BENCH_COUNT_MAX)
        latencies_ms = []
        for i in range(count):
            started = time.perf_counter()
            await adapter.append(b"bench-%d" % i)
            latencies_ms.append((time.perf_counter() - started) * 1000)
        return web.json_response({"latencies_ms": latencies_ms})

    app = web.Application()
    app.add_routes(
        [
            web.get("/status", status),
            web.get("/state", state),
            web.post("/append", append),
            web.post("/compact", compact),
            web.post("/bench", bench),
        ]
    )
    return app


async def run(config_path: Path) -> None:
    raw = json.loads(config_path.read_text())
    config = build(raw["raft"], RaftConfig, error=InvalidConfigError, detail="key")
    sm = ListStateMachine()
    adapter = RaftAdapter(config, sm)
    await adapter.start()
    runner = web.AppRunner(build_app(adapter, sm))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", int(raw["control_port"]))
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    await adapter.stop()


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(run(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
