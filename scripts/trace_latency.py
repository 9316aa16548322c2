"""Where one record's end-to-end time goes at a paced rate: a traced latency run.

    .venv/bin/python scripts/trace_latency.py [--rate 2000] [--seconds 8] [--linger-ms 5]
        [--base-port 9710] [--dir /tmp/trace-latency] [--max-in-flight N]
        [--client sync|asyncio]

Starts a 3-node cluster of this tree with `scripts/local_cluster.py` (its
nodes carry the trace points of scripts/latency_trace_hooks.py, installed by
a `sitecustomize` on their PYTHONPATH), creates a fresh topic of 3
partitions (RF 3, min ISR 2, leaders spread over the nodes), then runs the
issue's latency load in this process: the Python client producing on a
schedule (acks=all, idempotence, `--linger-ms`, 100 B values) and consuming
in a thread, as `lograft_latency` in scripts/compare_load.py (`--client
asyncio`: an AsyncProducer and an AsyncConsumer on one event loop, as its
`lograft_latency_async`). The client's
own trace points (each produce request's start and answer) wrap this
process's transport. Every event is stamped with `time.perf_counter_ns()`
(CLOCK_MONOTONIC, shared by the processes); the events are joined per
record by (partition, offset) and the script prints one table: each step of
a record's path with its p50 / p90 / p99 in ms and how many records had it.

The critical path of an acks=all record, in order (each step ends where the
next begins):

    scheduled -> send() returned -> its batch's request starts -> the leader's
    produce handler runs -> appended -> the slower follower's parked fetch is
    answered with it -> that follower starts applying it -> applied -> that
    follower's next fetch is served by the leader -> the HW passes the record ->
    the produce handler returns -> the client has the answer

and the consumer's branch from the HW move: the leader answers the consumer's
fetch -> `poll` returns it in the consuming thread. The "slower follower" is
the one whose next fetch (the one that reports the record) reaches the leader
last: with RF 3 and all replicas in the ISR the HW waits for both.

The trace costs CPU in the nodes and the client (a clock read and a list
append per event, a JSON parse per produce answer in the client), so its
e2e figures run a little above an untraced run's: compare runs of this
script with each other, and use scripts/bench_compare.py for headline
figures. The cluster is stopped at the end (the nodes write their last
events at exit); its data and the trace files stay under `--dir`, which
is wiped at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import proc_cpu_s
from compare_load import polling_from_end, value_of
from latency_trace_hooks import OUT_ENV

SCRIPTS = Path(__file__).resolve().parent
PARTITIONS = 3
VALUE_BYTES = 100
# How long the consumer may take to see the last records after the producer's flush, s.
DRAIN_S = 15.0
# The untimed records sent before the paced run (connections, metadata, first batches).
WARM_RECORDS = 200


@dataclass
class Event:
    kind: str
    pid: int
    fields: list[int]


def start_cluster(directory: Path, base_port: int, hooks_dir: Path, trace_dir: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hooks_dir), env.get("PYTHONPATH", "")) if p)
    env[OUT_ENV] = str(trace_dir)
    subprocess.run(
        [sys.executable, str(SCRIPTS / "local_cluster.py"), "start", "--dir", str(directory),
         "--base-port", str(base_port)],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def stop_cluster(directory: Path, base_port: int) -> None:
    subprocess.run(
        [sys.executable, str(SCRIPTS / "local_cluster.py"), "stop", "--dir", str(directory),
         "--base-port", str(base_port)],
        check=False, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def write_sitecustomize(hooks_dir: Path) -> None:
    hooks_dir.mkdir(parents=True, exist_ok=True)
    (hooks_dir / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(SCRIPTS)!r})\n"
        "import latency_trace_hooks\nlatency_trace_hooks.install()\n"
    )


def node_pids(directory: Path) -> dict[int, int]:
    """pid -> node id (the local cluster's node n is broker n)."""
    return {int((directory / f"node-{n}.pid").read_text()): n for n in (1, 2, 3)}


def read_events(trace_dir: Path, topic: str) -> list[Event]:
    """The events of `topic` (the nodes trace every topic's partitions)."""
    out = []
    for path in trace_dir.glob("trace-*.txt"):
        pid = int(path.stem.split("-")[1])
        for line in path.read_text().splitlines():
            kind, tp, *rest = line.split()
            name, _, part = tp.rpartition("/")
            if name == topic:
                out.append(Event(kind, pid, [int(part), *map(int, rest)]))
    return out


class ClientTrace:
    """The produce requests of this process: (partition, first, last, t_start, t_answer)."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, int, int, int, int]] = []

    def install(self) -> None:
        from lograft.client.transport import HttpTransport

        orig = HttpTransport.request
        requests = self.requests

        async def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            resp = await orig(self, method, url, *args, **kwargs)
            if method == "POST" and "/batches" in url and resp.ok and resp.body:
                t1 = time.perf_counter_ns()
                doc = resp.json()
                part = int(url.split("/partitions/")[1].split("/")[0])
                requests.append((part, int(doc["base_offset"]), int(doc["last_offset"]), t0, t1))
            return resp

        HttpTransport.request = request  # type: ignore[method-assign]


def run_load(args: argparse.Namespace, bootstrap: str, topic: str) -> dict[str, Any]:
    from lograft.client import Consumer, Producer, TopicPartition

    consumed: dict[tuple[int, int], int] = {}  # (partition, offset) -> ns poll returned
    ready, stop = threading.Event(), threading.Event()

    def consume() -> None:
        with Consumer(bootstrap, fetch_max_wait_ms=500) as c:
            parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.assign(parts)
            c.seek_to_end(*parts)
            for tp in parts:
                c.position(tp)
            ready.set()
            while not stop.is_set():
                for records in c.poll(timeout_ms=100).values():
                    now = time.perf_counter_ns()
                    for r in records:
                        consumed[(r.partition, r.offset)] = now

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    if not ready.wait(60):
        raise SystemExit("the consumer did not start in 60 s")
    count = int(args.rate * args.seconds)
    sent_at: list[int] = [0] * count
    futures: list[Any] = [None] * count
    extra = {}
    if args.max_in_flight is not None:
        extra["max_in_flight_per_partition"] = args.max_in_flight
    with Producer(
        bootstrap, acks="all", enable_idempotence=True, linger_ms=args.linger_ms, **extra
    ) as p:
        for i in range(WARM_RECORDS):
            p.send(topic, value_of(-1, VALUE_BYTES), partition=i % PARTITIONS)
        p.flush()
        start = time.perf_counter_ns() + 50_000_000
        step = 1e9 / args.rate
        for i in range(count):
            delay = (start + i * step - time.perf_counter_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)  # the schedule itself, not a synchronisation
            futures[i] = p.send(topic, value_of(i, VALUE_BYTES))
            sent_at[i] = time.perf_counter_ns()
        p.flush()
        retries = p.stats.retries
    where = {}
    for i, fut in enumerate(futures):
        md = fut.result(30)
        where[i] = (md.partition, md.offset)
    deadline = time.monotonic() + DRAIN_S
    while len(consumed) < count + WARM_RECORDS and time.monotonic() < deadline:
        time.sleep(0.05)  # the consumer thread fills `consumed`; waited with a deadline
    stop.set()
    t.join(10)
    return {"start": start, "step": step, "sent_at": sent_at, "where": where,
            "consumed": consumed, "count": count, "retries": retries}  # fmt: skip


def run_load_async(args: argparse.Namespace, bootstrap: str, topic: str) -> dict[str, Any]:
    """`run_load` with the asyncio client (`--client asyncio`): an AsyncProducer
    and an AsyncConsumer on one uvloop loop in this thread, as bench_compare's
    "lograft asyncio" latency column."""
    from lograft.client.loop_thread import new_loop

    loop = new_loop("uvloop")
    try:
        return loop.run_until_complete(_run_load_async(args, bootstrap, topic))
    finally:
        loop.close()


async def _run_load_async(args: argparse.Namespace, bootstrap: str, topic: str) -> dict[str, Any]:
    import asyncio

    from lograft.client import AsyncProducer

    consumed: dict[tuple[int, int], int] = {}  # (partition, offset) -> ns poll returned
    extra = {}
    if args.max_in_flight is not None:
        extra["max_in_flight_per_partition"] = args.max_in_flight

    def on_records(records: list[Any]) -> None:
        now = time.perf_counter_ns()
        for r in records:
            consumed[(r.partition, r.offset)] = now

    async with polling_from_end(bootstrap, topic, PARTITIONS, on_records):
        count = int(args.rate * args.seconds)
        sent_at: list[int] = [0] * count
        futures: list[Any] = [None] * count
        async with AsyncProducer(
            bootstrap, acks="all", enable_idempotence=True, linger_ms=args.linger_ms, **extra
        ) as p:
            for i in range(WARM_RECORDS):
                await p.send(topic, value_of(-1, VALUE_BYTES), partition=i % PARTITIONS)
            await p.flush()
            start = time.perf_counter_ns() + 50_000_000
            step = 1e9 / args.rate
            for i in range(count):
                delay = (start + i * step - time.perf_counter_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)  # the schedule itself
                futures[i] = await p.send(topic, value_of(i, VALUE_BYTES))
                sent_at[i] = time.perf_counter_ns()
            await p.flush()
            retries = p.stats.retries
        where = {}
        for i, fut in enumerate(futures):
            md = await asyncio.wait_for(fut, 30)
            where[i] = (md.partition, md.offset)
        deadline = time.monotonic() + DRAIN_S
        while len(consumed) < count + WARM_RECORDS and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the consumer task fills `consumed`; waited with a deadline
    return {"start": start, "step": step, "sent_at": sent_at, "where": where,
            "consumed": consumed, "count": count, "retries": retries}  # fmt: skip


class Index:
    """Events of one kind per key, sorted by time, for 'first after t' look-ups."""

    def __init__(self) -> None:
        self.by_key: dict[Any, list[tuple[int, list[int]]]] = defaultdict(list)

    def add(self, key: Any, t: int, fields: list[int]) -> None:
        self.by_key[key].append((t, fields))

    def sort(self) -> None:
        for v in self.by_key.values():
            v.sort(key=lambda e: e[0])

    def first(self, key: Any, after: int, match: Callable[[list[int]], bool]) -> int | None:
        events = self.by_key.get(key, [])
        i = bisect_left(events, after, key=lambda e: e[0])
        for t, fields in events[i:]:
            if match(fields):
                return t
        return None


def spans_index(rows: list[tuple[int, int, int, Any]]) -> dict[int, list[tuple[int, int, Any]]]:
    """partition -> sorted [(first, last, payload)]."""
    out: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
    for part, first, last, payload in rows:
        out[part].append((first, last, payload))
    for v in out.values():
        v.sort(key=lambda r: (r[0], r[1]))
    return out


def covering(index: dict[int, list[tuple[int, int, Any]]], part: int, offset: int) -> Any:
    rows = index.get(part, [])
    i = bisect_left(rows, (offset + 1,)) - 1
    while i >= 0:
        first, last, payload = rows[i]
        if first <= offset <= last:
            return payload
        if last < offset:
            return None
        i -= 1
    return None


STEPS = [
    ("scheduled -> send() returned", "sched", "sent"),
    ("send() -> its batch's request starts (linger, behind the request in flight)", "sent", "req"),
    ("request starts -> leader's produce handler runs", "req", "p_in"),
    (
        "- of it: request starts -> the leader's request pipeline (client, loopback, aiohttp)",
        "req",
        "s_in",
    ),
    ("- of it: request pipeline -> the HTTP handler (body read, auth, quotas)", "s_in", "h_in"),
    ("- of it: HTTP handler -> the replica manager's produce (checks)", "h_in", "p_in"),
    ("handler -> appended", "p_in", "app"),
    ("appended -> slower follower's fetch answered with it", "app", "r_slow"),
    ("answer -> slower follower starts applying", "r_slow", "y0_slow"),
    ("follower applies", "y0_slow", "y1_slow"),
    ("applied -> its next fetch served by the leader", "y1_slow", "f_slow"),
    ("that fetch served -> HW passes the record", "f_slow", "hw"),
    ("HW moves -> produce handler returns", "hw", "p_out"),
    ("produce handler returns -> client has the answer", "p_out", "ans"),
    ("- of it: produce returns -> the HTTP handler returns", "p_out", "h_out"),
    ("- of it: HTTP handler returns -> the request pipeline returns", "h_out", "s_out"),
    ("- of it: request pipeline returns -> client has the answer", "s_out", "ans"),
    ("HW moves -> consumer fetch answered on the leader", "hw", "c"),
    ("consumer fetch answered -> poll returns it", "c", "polled"),
    ("scheduled -> client has the produce answer", "sched", "ans"),
    ("scheduled -> consumed (e2e)", "sched", "polled"),
]


def join(load: dict[str, Any], events: list[Event], pids: dict[int, int], client: ClientTrace):
    produce, appends, consumer = [], [], []
    applies: dict[int, list[tuple[int, int, int, Any]]] = defaultdict(list)  # node -> rows
    answers = Index()  # (part, follower) -> R events
    served = Index()  # (part, follower) -> F events
    hws = Index()  # part -> H events
    handlers: dict[int, list[tuple[int, int]]] = defaultdict(list)  # part -> Q (in, out)
    pipelines: dict[int, list[tuple[int, int]]] = defaultdict(list)  # part -> S (in, out)
    for e in events:
        f = e.fields
        part = f[0]
        if e.kind == "P":
            produce.append((part, f[1], f[2], (f[3], f[4])))
        elif e.kind == "A":
            appends.append((part, f[1], f[2], f[3]))
        elif e.kind == "C":
            consumer.append((part, f[1], f[2], f[3]))
        elif e.kind == "Y":
            applies[pids.get(e.pid, -1)].append((part, f[1], f[2], (f[3], f[4])))
        elif e.kind == "R":
            answers.add((part, f[1]), f[4], [f[2], f[3]])
        elif e.kind == "F":
            served.add((part, f[1]), f[3], [f[2]])
        elif e.kind == "H":
            hws.add(part, f[2], [f[1]])
        elif e.kind == "Q":
            handlers[part].append((f[1], f[2]))
        elif e.kind == "S":
            pipelines[part].append((f[1], f[2]))
    for ix in (answers, served, hws):
        ix.sort()
    for spans in [*handlers.values(), *pipelines.values()]:
        spans.sort()
    produce_ix, append_ix = spans_index(produce), spans_index(appends)
    req_ix = spans_index([(p, a, b, (t0, t1)) for p, a, b, t0, t1 in client.requests])
    apply_ix = {node: spans_index(rows) for node, rows in applies.items()}
    # A consumer fetch can be answered twice with the same data (a rewind): the first counts.
    consumer_first: dict[int, list[tuple[int, int, Any]]] = spans_index(consumer)
    followers = sorted(apply_ix)
    rows: dict[str, list[float]] = defaultdict(list)
    for i in range(load["count"]):
        part, off = load["where"][i]
        m: dict[str, int | None] = {
            "sched": int(load["start"] + i * load["step"]),
            "sent": load["sent_at"][i],
            "polled": load["consumed"].get((part, off)),
        }
        req = covering(req_ix, part, off)
        m["req"], m["ans"] = req if req else (None, None)
        p = covering(produce_ix, part, off)
        m["p_in"], m["p_out"] = p if p else (None, None)
        m["h_in"], m["h_out"] = _enclosing(handlers.get(part, []), m["p_in"], m["p_out"])
        m["s_in"], m["s_out"] = _enclosing(pipelines.get(part, []), m["h_in"], m["h_out"])
        m["app"] = covering(append_ix, part, off)
        m["c"] = _first_consumer(consumer_first, part, off)
        slow = None
        for node in followers:
            y = covering(apply_ix[node], part, off)
            if y is None or m["app"] is None:
                continue
            f_t = served.first((part, node), y[1], lambda f, o=off: f[0] > o)
            if f_t is not None and (slow is None or f_t > slow[0]):
                r_t = answers.first((part, node), m["app"], lambda f, o=off: f[0] <= o <= f[1])
                slow = (f_t, y, r_t)
        if slow is not None:
            m["f_slow"], (m["y0_slow"], m["y1_slow"]), m["r_slow"] = slow
            m["hw"] = hws.first(part, m["app"] or 0, lambda f, o=off: f[0] > o)
        for name, a, b in STEPS:
            ta, tb = m.get(a), m.get(b)
            if ta is not None and tb is not None:
                rows[name].append((tb - ta) / 1e6)
    return rows


def _enclosing(
    spans: list[tuple[int, int]], t_in: int | None, t_out: int | None
) -> tuple[int | None, int | None]:
    """The (entry, return) of the handler span, of sorted `spans`, that holds
    [t_in, t_out]: the last one entered at or before t_in ((None, None) if none)."""
    if t_in is None or t_out is None:
        return None, None
    i = bisect_left(spans, (t_in + 1,)) - 1
    if i >= 0 and spans[i][1] >= t_out:
        return spans[i]
    return None, None


def _first_consumer(index: dict[int, list[tuple[int, int, Any]]], part: int, off: int) -> Any:
    best = None
    for first, last, t in index.get(part, []):
        if first <= off <= last and (best is None or t < best):
            best = t
    return best


def loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q / 100))]


def print_table(
    rows: dict[str, list[float]],
    count: int,
    steps: list[tuple[str, str, str]] = STEPS,
    unit: str = "record",
) -> None:
    print(f"| step of one {unit} | p50 ms | p90 ms | p99 ms | {unit}s |")
    print("|---|---|---|---|---|")
    for name, _a, _b in steps:
        v = rows.get(name, [])
        if not v:
            print(f"| {name} | - | - | - | 0/{count} |")
            continue
        print(
            f"| {name} | {pct(v, 50):.2f} | {pct(v, 90):.2f} | {pct(v, 99):.2f} "
            f"| {len(v)}/{count} |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rate", type=float, default=2000, help="records/s")
    ap.add_argument("--seconds", type=float, default=8, help="length of the paced run, s")
    ap.add_argument("--linger-ms", type=int, default=5, help="the producer's linger_ms")
    ap.add_argument("--max-in-flight", type=int, default=None,
                    help="max_in_flight_per_partition (default: the producer's)")  # fmt: skip
    ap.add_argument("--client", choices=("sync", "asyncio"), default="sync",
                    help="sync: Producer + Consumer polling in a thread (bench_compare's "
                    "lograft column); asyncio: AsyncProducer + AsyncConsumer on one loop "
                    "(its lograft asyncio column)")  # fmt: skip
    ap.add_argument("--base-port", type=int, default=9710, help="local_cluster.py --base-port")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/trace-latency"), help="cluster dir")
    args = ap.parse_args()
    directory = args.dir.resolve()
    if directory.exists():
        stop_cluster(directory, args.base_port)
        shutil.rmtree(directory)
    trace_dir, hooks_dir = directory / "trace", directory / "hooks"
    trace_dir.mkdir(parents=True)
    write_sitecustomize(hooks_dir)
    load_before = loadavg()
    try:
        # Inside the try: a node that failed to start (its port taken) must not
        # leave the others running.
        start_cluster(directory, args.base_port, hooks_dir, trace_dir)
        bootstrap = ",".join(f"127.0.0.1:{args.base_port + n}" for n in (1, 2, 3))
        topic = f"trace-{int(time.time())}"
        from lograft.client import Admin

        with Admin(bootstrap) as admin:
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                               configs={"min_insync_replicas": "2"})  # fmt: skip
        client = ClientTrace()
        client.install()
        pids = node_pids(directory)
        nodes0 = {pid: proc_cpu_s([pid]) for pid in pids}
        cpu0, wall0 = time.process_time(), time.perf_counter()
        load = (run_load_async if args.client == "asyncio" else run_load)(args, bootstrap, topic)
        client_cpu, load_s = time.process_time() - cpu0, time.perf_counter() - wall0
        node_cpu = {f"node{n}": round(proc_cpu_s([p]) - nodes0[p], 2) for p, n in pids.items()}
    finally:
        stop_cluster(directory, args.base_port)  # the nodes write their last events at exit
    rows = join(load, read_events(trace_dir, topic), pids, client)
    e2e = rows.get("scheduled -> consumed (e2e)", [])
    print(json.dumps({
        "rate": args.rate, "seconds": args.seconds, "linger_ms": args.linger_ms,
        "client": args.client,
        "max_in_flight": args.max_in_flight, "records": load["count"],
        "consumed": len(e2e), "produce_requests": len(client.requests),
        "produce_retries": load["retries"],
        "load_s": round(load_s, 2), "client_cpu_s": round(client_cpu, 2), "node_cpu_s": node_cpu,
        "loadavg_before": load_before, "loadavg_after": loadavg(),
        "e2e_p50_ms": round(statistics.median(e2e), 2) if e2e else None,
    }))  # fmt: skip
    print_table(rows, load["count"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
