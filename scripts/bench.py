#!/usr/bin/env python3
"""Benchmark a lograft cluster through its HTTP API.

Against a running cluster (`--bootstrap`, default http://127.0.0.1:9091, the
first node of `scripts/cluster.sh start`), or with `--start` against a
temporary three-node cluster it starts in a temporary directory with
`scripts/local_cluster.py`'s config generation (free ports found at random)
and stops (SIGTERM, then SIGKILL, by pid) at the end.

Measured, each on its own topic of `--partitions` partitions (default 3, one
leader per broker), replication factor 3, min_insync_replicas 2:

1. Produce throughput, records/s and MB/s of record values (MB = 10^6
   bytes), for every combination of
   - JSON requests (`POST /v1/topics/{t}/records`, `value_format=string`,
     each record with its `partition`, sent to that partition's leader) and
     raw batches (`POST .../partitions/{p}/batches`, RecordBatch v2 built
     client-side with `lograft.protocol.batch.build_batch`, no compression);
   - 100-byte and 1 KiB values (no key, no headers);
   - acks=1 and acks=all.
   Requests carry about `--request-bytes` of values (64 KiB: 655 records of
   100 B, 64 of 1 KiB). `--inflight` requests (default 4) per partition are
   in flight at once, all partitions concurrently, over one aiohttp session.
   Request bodies are built before the clock starts and reused, so the
   client's encoding cost is not in the figures (the storage benchmark gives
   build_batch's cost). Each case runs `--warmup` s uncounted, then
   `--seconds` s counted; a request counts when its answer arrives in the
   window. Request latency p50/p99 is per request (not per record), the
   service time of a closed loop (send to answer); it does not include the
   requests a closed loop did not send while waiting (coordinated omission),
   so it is not latency at a given rate: case 3 measures that.
2. Fetch throughput: JSON (`max_records=10000`) and raw
   (`Accept: application/vnd.lograft.batch`), `max_bytes=1 MiB`, one
   sequential reader per partition, reading the 100 B and 1 KiB topics the
   raw acks=1 produce cases wrote, from offset 0 to the high watermark and
   over again, `--warmup` s uncounted and then `--seconds` s counted (so
   mostly from the page cache). Raw
   responses are counted from batch headers (not decoded); JSON responses
   are parsed (orjson), as a consumer must.
3. Produce-to-consume latency at a fixed rate (`--latency-rate` records/s
   for `--latency-seconds`, default 500/s for 20 s; a list such as
   `100,500` runs one test per rate) on a one-partition topic of its own:
   an open-loop producer sends one-record raw batches (acks=all) on
   schedule, each value stamped with its *scheduled* send time (not the
   moment it went out: coordinated omission corrected, as wrk2 and
   HdrHistogram do); a late send (a busy loop, or `LATENCY_INFLIGHT_MAX`
   requests already in flight) goes out as soon as it can and its delay
   counts as latency. A consumer long-polls the leader (raw,
   max_wait_ms=1000) and takes the latency of each record on receipt.
   Producer and consumer share this process and its monotonic clock.
   p50 / p99 / p99.9 / max and a histogram, and the ack latency of the
   produce requests from the scheduled time (and, apart, their service time
   from the actual send). The first `--warmup` s of the schedule are sent but
   not counted. A counted record that never arrives (produce error, never
   sent before the drain deadline, not seen by the consumer) is "lost": it
   counts as infinitely late, so a percentile that falls on it prints "lost".

4. Flush policies side by side (`--only flush`): raw acks=all produce, as in
   case 1, on one topic per policy of `--flush-policies` (default
   `none,group_commit`), for each value size, the policies taking turns
   (`--flush-rounds` rounds), all in the same run and cluster: records/s and
   request p99 of acknowledgement from the page cache against
   acknowledgement once every ISR member has fsynced. Then case 3's
   produce-to-consume latency at each `--latency-rate`, once per policy
   (open loop, coordinated omission corrected: p99 at a given rate).

`--secure` (with `--start`) runs the same against a cluster with issue 12's
security on, as `scripts/cluster.sh start --secure` makes it: https with
the local CA, bearer authentication (every request carries the token of
`User:bench`, which the nodes verify: ES256 against the local JWKS, then
their verified-token cache) and ACLs (User:bench is not a super user: an
ACL allows it everything on topics prefixed `bench-`, so every request is
authorized against the ACLs). Run it without and with `--secure` to compare.

`--topic-config KEY=VALUE` (repeatable) gives every topic the benchmark
creates that config, e.g. `flush_policy=every_batch` to measure appends that
fsync.

Progress goes to stderr; a plain table to stdout, or `--json` for one JSON
object. CPU seconds used by the client (this process) and, with `--start`,
by the three nodes are reported per case: on a small machine the client and
the cluster compete for the same cores.

    .venv/bin/python scripts/bench.py --start [--seconds 5] [--json]
    .venv/bin/python scripts/bench.py --bootstrap http://127.0.0.1:9091
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import shlex
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from lograft.protocol.batch import RecordInput, build_batch, iter_batches, iter_records

BATCH_TYPE = "application/vnd.lograft.batch"
MB = 1_000_000
RECORD_SIZES = (100, 1024)
READY_TIMEOUT_S = 60.0
FETCH_MAX_BYTES = 1 << 20
LATENCY_WAIT_MS = 1000
# After the latency schedule ends: how long overdue sends may still go out, and
# how long the consumer waits for records still in flight, s.
LATENCY_DRAIN_S = 10.0
# Pause after a refused request or a lost connection, s.
ERROR_BACKOFF_S = 0.05
# Produce requests of the latency test in flight at once; past it a send waits
# for a slot, and its wait counts as latency (it is stamped with its scheduled time).
# Below the nodes' default connections_per_ip_max (1024): each request in flight
# holds a connection, and more would be refused by the node, not by the log.
LATENCY_INFLIGHT_MAX = 512
SCRIPTS = Path(__file__).resolve().parent


def progress(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None without samples."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


# -- results -----------------------------------------------------------------------------------


@dataclass
class Throughput:
    kind: str  # produce | fetch
    fmt: str  # json | raw
    record_bytes: int
    acks: str  # "1", "all", or "-" for fetch
    records: int = 0
    value_bytes: int = 0
    wire_bytes: int = 0
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0
    nodes_cpu_s: float | None = None
    error_samples: list[str] = field(default_factory=list)
    leader_moves: int = 0
    # The topic's flush_policy when the case sets one (case 4).
    flush_policy: str = ""

    def note_error(self, status: int, body: bytes) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(f"{status}: {body[:300].decode(errors='replace')}")

    @property
    def name(self) -> str:
        acks = f" acks={self.acks}" if self.kind == "produce" else ""
        policy = f" {self.flush_policy}" if self.flush_policy else ""
        return f"{self.kind} {self.fmt} {self.record_bytes} B{acks}{policy}"

    def to_dict(self) -> dict[str, Any]:
        secs = self.seconds or float("nan")
        return {
            "case": self.name,
            "kind": self.kind,
            "format": self.fmt,
            "record_bytes": self.record_bytes,
            "acks": self.acks,
            "records": self.records,
            "requests": self.requests,
            "errors": self.errors,
            "error_samples": self.error_samples[:3],
            "leader_moves": self.leader_moves,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records / secs, 1),
            "mb_per_s": round(self.value_bytes / MB / secs, 2),
            "wire_mb_per_s": round(self.wire_bytes / MB / secs, 2),
            "request_p50_ms": _round(percentile(self.latencies_ms, 50)),
            "request_p99_ms": _round(percentile(self.latencies_ms, 99)),
            "client_cpu_s": round(self.client_cpu_s, 2),
            "nodes_cpu_s": None if self.nodes_cpu_s is None else round(self.nodes_cpu_s, 2),
        }


LATENCY_METHOD = (
    "open loop at a fixed rate; latency from each record's scheduled send time "
    "(coordinated omission corrected, as wrk2/HdrHistogram): a late send's delay counts, "
    "a counted record never received counts as lost (infinite) in the percentiles; "
    "the first --warmup s of the schedule are sent but not counted"
)
THROUGHPUT_LATENCY_METHOD = (
    "closed loop (--inflight requests per partition, the next sent when one is answered): "
    "req p50/p99 are per-request service time, send to answer, of requests answered in "
    "the counted window after --warmup s; a closed loop does not see the requests it "
    "did not send while waiting (coordinated omission), so these are not latency at a rate"
)


@dataclass
class Latency:
    rate: int
    seconds: float
    warmup_s: float
    scheduled: int  # records due in the counted window
    sent: int = 0  # of those, sent (late or not)
    received: int = 0  # of those, seen by the consumer
    dropped: int = 0  # of those, never sent (still due at the send deadline)
    errors: int = 0  # of those, produce refused or connection lost
    e2e_ms: list[float] = field(default_factory=list)
    ack_ms: list[float] = field(default_factory=list)  # from scheduled time
    ack_service_ms: list[float] = field(default_factory=list)  # from actual send
    max_schedule_lag_ms: float = 0.0
    client_cpu_s: float = 0.0
    nodes_cpu_s: float | None = None
    error_samples: list[str] = field(default_factory=list)
    leader_moves: int = 0

    def to_dict(self) -> dict[str, Any]:
        lost = self.scheduled - len(self.e2e_ms)
        e2e = self.e2e_ms + [math.inf] * lost
        unacked = self.scheduled - len(self.ack_ms)
        ack = self.ack_ms + [math.inf] * unacked
        return {
            "method": LATENCY_METHOD,
            "rate_per_s": self.rate,
            "seconds": self.seconds,
            "warmup_s": self.warmup_s,
            "scheduled": self.scheduled,
            "sent": self.sent,
            "received": self.received,
            "lost": lost,
            "dropped": self.dropped,
            "errors": self.errors,
            "error_samples": self.error_samples,
            "leader_moves": self.leader_moves,
            "e2e_p50_ms": _lat(percentile(e2e, 50)),
            "e2e_p99_ms": _lat(percentile(e2e, 99)),
            "e2e_p999_ms": _lat(percentile(e2e, 99.9)),
            "e2e_max_ms": _lat(max(e2e) if e2e else None),
            "ack_p50_ms": _lat(percentile(ack, 50)),
            "ack_p99_ms": _lat(percentile(ack, 99)),
            "ack_p999_ms": _lat(percentile(ack, 99.9)),
            "ack_service_p50_ms": _lat(percentile(self.ack_service_ms, 50)),
            "ack_service_p99_ms": _lat(percentile(self.ack_service_ms, 99)),
            "e2e_histogram_ms": histogram(self.e2e_ms),
            "max_schedule_lag_ms": round(self.max_schedule_lag_ms, 1),
            "client_cpu_s": round(self.client_cpu_s, 2),
            "nodes_cpu_s": None if self.nodes_cpu_s is None else round(self.nodes_cpu_s, 2),
        }


HISTOGRAM_EDGES_MS = (5, 10, 20, 50, 100, 200, 500, 1000, 2000)


def histogram(values: list[float]) -> dict[str, int]:
    """Counts per latency bucket: "<5", "<10", ..., ">=2000" (ms)."""
    out = {f"<{e}": 0 for e in HISTOGRAM_EDGES_MS}
    out[f">={HISTOGRAM_EDGES_MS[-1]}"] = 0
    for v in values:
        key = next((f"<{e}" for e in HISTOGRAM_EDGES_MS if v < e), f">={HISTOGRAM_EDGES_MS[-1]}")
        out[key] += 1
    return out


def _round(v: float | None, digits: int = 2) -> float | None:
    return None if v is None else round(v, digits)


def _lat(v: float | None) -> float | str | None:
    """A latency percentile: "lost" when it falls on records that never arrived."""
    return "lost" if v is not None and math.isinf(v) else _round(v)


# -- a temporary cluster -----------------------------------------------------------------------


def _ports_free(ports: list[int]) -> bool:
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


# The principal of --secure's requests (not a super user).
BENCH_USER = "bench"


@dataclass(frozen=True)
class SecureAccess:
    """What every request of a --secure run carries."""

    context: ssl.SSLContext
    headers: dict[str, str]


class TempCluster:
    """Three nodes from scripts/local_cluster.py's configs, in a temporary directory."""

    def __init__(self, secure: bool = False) -> None:
        sys.path.insert(0, str(SCRIPTS))
        import local_cluster  # a sibling script, not a package

        self.lc = local_cluster
        self.secure = secure
        self.dir = Path(tempfile.mkdtemp(prefix="lograft-bench-"))
        for _ in range(200):
            base = random.randrange(20_000, 40_000, 10)
            ports = [base + n for n in local_cluster.NODES]
            ports += [local_cluster.raft_port(base, n) for n in local_cluster.NODES]
            ports += [local_cluster.controller_port(base, n) for n in local_cluster.NODES]
            if _ports_free(ports):
                break
        else:
            raise RuntimeError("no free port range found for a temporary cluster")
        self.base = base

    @property
    def bootstrap(self) -> str:
        scheme = "https" if self.secure else "http"
        return f"{scheme}://127.0.0.1:{self.lc.http_port(self.base, 1)}"

    def start(self) -> None:
        progress(f"starting a temporary 3-node cluster in {self.dir} (HTTP {self.bootstrap})")
        with contextlib.redirect_stdout(sys.stderr):
            if self.secure:
                self.lc.make_secure_files(self.dir)
            self.lc.write_configs(self.dir, self.base, self.secure)
            for n in self.lc.NODES:
                self.lc.start_node(self.dir, n)
            if not self.lc.wait_ready(self.dir, self.base, self.lc.NODES):
                raise RuntimeError(
                    f"the temporary cluster did not become ready; logs in {self.dir}"
                )

    def pids(self) -> list[int]:
        return [p for n in self.lc.NODES if (p := self.lc.pid_of(self.dir, n)) is not None]

    def grant_bench_user(self) -> SecureAccess:
        """ACLs for User:bench (everything on topics prefixed bench-), made as
        admin, and what bench's requests carry: the CA and bench's token."""
        admin = (self.dir / f"{self.lc.ADMIN}.token").read_text().strip()
        context = ssl.create_default_context(cafile=self.dir / "tls" / "ca.pem")
        body = {
            "acls": [
                {
                    "principal": f"User:{BENCH_USER}",
                    "host": "*",
                    "resource_type": "topic",
                    "resource_name": "bench-",
                    "pattern_type": "prefixed",
                    "operation": "all",
                    "permission": "allow",
                }
            ]
        }
        request = urllib.request.Request(
            f"{self.bootstrap}/v1/acls",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30, context=context) as resp:
            if resp.status not in (200, 201):
                raise RuntimeError(f"POST /v1/acls answered {resp.status}")
        token = self.lc.mint(self.dir, BENCH_USER, 24 * 3600)
        return SecureAccess(context, {"Authorization": f"Bearer {token}"})

    def stop(self, keep: bool) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            self.lc.stop(self.dir)
        if keep:
            progress(f"kept the temporary cluster's data and logs in {self.dir}")
        else:
            subprocess.run(["rm", "-rf", str(self.dir)], check=False)


