"""Authorization: what the caller may do, decided at one place for every route.

With `[security] authorization` on, the node builds one `AccessControl`: an
`Authorizer` (Kafka's StandardAuthorizer rules, lograft/security/authorizer.py,
with `super_users` and `allow_everyone_if_no_acl_found`) kept in step with
the ACL bindings of the node's newest metadata image. The image keeps the
same `acls` object while no ACL record is replayed, so the check per
request is one identity comparison; a change is applied as a diff (bindings
added and removed), never by rebuilding the index.

The request pipeline (request_pipeline.py) enforces the route table (api/route_access.py)
after authentication has set the caller (api/caller.py) and before the
handler: a route decided by ACLs is refused 403 (TOPIC_, GROUP_ or
CLUSTER_AUTHORIZATION_FAILED, by the resource's type) before anything else
is looked at; a route not in the table is refused. Handlers whose resources
are in the body, or whose answers are listings, ask `require`, `require_each`,
`may` or `may_any`; with authorization off (no `AccessControl` in the app)
these allow everything.

The authorizer is not thread-safe: every decision runs on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web

from lograft.api.caller import Caller, caller_of
from lograft.api.route_access import Kind, Need, RouteAccess, access_key, decision_for
from lograft.echo import clip, shown
from lograft.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    LograftError,
    TopicAuthorizationFailedError,
)
from lograft.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclOperation,
    ResourceType,
)
from lograft.security.authorizer import Authorizer
from lograft.security.settings import SecuritySettings

__all__ = [
    "ACCESS_KEY",
    "AccessControl",
    "AclSource",
    "check_every_route_decided",
    "denied",
    "enforce_route",
    "may",
    "may_any",
    "reauthorize",
    "require",
    "require_each",
    "undecided_routes",
]

# The ACL bindings of the node's newest metadata image.
AclSource = Callable[[], frozenset[AclBinding]]

# Answers of `allowed_any` remembered until the ACLs change, at most
# (principal, host, operation, resource type) keys: each answer reads every
# pattern of the type (15 ms with 10,000 ACLs), and a client asks once per
# producer it starts.
ANY_ANSWERS_CACHED_MAX = 1024

# At most this many denied names are shown in one error's message and details.
DENIED_NAMES_SHOWN = 10

_ERROR_BY_TYPE: dict[ResourceType, type[LograftError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
}


class AccessControl:
    """The authorizer of one node, following its newest image's ACLs."""

    def __init__(self, settings: SecuritySettings, acls: AclSource) -> None:
        self.authorizer = Authorizer(
            super_users=settings.super_users,
            allow_everyone_if_no_acl_found=settings.allow_everyone_if_no_acl_found,
        )
        self._acls = acls
        self._synced: frozenset[AclBinding] = frozenset()
        self._any_answers: dict[tuple[str, str, AclOperation, ResourceType], bool] = {}
        self.sync()

    def sync(self) -> None:
        """Bring the authorizer up to the image's ACLs: nothing when they are
        the same object as last time, else the difference."""
        current = self._acls()
        if current is self._synced:
            return
        previous = self._synced
        for acl in previous - current:
            self.authorizer.remove(acl)
        for acl in current - previous:
            self.authorizer.add(acl)
        self._synced = current
        self._any_answers.clear()

    def allowed(
        self, caller: Caller, resource_type: ResourceType, name: str, operation: AclOperation
    ) -> bool:
        self.sync()
        return self.authorizer.authorize(
            caller.principal, caller.host, operation, resource_type, name
        )

    def allowed_any(
        self, caller: Caller, resource_type: ResourceType, operation: AclOperation
    ) -> bool:
        """Whether the caller may perform `operation` on some resource of the type."""
        self.sync()
        key = (caller.principal, caller.host, operation, resource_type)
        answer = self._any_answers.get(key)
        if answer is None:
            answer = self.authorizer.authorize_by_resource_type(*key)
            if len(self._any_answers) >= ANY_ANSWERS_CACHED_MAX:
                self._any_answers.clear()
            self._any_answers[key] = answer
        return answer


ACCESS_KEY = web.AppKey("access_control", AccessControl)


