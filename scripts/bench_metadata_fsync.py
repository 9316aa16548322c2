#!/usr/bin/env python3
"""What fsyncing the metadata log costs: `[raft] journal_fsync` on vs off, same run.

On three-node local clusters (127.0.0.1, random ports, a temp dir on the
same filesystem as `--dir`), alternating the setting round by round so both
see the same machine load, measures from a client on the same host:

- **raw fsync**: append ~200 bytes to a file and fsync it, alone: what one
  fsync costs on this filesystem;
- **Raft append** (inside the leader process, no HTTP; the
  `tests/integration/raft_node_main.py` cluster of `bench_raft_latency.py`):
  replicated to a majority, each node fsynced, committed, applied;
- **topic creation**: `POST /v1/topics` (1 partition, RF 3) to the active
  controller of a `lograft node` cluster, one after another;
- **producer-ids**: `POST /internal/v1/controller/producer-ids`, one metadata
  record decided, committed and applied: the metadata commit through HTTP;
- **broker heartbeat**: `POST /internal/v1/controller/heartbeat` as a live
  broker sends it (no state change, so no record is appended; the metadata
  log is not written). A heartbeat that unfences a broker commits one record
  and costs what a producer-ids call costs.

Prints one table: p50/p90/p99/max in ms per row and setting.

    .venv/bin/python scripts/bench_metadata_fsync.py [--requests 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec.structs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lograft.quorum.raft.config import RaftTuning  # noqa: E402
from tests.integration.cluster_harness import LograftCluster  # noqa: E402
from tests.integration.raft_harness import ProcessCluster  # noqa: E402
from tests.raft_support import FAST_TIMINGS  # noqa: E402

# Production Raft timings (RaftTuning defaults), not the tests' fast ones.
DEFAULT_TIMINGS = {
    f.name: f.default for f in msgspec.structs.fields(RaftTuning) if f.name in FAST_TIMINGS
}
ROWS = ("raw fsync", "Raft append (in leader)", "POST /v1/topics", "producer-ids", "heartbeat")


def percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def raw_fsync(workdir: Path, count: int) -> list[float]:
    path = workdir / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.fsync(fd)

        def one() -> None:
            os.write(fd, b"x" * 200)
            os.fsync(fd)

        return [timed(one) for _ in range(count)]
    finally:
        os.close(fd)
        path.unlink()


def raft_appends(workdir: Path, count: int, fsync: bool) -> list[float]:
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = ProcessCluster(workdir, ["1", "2", "3"], journal_fsync=fsync, **DEFAULT_TIMINGS)
    try:
        cluster.start()
        leader = cluster.leader()
        leader.bench(50)  # warm up connections and code paths
        return leader.bench(count)
    finally:
        cluster.close()


def metadata_requests(workdir: Path, count: int, fsync: bool, tag: str) -> dict[str, list[float]]:
    cluster = LograftCluster(workdir, 3, raft={"journal_fsync": fsync})
    try:
        cluster.start()
        ctl = cluster.active_controller()
        topics = [
            timed(
                lambda i=i: ctl.ok(
                    "POST",
                    "/v1/topics",
                    {"name": f"bench-{tag}-{i}", "partitions": 1, "replication_factor": 3},
                    status=201,
                )
            )
            for i in range(count)
        ]
        broker = ctl.brokers()[ctl.node_id]
        ids_body = {"broker_id": ctl.node_id, "broker_epoch": broker["epoch"]}

        def producer_ids() -> None:
            resp = ctl.internal("controller/producer-ids", ids_body)
            assert resp.status == 200, resp

        ids = [timed(producer_ids) for _ in range(count)]
        beats = []
        for _ in range(count):
            offset = ctl.cluster_view().get("metadata_offset", 0)
            body = {**ids_body, "metadata_offset": offset, "want_shutdown": False}
            started = time.perf_counter()
            resp = ctl.internal("controller/heartbeat", body)
            beats.append((time.perf_counter() - started) * 1000)
            assert resp.status == 200 and not resp.body["fenced"], resp
        return {"POST /v1/topics": topics, "producer-ids": ids, "heartbeat": beats}
    except BaseException:
        print(cluster.logs(), file=sys.stderr)
        raise
    finally:
        cluster.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per row and round")
    parser.add_argument("--rounds", type=int, default=2, help="on/off alternations")
    parser.add_argument("--dir", type=Path, default=None, help="where the clusters write")
    args = parser.parse_args()

    print(f"# {platform.node()}: {platform.platform()}, Python {platform.python_version()}")
    print(f"# load before: {os.getloadavg()}")
    results: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="lograft-bench-fsync-", dir=args.dir) as tmp:
        base = Path(tmp)
        for r in range(args.rounds):
            for fsync in (True, False) if r % 2 == 0 else (False, True):
                work = base / f"round-{r}-fsync-{fsync}"
                work.mkdir()
                rows = {"raw fsync": raw_fsync(work, args.requests) if fsync else []}
                rows["Raft append (in leader)"] = raft_appends(work / "raft", args.requests, fsync)
                rows.update(metadata_requests(work / "nodes", args.requests, fsync, f"{r}"))
                for name, values in rows.items():
                    results.setdefault((name, fsync), []).extend(values)
                print(f"# round {r} journal_fsync={str(fsync).lower()} done", flush=True)
    print(f"# load after: {os.getloadavg()}")

    print("\nLatency, ms (sequential requests from one client)")
    columns = " ".join(f"{c:>7}" for c in ("p50", "p90", "p99", "max"))
    print(f"{'request':<26} {'journal_fsync':<13} {'n':>5} {columns}")
    for name in ROWS:
        for fsync in (True, False):
            values = sorted(results.get((name, fsync), []))
            if not values:
                continue
            print(
                f"{name:<26} {str(fsync).lower():<13} {len(values):>5} "
                f"{percentile(values, 0.5):>7.2f} {percentile(values, 0.9):>7.2f} "
                f"{percentile(values, 0.99):>7.2f} {values[-1]:>7.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
