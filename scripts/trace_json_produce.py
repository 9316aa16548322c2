"""Where one JSON produce request's time goes: a traced run of bench_compare's JSON load.

    .venv/bin/python scripts/trace_json_produce.py [--seconds 6] [--value-bytes 100]
        [--records 500] [--base-port 9710] [--dir /tmp/trace-json-produce]

The JSON load of scripts/bench_compare.py (`lograft_json_produce` in
scripts/compare_load.py) posts one body of `--records` keyless records
(`value_format: string`) after another on one kept connection to node 1,
acks=all, so its records/s is `--records` divided by one request's time.
This script runs that load against a 3-node cluster of this tree whose nodes
carry the trace points of scripts/latency_trace_hooks.py (as
scripts/trace_latency.py does; 3 partitions, RF 3, min ISR 2, leaders
spread), after 2 s untimed, and prints per request the steps of its critical
path with their p50 / p90 / p99 in ms:

    the client sends -> the handler starts (HTTP in, the request pipeline) ->
    the produce starts (body read, JSON decoded, batch built) -> appended ->
    the slower follower's parked fetch is answered with it -> that follower
    starts applying it -> applied -> its next fetch is served by the leader ->
    the HW passes the request's last record -> the produce returns -> the
    handler returns (the answer rendered) -> the client has the answer (sent,
    and read by the client)

joined by (partition, last offset). "The slower follower" is the one whose
reporting fetch reaches the leader last. Every event is stamped with
`time.perf_counter_ns()` (CLOCK_MONOTONIC, shared by the processes); the trace
costs the nodes a little CPU, so compare runs of this script with each other
and take headline figures from scripts/bench_compare.py. The cluster is
stopped at the end; its data and trace files stay under `--dir`, which is
wiped at the start.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import sys
import time
from bisect import bisect_right
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trace_latency as tl
from compare_load import value_of

PARTITIONS = 3
WARM_S = 2.0

STEPS = [
    ("client sends -> the handler starts (HTTP in, the request pipeline)", "sent", "j_in"),
    ("handler starts -> produce starts (body read, JSON decode, batch built)", "j_in", "p_in"),
    ("produce starts -> appended", "p_in", "app"),
    ("appended -> slower follower's fetch answered with it", "app", "r_slow"),
    ("answer -> slower follower starts applying", "r_slow", "y0_slow"),
    ("follower applies", "y0_slow", "y1_slow"),
    ("applied -> its next fetch served by the leader", "y1_slow", "f_slow"),
    ("that fetch served -> HW passes the request", "f_slow", "hw"),
    ("HW moves -> produce returns", "hw", "p_out"),
    ("produce returns -> handler returns (the answer rendered)", "p_out", "j_out"),
    ("handler returns -> client has the answer (sent, read)", "j_out", "ans"),
    ("client sends -> client has the answer", "sent", "ans"),
]


def post_serially(
    port: int, topic: str, seconds: float, records: int, value_bytes: int
) -> list[tuple[int, int, int, int]]:
    """(partition, last offset, ns sent, ns answered) of each request after WARM_S."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    text = value_of(0, value_bytes).decode()
    body = json.dumps({"value_format": "string", "records": [{"value": text}] * records}).encode()
    headers = {"Content-Type": "application/json"}
    out = []
    counted_from = time.perf_counter_ns() + int(WARM_S * 1e9)
    end = counted_from + int(seconds * 1e9)
    try:
        while (sent := time.perf_counter_ns()) < end:
            conn.request("POST", f"/v1/topics/{topic}/records", body, headers)
            resp = conn.getresponse()
            answer = resp.read()
            answered = time.perf_counter_ns()
            if resp.status != 200:
                raise SystemExit(f"produce answered {resp.status}: {answer[:300]!r}")
            if sent >= counted_from:
                last = json.loads(answer)["offsets"][-1]
                out.append((last["partition"], last["offset"], sent, answered))
    finally:
        conn.close()
    return out


