"""One hostile request at a time (after an unmeasured warm-up) against a running cluster, and the
worst `/healthz` latency on the node that served it while it ran: how long
that request can hold the node's event loop (issue 9: under 100 ms).

Start a cluster first (`scripts/local_cluster.py --dir /tmp/rt --base-port 9391
start`), then `python scripts/loop_stalls.py --base-port 9391`. Cases:

- `describe-wide`: `GET /v1/topics/wide` on node 2 for a topic of 2,000
  partitions (created if missing), most of them led by other nodes;
- `join-8mb`: a group join whose body is an 8 MB array of topic names;
- `join-1mb`: the same just under `admin_request_bytes_max` (1 MiB);
- `produce-10k`: a JSON produce of 10,000 small records (0.4 MB);
- `produce-16mb`: a JSON produce of 10,000 records of 1.6 KB (15 MB);
- `config-5000-digits`: a topic config value of 5,000 digits (refused), and
  the size of the error answer.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
import urllib.error
import urllib.request


class HealthProbe:
    """Polls /healthz on one node from a thread; keeps the worst latency."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.worst_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                s.recv(100)
            self.worst_s = max(self.worst_s, time.monotonic() - start)
            time.sleep(0.005)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.worst_s * 1000


def call(port: int, method: str, path: str, body: bytes | None) -> tuple[int, bytes, float]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status, data = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, data = exc.code, exc.read()
    return status, data, (time.monotonic() - start) * 1000


def measure(port: int, method: str, path: str, body: bytes | None, runs: int) -> str:
    call(port, method, path, body)  # warm-up, not measured (a new topic's logs opening)
    worst_request = worst_health = 0.0
    status, size, data = 0, 0, b""
    for _ in range(runs):
        probe = HealthProbe(port)
        time.sleep(0.05)
        status, data, took = call(port, method, path, body)
        worst_health = max(worst_health, probe.stop())
        worst_request = max(worst_request, took)
        size = len(data)
    error = f" {data[:120].decode(errors='replace')}" if status >= 400 else ""
    return (
        f"HTTP {status}, answer {size} bytes, request {worst_request:.0f} ms, "
        f"worst /healthz {worst_health:.0f} ms{error}"
    )


def wait_for(port: int, method: str, path: str, body: bytes | None = None) -> bytes:
    """Repeat a request until it succeeds (a new topic, the offsets topic), for 120 s."""
    deadline = time.monotonic() + 120
    while True:
        status, data, _ = call(port, method, path, body)
        if status < 300 or time.monotonic() > deadline:
            return data
        time.sleep(1)


def coordinator_port(port: int, group: str) -> int:
    doc = json.loads(wait_for(port, "GET", f"/v1/groups/{group}/coordinator"))
    return int(doc["coordinator_url"].rsplit(":", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-port", type=int, default=9091)
    parser.add_argument("--runs", type=int, default=3, help="worst of this many runs")
    parser.add_argument(
        "cases",
        nargs="*",
        default=["describe-wide", "join-8mb", "join-1mb", "produce-10k", "produce-16mb", "config"],
    )
    args = parser.parse_args()
    node1, node2 = args.base_port + 1, args.base_port + 2
    # A small topic for produce and joins, every node knowing it.
    spec = {"name": "stalls", "partitions": 3, "replication_factor": 3}
    call(node1, "POST", "/v1/topics", json.dumps(spec).encode())
    wait_for(node1, "POST", "/v1/topics/stalls/records", b'{"records": [{"value": 1}]}')
    coordinator = coordinator_port(node1, "stalls")
    for case in args.cases:
        if case == "describe-wide":
            spec = {"name": "wide", "partitions": 2000, "replication_factor": 3}
            call(node1, "POST", "/v1/topics", json.dumps(spec).encode())
            result = measure(node2, "GET", "/v1/topics/wide", None, args.runs)
        elif case == "join-8mb":
            body = json.dumps({"subscribed_topics": ["stalls"] * 1_000_000}).encode()
            result = measure(coordinator, "POST", "/v1/groups/stalls/members", body, args.runs)
        elif case == "join-1mb":
            body = json.dumps({"subscribed_topics": ["stalls"] * 100_000}).encode()
            result = measure(coordinator, "POST", "/v1/groups/stalls/members", body, args.runs)
        elif case in ("produce-10k", "produce-16mb"):
            value = "x" if case == "produce-10k" else "x" * 1600
            body = json.dumps({"records": [{"value": value}] * 10_000}).encode()
            result = measure(node1, "POST", "/v1/topics/stalls/records", body, args.runs)
        elif case == "config":
            body = json.dumps({"configs": {"retention_ms": "9" * 5000}}).encode()
            result = measure(node1, "PATCH", "/v1/topics/stalls/configs", body, args.runs)
        else:
            raise SystemExit(f"unknown case {case!r}")
        print(f"{case}: {result}", flush=True)


if __name__ == "__main__":
    main()
