#!/usr/bin/env python3
"""Where TLS costs CPU on the raw produce path: the nodes' (and the client's)
CPU per record, split by the layer that spends it.

Starts the clusters of `--sides` (default plain and secure, as
scripts/bench_security.py makes them) with scripts/tls_probe/sitecustomize.py
loaded into every node, and runs bench_security.py's raw produce case
(acks=all, 100 B values, about 64 KiB of values per request, 4 requests in
flight per partition, 3 partitions with one leader per broker, replication
factor 3) against each, rounds alternating which side goes first. The probe
counts, per process, the calls, bytes and thread CPU time of:

- `ssl_read` / `ssl_write`: `ssl.SSLObject.read` / `.write`, OpenSSL's record
  layer: decrypting and encrypting (AES-GCM) plus copying records in and out
  of the memory BIOs asyncio feeds it;
- `tls_read`: asyncio sslproto's `buffer_updated`, all it does for one socket
  read: the copy into the incoming BIO, the `SSLObject.read` loop (one call
  per TLS record and one more that finds no record), joining the pieces, and
  the HTTP parsing it hands them to (`http_in`);
- `tls_write`: sslproto's transport `write`, all one application write
  costs: `SSLObject.write`, reading the outgoing BIO, and the socket send
  (`sock_write`);
- `sock_read`: a readable socket, everything that read leads to;
- `http_in`: aiohttp's `data_received` (HTTP parsing and what it runs).

The table gives each per record (microseconds of CPU per produced record, the
three nodes together, and the client apart) and the "rest" each layer spends
outside the parts it calls: sslproto's own Python and BIO copies. Counting
costs two `time.thread_time` calls and a wrapper per counted call: measured
at start (printed) and taken out of every figure, "probe" shows how much
(the process CPU is given without it); compare sides, not runs.

    .venv/bin/python scripts/bench_tls_cost.py [--sides plain,secure] [--rounds 2] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # a sibling script
import bench_security

PROBE_DIR = Path(__file__).resolve().parent / "tls_probe"
sys.path.insert(0, str(PROBE_DIR))

import sitecustomize as probe  # noqa: E402  (scripts/tls_probe, on the path above)

# Counters the table shows, per record.
PARTS = ("ssl_read", "ssl_write", "tls_read", "tls_write", "sock_read", "sock_write", "http_in")


def read_counters(directory: Path, pids: list[int]) -> dict[int, dict[str, float]]:
    out = {}
    for pid in pids:
        path = directory / f"{pid}.json"
        out[pid] = json.loads(path.read_text()) if path.exists() else {}
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


# The counted calls each counted call contains (what its time includes).
CHILDREN = {
    "tls_read": ("ssl_read", "http_in"),
    "tls_write": ("ssl_write", "sock_write"),
}


def breakdown(d: dict[str, float], records: int, cost: Calibration) -> dict[str, float]:
    """Microseconds per record of each part, the probe's own cost taken out,
    and the rests (what a layer spends outside the counted parts it calls)."""

    def n(key: str) -> float:
        return d.get(key + ".n", 0.0)

    def own(key: str) -> float:
        # Less the probe: its clock read inside this call's interval, and the
        # whole wrapper of each counted call inside.
        if key == "sock_read":  # a read leads to the TLS layer, or straight to HTTP
            inner = n("tls_read") + n("ssl_read") + n("http_in")
        else:
            inner = sum(n(child) for child in CHILDREN.get(key, ()))
        seconds = d.get(key + ".s", 0.0) - n(key) * cost.inside_s - inner * cost.call_s
        return max(0.0, seconds) * 1e6 / records

    out = {part: own(part) for part in PARTS}
    counted = sum(n(k) for k in PARTS)
    out["probe"] = counted * cost.call_s * 1e6 / records
    out["process"] = d.get("process_cpu_s", 0.0) * 1e6 / records - out["probe"]
    out["tls_read_rest"] = (
        (out["tls_read"] - out["ssl_read"] - out["http_in"]) if n("tls_read") else 0.0
    )
    out["tls_write_rest"] = (
        (out["tls_write"] - out["ssl_write"] - out["sock_write"]) if n("tls_write") else 0.0
    )
    out["tls_total"] = (
        out["ssl_read"] + out["ssl_write"] + out["tls_read_rest"] + out["tls_write_rest"]
    )
    return out


def per_request(d: dict[str, float], requests: int) -> dict[str, float]:
    """Calls per produce request."""
    return {
        part: round(d.get(part + ".n", 0.0) / requests, 2)
        for part in ("ssl_read", "ssl_write", "tls_read", "sock_read", "sock_write")
    }


@dataclass(frozen=True)
class Calibration:
    """What counting costs: a whole counted call's wrapper (`call_s`), and the
    part of it that falls inside the interval it measures (`inside_s`), s."""

    call_s: float
    inside_s: float


def calibrate() -> Calibration:
    """Count an empty method many times, measured from outside and inside."""

    class Empty:
        def call(self) -> None:
            return None

    calls = 50_000
    empty = Empty()
    t0 = time.thread_time()
    for _ in range(calls):
        empty.call()
    bare = time.thread_time() - t0
    probe.wrap(Empty, "call", "calibration")
    t0 = time.thread_time()
    for _ in range(calls):
        empty.call()
    counted = time.thread_time() - t0
    inside = probe.counters.pop("calibration")[1]
    return Calibration(call_s=(counted - bare) / calls, inside_s=inside / calls)


async def mark(
    after_s: float, directory: Path, pids: list[int]
) -> tuple[dict[int, dict[str, float]], dict[str, float]]:
    """The counters at the start of the counted window (after the warm-up)."""
    await asyncio.sleep(after_s)
    return read_counters(directory, pids), probe.snapshot()


async def run(
    cost: Calibration,
    args: argparse.Namespace,
    clusters: dict[str, bench_security.VariantCluster],
    directory: Path,
) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    rows: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        sides = [
            await stack.enter_async_context(bench_security.side(n, c)) for n, c in clusters.items()
        ]
        topics = {}
        for s in sides:
            name = f"bench-{run_id}-raw"
            topics[s.name] = (name, await s.admin.create_topic(name, args.partitions))
            await bench_security.grant(s, name, ("write", "describe"))
        for round_no in range(args.rounds):
            order = sides if round_no % 2 == 0 else sides[::-1]
            for s in order:
                name, leaders = topics[s.name]
                pids = s.cluster.pids()
                case = bench.Throughput("produce", "raw", args.record_bytes, "all")
                bench.progress(f"{s.name} r{round_no}: ...")

                marking = asyncio.create_task(mark(args.warmup, directory, pids))
                await bench.produce_case(s.user, name, leaders, case, args, pids)
                nodes0, client0 = await marking
                nodes1, client1 = read_counters(directory, pids), probe.snapshot()
                nodes: dict[str, float] = {}
                for pid in pids:
                    for k, v in delta(nodes1[pid], nodes0[pid]).items():
                        nodes[k] = nodes.get(k, 0.0) + v
                row = {
                    "side": s.name,
                    "round": round_no,
                    "records_per_s": case.records / args.seconds,
                    "records": case.records,
                    "requests": case.requests,
                    "nodes": breakdown(nodes, case.records, cost),
                    "client": breakdown(delta(client1, client0), case.records, cost),
                    "nodes_calls_per_request": per_request(nodes, case.requests),
                }
                bench.progress(
                    f"{s.name} r{round_no}: {row['records_per_s']:,.0f} records/s, nodes "
                    f"{row['nodes']['process']:.2f} us/record, TLS {row['nodes']['tls_total']:.2f}"
                )
                rows.append(row)
    return {"rows": rows}


def render(doc: dict[str, Any]) -> str:
    lines = [
        "lograft: where TLS costs CPU on the raw produce path (acks=all, 100 B values)",
        f"command: {doc['command']}",
        "machine: {cpu}, {cores} cores, RAM {ram}, CPython {python}, kernel {kernel}, "
        "git {git}".format(**doc["machine"]),
        f"load average (1/5/15 min): start {doc['load_start']}, end {doc['load_end']}",
        f"probe: {doc['probe_call_us']:.2f} us per counted call "
        f"({doc['probe_inside_us']:.2f} us of it inside the interval), taken out below",
        "",
        "CPU microseconds per record, medians over the rounds (nodes: the three together)",
    ]
    columns = (
        ("process", "process"),
        ("ssl_read", "SSL read"),
        ("ssl_write", "SSL write"),
        ("tls_read_rest", "sslproto rd"),
        ("tls_write_rest", "sslproto wr"),
        ("tls_total", "TLS total"),
        ("http_in", "http in"),
        ("sock_read", "sock read"),
        ("sock_write", "sock send"),
        ("probe", "probe"),
    )
    header = f"{'side':<8}{'who':<8}{'records/s':>11}" + "".join(f"{t:>12}" for _, t in columns)
    lines.append(header)
    by_side: dict[str, list[dict[str, Any]]] = {}
    for row in doc["results"]["rows"]:
        by_side.setdefault(row["side"], []).append(row)
    for side, rows in by_side.items():
        rate = _median([r["records_per_s"] for r in rows])
        for who in ("nodes", "client"):
            cells = "".join(f"{_median([r[who][k] for r in rows]):>12.3f}" for k, _ in columns)
            lines.append(f"{side:<8}{who:<8}{rate:>11,.0f}{cells}")
    lines.append("")
    lines.append("calls per produce request, nodes together (medians)")
    for side, rows in by_side.items():
        keys = rows[0]["nodes_calls_per_request"]
        calls = ", ".join(
            f"{k} {_median([r['nodes_calls_per_request'][k] for r in rows]):.2f}" for k in keys
        )
        lines.append(f"{side:<8}{calls}")
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sides", type=lambda s: s.split(","), default=["plain", "secure"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--request-bytes", type=int, default=65536)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args()
    unknown = [s for s in args.sides if s not in bench_security.VARIANTS]
    if unknown:
        ap.error(f"--sides: unknown {', '.join(unknown)}")
    load_start = "/".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="lograft-tls-probe-") as tmp:
        directory = Path(tmp)
        # The nodes (started below) load the probe; so does this process.
        os.environ[probe.ENV] = str(directory)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROBE_DIR), os.environ.get("PYTHONPATH")) if p
        )
        cost = calibrate()
        probe.install(None)
        clusters: dict[str, bench_security.VariantCluster] = {}
        try:
            for name in args.sides:
                clusters[name] = bench_security.VariantCluster(name)
                clusters[name].start()
            results = asyncio.run(run(cost, args, clusters, directory))
        finally:
            for cluster in clusters.values():
                cluster.stop(False)
    doc = {
        "command": shlex.join([".venv/bin/python", "scripts/bench_tls_cost.py", *sys.argv[1:]]),
        "machine": bench.machine(),
        "load_start": load_start,
        "load_end": "/".join(f"{x:.2f}" for x in os.getloadavg()),
        "probe_call_us": round(cost.call_s * 1e6, 3),
        "probe_inside_us": round(cost.inside_s * 1e6, 3),
        "results": results,
    }
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
