"""Authorization (lograft/api/access.py) row by row of the route table
(lograft/api/route_access.py): each ACL need is refused without its ACL,
with the error of its resource type, and allowed with exactly it; the
authorizer follows the image's ACLs by difference; undecided routes are
refused and keep a node from starting."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft import errors
from lograft.api.access import (
    AccessControl,
    check_every_route_decided,
    enforce,
    undecided_routes,
)
from lograft.api.app import create_app
from lograft.api.authentication import PUBLIC_ROUTES, Authenticator
from lograft.api.caller import CALLER_KEY, Caller, How
from lograft.api.route_access import ROUTE_ACCESS, SECURITY_ADMIN_ROUTES, Kind, RouteAccess
from lograft.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from lograft.security.settings import SecuritySettings

ALICE = Caller("User:alice", "10.0.0.1", "", How.BEARER)
ERROR_OF = {
    ResourceType.TOPIC: errors.TopicAuthorizationFailedError,
    ResourceType.GROUP: errors.GroupAuthorizationFailedError,
    ResourceType.CLUSTER: errors.ClusterAuthorizationFailedError,
}
# A name for each path or query parameter a row names.
PARAMS = {"topic": "orders", "group": "billing", "partition": "0", "member": "m1", "user": "bob"}


def binding(
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermission = AclPermission.ALLOW,
    principal: str = "User:alice",
) -> AclBinding:
    return AclBinding(
        resource_type=resource_type,
        resource_name=name,
        pattern_type=PatternType.LITERAL,
        principal=principal,
        host="*",
        operation=operation,
        permission=permission,
    )


class Acls:
    """A stand-in for the image: `current` is what the node's image holds."""

    def __init__(self, *acls: AclBinding) -> None:
        self.current = frozenset(acls)
        self.reads = 0

    def __call__(self) -> frozenset[AclBinding]:
        self.reads += 1
        return self.current


def control(*acls: AclBinding, **settings: Any) -> AccessControl:
    return AccessControl(SecuritySettings(authorization=True, **settings), Acls(*acls))


class FakeRequest(dict):
    """What `enforce` reads of a request: its caller, path and query."""

    def __init__(self, match_info: dict[str, str], query: dict[str, str]) -> None:
        super().__init__({CALLER_KEY: ALICE})
        self.match_info = match_info
        self.query = query
        self.remote = ALICE.host


def request_for(decision: RouteAccess, **query: str) -> Any:
    names = {n.path for n in decision.needs if n.path is not None}
    return FakeRequest({n: PARAMS[n] for n in names}, query)


def grants(decision: RouteAccess, permission: AclPermission = AclPermission.ALLOW) -> list:
    out = []
    for need in decision.needs:
        if need.resource_type is ResourceType.CLUSTER:
            name = CLUSTER_RESOURCE_NAME
        else:
            name = PARAMS[need.path] if need.path is not None else PARAMS[need.query or ""]
        out.append(binding(need.resource_type, name, need.operation, permission))
    return out


def query_of(decision: RouteAccess) -> dict[str, str]:
    return {n.query: PARAMS[n.query] for n in decision.needs if n.query is not None}


ACL_ROWS = sorted((k, v) for k, v in ROUTE_ACCESS.items() if v.kind is Kind.ACL)


@pytest.mark.parametrize(("route", "decision"), ACL_ROWS, ids=[" ".join(k) for k, _ in ACL_ROWS])
def test_an_acl_row_refuses_without_its_acls_and_allows_with_them(
    route: tuple[str, str], decision: RouteAccess
) -> None:
    query = query_of(decision)
    first = decision.needs[0]
    with pytest.raises(ERROR_OF[first.resource_type]) as info:
        enforce(control(), decision, request_for(decision, **query))
    assert info.value.details["operation"] == first.operation.value
    assert "User:alice" in info.value.message
    # Exactly the needed ACLs let it through.
    enforce(control(*grants(decision)), decision, request_for(decision, **query))
    # Each need counts: without any one of them, refused by that one's type.
    for i, need in enumerate(decision.needs):
        some = [g for j, g in enumerate(grants(decision)) if j != i]
        with pytest.raises(ERROR_OF[need.resource_type]):
            enforce(control(*some), decision, request_for(decision, **query))
    # A DENY wins over the ALLOW.
    denies = grants(decision, AclPermission.DENY)
    with pytest.raises(errors.LograftError) as info:
        enforce(control(*grants(decision), *denies), decision, request_for(decision, **query))
    assert info.value.code.endswith("_AUTHORIZATION_FAILED")
    # Super users pass whatever the ACLs say.
    enforce(control(*denies, super_users=("User:alice",)), decision, request_for(decision, **query))


