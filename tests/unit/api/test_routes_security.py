"""The security endpoints (/v1/acls, /v1/users, /v1/quotas) on an aiohttp
test server, with the real controller handlers over a metadata store that a
fake Raft applies batches to at once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api import routes_security
from lograft.api.http_errors import error_middleware
from lograft.api.routes_internal import ControllerRpc
from lograft.api.routes_security import PasswordHasher, SecurityRoutes
from lograft.quorum.controller import BrokerSessions, ControllerConfig
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.metadata_store import MetadataStore
from lograft.security.passwords import ScramMechanism, check_password
from lograft.security.quotas import QuotaEntity, QuotaKey


class AppliedRaft:
    """A Raft leader of one whose appends commit and apply at once."""

    node_id = "1"
    is_leader = True
    leader_id = "1"

    def refused_peers(self) -> dict[str, int]:
        return {}  # no voter's Raft port refused

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.offset = 0

    async def append(self, batch: bytes) -> int:
        self.offset += 1
        self.store.apply(self.offset, batch)
        return self.offset

    async def wait_for_offset(self, offset: int, timeout_ms: int) -> None:
        assert self.store.image.offset >= offset


class Controller:
    """ControllerCalls in process (as LocalController is)."""

    def __init__(self, rpc: ControllerRpc) -> None:
        self.rpc = rpc
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def active_controller_id(self) -> int | None:
        return 1

    async def call(self, name: str, body: dict[str, Any], *, timeout_ms: int = 0) -> Any:
        self.calls.append((name, body))
        return await self.rpc.methods[name](body)


class Node:
    def __init__(self, client: TestClient, store: MetadataStore, controller: Controller) -> None:
        self.client = client
        self.store = store
        self.controller = controller

    async def req(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        resp = await self.client.request(method, path, json=body)
        return resp.status, await resp.json()


@pytest.fixture
async def node():
    store = MetadataStore()
    raft = AppliedRaft(store)
    config = ControllerConfig(acls_per_request_max=3)
    runtime = ControllerRuntime(raft, store, config)  # type: ignore[arg-type]
    runtime._set_sessions(BrokerSessions.starting([], 0))
    controller = Controller(ControllerRpc(runtime))
    app = web.Application(middlewares=[error_middleware])
    SecurityRoutes(store=store, raft=raft, controller=controller).add_to(app)  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as client:
        yield Node(client, store, controller)


def binding(name: str = "orders", **fields: str) -> dict[str, str]:
    return {
        "resource_type": "topic",
        "resource_name": name,
        "pattern_type": "literal",
        "principal": "User:alice",
        "host": "*",
        "operation": "read",
        "permission": "allow",
        **fields,
    }


async def test_acls_add_list_filter_remove(node: Node) -> None:
    status, body = await node.req("POST", "/v1/acls", {"acls": [binding(), binding("pay")]})
    assert status == 201
    assert body["created"] == [binding(), binding("pay")] and body["existing"] == []
    assert len(node.store.image.acls) == 2
    status, body = await node.req("POST", "/v1/acls", {"acls": [binding()]})
    assert (status, body["created"], body["existing"]) == (201, [], [binding()])
    status, body = await node.req("GET", "/v1/acls")
    assert status == 200 and body["acls"] == [binding(), binding("pay")]
    status, body = await node.req("GET", "/v1/acls?resource_name=pay&principal=User%3Aalice")
    assert body["acls"] == [binding("pay")]
    status, body = await node.req("DELETE", "/v1/acls?resource_name=orders")
    assert status == 200 and body["deleted"] == [binding()]
    assert [a.resource_name for a in node.store.image.acls] == ["pay"]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/v1/acls", {"acls": [binding(principal="alice")]}, "acls[0].principal"),
        ("POST", "/v1/acls", {"acls": [binding(host="example.com")]}, "acls[0].host"),
        ("POST", "/v1/acls", {"acls": [binding(operation="fly")]}, "acls[0].operation"),
        (
            "POST",
            "/v1/acls",
            {"acls": [binding(resource_type="group", operation="write")]},
            "acls[0].operation",
        ),
        ("POST", "/v1/acls", {"acls": []}, "acls"),
        ("POST", "/v1/acls", {"acls": [binding(str(i)) for i in range(4)]}, "acls"),
        ("GET", "/v1/acls?pattern_type=fuzzy", None, "pattern_type"),
        ("DELETE", "/v1/acls?colour=blue", None, "colour"),
        ("GET", "/v1/acls?host=1.2.3.4&host=5.6.7.8", None, "host"),
        ("PUT", "/v1/users/alice", {"password": ""}, "password"),
        ("PUT", "/v1/users/alice", {"password": "p", "iterations": 10}, "iterations"),
        ("PUT", "/v1/users/alice", {"password": "p", "mechanism": "MD5"}, "mechanism"),
        ("PUT", "/v1/users/a%0Ab", {"password": "p"}, "user"),
        ("PUT", "/v1/users/" + "u" * 256, {"password": "p"}, "user"),
        ("DELETE", "/v1/users/alice?mechanism=MD5", None, "mechanism"),
        ("POST", "/v1/quotas", {"entity": {}, "set": {"producer_byte_rate": 1}}, "entity.user"),
        ("POST", "/v1/quotas", {"entity": {"user": "a"}, "set": {"bytes": 1}}, "set"),
        (
            "POST",
            "/v1/quotas",
            {"entity": {"user": "a"}, "set": {"producer_byte_rate": 1.5}},
            "set.producer_byte_rate",
        ),
        ("POST", "/v1/quotas", {"entity": {"user": "a"}}, "set"),
        ("GET", "/v1/quotas?principal=x", None, "principal"),
    ],
)
async def test_bad_input_is_400_naming_the_field_and_commits_nothing(
    node: Node, method: str, path: str, body: Any, field: str
) -> None:
    status, answer = await node.req(method, path, body)
    assert status == 400, answer
    assert answer["error"]["code"] == "INVALID_REQUEST"
    assert answer["error"]["details"]["field"].startswith(field), answer
    assert node.store.image.offset == -1


async def test_set_password_stores_only_a_salted_hash(node: Node) -> None:
    password = "correct horse battery staple"
    status, body = await node.req("PUT", "/v1/users/alice", {"password": password})
    assert status == 200
    assert body == {
        "name": "alice",
        "mechanism": "SCRAM-SHA-512",
        "iterations": 4096,
        "metadata_offset": 1,
    }
    credential = node.store.image.scram_credentials["alice"][ScramMechanism.SCRAM_SHA_512]
    check_password(credential, password)
    # The controller got the credential, never the password.
    (name, sent), *_ = node.controller.calls
    assert name == "upsert-scram-credential" and password not in repr(sent)
    status, body = await node.req(
        "PUT",
        "/v1/users/alice",
        {"password": "other", "mechanism": "SCRAM-SHA-256", "iterations": 8192},
    )
    assert status == 200
    status, body = await node.req("GET", "/v1/users")
    assert body == {
        "users": [
            {
                "name": "alice",
                "mechanisms": [
                    {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
                    {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
                ],
            }
        ]
    }


async def test_a_refused_password_is_never_echoed(node: Node) -> None:
    secret = "s3cr3t-" + "x" * 2000
    status, body = await node.req("PUT", "/v1/users/alice", {"password": secret})
    assert status == 400 and body["error"]["details"]["field"] == "password"
    assert "s3cr3t" not in str(body)
    status, body = await node.req("PUT", "/v1/users/alice", {"password": "s3cr3t\x00"})
    assert status == 400 and "s3cr3t" not in str(body)


async def test_delete_user(node: Node) -> None:
    await node.req("PUT", "/v1/users/alice", {"password": "a"})
    await node.req("PUT", "/v1/users/alice", {"password": "b", "mechanism": "SCRAM-SHA-256"})
    status, body = await node.req("DELETE", "/v1/users/alice?mechanism=SCRAM-SHA-256")
    assert (status, body["mechanisms"]) == (200, ["SCRAM-SHA-256"])
    status, body = await node.req("DELETE", "/v1/users/alice")
    assert (status, body["mechanisms"]) == (200, ["SCRAM-SHA-512"])
    assert node.store.image.scram_credentials == {}
    status, body = await node.req("DELETE", "/v1/users/alice")
    assert (status, body["error"]["code"]) == (404, "RESOURCE_NOT_FOUND")


async def test_quotas_set_describe_remove(node: Node) -> None:
    status, body = await node.req(
        "POST",
        "/v1/quotas",
        {"entity": {"user": "alice"}, "set": {"producer_byte_rate": 1048576}},
    )
    assert status == 200
    assert body["entity"] == {"user": "alice"}
    assert body["values"] == {"producer_byte_rate": 1048576.0}
    status, _ = await node.req(
        "POST",
        "/v1/quotas",
        {"entity": {"user": None, "client_id": "etl"}, "set": {"request_percentage": 25}},
    )
    assert status == 200
    assert node.store.image.client_quotas[QuotaEntity(user="alice")] == {
        QuotaKey.PRODUCER_BYTE_RATE: 1048576.0
    }
    status, body = await node.req("GET", "/v1/quotas")
    assert body["quotas"] == [
        {"entity": {"user": None, "client_id": "etl"}, "values": {"request_percentage": 25.0}},
        {"entity": {"user": "alice"}, "values": {"producer_byte_rate": 1048576.0}},
    ]
    status, body = await node.req("GET", "/v1/quotas?user=alice")
    assert [q["entity"] for q in body["quotas"]] == [{"user": "alice"}]
    status, body = await node.req("GET", "/v1/quotas?client_id=etl")
    assert [q["entity"] for q in body["quotas"]] == [{"user": None, "client_id": "etl"}]
    status, body = await node.req(
        "POST", "/v1/quotas", {"entity": {"user": "alice"}, "remove": ["producer_byte_rate"]}
    )
    assert (status, body["values"]) == (200, {})
    assert QuotaEntity(user="alice") not in node.store.image.client_quotas


async def test_password_hashing_is_off_the_loop_and_bounded(monkeypatch) -> None:
    running = 0
    peak = 0
    lock = threading.Lock()
    loop_threads: set[int] = set()
    real = routes_security.make_credential

    def slow(*args: Any, **kwargs: Any) -> Any:
        nonlocal running, peak
        loop_threads.add(threading.get_ident())
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return real(*args, **kwargs)

    monkeypatch.setattr(routes_security, "make_credential", slow)
    hasher = PasswordHasher(2)
    results = await asyncio.gather(
        *(hasher.credential(f"u{i}", "pw", ScramMechanism.SCRAM_SHA_256, 4096) for i in range(6))
    )
    assert [r.name for r in results] == [f"u{i}" for i in range(6)]
    assert 1 <= peak <= 2
    assert threading.get_ident() not in loop_threads


async def test_a_bad_credential_on_the_internal_rpc_is_not_echoed(node: Node) -> None:
    from lograft.errors import InvalidRequestError

    body = {
        "credential": {
            "name": "alice",
            "mechanism": "SCRAM-SHA-256",
            "salt": "c2VjcmV0LXNhbHQ=",  # 11 bytes: too short
            "iterations": 4096,
            "stored_key": "A" * 44,
            "server_key": "A" * 44,
        }
    }
    with pytest.raises(InvalidRequestError) as caught:
        await node.controller.rpc.methods["upsert-scram-credential"](body)
    assert caught.value.details["field"] == "credential.salt"
    assert "c2VjcmV0" not in caught.value.message and "secret" not in caught.value.message
