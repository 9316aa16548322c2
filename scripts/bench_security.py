#!/usr/bin/env python3
"""What security costs produce: the same loads against a plain and a secure cluster, one run.

Starts two temporary three-node clusters side by side (scripts/bench.py's
`TempCluster`, scripts/local_cluster.py's configs, free ports, stopped by pid
at the end):

- plain: http, no authentication, no authorization (the local quick start);
- secure: as `scripts/cluster.sh start --secure` makes it: https on every
  listener and node-to-node link (a local CA, lograft/security/local_ca.py),
  bearer tokens checked against a local JWKS (ES256,
  lograft/security/dev_tokens.py), authorization on. The benchmark's
  principal, `User:bench`, is NOT a super user: ACLs give it WRITE and
  DESCRIBE on each throughput topic and READ on the latency topic (literal),
  and `--unrelated-acls` other bindings (other principals, literal and
  prefixed topics, groups) sit in the authorizer beside them. Topics are
  created by `User:admin` (the super user).

Then, against both, scripts/bench.py's cases with the same settings:

1. Produce throughput, raw batches and JSON requests, acks=all, values of
   `--record-bytes` (default 100 B), about `--request-bytes` per request,
   `--inflight` requests per partition in flight, `--partitions` partitions
   (one leader per broker), replication factor 3: `--warmup` s uncounted and
   `--seconds` s counted per case. Rounds (`--rounds`) alternate which side
   goes first; records/s, MB/s and request p50/p99 (closed-loop service time)
   per case and round, then the secure/plain ratio of the records of all
   rounds.
2. Produce-to-consume latency at `--latency-rate` records/s for
   `--latency-seconds` (open loop, one-record raw batches, acks=all, each
   record stamped with its scheduled send time: coordinated omission
   corrected, as scripts/bench.py case 3), once per side.

The client (this process) speaks TLS and sends its token on the secure side,
as a real client would: its CPU is in the figures, on the same cores as the
nodes.

    .venv/bin/python scripts/bench_security.py [--rounds 3] [--seconds 10] [--json]
    .venv/bin/python scripts/bench_security.py --sides plain,tls,auth,secure

`--sides` picks the clusters compared (the first is the baseline of the
ratios): plain, tls (only [tls]), auth (only bearer tokens and ACLs, over
http), secure (both); `NAME@uvloop` runs that cluster's nodes with
`event_loop = "uvloop"` (lograft/node/event_loop.py), e.g.
`--sides plain,secure,plain@uvloop,secure@uvloop`; with more than one loop
the table adds each side's ratio over the first side on its own loop.
`--render FILE` prints the table of a `--save-json` file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import ssl
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # a sibling script
import local_cluster

from lograft.security.dev_tokens import DEV_AUDIENCE, DEV_ISSUER, DevIssuer
from lograft.security.local_ca import make_local_certificates

FORMATS = ("raw", "json")
BENCH_USER = "bench"
# Lifetime of the benchmark's tokens, s: longer than any run.
TOKEN_LIFETIME_S = 4 * 3600
# How long an ACL may take to reach every node's authorizer, s.
ACL_PROPAGATION_S = 30.0
# Unrelated bindings per POST /v1/acls (one metadata batch each).
ACLS_PER_REQUEST = 100


# What each side turns on: TLS ([tls] on every listener and node link), and
# authentication (bearer tokens) with authorization (ACLs).
VARIANTS = {
    "plain": (False, False),
    "tls": (True, False),
    "auth": (False, True),
    "secure": (True, True),
}


class VariantCluster(bench.TempCluster):
    """A temporary cluster with the security of one variant: "secure" is what
    `scripts/cluster.sh start --secure` runs (its very config sections);
    "tls" keeps only its [tls]; "auth" only bearer tokens and ACLs, over http."""

    def __init__(self, side: str) -> None:
        variant, _, loop = side.partition("@")
        self.tls, self.auth = VARIANTS[variant]
        super().__init__(secure=self.tls)
        self.variant = variant
        self.event_loop = loop or "asyncio"

    def start(self) -> None:
        lc = local_cluster
        bench.progress(f"starting the {self.variant} cluster in {self.dir} ({self.bootstrap})")
        with contextlib.redirect_stdout(sys.stderr):
            if self.variant == "secure":
                lc.make_secure_files(self.dir)
            if self.tls:
                names = [f"node-{n}" for n in lc.NODES]
                make_local_certificates(self.dir / "tls", nodes=names)
            if self.auth:
                DevIssuer.create_or_load(self.dir / "issuer")
            lc.write_configs(self.dir, self.base, secure=False)
            sections = self.sections()
            loop = f'event_loop = "{self.event_loop}"\n'  # top level: before any table
            for n in lc.NODES:
                config = self.dir / f"node-{n}.toml"
                text = config.read_text() + sections.replace("NODE", f"node-{n}")
                config.write_text(loop + text)
            for n in lc.NODES:
                lc.start_node(self.dir, n)
            if not lc.wait_ready(self.dir, self.base, lc.NODES):
                raise RuntimeError(f"the {self.variant} cluster did not become ready: {self.dir}")

    def sections(self) -> str:
        secure = local_cluster.secure_sections(self.dir)
        if self.variant == "secure":
            return secure
        tls, _, _security = secure.partition("\n[security]\n")
        if self.variant == "tls":
            return tls
        if self.variant == "auth":
            issuer = self.dir / "issuer"
            return (
                "\n[security]\n"
                'authentication = ["bearer"]\n'
                "authorization = true\n"
                f'super_users = ["User:{local_cluster.ADMIN}"]\n'
                "\n[security.bearer]\n"
                f'issuer = "{DEV_ISSUER}"\n'
                f'audience = "{DEV_AUDIENCE}"\n'
                f'jwks_file = "{issuer}/jwks.json"\n'
            )
        return ""


@dataclass
class Side:
    """One cluster and how the benchmark talks to it."""

    name: str  # a VARIANTS key
    cluster: VariantCluster
    admin: bench.Client  # creates topics and ACLs
    user: bench.Client  # produces and consumes (User:bench with authentication on)
    # Connections (TLS handshakes with TLS on) the user's session opened.
    opened: list[int]


def tls_and_tokens(cluster: VariantCluster) -> tuple[ssl.SSLContext | None, dict[str, str]]:
    """The client TLS context and, per user, the Authorization header value."""
    context = None
    if cluster.tls:
        context = ssl.create_default_context(cafile=cluster.dir / "tls" / "ca.pem")
    tokens = {}
    if cluster.auth:
        tokens = {
            user: "Bearer " + local_cluster.mint(cluster.dir, user, TOKEN_LIFETIME_S)
            for user in (local_cluster.ADMIN, BENCH_USER)
        }
    return context, tokens


@contextlib.asynccontextmanager
async def side(name: str, cluster: VariantCluster) -> AsyncIterator[Side]:
    context, tokens = tls_and_tokens(cluster)
    sessions = []
    clients = []
    opened = [0]

    async def count(*_args: Any) -> None:
        opened[0] += 1

    tracing = aiohttp.TraceConfig()
    tracing.on_connection_create_end.append(count)
    for user in (local_cluster.ADMIN, BENCH_USER):
        headers = {"Authorization": tokens[user]} if user in tokens else {}
        connector = aiohttp.TCPConnector(limit=0, ssl=context if context else True)
        session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=120),
            connector=connector,
            headers=headers,
            trace_configs=[tracing] if user == BENCH_USER else None,
        )
        sessions.append(session)
        client = bench.Client(session, cluster.bootstrap)
        clients.append(client)
    try:
        for client in clients:
            await client.discover()
        yield Side(name, cluster, clients[0], clients[1], opened)
    finally:
        for session in sessions:
            await session.close()


def binding(principal: str, resource_type: str, name: str, operation: str, **kw: str) -> dict:
    return {
        "principal": principal,
        "host": "*",
        "resource_type": resource_type,
        "resource_name": name,
        "pattern_type": kw.get("pattern_type", "literal"),
        "operation": operation,
        "permission": kw.get("permission", "allow"),
    }


def unrelated_acls(count: int) -> list[dict]:
    """Bindings for other principals and resources: literal and prefixed topics,
    groups, a few denials, so the authorizer holds more than the bench's own."""
    out = []
    operations = ("read", "write", "describe", "create", "alter_configs")
    for i in range(count):
        principal = f"User:app-{i % 37}"
        kind = i % 5
        if kind == 0:
            out.append(binding(principal, "group", f"group-{i}", "read"))
        elif kind == 1:
            out.append(binding(principal, "topic", f"team-{i}.", "read", pattern_type="prefixed"))
        elif kind == 2:
            out.append(binding(principal, "topic", f"events-{i}", "write", permission="deny"))
        else:
            out.append(binding(principal, "topic", f"orders-{i}", operations[i % len(operations)]))
    return out


