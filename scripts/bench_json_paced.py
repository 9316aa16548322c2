#!/usr/bin/env python3
"""The three nodes' CPU per record of JSON produce at a fixed request rate.

`scripts/bench_compare.py` drives JSON produce as fast as one connection
goes, so on a loaded machine its records/s, and with it the share of the
nodes' fixed per-second costs (timers, heartbeats, Raft ticks) in each
record's CPU, move with whatever else runs. Here one connection posts
bench_compare's JSON body (500 records of 100 B, or `--value-bytes`,
`value_format: string`, no
keys: the keyless records of a request share a partition, one the node
posted to leads under the default `keyless_partitions = "local"`, so nothing
is forwarded) at `--rate` requests per second to a fresh
three-node cluster (bench_compare's: 3 partitions, RF 3, min ISR 2,
acks=all), and prints, over `--seconds` after a warm-up, the records/s it
reached, the three nodes' CPU seconds (user + system, from /proc) per second
and per record, request latency (p50, p90) and how many requests started
late (the cluster did not keep up with the rate); then the same per record and
per request less the idle cluster's CPU (measured for `--idle-s` before the
load): at a rate far below full speed the fixed per-second costs would
otherwise outweigh what the records cost.

Run it alternately with two trees to compare them: the nodes run the code
of the tree the interpreter imports, e.g. another checkout through
PYTHONPATH.

    .venv/bin/python scripts/bench_json_paced.py --rate 40 --seconds 15
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time

import bench_compare as bc  # a sibling script
from bench_common import machine

TICK_HZ = os.sysconf("SC_CLK_TCK")
RECORDS_PER_REQUEST = 500
VALUE_BYTES = 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK_HZ


def idle_cpu_share(pids: list[int | None], seconds: float) -> float:
    """The nodes' CPU while nothing is sent (Raft ticks, heartbeats, replica
    long-polls), CPU-s per s: what the load's figure is measured above."""
    cpu0, wall0 = sum(cpu_seconds(p) for p in pids if p is not None), time.perf_counter()
    time.sleep(seconds)  # measuring an interval, not waiting for a condition
    cpu1 = sum(cpu_seconds(p) for p in pids if p is not None)
    return (cpu1 - cpu0) / (time.perf_counter() - wall0)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rate", type=float, default=40.0, help="requests per second")
    p.add_argument("--seconds", type=float, default=15.0, help="measured window, s")
    p.add_argument("--warm-s", type=float, default=3.0, help="untimed warm-up at the rate, s")
    p.add_argument(
        "--idle-s",
        type=float,
        default=5.0,
        help="the idle cluster's CPU is measured this long before the load (subtracted), s",
    )
    p.add_argument(
        "--value-bytes", type=int, default=VALUE_BYTES, help="bytes of each record's value"
    )
    args = p.parse_args()
    print(f"Machine: {machine()}")
    print(f"Command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    cluster = bc.LograftCluster()
    fam = bc.Family(
        "lograft",
        ("lograft", "lograft JSON"),
        sys.executable,
        cluster,
        failover_column="lograft",
        consume_columns=("lograft",),
        latency_columns=("lograft",),
        # Only bench_compare's produce cells check free space: a paced run is small.
        work=cluster.inner.dir,
        min_free_gib=bc.MIN_FREE_GIB,
    )
    bc.REAPER.stops.append(cluster.stop)
    try:
        cluster.start()
        topic = "json-paced"
        bc.ensure_topic(fam, topic)
        url = str(fam.spec("lograft JSON", "produce", topic, seconds=1)["bootstrap"])
        host, _, port = url.split(",")[0].removeprefix("http://").partition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        record = {"value": "x" * args.value_bytes}
        body = json.dumps({"value_format": "string", "records": [record] * RECORDS_PER_REQUEST})
        path = f"/v1/topics/{topic}/records"
        pids = [cluster.lc.pid_of(cluster.inner.dir, node) for node in (1, 2, 3)]

        def post() -> float:
            started = time.perf_counter()
            conn.request("POST", path, body.encode(), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"produce answered {resp.status}")
            return time.perf_counter() - started

        def paced(seconds: float) -> tuple[list[float], int, float]:
            """Latencies, late starts and the elapsed time of `seconds` at the rate."""
            latencies: list[float] = []
            late = 0
            start = due = time.perf_counter()
            while (now := time.perf_counter()) - start < seconds:
                if now < due:
                    time.sleep(due - now)
                elif now - due > 1 / args.rate:
                    late += 1
                latencies.append(post())
                due += 1 / args.rate
            return latencies, late, time.perf_counter() - start

        idle = idle_cpu_share(pids, args.idle_s)
        paced(args.warm_s)
        before = sum(cpu_seconds(pid) for pid in pids if pid is not None)
        latencies, late, elapsed = paced(args.seconds)
        cpu = sum(cpu_seconds(pid) for pid in pids if pid is not None) - before
        records = len(latencies) * RECORDS_PER_REQUEST
        latencies.sort()
        print(
            f"{records / elapsed:,.0f} records/s at {args.rate:g} requests/s asked; nodes' CPU "
            f"{cpu / elapsed:.3f} s/s, {cpu / records * 1e6:.2f} us per record; latency p50 "
            f"{latencies[len(latencies) // 2] * 1e3:.1f} ms, p90 "
            f"{latencies[int(len(latencies) * 0.9)] * 1e3:.1f} ms; {late} of "
            f"{len(latencies)} requests started late; load {bc.load_avg()}"
        )
        busy = cpu - idle * elapsed
        print(
            f"less the idle cluster's {idle:.3f} s/s: {busy / records * 1e6:.2f} us per record, "
            f"{busy / len(latencies) * 1e6:.0f} us per request"
        )
    finally:
        bc.REAPER.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
