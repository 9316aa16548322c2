"""Soak: does the metadata quorum keep its leader under the scale bench's load?

A three-node cluster (configs from scripts/local_cluster.py, a fresh temporary
directory, its own ports) with `--partitions` partitions (RF 3, so every node
hosts them all), then scripts/bench_scale.py's produce load (acks=all, raw
batches of `--records-per-batch` x `--record-bytes` B at `--rate` requests/s,
round-robin over all partitions) for `--duration-s`. Every `--poll-s` a thread
reads each node's `/healthz`: the Raft term and the elections that node's Raft
counted, how late its event loop ran (`loop_lag_ms`) and its controller's own
loop (`controller_loop_lag_ms`), how late its Raft thread ticked
(`raft_tick_lag_ms`), and node 1's `/v1/cluster` for the active
controller. Every `--report-s` it prints a progress line; at the end:

- elections: how far the quorum's term moved during the load (each term
  begins with an election, won or not), and the elections each node counted;
- controller changes seen by the poller, and from the node logs the active
  controllers elected and the brokers fenced during the load;
- per node, the distribution of the per-poll worst loop lag, controller loop
  lag and Raft tick lag (p50, p99, max; each poll reads the worst of the
  node's last 10 s).

Every voter has a controller listener (scripts/local_cluster.py's configs):
brokers' heartbeats reach the active controller off its main loop.

Exit status 0 when the term did not move and nothing was fenced, else 1.

    .venv/bin/python scripts/soak_quorum.py --partitions 2000 --duration-s 3600
    .venv/bin/python scripts/soak_quorum.py --raft election_timeout_min_ms=400 ...

The load generator and the poller run in this process, on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale
import local_cluster

NODES = local_cluster.NODES
POLL_TIMEOUT_S = 5


def get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=POLL_TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None  # a node too busy to answer in time: counted as a missed poll


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class NodeSeries:
    term_first: int | None = None
    term_last: int | None = None
    elections_first: int | None = None
    elections_last: int | None = None
    loop_lag: list[float] = field(default_factory=list)
    # The controller's own loop (node/controller_thread.py), worst of 10 s per poll.
    controller_lag: list[float] = field(default_factory=list)
    tick_lag: list[float] = field(default_factory=list)
    tick_lag_max: float = 0.0
    tick_buckets: dict[str, int] = field(default_factory=dict)
    missed: int = 0


@dataclass
class Watch:
    nodes: dict[int, NodeSeries] = field(default_factory=lambda: {n: NodeSeries() for n in NODES})
    controllers: list[int] = field(default_factory=list)  # each change, in order
    polls: int = 0

    def observe(self, cluster: bench_scale.Cluster) -> None:
        self.polls += 1
        for n in NODES:
            series = self.nodes[n]
            health = get_json(f"{cluster.url(n)}/healthz")
            if health is None or "raft_term" not in health:
                series.missed += 1
                continue
            term, elections = int(health["raft_term"]), int(health["raft_elections"])
            if series.term_first is None:
                series.term_first, series.elections_first = term, elections
            series.term_last, series.elections_last = term, elections
            series.loop_lag.append(float(health["loop_lag_ms"]["max"]))
            controller_lag = health.get("controller_loop_lag_ms") or {}
            if "max" in controller_lag:
                series.controller_lag.append(float(controller_lag["max"]))
            tick = health["raft_tick_lag_ms"]
            series.tick_lag.append(float(tick["max"]))
            series.tick_lag_max = float(tick["max_since_start"])
            series.tick_buckets = dict(tick["ticks"])
        doc = get_json(f"{cluster.url(1)}/v1/cluster")
        if doc is not None and doc.get("active_controller") is not None:
            active = int(doc["active_controller"])
            if not self.controllers or self.controllers[-1] != active:
                self.controllers.append(active)

    def term_moves(self) -> int:
        """How far the quorum's term moved: the largest move any node saw."""
        moves = [
            s.term_last - s.term_first
            for s in self.nodes.values()
            if s.term_first is not None and s.term_last is not None
        ]
        return max(moves, default=0)

    def node_elections(self) -> dict[int, int]:
        return {
            n: (s.elections_last or 0) - (s.elections_first or 0) for n, s in self.nodes.items()
        }

    def controller_changes(self) -> int:
        return max(len(self.controllers) - 1, 0)


def pct(values: list[float], q: float) -> float:
    return bench_scale.pct(values, q)


def poll_until(stop: threading.Event, watch: Watch, cluster: bench_scale.Cluster, every: float):
    while not stop.wait(every):  # the polling period
        watch.observe(cluster)


def progress(
    watch: Watch, started: float, duration: float, load: bench_scale.LoadResult | None
) -> str:
    recent = 30  # polls: the worst lag of about the last report period
    lags = ", ".join(
        f"n{n} loop {max(s.loop_lag[-recent:], default=0):.0f}"
        f"/tick {max(s.tick_lag[-recent:], default=0):.0f}"
        for n, s in watch.nodes.items()
    )
    sent = f", {load.ok} ok / {load.errors} errors" if load is not None else ""
    return (
        f"[{time.strftime('%H:%M:%S')}] {time.monotonic() - started:.0f}/{duration:.0f} s: "
        f"term moved {watch.term_moves()}, controller changes {watch.controller_changes()}"
        f"{sent}; worst lag ms of the last polls {lags}; load {loadavg()}"
    )


