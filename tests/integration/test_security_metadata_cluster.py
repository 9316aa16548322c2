"""ACLs, users and client quotas on a real three-node cluster (issue 12):
added through the CLI and the Admin client on one node, they are in every
node's metadata image, and a cluster restarted from its Raft journals and
snapshots (every process SIGKILLed, so nothing is left to replicate them
back from) still has them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lograft.client.admin import Admin
from tests.integration.cluster_harness import ClusterNode, LograftCluster
from tests.unit.cli.cli_support import run_cli

pytestmark = [pytest.mark.timeout(180)]

Factory = Callable[..., LograftCluster]
READ_ORDERS = {
    "principal": "User:alice",
    "host": "*",
    "resource_type": "topic",
    "resource_name": "orders",
    "pattern_type": "literal",
    "operation": "read",
    "permission": "allow",
}
# Metadata entries after which pysyncobj writes a snapshot (log compaction).
COMPACTION_ENTRIES = 20


def security_view(node: ClusterNode) -> tuple[Any, Any, Any]:
    """What `node`'s own image holds (the reads are served from it)."""
    return (
        node.ok("GET", "/v1/acls")["acls"],
        node.ok("GET", "/v1/users")["users"],
        node.ok("GET", "/v1/quotas")["quotas"],
    )


def test_security_metadata_reaches_every_node_and_survives_a_restart(
    lograft_cluster: Factory,
) -> None:
    cluster = lograft_cluster(raft={"log_compaction_min_entries": COMPACTION_ENTRIES})
    cluster.start()
    node = cluster[1]
    snapshots = [n.spec.data_dir / "metadata" / "raft.snapshot" for n in cluster]

    res = run_cli(
        ["users", "add", "alice", "--password-stdin", "--bootstrap", node.url],
        stdin=b"correct horse battery\n",
    )
    assert res.code == 0, res.err
    res = run_cli(
        [
            "acls",
            "add",
            "--principal",
            "User:alice",
            "--topic",
            "orders",
            "--operation",
            "read",
            "--bootstrap",
            node.url,
        ]
    )
    assert res.code == 0, res.err
    with Admin(node.url) as admin:
        admin.alter_quotas({"user": "alice"}, values={"producer_byte_rate": 1048576})
        # Enough further entries for a snapshot on every node, so the restart
        # below reads the first changes from the snapshot, the last from the
        # journal.
        for i in range(COMPACTION_ENTRIES):
            admin.alter_quotas({"client_id": "filler"}, values={"request_percentage": 10 + i})
        cluster.eventually(
            lambda: all(p.exists() for p in snapshots), 30, "a snapshot on every node"
        )
        admin.create_acls([{**READ_ORDERS, "operation": "describe"}])
        admin.set_user_password("bob", "another one", mechanism="SCRAM-SHA-256")

    expected = security_view(node)
    acls, users, quotas = expected
    assert [(a["principal"], a["operation"]) for a in acls] == [
        ("User:alice", "describe"),
        ("User:alice", "read"),
    ]
    assert [u["name"] for u in users] == ["alice", "bob"]
    assert "password" not in str(users) and "salt" not in str(users)
    assert quotas == [
        {"entity": {"client_id": "filler"}, "values": {"request_percentage": 29.0}},
        {"entity": {"user": "alice"}, "values": {"producer_byte_rate": 1048576.0}},
    ]
    for other in cluster:
        cluster.eventually(
            lambda other=other: security_view(other) == expected,
            10,
            f"node {other.node_id} to have the security metadata",
        )

    cluster.kill_all()
    cluster.start()
    for other in cluster:
        cluster.eventually(
            lambda other=other: security_view(other) == expected,
            20,
            f"node {other.node_id} to rebuild the security metadata",
        )