def test_the_streams_group_is_checked_only_when_the_query_names_one() -> None:
    decision = ROUTE_ACCESS[("GET", "/v1/topics/{topic}/stream")]
    read_topic = binding(ResourceType.TOPIC, "orders", AclOperation.READ)
    enforce(control(read_topic), decision, request_for(decision))
    with pytest.raises(errors.GroupAuthorizationFailedError):
        enforce(control(read_topic), decision, request_for(decision, group="billing"))


@pytest.mark.parametrize(
    "kind", [Kind.PUBLIC, Kind.INTERNAL, Kind.AUTHENTICATED, Kind.HANDLER], ids=str
)
def test_rows_without_acl_needs_pass_the_middleware(kind: Kind) -> None:
    rows = [d for d in ROUTE_ACCESS.values() if d.kind is kind]
    assert rows
    for decision in rows:
        assert not decision.needs
        enforce(control(), decision, FakeRequest({}, {}))


def test_public_and_internal_rows_are_those_authentication_skips() -> None:
    public = {k for k, v in ROUTE_ACCESS.items() if v.kind is Kind.PUBLIC}
    assert public == {
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/openapi.json"),
        ("GET", "/ui"),
        ("GET", "/ui/"),
        ("GET", "/ui/{asset}"),
    }
    assert {p for _m, p in public} == PUBLIC_ROUTES
    internal = {k for k, v in ROUTE_ACCESS.items() if v.kind is Kind.INTERNAL}
    assert internal == {k for k in ROUTE_ACCESS if k[1].startswith("/internal/")}


def test_the_security_admin_routes_are_decided_as_the_plan_says() -> None:
    cluster = {
        k: (n.resource_type, n.operation) for k, d in SECURITY_ADMIN_ROUTES.items() for n in d.needs
    }
    c, o = ResourceType.CLUSTER, AclOperation
    assert cluster == {
        ("GET", "/v1/acls"): (c, o.DESCRIBE),
        ("POST", "/v1/acls"): (c, o.ALTER),
        ("DELETE", "/v1/acls"): (c, o.ALTER),
        ("GET", "/v1/users"): (c, o.DESCRIBE),
        ("PUT", "/v1/users/{user}"): (c, o.ALTER),
        ("DELETE", "/v1/users/{user}"): (c, o.ALTER),
        ("GET", "/v1/quotas"): (c, o.DESCRIBE_CONFIGS),
        ("POST", "/v1/quotas"): (c, o.ALTER_CONFIGS),
    }
    assert all(ROUTE_ACCESS[k] == v for k, v in SECURITY_ADMIN_ROUTES.items())


def test_every_row_describes_itself_in_words() -> None:
    for decision in ROUTE_ACCESS.values():
        assert decision.describe()
    stream = ROUTE_ACCESS[("GET", "/v1/topics/{topic}/stream")].describe()
    assert stream == "READ on topic {topic}; READ on the group named by `group`, when given"


# -- following the image -------------------------------------------------------------------


def test_the_authorizer_follows_the_images_acls_by_difference() -> None:
    read = binding(ResourceType.TOPIC, "orders", AclOperation.READ)
    write = binding(ResourceType.TOPIC, "orders", AclOperation.WRITE)
    acls = Acls(read)
    access = AccessControl(SecuritySettings(authorization=True), acls)
    t, o = ResourceType.TOPIC, AclOperation
    assert access.allowed(ALICE, t, "orders", o.READ)
    assert not access.allowed(ALICE, t, "orders", o.WRITE)
    # The same object: nothing is re-read into the authorizer.
    before = list(access.authorizer)
    assert access.allowed(ALICE, t, "orders", o.READ)
    assert list(access.authorizer) == before
    # A new image: only the difference is applied.
    added, removed = [], []
    real_add, real_remove = access.authorizer.add, access.authorizer.remove

    def add(acl: AclBinding) -> bool:
        added.append(acl)
        return real_add(acl)

    def remove(acl: AclBinding) -> bool:
        removed.append(acl)
        return real_remove(acl)

    access.authorizer.add = add  # type: ignore[method-assign]
    access.authorizer.remove = remove  # type: ignore[method-assign]
    acls.current = frozenset({write})
    assert not access.allowed(ALICE, t, "orders", o.READ)
    assert access.allowed(ALICE, t, "orders", o.WRITE)
    assert (added, removed) == ([write], [read])
    assert set(access.authorizer) == {write}


