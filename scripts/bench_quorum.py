#!/usr/bin/env python3
"""Metadata quorum figures on a local three-node cluster of real `lograft node` processes.

Starts three combined controller+broker nodes on 127.0.0.1 (random ports, a
temp dir) with `tests/integration/cluster_harness.py` and the default
controller and Raft settings, then measures, from a client on the same host:

- **topic creation**: `POST /v1/topics` of a 1-partition, RF 3 topic, sent
  to the active controller, until its answer (committed, applied on that
  node, and its replica's log created there);
- **config change**: `PATCH /v1/topics/{t}/configs`, one metadata record
  committed and applied, no log work: the metadata commit seen through HTTP;
- **controller append**: `POST /internal/v1/controller/producer-ids` on the
  active controller: decide, append one record through Raft, apply, answer;
- **Raft append** (optional, `--raft-appends N`): the adapter alone, timed
  inside the leader process by `scripts/bench_raft_latency.py`;
- **broker failover**: SIGKILL of a broker that is not the active controller,
  until the metadata (polled on the controller every 10 ms) shows it fenced,
  and until every partition it led has another leader; then until an
  acks=all write to one of them is acknowledged again;
- **controller failover**: the same when the killed node is also the active
  controller (a Raft election comes first).

Each failover trial restarts the killed node and waits until it is back in
every ISR. Prints plain tables.

    .venv/bin/python scripts/bench_quorum.py [--creates 50] [--trials 3] [--raft-appends 1000]
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster_harness import (  # noqa: E402
    LograftCluster,
    eventually,
)

POLL_S = 0.01


def percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def latency_row(name: str, values_ms: list[float]) -> str:
    v = sorted(values_ms)
    return (
        f"{name:<34} {len(v):>5} {percentile(v, 0.5):>8.2f} {percentile(v, 0.9):>8.2f} "
        f"{percentile(v, 0.99):>8.2f} {v[-1]:>8.2f}"
    )


def commit_latencies(cluster: LograftCluster, creates: int) -> list[str]:
    ctl = cluster.active_controller()
    create = [
        timed(
            lambda i=i: ctl.ok(
                "POST",
                "/v1/topics",
                {"name": f"bench-{i}", "partitions": 1, "replication_factor": 3},
                status=201,
            )
        )
        for i in range(creates)
    ]
    alter = [
        timed(
            lambda i=i: ctl.ok(
                "PATCH", "/v1/topics/bench-0/configs", {"configs": {"retention_ms": 10_000 + i}}
            )
        )
        for i in range(creates)
    ]
    broker = ctl.brokers()[ctl.node_id]
    body = {"broker_id": ctl.node_id, "broker_epoch": broker["epoch"]}

    def producer_ids() -> None:
        resp = ctl.internal("controller/producer-ids", body)
        assert resp.status == 200, resp

    append = [timed(producer_ids) for _ in range(creates)]
    return [
        latency_row("POST /v1/topics (1 partition)", create),
        latency_row("PATCH /v1/topics/{t}/configs", alter),
        latency_row("controller RPC producer-ids", append),
    ]


def raft_latencies(appends: int) -> list[str]:
    spec = importlib.util.spec_from_file_location(
        "bench_raft_latency", ROOT / "scripts" / "bench_raft_latency.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [latency_row("Raft append (inside the leader)", module.measure(appends, True))]


def failover_trial(cluster: LograftCluster, topic: str, kill_controller: bool) -> list[float]:
    """Kill one node; return seconds to fenced, to new leaders, to writable again."""
    ctl = cluster.active_controller()
    victim = ctl if kill_controller else next(n for n in cluster if n is not ctl)
    observer = (
        next(n for n in cluster if n is not victim and n is not ctl) if (kill_controller) else ctl
    )
    dead = victim.node_id

    def led() -> list[int]:
        doc = observer.topic(topic)
        assert doc is not None
        return [p["partition"] for p in doc["partitions"] if p["leader"] == dead]

    partitions = eventually(led, 60, f"node {dead} to lead a partition of {topic}")
    marks: dict[str, float] = {}
    t0 = time.monotonic()
    victim.kill()

    def fenced() -> bool:
        if observer.brokers()[dead]["fenced"]:
            marks["fenced"] = time.monotonic()
            return True
        return False

    def moved() -> bool:
        doc = observer.topic(topic)
        assert doc is not None
        leaders = {p["partition"]: p["leader"] for p in doc["partitions"]}
        if all(leaders[p] not in (dead, -1) for p in partitions):
            marks["moved"] = time.monotonic()
            return True
        return False

    def writable() -> bool:
        body = {"records": [{"value": "x", "partition": partitions[0]}], "acks": "all"}
        if observer.post(f"/v1/topics/{topic}/records", body, timeout_s=5).status == 200:
            marks["writable"] = time.monotonic()
            return True
        return False

    eventually(fenced, 60, f"node {dead} fenced", interval_s=POLL_S)
    eventually(moved, 60, "new leaders", interval_s=POLL_S)
    eventually(writable, 60, "an acknowledged write", interval_s=POLL_S)
    figures = [marks["fenced"] - t0, marks["moved"] - t0, marks["writable"] - t0]

    victim.start()
    victim.wait_ready(60)

    def rejoined() -> bool:
        doc = observer.topic(topic)
        assert doc is not None
        return all(dead in p["isr"] for p in doc["partitions"])

    eventually(rejoined, 60, f"node {dead} back in every ISR", interval_s=0.1)
    return figures


def failover_rows(cluster: LograftCluster, trials: int) -> list[str]:
    cluster.create_topic("failover", partitions=6, replication_factor=3)
    rows = []
    for label, kill_controller in (("broker", False), ("broker + active controller", True)):
        results = [failover_trial(cluster, "failover", kill_controller) for _ in range(trials)]
        for i, name in enumerate(("fenced", "new leaders", "acks=all write ok")):
            values = sorted(r[i] for r in results)
            rows.append(
                f"{label:<27} {name:<18} {len(values):>3} {values[0]:>7.2f} "
                f"{statistics.median(values):>7.2f} {values[-1]:>7.2f}   "
                + " ".join(f"{v:.2f}" for v in (r[i] for r in results))
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--creates", type=int, default=50, help="requests per latency row")
    parser.add_argument("--trials", type=int, default=3, help="kills per failover row")
    parser.add_argument(
        "--raft-appends", type=int, default=0, help="also time N bare Raft appends (0: skip)"
    )
    args = parser.parse_args()

    print(f"# {platform.node()}: {platform.platform()}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="lograft-bench-quorum-") as tmp:
        cluster = LograftCluster(Path(tmp), 3)
        try:
            cluster.start()
            latency = commit_latencies(cluster, args.creates)
            failover = failover_rows(cluster, args.trials)
        except BaseException:
            print(cluster.logs(), file=sys.stderr)
            raise
        finally:
            cluster.close()
    if args.raft_appends:
        latency += raft_latencies(args.raft_appends)

    print("\nMetadata commit latency, ms (sequential requests from one client)")
    print(f"{'request':<34} {'n':>5} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for row in latency:
        print(row)
    print("\nFailover after SIGKILL, seconds from the kill (metadata polled every 10 ms)")
    print(f"{'killed':<27} {'until':<18} {'n':>3} {'min':>7} {'median':>7} {'max':>7}   trials")
    for row in failover:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
