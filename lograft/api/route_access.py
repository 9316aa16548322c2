"""Who may call each route: the one table of authorization decisions.

Every route a node serves, as (method, path pattern in aiohttp's canonical
form: `{group:[^/]+}` is `{group}`), has exactly one decision here; a HEAD is
decided as its GET. The authorization middleware (api/access.py) enforces it
when `[security] authorization` is on, with Kafka's StandardAuthorizer rules
(lograft/security/authorizer.py). The decisions:

- public: no identity needed (health, readiness, the API's description);
- internal: node-to-node; only the cluster secret opens it (app.py's
  secret middleware), never a client's credentials, so no ACL applies;
- authenticated: any caller the authentication middleware let in;
- ACL: every `Need` must be allowed: an operation on the resource the path
  (or, when the query names one, the query) names, or on the cluster; a
  denial answers TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED (403) before the
  handler runs, so a caller denied DESCRIBE cannot learn whether a topic
  exists;
- handler: the resources are in the body, or the answer is a listing
  filtered to what the caller may see; the handler decides, through
  `access.require` / `access.may`, as `checks` says.

A route missing here is refused (fails closed), a node whose router has one
does not start (`access.check_every_route_decided`), and
tests/unit/node/test_route_access.py, which walks a real node's router and
the OpenAPI document, fails until it is decided.

The operations are Kafka's for the matching requests (Metadata, CreateTopics,
Produce, Fetch, ListOffsets, FindCoordinator, ConsumerGroupHeartbeat,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
InitProducerId, DescribeAcls, CreateAcls, ...).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from lograft.api.internal_paths import GROUPS_PATH, REPLICA_STREAM_PATH
from lograft.api.partition_offsets import PATH as PARTITION_OFFSETS_PATH
from lograft.api.routes_internal import CONTROLLER_PREFIX, REPLICA_FETCH_PATH
from lograft.api.stream.fetch import PATH as STREAM_FETCH_PATH
from lograft.brokers.produce_router import FORWARD_PATH
from lograft.security.acls import AclOperation, ResourceType

__all__ = [
    "ROUTE_ACCESS",
    "SECURITY_ADMIN_ROUTES",
    "Kind",
    "Need",
    "RouteAccess",
    "access_key",
    "decision_for",
]

INTERNAL_PREFIX = "/internal/"

_T, _G, _C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_O = AclOperation


class Kind(enum.StrEnum):
    PUBLIC = "public"
    INTERNAL = "internal"
    AUTHENTICATED = "authenticated"
    ACL = "acl"
    HANDLER = "handler"


@dataclass(frozen=True, slots=True)
class Need:
    """`operation` on a resource of `resource_type`: the one the path parameter
    `path` names, or the one the query parameter `query` names (checked only
    when the request has it), or, with neither, the cluster."""

    resource_type: ResourceType
    operation: AclOperation
    path: str | None = None
    query: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None and self.query is None) != (self.resource_type is _C):
            raise ValueError("a cluster need names no parameter; any other names one")


@dataclass(frozen=True, slots=True)
class RouteAccess:
    kind: Kind
    needs: tuple[Need, ...] = ()
    # A handler decision: what the handler checks, in words (docs/api.md).
    checks: str = ""

    def describe(self) -> str:
        """The decision in words, as docs/api.md's table says it."""
        if self.kind is Kind.ACL:
            text = "; ".join(_need_text(n) for n in self.needs)
            return f"{text}, {self.checks}" if self.checks else text
        if self.kind is Kind.HANDLER:
            return self.checks
        return {
            Kind.PUBLIC: "public: no credentials",
            Kind.INTERNAL: "cluster secret only",
            Kind.AUTHENTICATED: "any authenticated caller",
        }[self.kind]


def _need_text(need: Need) -> str:
    op = need.operation.value.upper()
    if need.path is not None:
        return f"{op} on {need.resource_type.value} {{{need.path}}}"
    if need.query is not None:
        return f"{op} on the {need.resource_type.value} named by `{need.query}`, when given"
    return f"{op} on the cluster"


_PUBLIC = RouteAccess(Kind.PUBLIC)
_INTERNAL = RouteAccess(Kind.INTERNAL)
_AUTHENTICATED = RouteAccess(Kind.AUTHENTICATED)


