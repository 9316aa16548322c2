#!/usr/bin/env python3
"""A leader's CPU per session partition whose follower is at the log end.

Under bench_scale.py's load about half of the partitions a leader answers a
follower carry only a high watermark move (another follower's fetch moved
it). Such a partition used to get the full per-partition serve (the fetch
decision, the follower's state, the HW, the read); when nothing else moved it
is now answered without one (`ReplicaManager._unmoved_answer`). This script
times both on one `ReplicaManager` in this process: `--partitions` partitions
led by broker 1 (replicas 1, 2, 3, all in the ISR), each with one batch, a
fetch session of follower 2 at the log end of every one, then `--passes`
session rounds over all of them (`_session_round`), in alternating blocks
with the shortcut on and forced off (the full serve, the code before it).
The figure is this process's CPU time (time.process_time) per partition
looked at, in microseconds, the median of `--rounds` blocks of each, with
the load average:

    .venv/bin/python scripts/bench_hw_answer.py --partitions 200 --passes 200 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import (
    INITIAL_SESSION_EPOCH,
    FetchPartitionRequest,
    PartitionFetch,
    ReplicaFetchRequest,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, list[float]]:
    leader = ReplicaManager(1, workdir / "broker-1", BrokerSettings())
    tps = [TopicPartition("t", p) for p in range(args.partitions)]
    leader.apply_metadata(
        {tp: PartitionMeta("topic-id", Assignment((1, 2, 3), (1, 2, 3), 1, 1, 0)) for tp in tps}
    )
    batch = build_batch([RecordInput(b"x" * 100) for _ in range(10)], timestamp_ms=1)
    for tp in tps:
        await leader.produce(tp, batch, Acks.LEADER)
    full = ReplicaFetchRequest(
        2,
        0,
        1,
        8 << 20,
        1 << 20,
        [FetchPartitionRequest(tp.topic, tp.partition, PartitionFetch(10, 1, 1)) for tp in tps],
        0,
        INITIAL_SESSION_EPOCH,
    )
    answer = await leader.replica_fetch(full)
    session = leader.fetch_sessions.lookup(answer.session_id, 1, 2, 0)
    assert all(c.caught_up for c in session.partitions.values())
    shortcut = leader._unmoved_answer
    out: dict[str, list[float]] = {"shortcut": [], "full serve": []}
    try:
        for _ in range(args.rounds):
            for name in out:
                leader._unmoved_answer = (  # type: ignore[method-assign]
                    shortcut if name == "shortcut" else (lambda *_a: None)
                )
                cpu0 = time.process_time()
                for _ in range(args.passes):
                    await leader._session_round(full, session, tps)
                cpu = time.process_time() - cpu0
                out[name].append(1e6 * cpu / (args.passes * len(tps)))
    finally:
        leader._unmoved_answer = shortcut  # type: ignore[method-assign]
        await leader.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="parent of the temporary broker dir")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-hw-answer-", dir=args.dir))
    load = _loadavg()
    try:
        got = asyncio.run(_measure(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{args.partitions} partitions, follower 2 at the log end of each, {args.passes} "
        f"session rounds over all of them per block, {args.rounds} blocks each, alternating; "
        f"load {load} -> {_loadavg()}"
    )
    for name, values in got.items():
        print(
            f"{name}: {statistics.median(values):.1f} us CPU per partition "
            f"(blocks: {', '.join(f'{v:.1f}' for v in values)})"
        )
    ratio = statistics.median(got["shortcut"]) / statistics.median(got["full serve"])
    print(f"shortcut / full serve: {ratio:.2f}")


if __name__ == "__main__":
    main()
