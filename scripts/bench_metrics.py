#!/usr/bin/env python3
"""What metrics cost: produce with `[metrics] enabled` on against off, and a scrape's time.

1. Produce cost. Starts two temporary three-node clusters side by side
   (scripts/bench.py's `TempCluster`, scripts/local_cluster.py's configs, free
   ports, stopped by pid at the end): "on" with the default config (metrics
   on), "off" with `[metrics] enabled = false` (no /metrics route, no request
   timing, no counting on the produce and fetch paths). Then scripts/bench.py's
   raw produce case against both, the same settings: acks=all, values of
   `--record-bytes` (100 B), about `--request-bytes` per request,
   `--inflight` requests per partition, `--partitions` partitions (one leader
   per broker), replication factor 3, `--warmup` s uncounted and `--seconds`
   s counted per round; `--rounds` rounds alternate which side goes first.
   The figure: records/s of "off" over "on", all rounds together, and round
   by round (issue 15 asks for at most 5 % apart).

2. The server side alone (`--inprocess-rounds`, 6 by default; 0: skip): one
   broker in this process (a `ReplicaManager` with one topic of 3
   partitions, replication factor 1, the node's own app: `create_app` and
   `DataRoutes`), with metrics on (`BrokerStats`, `RequestMetrics` and its
   handler mark, as the node wires them) or off, served by aiohttp on
   127.0.0.1; 12 clients post raw batches of `--inprocess-records` (10)
   100 B records, acks=1, for `--inprocess-seconds` (3) per side and round,
   sides alternating. Small requests make the per-request cost of metrics
   as large a share as it can be; the figure is requests/s, off over on.

3. What the request timing adds per request, in CPU time (`--micro-requests
   N`, 50,000; 0: skip): the same trivial handler (it enters one remote wait,
   as a produce does) called N times bare and N times through the request
   metrics' two middlewares, 3 rounds; `time.process_time` per call. With
   the nodes' CPU per record of case 1 this bounds the share of metrics in
   a produce's cost (the counters on the produce path are a few dict
   lookups and additions more, not timed here).

4. Scrape time (`--scrape-partitions N`, 2,000 by default; 0: skip). On the
   "on" cluster, a topic of N partitions, replication factor 3 (every node
   hosts N replicas and leads about N/3; the case waits until each node's
   own `lograft_broker_partitions` shows them, not for full ISRs, which a
   loaded machine may take minutes to reach), then `--scrapes` sequential
   `GET /metrics` of each node: the client's time per scrape (p50, max),
   the answer's size and its sample count (`prometheus_client.parser`).
   With the default `partition_series_max` (1,000) the per-partition series
   are capped, as they would be in production.

    .venv/bin/python scripts/bench_metrics.py [--rounds 6] [--seconds 10] [--json]
    .venv/bin/python scripts/bench_metrics.py --render saved.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # a sibling script
import bench_common
import local_cluster

from lograft.api.app import create_app
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.routes_data import BATCH_CONTENT_TYPE, DataRoutes
from lograft.api.services import TopicView
from lograft.brokers.broker_stats import BrokerStats
from lograft.brokers.partition import Assignment
from lograft.brokers.remote_wait import remote_wait
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.topic_partition import TopicPartition

SIDES = ("on", "off")
INPROCESS_PARTITIONS = 3
# How long the scrape case waits for every node to host the wide topic, s.
SCRAPE_HOSTED_TIMEOUT_S = 600
INPROCESS_CLIENTS_PER_PARTITION = 4
OFF_SECTION = "\n[metrics]\nenabled = false\n"


class SideCluster(bench.TempCluster):
    """A temporary cluster with metrics on (the default config) or off."""

    def __init__(self, side: str) -> None:
        super().__init__(secure=False)
        self.side = side

    def start(self) -> None:
        lc = local_cluster
        bench.progress(f"starting the metrics-{self.side} cluster in {self.dir} ({self.bootstrap})")
        with contextlib.redirect_stdout(sys.stderr):
            lc.write_configs(self.dir, self.base, secure=False)
            if self.side == "off":
                for n in lc.NODES:
                    config = self.dir / f"node-{n}.toml"
                    config.write_text(config.read_text() + OFF_SECTION)
            for n in lc.NODES:
                lc.start_node(self.dir, n)
            if not lc.wait_ready(self.dir, self.base, lc.NODES):
                raise RuntimeError(f"the {self.side} cluster did not become ready: {self.dir}")


async def produce_rounds(
    args: argparse.Namespace, clusters: dict[str, SideCluster], run_id: str
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, bench.Client] = {}
        for name, cluster in clusters.items():
            session = await stack.enter_async_context(
                aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=120),
                    connector=aiohttp.TCPConnector(limit=0),
                )
            )
            clients[name] = bench.Client(session, cluster.bootstrap)
            await clients[name].discover()
        topic = f"bench-{run_id}-raw"
        leaders = {
            name: await c.create_topic(topic, args.partitions) for name, c in clients.items()
        }
        for round_no in range(args.rounds):
            order = list(SIDES) if round_no % 2 == 0 else list(SIDES)[::-1]
            for name in order:
                case = bench.Throughput("produce", "raw", args.record_bytes, "all")
                await bench.produce_case(
                    clients[name], topic, leaders[name], case, args, clusters[name].pids()
                )
                d = {**case.to_dict(), "side": name, "round": round_no}
                bench.progress(
                    f"metrics {name} r{round_no}: {d['records_per_s']:,.0f} records/s, "
                    f"p99 {d['request_p99_ms']} ms, errors {case.errors}"
                )
                out.append(d)
    return out


async def scrape_case(args: argparse.Namespace, cluster: SideCluster, run_id: str) -> dict:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        client = bench.Client(session, cluster.bootstrap)
        await client.discover()
        topic = f"bench-{run_id}-wide"
        bench.progress(f"creating {topic} with {args.scrape_partitions} partitions (RF 3)")
        started = time.monotonic()
        body = {"name": topic, "partitions": args.scrape_partitions, "replication_factor": 3}
        async with session.post(f"{cluster.bootstrap}/v1/topics", json=body) as resp:
            if resp.status != 201:
                raise RuntimeError(f"create {topic}: {resp.status} {await resp.text()}")
        # Every node hosts every partition (RF 3 of 3): wait until each one's
        # replica manager has them all (its own lograft_broker_partitions),
        # not for full ISRs, which a loaded machine may take minutes to reach.
        deadline = time.monotonic() + SCRAPE_HOSTED_TIMEOUT_S
        for url in client.urls.values():
            while await _hosted(session, url) < args.scrape_partitions:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} does not host {topic}'s partitions yet")
                await asyncio.sleep(1)  # polling the replicas' creation with a deadline
        bench.progress(f"hosted everywhere in {time.monotonic() - started:.1f} s; scraping")
        nodes: dict[str, Any] = {}
        for broker_id, url in sorted(client.urls.items()):
            times: list[float] = []
            size = samples = 0
            for _ in range(args.scrapes):
                t0 = time.perf_counter()
                async with session.get(f"{url}/metrics") as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"GET /metrics on {url}: {resp.status}")
                times.append((time.perf_counter() - t0) * 1000)
                size = len(body)
            text = body.decode()
            samples = sum(len(f.samples) for f in text_string_to_metric_families(text))
            nodes[str(broker_id)] = {
                "scrape_p50_ms": round(statistics.median(times), 1),
                "scrape_max_ms": round(max(times), 1),
                "bytes": size,
                "samples": samples,
            }
            bench.progress(f"node {broker_id}: {nodes[str(broker_id)]}")
        return {"partitions": args.scrape_partitions, "scrapes": args.scrapes, "nodes": nodes}


class _OneBroker:
    """The metadata view of one broker leading every partition of one topic."""

    def __init__(self) -> None:
        a = Assignment((1,), (1,), 1, 1, 0)
        self.view = TopicView("t", "id-t", MappingProxyType(dict.fromkeys(range(3), a)))

    def topic(self, name: str) -> TopicView | None:
        return self.view if name == "t" else None

    def topics(self) -> list[TopicView]:
        return [self.view]

    def broker_url(self, broker_id: int) -> str | None:
        return None

    def live_brokers(self) -> list[int]:
        return [1]


async def inprocess_side(on: bool, args: argparse.Namespace) -> float:
    """Requests/s of raw produce to one in-process broker, metrics on or off."""
    directory = Path(tempfile.mkdtemp(prefix="lograft-bench-metrics-"))
    stats = BrokerStats(500) if on else None
    replicas = ReplicaManager(1, directory, BrokerSettings(min_insync_replicas=1), stats=stats)
    await replicas.start()
    metadata = _OneBroker()
    replicas.apply_metadata(
        {
            TopicPartition("t", p): PartitionMeta("id-t", a)
            for p, a in metadata.view.partitions.items()
        }
    )
    requests = RequestMetrics() if on else None
    app = create_app(
        cluster_secret="bench",
        request_bytes_max=1 << 24,
        ready=lambda: (True, {}),
        request_metrics=requests,
    )
    DataRoutes(replicas, metadata).add_to(app)
    if requests is not None:
        app.middlewares.append(requests.handler_mark())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    body = build_batch(
        [RecordInput(value=b"x" * 100) for _ in range(args.inprocess_records)], timestamp_ms=1
    )
    count = 0
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            end = time.monotonic() + args.inprocess_seconds

            async def client(p: int) -> None:
                nonlocal count
                url = f"http://127.0.0.1:{server.port}/v1/topics/t/partitions/{p}/batches?acks=1"
                headers = {"Content-Type": BATCH_CONTENT_TYPE}
                while time.monotonic() < end:
                    async with session.post(url, data=body, headers=headers) as resp:
                        await resp.read()
                        if resp.status != 200:
                            raise RuntimeError(f"in-process produce: {resp.status}")
                    count += 1

            await asyncio.gather(
                *(
                    client(p)
                    for p in range(INPROCESS_PARTITIONS)
                    for _ in range(INPROCESS_CLIENTS_PER_PARTITION)
                )
            )
    finally:
        await server.close()
        await replicas.stop()
        subprocess.run(["rm", "-rf", str(directory)], check=False)
    return count / args.inprocess_seconds


async def inprocess_rounds(args: argparse.Namespace) -> dict[str, Any]:
    by_side: dict[str, list[float]] = {name: [] for name in SIDES}
    for round_no in range(args.inprocess_rounds):
        order = list(SIDES) if round_no % 2 == 0 else list(SIDES)[::-1]
        for name in order:
            rate = await inprocess_side(name == "on", args)
            by_side[name].append(round(rate, 1))
            bench.progress(f"in-process metrics {name} r{round_no}: {rate:,.0f} requests/s")
    ratios = [round(b / a, 3) for a, b in zip(by_side["on"], by_side["off"], strict=True)]
    return {
        "records_per_request": args.inprocess_records,
        "seconds": args.inprocess_seconds,
        **{name: {"requests_per_s_by_round": v} for name, v in by_side.items()},
        "off_over_on": round(sum(by_side["off"]) / sum(by_side["on"]), 3),
        "off_over_on_by_round": ratios,
        "off_over_on_median": statistics.median(ratios),
    }


async def micro_case(args: argparse.Namespace) -> dict[str, Any]:
    """CPU microseconds a request spends in the request metrics' middlewares."""
    app = web.Application()
    route = "/v1/topics/{topic}/partitions/{partition}/batches"

    async def handler(_request: web.Request) -> web.Response:
        with remote_wait():
            pass
        return web.Response()

    app.router.add_post(route, handler)
    request = make_mocked_request("POST", "/v1/topics/t/partitions/0/batches", app=app)
    match = await app.router.resolve(request)
    match.add_app(app)
    request._match_info = match  # what aiohttp sets after routing
    metrics = RequestMetrics()
    timed, mark = metrics.middleware(), metrics.handler_mark()

    async def marked(r: web.Request) -> web.StreamResponse:
        return await mark(r, handler)

    n = args.micro_requests
    rounds = []
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(n):
            await handler(request)
        t1 = time.process_time()
        for _ in range(n):
            await timed(request, marked)
        t2 = time.process_time()
        rounds.append(round(((t2 - t1) - (t1 - t0)) / n * 1e6, 2))
    return {
        "requests": n,
        "added_us_by_round": rounds,
        "added_us_median": statistics.median(rounds),
    }