def _acl(*needs: Need) -> RouteAccess:
    return RouteAccess(Kind.ACL, needs)


def _topic(op: AclOperation) -> Need:
    return Need(_T, op, path="topic")


def _group(op: AclOperation) -> Need:
    return Need(_G, op, path="group")


def _cluster(op: AclOperation) -> Need:
    return Need(_C, op)


def _handler(checks: str) -> RouteAccess:
    return RouteAccess(Kind.HANDLER, checks=checks)


# The security administration (api/routes_security.py): ACLs, users, quotas.
SECURITY_ADMIN_ROUTES: Mapping[tuple[str, str], RouteAccess] = MappingProxyType(
    {
        ("GET", "/v1/acls"): _acl(_cluster(_O.DESCRIBE)),
        ("POST", "/v1/acls"): _acl(_cluster(_O.ALTER)),
        ("DELETE", "/v1/acls"): _acl(_cluster(_O.ALTER)),
        ("GET", "/v1/users"): _acl(_cluster(_O.DESCRIBE)),
        ("PUT", "/v1/users/{user}"): _acl(_cluster(_O.ALTER)),
        ("DELETE", "/v1/users/{user}"): _acl(_cluster(_O.ALTER)),
        ("GET", "/v1/quotas"): _acl(_cluster(_O.DESCRIBE_CONFIGS)),
        ("POST", "/v1/quotas"): _acl(_cluster(_O.ALTER_CONFIGS)),
    }
)

