"""Python client benchmark: producer and consumer records/s, end-to-end latency,
and the plain JSON API for comparison.

Against a running cluster (`--bootstrap URL[,URL...]`) or a temporary one the
script starts with the integration harness (`--start N`, 1 or 3 nodes, random
ports, a temporary directory, stopped by pid at the end). Each run creates
its own topics (`bench-client-<time>-<case>`, `--partitions`, replication
factor 1 on one node, else 3) so the cases never read each other's records.

Cases (every produce is acks=all, values of `--value-bytes` ASCII bytes, no keys):

1. `Producer` (sync) with batching: `--records` sends, then flush.
2. `AsyncProducer` with batching: `await send(...)` in a loop, then flush.
3. `Producer` without batching: `send(...).get()` one record at a time
   (`--unbatched-records`): one request per record.
4. JSON API, `--json-batch` records per request (`POST .../records`),
   `--json-concurrency` requests in flight.
5. JSON API, one record per request (`--unbatched-records`), one in flight.
6. `Consumer` (sync) reading everything case 1 wrote, from the earliest offset.
7. `AsyncConsumer` reading the same.
8. JSON API fetch of the same (`GET .../records?max_records=10000`), one
   partition after the other.
9. End to end: an AsyncProducer (linger 0) sends `--latency-records` records
   paced `--latency-interval-ms` apart while an AsyncConsumer in the same
   process long-polls; latency = consumer receive time - record timestamp.
10. `Consumer` (sync) in a fresh consumer group: `subscribe()`, then poll
    until it has read everything case 1 wrote (the time includes finding
    the coordinator, joining and reading the committed offsets; auto-commit
    on, every 5 s).
11. Two `AsyncConsumer`s in one fresh group, in this process, reading the
    same together (joining and the rebalance when the second arrives
    included).

`--consumers-only` runs cases 6, 7, 10 and 11 on records written by an
AsyncProducer (no producer figures).

The client runs in this process and shares the machine with the nodes (with
`--start`); its CPU time (user+system of this process) is printed per case.
Progress goes to stderr, the table to stdout; `--json` prints JSON instead.

    .venv/bin/python scripts/bench_client.py --start 1
    .venv/bin/python scripts/bench_client.py --start 1 --consumers-only
    .venv/bin/python scripts/bench_client.py --bootstrap http://127.0.0.1:9091 --records 500000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from bench_common import http_json, log, machine, poll_count  # a sibling script

from lograft.client import (
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    Producer,
    TopicPartition,
)


@dataclass
class Result:
    case: str
    records: int
    seconds: float
    cpu_seconds: float
    requests: int | None = None
    note: str = ""

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def cpu_now() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    w, c = time.perf_counter(), cpu_now()
    yield out
    out["seconds"] = time.perf_counter() - w
    out["cpu"] = cpu_now() - c


class Bench:
    def __init__(self, args: argparse.Namespace, urls: list[str]) -> None:
        self.args = args
        self.urls = urls
        self.url = urls[0]
        self.bootstrap = ",".join(urls)
        brokers = http_json("GET", f"{self.url}/v1/brokers")["brokers"]
        self.rf = 1 if len(brokers) == 1 else 3
        self.value = b"v" * args.value_bytes
        self.stamp = int(time.time())
        self.results: list[Result] = []

    def topic(self, case: str) -> str:
        name = f"bench-client-{self.stamp}-{case}"
        configs = {"min_insync_replicas": "1"} if self.rf == 1 else {}
        http_json(
            "POST",
            f"{self.url}/v1/topics",
            {
                "name": name,
                "partitions": self.args.partitions,
                "replication_factor": self.rf,
                "configs": configs,
            },
        )
        # Wait until every partition's leader serves it.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            doc = http_json("GET", f"{self.url}/v1/topics/{name}")
            if all(p["high_watermark"] is not None for p in doc["partitions"]):
                return name
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} has no serving leaders after 30 s")

    def add(self, r: Result) -> None:
        self.results.append(r)
        log(f"  {r.case}: {r.records} records in {r.seconds:.2f} s = {r.rate:,.0f} records/s")

    # -- producers ---------------------------------------------------------------------

    def producer_sync(self, topic: str) -> None:
        n = self.args.records
        with Producer(self.bootstrap, **self.producer_settings()) as p:
            with timed() as t:
                for _ in range(n):
                    p.send(topic, self.value)
                p.flush()
            stats = p.stats
        assert stats.records_sent == n, stats
        self.add(
            Result(
                "Producer (sync), batched",
                n,
                t["seconds"],
                t["cpu"],
                stats.requests,
                f"{n / max(stats.requests, 1):,.0f} records/request",
            )
        )

    def producer_async(self, topic: str) -> None:
        n = self.args.records

        async def run() -> tuple[dict[str, float], Any]:
            async with AsyncProducer(self.bootstrap, **self.producer_settings()) as p:
                with timed() as t:
                    for _ in range(n):
                        await p.send(topic, self.value)
                    await p.flush()
                return t, p.stats

        t, stats = asyncio.run(run())
        assert stats.records_sent == n, stats
        self.add(
            Result(
                "AsyncProducer, batched",
                n,
                t["seconds"],
                t["cpu"],
                stats.requests,
                f"{n / max(stats.requests, 1):,.0f} records/request",
            )
        )

    def producer_unbatched(self, topic: str) -> None:
        n = self.args.unbatched_records
        with Producer(self.bootstrap, **{**self.producer_settings(), "linger_ms": 0}) as p:
            with timed() as t:
                for _ in range(n):
                    p.send(topic, self.value).get(30)
            stats = p.stats
        self.add(
            Result("Producer (sync), send().get() each", n, t["seconds"], t["cpu"], stats.requests)
        )

    def producer_settings(self) -> dict[str, Any]:
        s: dict[str, Any] = {"compression_type": self.args.compression}
        if self.args.linger_ms is not None:
            s["linger_ms"] = self.args.linger_ms
        if self.args.batch_bytes is not None:
            s["batch_bytes"] = self.args.batch_bytes
        return s

    # -- the JSON API -------------------------------------------------------------------

    def json_produce(
        self, topic: str, per_request: int, concurrency: int, n: int, case: str
    ) -> None:
        text = self.value.decode()
        body = json.dumps(
            {"value_format": "string", "records": [{"value": text}] * per_request}
        ).encode()
        requests = (n + per_request - 1) // per_request

        async def run() -> dict[str, float]:
            async with aiohttp.ClientSession() as session:
                queue = list(range(requests))

                async def worker() -> None:
                    while queue:
                        queue.pop()
                        async with session.post(
                            f"{self.url}/v1/topics/{topic}/records?acks=all",
                            data=body,
                            headers={"Content-Type": "application/json"},
                        ) as resp:
                            await resp.read()
                            assert resp.status == 200, resp.status

                with timed() as t:
                    await asyncio.gather(*(worker() for _ in range(concurrency)))
                return t

        t = asyncio.run(run())
        self.add(Result(case, requests * per_request, t["seconds"], t["cpu"], requests))

    def leader_urls(self, topic: str) -> dict[int, str]:
        """Partition -> its leader's URL (only the leader serves fetches)."""
        brokers = http_json("GET", f"{self.url}/v1/brokers")["brokers"]
        urls = {b["id"]: b["endpoints"]["http"] for b in brokers}
        doc = http_json("GET", f"{self.url}/v1/topics/{topic}")
        return {p["partition"]: urls[p["leader"]] for p in doc["partitions"]}

    def json_fetch(self, topic: str, expected: int) -> None:
        leaders = self.leader_urls(topic)

        async def run() -> tuple[dict[str, float], int, int]:
            count = requests = 0
            async with aiohttp.ClientSession() as session:
                with timed() as t:
                    for p in range(self.args.partitions):
                        offset = 0
                        while True:
                            async with session.get(
                                f"{leaders[p]}/v1/topics/{topic}/partitions/{p}/records",
                                params={"offset": offset, "max_records": 10000, "format": "string"},
                            ) as resp:
                                doc = await resp.json()
                                assert resp.status == 200, doc
                            requests += 1
                            got = len(doc["records"])
                            if not got:
                                break
                            count += got
                            offset = doc["next_offset"]
            return t, count, requests

        t, count, requests = asyncio.run(run())
        assert count == expected, (count, expected)
        self.add(
            Result("JSON API fetch (max_records=10000)", count, t["seconds"], t["cpu"], requests)
        )

    # -- consumers ----------------------------------------------------------------------

    def consumer_sync(self, topic: str, expected: int) -> None:
        tps = [TopicPartition(topic, p) for p in range(self.args.partitions)]
        with Consumer(self.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
            c.assign(tps)
            with timed() as t:
                count = poll_count(c, expected)
            requests = c.fetch_requests
        self.add(Result("Consumer (sync), poll()", count, t["seconds"], t["cpu"], requests))

    def consumer_async(self, topic: str, expected: int) -> None:
        tps = [TopicPartition(topic, p) for p in range(self.args.partitions)]

        async def run() -> tuple[dict[str, float], int, int]:
            async with AsyncConsumer(
                self.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100
            ) as c:
                c.assign(tps)
                count = 0
                with timed() as t:
                    while count < expected:
                        for records in (await c.poll(timeout_ms=5000)).values():
                            count += len(records)
                return t, count, c.fetch_requests

        t, count, requests = asyncio.run(run())
        self.add(Result("AsyncConsumer, poll()", count, t["seconds"], t["cpu"], requests))

    def consumer_group_sync(self, topic: str, expected: int) -> None:
        group = f"bench-client-{self.stamp}-group-sync"
        with Consumer(
            self.bootstrap, group_id=group, auto_offset_reset="earliest", fetch_max_wait_ms=100
        ) as c:
            count = 0
            with timed() as t:
                c.subscribe([topic])
                while count < expected:
                    for records in c.poll(timeout_ms=5000).values():
                        count += len(records)
            requests = c.fetch_requests
        self.add(
            Result(
                "Consumer (sync), group, subscribe()",
                count,
                t["seconds"],
                t["cpu"],
                requests,
                "from subscribe(), joining included",
            )
        )

    def consumer_group_pair(self, topic: str, expected: int) -> None:
        group = f"bench-client-{self.stamp}-group-pair"

        async def run() -> tuple[dict[str, float], list[int], int]:
            members = [
                AsyncConsumer(
                    self.bootstrap,
                    group_id=group,
                    auto_offset_reset="earliest",
                    fetch_max_wait_ms=100,
                )
                for _ in range(2)
            ]
            counts = [0, 0]

            async def drain(i: int, c: AsyncConsumer) -> None:
                while sum(counts) < expected:
                    for records in (await c.poll(timeout_ms=200)).values():
                        counts[i] += len(records)

            try:
                with timed() as t:
                    for c in members:
                        await c.start()
                        c.subscribe([topic])
                    await asyncio.gather(*(drain(i, c) for i, c in enumerate(members)))
                return t, counts, sum(c.fetch_requests for c in members)
            finally:
                for c in members:
                    await c.close()

        t, counts, requests = asyncio.run(run())
        self.add(
            Result(
                "AsyncConsumer x2, one group",
                sum(counts),
                t["seconds"],
                t["cpu"],
                requests,
                f"{counts[0]:,} + {counts[1]:,}, joining and rebalance included",
            )
        )

    def consumers_only(self) -> dict[str, Any]:
        t1 = self.topic("consumers")
        self.producer_async(t1)
        self.results.clear()  # only the consumer figures are reported
        n = self.args.records
        self.consumer_sync(t1, n)
        self.consumer_async(t1, n)
        self.consumer_group_sync(t1, n)
        self.consumer_group_pair(t1, n)
        return {"results": [dict(asdict(r), rate=r.rate) for r in self.results], "e2e": None}

    # -- end to end -----------------------------------------------------------------------

    def end_to_end(self, topic: str) -> dict[str, float]:
        n = self.args.latency_records
        interval = self.args.latency_interval_ms / 1000
        tps = [TopicPartition(topic, p) for p in range(self.args.partitions)]

        async def run() -> list[float]:
            latencies: list[float] = []
            async with (
                AsyncConsumer(self.bootstrap, fetch_max_wait_ms=500) as c,
                AsyncProducer(self.bootstrap, linger_ms=0) as p,
            ):
                c.assign(tps)
                for tp in tps:
                    await c.position(tp)  # resolved to the end before the first send

                async def consume() -> None:
                    while len(latencies) < n:
                        for records in (await c.poll(timeout_ms=1000)).values():
                            now = time.time() * 1000
                            latencies.extend(now - r.timestamp for r in records)

                reader = asyncio.create_task(consume())
                for _ in range(n):
                    await p.send(topic, self.value)
                    await asyncio.sleep(interval)  # pacing of the load, not synchronisation
                await asyncio.wait_for(reader, 60)
            return latencies

        lat = sorted(asyncio.run(run()))
        q = statistics.quantiles(lat, n=100)
        out = {"p50_ms": q[49], "p99_ms": q[98], "max_ms": lat[-1], "records": len(lat)}
        log(f"  end to end: p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, max {lat[-1]:.1f} ms")
        return out

    # -- all --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        a = self.args
        log(f"bootstrap {self.bootstrap}, replication factor {self.rf}")
        t1 = self.topic("sync")
        self.producer_sync(t1)
        self.producer_async(self.topic("async"))
        self.producer_unbatched(self.topic("unbatched"))
        self.json_produce(
            self.topic("json"),
            a.json_batch,
            a.json_concurrency,
            a.records,
            f"JSON API produce, {a.json_batch} records/request, {a.json_concurrency} in flight",
        )
        self.json_produce(
            self.topic("json1"),
            1,
            1,
            a.unbatched_records,
            "JSON API produce, 1 record/request",
        )
        self.consumer_sync(t1, a.records)
        self.consumer_async(t1, a.records)
        self.json_fetch(t1, a.records)
        self.consumer_group_sync(t1, a.records)
        self.consumer_group_pair(t1, a.records)
        e2e = self.end_to_end(self.topic("e2e"))
        return {"results": [dict(asdict(r), rate=r.rate) for r in self.results], "e2e": e2e}


def print_table(out: dict[str, Any]) -> None:
    print(f"machine: {out['machine']}")
    print(f"command: {out['command']}")
    print()
    print("| case | records | records/s | s | client CPU s | requests | note |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in out["results"]:
        print(
            f"| {r['case']} | {r['records']:,} | {r['rate']:,.0f} | {r['seconds']:.2f} | "
            f"{r['cpu_seconds']:.2f} | {r['requests'] if r['requests'] is not None else ''} | "
            f"{r['note']} |"
        )
    e = out["e2e"]
    if e is None:
        return
    print()
    print(
        f"end to end ({e['records']} records, linger_ms=0, fetch long-poll): "
        f"p50 {e['p50_ms']:.1f} ms, p99 {e['p99_ms']:.1f} ms, max {e['max_ms']:.1f} ms"
    )


@contextmanager
def started_cluster(size: int) -> Iterator[list[str]]:
    from tests.integration.cluster_harness import LograftCluster

    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        cluster = LograftCluster(Path(tmp), size)
        try:
            log(f"starting {size} node(s) under {tmp}")
            cluster.start()
            yield [n.url for n in cluster]
        finally:
            cluster.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap", help="node URLs of a running cluster, comma separated")
    where.add_argument("--start", type=int, choices=(1, 3), help="start a temporary cluster")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--unbatched-records", type=int, default=2_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--linger-ms", type=int, default=None, help="default: the client's")
    ap.add_argument("--batch-bytes", type=int, default=None, help="default: the client's")
    ap.add_argument("--json-batch", type=int, default=500)
    ap.add_argument("--json-concurrency", type=int, default=3)
    ap.add_argument("--latency-records", type=int, default=500)
    ap.add_argument("--latency-interval-ms", type=float, default=5.0)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument(
        "--consumers-only", action="store_true", help="only the consumer cases (6, 7, 10, 11)"
    )
    args = ap.parse_args(argv)

    def go(urls: list[str]) -> dict[str, Any]:
        bench = Bench(args, urls)
        out = bench.consumers_only() if args.consumers_only else bench.run()
        out["machine"] = machine()
        out["command"] = " ".join(["scripts/bench_client.py", *(argv or sys.argv[1:])])
        return out

    if args.bootstrap:
        out = go([u.strip() for u in args.bootstrap.split(",") if u.strip()])
    else:
        with started_cluster(args.start) as urls:
            out = go(urls)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)


if __name__ == "__main__":
    main()