def cpu_seconds(pids: list[int]) -> float | None:
    """utime + stime of the given processes, from /proc (None if unknown)."""
    if not pids:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, IndexError):
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


@contextlib.contextmanager
def cpu_meter(pids: list[int]) -> Iterator[dict[str, float | None]]:
    out: dict[str, float | None] = {}
    c0, n0 = time.process_time(), cpu_seconds(pids)
    yield out
    n1 = cpu_seconds(pids)
    out["client"] = time.process_time() - c0
    out["nodes"] = None if n0 is None or n1 is None else n1 - n0


# -- talking to the cluster --------------------------------------------------------------------


class Client:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        bootstrap: str,
        topic_configs: dict[str, str] | None = None,
    ) -> None:
        self.session = session
        self.bootstrap = bootstrap.rstrip("/")
        self.urls: dict[int, str] = {}
        # Configs of every topic the benchmark creates (--topic-config).
        self.topic_configs = topic_configs or {}

    async def get_json(self, url: str) -> tuple[int, Any]:
        async with self.session.get(url) as resp:
            return resp.status, await resp.json(loads=orjson.loads, content_type=None)

    async def discover(self) -> None:
        status, doc = await self.get_json(f"{self.bootstrap}/v1/brokers")
        if status != 200:
            raise RuntimeError(f"GET /v1/brokers answered {status}: {doc}")
        self.urls = {b["id"]: b["endpoints"]["http"] for b in doc["brokers"] if not b["fenced"]}
        progress(f"brokers: {self.urls}")

    async def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> dict[int, str]:
        body = {
            "name": name,
            "partitions": partitions,
            "replication_factor": 3,
            "configs": {**self.topic_configs, **(configs or {})},
        }
        async with self.session.post(f"{self.bootstrap}/v1/topics", json=body) as resp:
            if resp.status != 201:
                raise RuntimeError(f"create {name}: {resp.status} {await resp.text()}")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            leaders = await self._serving_leaders(name)
            if leaders is not None:
                return leaders
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no full ISR and serving leaders in {READY_TIMEOUT_S}s")
            await asyncio.sleep(0.1)  # polling readiness with a deadline

    async def _serving_leaders(self, name: str) -> dict[int, str] | None:
        status, doc = await self.get_json(f"{self.bootstrap}/v1/topics/{name}")
        if status != 200:
            return None
        leaders: dict[int, str] = {}
        for p in doc["partitions"]:
            if p["leader"] < 0 or len(p["isr"]) != len(p["replicas"]):
                return None
            url = self.urls.get(p["leader"])
            if url is None:
                return None
            fetch = f"{url}/v1/topics/{name}/partitions/{p['partition']}/records?offset=0"
            async with self.session.get(fetch) as resp:
                if resp.status != 200:
                    return None
            leaders[p["partition"]] = url
        return leaders

    async def describe(self, name: str) -> dict[int, tuple[int, int]]:
        """Per partition: (leader, leader epoch), as the bootstrap node sees them."""
        status, doc = await self.get_json(f"{self.bootstrap}/v1/topics/{name}")
        if status != 200:
            return {}
        return {p["partition"]: (p["leader"], p["leader_epoch"]) for p in doc["partitions"]}

    async def leader_url(self, name: str, partition: int) -> str | None:
        """The partition's current leader, after a refusal or a lost connection."""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            leader, _epoch = (await self.describe(name)).get(partition, (-1, -1))
            if leader >= 0:
                return self.urls.get(leader)
        return None

    async def delete_topic(self, name: str) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self.session.delete(f"{self.bootstrap}/v1/topics/{name}") as resp:
                await resp.read()


