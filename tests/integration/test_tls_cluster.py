"""Three real nodes with `[tls]`: the listener serves https only, every
node-to-node call (controller RPCs and heartbeats, replica fetches, forwarded
produces) goes over TLS with the node's certificate, and a client that does not
trust the cluster's CA, or speaks plain HTTP, is refused at once."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
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
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls-certs")
    make_local_certificates(directory, nodes=["node-1", "node-2", "node-3"])
    return directory


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[LograftCluster]:
    with running_cluster(tmp_path_factory, "tls", log_lines=80, tls=certs) as c:
        yield c


def test_a_tls_cluster_elects_replicates_and_serves_https(cluster: LograftCluster) -> None:
    controller = cluster.active_controller()
    # Every broker registered (heartbeats from its own thread, over TLS) its https URL.
    brokers = controller.brokers()
    assert {b["endpoints"]["http"] for b in brokers.values()} == {n.url for n in cluster}
    assert all(url.startswith("https://127.0.0.1:") for url in (n.url for n in cluster))

    cluster.create_topic("secure", partitions=3, replication_factor=3)
    parts = wait_in_sync(cluster, "secure")  # the followers fetch over TLS
    leader = cluster[parts[0]["leader"]]
    via = next(n for n in cluster if n.node_id != leader.node_id)
    # acks=all through a node that does not lead the partition: forwarded to
    # the leader over TLS, answered once both followers fetched it.
    partition = pick_partition(parts, leader.node_id)
    values = [f"v{i}" for i in range(5)]
    offsets = produce_ok(
        cluster, via, "secure", [{"value": v, "partition": partition} for v in values]
    )
    assert [o["offset"] for o in offsets] == list(range(5))
    assert [r["value"] for r in fetch_all(leader, "secure", partition)] == values
    wait_in_sync(cluster, "secure")


def test_a_client_without_the_ca_is_refused(cluster: LograftCluster) -> None:
    node = cluster[1]
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(node.url + "/healthz", timeout=10)


def test_plain_http_to_a_tls_node_fails_at_once(cluster: LograftCluster) -> None:
    node = cluster[1]
    started = time.monotonic()
    with pytest.raises(OSError):  # the connection closed: no answer, no hang
        http_request("GET", f"http://{node.spec.http_address}/healthz", timeout_s=10)
    assert time.monotonic() - started < 5
    assert node.get("/healthz").status == 200
