"""Scale benchmark: a three-node cluster whose brokers each host N partition replicas.

For every partition count given (default 200 and 2000), in a fresh temporary
cluster (configs from scripts/local_cluster.py, its own ports):

1. start three combined controller+broker nodes, wait until ready, and read
   each node's RSS with no topics (the baseline);
2. create topics totalling N partitions, replication factor 3 (so every broker
   hosts N replicas), and wait until every partition has a leader and a full ISR;
3. let it settle, then measure per node over `--measure-s`: CPU% (utime+stime
   deltas from /proc/<pid>/stat; 100% = one core), the share of it in the
   main thread (the event loop; /proc/<pid>/task/<pid>/stat) against the
   other threads (Raft, controller, heartbeats, storage), and RSS (VmRSS);
4. count the TCP connections each node holds to every other node's HTTP port
   (the replica fetch sessions ride on those), sampled during the idle window;
5. run a produce load spread round-robin over all partitions (raw RecordBatch
   v2 bodies straight to each partition's leader, acks=all) at `--rate`
   requests/s and measure CPU and RSS again. The load is open loop; request
   latency is taken from each request's scheduled send time (a send held
   back by a busy loop or `--inflight-max` counts its delay: coordinated
   omission corrected, as wrk2 does), over the requests due after the
   warm-up (the first min(5, measure-s / 3) s, when CPU is not sampled
   either);
6. stop the nodes by pid (SIGTERM, SIGKILL after a grace period), and report how
   long each took to exit.

The table at the end gives, per node, idle and loaded CPU and RSS, and the RSS
per hosted replica: (RSS - baseline) / N, and between the two smallest and
largest runs, (RSS_large - RSS_small) / (N_large - N_small).

    .venv/bin/python scripts/bench_scale.py                       # 200 and 2000
    .venv/bin/python scripts/bench_scale.py --partitions 2000 --measure-s 30

The load generator runs in this process and shares the machine's cores with the
nodes; its own CPU is reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

import local_cluster
from loopback_ports import free_base

from lograft.protocol.batch import RecordInput, build_batch

NODES = local_cluster.NODES
SECRET_HEADER = "X-Lograft-Cluster-Secret"
CLK_TCK = os.sysconf("SC_CLK_TCK")
FULL_ISR_TIMEOUT_S = 600
STOP_GRACE_S = 30
BATCH_CONTENT_TYPE = "application/vnd.lograft.batch"


# -- /proc ------------------------------------------------------------------------------


def cpu_ticks(pid: int) -> int:
    """utime + stime of every thread of `pid`, in clock ticks."""
    return _stat_ticks(Path(f"/proc/{pid}/stat"))


def main_thread_ticks(pid: int) -> int:
    """utime + stime of `pid`'s main thread alone (a node's event loop), in
    clock ticks."""
    return _stat_ticks(Path(f"/proc/{pid}/task/{pid}/stat"))


def _stat_ticks(path: Path) -> int:
    text = path.read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)


def machine_busy_ticks() -> int:
    """Busy ticks of all CPUs (everything but idle and iowait), from /proc/stat."""
    cols = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(cols) - cols[3] - cols[4]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


# Each run's cluster takes its ports at base + this * its index: more than
# local_cluster's controller ports (base + 10100 + node) lie past its Raft
# ports (base + 10000 + node), so no two runs share a port.
RUN_PORT_STRIDE = 200


def port_offsets(runs: int) -> list[int]:
    """The offsets from the base port of every port the runs' clusters bind:
    local_cluster's HTTP, Raft and controller ports."""
    kinds = (local_cluster.http_port, local_cluster.raft_port, local_cluster.controller_port)
    return [
        RUN_PORT_STRIDE * run + port(0, node)
        for run in range(runs)
        for node in NODES
        for port in kinds
    ]


def base_port_for(requested: int | None, runs: int) -> int:
    """`requested`, else a base whose every port (all runs) is free on
    127.0.0.1 and below the ephemeral range, where no outgoing connection of
    another process can take it between our choice and a node's bind."""
    return requested if requested is not None else free_base(port_offsets(runs))


def connections_to(pid: int, ports: dict[int, int]) -> dict[int, int]:
    """Established TCP connections that `pid` opened to each node's HTTP port."""
    inodes = _socket_inodes(pid)
    by_port = {port: node for node, port in ports.items()}
    counts = dict.fromkeys(ports, 0)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            if cols[3] == "01" and cols[9] in inodes and remote_port in by_port:
                counts[by_port[remote_port]] += 1
    return counts