async def meter_from(t_measure: float, pids: list[int]) -> tuple[float, float | None]:
    """CPU counters at the start of the counted window (the warm-up is not counted)."""
    await asyncio.sleep(max(0.0, t_measure - time.monotonic()))
    return time.process_time(), cpu_seconds(pids)


# -- produce throughput ------------------------------------------------------------------------


def produce_bodies(
    fmt: str, record_bytes: int, partitions: list[int], request_bytes: int
) -> tuple[dict[int, bytes], int]:
    """A prebuilt request body per partition, and the records each carries."""
    count = max(1, request_bytes // record_bytes)
    rng = random.Random(record_bytes)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(record_bytes))
    bodies: dict[int, bytes] = {}
    for p in partitions:
        if fmt == "raw":
            recs = [RecordInput(text.encode()) for _ in range(count)]
            bodies[p] = build_batch(recs, timestamp_ms=int(time.time() * 1000))
        else:
            doc = {
                "value_format": "string",
                "records": [{"value": text, "partition": p} for _ in range(count)],
            }
            bodies[p] = orjson.dumps(doc)
    return bodies, count


async def produce_case(
    client: Client,
    topic: str,
    leaders: dict[int, str],
    result: Throughput,
    args: argparse.Namespace,
    pids: list[int],
) -> Throughput:
    bodies, per_request = produce_bodies(
        result.fmt, result.record_bytes, sorted(leaders), args.request_bytes
    )
    t_start = time.monotonic()
    t_measure = t_start + args.warmup
    t_end = t_measure + args.seconds

    async def worker(p: int) -> None:
        body = bodies[p]
        leader = leaders[p]
        if result.fmt == "raw":
            path = f"/v1/topics/{topic}/partitions/{p}/batches?acks={result.acks}"
            headers = {"Content-Type": BATCH_TYPE}
        else:
            path = f"/v1/topics/{topic}/records?acks={result.acks}"
            headers = {"Content-Type": "application/json"}
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            status = 0
            try:
                async with client.session.post(leader + path, data=body, headers=headers) as resp:
                    answer = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                answer = repr(exc).encode()
            t1 = time.monotonic()
            if status != 200:
                # A leader moved (or is moving): follow it, as a client would.
                leader = await client.leader_url(topic, p) or leader
                await asyncio.sleep(ERROR_BACKOFF_S)
            if t1 < t_measure or t1 > t_end:
                continue
            result.requests += 1
            if status != 200:
                result.note_error(status, answer)
                continue
            result.records += per_request
            result.value_bytes += per_request * result.record_bytes
            result.wire_bytes += len(body)
            result.latencies_ms.append((t1 - t0) * 1000)

    metering = asyncio.create_task(meter_from(t_measure, pids))
    await asyncio.gather(*(worker(p) for p in leaders for _ in range(args.inflight)))
    client0, nodes0 = await metering
    nodes1 = cpu_seconds(pids)
    result.seconds = args.seconds
    result.client_cpu_s = time.process_time() - client0
    result.nodes_cpu_s = None if nodes0 is None or nodes1 is None else nodes1 - nodes0
    return result


