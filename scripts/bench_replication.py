#!/usr/bin/env python3
"""Broker-layer CPU per acks=all produce: three ReplicaManagers in one process.

No HTTP and no Raft: three `ReplicaManager`s (brokers 1, 2, 3) share one
event loop; their replica fetches go through an in-process transport that
still encodes and decodes the wire format (`protocol/fetch_wire.py`), so
what is measured is the replication work of `lograft/brokers` itself: the
leader's append and fetch sessions, the followers' fetch loops and applies,
and the HW moves that release acks=all produces. `--partitions` partitions,
all led by broker 1 (like one leader's share of `bench_scale.py`'s
2,000-partition cluster: 667 each), each with replicas 1, 2, 3; after one
untimed produce per partition, `--produces` acks=all produces of one batch
of 10 x 100 B records, round-robin over the partitions, `--inflight` at a
time. The figure is this process's CPU time (time.process_time) per produce,
in microseconds, which holds while the machine is loaded; the replica fetch
exchanges per produce and the partitions they answered are counted.

`--tree NAME=PYTHON` runs the measurement with that Python (its tree's
`lograft`; this script's file is run by it), several trees in alternating
rounds (ABAB...), with the load average before each round:

    .venv/bin/python scripts/bench_replication.py \\
        --tree main=/work/main/.venv/bin/python --tree mine=.venv/bin/python --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=667)
    parser.add_argument("--produces", type=int, default=3000)
    parser.add_argument("--inflight", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", help="NAME=PYTHON (default: this Python)")
    parser.add_argument("--dir", default=None, help="parent of the temporary broker dirs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    from lograft.brokers.partition import Assignment, IsrProposal
    from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
    from lograft.protocol.batch import RecordInput, build_batch
    from lograft.protocol.fetch_wire import ReplicaFetchRequest, decode_answer, encode_answer
    from lograft.protocol.produce_wire import Acks
    from lograft.protocol.topic_partition import TopicPartition

    brokers: dict[int, ReplicaManager] = {}
    counts = {"exchanges": 0, "answered": 0, "with_data": 0}

    def transport(_me: int):  # the FetchTransport shape, per follower
        async def send(leader: int, body: bytes, _timeout: float) -> bytes:
            req = ReplicaFetchRequest.from_json(body)
            out = encode_answer(await brokers[leader].replica_fetch(req))
            parts = decode_answer(out).partitions
            counts["exchanges"] += 1
            counts["answered"] += len(parts)
            counts["with_data"] += sum(1 for p in parts if p.data)
            return out

        return send

    async def alter(_tp: TopicPartition, _proposal: IsrProposal) -> Assignment | None:
        return None  # the ISR stays full: every replica keeps up

    settings = BrokerSettings(produce_timeout_ms=30_000)
    for b in (1, 2, 3):
        brokers[b] = ReplicaManager(
            b,
            workdir / f"broker-{b}",
            settings,
            fetch_transport=transport(b),
            alter_partition=alter,
        )
    tps = [TopicPartition(f"t{i // 250}", i % 250) for i in range(args.partitions)]
    wanted = {
        tp: PartitionMeta(f"id-{tp.topic}", Assignment((1, 2, 3), (1, 2, 3), 1, 1, 0)) for tp in tps
    }
    for rm in brokers.values():
        await rm.start()
        await rm.open_logs(wanted)
        rm.apply_metadata(wanted)
    value = b"x" * 100
    batch = build_batch([RecordInput(value) for _ in range(10)], timestamp_ms=1)
    leader = brokers[1]
    try:
        for tp in tps:  # untimed: every partition's first batch of the epoch
            await leader.produce(tp, batch, Acks.ALL)
        sem = asyncio.Semaphore(args.inflight)

        async def one(tp: TopicPartition) -> None:
            try:
                await leader.produce(tp, batch, Acks.ALL)
            finally:
                sem.release()

        for key in counts:
            counts[key] = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        tasks = []
        for k in range(args.produces):
            await sem.acquire()
            tasks.append(asyncio.create_task(one(tps[k % len(tps)])))
        await asyncio.gather(*tasks)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        for rm in brokers.values():
            await rm.stop()
    n = args.produces
    return {
        "cpu_us_per_produce": 1e6 * cpu / n,
        "wall_s": wall,
        "exchanges_per_produce": counts["exchanges"] / n,
        "answered_per_exchange": counts["answered"] / max(counts["exchanges"], 1),
        "with_data_per_exchange": counts["with_data"] / max(counts["exchanges"], 1),
    }


def _child(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-replication-", dir=args.dir))
    try:
        print(json.dumps(asyncio.run(_measure(args, workdir))))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    args = _parse()
    if args.child:
        _child(args)
        return
    trees = []
    for spec in args.tree or [f"this={sys.executable}"]:
        name, sep, python = spec.partition("=")
        if not sep:
            raise SystemExit(f"--tree {spec!r}: say NAME=PYTHON")
        trees.append((name, python))
    child_args = [
        "--child",
        f"--partitions={args.partitions}",
        f"--produces={args.produces}",
        f"--inflight={args.inflight}",
    ]
    if args.dir:
        child_args.append(f"--dir={args.dir}")
    print(
        f"{args.partitions} partitions led by broker 1 of 3, {args.produces} acks=all produces "
        f"of 10 x 100 B, {args.inflight} in flight; CPU of the one process running all three"
    )
    results: dict[str, list[float]] = {name: [] for name, _ in trees}
    for r in range(1, args.rounds + 1):
        for name, python in trees:
            load = _loadavg()
            out = subprocess.run(
                [python, str(Path(__file__).resolve()), *child_args],
                check=True,
                capture_output=True,
                text=True,
                cwd=tempfile.gettempdir(),  # outside any checkout: the tree is the Python's own
            )
            got = json.loads(out.stdout.strip().splitlines()[-1])
            results[name].append(got["cpu_us_per_produce"])
            print(
                f"round {r} {name}: {got['cpu_us_per_produce']:.0f} us CPU per produce, "
                f"{got['exchanges_per_produce']:.2f} fetch exchanges per produce, "
                f"{got['answered_per_exchange']:.2f} partitions answered per exchange "
                f"({got['with_data_per_exchange']:.2f} with data), wall {got['wall_s']:.1f} s; "
                f"load {load}",
                flush=True,
            )
    print(
        "median: "
        + ", ".join(f"{name} {statistics.median(v):.0f} us" for name, v in results.items())
        + f"; load {_loadavg()}"
    )


if __name__ == "__main__":
    main()
