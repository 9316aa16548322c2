"""A replica that cannot open is that replica's problem, and /readyz says so.

Regression (issue 9, part 1): a node whose log of one partition made opening
raise failed every metadata apply (no partition took a role again) while
`/readyz` still answered `ready: true`. Now the other partitions serve,
`/readyz` is 503 naming the failed replica and why, the failed partition
answers KAFKA_STORAGE_ERROR, and deleting its topic makes the node ready.

One node (controller and broker): the failure is made by replacing the
partition's log directory with a file while the node is down.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest

from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import fetch, produce_ok, start_cluster

pytestmark = [pytest.mark.timeout(120)]


def test_a_replica_that_cannot_open_leaves_the_others_serving_and_the_node_unready(
    lograft_cluster: Callable[..., LograftCluster],
) -> None:
    cluster = start_cluster(lambda _attempt: lograft_cluster(1))
    node = cluster[1]
    for topic in ("broken", "fine"):
        cluster.create_topic(topic, replication_factor=1)
        produce_ok(cluster, node, topic, [{"value": f"{topic}-1", "partition": 0}])
    node.terminate()
    directory = node.spec.data_dir / "logs" / "broken-0"
    shutil.rmtree(directory)
    directory.write_text("not a log directory")

    node.start()

    def unready() -> dict[str, object] | None:
        resp = node.get("/readyz")
        body = resp.body if isinstance(resp.body, dict) else {}
        return body if resp.status == 503 and body.get("failed_replicas") else None

    body = cluster.eventually(unready, 30, "/readyz to report the failed replica")
    assert body["ready"] is False
    assert body["failed_replicas_count"] == 1
    assert "NotADirectoryError" in body["failed_replicas"]["broken-0"]  # type: ignore[index]
    # The rest of the node serves: metadata applied, the other partition led.
    produce_ok(cluster, node, "fine", [{"value": "fine-2", "partition": 0}])
    resp = fetch(node, "fine", 0, 0)
    assert [r["value"] for r in resp.body["records"]] == ["fine-1", "fine-2"]
    # The failed one says why, rather than "ask broker 1" of broker 1 itself.
    resp = fetch(node, "broken", 0, 0)
    assert resp.status == 503 and resp.body["error"]["code"] == "KAFKA_STORAGE_ERROR", resp
    assert node.log_text().count("replica broken-0 failed") == 1

    # Deleting the topic forgets the failed replica (and its file).
    node.ok("DELETE", "/v1/topics/broken", status=200)
    cluster.eventually(lambda: node.get("/readyz").status == 200, 30, "/readyz 200 again")
    assert not directory.exists()