# -- fetch throughput --------------------------------------------------------------------------


async def fetch_case(
    client: Client,
    topic: str,
    leaders: dict[int, str],
    result: Throughput,
    args: argparse.Namespace,
    pids: list[int],
) -> Throughput:
    t_measure = time.monotonic() + args.warmup
    t_end = t_measure + args.seconds

    async def reader(p: int) -> None:
        offset = 0
        leader = leaders[p]
        while time.monotonic() < t_end:
            base = f"{leader}/v1/topics/{topic}/partitions/{p}/records"
            t0 = time.monotonic()
            raw = result.fmt == "raw"
            url = f"{base}?offset={offset}&max_bytes={FETCH_MAX_BYTES}"
            url += "" if raw else "&max_records=10000"
            status = 0
            try:
                async with client.session.get(
                    url, headers={"Accept": BATCH_TYPE} if raw else {}
                ) as resp:
                    data = await resp.read()
                    status = resp.status
                    headers = resp.headers
            except (aiohttp.ClientError, TimeoutError) as exc:
                data = repr(exc).encode()
            t1 = time.monotonic()
            counted = t_measure <= t1 <= t_end  # answers of the warm-up are not counted
            if status != 200:
                if counted:
                    result.note_error(status, data)
                leader = await client.leader_url(topic, p) or leader
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            if raw:
                hw = int(headers["X-Lograft-High-Watermark"])
                nxt = int(headers["X-Lograft-Next-Offset"])
                count = 0
                for _pos, h in iter_batches(data):
                    # A batch may start before `offset` (count only what is new).
                    count += h.records_count - max(0, offset - h.base_offset)
            else:
                doc = orjson.loads(data)
                count, hw, nxt = len(doc["records"]), doc["high_watermark"], doc["next_offset"]
            offset = 0 if nxt >= hw else nxt  # over again from the start
            if not counted:
                continue
            result.requests += 1
            result.records += count
            result.value_bytes += count * result.record_bytes
            result.wire_bytes += len(data)
            result.latencies_ms.append((t1 - t0) * 1000)

    metering = asyncio.create_task(meter_from(t_measure, pids))
    await asyncio.gather(*(reader(p) for p in leaders))
    client0, nodes0 = await metering
    nodes1 = cpu_seconds(pids)
    result.seconds = args.seconds
    result.client_cpu_s = time.process_time() - client0
    result.nodes_cpu_s = None if nodes0 is None or nodes1 is None else nodes1 - nodes0
    return result


