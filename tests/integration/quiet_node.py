"""One real node for tests that attack its HTTP port on purpose.

The node gets topic `t` (one partition) and the `[http]` settings a test
module passes. When the module is done the node is stopped, and its log must
hold no ERROR line and no traceback: every fault those tests caused is a
client's, which a node reports at most at INFO (issue 9, part 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.integration.cluster_harness import ClusterNode, LograftCluster


@contextmanager
def quiet_node(workdir: Path, http: dict[str, Any]) -> Iterator[ClusterNode]:
    cluster = LograftCluster(workdir, 1, broker={"min_insync_replicas": 1}, http=http)
    try:
        cluster.start()
        node = cluster[1]
        node.ok("POST", "/v1/topics", {"name": "t", "partitions": 1, "replication_factor": 1}, 201)
        yield node
        assert node.terminate() == 0, node.log_tail()
        log = node.log_text()
        bad = [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line]
        assert not bad, "client faults reached ERROR:\n" + "\n".join(bad[:20])
    finally:
        print(cluster.logs(lines=100))
        cluster.close()
