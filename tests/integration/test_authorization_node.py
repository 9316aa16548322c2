"""Authorization on a real node (lograft/api/access.py): bearer tokens, ACLs
on, `User:admin` a super user. A principal without ACLs is refused 403 by
the resource's type on every data and admin route, before the resource's
existence is looked at; it sees no topic in the listing, while the cluster
view stays open to it; nothing it tried was written. Once helper A's
`/v1/acls` exists, an ACL added through the metadata lets it read, at once,
and its removal takes that away again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from lograft.api.openapi import PATHS
from tests.integration.cluster_harness import ClusterNode, LograftCluster

ISSUER = "https://idp.lograft.test"
AUDIENCE = "lograft-it"
KEY = ec.generate_private_key(ec.SECP256R1())
TOPIC = "secured"


def bearer(user: str) -> dict[str, str]:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": user, "exp": now + 600, "iat": now}
    token = jwt.encode(claims, KEY, algorithm="ES256", headers={"kid": "k1"})
    return {"Authorization": f"Bearer {token}"}


class FreshBearer(Mapping[str, str]):
    """Headers carrying a token minted when they are read, not at collection:
    a full suite can reach these tests more than a token's 600 s later."""

    def __init__(self, user: str) -> None:
        self.user = user

    def __getitem__(self, key: str) -> str:
        return bearer(self.user)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(("Authorization",))

    def __len__(self) -> int:
        return 1


ADMIN, ALICE = FreshBearer("admin"), FreshBearer("alice")


@pytest.fixture
def secured(lograft_cluster: Callable[..., LograftCluster], tmp_path: Path) -> ClusterNode:
    jwk = jwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key(), as_dict=True)
    jwk.update(kid="k1", use="sig", alg="ES256")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    cluster = lograft_cluster(
        size=1,
        overrides={
            1: {
                "security": {
                    "authentication": ["bearer"],
                    "authorization": True,
                    "super_users": ["User:admin"],
                    "bearer": {"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": str(jwks)},
                }
            }
        },
    )
    cluster.start()
    node = cluster[1]
    resp = node.post("/v1/topics", {"name": TOPIC, "partitions": 1}, headers=ADMIN)
    assert resp.status == 201, resp
    record = {"records": [{"value": {"n": 1}, "partition": 0}]}
    resp = node.post(f"/v1/topics/{TOPIC}/records", record, headers=ADMIN)
    assert resp.status == 200, resp
    return node


def code(resp: Any) -> tuple[int, str | None]:
    body = resp.body
    return resp.status, body["error"]["code"] if isinstance(
        body, dict
    ) and "error" in body else None


def end_offset(node: ClusterNode) -> int:
    resp = node.get(f"/v1/topics/{TOPIC}/partitions/0/offsets", headers=ADMIN)
    assert resp.status == 200, resp
    return int(resp.body["latest"])


def test_a_principal_without_acls_is_refused_and_learns_nothing(secured: ClusterNode) -> None:
    node = secured
    topic_denied = (403, "TOPIC_AUTHORIZATION_FAILED")
    record = {"records": [{"value": {"n": 2}, "partition": 0}]}
    for name in (TOPIC, "no-such-topic"):
        assert code(node.get(f"/v1/topics/{name}", headers=ALICE)) == topic_denied
        assert code(node.post(f"/v1/topics/{name}/records", record, headers=ALICE)) == topic_denied
        fetch = f"/v1/topics/{name}/partitions/0/records?offset=0"
        assert code(node.get(fetch, headers=ALICE)) == topic_denied
        assert code(node.get(f"/v1/topics/{name}/stream", headers=ALICE)) == topic_denied
        assert code(node.delete(f"/v1/topics/{name}", headers=ALICE)) == topic_denied
    assert code(node.post("/v1/topics", {"name": "mine"}, headers=ALICE)) == topic_denied
    assert code(node.post("/v1/producers", headers=ALICE)) == (403, "CLUSTER_AUTHORIZATION_FAILED")
    group = node.post("/v1/groups/g1/members", {"subscribed_topics": [TOPIC]}, headers=ALICE)
    assert code(group) == (403, "GROUP_AUTHORIZATION_FAILED")
    # The listing holds nothing it may not see; the cluster view is open.
    listed = node.get("/v1/topics", headers=ALICE)
    assert listed.status == 200 and listed.body["topics"] == []
    assert [t["name"] for t in node.get("/v1/topics", headers=ADMIN).body["topics"]] == [TOPIC]
    cluster = node.get("/v1/cluster", headers=ALICE)
    # Not even how many topics there are (issue 12 attack: it was the total).
    assert cluster.status == 200 and cluster.body["topics"] == 0, cluster
    assert node.get("/v1/cluster", headers=ADMIN).body["topics"] == 1
    assert node.get("/v1/brokers", headers=ALICE).status == 200
    # Nothing it tried was written.
    assert end_offset(node) == 1
    assert node.get("/v1/topics/mine", headers=ADMIN).status == 404


ACL_ROUTE = "/v1/acls" in PATHS


@pytest.mark.skipif(not ACL_ROUTE, reason="needs /v1/acls (helper A, issue 12)")
def test_an_acl_added_through_the_metadata_applies_at_once(secured: ClusterNode) -> None:
    node = secured
    read = {
        "resource_type": "topic",
        "resource_name": TOPIC,
        "pattern_type": "literal",
        "principal": "User:alice",
        "host": "*",
        "operation": "read",
        "permission": "allow",
    }
    fetch = f"/v1/topics/{TOPIC}/partitions/0/records?offset=0"
    assert code(node.get(fetch, headers=ALICE)) == (403, "TOPIC_AUTHORIZATION_FAILED")
    # Only a caller with ALTER on the cluster may add ACLs.
    assert code(node.post("/v1/acls", {"acls": [read]}, headers=ALICE)) == (
        403,
        "CLUSTER_AUTHORIZATION_FAILED",
    )
    resp = node.post("/v1/acls", {"acls": [read]}, headers=ADMIN)
    assert resp.status in (200, 201), resp
    # The answer comes once the node's metadata has the ACL.
    resp = node.get(fetch, headers=ALICE)
    assert resp.status == 200, resp
    assert [t["name"] for t in node.get("/v1/topics", headers=ALICE).body["topics"]] == [TOPIC]
    # READ does not give WRITE; a group needs its own ACL.
    record = {"records": [{"value": {"n": 2}, "partition": 0}]}
    resp = node.post(f"/v1/topics/{TOPIC}/records", record, headers=ALICE)
    assert code(resp) == (403, "TOPIC_AUTHORIZATION_FAILED")
    stream = f"/v1/topics/{TOPIC}/stream?group=g1"
    assert code(node.get(stream, headers=ALICE)) == (403, "GROUP_AUTHORIZATION_FAILED")
    # Removed: refused again.
    query = "&".join(f"{k}={v}" for k, v in read.items()).replace(":", "%3A")
    resp = node.delete(f"/v1/acls?{query}", headers=ADMIN)
    assert resp.status == 200, resp
    assert code(node.get(fetch, headers=ALICE)) == (403, "TOPIC_AUTHORIZATION_FAILED")
