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
9. End to end: an AsyncProducer (linger 0) sends records on a fixed
   schedule, one due every `--latency-interval-ms`, while an AsyncConsumer in
   the same process long-polls; each value carries its scheduled send time
   and latency = consumer receive time - scheduled time (coordinated
   omission corrected: a send that goes out late counts its delay). The
   first `--warmup-s` of the schedule are not counted; then
   `--latency-records` are; one never received counts as lost (infinite).
10. `Consumer` (sync) in a fresh consumer group: `subscribe()`, then poll
    until it has read everything case 1 wrote (the time includes finding
    the coordinator, joining and reading the committed offsets; auto-commit
    on, every 5 s).
11. Two `AsyncConsumer`s in one fresh group, in this process, reading the
    same together (joining and the rebalance when the second arrives
    included).

Warm-up: before its clock starts, every case does its own work untimed for
`--warmup-s` (default 1 s) against a topic of its own (`...-warmup`, so the
counted topics hold exactly the counted records): the producers send, the
JSON cases post and fetch, the consumers read it with the same client
object; the group cases first run a member of a warm-up group of their own
(so `__consumer_offsets` exists and the coordinator is found before the
timed, fresh group joins).

`--producers-bulk` runs case 1 (sync Producer, batched) with the records
handed over by `send` (keyless, and with 8-byte keys), `send_many`
(`--many-batch` a call) and `send_arrow` (a pyarrow batch a call),
`--rounds` rounds alternating; the note gives client CPU us per record and
the load average after the case.

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
import math
import resource
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