async def load_with_progress(
    cluster: bench_scale.Cluster,
    leaders: dict[tuple[str, int], int],
    args: argparse.Namespace,
    watch: Watch,
) -> bench_scale.LoadResult:
    started = time.monotonic()
    task = asyncio.create_task(
        bench_scale.produce_load(
            cluster,
            leaders,
            args.duration_s,
            args.rate,
            args.records_per_batch,
            args.record_bytes,
            args.inflight_max,
            warmup=0.0,
        )
    )
    while not task.done():
        await asyncio.wait({task}, timeout=args.report_s)  # the report period
        print(progress(watch, started, args.duration_s, None), flush=True)
    return task.result()


def append_section(directory: Path, section: str, settings: list[tuple[str, int]]) -> None:
    if not settings:
        return
    for n in NODES:
        with (directory / f"node-{n}.toml").open("a") as f:
            f.write(f"\n[{section}]\n")
            f.writelines(f"{k} = {v}\n" for k, v in settings)


def report(watch: Watch, load: bench_scale.LoadResult, during: bench_scale.Incidents) -> str:
    lines = [
        f"elections (term moves) during the load: {watch.term_moves()}; "
        f"per node's own count: {watch.node_elections()}",
        f"active controller changes seen by the poller: {watch.controller_changes()} "
        f"({' -> '.join(map(str, watch.controllers)) or 'none seen'}); from the logs: "
        f"active controllers elected {during.elections}, brokers fenced {during.fencings}",
        f"load: {load.sent} sent, {load.ok} ok, {load.errors} errors, "
        f"{load.redirects} leader redirects"
        + (f" (first error: {load.first_error})" if load.errors else ""),
        f"polls: {watch.polls}, missed per node: "
        + ", ".join(f"n{n} {s.missed}" for n, s in watch.nodes.items()),
    ]
    for n, s in watch.nodes.items():
        lines.append(
            f"node {n}: loop lag (worst of 10 s, per poll) p50 {pct(s.loop_lag, 0.5):.0f} "
            f"p99 {pct(s.loop_lag, 0.99):.0f} max {max(s.loop_lag, default=0):.0f} ms; "
            f"controller loop lag p50 {pct(s.controller_lag, 0.5):.0f} "
            f"p99 {pct(s.controller_lag, 0.99):.0f} "
            f"max {max(s.controller_lag, default=0):.0f} ms; "
            f"Raft tick lag p50 {pct(s.tick_lag, 0.5):.0f} p99 {pct(s.tick_lag, 0.99):.0f} "
            f"max {s.tick_lag_max:.0f} ms; ticks by lag {s.tick_buckets}"
        )
    lines.append(f"load average at the end: {loadavg()}")
    return "\n".join(lines)


def _setting(text: str) -> tuple[str, int]:
    key, _, value = text.partition("=")
    return key.strip(), int(value)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--partitions-per-topic", type=int, default=250)
    parser.add_argument("--duration-s", type=float, default=3600)
    parser.add_argument("--settle-s", type=float, default=20)
    parser.add_argument("--poll-s", type=float, default=1.0)
    parser.add_argument("--report-s", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=200, help="produce requests per second")
    parser.add_argument("--records-per-batch", type=int, default=10)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--inflight-max", type=int, default=64)
    parser.add_argument("--base-port", type=int, default=21790)
    parser.add_argument("--dir", default=None, help="parent of the temporary cluster dir")
    parser.add_argument("--keep", action="store_true", help="keep the cluster dir")
    for section in ("raft", "controller"):
        parser.add_argument(
            f"--{section}",
            action="append",
            default=[],
            type=_setting,
            metavar="KEY=INT",
            help=f"a [{section}] setting for every node",
        )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="soak-quorum-", dir=args.dir))
    cluster = bench_scale.Cluster(workdir, args.base_port, dict(args.controller))
    append_section(workdir, "raft", args.raft)
    print(f"cluster in {workdir}; load average {loadavg()}", flush=True)
    watch = Watch()
    stop = threading.Event()
    try:
        cluster.start()
        topics = cluster.create_topics(args.partitions, args.partitions_per_topic)
        leaders = cluster.wait_full_isr(topics)
        time.sleep(args.settle_s)  # let creation's leader balancing and catch-up finish
        print(f"{args.partitions} partitions with full ISR; load starts", flush=True)
        before = bench_scale.incidents(workdir)
        watch.observe(cluster)
        poller = threading.Thread(
            target=poll_until, args=(stop, watch, cluster, args.poll_s), daemon=True
        )
        poller.start()
        load = asyncio.run(load_with_progress(cluster, leaders, args, watch))
        stop.set()
        poller.join()
        watch.observe(cluster)
        during = bench_scale.incidents(workdir) - before
        print(report(watch, load, during), flush=True)
        return 0 if watch.term_moves() == 0 and during.fencings == 0 else 1
    except BaseException:
        for n in NODES:
            print(f"-- node {n} log tail", file=sys.stderr)
            local_cluster.tail(workdir / f"node-{n}.log", 20)
        raise
    finally:
        stop.set()
        cluster.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
