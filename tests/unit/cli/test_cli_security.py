"""`lograft acls|users|quotas` against the real security routes and
controller handlers (a fake Raft applying batches at once), served on a
loop thread as the other CLI tests' servers are."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from aiohttp import web

from lograft.api.http_errors import error_middleware
from lograft.api.routes_internal import ControllerRpc
from lograft.api.routes_security import SecurityRoutes
from lograft.quorum.controller import BrokerSessions, ControllerConfig
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.metadata_store import MetadataStore
from lograft.security.passwords import ScramMechanism, check_password
from tests.unit.api.test_routes_security import AppliedRaft, Controller
from tests.unit.cli.cli_support import LoopThread, run_cli


class SecurityServer:
    def __init__(self, loop: LoopThread) -> None:
        self.loop = loop
        self.store = MetadataStore()
        self.url = ""
        loop.run(self._start())

    async def _start(self) -> None:
        raft = AppliedRaft(self.store)
        runtime = ControllerRuntime(raft, self.store, ControllerConfig())  # type: ignore[arg-type]
        runtime._set_sessions(BrokerSessions.starting([], 0))
        app = web.Application(middlewares=[error_middleware])
        SecurityRoutes(
            store=self.store,
            raft=raft,  # type: ignore[arg-type]
            controller=Controller(ControllerRpc(runtime)),
        ).add_to(app)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def stop(self) -> None:
        self.loop.run(self.runner.cleanup())


@pytest.fixture
def server() -> Iterator[SecurityServer]:
    loop = LoopThread()
    srv = SecurityServer(loop)
    try:
        yield srv
    finally:
        srv.stop()
        loop.close()


def cli(server: SecurityServer, *argv: str, stdin: bytes = b""):
    return run_cli([*argv, "--bootstrap", server.url], stdin=stdin)


def usage_error(server: SecurityServer, *argv: str, stdin: bytes = b"") -> None:
    """The command is refused as bad usage (exit 2) before anything is sent."""
    with pytest.raises(SystemExit) as caught:
        cli(server, *argv, stdin=stdin)
    assert caught.value.code == 2


def test_acls_add_list_remove(server: SecurityServer) -> None:
    res = cli(
        server,
        "acls",
        "add",
        "--principal",
        "User:alice",
        "--topic",
        "orders",
        "--operation",
        "read",
        "--operation",
        "describe",
    )
    assert res.code == 0, res.err
    assert res.lines == [
        "added ACL: allow User:alice read on topic orders (literal) from *",
        "added ACL: allow User:alice describe on topic orders (literal) from *",
    ]
    res = cli(
        server,
        "acls",
        "add",
        "--principal",
        "User:bob",
        "--cluster",
        "--operation",
        "alter",
        "--deny",
        "--host",
        "10.0.0.1",
    )
    assert res.lines == [
        "added ACL: deny User:bob alter on cluster kafka-cluster (literal) from 10.0.0.1"
    ]
    res = cli(
        server,
        "acls",
        "add",
        "--principal",
        "User:alice",
        "--topic",
        "orders",
        "--operation",
        "read",
    )
    assert res.lines == ["exists already: allow User:alice read on topic orders (literal) from *"]
    res = cli(server, "acls", "list")
    assert res.code == 0 and res.lines == [
        "PRINCIPAL   HOST      PERMISSION  OPERATION  RESOURCE  NAME           PATTERN",
        "User:bob    10.0.0.1  deny        alter      cluster   kafka-cluster  literal",
        "User:alice  *         allow       describe   topic     orders         literal",
        "User:alice  *         allow       read       topic     orders         literal",
    ]
    res = cli(server, "acls", "list", "--principal", "User:bob", "--json")
    assert '"principal": "User:bob"' in res.out
    usage_error(server, "acls", "remove")  # no filter, no --all
    res = cli(server, "acls", "remove", "--principal", "User:alice", "--operation", "read")
    assert res.lines == [
        "removed ACL: allow User:alice read on topic orders (literal) from *",
        "removed 1 ACL",
    ]
    assert len(server.store.image.acls) == 2
    res = cli(server, "acls", "remove", "--all")
    assert res.lines[-1] == "removed 2 ACLs"
    assert cli(server, "acls", "list").lines == ["no ACLs"]


def test_a_refused_acl_names_the_field(server: SecurityServer) -> None:
    res = cli(server, "acls", "add", "--principal", "alice", "--topic", "t", "--operation", "read")
    assert res.code == 1
    assert res.err.startswith("lograft acls add: INVALID_REQUEST: acls[0].principal:")


def test_users_add_list_delete(server: SecurityServer) -> None:
    res = cli(server, "users", "add", "alice", "--password-stdin", stdin=b"hunter2-long\n")
    assert res.code == 0, res.err
    assert res.lines == ["set password of user alice (SCRAM-SHA-512, 4096 iterations)"]
    credential = server.store.image.scram_credentials["alice"][ScramMechanism.SCRAM_SHA_512]
    check_password(credential, "hunter2-long")
    res = cli(
        server,
        "users",
        "add",
        "alice",
        "--password-stdin",
        "--mechanism",
        "SCRAM-SHA-256",
        "--iterations",
        "8192",
        stdin=b"other\n",
    )
    assert res.code == 0, res.err
    res = cli(server, "users", "list")
    assert res.lines == [
        "USER   MECHANISMS",
        "alice  SCRAM-SHA-256 (8192 iterations), SCRAM-SHA-512 (4096 iterations)",
    ]
    assert "hunter2" not in res.out
    res = cli(server, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-256")
    assert res.lines == ["deleted user alice's credentials: SCRAM-SHA-256"]
    res = cli(server, "users", "delete", "alice")
    assert res.lines == ["deleted user alice's credentials: SCRAM-SHA-512"]
    assert cli(server, "users", "list").lines == ["no users"]
    res = cli(server, "users", "delete", "alice")
    assert res.code == 1 and "RESOURCE_NOT_FOUND" in res.err


def test_the_password_is_never_an_argument(server: SecurityServer, capsys) -> None:
    # No terminal and no --password-stdin: refused, nothing sent.
    usage_error(server, "users", "add", "alice")
    assert "--password-stdin" in capsys.readouterr().err
    usage_error(server, "users", "add", "alice", "--password", "x")
    usage_error(server, "users", "add", "alice", "--password-stdin", stdin=b"\n")
    assert server.store.image.scram_credentials == {}


def test_quotas_set_describe(server: SecurityServer) -> None:
    res = cli(
        server,
        "quotas",
        "set",
        "--for-user",
        "alice",
        "--set",
        "producer_byte_rate=1048576",
        "--set",
        "request_percentage=12.5",
    )
    assert res.code == 0, res.err
    assert res.lines == [
        "quotas of user=alice: producer_byte_rate=1048576, request_percentage=12.5"
    ]
    res = cli(
        server,
        "quotas",
        "set",
        "--for-default-user",
        "--for-client-id",
        "etl",
        "--set",
        "consumer_byte_rate=2048",
    )
    assert res.lines == ["quotas of user=<default>, client_id=etl: consumer_byte_rate=2048"]
    res = cli(server, "quotas", "describe")
    assert res.lines == [
        "USER       CLIENT-ID  QUOTAS",
        "<default>  etl        consumer_byte_rate=2048",
        "alice      -          producer_byte_rate=1048576, request_percentage=12.5",
    ]
    res = cli(server, "quotas", "describe", "--for-client-id", "etl")
    assert len(res.lines) == 2
    res = cli(
        server,
        "quotas",
        "set",
        "--for-user",
        "alice",
        "--remove",
        "producer_byte_rate",
        "--remove",
        "request_percentage",
    )
    assert res.lines == ["quotas of user=alice: none"]
    usage_error(server, "quotas", "set", "--set", "producer_byte_rate=1")  # no entity
    usage_error(server, "quotas", "set", "--for-user", "a", "--set", "bogus=1")
    res = cli(server, "quotas", "set", "--for-user", "a", "--set", "producer_byte_rate=1.5")
    assert res.code == 1 and "set.producer_byte_rate" in res.err


def as_json(server: SecurityServer, *argv: str, stdin: bytes = b"") -> dict:
    res = cli(server, *argv, "--output", "json", stdin=stdin)
    assert res.code == 0, res.err
    doc = orjson.loads(res.out)
    assert isinstance(doc, dict)
    return doc


def test_acls_users_quotas_print_json(server: SecurityServer) -> None:
    binding = ["--principal", "User:alice", "--topic", "orders", "--operation", "read"]
    added = as_json(server, "acls", "add", *binding)
    assert [a["operation"] for a in added["created"]] == ["read"] and added["existing"] == []
    assert as_json(server, "acls", "add", *binding)["existing"] == added["created"]
    listed = as_json(server, "acls", "list")
    assert listed["acls"] == added["created"]
    assert {"principal", "host", "permission", "operation", "resource_type"} <= set(
        listed["acls"][0]
    )
    assert as_json(server, "acls", "remove", "--all")["deleted"] == added["created"]

    user = as_json(server, "users", "add", "bob", "--password-stdin", stdin=b"pw-long-enough\n")
    assert (user["name"], user["mechanism"], user["iterations"]) == ("bob", "SCRAM-SHA-512", 4096)
    assert as_json(server, "users", "list")["users"][0]["name"] == "bob"
    assert as_json(server, "users", "delete", "bob")["mechanisms"] == ["SCRAM-SHA-512"]

    quotas = as_json(server, "quotas", "set", "--for-user", "bob", "--set", "producer_byte_rate=9")
    assert quotas["entity"] == {"user": "bob"} and quotas["values"] == {"producer_byte_rate": 9}
    described = as_json(server, "quotas", "describe")
    assert described["quotas"] == [{"entity": {"user": "bob"}, "values": {"producer_byte_rate": 9}}]