# -- produce-to-consume latency ----------------------------------------------------------------


async def latency_case(
    client: Client, topic: str, leader: str, rate: int, args: argparse.Namespace, pids: list[int]
) -> Latency:
    """Open loop on a fixed schedule, latency from each record's scheduled send time.

    Record i is due at t0 + i / rate. Its value carries that scheduled time,
    not the moment it actually went out, so a send that is late (the loop
    was busy, or `LATENCY_INFLIGHT_MAX` requests were already waiting) counts
    its lateness as latency: coordinated omission corrected as wrk2 and
    HdrHistogram do. A late producer catches up by sending the overdue
    records at once. Records due in the first `--warmup` s are sent but not
    counted. A counted record that never reaches the consumer (its produce
    failed, it was never sent before the drain deadline, or the consumer did
    not see it) counts as infinitely late in the percentiles ("lost")."""
    warmup = int(rate * args.warmup)
    total = warmup + int(rate * args.latency_seconds)
    result = Latency(rate, args.latency_seconds, args.warmup, scheduled=total - warmup)
    padding = b"x" * (100 - 8)
    produce_path = f"/v1/topics/{topic}/partitions/0/batches?acks=all"
    fetch_path = f"/v1/topics/{topic}/partitions/0/records"
    current = {"leader": leader}  # followed when it moves
    refreshing: list[asyncio.Task[None]] = []

    async def refresh() -> None:
        current["leader"] = await client.leader_url(topic, 0) or current["leader"]

    def follow_leader() -> None:
        if not refreshing or refreshing[-1].done():
            refreshing.append(asyncio.create_task(refresh()))

    inflight: set[asyncio.Task[None]] = set()
    slots = asyncio.Semaphore(LATENCY_INFLIGHT_MAX)
    t0_ns = time.monotonic_ns()
    interval_ns = 1_000_000_000 / rate
    counted_from_ns = t0_ns + int(warmup * interval_ns)
    # Past this, records not yet sent are dropped (reported, and lost in the percentiles).
    send_deadline_ns = t0_ns + int(total * interval_ns) + int(LATENCY_DRAIN_S * 1e9)
    done_sending = asyncio.Event()
    tally = {"sent": 0, "errors": 0}  # warm-up included: when the consumer has seen all

    async def send(due_ns: int) -> None:
        value = due_ns.to_bytes(8, "big") + padding
        data = build_batch([RecordInput(value)], timestamp_ms=int(time.time() * 1000))
        sent_ns = time.monotonic_ns()
        try:
            async with client.session.post(
                current["leader"] + produce_path, data=data, headers={"Content-Type": BATCH_TYPE}
            ) as resp:
                answer = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            answer, status = repr(exc).encode(), 0
        finally:
            slots.release()
        counted = due_ns >= counted_from_ns
        if status != 200:
            tally["errors"] += 1
            result.errors += counted
            if len(result.error_samples) < 3:
                result.error_samples.append(f"{status}: {answer[:300].decode(errors='replace')}")
            follow_leader()
        elif counted:
            now = time.monotonic_ns()
            result.ack_ms.append((now - due_ns) / 1e6)
            result.ack_service_ms.append((now - sent_ns) / 1e6)

    async def producer() -> None:
        for i in range(total):
            due = t0_ns + int(i * interval_ns)
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)  # the fixed-rate schedule
            await slots.acquire()  # a full pipeline delays the send; the delay is latency
            now = time.monotonic_ns()
            if now > send_deadline_ns:
                slots.release()
                result.dropped = total - max(i, warmup)
                break
            result.max_schedule_lag_ms = max(result.max_schedule_lag_ms, (now - due) / 1e6)
            task = asyncio.create_task(send(due))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
            tally["sent"] += 1
            result.sent += i >= warmup
        if inflight:
            await asyncio.gather(*list(inflight))
        done_sending.set()

    async def consumer() -> None:
        offset = 0
        drain_deadline: float | None = None
        received = 0
        while True:
            if done_sending.is_set():
                if received >= tally["sent"] - tally["errors"]:
                    return
                drain_deadline = drain_deadline or time.monotonic() + LATENCY_DRAIN_S
                if time.monotonic() > drain_deadline:
                    return
            url = (
                f"{current['leader']}{fetch_path}?offset={offset}"
                f"&max_wait_ms={LATENCY_WAIT_MS}&max_bytes=1048576"
            )
            status = 0
            try:
                async with client.session.get(url, headers={"Accept": BATCH_TYPE}) as resp:
                    data = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError):
                pass
            now = time.monotonic_ns()
            if status != 200:
                follow_leader()
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            for rec in iter_records(data):
                if rec.offset < offset or rec.value is None:
                    continue
                due = int.from_bytes(rec.value[:8], "big")
                received += 1
                if due >= counted_from_ns:
                    result.received += 1
                    result.e2e_ms.append((now - due) / 1e6)
                offset = rec.offset + 1

    before = await client.describe(topic)
    metering = asyncio.create_task(meter_from(counted_from_ns / 1e9, pids))
    await asyncio.gather(producer(), consumer())
    client0, nodes0 = await metering
    nodes1 = cpu_seconds(pids)
    result.leader_moves = moves(before, await client.describe(topic))
    result.client_cpu_s = time.process_time() - client0
    result.nodes_cpu_s = None if nodes0 is None or nodes1 is None else nodes1 - nodes0
    return result