def join(
    requests: list[tuple[int, int, int, int]], events: list[tl.Event], pids: dict[int, int]
) -> dict[str, list[float]]:
    produced: dict[tuple[int, int], tuple[int, int]] = {}
    appended: dict[tuple[int, int], int] = {}
    answers = tl.Index()  # (part, follower) -> R events
    served = tl.Index()  # (part, follower) -> F events
    hws = tl.Index()  # part -> H events
    applies: dict[tuple[int, int], list[tuple[int, int, int, int]]] = defaultdict(list)
    handlers: list[tuple[int, int]] = []  # (entry, return) of each JSON produce handler
    for e in events:
        f = e.fields
        if e.kind == "J":
            handlers.append((f[1], f[2]))
        elif e.kind == "P":
            produced[(f[0], f[2])] = (f[3], f[4])
        elif e.kind == "A":
            appended[(f[0], f[2])] = f[3]
        elif e.kind == "R":
            answers.add((f[0], f[1]), f[4], [f[2], f[3]])
        elif e.kind == "F":
            served.add((f[0], f[1]), f[3], [f[2]])
        elif e.kind == "H":
            hws.add(f[0], f[2], [f[1]])
        elif e.kind == "Y":
            applies[(f[0], pids.get(e.pid, -1))].append((f[1], f[2], f[3], f[4]))
    for ix in (answers, served, hws):
        ix.sort()
    handlers.sort()
    rows: dict[str, list[float]] = defaultdict(list)
    for part, last, sent, answered in requests:
        m: dict[str, int | None] = {"sent": sent, "ans": answered}
        m["p_in"], m["p_out"] = produced.get((part, last), (None, None))
        if m["p_in"] is not None:
            # The requests are serial: the handler around a produce is the last
            # one to start before it.
            i = bisect_right(handlers, (m["p_in"], 1 << 63)) - 1
            if i >= 0 and handlers[i][1] >= m["p_in"]:
                m["j_in"], m["j_out"] = handlers[i]
        m["app"] = app = appended.get((part, last))
        slow = None
        for node in pids.values():
            y = next(((y0, y1) for a, b, y0, y1 in applies[(part, node)] if a <= last <= b), None)
            if y is None or app is None:
                continue
            f_t = served.first((part, node), y[1], lambda f, o=last: f[0] > o)
            if f_t is not None and (slow is None or f_t > slow[0]):
                r_t = answers.first((part, node), app, lambda f, o=last: f[0] <= o <= f[1])
                slow = (f_t, y, r_t)
        if slow is not None:
            m["f_slow"], (m["y0_slow"], m["y1_slow"]), m["r_slow"] = slow
            m["hw"] = hws.first(part, slow[0], lambda f, o=last: f[0] > o)
        for name, a, b in STEPS:
            ta, tb = m.get(a), m.get(b)
            if ta is not None and tb is not None:
                rows[name].append((tb - ta) / 1e6)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seconds", type=float, default=6, help="counted seconds of the load")
    ap.add_argument("--value-bytes", type=int, default=100, help="each record's value, bytes")
    ap.add_argument("--records", type=int, default=500, help="records per request")
    ap.add_argument("--base-port", type=int, default=9710, help="local_cluster.py --base-port")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/trace-json-produce"))
    args = ap.parse_args()
    directory = args.dir.resolve()
    if directory.exists():
        tl.stop_cluster(directory, args.base_port)
        shutil.rmtree(directory)
    trace_dir, hooks_dir = directory / "trace", directory / "hooks"
    trace_dir.mkdir(parents=True)
    tl.write_sitecustomize(hooks_dir)
    load_before = tl.loadavg()
    try:
        tl.start_cluster(directory, args.base_port, hooks_dir, trace_dir)
        bootstrap = ",".join(f"127.0.0.1:{args.base_port + n}" for n in (1, 2, 3))
        topic = f"trace-json-{int(time.time())}"
        from lograft.client import Admin

        with Admin(bootstrap) as admin:
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                               configs={"min_insync_replicas": "2"})  # fmt: skip
        requests = post_serially(
            args.base_port + 1, topic, args.seconds, args.records, args.value_bytes
        )
        pids = tl.node_pids(directory)
    finally:
        tl.stop_cluster(directory, args.base_port)  # the nodes write their last events at exit
    rows = join(requests, tl.read_events(trace_dir, topic), pids)
    print(json.dumps({
        "seconds": args.seconds, "records_per_request": args.records,
        "value_bytes": args.value_bytes, "requests": len(requests),
        "records_per_s": round(len(requests) * args.records / args.seconds),
        "loadavg_before": load_before, "loadavg_after": tl.loadavg(),
    }))  # fmt: skip
    tl.print_table(rows, len(requests), STEPS, unit="request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