ROUTE_ACCESS: Mapping[tuple[str, str], RouteAccess] = MappingProxyType(
    {
        # -- public
        ("GET", "/healthz"): _PUBLIC,
        ("GET", "/readyz"): _PUBLIC,
        ("GET", "/openapi.json"): _PUBLIC,
        # -- the web console's static files (api/console/assets.py): no data
        # in them; the page calls the API with the caller's own credentials.
        ("GET", "/ui"): _PUBLIC,
        ("GET", "/ui/"): _PUBLIC,
        ("GET", "/ui/{asset}"): _PUBLIC,
        # -- the node's metrics: what the cluster's describe shows and more
        # (every topic's and group's name), so DESCRIBE on the cluster, as
        # Kafka's DescribeCluster; with security off everyone may scrape.
        ("GET", "/metrics"): _acl(_cluster(_O.DESCRIBE)),
        # -- the cluster view (Kafka's Metadata request answers brokers to anyone)
        # Its topic count counts only the topics the caller may DESCRIBE.
        ("GET", "/v1/cluster"): _AUTHENTICATED,
        ("GET", "/v1/brokers"): _AUTHENTICATED,
        # -- topics
        ("GET", "/v1/topics"): _handler(
            "lists only the topics the caller may DESCRIBE (the others are absent, not 403); "
            "a topic's configs only with DESCRIBE_CONFIGS on it"
        ),
        ("POST", "/v1/topics"): _handler(
            "CREATE on the cluster, or else CREATE on the topic named in the body"
        ),
        ("GET", "/v1/topics/{topic}"): RouteAccess(
            Kind.ACL,
            (_topic(_O.DESCRIBE),),
            checks="configs shown only with DESCRIBE_CONFIGS on the topic",
        ),
        ("DELETE", "/v1/topics/{topic}"): _acl(_topic(_O.DELETE)),
        ("POST", "/v1/topics/{topic}/partitions"): _acl(_topic(_O.ALTER)),
        ("PATCH", "/v1/topics/{topic}/configs"): _acl(_topic(_O.ALTER_CONFIGS)),
        # -- data
        ("POST", "/v1/topics/{topic}/records"): _acl(_topic(_O.WRITE)),
        ("POST", "/v1/topics/{topic}/partitions/{partition}/batches"): _acl(_topic(_O.WRITE)),
        ("GET", "/v1/topics/{topic}/partitions/{partition}/records"): _acl(_topic(_O.READ)),
        ("GET", "/v1/topics/{topic}/partitions/{partition}/offsets"): _acl(_topic(_O.DESCRIBE)),
        # Checked before the stream starts (no event is sent to a denied caller),
        # and again before each push (api/access.py reauthorize).
        ("GET", "/v1/topics/{topic}/stream"): _acl(
            _topic(_O.READ), Need(_G, _O.READ, query="group")
        ),
        ("POST", "/v1/producers"): _handler(
            "WRITE on at least one topic (Kafka's KIP-679), or else ALL on the cluster "
            "(lograft has no IDEMPOTENT_WRITE operation)"
        ),
        # -- consumer groups
        ("GET", "/v1/groups/{group}/coordinator"): _acl(_group(_O.DESCRIBE)),
        ("POST", "/v1/groups/{group}/members"): RouteAccess(
            Kind.ACL,
            (_group(_O.READ),),
            checks="and DESCRIBE on every topic of subscribed_topics",
        ),
        ("POST", "/v1/groups/{group}/members/{member}/heartbeat"): RouteAccess(
            Kind.ACL,
            (_group(_O.READ),),
            checks="and DESCRIBE on every topic of subscribed_topics",
        ),
        ("DELETE", "/v1/groups/{group}/members/{member}"): _acl(_group(_O.READ)),
        ("POST", "/v1/groups/{group}/offsets"): RouteAccess(
            Kind.ACL, (_group(_O.READ),), checks="and READ on every topic committed"
        ),
        ("GET", "/v1/groups/{group}/offsets"): RouteAccess(
            Kind.ACL,
            (_group(_O.DESCRIBE),),
            checks="topics named in `topics` need DESCRIBE; without `topics`, "
            "only offsets of topics the caller may DESCRIBE are listed",
        ),
        ("GET", "/v1/groups"): _handler(
            "DESCRIBE on the cluster lists every group; else only the groups "
            "the caller may DESCRIBE are listed"
        ),
        ("GET", "/v1/groups/{group}"): RouteAccess(
            Kind.ACL,
            (_group(_O.DESCRIBE),),
            checks="topics the caller may not DESCRIBE are absent from the description",
        ),
        ("DELETE", "/v1/groups/{group}"): _acl(_group(_O.DELETE)),
        ("POST", "/v1/groups/{group}/offsets/reset"): RouteAccess(
            Kind.ACL, (_group(_O.READ),), checks="and READ on every topic reset"
        ),
        # -- node to node: the cluster secret, never a client's credentials
        ("POST", CONTROLLER_PREFIX + "/{name}"): _INTERNAL,
        ("POST", REPLICA_FETCH_PATH): _INTERNAL,
        ("GET", REPLICA_STREAM_PATH): _INTERNAL,
        ("POST", FORWARD_PATH): _INTERNAL,
        ("POST", STREAM_FETCH_PATH): _INTERNAL,
        ("POST", PARTITION_OFFSETS_PATH): _INTERNAL,
        ("GET", GROUPS_PATH): _INTERNAL,
        **SECURITY_ADMIN_ROUTES,
    }
)


def access_key(method: str, canonical: str) -> tuple[str, str]:
    """The key a route is decided under: a HEAD is its GET's."""
    return ("GET" if method == "HEAD" else method, canonical)


def decision_for(method: str, canonical: str) -> RouteAccess | None:
    """The route's decision; None: undecided (refused)."""
    return ROUTE_ACCESS.get(access_key(method, canonical))


def _check_table() -> None:
    """The table's own consistency, checked at import: internal decisions are
    exactly the routes under /internal/ (which the secret middleware guards
    by prefix), and every ACL need's path parameter is in its pattern."""
    for (method, pattern), decision in ROUTE_ACCESS.items():
        internal = pattern.startswith(INTERNAL_PREFIX)
        if internal != (decision.kind is Kind.INTERNAL):
            raise AssertionError(f"{method} {pattern}: internal iff under {INTERNAL_PREFIX}")
        for need in decision.needs:
            if need.path is not None and "{" + need.path + "}" not in pattern:
                raise AssertionError(f"{method} {pattern}: no path parameter {need.path}")
        if (decision.kind is Kind.ACL) != bool(decision.needs):
            raise AssertionError(f"{method} {pattern}: ACL decisions and only they have needs")


_check_table()
