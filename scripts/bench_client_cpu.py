"""Client CPU per HTTP exchange and per record: one tree against another, alternating.

The workload is scripts/compare_load.py's lograft_latency: one sync `Producer`
(acks=all, linger_ms 5, idempotent) and one sync `Consumer` (fetch_max_wait_ms
500, `poll(timeout_ms=100)` in a thread of its own) in one process, records of
`--value-bytes` bytes over the partitions of one topic. A round runs it at
each `--rates` (records/s; 0 = as fast as `send` goes) for `--records` records,
and the window ends when the consumer has every record, so the CPU counted
(user+system of the whole process, `time.process_time`) is what producing
and consuming those records cost the client. Exchanges = the producer's
produce requests + the consumer's fetch requests in the window.

Each round runs every `--python` (a venv's interpreter: each imports its own
tree's `lograft`), in an order that alternates round by round, each run in a
fresh process; the table gives the median over the rounds of client CPU us per
exchange and per record, CPU % of a core, and the load average after each run.

Against a running cluster (start one: scripts/local_cluster.py start ...):

    .venv/bin/python scripts/bench_client_cpu.py \\
        --bootstrap 127.0.0.1:9641,127.0.0.1:9642,127.0.0.1:9643 \\
        --python main=/work/main/.venv/bin/python --python this=.venv/bin/python --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

# The child imports `lograft` from the interpreter's own venv (never this
# script's tree), so one script measures any tree.


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def child(args: argparse.Namespace) -> None:
    from lograft.client import Admin, Consumer, Producer, TopicPartition
    from lograft.errors import TopicAlreadyExistsError

    with Admin(args.bootstrap) as admin, contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topic(
            args.topic,
            partitions=args.partitions,
            replication_factor=3,
            configs={"min_insync_replicas": "2"},
        )
    parts = [TopicPartition(args.topic, p) for p in range(args.partitions)]
    got = 0
    target = -1  # records the window waits for (set when sending ends)
    done = threading.Event()
    ready = threading.Event()
    stop = threading.Event()
    counts: dict[str, int] = {}
    consumer: list[Any] = []

    def consume() -> None:
        nonlocal got
        with Consumer(args.bootstrap, fetch_max_wait_ms=500) as c:
            consumer.append(c)
            c.assign(parts)
            c.seek_to_end(*parts)
            for tp in parts:
                c.position(tp)
            ready.set()
            while not stop.is_set():
                for records in c.poll(timeout_ms=100).values():
                    got += len(records)
                if target >= 0 and got >= target and not done.is_set():
                    counts["fetches"] = c.fetch_requests
                    done.set()
            counts.setdefault("fetches", c.fetch_requests)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    if not ready.wait(30):
        raise SystemExit("the consumer did not start")
    value = b"x" * args.value_bytes
    with Producer(args.bootstrap, acks="all", linger_ms=5, enable_idempotence=True) as p:
        # Warm-up, uncounted: connections, metadata, producer id.
        for _ in range(200):
            p.send(args.topic, value)
        p.flush()
        warm_deadline = time.monotonic() + 30
        while got < 200 and time.monotonic() < warm_deadline:
            time.sleep(0.01)  # the warm-up's records reach the consumer
        got = 0
        # A plain int the consumer's loop counts up: read from here, it is
        # the warm-up's fetches to take off.
        fetches0 = consumer[0].fetch_requests
        requests0 = p.stats.requests
        cpu0, wall0 = time.process_time(), time.perf_counter()
        n, rate = args.records, args.rate
        if rate > 0:
            start = time.perf_counter() + 0.01
            for i in range(n):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                p.send(args.topic, value)
        else:
            for _ in range(n):
                p.send(args.topic, value)
        p.flush()
        target = n
        if not done.wait(60):
            raise SystemExit(f"the consumer got {got} of {n} records")
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        requests = p.stats.requests - requests0
    stop.set()
    t.join(10)
    fetches = counts["fetches"] - fetches0
    exchanges = requests + fetches
    print(
        json.dumps(
            {
                "records": n,
                "wall_s": wall,
                "cpu_s": cpu,
                "produce_requests": requests,
                "fetch_requests": fetches,
                "us_per_exchange": cpu / exchanges * 1e6,
                "us_per_record": cpu / n * 1e6,
                "cpu_pct": cpu / wall * 100,
            }
        )
    )


def parent(args: argparse.Namespace) -> None:
    pythons = [p.split("=", 1) for p in args.python]
    rates = [int(r) for r in args.rates.split(",")]
    results: dict[tuple[str, int], list[dict]] = {}
    for rnd in range(args.rounds):
        order = pythons if rnd % 2 == 0 else list(reversed(pythons))
        for rate in rates:
            for name, exe in order:
                records = args.records if rate == 0 else int(rate * args.seconds)
                cmd = [
                    exe,
                    __file__,
                    "--child",
                    "--bootstrap",
                    args.bootstrap,
                    "--topic",
                    args.topic,
                    "--partitions",
                    str(args.partitions),
                    "--value-bytes",
                    str(args.value_bytes),
                    "--rate",
                    str(rate),
                    "--records",
                    str(records),
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                if out.returncode != 0:
                    sys.stderr.write(out.stderr)
                    raise SystemExit(f"{name} at {rate}/s failed")
                doc = json.loads(out.stdout.strip().splitlines()[-1])
                doc["load"] = load_average()
                results.setdefault((name, rate), []).append(doc)
                print(
                    f"round {rnd + 1} {name:>6} rate {rate or 'max':>6}: "
                    f"{doc['us_per_exchange']:7.0f} us/exchange {doc['us_per_record']:6.1f} "
                    f"us/record cpu {doc['cpu_pct']:3.0f}% "
                    f"({doc['produce_requests']} produce + {doc['fetch_requests']} fetch in "
                    f"{doc['wall_s']:.1f} s) load {doc['load']}",
                    file=sys.stderr,
                    flush=True,
                )
    print(
        f"median of {args.rounds} rounds, {args.partitions} partitions, {args.value_bytes} B values"
    )
    print(
        f"{'tree':>6} {'rate/s':>7} {'us/exch':>8} {'us/rec':>7} {'cpu%':>5} {'exch/s':>7}  loads"
    )
    for (name, rate), docs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):

        def med(key: str, docs: list[dict] = docs) -> float:
            return statistics.median(d[key] for d in docs)

        exch = statistics.median(
            (d["produce_requests"] + d["fetch_requests"]) / d["wall_s"] for d in docs
        )
        print(
            f"{name:>6} {rate or 'max':>7} {med('us_per_exchange'):8.0f} "
            f"{med('us_per_record'):7.1f} {med('cpu_pct'):5.0f} {exch:7.0f}  "
            + " | ".join(d["load"] for d in docs)
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--python", action="append", default=[], help="NAME=INTERPRETER")
    ap.add_argument("--rates", default="2000,0", help="records/s per run; 0 = full speed")
    ap.add_argument("--seconds", type=float, default=5.0, help="paced runs: records = rate x s")
    ap.add_argument("--records", type=int, default=50_000, help="full-speed runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--topic", default="bench-client-cpu")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rate", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
    else:
        if not args.python:
            ap.error("give at least one --python NAME=INTERPRETER")
        parent(args)


if __name__ == "__main__":
    main()