async def _hosted(session: aiohttp.ClientSession, url: str) -> float:
    """The replicas a node hosts, from its own metrics."""
    async with session.get(f"{url}/metrics") as resp:
        text = (await resp.read()).decode()
    for family in text_string_to_metric_families(text):
        if family.name == "lograft_broker_partitions":
            return family.samples[0].value
    return 0.0


def summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    by_side: dict[str, Any] = {}
    for name in SIDES:
        mine = [c for c in cases if c["side"] == name]
        seconds = sum(c["seconds"] for c in mine)
        by_side[name] = {
            "records_per_s": round(sum(c["records"] for c in mine) / seconds, 1),
            "by_round": [c["records_per_s"] for c in mine],
            "errors": sum(c["errors"] for c in mine),
        }
    on, off = by_side["on"], by_side["off"]
    ratios = [round(b / a, 3) for a, b in zip(on["by_round"], off["by_round"], strict=True)]
    return {
        **by_side,
        "off_over_on": round(off["records_per_s"] / on["records_per_s"], 3),
        "off_over_on_by_round": ratios,
        "off_over_on_median": statistics.median(ratios),
    }


def render(doc: dict[str, Any]) -> str:
    r = doc["results"]
    lines = [
        "lograft metrics cost: raw produce with [metrics] enabled on and off, one run",
        f"command: {doc['command']}",
        f"machine: {doc['machine']}",
        f"load average (1/5/15 min): start {doc['load_start']}, end {doc['load_end']}",
        f"wall time: {doc['wall_s']:.0f} s",
    ]
    if "summary" in r:
        s = r["summary"]
        st = doc["settings"]
        lines += [
            f"produce raw, acks=all, {st['record_bytes']} B values, {st['partitions']} "
            f"partitions x {st['inflight']} in flight, {st['rounds']} rounds of "
            f"{st['seconds']} s per side (alternating which goes first)",
            f"{'side':<6}{'records/s':>12}  {'by round':<60}{'errors':>7}",
        ]
        for name in SIDES:
            x = s[name]
            rounds = " ".join(f"{v:,.0f}" for v in x["by_round"])
            lines.append(f"{name:<6}{x['records_per_s']:>12,.0f}  {rounds:<60}{x['errors']:>7}")
        lines.append(
            f"off/on: {s['off_over_on']:.3f} all rounds together; by round "
            f"{' '.join(f'{v:.3f}' for v in s['off_over_on_by_round'])}; median "
            f"{s['off_over_on_median']:.3f}"
        )
    if "inprocess" in r:
        ip = r["inprocess"]
        lines.append(
            f"in-process broker, raw produce of {ip['records_per_request']} records per request, "
            f"acks=1, {ip['seconds']} s per side and round (requests/s)"
        )
        for name in SIDES:
            rounds = " ".join(f"{v:,.0f}" for v in ip[name]["requests_per_s_by_round"])
            lines.append(f"  {name:<5}{rounds}")
        lines.append(
            f"  off/on: {ip['off_over_on']:.3f} all rounds together; by round "
            f"{' '.join(f'{v:.3f}' for v in ip['off_over_on_by_round'])}; median "
            f"{ip['off_over_on_median']:.3f}"
        )
    if "micro" in r:
        m = r["micro"]
        lines.append(
            f"request metrics' middlewares, CPU per request ({m['requests']:,} calls x 3): "
            f"{' '.join(f'{v} us' for v in m['added_us_by_round'])}; median "
            f"{m['added_us_median']} us"
        )
    if "scrape" in r:
        sc = r["scrape"]
        lines.append(
            f"scrape: {sc['partitions']} partitions (RF 3), {sc['scrapes']} scrapes per node"
        )
        for node, x in sc["nodes"].items():
            lines.append(
                f"  node {node}: p50 {x['scrape_p50_ms']} ms, max {x['scrape_max_ms']} ms, "
                f"{x['bytes']:,} bytes, {x['samples']:,} samples"
            )
    return "\n".join(lines)


