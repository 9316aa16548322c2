#!/usr/bin/env python3
"""Measure Raft commit latency on a local 3-voter cluster of real processes.

Starts three `tests/integration/raft_node_main.py` processes on 127.0.0.1
(random ports, a temp dir), finds the leader, and runs N sequential appends
*inside the leader process* (so HTTP is not measured): each append is timed
from `await adapter.append()` to its return, i.e. replicated to a majority,
committed and applied on the leader. Prints percentiles for pysyncobj's
immediate-send mode (our default) and its batching mode (a tenth as many
appends: each waits for a heartbeat), with the production Raft timings.

    .venv/bin/python scripts/bench_raft_latency.py [--appends 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import msgspec.structs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lograft.quorum.raft.config import RaftTuning
from tests.integration.raft_harness import ProcessCluster
from tests.raft_support import FAST_TIMINGS


def percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


# Production timings (RaftConfig defaults), not the tests' fast ones: the
# batched mode's latency is tied to the heartbeat interval.
DEFAULT_TIMINGS = {
    f.name: f.default for f in msgspec.structs.fields(RaftTuning) if f.name in FAST_TIMINGS
}


def measure(appends: int, send_entries_immediately: bool) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="lograft-raft-bench-") as tmp:
        cluster = ProcessCluster(
            Path(tmp),
            ["1", "2", "3"],
            send_entries_immediately=send_entries_immediately,
            **DEFAULT_TIMINGS,
        )
        try:
            cluster.start()
            leader = cluster.leader()
            leader.bench(50)  # warm up connections and code paths
            return sorted(leader.bench(appends))
        finally:
            cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=1000)
    args = parser.parse_args()
    print(f"3 voters on 127.0.0.1, {args.appends} sequential appends timed on the leader")
    print(f"{'mode':<22}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'mean ms':>9}")
    # The batched mode waits for a heartbeat per append: fewer appends suffice.
    runs = (("immediate (default)", True, args.appends), ("batched", False, args.appends // 10))
    for label, immediate, appends in runs:
        lat = measure(max(appends, 10), immediate)
        print(
            f"{label:<22}{statistics.median(lat):>9.2f}{percentile(lat, 0.9):>9.2f}"
            f"{percentile(lat, 0.99):>9.2f}{lat[-1]:>9.2f}{statistics.fmean(lat):>9.2f}"
        )


if __name__ == "__main__":
    main()
