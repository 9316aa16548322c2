"""Data-plane helpers for tests against real `lograft node` processes.

Produce, fetch and offsets over HTTP, raw batches, and waiting (by polling
with a deadline) for leaders and in-sync replica sets. Everything goes
through `cluster_harness`; nothing here sleeps to synchronise.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lograft.protocol.batch import Record, RecordInput, build_batch, iter_records
from tests.integration.cluster_harness import (
    HTTP_TIMEOUT_S,
    ClusterNode,
    LograftCluster,
    Response,
)

if TYPE_CHECKING:
    import pytest

BATCH_TYPE = "application/vnd.lograft.batch"
# Errors after which a produce is known to have written nothing.
NOTHING_WRITTEN = {"NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS"}


# -- raw HTTP (with response headers) ------------------------------------------------------


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def raw_request(
    method: str,
    url: str,
    body: bytes | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = HTTP_TIMEOUT_S,
) -> RawResponse:
    """One request; any status comes back with headers and the body as bytes."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return RawResponse(resp.status, dict(resp.headers.items()), resp.read())
    except urllib.error.HTTPError as exc:
        return RawResponse(exc.code, dict(exc.headers.items()), exc.read())


# -- starting a cluster ----------------------------------------------------------------------


def start_cluster(make: Callable[[int], LograftCluster], attempts: int = 3) -> LograftCluster:
    """Build and start a cluster, again with fresh ports if a node could not
    bind its port: a port that was free when the harness picked it can be
    taken by another process (other test runs share this machine) before the
    node binds it. Any other start failure is raised at once."""
    for attempt in range(attempts):
        cluster = make(attempt)
        try:
            cluster.start()
            return cluster
        except AssertionError:
            lost_race = any("address already in use" in n.log_text() for n in cluster)
            cluster.close()
            if not lost_race or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


@contextmanager
def running_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    *,
    log_lines: int,
    size: int = 3,
    **settings: Any,
) -> Iterator[LograftCluster]:
    """A cluster fixture's body: a started cluster of `size` nodes (directories
    `name-<attempt>`, `settings` as LograftCluster takes them), and after the
    tests the last `log_lines` lines of each node's log on stdout (pytest shows
    them when a test failed), then every node stopped."""

    def make(attempt: int) -> LograftCluster:
        return LograftCluster(tmp_path_factory.mktemp(f"{name}-{attempt}"), size, **settings)

    cluster = start_cluster(make)
    try:
        yield cluster
    finally:
        print(cluster.logs(lines=log_lines))
        cluster.close()


# -- metadata views ------------------------------------------------------------------------


def describe(node: ClusterNode, topic: str) -> dict[int, dict[str, Any]]:
    doc = node.topic(topic)
    assert doc is not None, f"topic {topic} unknown on node {node.node_id}"
    return {p["partition"]: p for p in doc["partitions"]}


def leader_of(node: ClusterNode, topic: str, partition: int) -> int:
    return int(describe(node, topic)[partition]["leader"])


def wait_in_sync(
    cluster: LograftCluster,
    topic: str,
    *,
    via: ClusterNode | None = None,
    timeout_s: float = 30.0,
) -> dict[int, dict[str, Any]]:
    """Every partition has a live leader that serves it and every replica in its ISR."""

    def ready() -> dict[int, dict[str, Any]] | None:
        node = via or cluster.running()[0]
        parts = describe(node, topic)
        for p, doc in parts.items():
            leader = doc["leader"]
            if leader < 0 or not cluster[leader].running:
                return None
            if sorted(doc["isr"]) != sorted(doc["replicas"]):
                return None
            # Served by the leader's replica manager, not only named in metadata.
            if fetch(cluster[leader], topic, p, 0).status != 200:
                return None
        return parts

    return cluster.eventually(ready, timeout_s, f"{topic}: live leaders and full ISRs")


def wait_serving(
    cluster: LograftCluster, node: ClusterNode, topic: str, partition: int, timeout_s: float = 30.0
) -> None:
    """`node` serves `topic-partition` as its leader. Its metadata can name it
    leader a moment before its replica manager has become leader; in between
    it answers NOT_LEADER_OR_FOLLOWER (421, retriable), as a client would see."""

    def serving() -> bool:
        resp = fetch(node, topic, partition, 0)
        if resp.status == 421:
            return False
        assert resp.status == 200, f"fetch {topic}-{partition} on {node.node_id}: {resp}"
        return True

    cluster.eventually(serving, timeout_s, f"node {node.node_id} serving {topic}-{partition}")


def pick_partition(parts: Mapping[int, Mapping[str, Any]], leader: int) -> int:
    """A partition led by `leader` (a three-partition topic on three brokers has one each)."""
    for p, doc in sorted(parts.items()):
        if doc["leader"] == leader:
            return p
    raise AssertionError(f"no partition led by broker {leader}: {dict(parts)}")


# -- produce -------------------------------------------------------------------------------


def produce(
    node: ClusterNode,
    topic: str,
    records: Sequence[Mapping[str, Any]],
    acks: str = "all",
    **kw: Any,
) -> Response:
    return node.post(f"/v1/topics/{topic}/records?acks={acks}", {"records": list(records), **kw})