# After the end-to-end schedule ends: how long the consumer may still take, s.
E2E_DRAIN_S = 30.0
E2E_METHOD = (
    "open loop, one record due every --latency-interval-ms; latency = consumer receive "
    "time - the record's scheduled send time (coordinated omission corrected, as "
    "wrk2/HdrHistogram: a late send's delay counts); the first --warmup-s of the schedule "
    "not counted; a counted record never received counts as lost (infinite)"
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


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


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
        self._warm_topic: str | None = None

    # -- warm-up --------------------------------------------------------------------------
    # Every case first does its own work, untimed, for --warmup-s against a topic of
    # its own (so the counted topics hold exactly the counted records): connections,
    # metadata, code paths and the nodes' caches are warm when the clock starts.

    @property
    def warm_topic(self) -> str:
        if self._warm_topic is None:
            self._warm_topic = self.topic("warmup")
        return self._warm_topic

    def warm_until(self) -> float:
        return time.monotonic() + self.args.warmup_s

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
        warm = self.warm_topic
        with Producer(self.bootstrap, **self.producer_settings()) as p:
            until = self.warm_until()
            while time.monotonic() < until:
                p.send(warm, self.value)
            p.flush()
            sent0, requests0 = p.stats.records_sent, p.stats.requests
            with timed() as t:
                for _ in range(n):
                    p.send(topic, self.value)
                p.flush()
            sent, requests = p.stats.records_sent - sent0, p.stats.requests - requests0
        assert sent == n, (sent, n)
        self.add(
            Result(
                "Producer (sync), batched",
                n,
                t["seconds"],
                t["cpu"],
                requests,
                f"{n / max(requests, 1):,.0f} records/request",
            )
        )

    def producer_async(self, topic: str) -> None:
        n = self.args.records

        warm = self.warm_topic

        async def run() -> tuple[dict[str, float], int, int]:
            async with AsyncProducer(self.bootstrap, **self.producer_settings()) as p:
                until = self.warm_until()
                while time.monotonic() < until:
                    await p.send(warm, self.value)
                await p.flush()
                sent0, requests0 = p.stats.records_sent, p.stats.requests
                with timed() as t:
                    for _ in range(n):
                        await p.send(topic, self.value)
                    await p.flush()
                return t, p.stats.records_sent - sent0, p.stats.requests - requests0

        t, sent, requests = asyncio.run(run())
        assert sent == n, (sent, n)
        self.add(
            Result(
                "AsyncProducer, batched",
                n,
                t["seconds"],
                t["cpu"],
                requests,
                f"{n / max(requests, 1):,.0f} records/request",
            )
        )

    def producer_unbatched(self, topic: str) -> None:
        n = self.args.unbatched_records
        warm = self.warm_topic
        with Producer(self.bootstrap, **{**self.producer_settings(), "linger_ms": 0}) as p:
            until = self.warm_until()
            while time.monotonic() < until:
                p.send(warm, self.value).get(30)
            requests0 = p.stats.requests
            with timed() as t:
                for _ in range(n):
                    p.send(topic, self.value).get(30)
            requests = p.stats.requests - requests0
        self.add(Result("Producer (sync), send().get() each", n, t["seconds"], t["cpu"], requests))

    def producer_bulk(self, topic: str, how: str) -> None:
        """Case 1 again (sync Producer, batched, flush) with the records
        handed over by `how`: "send" (one call per record, keyless), "send
        keyed" (one call per record, a key of 8 bytes from 1,000 distinct
        ones), "send_many" (`--many-batch` values a call) or "send_arrow" (a
        pyarrow batch of that many rows a call)."""
        n, chunk = self.args.records, self.args.many_batch
        values = [self.value] * chunk
        keys = [b"key-%04d" % (i % 1000) for i in range(n)]
        arrow = None
        if how == "send_arrow":
            import pyarrow as pa

            arrow = pa.record_batch({"value": pa.array(values, pa.binary())})
        with Producer(self.bootstrap, **self.producer_settings()) as p:

            def produce(to: str, count: int) -> None:
                if how == "send":
                    for _ in range(count):
                        p.send(to, self.value)
                    return
                if how == "send keyed":
                    for i in range(count):
                        p.send(to, self.value, keys[i % n])
                    return
                for _ in range(count // chunk):
                    if arrow is not None:
                        p.send_arrow(to, arrow)
                    else:
                        p.send_many(to, values)

            produce(self.warm_topic, chunk * 20)
            p.flush()
            sent0, requests0 = p.stats.records_sent, p.stats.requests
            with timed() as t:
                produce(topic, n)
                p.flush()
            sent, requests = p.stats.records_sent - sent0, p.stats.requests - requests0
        self.add(
            Result(
                f"Producer (sync) {how}",
                sent,
                t["seconds"],
                t["cpu"],
                requests,
                f"{t['cpu'] / max(sent, 1) * 1e6:.2f} us CPU/record; load {load_average()}",
            )
        )

    def producers_bulk(self) -> dict[str, Any]:
        """The produce cases of the sync Producer's per-record and bulk calls,
        `--rounds` rounds alternating."""
        log(f"bootstrap {self.bootstrap}, replication factor {self.rf}")
        cases = ["send", "send keyed", "send_many", "send_arrow"]
        for r in range(self.args.rounds):
            for how in cases:
                self.producer_bulk(self.topic(f"{how.replace(' ', '-')}-{r}"), how)
        return {"results": [dict(asdict(r), rate=r.rate) for r in self.results], "e2e": None}

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

        warm = self.warm_topic

        async def run() -> dict[str, float]:
            async with aiohttp.ClientSession() as session:
                queue = list(range(requests))

                async def post(to: str) -> None:
                    async with session.post(
                        f"{self.url}/v1/topics/{to}/records?acks=all",
                        data=body,
                        headers={"Content-Type": "application/json"},
                    ) as resp:
                        await resp.read()
                        assert resp.status == 200, resp.status

                async def warm_worker(until: float) -> None:
                    while time.monotonic() < until:
                        await post(warm)

                async def worker() -> None:
                    while queue:
                        queue.pop()
                        await post(topic)

                until = self.warm_until()
                await asyncio.gather(*(warm_worker(until) for _ in range(concurrency)))
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
        warm = self.warm_topic
        warm_leaders = self.leader_urls(warm)

        async def run() -> tuple[dict[str, float], int, int]:
            count = requests = 0
            async with aiohttp.ClientSession() as session:
                # Warm-up: the same reads of the warm-up topic, from its start, round robin.
                until, offsets = self.warm_until(), dict.fromkeys(warm_leaders, 0)
                while time.monotonic() < until:
                    for p, url in warm_leaders.items():
                        async with session.get(
                            f"{url}/v1/topics/{warm}/partitions/{p}/records",
                            params={"offset": offsets[p], "max_records": 10000, "format": "string"},
                        ) as resp:
                            doc = await resp.json()
                            assert resp.status == 200, doc
                        offsets[p] = doc["next_offset"] if doc["records"] else 0
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
        warm = [TopicPartition(self.warm_topic, p) for p in range(self.args.partitions)]
        with Consumer(self.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
            c.assign(warm)
            until = self.warm_until()
            while time.monotonic() < until:
                c.poll(timeout_ms=100)
            c.assign(tps)
            requests0 = c.fetch_requests
            with timed() as t:
                count = poll_count(c, expected)
            requests = c.fetch_requests - requests0
        self.add(Result("Consumer (sync), poll()", count, t["seconds"], t["cpu"], requests))

    def consumer_async(self, topic: str, expected: int) -> None:
        tps = [TopicPartition(topic, p) for p in range(self.args.partitions)]
        warm = [TopicPartition(self.warm_topic, p) for p in range(self.args.partitions)]

        async def run() -> tuple[dict[str, float], int, int]:
            async with AsyncConsumer(
                self.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100
            ) as c:
                c.assign(warm)
                until = self.warm_until()
                while time.monotonic() < until:
                    await c.poll(timeout_ms=100)
                c.assign(tps)
                requests0 = c.fetch_requests
                count = 0
                with timed() as t:
                    while count < expected:
                        for records in (await c.poll(timeout_ms=5000)).values():
                            count += len(records)
                return t, count, c.fetch_requests - requests0

        t, count, requests = asyncio.run(run())
        self.add(Result("AsyncConsumer, poll()", count, t["seconds"], t["cpu"], requests))

    def warm_group(self, group: str) -> None:
        """A group case's warm-up: a member of a group of its own joins and reads the
        warm-up topic (the coordinator, `__consumer_offsets` and the group paths are
        warm when the timed group, a fresh one, joins)."""
        with Consumer(
            self.bootstrap, group_id=group, auto_offset_reset="earliest", fetch_max_wait_ms=100
        ) as c:
            c.subscribe([self.warm_topic])
            until = self.warm_until()
            while time.monotonic() < until:
                c.poll(timeout_ms=100)

    def consumer_group_sync(self, topic: str, expected: int) -> None:
        group = f"bench-client-{self.stamp}-group-sync"
        self.warm_group(f"{group}-warmup")
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
        self.warm_group(f"{group}-warmup")

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

    def end_to_end(self, topic: str) -> dict[str, Any]:
        """Open loop on a fixed schedule, latency from each record's scheduled send time.

        Record i is due `--latency-interval-ms` x i after the start; its value
        carries that due time (monotonic ns), so a send that goes out late (a
        busy loop, a producer blocked on a full buffer) counts its lateness as
        latency: coordinated omission corrected, as wrk2 and HdrHistogram do.
        The first `--warmup-s` of the schedule are sent but not counted; a
        counted record the consumer has not seen `E2E_DRAIN_S` after the
        schedule ends is lost and counts as infinitely late."""
        n = self.args.latency_records
        interval_ns = self.args.latency_interval_ms * 1e6
        warmup = int(self.args.warmup_s * 1e9 / interval_ns)
        padding = self.value[8:] if len(self.value) > 8 else b""
        tps = [TopicPartition(topic, p) for p in range(self.args.partitions)]
        lag = {"max_ms": 0.0}

        async def run() -> list[float]:
            latencies: list[float] = []
            async with (
                AsyncConsumer(self.bootstrap, fetch_max_wait_ms=500) as c,
                AsyncProducer(self.bootstrap, linger_ms=0) as p,
            ):
                c.assign(tps)
                for tp in tps:
                    await c.position(tp)  # resolved to the end before the first send
                t0 = time.monotonic_ns()
                counted_from = t0 + int(warmup * interval_ns)
                drain_until = time.monotonic() + (warmup + n) * interval_ns / 1e9 + E2E_DRAIN_S

                async def consume() -> None:
                    while len(latencies) < n and time.monotonic() < drain_until:
                        for records in (await c.poll(timeout_ms=200)).values():
                            now = time.monotonic_ns()
                            for r in records:
                                due = int.from_bytes(r.value[:8], "big")
                                if due >= counted_from:
                                    latencies.append((now - due) / 1e6)

                reader = asyncio.create_task(consume())
                for i in range(warmup + n):
                    due = t0 + int(i * interval_ns)
                    delay = (due - time.monotonic_ns()) / 1e9
                    if delay > 0:
                        await asyncio.sleep(delay)  # the fixed-rate schedule
                    lag["max_ms"] = max(lag["max_ms"], (time.monotonic_ns() - due) / 1e6)
                    await p.send(topic, due.to_bytes(8, "big") + padding)
                await reader
            return latencies

        got = sorted(asyncio.run(run()))
        lost = n - len(got)
        lat = got + [math.inf] * lost

        def q(pct: float) -> float | str:
            v = lat[max(0, min(n - 1, math.ceil(pct / 100 * n) - 1))]  # nearest rank
            return "lost" if math.isinf(v) else v

        out: dict[str, Any] = {
            "method": E2E_METHOD,
            "records": n,
            "warmup_records": warmup,
            "received": len(got),
            "lost": lost,
            "rate_per_s": round(1000 / self.args.latency_interval_ms, 1),
            "p50_ms": q(50),
            "p99_ms": q(99),
            "max_ms": "lost" if lost else got[-1],
            "max_send_lag_ms": lag["max_ms"],
        }
        log(f"  end to end: {fmt_e2e(out)}")
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
    print(f"every case first ran its own work untimed for {out['warmup_s']} s (warm-up topic)")
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
    print(f"end to end, measured: {e['method']}")
    print(f"end to end: {fmt_e2e(e)}")


def fmt_e2e(e: dict[str, Any]) -> str:
    def ms(v: float | str) -> str:
        return v if isinstance(v, str) else f"{v:.1f} ms"

    return (
        f"{e['records']} records at {e['rate_per_s']}/s after {e['warmup_records']} warm-up "
        f"records (linger_ms=0, fetch long-poll): p50 {ms(e['p50_ms'])}, p99 {ms(e['p99_ms'])}, "
        f"max {ms(e['max_ms'])}; received {e['received']}, lost {e['lost']}, "
        f"max send lag behind schedule {e['max_send_lag_ms']:.1f} ms"
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
    ap.add_argument(
        "--latency-interval-ms",
        type=float,
        default=5.0,
        help="the end-to-end schedule: one record due every this many ms",
    )
    ap.add_argument(
        "--warmup-s",
        type=float,
        default=1.0,
        help="untimed seconds of each case's own work before its clock starts",
    )
    ap.add_argument(
        "--producers-bulk",
        action="store_true",
        help="only the sync producer's cases: send (keyless, keyed) / send_many / send_arrow, "
        "--rounds rounds alternating",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--many-batch", type=int, default=1000, help="records per send_many call")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument(
        "--consumers-only", action="store_true", help="only the consumer cases (6, 7, 10, 11)"
    )
    args = ap.parse_args(argv)

    def go(urls: list[str]) -> dict[str, Any]:
        bench = Bench(args, urls)
        if args.consumers_only:
            out = bench.consumers_only()
        elif args.producers_bulk:
            out = bench.producers_bulk()
        else:
            out = bench.run()
        out["machine"] = machine()
        out["command"] = " ".join(["scripts/bench_client.py", *(argv or sys.argv[1:])])
        out["warmup_s"] = args.warmup_s
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