def denied(
    caller: Caller,
    resource_type: ResourceType,
    names: Iterable[str],
    operation: AclOperation,
) -> LograftError:
    """The 403 for `caller` refused `operation` on the named resources."""
    error = _ERROR_BY_TYPE.get(resource_type, ClusterAuthorizationFailedError)
    op = operation.value.upper()
    if resource_type is ResourceType.CLUSTER:
        return error(
            f"{caller.principal} may not {op} on the cluster: ask an administrator "
            f"for an ACL allowing {op} on the cluster",
            principal=caller.principal,
            resource_type=resource_type.value,
            operation=operation.value,
        )
    listed = sorted(set(names))
    shown_names = ", ".join(shown(n) for n in listed[:DENIED_NAMES_SHOWN])
    more = len(listed) - DENIED_NAMES_SHOWN
    if more > 0:
        shown_names += f" and {more} more"
    kind = resource_type.value + ("s" if len(listed) > 1 else "")
    return error(
        f"{caller.principal} may not {op} {kind} {shown_names}: ask an administrator "
        f"for an ACL allowing {op} on it",
        principal=caller.principal,
        resource_type=resource_type.value,
        resource_names=[clip(n) for n in listed[:DENIED_NAMES_SHOWN]],
        operation=operation.value,
    )


def _control(request: web.Request) -> AccessControl | None:
    return request.app.get(ACCESS_KEY)


def may(
    request: web.Request, resource_type: ResourceType, name: str, operation: AclOperation
) -> bool:
    """Whether the request's caller may perform `operation` on the resource
    (always, with authorization off)."""
    control = _control(request)
    return control is None or control.allowed(caller_of(request), resource_type, name, operation)


def may_any(request: web.Request, resource_type: ResourceType, operation: AclOperation) -> bool:
    """Whether the caller may perform `operation` on at least one resource of
    the type (Kafka's authorizeByResourceType)."""
    control = _control(request)
    return control is None or control.allowed_any(caller_of(request), resource_type, operation)


def require(
    request: web.Request, resource_type: ResourceType, name: str, operation: AclOperation
) -> None:
    """Refuse (403) unless the caller may perform `operation` on the resource."""
    if not may(request, resource_type, name, operation):
        raise denied(caller_of(request), resource_type, (name,), operation)


def require_each(
    request: web.Request,
    resource_type: ResourceType,
    names: Iterable[str],
    operation: AclOperation,
) -> None:
    """Refuse (403, naming every denied resource) unless the caller may
    perform `operation` on each of them."""
    control = _control(request)
    if control is None:
        return
    caller = caller_of(request)
    refused = {n for n in set(names) if not control.allowed(caller, resource_type, n, operation)}
    if refused:
        raise denied(caller, resource_type, refused, operation)


def _resource_name(need: Need, request: web.Request) -> str | None:
    """The name `need` is checked on; None: the query does not name one."""
    if need.path is not None:
        return request.match_info[need.path]
    if need.query is not None:
        return request.query.get(need.query)
    return CLUSTER_RESOURCE_NAME


def enforce(control: AccessControl, decision: RouteAccess, request: web.Request) -> None:
    """Refuse the request unless `decision` lets its caller through; the
    handler checks what a handler decision leaves to it."""
    if decision.kind is not Kind.ACL:
        return
    caller = caller_of(request)
    for need in decision.needs:
        name = _resource_name(need, request)
        if name is not None and not control.allowed(
            caller, need.resource_type, name, need.operation
        ):
            raise denied(caller, need.resource_type, (name,), need.operation)


def reauthorize(request: web.Request) -> None:
    """Decide the request's route again for its caller, against the ACLs of
    now (403 as the middleware would): a long-lived answer (a stream) asks
    before each push, so an ACL removed while it runs stops it, as Kafka
    authorizes every fetch of a long-lived connection. Nothing with
    authorization off."""
    control = _control(request)
    if control is None:
        return
    route = request.match_info.route
    resource = route.resource
    if resource is None:
        return
    decision = decision_for(route.method, resource.canonical)
    if decision is None:
        raise ClusterAuthorizationFailedError(
            f"{route.method} {resource.canonical} has no authorization decision: refused",
        )
    enforce(control, decision, request)


def enforce_route(
    control: AccessControl,
    method: str,
    canonical: str,
    decision: RouteAccess | None,
    request: web.Request,
) -> None:
    """Enforce the route's `decision` (None: the table has none: refused)."""
    if decision is None:
        raise ClusterAuthorizationFailedError(
            f"{method} {canonical} has no authorization decision: refused (a node bug: report it)",
        )
    enforce(control, decision, request)


def undecided_routes(app: web.Application) -> list[tuple[str, str]]:
    """Every (method, canonical pattern) the app routes without a decision."""
    found = set()
    for route in app.router.routes():
        resource = route.resource
        canonical = resource.canonical if resource is not None else "?"
        if decision_for(route.method, canonical) is None:
            found.add(access_key(route.method, canonical))
    return sorted(found)


async def check_every_route_decided(app: web.Application) -> None:
    """An `on_startup` hook: a node with an undecided route does not start."""
    missing = undecided_routes(app)
    if missing:
        raise RuntimeError(
            f"routes without an authorization decision: {missing}; "
            "decide each in lograft/api/route_access.py"
        )
