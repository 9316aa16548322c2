"""The route walk of issue 12: every route a node serves has an authorization
decision (lograft/api/route_access.py), the OpenAPI document and the router
agree, and each documented route, called with no credentials, bad
credentials, an expired token, a token for another audience, a principal
without the ACL and one with it, answers 401, 401, 401, 401, 403 (or a
listing without what it may not see) and neither 401 nor 403.

The node is a real one (broker and controller roles, wired by
lograft/node/server.py, `[security]` on: bearer tokens and ACLs) with Raft,
the controller runtime, the broker agent and the HTTP listener stubbed out,
served by aiohttp's test server, with its own authentication middleware
(api/authentication.py). Its image holds the topic `orders` and the ACLs
below, replayed from metadata records. Tokens are signed with the test keys of
tests/unit/security/test_tokens.py and checked against a JWKS file.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientTimeout, web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.access import undecided_routes
from lograft.api.openapi import document
from lograft.api.route_access import ROUTE_ACCESS, Kind, access_key
from lograft.node.broker_agent import AgentState
from lograft.node.config import parse_config
from lograft.quorum.records import Partition, Topic, encode_batch
from lograft.quorum.security_records import acl_record, acl_sort_key
from lograft.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from tests.unit.security.test_tokens import AUDIENCE, DEFAULT_JWKS, ISSUER, OTHER_EC_KEY, token

V = [{"id": 1, "raft": "h:1", "http": "h:2"}]
SECRET = "unit-test-cluster-secret"
# Every ACL the walk's principals have: `granted` may do everything through
# ACLs (not as a super user); `nobody` has none.
GRANTED = "granted"
ACLS = frozenset(
    AclBinding(
        resource_type=rt,
        resource_name=CLUSTER_RESOURCE_NAME if rt is ResourceType.CLUSTER else "*",
        pattern_type=PatternType.LITERAL,
        principal=f"User:{GRANTED}",
        host="*",
        operation=AclOperation.ALL,
        permission=AclPermission.ALLOW,
    )
    for rt in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER)
)


def allow(principal: str, rt: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        resource_type=rt,
        resource_name=name,
        pattern_type=PatternType.LITERAL,
        principal=f"User:{principal}",
        host="*",
        operation=op,
        permission=AclPermission.ALLOW,
    )


_T, _G, _O = ResourceType.TOPIC, ResourceType.GROUP, AclOperation
# Principals with one ACL each, for the checks handlers make on the body.
NARROW = frozenset(
    {
        allow("reader", _G, "billing", _O.READ),  # the group, no topic
        allow("creator", _T, "events", _O.CREATE),  # one topic, not the cluster
        allow("writer", _T, "orders", _O.WRITE),  # one topic
    }
)
ACLS = ACLS | NARROW

# Routes whose answer to a principal without ACLs is a listing without what it
# may not see (200), not a 403; the key names the listing.
LISTINGS = {("GET", "/v1/topics"): "topics", ("GET", "/v1/groups"): "groups"}


def now() -> int:
    return int(time.time())


def cases() -> dict[str, str | None]:
    """The six callers of the walk: their Authorization header (None: none).
    Built when a test runs, not at import: the tokens' exp is relative to
    now, and a full suite may run these tests long after importing them."""
    return {
        "no credentials": None,
        "bad credentials": "Bearer " + token(key=OTHER_EC_KEY),
        "expired token": "Bearer " + token(exp=now() - 3600, iat=now() - 7200),
        "wrong audience": "Bearer " + token(aud="someone-else"),
        "principal without the ACL": "Bearer " + token(sub="nobody"),
        "principal with the ACL": "Bearer " + token(sub=GRANTED),
    }


UNAUTHENTICATED = ("no credentials", "bad credentials", "expired token", "wrong audience")


class NoAgent:
    unfenced = False
    broker_epoch = -1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.state = AgentState.ACTIVE

    async def start(self) -> None:
        pass


class CapturedServer:
    apps: list[web.Application] = []

    def __init__(self, app: web.Application, _config: Any, _tls: Any = None, **_kw: Any) -> None:
        self.apps.append(app)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def seed_topic(store: Any, name: str) -> None:
    topic_id = str(uuid.uuid4())
    records = [
        Topic(name=name, topic_id=topic_id),
        Partition(
            topic_id=topic_id,
            partition=0,
            replicas=(1,),
            isr=(1,),
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        ),
    ]
    store.apply(1, encode_batch(records))


@pytest.fixture
async def node_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[TestClient[Any, Any]]:
    from lograft.node import server as node_module
    from lograft.quorum.controller_runtime import ControllerRuntime

    async def nothing(*_args: Any) -> None:
        pass

    jwks = tmp_path / "jwks.json"
    jwks.write_bytes(DEFAULT_JWKS)
    cfg = parse_config(
        {
            "node_id": 1,
            "roles": ["broker", "controller"],
            "data_dir": str(tmp_path / "data"),
            "cluster_secret": SECRET,
            "voters": V,
            "http": {"host": "127.0.0.1", "port": 0},
            "stream": {"start_retry_timeout_ms": 200},
            "security": {
                "authentication": ["bearer"],
                "authorization": True,
                "bearer": {"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": str(jwks)},
            },
        }
    )
    n = node_module.Node(cfg)
    seed_topic(n.store, "orders")
    # The ACLs, as the controller writes them: records in the metadata.
    n.store.apply(2, encode_batch([acl_record(acl) for acl in sorted(ACLS, key=acl_sort_key)]))
    monkeypatch.setattr(n.raft, "start", nothing)
    monkeypatch.setattr(ControllerRuntime, "start", nothing)
    monkeypatch.setattr(ControllerRuntime, "stop", nothing)
    monkeypatch.setattr(node_module, "BrokerAgent", NoAgent)
    monkeypatch.setattr(node_module, "HttpServer", CapturedServer)
    # Past the serving gate: the walk is about authorization, which comes first.
    monkeypatch.setattr(n.catch_up, "refusal", lambda: None)
    CapturedServer.apps.clear()
    try:
        await n.start()
        (app,) = CapturedServer.apps
        async with TestClient(TestServer(app)) as client:
            yield client
    finally:
        n.agent = None
        await n.stop()


def served(app: web.Application) -> set[tuple[str, str]]:
    """Every (method, canonical pattern) the app routes, a HEAD as its GET."""
    return {
        access_key(r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None
    }


def documented() -> set[tuple[str, str]]:
    return {(m.upper(), p) for p, ops in document()["paths"].items() for m in ops}


async def test_every_route_is_decided_and_the_document_matches_the_router(
    node_client: TestClient[Any, Any],
) -> None:
    app = node_client.app
    assert app is not None
    assert undecided_routes(app) == []
    routes = served(app)
    public = {r for r in routes if not r[1].startswith("/internal/")}
    assert public == documented(), "the OpenAPI document and the router disagree"
    assert documented() - set(ROUTE_ACCESS) == set(), "documented routes without a decision"
    # The table names only routes a node has: no stale row.
    assert set(ROUTE_ACCESS) == routes


def test_the_walk_fails_for_a_route_without_a_decision() -> None:
    app = web.Application()

    async def handler(_request: web.Request) -> web.Response:
        return web.json_response({})

    app.router.add_get("/v1/topics/{topic}/new-thing", handler)
    app.router.add_get("/healthz", handler)
    assert undecided_routes(app) == [("GET", "/v1/topics/{topic}/new-thing")]


def example_request(path: str, op: dict[str, Any]) -> tuple[str, bytes | None, str]:
    """The path with the document's example parameters, the example body and
    its content type."""
    for param in op.get("parameters", []):
        if param["in"] == "path":
            path = path.replace("{" + param["name"] + "}", str(param["example"]))
    for media_type, media in op.get("requestBody", {}).get("content", {}).items():
        if "example" in media:
            return path, json.dumps(media["example"]).encode(), media_type
        return path, b"\x00" * 61, media_type  # a raw batch: any bytes (refused later)
    return path, None, "application/json"


def walk() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in document()["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


async def call(
    client: TestClient[Any, Any],
    method: str,
    path: str,
    op: dict[str, Any],
    authorization: str | None,
) -> tuple[int, Any]:
    url, body, content_type = example_request(path, op)
    headers = {"Content-Type": content_type}
    if authorization is not None:
        headers["Authorization"] = authorization
    async with client.request(
        method, url, data=body, headers=headers, timeout=ClientTimeout(total=30)
    ) as resp:
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, None  # a stream that started: its headers are the answer


async def test_the_walk(node_client: TestClient[Any, Any]) -> None:
    failures: list[str] = []
    callers = cases()
    for method, path, op in walk():
        decision = ROUTE_ACCESS[(method, path)]
        for case, authorization in callers.items():
            status, body = await call(node_client, method, path, op, authorization)
            code = body["error"]["code"] if isinstance(body, dict) and "error" in body else None
            where = f"{method} {path} [{case}]: {status} {code}"
            if decision.kind is Kind.PUBLIC:
                ok = status not in (401, 403)
            elif case in UNAUTHENTICATED:
                ok = status == 401 and code == "SASL_AUTHENTICATION_FAILED"
            elif case == "principal with the ACL" or decision.kind is Kind.AUTHENTICATED:
                ok = status not in (401, 403)
            elif (method, path) in LISTINGS:
                listing = body.get(LISTINGS[(method, path)]) if status == 200 else None
                ok = listing == []
                if (method, path) == ("GET", "/v1/topics"):
                    # ... while the principal with the ACL sees the topic.
                    _s, seen = await call(
                        node_client, method, path, op, callers["principal with the ACL"]
                    )
                    ok = ok and [t["name"] for t in seen["topics"]] == ["orders"]
            else:
                ok = status == 403 and code is not None and code.endswith("_AUTHORIZATION_FAILED")
            if not ok:
                failures.append(where)
    assert not failures, "\n".join(failures)


async def test_internal_routes_take_no_client_credentials(
    node_client: TestClient[Any, Any],
) -> None:
    internal = sorted(k for k, v in ROUTE_ACCESS.items() if v.kind is Kind.INTERNAL)
    for method, pattern in internal:
        url = pattern.replace("{name}", "heartbeat")
        for authorization in cases().values():
            headers = {} if authorization is None else {"Authorization": authorization}
            resp = await node_client.request(method, url, data=b"{}", headers=headers)
            assert resp.status == 401, (method, url, resp.status)


async def test_a_denied_describe_does_not_say_whether_the_topic_exists(
    node_client: TestClient[Any, Any],
) -> None:
    callers = cases()
    nobody = {"Authorization": callers["principal without the ACL"] or ""}
    granted = {"Authorization": callers["principal with the ACL"] or ""}
    answers = []
    for topic in ("orders", "no-such-topic"):
        resp = await node_client.get(f"/v1/topics/{topic}", headers=nobody)
        body = await resp.json()
        answers.append(
            (resp.status, body["error"]["code"], body["error"]["message"].replace(topic, "T"))
        )
    assert answers[0] == answers[1]
    assert answers[0][:2] == (403, "TOPIC_AUTHORIZATION_FAILED")
    resp = await node_client.get("/v1/topics/no-such-topic", headers=granted)
    assert resp.status == 404


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + token(sub=user)}


async def answer(resp: Any) -> tuple[int, str | None]:
    body = await resp.json()
    return resp.status, body["error"]["code"] if "error" in body else None


async def test_body_topics_are_checked_before_anything_else(
    node_client: TestClient[Any, Any],
) -> None:
    """READ on the group is not enough: the topics a request names need
    their own operation, checked before their existence is (`secret` does
    not exist, and the answer is still 403)."""
    reader = bearer("reader")
    topic_denied = (403, "TOPIC_AUTHORIZATION_FAILED")
    for topics in (["orders"], ["secret"]):
        join = {"subscribed_topics": topics}
        resp = await node_client.post("/v1/groups/billing/members", json=join, headers=reader)
        assert await answer(resp) == topic_denied
        beat = {"member_epoch": 1, "subscribed_topics": topics}
        url = "/v1/groups/billing/members/m1/heartbeat"
        assert await answer(await node_client.post(url, json=beat, headers=reader)) == topic_denied
        commit = {"offsets": [{"topic": topics[0], "partition": 0, "offset": 1}]}
        resp = await node_client.post("/v1/groups/billing/offsets", json=commit, headers=reader)
        assert await answer(resp) == topic_denied
        reset = {"strategy": "earliest", "topics": topics}
        url = "/v1/groups/billing/offsets/reset"
        assert await answer(await node_client.post(url, json=reset, headers=reader)) == topic_denied
        reset = {"strategy": "earliest", "partitions": [{"topic": topics[0], "partition": 0}]}
        assert await answer(await node_client.post(url, json=reset, headers=reader)) == topic_denied
    # Offsets of named topics need DESCRIBE on them (READ on the group gives
    # DESCRIBE on the group).
    url = "/v1/groups/billing/offsets?topics=orders"
    assert await answer(await node_client.get(url, headers=reader)) == topic_denied
    # A heartbeat that names no topics needs only the group.
    beat = {"member_epoch": 1}
    url = "/v1/groups/billing/members/m1/heartbeat"
    status, code = await answer(await node_client.post(url, json=beat, headers=reader))
    assert status not in (401, 403), code
    # Another group: denied by the group, whatever the body.
    url = "/v1/groups/other/offsets"
    assert await answer(await node_client.get(url, headers=reader)) == (
        403,
        "GROUP_AUTHORIZATION_FAILED",
    )


async def test_create_topic_needs_create_on_the_cluster_or_on_the_topic(
    node_client: TestClient[Any, Any],
) -> None:
    creator = bearer("creator")
    mine = await node_client.post("/v1/topics", json={"name": "events"}, headers=creator)
    status, code = await answer(mine)
    assert status not in (401, 403), code  # on to the controller (none here)
    other = await node_client.post("/v1/topics", json={"name": "other"}, headers=creator)
    assert await answer(other) == (403, "TOPIC_AUTHORIZATION_FAILED")


async def test_a_producer_id_needs_write_on_some_topic(node_client: TestClient[Any, Any]) -> None:
    status, code = await answer(await node_client.post("/v1/producers", headers=bearer("writer")))
    assert status not in (401, 403), code
    for user in ("reader", "creator", "nobody"):
        resp = await node_client.post("/v1/producers", headers=bearer(user))
        assert await answer(resp) == (403, "CLUSTER_AUTHORIZATION_FAILED")


async def test_the_topic_listing_shows_what_the_caller_may_describe(
    node_client: TestClient[Any, Any],
) -> None:
    async def names(user: str) -> list[str]:
        resp = await node_client.get("/v1/topics", headers=bearer(user))
        assert resp.status == 200
        return [t["name"] for t in (await resp.json())["topics"]]

    assert await names(GRANTED) == ["orders"]
    assert await names("writer") == ["orders"]  # WRITE implies DESCRIBE
    assert await names("reader") == []
    # Configs only with DESCRIBE_CONFIGS (as Kafka's DescribeConfigs): WRITE
    # implies DESCRIBE, not DESCRIBE_CONFIGS (found by the issue 12 attack).
    for user, shown in ((GRANTED, True), ("writer", False)):
        resp = await node_client.get("/v1/topics", headers=bearer(user))
        (topic,) = (await resp.json())["topics"]
        assert ("configs" in topic) is shown, (user, topic)
    # The cluster view counts topics as the listing shows them.
    for user, count in ((GRANTED, 1), ("writer", 1), ("reader", 0)):
        resp = await node_client.get("/v1/cluster", headers=bearer(user))
        assert resp.status == 200 and (await resp.json())["topics"] == count, user
