"""Three real nodes with `[tls]` and bearer/certificate authentication: the
listener serves https only, every node-to-node call (controller RPCs and
heartbeats, replica fetches, forwarded produces) goes over TLS with the node's
certificate, a client that does not trust the cluster's CA or speaks plain HTTP
is refused at once, and the Python client reaches the cluster with a CA
bundle and a bearer token (a file read again when it changes) or a client
certificate."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lograft.client import Admin, Consumer, Producer, TopicPartition
from lograft.client.errors import ClusterUnreachableError
from lograft.errors import SaslAuthenticationFailedError
from lograft.security.dev_tokens import DevIssuer
from lograft.security.local_ca import make_local_certificates
from tests.integration.cluster_harness import (
    ClusterNode,
    LograftCluster,
    eventually,
    http_request,
)
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
    make_local_certificates(directory, nodes=["node-1", "node-2", "node-3"], clients=["admin"])
    return directory


@pytest.fixture(scope="module")
def issuer(certs: Path) -> DevIssuer:
    return DevIssuer.create_or_load(certs / "issuer")


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, certs: Path, issuer: DevIssuer
) -> Iterator[LograftCluster]:
    security = {
        "authentication": ["bearer", "certificate"],
        "bearer": {
            "issuer": issuer.issuer,
            "audience": issuer.audience,
            "jwks_file": str(issuer.jwks_file),
        },
    }
    with running_cluster(
        tmp_path_factory,
        "tls",
        log_lines=80,
        tls=certs,
        tls_settings={"client_certificate": "optional"},
        client_certificate="admin",  # the harness's own requests: User:admin by certificate
        security=security,
    ) as c:
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
    # The followers fetch over one WebSocket each (wss here), not POSTs.
    eventually(
        lambda: streams_of(leader) == (2, True),
        15,
        f"both followers' replica streams open to node {leader.node_id}",
        on_timeout=lambda: str(streams_of(leader)),
    )


def streams_of(node: ClusterNode) -> tuple[float, bool]:
    """(replica streams open to `node`, whether any fetch was answered over one)."""
    text = node.get("/metrics").body
    text = text.decode() if isinstance(text, bytes) else str(text)
    got = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("lograft_broker_replica_stream")
    }
    return (
        got.get("lograft_broker_replica_streams", 0.0),
        got.get("lograft_broker_replica_stream_fetches_total", 0.0) > 0,
    )


def test_a_client_without_the_ca_is_refused(cluster: LograftCluster) -> None:
    node = cluster[1]
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(node.url + "/healthz", timeout=10)
    with (
        pytest.raises(ClusterUnreachableError, match="certificate verify failed"),
        Admin(node.url, request_timeout_ms=5_000) as admin,
    ):
        admin.list_topics()


def test_plain_http_to_a_tls_node_fails_at_once(cluster: LograftCluster) -> None:
    node = cluster[1]
    started = time.monotonic()
    with pytest.raises(OSError):  # the connection closed: no answer, no hang
        http_request("GET", f"http://{node.spec.http_address}/healthz", timeout_s=10)
    assert time.monotonic() - started < 5
    assert node.get("/healthz").status == 200


def test_the_python_client_with_a_token_file_and_a_certificate(
    cluster: LograftCluster, certs: Path, issuer: DevIssuer, tmp_path: Path
) -> None:
    urls = [n.url for n in cluster]
    ca = str(certs / "ca.pem")
    token_file = tmp_path / "token"
    now = int(time.time())
    expired = {"iss": issuer.issuer, "aud": issuer.audience, "sub": "alice", "exp": now - 3600}
    token_file.write_text(jwt.encode(expired, issuer.key, "ES256", headers={"kid": issuer.kid}))
    with Admin(urls, ssl_cafile=ca, bearer_token_file=str(token_file)) as admin:
        with pytest.raises(SaslAuthenticationFailedError) as refused:
            admin.list_topics()
        assert refused.value.details["reason"] == "expired"
        token_file.write_text(issuer.mint("alice", lifetime_s=600))  # rotated
        admin.create_topic("by-token", partitions=1, replication_factor=3)
    wait_in_sync(cluster, "by-token")
    with Producer(urls, ssl_cafile=ca, bearer_token=issuer.mint("alice")) as producer:
        producer.send("by-token", b"over tls", partition=0).get(timeout=30)
    with Consumer(
        urls,
        ssl_cafile=ca,
        ssl_certfile=str(certs / "admin.pem"),
        ssl_keyfile=str(certs / "admin-key.pem"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    ) as consumer:
        consumer.assign([TopicPartition("by-token", 0)])
        assert next(iter(consumer)).value == b"over tls"
