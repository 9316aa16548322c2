"""Three real nodes with `event_loop = "uvloop"` and `[tls]`: the TLS listener
(the connection guard's `loop.start_tls`), node-to-node https (aiohttp's
client: forwarded produces, replica fetches), /healthz's report of the loop
and a SIGTERM's clean stop (the signal handlers) all work on uvloop."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lograft.security.local_ca import make_local_certificates
from tests.integration.cluster_harness import LograftCluster, http_request
from tests.integration.data_plane import (
    fetch_all,
    pick_partition,
    produce_ok,
    running_cluster,
    wait_in_sync,
)

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    certs: Path = tmp_path_factory.mktemp("uvloop-certs")
    make_local_certificates(certs, nodes=["node-1", "node-2", "node-3"])
    with running_cluster(
        tmp_path_factory, "uvloop", log_lines=80, tls=certs, event_loop="uvloop"
    ) as c:
        yield c


def test_a_uvloop_node_says_so_in_healthz(cluster: LograftCluster) -> None:
    for node in cluster:
        health = node.get("/healthz").json()
        assert health["event_loop"] == "uvloop", health
        assert health["loop_lag_ms"]["last"] is not None or health["loop_lag_ms"]["max"] >= 0


def test_uvloop_nodes_serve_https_produce_and_fetch(cluster: LograftCluster) -> None:
    cluster.create_topic("on-uvloop", partitions=3, replication_factor=3)
    parts = wait_in_sync(cluster, "on-uvloop")  # followers fetch over TLS
    leader = cluster[parts[0]["leader"]]
    via = next(n for n in cluster if n.node_id != leader.node_id)
    partition = pick_partition(parts, leader.node_id)
    values = [f"u{i}" for i in range(5)]
    # acks=all through a non-leader: forwarded over TLS, answered once both
    # followers fetched it.
    offsets = produce_ok(
        cluster, via, "on-uvloop", [{"value": v, "partition": partition} for v in values]
    )
    assert [o["offset"] for o in offsets] == list(range(5))
    assert [r["value"] for r in fetch_all(leader, "on-uvloop", partition)] == values


def test_plain_http_to_a_uvloop_tls_node_fails_at_once(cluster: LograftCluster) -> None:
    node = cluster[1]
    started = time.monotonic()
    with pytest.raises(OSError):  # the handshake failed: closed, no hang
        http_request("GET", f"http://{node.spec.http_address}/healthz", timeout_s=10)
    assert time.monotonic() - started < 5
    assert node.get("/healthz").status == 200


def test_sigterm_stops_a_uvloop_node_cleanly(cluster: LograftCluster) -> None:
    node = cluster[3]
    assert node.terminate() == 0, node.log_tail()