async def run(args: argparse.Namespace, clusters: dict[str, SideCluster]) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    out: dict[str, Any] = {}
    if args.micro_requests:
        out["micro"] = await micro_case(args)
    if args.inprocess_rounds:
        out["inprocess"] = await inprocess_rounds(args)
    if args.rounds:
        out["produce"] = await produce_rounds(args, clusters, run_id)
        out["summary"] = summary(out["produce"])
    if args.scrape_partitions:
        out["scrape"] = await scrape_case(args, clusters["on"], run_id)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=6, help="rounds of the produce case (0: none)")
    ap.add_argument("--seconds", type=float, default=10.0, help="counted seconds per round")
    ap.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds per round")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=4, help="produce requests per partition")
    ap.add_argument("--request-bytes", type=int, default=65536)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--inprocess-rounds", type=int, default=6, help="0: no in-process case")
    ap.add_argument("--inprocess-seconds", type=float, default=3.0)
    ap.add_argument("--inprocess-records", type=int, default=10, help="records per request")
    ap.add_argument("--micro-requests", type=int, default=50_000, help="0: no CPU case")
    ap.add_argument("--scrape-partitions", type=int, default=2000, help="0: no scrape case")
    ap.add_argument("--scrapes", type=int, default=20, help="scrapes per node")
    ap.add_argument("--keep", action="store_true", help="keep the clusters' directories")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    ap.add_argument("--render", type=Path, metavar="JSON", help="print a --json output as a table")
    args = ap.parse_args()
    if args.render is not None:
        print(render(json.loads(args.render.read_text())))
        return 0
    started = time.monotonic()
    load_start = "/".join(f"{x:.2f}" for x in os.getloadavg())
    clusters: dict[str, SideCluster] = {}
    try:
        # "off" only when produce rounds compare it.
        for name in SIDES if args.rounds else ("on",) if args.scrape_partitions else ():
            clusters[name] = SideCluster(name)
            clusters[name].start()
        results = asyncio.run(run(args, clusters))
    finally:
        for cluster in clusters.values():
            cluster.stop(args.keep)
    doc = {
        "command": shlex.join([".venv/bin/python", "scripts/bench_metrics.py", *sys.argv[1:]]),
        "machine": bench_common.machine(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "render")},
        "load_start": load_start,
        "load_end": "/".join(f"{x:.2f}" for x in os.getloadavg()),
        "wall_s": time.monotonic() - started,
        "results": results,
    }
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