@dataclass
class Sample:
    cpu_pct: dict[int, float] = field(default_factory=dict)
    rss_mib: dict[int, float] = field(default_factory=dict)
    threads: dict[int, int] = field(default_factory=dict)
    # CPU% of each process's main thread (a node's event loop); the rest of
    # cpu_pct is its other threads (Raft, controller, heartbeats, storage).
    main_pct: dict[int, float] = field(default_factory=dict)
    # CPU% of the whole machine in the window, and of processes not ours.
    machine_pct: float = 0.0
    others_pct: float = 0.0


def measure(
    pids: dict[int, int],
    seconds: float,
    *,
    extra_pid: int | None = None,
    every: tuple[float, Callable[[], None]] | None = None,
) -> Sample:
    """CPU% over `seconds` (100 = one core) and RSS at the end, per node.

    `every=(period_s, fn)` calls fn every period during the window."""
    watched = dict(pids)
    if extra_pid is not None:
        watched[0] = extra_pid
    t0 = time.monotonic()
    c0 = {n: cpu_ticks(p) for n, p in watched.items()}
    t0_main = {n: main_thread_ticks(p) for n, p in watched.items()}
    m0 = machine_busy_ticks()
    end = t0 + seconds
    if every is not None:
        period, fn = every
        while time.monotonic() + period < end:
            time.sleep(period)  # sampling period inside the window
            fn()
    time.sleep(max(0.0, end - time.monotonic()))
    dt = time.monotonic() - t0
    s = Sample()
    s.machine_pct = 100.0 * (machine_busy_ticks() - m0) / CLK_TCK / dt
    for n, p in watched.items():
        s.cpu_pct[n] = 100.0 * (cpu_ticks(p) - c0[n]) / CLK_TCK / dt
        s.main_pct[n] = 100.0 * (main_thread_ticks(p) - t0_main[n]) / CLK_TCK / dt
        s.rss_mib[n] = rss_kib(p) / 1024
        s.threads[n] = thread_count(p)
    s.others_pct = s.machine_pct - sum(s.cpu_pct.values())
    return s


# The active controller logs the brokers each fence check fenced, as a tuple
# of ids ("controller duty: (3,)"); leader balancing logs tuples of partitions.
FENCE_DUTY = re.compile(r"controller duty: \((\d+(?:, \d+)*),?\)")


@dataclass(frozen=True, slots=True)
class Incidents:
    """Counted from the node logs: brokers fenced by the controller (a broker
    that heartbeats again at once may be unfenced before it notices, so the
    brokers' own logs undercount), and active controllers elected."""

    fencings: int
    elections: int

    def __sub__(self, other: Incidents) -> Incidents:
        return Incidents(self.fencings - other.fencings, self.elections - other.elections)


def incidents(directory: Path) -> Incidents:
    fenced = elected = 0
    for n in NODES:
        text = (directory / f"node-{n}.log").read_text(errors="replace")
        fenced += sum(len(m.group(1).split(",")) for m in FENCE_DUTY.finditer(text))
        elected += text.count("is the active controller")
    return Incidents(fenced, elected)


# -- cluster ----------------------------------------------------------------------------