def produce_ok(
    cluster: LograftCluster,
    node: ClusterNode,
    topic: str,
    records: Sequence[Mapping[str, Any]],
    acks: str = "all",
    timeout_s: float = 20.0,
) -> list[dict[str, Any]]:
    """Produce and return the per-record offsets. Retries only when every
    record failed with an error that guarantees nothing was written."""
    last: list[Response] = []

    def attempt() -> list[dict[str, Any]] | None:
        resp = produce(node, topic, records, acks)
        last[:] = [resp]
        if resp.status == 200:
            return list(resp.body["offsets"])
        error = produce_error(resp)
        if error is not None and error["code"] in NOTHING_WRITTEN:
            return None
        raise AssertionError(f"produce to {topic} via node {node.node_id}: {resp}")

    return cluster.eventually(attempt, timeout_s, f"produce to {topic} via {node.node_id}")


def produce_error(resp: Response) -> dict[str, Any] | None:
    """The error of a JSON produce in which every record failed (so nothing
    was written), else None. Such an answer is an ordinary error body with
    the per-record outcomes in `details.offsets` (docs/api.md)."""
    if resp.status in (200, 202, 207) or not isinstance(resp.body, dict):
        return None
    error = resp.body.get("error")
    return dict(error) if isinstance(error, dict) else None


def post_batches(
    node: ClusterNode, topic: str, partition: int, data: bytes, acks: str = "all"
) -> Response:
    return node.post(
        f"/v1/topics/{topic}/partitions/{partition}/batches?acks={acks}",
        data,
        headers={"Content-Type": BATCH_TYPE},
    )


def batch_of(
    values: Iterable[bytes],
    *,
    key: bytes | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int = 1_700_000_000_000,
    **kw: Any,
) -> bytes:
    return build_batch(
        [RecordInput(v, key) for v in values],
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        **kw,
    )


# -- fetch and offsets ---------------------------------------------------------------------


def offsets(node: ClusterNode, topic: str, partition: int) -> dict[str, Any]:
    """earliest / latest (HW) / log_end_offset, from the partition's leader."""
    return node.ok("GET", f"/v1/topics/{topic}/partitions/{partition}/offsets")


def fetch(node: ClusterNode, topic: str, partition: int, offset: int, **params: Any) -> Response:
    query = "&".join(f"{k}={v}" for k, v in {"offset": offset, **params}.items())
    return node.get(
        f"/v1/topics/{topic}/partitions/{partition}/records?{query}",
        timeout_s=HTTP_TIMEOUT_S + int(params.get("max_wait_ms", 0)) / 1000,
    )


def fetch_all(
    node: ClusterNode, topic: str, partition: int, start: int = 0
) -> list[dict[str, Any]]:
    """Every record from `start` to the high watermark, as JSON records."""
    out: list[dict[str, Any]] = []
    offset = start
    while True:
        resp = fetch(node, topic, partition, offset, max_records=10000, max_bytes=8 << 20)
        assert resp.status == 200, f"fetch {topic}-{partition}@{offset}: {resp}"
        out += resp.body["records"]
        if resp.body["next_offset"] >= resp.body["high_watermark"] or not resp.body["records"]:
            return out
        offset = resp.body["next_offset"]


def fetch_raw(
    node: ClusterNode, topic: str, partition: int, offset: int, max_bytes: int = 8 << 20
) -> RawResponse:
    return raw_request(
        "GET",
        f"{node.url}/v1/topics/{topic}/partitions/{partition}/records"
        f"?offset={offset}&max_bytes={max_bytes}",
        headers={"Accept": BATCH_TYPE},
    )


def fetch_all_raw(node: ClusterNode, topic: str, partition: int) -> tuple[bytes, int]:
    """The raw batches from offset 0 up to the high watermark, and that HW."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        resp = fetch_raw(node, topic, partition, offset)
        assert resp.status == 200, f"raw fetch {topic}-{partition}@{offset}: {resp}"
        hw = int(resp.headers["X-Lograft-High-Watermark"])
        chunks.append(resp.body)
        offset = int(resp.headers["X-Lograft-Next-Offset"])
        if offset >= hw or not resp.body:
            return b"".join(chunks), hw


def segment_records(data_dir: Path, topic: str, partition: int) -> list[Record]:
    """Every record in a stopped node's segment files for one partition."""
    directory = data_dir / "logs" / f"{topic}-{partition}"
    out: list[Record] = []
    for path in sorted(directory.glob("*.log")):
        out += iter_records(path.read_bytes())
    return out


def on_every_disk(cluster: LograftCluster, topic: str, values: Mapping[int, list[bytes]]) -> bool:
    """Whether every node's segment files hold exactly `values` (by
    partition) of `topic`: replicated everywhere, read from the running
    nodes' files (a batch being written reads as not there yet)."""
    for node in cluster:
        for p, expected in values.items():
            try:
                found = [r.value for r in segment_records(node.spec.data_dir, topic, p)]
            except (OSError, ValueError):
                return False
            if found != expected:
                return False
    return True
