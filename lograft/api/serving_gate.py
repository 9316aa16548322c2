"""Refuse a broker's data requests while it may not serve (retriable 503).

A restarted broker serves no partition until its metadata has caught up with
the quorum (lograft/node/metadata_catch_up.py). Until then every route that
reads or writes partition data, group state or producer ids, public or
node-to-node, answers the error the node's check returns (a retriable 503
with Retry-After): a client retries, or another node's forwarded produce is
retried by its producer. Admin and health routes and the controller's RPCs
are not gated: the node still answers /readyz, its cluster view, and (as a
controller) other brokers' registrations and heartbeats.
"""

from __future__ import annotations

from collections.abc import Callable

from lograft.api.internal_paths import GROUPS_PATH, REPLICA_STREAM_PATH
from lograft.api.partition_offsets import PATH as PARTITION_OFFSETS_PATH
from lograft.api.routes_internal import CONTROLLER_PREFIX, REPLICA_FETCH_PATH
from lograft.api.stream.fetch import PATH as STREAM_FETCH_PATH
from lograft.brokers.produce_router import FORWARD_PATH
from lograft.errors import LograftError

# None: serve; else the error to answer.
ServingCheck = Callable[[], LograftError | None]

# Every route a node registers, as (method, pattern in aiohttp's canonical
# form: `{group:[^/]+}` is `{group}`), is decided here: gated or open. A HEAD
# is decided as its GET. A route in neither set is gated (fails closed), and
# tests/unit/node/test_route_decisions.py, which walks the router of a real
# node, fails until the new route is added to one of the two sets.

# Only a serving broker answers these: they read or write partition data,
# group state or producer ids, or answer as a partition's leader.
GATED_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        # Produce (JSON and raw), fetch, a partition's offsets, the stream.
        ("POST", "/v1/topics/{topic}/records"),
        ("POST", "/v1/topics/{topic}/partitions/{partition}/batches"),
        ("GET", "/v1/topics/{topic}/partitions/{partition}/records"),
        ("GET", "/v1/topics/{topic}/partitions/{partition}/offsets"),
        ("GET", "/v1/topics/{topic}/stream"),
        # Group membership and offsets (the coordinator's state) and group
        # admin: describe shows lag from the partitions' leaders, reset and
        # delete change the group's offsets.
        ("GET", "/v1/groups"),
        ("GET", "/v1/groups/{group}"),
        ("DELETE", "/v1/groups/{group}"),
        ("GET", "/v1/groups/{group}/coordinator"),
        ("POST", "/v1/groups/{group}/members"),
        ("POST", "/v1/groups/{group}/members/{member}/heartbeat"),
        ("DELETE", "/v1/groups/{group}/members/{member}"),
        ("POST", "/v1/groups/{group}/offsets"),
        ("GET", "/v1/groups/{group}/offsets"),
        ("POST", "/v1/groups/{group}/offsets/reset"),
        ("POST", "/v1/producers"),
        # Their node-to-node forms.
        ("POST", FORWARD_PATH),
        ("POST", REPLICA_FETCH_PATH),
        ("GET", REPLICA_STREAM_PATH),
        ("POST", STREAM_FETCH_PATH),
        ("POST", PARTITION_OFFSETS_PATH),
        ("GET", GROUPS_PATH),
    }
)

# Answered while the broker catches up: they serve no partition data of this
# broker's and depend on no leadership of its.
OPEN_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        # Health and readiness: /readyz is what says the broker is catching up.
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        # The API's description, and the web console's static files.
        ("GET", "/openapi.json"),
        ("GET", "/ui"),
        ("GET", "/ui/"),
        ("GET", "/ui/{asset}"),
        # The node's metrics: a catching-up broker is what an operator looks at.
        ("GET", "/metrics"),
        # The node's cluster view (metadata as this node has it, labelled
        # with its metadata_offset).
        ("GET", "/v1/cluster"),
        ("GET", "/v1/brokers"),
        ("GET", "/v1/topics"),
        # Describe adds each partition's offsets from its leader; this node's
        # own answers come from its replica manager, which hosts nothing
        # before catching up, so they are null, not stale.
        ("GET", "/v1/topics/{topic}"),
        # Topic admin: forwarded to the active controller, which decides.
        ("POST", "/v1/topics"),
        ("DELETE", "/v1/topics/{topic}"),
        ("POST", "/v1/topics/{topic}/partitions"),
        ("PATCH", "/v1/topics/{topic}/configs"),
        # Security metadata (routes_security): changes go to the active
        # controller; reads are of this node's image, as the topic list.
        ("GET", "/v1/acls"),
        ("POST", "/v1/acls"),
        ("DELETE", "/v1/acls"),
        ("GET", "/v1/users"),
        ("PUT", "/v1/users/{user}"),
        ("DELETE", "/v1/users/{user}"),
        ("GET", "/v1/quotas"),
        ("POST", "/v1/quotas"),
        # The controller's RPCs (registration, heartbeats, ...): a controller
        # answers other brokers whatever its own broker role's state.
        ("POST", CONTROLLER_PREFIX + "/{name}"),
    }
)


def decision_key(method: str, canonical: str) -> tuple[str, str]:
    """The key a route is decided under: a HEAD is its GET's."""
    return ("GET" if method == "HEAD" else method, canonical)


def is_gated(method: str, canonical: str) -> bool:
    """Whether the route (method, canonical pattern) serves only once the
    broker may: every route not decided open."""
    return decision_key(method, canonical) not in OPEN_ROUTES
