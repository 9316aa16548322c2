"""Client quotas measured: a producer trying 10 MB/s against a 1 MB/s
`producer_byte_rate` quota, and an unthrottled producer on the same node.

Starts one `lograft node` (controller + broker) with the integration harness
(random ports, a temporary directory, stopped by pid at the end), or uses a
running one (`--bootstrap URL`), and sets a quota of `--quota-bytes` bytes/s
on client id `bench-slow` (`POST /v1/quotas`). Then, in this process, two
`AsyncProducer`s (acks=all, values of `--value-bytes`, `--partitions`
partitions each, topic of their own) send on a schedule of `--target-bytes`
bytes/s each (a send due every few ms; when the producer's buffer is full
its sends wait, as an application's would):

1. baseline: `bench-fast` (no quota) alone for `--baseline-s` seconds;
2. both: `bench-fast` and `bench-slow` together for `--seconds` seconds.

Printed: each producer's acknowledged value bytes per second of phase 2 and
over the phase, the slow one's deviation from its quota, and the fast one's
rate in phase 2 over its rate in phase 1 (the same run). The quota counts
the produce request bodies (batches: values plus a few dozen bytes of
record and batch headers), so value bytes read slightly under it; the
`wire` column adds the estimated overhead. Also the throttle the slow
producer was told and how often it was refused (429).

    .venv/bin/python scripts/bench_quota.py
    .venv/bin/python scripts/bench_quota.py --seconds 30 --quota-bytes 1000000 \
        --target-bytes 10000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import http_json, log, machine  # a sibling script

from lograft.client import AsyncProducer
from lograft.client.throttle import ThrottleStats

SLOW, FAST = "bench-slow", "bench-fast"
# A record's own header bytes in a batch (varints, attributes) and a batch's
# (61 bytes), to estimate what the quota counts from the value bytes.
RECORD_OVERHEAD_BYTES = 8
BATCH_OVERHEAD_BYTES = 61
# How often the schedule sends what is due, s.
TICK_S = 0.005


@dataclass
class Run:
    """One producer on its schedule: what was acknowledged, when."""

    client_id: str
    topic: str
    producer: AsyncProducer
    acks: list[tuple[float, int]] = field(default_factory=list)  # (time, value bytes)
    failed: int = 0

    def acked(self, start: float, end: float) -> int:
        return sum(n for t, n in self.acks if start <= t < end)

    def per_second(self, start: float, seconds: int) -> list[int]:
        out = [0] * seconds
        for t, n in self.acks:
            if t >= start and (i := int(t - start)) < seconds:
                out[i] += n
        return out

    @property
    def throttle(self) -> ThrottleStats:
        return self.producer.stats.throttle


async def schedule(run: Run, target_bytes: float, value: bytes, until: float) -> None:
    """Send `target_bytes` per second of values until `until` (monotonic)."""
    started = time.monotonic()
    sent = 0

    def done(fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            run.failed += 1
        else:
            run.acks.append((time.monotonic(), len(value)))

    while (now := time.monotonic()) < until:
        due = int((now - started) * target_bytes)
        while sent + len(value) <= due and time.monotonic() < until:
            fut = await run.producer.send(run.topic, value)
            fut.add_done_callback(done)
            sent += len(value)
        await asyncio.sleep(TICK_S)


def producer(url: str, client_id: str, args: argparse.Namespace) -> AsyncProducer:
    return AsyncProducer(
        url,
        client_id=client_id,
        acks="all",
        linger_ms=5,
        batch_bytes=args.batch_bytes,
    )


def set_quota(url: str, client_id: str, quota: int) -> None:
    http_json(
        "POST",
        f"{url}/v1/quotas",
        {"entity": {"client_id": client_id}, "set": {"producer_byte_rate": quota}},
    )
    # One node: its image has the quota once the controller answered; check.
    got = http_json("GET", f"{url}/v1/quotas?client_id={client_id}")
    log(f"quota set: {json.dumps(got)}")


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    stamp = int(time.time())
    topics = {cid: f"bench-quota-{stamp}-{cid}" for cid in (SLOW, FAST)}
    for topic in topics.values():
        http_json(
            "POST",
            f"{url}/v1/topics",
            {"name": topic, "partitions": args.partitions, "replication_factor": 1},
        )
    set_quota(url, SLOW, args.quota_bytes)
    value = b"v" * args.value_bytes
    fast = Run(FAST, topics[FAST], producer(url, FAST, args))
    slow = Run(SLOW, topics[SLOW], producer(url, SLOW, args))
    try:
        await fast.producer.send_and_wait(fast.topic, b"warm-up")
        # The slow producer only reads its metadata: a record sent now would
        # be a sample the quota's rate is measured from, 10 s before phase 2,
        # and a span of 10 s is a credit of 10 s at the quota (as in Kafka:
        # a client idle for less than the window gets its idle time back).
        await slow.producer.wait_for_topic(slow.topic, 10_000)
        log(f"phase 1: {FAST} alone at {args.target_bytes} B/s for {args.baseline_s} s")
        p1 = time.monotonic()
        await schedule(fast, args.target_bytes, value, p1 + args.baseline_s)
        p1_end = time.monotonic()
        await fast.producer.flush()  # phase 1's last records are not counted in phase 2
        log(f"phase 2: {FAST} and {SLOW} together for {args.seconds} s")
        p2 = time.monotonic()
        end = p2 + args.seconds
        await asyncio.gather(
            schedule(fast, args.target_bytes, value, end),
            schedule(slow, args.target_bytes, value, end),
        )
    finally:
        for run in (fast, slow):
            # The throttled producer's backlog is not waited for.
            await run.producer.close(timeout_ms=0)
    records_per_batch = max(1, args.batch_bytes // (args.value_bytes + RECORD_OVERHEAD_BYTES))
    overhead = (RECORD_OVERHEAD_BYTES + BATCH_OVERHEAD_BYTES / records_per_batch) / args.value_bytes

    def rate(run: Run, start: float, stop: float) -> float:
        return run.acked(start, stop) / (stop - start)

    baseline = rate(fast, p1 + 1, p1_end)  # its first second ramps up
    fast_rate = rate(fast, p2, end)
    slow_rate = rate(slow, p2, end)
    slow_wire = slow_rate * (1 + overhead)
    return {
        "seconds": args.seconds,
        "quota_bytes_per_s": args.quota_bytes,
        "target_bytes_per_s": args.target_bytes,
        "value_bytes": args.value_bytes,
        "slow_per_second": slow.per_second(p2, args.seconds),
        "fast_per_second": fast.per_second(p2, args.seconds),
        "slow_rate": slow_rate,
        "slow_rate_wire_estimate": slow_wire,
        "slow_deviation": slow_wire / args.quota_bytes - 1,
        "fast_rate": fast_rate,
        "fast_baseline_rate": baseline,
        "fast_ratio": fast_rate / baseline if baseline else float("nan"),
        "slow_throttled_responses": slow.throttle.throttled_responses,
        "slow_throttle_time_ms": slow.throttle.throttle_time_ms,
        "slow_quota_refusals": slow.throttle.quota_refusals,
        "fast_throttled_responses": fast.throttle.throttled_responses,
        "failed_sends": {SLOW: slow.failed, FAST: fast.failed},
    }


def show(result: dict[str, Any]) -> None:
    print(machine())
    print(
        f"quota {result['quota_bytes_per_s'] / 1e6:g} MB/s on {SLOW}; both producers try "
        f"{result['target_bytes_per_s'] / 1e6:g} MB/s; values of {result['value_bytes']} bytes"
    )
    print(f"{'second':>6} {SLOW + ' MB/s':>16} {FAST + ' MB/s':>16}")
    for i, (s, f) in enumerate(
        zip(result["slow_per_second"], result["fast_per_second"], strict=True)
    ):
        print(f"{i + 1:>6} {s / 1e6:>16.3f} {f / 1e6:>16.3f}")
    print(
        f"{SLOW}: {result['slow_rate'] / 1e6:.3f} MB/s of values over {result['seconds']} s, "
        f"~{result['slow_rate_wire_estimate'] / 1e6:.3f} MB/s as counted (wire), "
        f"deviation from the quota {result['slow_deviation'] * 100:+.1f} %; told "
        f"{result['slow_throttled_responses']} times to wait "
        f"({result['slow_throttle_time_ms']} ms in all), refused {result['slow_quota_refusals']}"
    )
    print(
        f"{FAST}: {result['fast_rate'] / 1e6:.3f} MB/s with {SLOW} running, "
        f"{result['fast_baseline_rate'] / 1e6:.3f} MB/s alone: ratio {result['fast_ratio']:.3f}; "
        f"throttled {result['fast_throttled_responses']} times"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--bootstrap", help="a running node's URL (default: start one)")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--baseline-s", type=int, default=10)
    parser.add_argument("--quota-bytes", type=int, default=1_000_000)
    parser.add_argument("--target-bytes", type=int, default=10_000_000)
    parser.add_argument("--value-bytes", type=int, default=10_000)
    parser.add_argument("--batch-bytes", type=int, default=256 * 1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if args.bootstrap:
        result = asyncio.run(measure(args.bootstrap, args))
    else:
        from tests.integration.cluster_harness import LograftCluster

        with tempfile.TemporaryDirectory(prefix="bench-quota-") as tmp:
            cluster = LograftCluster(Path(tmp), 1)
            try:
                cluster.start()
                result = asyncio.run(measure(cluster[1].url, args))
            finally:
                cluster.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)


if __name__ == "__main__":
    main()
