"""The reads after a scenario healed: convergence, the final read, the replicas on disk.

1. `wait_converged`: every partition has a leader, its ISR is all of its
   replicas, and the leader's high watermark equals its log end offset (so
   every replica holds the whole log), as every running node sees it.
2. `final_read`: each partition from its log start up to that high
   watermark, through the public JSON fetch on the leader.
3. `replica_contents`: after the cluster is stopped (SIGKILL: no write is in
   progress once it converged, and the page cache keeps every write), each
   node's segment files below the final high watermark
   (tests/chaos/replica_logs.py explains why from disk).
"""

from __future__ import annotations

from typing import Any

from tests.chaos.history import PartitionLog
from tests.chaos.replica_logs import read_replica
from tests.integration.cluster_harness import ClusterNode, LograftCluster

# Records asked for per fetch of the final read (the API's fetch_records_max).
FINAL_READ_PAGE_RECORDS = 10_000


def _describe(node: ClusterNode, topic: str) -> dict[int, dict[str, Any]]:
    doc = node.topic(topic)
    assert doc is not None, f"topic {topic} unknown on node {node.node_id}"
    return {p["partition"]: p for p in doc["partitions"]}


def converged(cluster: LograftCluster, topic: str) -> dict[int, dict[str, Any]] | None:
    """The partitions as every running node describes them, if all agree and are whole."""
    views = [_describe(n, topic) for n in cluster.running()]
    first = views[0]
    for p, part in first.items():
        if part["leader"] < 0 or sorted(part["isr"]) != sorted(part["replicas"]):
            return None
        if part["high_watermark"] is None or part["high_watermark"] != part["log_end_offset"]:
            return None
        for other in views[1:]:
            if (other[p]["leader"], sorted(other[p]["isr"])) != (
                part["leader"],
                sorted(part["isr"]),
            ):
                return None
    return first


def wait_converged(
    cluster: LograftCluster, topic: str, timeout_s: float
) -> dict[int, dict[str, Any]]:
    return cluster.eventually(
        lambda: converged(cluster, topic),
        timeout_s,
        f"every partition of {topic} to have a leader, a full ISR and HW = log end",
        interval_s=0.2,
    )


def _read_partition(
    node: ClusterNode, topic: str, partition: int, start: int, hw: int
) -> dict[int, str]:
    out: dict[int, str] = {}
    offset = start
    while offset < hw:
        resp = node.get(
            f"/v1/topics/{topic}/partitions/{partition}/records"
            f"?offset={offset}&max_records={FINAL_READ_PAGE_RECORDS}&format=string"
        )
        assert resp.status == 200, f"final read of {topic}-{partition}@{offset}: {resp}"
        for r in resp.body["records"]:
            if r["offset"] < hw:
                out[int(r["offset"])] = r["value"]
        nxt = int(resp.body["next_offset"])
        assert nxt > offset, f"final read of {topic}-{partition} made no progress at {offset}"
        offset = nxt
    return out


def log_start_offsets(layout: dict[int, dict[str, Any]]) -> dict[int, int]:
    """partition -> its log start offset in `layout` (where the final read begins)."""
    return {p: int(part["log_start_offset"]) for p, part in layout.items()}


def final_read(
    cluster: LograftCluster, topic: str, layout: dict[int, dict[str, Any]]
) -> tuple[PartitionLog, dict[int, int]]:
    """Every partition from its log start to the high watermark of `layout`."""
    logs: PartitionLog = {}
    hws: dict[int, int] = {}
    starts = log_start_offsets(layout)
    for p, part in sorted(layout.items()):
        leader = cluster[part["leader"]]
        hws[p] = int(part["high_watermark"])
        logs[p] = _read_partition(leader, topic, p, starts[p], hws[p])
    return logs, hws


def replica_contents(
    cluster: LograftCluster, topic: str, high_watermarks: dict[int, int]
) -> dict[int, PartitionLog]:
    """node -> partition -> offset -> value below the high watermark, from disk.
    Call only once every node has stopped."""
    assert not cluster.running(), "read replicas from disk only after stopping the cluster"
    return {
        node.node_id: {
            p: {o: v for o, v in read_replica(node.spec.data_dir, topic, p).items() if o < hw}
            for p, hw in high_watermarks.items()
        }
        for node in cluster
    }
