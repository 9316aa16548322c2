"""Consumer group coordinator benchmark on a three-node local cluster.

In a fresh temporary cluster (configs from scripts/local_cluster.py, its own
ports, `[groups]` offsets_topic_num_partitions=3), one client in this process,
one request at a time, keep-alive connection to the group's coordinator:

1. coordinator lookup (creates `__consumer_offsets` on the first one);
2. `--members` members join a group subscribed to a 6-partition topic, and
   each heartbeats until it holds its share (rebalance time);
3. `--heartbeats` steady heartbeats (nothing changes: no record is written);
4. `--commits` offset commits of one partition and of all six (acks=all,
   one batch each, answered once committed);
5. SIGKILL of the coordinator's node; time until a commit is accepted again
   by the new coordinator (fencing of the dead broker by the controller,
   leader election, load of the partition), and a check that every commit
   acknowledged before the kill is there.

    .venv/bin/python scripts/bench_groups.py
    .venv/bin/python scripts/bench_groups.py --heartbeats 2000 --commits 1000

Latencies are wall-clock per request, as the client sees them; the nodes and
this client share the machine's cores.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import local_cluster
from bench_scale import Cluster, pct

TOPIC = "bench-orders"
PARTITIONS = 6
GROUP = "bench-group"
# How long to wait for the group to settle or for the failover, s.
SETTLE_TIMEOUT_S = 120.0


class Coordinator:
    """A keep-alive connection to whichever node coordinates GROUP."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.conn: http.client.HTTPConnection | None = None
        self.url = ""

    def lookup(self, via: list[int]) -> str:
        for n in via:
            try:
                doc = self.cluster.request(
                    "GET", f"{self.cluster.url(n)}/v1/groups/{GROUP}/coordinator", timeout=10
                )
            except (RuntimeError, OSError):
                continue
            if isinstance(doc, dict) and doc.get("coordinator_url"):
                return str(doc["coordinator_url"])
        raise RuntimeError("no node named a coordinator")

    def connect(self, url: str) -> None:
        if self.conn is not None:
            self.conn.close()
        parsed = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        assert self.conn is not None
        data = None if body is None else json.dumps(body).encode()
        self.conn.request(method, path, body=data, headers={"content-type": "application/json"})
        resp = self.conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def summary(name: str, ms: list[float]) -> str:
    return (
        f"| {name} | {len(ms)} | {pct(ms, 0.5):.2f} | {pct(ms, 0.9):.2f} | "
        f"{pct(ms, 0.99):.2f} | {max(ms):.2f} |"
    )


def member_path(member: str, suffix: str = "") -> str:
    return f"/v1/groups/{GROUP}/members/{member}{suffix}"