class Cluster:
    def __init__(
        self, directory: Path, base_port: int, controller: dict[str, int] | None = None
    ) -> None:
        self.directory = directory
        self.base = base_port
        local_cluster.write_configs(directory, base_port)
        if controller:
            for n in NODES:
                with (directory / f"node-{n}.toml").open("a") as f:
                    f.write("\n[controller]\n")
                    f.writelines(f"{k} = {v}\n" for k, v in controller.items())
        self.secret = (directory / "cluster-secret").read_text().strip()
        self.pids: dict[int, int] = {}

    def url(self, node: int) -> str:
        return f"http://127.0.0.1:{local_cluster.http_port(self.base, node)}"

    @property
    def http_ports(self) -> dict[int, int]:
        return {n: local_cluster.http_port(self.base, n) for n in NODES}

    def start(self) -> None:
        for n in NODES:
            local_cluster.start_node(self.directory, n)
            self.pids[n] = int((self.directory / f"node-{n}.pid").read_text())
        # pid_of (used by wait_ready) knows a node by its command line, which
        # names the config only once the child has exec'd.
        deadline = time.monotonic() + 10
        while any(local_cluster.pid_of(self.directory, n) is None for n in NODES):
            if time.monotonic() > deadline:
                raise RuntimeError("a node did not start")
            time.sleep(0.05)  # polling process start with a deadline
        if not local_cluster.wait_ready(self.directory, self.base, NODES):
            raise RuntimeError("the cluster did not become ready")

    def stop(self, exited_s: dict[int, float | None] | None = None) -> None:
        """SIGTERM each node we started (by pid), SIGKILL after a grace period.
        `exited_s` gets, per node, the seconds from SIGTERM to its exit (None:
        it was killed)."""
        start = time.monotonic()
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = start + STOP_GRACE_S
        waiting = dict(self.pids)
        while waiting and time.monotonic() < deadline:
            for n in [n for n in waiting if local_cluster.pid_of(self.directory, n) is None]:
                del waiting[n]
                if exited_s is not None:
                    exited_s[n] = time.monotonic() - start
            time.sleep(0.1)  # polling process exit with a deadline
        for n, pid in waiting.items():
            if local_cluster.pid_of(self.directory, n) is None:
                if exited_s is not None:
                    exited_s[n] = time.monotonic() - start
                continue
            print(f"node {n} (pid {pid}) did not stop; SIGKILL", file=sys.stderr)
            os.kill(pid, signal.SIGKILL)
            if exited_s is not None:
                exited_s[n] = None
        self.pids.clear()

    def request(self, method: str, url: str, body: Any = None, timeout: float = 120) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {url}: {exc.code} {exc.read()[:300]!r}") from None

    def create_topics(self, total: int, per_topic: int) -> list[tuple[str, int]]:
        topics = []
        left, i = total, 0
        while left > 0:
            count = min(per_topic, left)
            name = f"scale-{i}"
            self.create_topic(name, count)
            topics.append((name, count))
            left -= count
            i += 1
        return topics

    def create_topic(self, name: str, partitions: int) -> None:
        """Create, retrying while brokers are fenced or busy (a wide topic stalls them)."""
        deadline = time.monotonic() + FULL_ISR_TIMEOUT_S
        body = {"name": name, "partitions": partitions, "replication_factor": 3}
        while True:
            try:
                self.request("POST", f"{self.url(1)}/v1/topics", body)
                return
            except (RuntimeError, OSError) as exc:
                if "TOPIC_ALREADY_EXISTS" in str(exc):
                    return  # an earlier attempt went through
                if time.monotonic() > deadline:
                    raise
                print(f"\n  creating {name}: {str(exc)[:160]}; retrying", file=sys.stderr)
            time.sleep(2)  # polling cluster state with a deadline

    def partition_states(self, topics: list[tuple[str, int]]) -> dict[tuple[str, int], dict]:
        out = {}
        for name, _count in topics:
            doc = self.request("GET", f"{self.url(1)}/v1/topics/{name}")
            for p in doc["partitions"]:
                out[(name, p["partition"])] = p
        return out

    def wait_full_isr(self, topics: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Wait until every partition has a leader and all 3 replicas in its ISR."""
        deadline = time.monotonic() + FULL_ISR_TIMEOUT_S
        total = sum(c for _, c in topics)
        while True:
            try:
                states = self.partition_states(topics)
            except (RuntimeError, OSError) as exc:  # a node busy or restarting its duties
                print(f"\n  describe: {str(exc)[:160]}", file=sys.stderr)
                states = {}
            ok = [p for p in states.values() if p["leader"] >= 0 and len(set(p["isr"])) == 3]
            print(f"\r  leader and full ISR: {len(ok)}/{total}", end="", file=sys.stderr)
            if len(ok) == total:
                print(file=sys.stderr)
                return {k: v["leader"] for k, v in states.items()}
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(ok)}/{total} partitions fully in sync")
            time.sleep(2)  # polling cluster state with a deadline


# -- load -------------------------------------------------------------------------------


@dataclass
class LoadResult:
    sent: int = 0
    ok: int = 0
    errors: int = 0
    redirects: int = 0  # NOT_LEADER_OR_FOLLOWER answers (a leader moved)
    latencies_ms: list[float] = field(default_factory=list)  # of requests due after warm-up
    first_error: str = ""
    warmup_s: float = 0.0


async def produce_load(
    cluster: Cluster,
    leaders: dict[tuple[str, int], int],
    seconds: float,
    rate: float,
    records_per_batch: int,
    record_bytes: int,
    inflight_max: int,
    warmup: float = 0.0,
) -> LoadResult:
    """An open-loop load at `rate` requests/s; latency of the requests due after
    `warmup` s, each from its scheduled send time."""
    import aiohttp

    res = LoadResult(warmup_s=warmup)
    order = sorted(leaders)
    value = os.urandom(record_bytes // 2).hex().encode()[:record_bytes]
    sem = asyncio.Semaphore(inflight_max)
    timeout = aiohttp.ClientTimeout(total=30)

    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(tp: tuple[str, int], due: float, counted: bool) -> None:
            batch = build_batch(
                [RecordInput(value=value) for _ in range(records_per_batch)],
                timestamp_ms=int(time.time() * 1000),
            )
            url = f"{cluster.url(leaders[tp])}/v1/topics/{tp[0]}/partitions/{tp[1]}/batches"
            try:
                async with session.post(
                    url,
                    data=batch,
                    params={"acks": "all"},
                    headers={"Content-Type": BATCH_CONTENT_TYPE},
                ) as resp:
                    body = await resp.read()
                    if resp.status == 200:
                        res.ok += 1
                        if counted:
                            # From the scheduled send time, not the actual one: a send
                            # held back by a busy loop or the in-flight cap counts its
                            # delay (coordinated omission corrected, as wrk2 does).
                            res.latencies_ms.append((time.monotonic() - due) * 1000)
                    elif resp.status == 421:  # leader moved: follow it, as a client would
                        res.redirects += 1
                        leader = json.loads(body)["error"]["details"].get("leader_id", -1)
                        if leader in NODES:
                            leaders[tp] = leader
                    else:
                        res.errors += 1
                        res.first_error = res.first_error or f"{resp.status} {body[:200]!r}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                res.errors += 1
                res.first_error = res.first_error or repr(exc)
            finally:
                sem.release()

        tasks: set[asyncio.Task[None]] = set()
        start = time.monotonic()
        i = 0
        while (now := time.monotonic()) - start < seconds:
            due = start + i / rate
            if due > now:
                await asyncio.sleep(due - now)  # pacing the open-loop load
            await sem.acquire()
            task = asyncio.create_task(one(order[i % len(order)], due, due - start >= warmup))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            res.sent += 1
            i += 1
        if tasks:
            await asyncio.gather(*tasks)
    return res


def run_load_and_measure(
    cluster: Cluster, leaders: dict[tuple[str, int], int], args: argparse.Namespace
) -> tuple[Sample, LoadResult]:
    """Measure CPU and RSS in a thread while the load runs on this thread's loop."""
    import threading

    warmup = min(5.0, args.measure_s / 3)
    holder: dict[str, Sample] = {}

    def sampler() -> None:
        time.sleep(warmup)
        holder["s"] = measure(cluster.pids, args.measure_s, extra_pid=os.getpid())

    t = threading.Thread(target=sampler)
    t.start()
    load = asyncio.run(
        produce_load(
            cluster,
            leaders,
            warmup + args.measure_s + 1,
            args.rate,
            args.records_per_batch,
            args.record_bytes,
            args.inflight_max,
            warmup,
        )
    )
    t.join()
    return holder["s"], load


# -- one run ----------------------------------------------------------------------------


@dataclass
class RunResult:
    partitions: int
    baseline: Sample
    idle: Sample
    loaded: Sample
    load: LoadResult
    connections: dict[int, dict[int, tuple[int, int]]]  # node -> peer -> (min, max)
    create_s: float
    full_isr_s: float
    load_seconds: float
    settle: Incidents  # from full ISR to the idle window
    during_idle: Incidents
    during_load: Incidents
    # Per node, seconds from SIGTERM to exit after the load (None: killed
    # after STOP_GRACE_S); filled in when the cluster stops.
    exited_s: dict[int, float | None] = field(default_factory=dict)


def run(partitions: int, args: argparse.Namespace, base_port: int) -> RunResult:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-scale-{partitions}-", dir=args.dir))
    cluster = Cluster(workdir, base_port, dict(args.controller))
    exited_s: dict[int, float | None] = {}
    print(f"\n== {partitions} partitions (RF 3), cluster in {workdir}", file=sys.stderr)
    try:
        cluster.start()
        time.sleep(args.settle_s)  # let start-up work finish before the baseline
        baseline = measure(cluster.pids, min(args.measure_s, 10))
        t0 = time.monotonic()
        topics = cluster.create_topics(partitions, args.partitions_per_topic)
        create_s = time.monotonic() - t0
        leaders = cluster.wait_full_isr(topics)
        full_isr_s = time.monotonic() - t0
        print(f"  created in {create_s:.1f} s, full ISR after {full_isr_s:.1f} s", file=sys.stderr)
        at_full_isr = incidents(workdir)
        time.sleep(args.settle_s)  # settle: leader balance, HW checkpoints, keep-alives
        conns: dict[int, dict[int, list[int]]] = {
            n: {m: [] for m in NODES if m != n} for n in NODES
        }

        def sample_conns() -> None:
            for n, pid in cluster.pids.items():
                counts = connections_to(pid, cluster.http_ports)
                for m in NODES:
                    if m != n:
                        conns[n][m].append(counts[m])

        before_idle = incidents(workdir)
        idle = measure(cluster.pids, args.measure_s, every=(3.0, sample_conns))
        after_idle = incidents(workdir)
        print(
            "  idle CPU% " + ", ".join(f"n{n} {idle.cpu_pct[n]:.1f}" for n in NODES),
            file=sys.stderr,
        )
        loaded, load = run_load_and_measure(cluster, leaders, args)
        after_load = incidents(workdir)
        print(
            f"  load: {load.ok} ok, {load.errors} errors, {load.redirects} redirects"
            + (f" (first: {load.first_error})" if load.errors else ""),
            file=sys.stderr,
        )
        return RunResult(
            partitions,
            baseline,
            idle,
            loaded,
            load,
            {n: {m: (min(v), max(v)) for m, v in peers.items()} for n, peers in conns.items()},
            create_s,
            full_isr_s,
            min(5.0, args.measure_s / 3) + args.measure_s + 1,
            before_idle - at_full_isr,
            after_idle - before_idle,
            after_load - after_idle,
            exited_s,
        )
    except BaseException:
        for n in NODES:
            print(f"-- node {n} log tail", file=sys.stderr)
            local_cluster.tail(workdir / f"node-{n}.log", 20)
        raise
    finally:
        cluster.stop(exited_s)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


# -- report -----------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def report(results: list[RunResult], args: argparse.Namespace) -> str:
    lines = []
    lines.append(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    lines.append(
        f"load: raw batches, acks=all, {args.records_per_batch} x {args.record_bytes} B "
        f"records per request, {args.rate:g} requests/s round-robin over all partitions, "
        f"<= {args.inflight_max} in flight; measure windows {args.measure_s:g} s"
    )
    if args.controller:
        lines.append("controller settings: " + ", ".join(f"{k}={v}" for k, v in args.controller))
    lines.append("")
    lines.append(
        "| partitions | node | RSS empty MiB | idle CPU % | idle RSS MiB | load CPU % "
        "| load RSS MiB | RSS/replica KiB | threads |"
    )
    lines.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        for n in NODES:
            per = (r.idle.rss_mib[n] - r.baseline.rss_mib[n]) * 1024 / r.partitions
            lines.append(
                f"| {r.partitions} | {n} | {r.baseline.rss_mib[n]:.0f} | {r.idle.cpu_pct[n]:.1f} "
                f"| {r.idle.rss_mib[n]:.0f} | {r.loaded.cpu_pct[n]:.1f} | "
                f"{r.loaded.rss_mib[n]:.0f} | {per:.0f} | {r.idle.threads[n]} |"
            )
        lines.append(
            f"| {r.partitions} | load generator | | | | {r.loaded.cpu_pct[0]:.1f} | "
            f"{r.loaded.rss_mib[0]:.0f} | | |"
        )
    lines.append("")
    for r in results:
        lines.append(
            f"{r.partitions} partitions: machine CPU % (200 = both cores) idle window "
            f"{r.idle.machine_pct:.0f} (other processes {r.idle.others_pct:.0f}), load window "
            f"{r.loaded.machine_pct:.0f} (other processes {r.loaded.others_pct:.0f})"
        )
    for r in results:
        lines.append(
            f"{r.partitions} partitions: CPU % per node in the event-loop (main) thread / "
            "in the other threads, idle: "
            + ", ".join(
                f"{n}: {r.idle.main_pct[n]:.1f} / {r.idle.cpu_pct[n] - r.idle.main_pct[n]:.1f}"
                for n in NODES
            )
            + "; load: "
            + ", ".join(
                f"{n}: {r.loaded.main_pct[n]:.1f} / "
                f"{r.loaded.cpu_pct[n] - r.loaded.main_pct[n]:.1f}"
                for n in NODES
            )
        )
    for r in results:
        lat = r.load.latencies_ms
        lines.append(
            f"{r.partitions} partitions: created in {r.create_s:.1f} s, every partition led "
            f"with a full ISR after {r.full_isr_s:.1f} s; load {r.load.ok} acks=all requests ok "
            f"({r.load.ok / r.load_seconds:.0f}/s, "
            f"{r.load.ok * args.records_per_batch / r.load_seconds:.0f} records/s), "
            f"{r.load.errors} errors, {r.load.redirects} leader redirects, "
            f"latency p50 {pct(lat, 0.5):.1f} ms, "
            f"p99 {pct(lat, 0.99):.1f} ms (from each request's scheduled send time, "
            f"requests due in the first {r.load.warmup_s:g} s not counted)"
        )
        pairs = ", ".join(
            f"{n}->{m}: {lo}" + (f"-{hi}" if hi != lo else "")
            for n, peers in r.connections.items()
            for m, (lo, hi) in peers.items()
        )
        lines.append(f"  TCP connections node->peer HTTP port, idle (min-max of samples): {pairs}")
        lines.append(
            "  brokers fenced by the controller (sessions expired) / active controllers "
            f"elected: settling {r.settle.fencings} / {r.settle.elections}, "
            f"idle window {r.during_idle.fencings} / {r.during_idle.elections}, "
            f"load {r.during_load.fencings} / {r.during_load.elections}"
        )
    for r in results:
        lines.append(
            f"{r.partitions} partitions: stop after the load, seconds from SIGTERM to exit: "
            + ", ".join(
                f"node {n} "
                + (
                    f"{s:.1f}"
                    if (s := r.exited_s.get(n)) is not None
                    else f"killed at {STOP_GRACE_S}"
                )
                for n in NODES
            )
        )
    if len(results) >= 2:
        small, large = results[0], results[-1]
        dn = large.partitions - small.partitions
        per = ", ".join(
            f"node {n} {(large.idle.rss_mib[n] - small.idle.rss_mib[n]) * 1024 / dn:.0f}"
            for n in NODES
        )
        lines.append(
            f"RSS per added replica between {small.partitions} and {large.partitions} "
            f"partitions (KiB): {per}"
        )
    return "\n".join(lines)


def _setting(text: str) -> tuple[str, int]:
    key, _, value = text.partition("=")
    return key.strip(), int(value)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--partitions-per-topic", type=int, default=250)
    parser.add_argument("--measure-s", type=float, default=30)
    # Longer than aiohttp's 15 s keep-alive: the wait's describe calls have
    # closed their pooled connections before the idle window.
    parser.add_argument("--settle-s", type=float, default=20)
    parser.add_argument("--rate", type=float, default=200, help="produce requests per second")
    parser.add_argument("--records-per-batch", type=int, default=10)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--inflight-max", type=int, default=64)
    parser.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="HTTP ports base+1..3, Raft base+10001..10003, controller "
        "base+10101..10103, +200 per run; "
        "default: a free base below the ephemeral range (scripts/loopback_ports.py)",
    )
    parser.add_argument("--dir", default=None, help="parent of the temporary cluster dirs")
    parser.add_argument("--keep", action="store_true", help="keep the cluster dirs")
    parser.add_argument(
        "--controller",
        action="append",
        default=[],
        type=_setting,
        metavar="KEY=INT",
        help="a [controller] setting for every node, e.g. broker_session_timeout_ms=9000",
    )
    args = parser.parse_args()
    results: list[RunResult] = []
    runs = sorted(args.partitions)
    base_port = base_port_for(args.base_port, len(runs))
    try:
        for i, n in enumerate(runs):
            results.append(run(n, args, base_port + RUN_PORT_STRIDE * i))
    finally:
        if results:  # the runs that finished, even when a later one failed
            print()
            print(report(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
