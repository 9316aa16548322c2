#!/usr/bin/env python3
"""Benchmark a JSON produce written through one node to partitions led everywhere.

Starts a temporary three-node cluster (scripts/bench.py's `TempCluster`:
scripts/local_cluster.py's configs, free ports found at random, stopped by
pid at the end), creates a topic of `--partitions` partitions (default 150),
replication factor 3, and then, for `--rounds` rounds, posts one JSON acks=all
produce carrying one small record per partition (each with its `partition`)
to `--via` (node 1 by default). Leaders are spread over the three brokers, so
the node leads about a third of the partitions and forwards the rest. Rounds
run one after the other (one request in flight), after `--warmup` uncounted
rounds. Prints request latency p50 / p99 / max (ms), records/s, and the CPU
time the three nodes used per request (ms, from /proc).

    .venv/bin/python scripts/bench_forward.py [--partitions 150] [--rounds 200]

To measure another checkout's server, put it first on the nodes' path (run
from outside the repository, so that the current directory does not win):

    cd /tmp && PYTHONPATH=/path/to/checkout /work/main/.venv/bin/python \\
        /work/main/scripts/bench_forward.py
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Client, TempCluster, cpu_seconds, percentile, progress  # a sibling script

TOPIC = "bench-forward"
# How often the progress line is printed, rounds.
PROGRESS_EVERY = 25


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=200, help="counted requests")
    ap.add_argument("--warmup", type=int, default=10, help="uncounted requests first")
    ap.add_argument("--via", type=int, default=1, choices=(1, 2, 3), help="node to post to")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    return ap.parse_args(argv)


def body_of(round_: int, partitions: int) -> bytes:
    records = [{"value": f"r{round_}-p{p}", "partition": p} for p in range(partitions)]
    return orjson.dumps({"records": records})


async def post_round(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    """One produce; its latency in ms. Anything but a full success stops the run:
    a partial answer would not be the request this benchmark measures."""
    started = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        answer = await resp.read()
    elapsed_ms = (time.perf_counter() - started) * 1000
    if resp.status != 200:
        raise RuntimeError(f"produce answered {resp.status}: {answer[:500]!r}")
    return elapsed_ms


async def run(args: argparse.Namespace, bootstrap: str, pids: list[int]) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        client = Client(session, bootstrap)
        await client.discover()
        leaders = await client.create_topic(TOPIC, args.partitions)
        via = client.urls[args.via]
        local = sum(1 for url in leaders.values() if url == via)
        progress(f"{args.partitions} partitions, {local} led by node {args.via} (the rest remote)")
        url = f"{via}/v1/topics/{TOPIC}/records?acks=all"
        latencies: list[float] = []
        started = 0.0
        cpu_before: float | None = None
        for round_ in range(args.warmup + args.rounds):
            if round_ == args.warmup:
                started, cpu_before = time.perf_counter(), cpu_seconds(pids)
            ms = await post_round(session, url, body_of(round_, args.partitions))
            if round_ >= args.warmup:
                latencies.append(ms)
            done = round_ + 1 - args.warmup
            if done > 0 and (done % PROGRESS_EVERY == 0 or done == args.rounds):
                progress(f"round {done}/{args.rounds}: p50 {percentile(latencies, 50):.1f} ms")
        seconds = time.perf_counter() - started
        cpu_after = cpu_seconds(pids)
    return {
        "partitions": args.partitions,
        "local_partitions": local,
        "rounds": args.rounds,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "records_per_s": args.partitions * args.rounds / seconds,
        # The three nodes' CPU per request: what the forwarding costs, less
        # sensitive than latency to other work on a shared machine.
        "nodes_cpu_ms_per_request": None
        if cpu_before is None or cpu_after is None
        else (cpu_after - cpu_before) * 1000 / args.rounds,
    }


def start_cluster() -> TempCluster:
    cluster = TempCluster()
    try:
        cluster.start()
    except RuntimeError:
        cluster.stop(keep=True)
        raise
    return cluster


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = start_cluster()
    try:
        result = asyncio.run(run(args, cluster.bootstrap, cluster.pids()))
    finally:
        cluster.stop(args.keep)
    print(
        f"partitions {result['partitions']} ({result['local_partitions']} local)  "
        f"rounds {result['rounds']}  p50 {result['p50_ms']:.1f} ms  "
        f"p99 {result['p99_ms']:.1f} ms  max {result['max_ms']:.1f} ms  "
        f"{result['records_per_s']:.0f} records/s  "
        f"nodes CPU {result['nodes_cpu_ms_per_request'] or float('nan'):.1f} ms/request"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