# -- the run -----------------------------------------------------------------------------------


def moves(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> int:
    """Leader elections between two describes (leader epoch increments)."""
    return sum(after[p][1] - before[p][1] for p in before if p in after)


def machine() -> dict[str, Any]:
    model = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    commit = "?"
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=SCRIPTS,
        ).stdout.strip()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "ram": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "git": commit,
    }


async def run(
    args: argparse.Namespace, pids: list[int], access: SecureAccess | None = None
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=0, ssl=access.context if access else True)
    run_id = uuid.uuid4().hex[:6]
    topics: list[str] = []
    out: dict[str, Any] = {"produce": [], "fetch": [], "latency": []}
    headers = access.headers if access else None
    async with aiohttp.ClientSession(
        timeout=timeout, connector=connector, headers=headers
    ) as session:
        client = Client(session, args.bootstrap, dict(args.topic_config))
        await client.discover()

        async def topic(
            name: str, partitions: int, configs: dict[str, str] | None = None
        ) -> dict[int, str]:
            full = f"bench-{run_id}-{name}"
            topics.append(full)
            return await client.create_topic(full, partitions, configs)

        try:
            fetch_sources: dict[int, tuple[str, dict[int, str]]] = {}
            if "produce" in args.only:
                for fmt in ("json", "raw"):
                    for size in RECORD_SIZES:
                        for acks in ("1", "all"):
                            name = f"{fmt}-{size}-acks{acks}"
                            leaders = await topic(name, args.partitions)
                            case = Throughput("produce", fmt, size, acks)
                            progress(f"{case.name}: {args.warmup}+{args.seconds} s ...")
                            before = await client.describe(topics[-1])
                            await produce_case(client, topics[-1], leaders, case, args, pids)
                            case.leader_moves = moves(before, await client.describe(topics[-1]))
                            d = case.to_dict()
                            progress(
                                f"{case.name}: {d['records_per_s']:,.0f} records/s, "
                                f"{d['mb_per_s']} MB/s, p99 {d['request_p99_ms']} ms, "
                                f"errors {case.errors}"
                            )
                            out["produce"].append(d)
                            if fmt == "raw" and acks == "1":
                                fetch_sources[size] = (topics[-1], leaders)
            if "fetch" in args.only and fetch_sources:
                for fmt in ("json", "raw"):
                    for size in RECORD_SIZES:
                        source, leaders = fetch_sources[size]
                        case = Throughput("fetch", fmt, size, "-")
                        progress(f"{case.name}: {args.warmup}+{args.seconds} s ...")
                        before = await client.describe(source)
                        await fetch_case(client, source, leaders, case, args, pids)
                        case.leader_moves = moves(before, await client.describe(source))
                        d = case.to_dict()
                        rate = f"{d['records_per_s']:,.0f} records/s, {d['mb_per_s']} MB/s"
                        progress(f"{case.name}: {rate}")
                        out["fetch"].append(d)
            if "flush" in args.only:
                out["flush"] = []
                for round_no in range(args.flush_rounds):
                    for size in RECORD_SIZES:
                        for policy in args.flush_policies:
                            name = f"flush-{policy.replace('_', '-')}-{size}-r{round_no}"
                            configs = {"flush_policy": policy}
                            leaders = await topic(name, args.partitions, configs)
                            case = Throughput("produce", "raw", size, "all", flush_policy=policy)
                            progress(f"{case.name}: {args.warmup}+{args.seconds} s ...")
                            before = await client.describe(topics[-1])
                            await produce_case(client, topics[-1], leaders, case, args, pids)
                            case.leader_moves = moves(before, await client.describe(topics[-1]))
                            d = case.to_dict()
                            d["round"] = round_no
                            progress(
                                f"{case.name}: {d['records_per_s']:,.0f} records/s, "
                                f"p99 {d['request_p99_ms']} ms, errors {case.errors}"
                            )
                            out["flush"].append(d)
                for rate in args.latency_rate:
                    for policy in args.flush_policies:
                        name = f"flush-latency-{policy.replace('_', '-')}-{rate}"
                        leaders = await topic(name, 1, {"flush_policy": policy})
                        progress(
                            f"latency {policy}: {rate} records/s for "
                            f"{args.warmup}+{args.latency_seconds} s ..."
                        )
                        lat = await latency_case(client, topics[-1], leaders[0], rate, args, pids)
                        out["latency"].append({**lat.to_dict(), "flush_policy": policy})
                        progress(f"latency {policy}: {out['latency'][-1]}")
            if "latency" in args.only:
                for rate in args.latency_rate:
                    leaders = await topic(f"latency-{rate}", 1)
                    progress(
                        f"latency: {rate} records/s for {args.warmup}+{args.latency_seconds} s ..."
                    )
                    lat = await latency_case(client, topics[-1], leaders[0], rate, args, pids)
                    out["latency"].append(lat.to_dict())
                    progress(f"latency: {out['latency'][-1]}")
        finally:
            if not args.keep_topics:
                for name in topics:
                    await client.delete_topic(name)
    return out