def run(args: argparse.Namespace) -> list[str]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-groups-", dir=args.dir))
    cluster = Cluster(workdir, args.base_port)
    for n in local_cluster.NODES:
        with (workdir / f"node-{n}.toml").open("a") as f:
            f.write("\n[groups]\noffsets_topic_num_partitions = 3\n")
    out: list[str] = []
    try:
        cluster.start()
        cluster.request(
            "POST",
            f"{cluster.url(1)}/v1/topics",
            {"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 3},
        )
        coord = Coordinator(cluster)
        lookup_ms, url = timed(lambda: coord.lookup([1]))
        out.append(f"first coordinator lookup (creates __consumer_offsets): {lookup_ms:.0f} ms")
        coord.connect(url)

        # Join, then heartbeat round-robin until every member holds its share.
        epochs: dict[str, int] = {}
        owned: dict[str, dict[str, list[int]]] = {}
        join_ms = []
        for i in range(args.members):
            member = f"m{i}"
            ms, (status, doc) = timed(
                lambda m=member: coord.call(
                    "POST",
                    f"/v1/groups/{GROUP}/members",
                    {"member_id": m, "subscribed_topics": [TOPIC]},
                )
            )
            assert status == 200, doc
            join_ms.append(ms)
            epochs[member], owned[member] = doc["member_epoch"], doc["assignment"]
        start = time.monotonic()
        share = PARTITIONS // args.members
        while True:
            for member in epochs:
                status, doc = coord.call(
                    "POST",
                    member_path(member, "/heartbeat"),
                    {"member_epoch": epochs[member], "owned_partitions": owned[member]},
                )
                assert status == 200, doc
                epochs[member], owned[member] = doc["member_epoch"], doc["assignment"]
            if all(sum(len(p) for p in o.values()) >= share for o in owned.values()):
                break
            if time.monotonic() - start > SETTLE_TIMEOUT_S:
                raise RuntimeError(f"the group did not settle: {owned}")
        settle_ms = (time.monotonic() - start) * 1000
        out.append(
            f"{args.members} members joined and settled (heartbeats back to back) "
            f"in {settle_ms:.0f} ms"
        )

        member = "m0"
        hb_ms = []
        for _ in range(args.heartbeats):
            ms, (status, doc) = timed(
                lambda: coord.call(
                    "POST",
                    member_path(member, "/heartbeat"),
                    {"member_epoch": epochs[member], "owned_partitions": owned[member]},
                )
            )
            assert status == 200, doc
            hb_ms.append(ms)

        mine = [(t, p) for t, ps in owned[member].items() for p in ps]
        committed: dict[tuple[str, int], int] = {}

        def commit(offset: int, tps: list[tuple[str, int]]) -> tuple[int, Any]:
            body = {
                "member_id": member,
                "member_epoch": epochs[member],
                "offsets": [{"topic": t, "partition": p, "offset": offset} for t, p in tps],
            }
            return coord.call("POST", f"/v1/groups/{GROUP}/offsets", body)

        one_ms, all_ms = [], []
        for i in range(args.commits):
            ms, (status, doc) = timed(lambda i=i: commit(i, mine[:1]))
            assert status == 200, doc
            one_ms.append(ms)
        committed[mine[0]] = args.commits - 1
        # All of m0's partitions in one commit (one batch of len(mine) records).
        for i in range(args.commits):
            ms, (status, doc) = timed(lambda i=i: commit(i, mine))
            assert status == 200, doc
            all_ms.append(ms)
        committed.update(dict.fromkeys(mine, args.commits - 1))

        out += [
            "",
            "| request | n | p50 ms | p90 ms | p99 ms | max ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
            summary("join", join_ms),
            summary("heartbeat (steady, no record)", hb_ms),
            summary("commit, 1 partition (acks=all)", one_ms),
            summary(f"commit, {len(mine)} partitions in one batch", all_ms),
            "",
        ]

        # Failover: SIGKILL the coordinator's node.
        victim = next(n for n in local_cluster.NODES if cluster.url(n) == url)
        os.kill(cluster.pids.pop(victim), signal.SIGKILL)
        killed = time.monotonic()
        survivors = [n for n in local_cluster.NODES if n != victim]
        errors: dict[str, int] = {}
        while True:
            try:
                new_url = coord.lookup(survivors)
                if new_url != url:
                    coord.connect(new_url)
                    status, doc = commit(args.commits, mine[:1])
                    if status == 200:
                        break
                    code = doc["error"]["code"]
                    errors[code] = errors.get(code, 0) + 1
            except (OSError, RuntimeError, http.client.HTTPException) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            if time.monotonic() - killed > SETTLE_TIMEOUT_S:
                raise RuntimeError(f"no coordinator took over: {errors}")
            time.sleep(0.02)  # retry pacing while the cluster fails over
        failover_ms = (time.monotonic() - killed) * 1000
        status, doc = coord.call("GET", f"/v1/groups/{GROUP}/offsets")
        found = {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}
        expected = {**committed, mine[0]: args.commits}
        lost = {tp: (o, found.get(tp)) for tp, o in expected.items() if found.get(tp) != o}
        out.append(
            f"SIGKILL of the coordinator (node {victim}): first commit accepted by the new "
            f"coordinator after {failover_ms:.0f} ms; errors meanwhile: {errors}"
        )
        out.append(f"commits acknowledged before the kill and missing after it: {len(lost)}")
        if lost:
            out.append(f"  {lost}")
        return out
    except BaseException:
        for n in local_cluster.NODES:
            print(f"-- node {n} log tail", file=sys.stderr)
            local_cluster.tail(workdir / f"node-{n}.log", 20)
        raise
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--heartbeats", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--base-port", type=int, default=29590)
    parser.add_argument("--dir", default=None, help="parent of the temporary cluster directory")
    parser.add_argument("--keep", action="store_true", help="keep the cluster directory")
    args = parser.parse_args()
    lines = run(args)
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; load average {os.getloadavg()[0]:.2f}"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