async def post_acls(s: Side, acls: list[dict]) -> None:
    for i in range(0, len(acls), ACLS_PER_REQUEST):
        chunk = {"acls": acls[i : i + ACLS_PER_REQUEST]}
        async with s.admin.session.post(f"{s.admin.bootstrap}/v1/acls", json=chunk) as resp:
            if resp.status not in (200, 201):
                raise RuntimeError(f"POST /v1/acls: {resp.status} {await resp.text()}")


async def grant(s: Side, topic: str, operations: tuple[str, ...]) -> None:
    """ACLs for User:bench on `topic`, then wait until every node lets it describe it."""
    if not s.cluster.auth:
        return
    principal = f"User:{BENCH_USER}"
    await post_acls(s, [binding(principal, "topic", topic, op) for op in operations])
    deadline = time.monotonic() + ACL_PROPAGATION_S
    for url in s.user.urls.values():
        while True:
            status, _doc = await s.user.get_json(f"{url}/v1/topics/{topic}")
            if status == 200:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}: User:{BENCH_USER} still may not describe {topic}")
            await asyncio.sleep(0.1)  # polling the ACL's arrival with a deadline


def summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one case on one side taken together."""
    seconds = sum(c["seconds"] for c in cases)
    records = sum(c["records"] for c in cases)
    return {
        "rounds": len(cases),
        "records_per_s": round(records / seconds, 1),
        "mb_per_s": round(sum(c["mb_per_s"] * c["seconds"] for c in cases) / seconds, 2),
        "records_per_s_by_round": [c["records_per_s"] for c in cases],
        "request_p50_ms_by_round": [c["request_p50_ms"] for c in cases],
        "request_p99_ms_by_round": [c["request_p99_ms"] for c in cases],
        "request_p99_ms_worst": max(
            (c["request_p99_ms"] for c in cases if c["request_p99_ms"] is not None), default=None
        ),
        "errors": sum(c["errors"] for c in cases),
        "connections_opened": sum(c["connections_opened"] for c in cases),
        "nodes_cpu_us_per_record": _cpu_per_record(cases, "nodes_cpu_s"),
        "client_cpu_us_per_record": _cpu_per_record(cases, "client_cpu_s"),
    }


def _cpu_per_record(cases: list[dict[str, Any]], key: str) -> float | None:
    if any(c[key] is None for c in cases):
        return None
    records = sum(c["records"] for c in cases)
    return round(sum(c[key] for c in cases) / records * 1e6, 2) if records else None


async def run(args: argparse.Namespace, clusters: dict[str, VariantCluster]) -> dict:
    run_id = uuid.uuid4().hex[:6]
    out: dict[str, Any] = {"produce": [], "latency": []}
    async with contextlib.AsyncExitStack() as stack:
        sides = [await stack.enter_async_context(side(n, c)) for n, c in clusters.items()]
        for s in sides:
            if s.cluster.auth and args.unrelated_acls:
                await post_acls(s, unrelated_acls(args.unrelated_acls))
                bench.progress(f"{s.name}: {args.unrelated_acls} unrelated ACLs added")
        topics: dict[tuple[str, str], dict[int, str]] = {}
        for s in sides:
            for fmt in FORMATS:
                name = f"bench-{run_id}-{fmt}"
                topics[s.name, fmt] = await s.admin.create_topic(name, args.partitions)
                await grant(s, name, ("write", "describe"))
        for round_no in range(args.rounds):
            order = sides if round_no % 2 == 0 else sides[::-1]  # who goes first alternates
            for fmt in FORMATS:
                for s in order:
                    topic = f"bench-{run_id}-{fmt}"
                    case = bench.Throughput("produce", fmt, args.record_bytes, "all")
                    bench.progress(f"{s.name} r{round_no} {case.name}: ...")
                    opened = s.opened[0]
                    await bench.produce_case(
                        s.user, topic, topics[s.name, fmt], case, args, s.cluster.pids()
                    )
                    d = {**case.to_dict(), "side": s.name, "round": round_no}
                    d["connections_opened"] = s.opened[0] - opened
                    bench.progress(
                        f"{s.name} r{round_no} {case.name}: {d['records_per_s']:,.0f} records/s, "
                        f"p50 {d['request_p50_ms']} p99 {d['request_p99_ms']} ms, "
                        f"errors {case.errors}"
                    )
                    out["produce"].append(d)
        for rate in args.latency_rate:
            for s in sides:
                name = f"bench-{run_id}-latency-{rate}"
                leaders = await s.admin.create_topic(name, 1)
                await grant(s, name, ("write", "read"))
                bench.progress(f"{s.name} latency {rate}/s: ...")
                opened = s.opened[0]
                lat = await bench.latency_case(
                    s.user, name, leaders[0], rate, args, s.cluster.pids()
                )
                d = {**lat.to_dict(), "side": s.name, "connections_opened": s.opened[0] - opened}
                bench.progress(
                    f"{s.name} latency {rate}/s: e2e p50 {d['e2e_p50_ms']} p99 {d['e2e_p99_ms']}"
                    f" ms, ack p99 {d['ack_p99_ms']} ms, lost {d['lost']}, connections opened "
                    f"{d['connections_opened']}, max send lag {d['max_schedule_lag_ms']} ms"
                )
                out["latency"].append(d)
    out["summary"] = {}
    for fmt in FORMATS if args.rounds else ():
        by_side = {
            s: summary([c for c in out["produce"] if c["side"] == s and c["format"] == fmt])
            for s in clusters
        }
        first = by_side[next(iter(clusters))]
        for name, x in by_side.items():
            # Over the first side on the same event loop (e.g. secure@uvloop
            # over plain@uvloop).
            loop = clusters[name].event_loop
            base = next(by_side[n] for n, c in clusters.items() if c.event_loop == loop)
            x["over_same_loop_first"] = round(x["records_per_s"] / base["records_per_s"], 3)
        for x in by_side.values():
            # All rounds together, and round by round (a side against the
            # first side in the same round: the machine's load drifts less
            # within a round than across the run).
            x["over_first_side"] = round(x["records_per_s"] / first["records_per_s"], 3)
            x["over_first_side_by_round"] = [
                round(a / b, 3)
                for a, b in zip(
                    x["records_per_s_by_round"], first["records_per_s_by_round"], strict=True
                )
            ]
            x["over_first_side_median"] = statistics.median(x["over_first_side_by_round"])
        out["summary"][fmt] = by_side
    return out


def render(doc: dict[str, Any]) -> str:
    r = doc["results"]
    lines = [
        "lograft security overhead: the same produce loads against clusters with and without "
        "security, one run",
        f"command: {doc['command']}",
        "machine: {cpu}, {cores} cores, RAM {ram}, CPython {python}, kernel {kernel}, "
        "git {git}".format(**doc["machine"]),
        f"load average (1/5/15 min): start {doc['load_start']}, end {doc['load_end']}",
        f"wall time: {doc['wall_s']:.0f} s",
        *(f"{name}: {what}" for name, what in doc["sides"].items()),
        "",
        f"produce, acks=all, {doc['settings']['record_bytes']} B values, "
        f"{doc['settings']['rounds']} rounds of {doc['settings']['seconds']} s per side "
        "(alternating which side goes first)",
        "ratio: records/s over the first side's, all rounds together; median: of the "
        "ratios round by round; loop: ratio over the first side on the same event loop; "
        "us/rec: CPU microseconds per record (nodes: the three "
        "together; client: this process); conns: connections the producer opened",
        f"{'case':<6}{'side':<15}{'records/s':>11}{'MB/s':>7}{'ratio':>7}{'median':>8}"
        f"{'loop':>7}  "
        f"{'records/s by round':<40}{'req p99 ms by round':<30}{'nodes us/rec':>13}"
        f"{'client us/rec':>14}{'conns':>6}{'errors':>7}",
    ]
    for fmt, s in r["summary"].items():
        for name, x in s.items():
            rounds = " ".join(f"{v:,.0f}" for v in x["records_per_s_by_round"])
            p99 = " ".join(bench._fmt(v) for v in x["request_p99_ms_by_round"])
            lines.append(
                f"{fmt:<6}{name:<15}{x['records_per_s']:>11,.0f}{x['mb_per_s']:>7.2f}"
                f"{x['over_first_side']:>7.3f}{x['over_first_side_median']:>8.3f}"
                f"{x.get('over_same_loop_first', x['over_first_side']):>7.3f}  "
                f"{rounds:<40}{p99:<30}{bench._fmt(x['nodes_cpu_us_per_record']):>13}"
                f"{bench._fmt(x['client_cpu_us_per_record']):>14}"
                f"{x['connections_opened']:>6}{x['errors']:>7}"
            )
    for lat in r["latency"]:
        lines.append(
            f"latency {lat['side']:<15}{lat['rate_per_s']}/s for {lat['seconds']} s: e2e p50 "
            f"{bench._fmt(lat['e2e_p50_ms'])} p99 {bench._fmt(lat['e2e_p99_ms'])} p99.9 "
            f"{bench._fmt(lat['e2e_p999_ms'])} ms; ack p50 {bench._fmt(lat['ack_p50_ms'])} "
            f"p99 {bench._fmt(lat['ack_p99_ms'])} ms; lost {lat['lost']}; connections opened "
            f"{lat['connections_opened']}; nodes CPU {lat['nodes_cpu_s']} s"
        )
    return "\n".join(lines)


def describe(variant: str, args: argparse.Namespace) -> str:
    tls, auth = VARIANTS[variant]
    parts = []
    if tls:
        parts.append("https on every listener and node link (local CA, ECDSA P-256 certificates)")
    if auth:
        parts.append(
            f"bearer tokens (ES256, local JWKS file), ACLs on: User:{BENCH_USER} by literal "
            f"topic ACLs, {args.unrelated_acls} unrelated ACLs"
        )
    return "; ".join(parts) or "no security (http, no authentication, no ACLs)"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every produce case")
    ap.add_argument("--seconds", type=float, default=10.0, help="counted seconds per case")
    ap.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds per case")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=4, help="produce requests per partition")
    ap.add_argument("--request-bytes", type=int, default=65536)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument(
        "--latency-rate",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[500],
        help="records/s of the latency test (a comma-separated list: one test per rate)",
    )
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--unrelated-acls", type=int, default=300)
    ap.add_argument(
        "--sides",
        type=lambda s: s.split(","),
        default=["plain", "secure"],
        help=f"the clusters compared, the first the baseline, of {','.join(VARIANTS)} "
        "(plain: no security; tls: [tls] only; auth: bearer tokens + ACLs over http; "
        "secure: both, as cluster.sh start --secure)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the clusters' directories")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    ap.add_argument("--save-json", type=Path, help="also write the JSON object to this file")
    ap.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="print the table of a --save-json file; run nothing",
    )
    args = ap.parse_args()
    if args.render is not None:
        print(render(json.loads(args.render.read_text())))
        return 0

    started = time.monotonic()
    load_start = "/".join(f"{x:.2f}" for x in os.getloadavg())
    unknown = {s for s in args.sides if s.partition("@")[0] not in VARIANTS} | {
        s for s in args.sides if s.partition("@")[2] not in ("", "asyncio", "uvloop")
    }
    if unknown:
        ap.error(f"--sides: unknown {', '.join(sorted(unknown))}")
    clusters: dict[str, VariantCluster] = {}
    try:
        for name in args.sides:
            # One after the other: the next's free-port check sees the ports taken.
            clusters[name] = VariantCluster(name)
            clusters[name].start()
        results = asyncio.run(run(args, clusters))
    finally:
        for cluster in clusters.values():
            cluster.stop(args.keep)
    doc = {
        "command": shlex.join([".venv/bin/python", "scripts/bench_security.py", *sys.argv[1:]]),
        "machine": bench.machine(),
        "sides": {
            name: describe(name.partition("@")[0], args)
            + f"; event loop {clusters[name].event_loop}"
            for name in args.sides
        },
        "settings": {
            k: v for k, v in vars(args).items() if k not in ("json", "save_json", "render")
        },
        "load_start": load_start,
        "load_end": "/".join(f"{x:.2f}" for x in os.getloadavg()),
        "wall_s": time.monotonic() - started,
        "results": results,
    }
    if args.save_json is not None:
        args.save_json.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