# -- the middleware in an app --------------------------------------------------------------


class FakeCaller(Authenticator):
    """Stands in for authentication (off here): every caller is `caller`."""

    def __init__(self, caller: Caller) -> None:
        super().__init__()
        self.caller = caller

    def set_anonymous(self, request: web.Request) -> None:
        request[CALLER_KEY] = self.caller


async def ok(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def app_with(access: AccessControl) -> web.Application:
    # Authentication is off here: the caller is alice, not User:ANONYMOUS.
    app = create_app(
        cluster_secret="s",
        request_bytes_max=1 << 20,
        ready=lambda: (True, {}),
        access=access,
        authenticator=FakeCaller(ALICE),
    )
    return app


async def test_the_middleware_refuses_before_the_handler_and_an_undecided_route() -> None:
    app = app_with(control(binding(ResourceType.TOPIC, "orders", AclOperation.DESCRIBE)))
    seen: list[str] = []

    async def describe(request: web.Request) -> web.Response:
        seen.append(request.match_info["topic"])
        return web.json_response({})

    app.router.add_get("/v1/topics/{topic}", describe)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/v1/topics/orders")).status == 200
        refused = await client.get("/v1/topics/secret")
        assert refused.status == 403
        body = await refused.json()
        assert body["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
        assert body["error"]["details"]["resource_names"] == ["secret"]
        assert seen == ["orders"]  # the denied request never reached the handler
        # HEAD is decided as its GET.
        assert (await client.head("/v1/topics/secret")).status == 403
        # No route: 404 as ever (nothing to authorize, nothing leaks).
        assert (await client.get("/v1/nothing")).status == 404
        assert (await client.get("/healthz")).status == 200
        # A route added after startup with no decision: refused, not served.
        app.router._frozen = False  # only to add a route to a running app in this test
        app.router.add_get("/v1/undecided", ok)
        app.router._frozen = True
        refused = await client.get("/v1/undecided")
        assert refused.status == 403
        assert (await refused.json())["error"]["code"] == "CLUSTER_AUTHORIZATION_FAILED"


async def test_an_app_with_an_undecided_route_does_not_start() -> None:
    app = app_with(control())
    app.router.add_get("/v1/topics/{topic}/new-thing", ok)
    assert undecided_routes(app) == [("GET", "/v1/topics/{topic}/new-thing")]
    with pytest.raises(RuntimeError, match="new-thing"):
        await check_every_route_decided(app)
    server = TestServer(app)
    with pytest.raises(RuntimeError, match="authorization decision"):
        await server.start_server()
    await server.close()


def test_errors_are_403_and_codes_unique() -> None:
    from lograft.api.http_errors import status_for

    for cls in ERROR_OF.values():
        assert status_for(cls("m")) == 403
    codes = [c.code for c in errors.all_error_classes()]
    assert len(codes) == len(set(codes))


def test_answers_by_resource_type_are_remembered_until_the_acls_change() -> None:
    acls = Acls()
    access = AccessControl(SecuritySettings(authorization=True), acls)
    t, write = ResourceType.TOPIC, AclOperation.WRITE
    assert not access.allowed_any(ALICE, t, write)
    calls = []
    real = access.authorizer.authorize_by_resource_type

    def counted(*args: Any) -> bool:
        calls.append(args)
        return real(*args)

    access.authorizer.authorize_by_resource_type = counted  # type: ignore[method-assign]
    assert not access.allowed_any(ALICE, t, write)
    assert calls == []  # remembered
    acls.current = frozenset({binding(t, "orders", write)})
    assert access.allowed_any(ALICE, t, write)
    assert len(calls) == 1  # the ACLs changed: asked again
    acls.current = frozenset()
    assert not access.allowed_any(ALICE, t, write)