def render_table(doc: dict[str, Any]) -> str:
    lines = [
        "lograft cluster benchmark (HTTP API; MB = 10^6 bytes of record values)",
        f"command: {doc['command']}",
        "machine: {cpu}, {cores} cores, RAM {ram}, CPython {python}, kernel {kernel}, "
        "git {git}".format(**doc["machine"]),
        f"cluster: {doc['cluster']}",
        f"load average (1/5/15 min): start {doc['load_start']}, end {doc['load_end']}",
        f"wall time: {doc['wall_s']:.0f} s",
        "",
    ]
    header = (
        f"{'case':<42}{'records/s':>12}{'MB/s':>9}{'wire MB/s':>11}{'req p50 ms':>12}"
        f"{'req p99 ms':>12}{'errors':>8}{'moves':>7}{'client CPU':>12}{'nodes CPU':>11}"
    )
    rows = [*doc["results"]["produce"], *doc["results"]["fetch"], *doc["results"].get("flush", [])]
    if rows:
        lines += [
            f"req p50/p99: {THROUGHPUT_LATENCY_METHOD}",
            "CPU: seconds used during the counted window per second of it, as % of one core",
            "(client: this process; nodes: the three node processes together, --start only);",
            "moves: leader elections in the case's topic while it ran (leader epoch increments)",
            "",
            header,
            "-" * len(header),
        ]
        for r in rows:
            nodes = (
                "-" if r["nodes_cpu_s"] is None else f"{100 * r['nodes_cpu_s'] / r['seconds']:.0f}%"
            )
            lines.append(
                f"{r['case']:<42}{r['records_per_s']:>12,.0f}{r['mb_per_s']:>9.2f}"
                f"{r['wire_mb_per_s']:>11.2f}{_fmt(r['request_p50_ms']):>12}"
                f"{_fmt(r['request_p99_ms']):>12}{r['errors']:>8}{r['leader_moves']:>7}"
                f"{100 * r['client_cpu_s'] / r['seconds']:>11.0f}%{nodes:>11}"
            )
    for lat in doc["results"]["latency"]:
        lines += [
            "",
            f"produce-to-consume latency: {lat['rate_per_s']} records/s for {lat['seconds']} s "
            + (f"[flush_policy {lat['flush_policy']}] " if "flush_policy" in lat else "")
            + f"after {lat['warmup_s']} s of warm-up "
            f"(raw one-record batches, acks=all, raw long-poll consumer)",
            f"  measured: {lat['method']}",
            f"  counted records: scheduled {lat['scheduled']}, sent {lat['sent']}, "
            f"received {lat['received']}, lost {lat['lost']} (of which never sent "
            f"{lat['dropped']}, produce errors {lat['errors']}), "
            f"leader moves {lat['leader_moves']}, "
            f"max send lag behind schedule {lat['max_schedule_lag_ms']} ms",
            f"  end to end ms: p50 {_fmt(lat['e2e_p50_ms'])}  p99 {_fmt(lat['e2e_p99_ms'])}  "
            f"p99.9 {_fmt(lat['e2e_p999_ms'])}  max {_fmt(lat['e2e_max_ms'])}",
            "  end to end histogram: "
            + ", ".join(f"{k} ms: {n}" for k, n in lat["e2e_histogram_ms"].items() if n),
            f"  produce ack ms (from scheduled time): p50 {_fmt(lat['ack_p50_ms'])}  "
            f"p99 {_fmt(lat['ack_p99_ms'])}  p99.9 {_fmt(lat['ack_p999_ms'])}",
            f"  produce ack ms (service time, from the actual send; not latency at the rate): "
            f"p50 {_fmt(lat['ack_service_p50_ms'])}  p99 {_fmt(lat['ack_service_p99_ms'])}",
            f"  cpu: client {lat['client_cpu_s']} s, nodes "
            f"{'-' if lat['nodes_cpu_s'] is None else str(lat['nodes_cpu_s']) + ' s'}",
        ]
    return "\n".join(lines)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _fmt(v: float | str | None) -> str:
    if isinstance(v, str):  # "lost": the percentile falls on records that never arrived
        return v
    return "-" if v is None else f"{v:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default="http://127.0.0.1:9091", help="any node's HTTP URL")
    ap.add_argument("--start", action="store_true", help="start (and stop) a temporary cluster")
    ap.add_argument("--keep", action="store_true", help="with --start: keep its directory")
    ap.add_argument(
        "--secure",
        action="store_true",
        help="with --start: TLS, bearer authentication and ACLs on (see above)",
    )
    ap.add_argument("--keep-topics", action="store_true", help="do not delete the bench topics")
    ap.add_argument("--partitions", type=int, default=3, help="partitions per throughput topic")
    ap.add_argument("--seconds", type=float, default=10.0, help="counted seconds per case")
    ap.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="uncounted seconds before every produce, fetch and latency case",
    )
    ap.add_argument("--inflight", type=int, default=4, help="produce requests per partition")
    ap.add_argument(
        "--request-bytes", type=int, default=65536, help="record values per produce request"
    )
    ap.add_argument(
        "--latency-rate",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[500],
        help="records/s; a comma-separated list runs one test per rate",
    )
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument(
        "--only",
        default="produce,fetch,latency",
        type=lambda s: set(s.split(",")),
        help="comma-separated subset of produce,fetch,latency,flush (fetch needs produce); "
        "flush is not in the default",
    )
    ap.add_argument(
        "--flush-policies",
        type=lambda s: s.split(","),
        default=["none", "group_commit"],
        help="with --only flush: the flush_policy of each topic compared (default "
        "none,group_commit)",
    )
    ap.add_argument(
        "--flush-rounds", type=int, default=1, help="with --only flush: rounds of turns"
    )
    ap.add_argument(
        "--topic-config",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="a config of every topic the benchmark creates, e.g. flush_policy=every_batch "
        "(repeatable)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--save-json", type=Path, help="also write the JSON object to this file")
    args = ap.parse_args()
    if args.secure and not args.start:
        ap.error("--secure needs --start (it makes the cluster's CA, tokens and ACLs)")

    temp: TempCluster | None = None
    access: SecureAccess | None = None
    started = time.monotonic()
    load_start = "/".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        if args.start:
            temp = TempCluster(args.secure)
            temp.start()
            args.bootstrap = temp.bootstrap
            if args.secure:
                access = temp.grant_bench_user()
        pids = temp.pids() if temp is not None else []
        results = asyncio.run(run(args, pids, access))
    finally:
        if temp is not None:
            temp.stop(args.keep)
    doc = {
        "command": shlex.join([".venv/bin/python", "scripts/bench.py", *sys.argv[1:]]),
        "machine": machine(),
        "cluster": (
            "temporary 3 nodes (controller+broker each) on 127.0.0.1, local_cluster.py configs"
            + (" with --secure (TLS, bearer auth as User:bench, ACLs)" if args.secure else "")
            if args.start
            else f"running cluster at {args.bootstrap}"
        ),
        "settings": {
            k: sorted(v) if isinstance(v, set) else v
            for k, v in vars(args).items()
            if k not in ("json", "save_json")
        },
        "load_start": load_start,
        "load_end": "/".join(f"{x:.2f}" for x in os.getloadavg()),
        "wall_s": time.monotonic() - started,
        "results": results,
    }
    if args.save_json is not None:
        args.save_json.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if args.json else render_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
