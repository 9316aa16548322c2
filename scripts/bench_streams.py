#!/usr/bin/env python3
"""Bursts of stream requests to one node, held and abandoned (issue 9, part 3).

Starts a temporary three-node cluster with the default limits
(scripts/bench.py's `TempCluster`: `streams_max` 100), creates a topic of
`--partitions` partitions (default 6, replication factor 3; leaders spread
over the three brokers, so most partitions of a stream are read from other
nodes), and then:

1. sends `--streams` (default 200) stream requests to node 1 at once and keeps
   the answered ones open, reading, for `--hold` seconds: prints how many
   started (200) and how many were refused, by error code, and how long the
   started ones took to get their headers;
2. closes them, then sends `--bursts` bursts of `--streams` requests that hang
   up before any answer or right after it;
3. times a new stream of every partition from the last hang-up to its headers
   (the documented bound: `liveness_check_ms` + `start_retry_timeout_ms`);
4. prints node 1's established connections to the other nodes' HTTP ports
   before, while the streams are held, and 20 s after the last client left.

    .venv/bin/python scripts/bench_streams.py [--streams 200] [--hold 10]

To measure another checkout's server, put it first on the nodes' path (run
from outside the repository, so that the current directory does not win):

    cd /tmp && PYTHONPATH=/path/to/checkout /work/main/.venv/bin/python \\
        /work/main/scripts/bench_streams.py
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import TempCluster, percentile, progress  # a sibling script

TOPIC = "bench-streams"
# A stream's headers or an error answer taking longer than this counts as a timeout, s.
ANSWER_TIMEOUT_S = 60.0
# After the last client left: how long idle keep-alive connections may linger, s.
SETTLE_S = 20.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=200, help="requests per burst")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--hold", type=float, default=10.0, help="seconds the streams stay open")
    ap.add_argument("--bursts", type=int, default=3, help="bursts of abandoned requests")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    return ap.parse_args(argv)


def post_json(url: str, body: dict[str, object]) -> None:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30):
        pass


def wait_leaders(bootstrap: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(f"{bootstrap}/v1/topics/{TOPIC}", timeout=10) as resp:
            parts = json.load(resp)["partitions"]
        if all(p["leader"] >= 0 for p in parts):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{TOPIC}: no leader for every partition in {timeout_s} s")
        time.sleep(0.1)  # polling the condition above


def peer_connections(pid: int, peer_ports: set[int]) -> int:
    """Established TCP connections of process `pid` to `peer_ports`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    with open(f"/proc/{pid}/net/tcp") as table:
        for line in table.readlines()[1:]:
            f = line.split()
            if f[3] == "01" and f[9] in inodes and int(f[2].split(":")[1], 16) in peer_ports:
                count += 1
    return count


class Request:
    """One raw HTTP/1.0 stream request (the body is the bare event stream)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.outcome = "no answer"
        self.seconds = 0.0

    @classmethod
    async def send(cls, port: int) -> Request:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /v1/topics/{TOPIC}/stream HTTP/1.0\r\n\r\n".encode())
        await writer.drain()
        return cls(reader, writer)

    async def answer(self) -> str:
        started = time.monotonic()
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                head = await self.reader.readuntil(b"\r\n\r\n")
                status = head.split()[1].decode()
                self.outcome = status
                if status != "200":
                    body = await self.reader.read(4096)
                    if b'"code":"' in body:
                        code = body.split(b'"code":"')[1].split(b'"')[0].decode()
                        self.outcome = f"{status} {code}"
        except TimeoutError:
            self.outcome = f"no answer in {ANSWER_TIMEOUT_S:.0f} s"
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.outcome = type(exc).__name__
        self.seconds = time.monotonic() - started
        return self.outcome

    async def read_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(left):
                    if not await self.reader.read(1 << 16):
                        return
            except TimeoutError:
                return

    def close(self) -> None:
        self.writer.close()


async def scenario(args: argparse.Namespace, port: int, pid: int, peers: set[int]) -> None:
    before = peer_connections(pid, peers)
    progress(f"1. {args.streams} stream requests at once, held {args.hold:.0f} s")
    held = await asyncio.gather(*(Request.send(port) for _ in range(args.streams)))
    await asyncio.gather(*(r.answer() for r in held))
    outcomes = collections.Counter(r.outcome for r in held)
    started = sorted(r.seconds for r in held if r.outcome == "200")
    await asyncio.gather(*(r.read_for(args.hold) for r in held if r.outcome == "200"))
    during = peer_connections(pid, peers)
    for r in held:
        r.close()
    progress(f"2. {args.bursts} bursts of {args.streams} requests abandoned")
    for b in range(args.bursts):
        burst = await asyncio.gather(*(Request.send(port) for _ in range(args.streams)))
        half = len(burst) // 2
        for r in burst[:half]:
            r.close()  # before any answer
        await asyncio.gather(*(r.answer() for r in burst[half:]))
        for r in burst[half:]:
            r.close()  # right after it
        progress(f"   burst {b + 1} done")
    gone = time.monotonic()
    progress("3. a new stream, retried while STREAMS_LIMIT_REACHED")
    while True:
        fresh = await Request.send(port)
        outcome = await fresh.answer()
        fresh.close()
        if outcome != "503 STREAMS_LIMIT_REACHED" or time.monotonic() - gone > ANSWER_TIMEOUT_S:
            break
    new_stream_s = time.monotonic() - gone
    await asyncio.sleep(SETTLE_S)  # a measurement window: idle keep-alives close
    after = peer_connections(pid, peers)
    print(
        json.dumps(
            {
                "requests": args.streams,
                "outcomes": dict(outcomes),
                "headers_s_p50": percentile(started, 0.5),
                "headers_s_max": started[-1] if started else None,
                "new_stream_after_abandon": {"outcome": outcome, "seconds": round(new_stream_s, 3)},
                "peer_connections": {
                    "before": before,
                    "held": during,
                    f"{SETTLE_S:.0f}s_after": after,
                },
            },
            indent=2,
        )
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    temp = TempCluster()
    try:
        temp.start()
        post_json(
            temp.bootstrap + "/v1/topics",
            {"name": TOPIC, "partitions": args.partitions, "replication_factor": 3},
        )
        wait_leaders(temp.bootstrap)
        lc = temp.lc
        port = lc.http_port(temp.base, 1)
        pid = lc.pid_of(temp.dir, 1)
        assert pid is not None
        peers = {lc.http_port(temp.base, n) for n in lc.NODES if n != 1}
        asyncio.run(scenario(args, port, pid, peers))
    finally:
        temp.stop(args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
