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
from typing import Any

from aiohttp import web

from lograft.api.partition_offsets import PATH as PARTITION_OFFSETS_PATH
from lograft.api.routes_group_admin import GROUPS_PATH
from lograft.api.routes_internal import REPLICA_FETCH_PATH
from lograft.api.stream.fetch import PATH as STREAM_FETCH_PATH
from lograft.brokers.produce_router import FORWARD_PATH
from lograft.errors import LograftError

# None: serve; else the error to answer.
ServingCheck = Callable[[], LograftError | None]

# Route patterns (aiohttp's canonical form) that only a serving broker answers,
# matched as prefixes.
GATED_ROUTE_PREFIXES = (
    "/v1/topics/{topic}/records",
    "/v1/topics/{topic}/partitions/{partition}/",
    "/v1/topics/{topic}/stream",
    "/v1/groups",
    "/v1/producers",
    FORWARD_PATH,
    REPLICA_FETCH_PATH,
    STREAM_FETCH_PATH,
    PARTITION_OFFSETS_PATH,
    GROUPS_PATH,
)


def is_gated(canonical: str) -> bool:
    """Whether the route with this pattern serves only once the broker may."""
    return canonical.startswith(GATED_ROUTE_PREFIXES)


def serving_gate_middleware(check: ServingCheck) -> Any:
    """Answer gated routes with `check()`'s error while it returns one."""

    @web.middleware
    async def gate(request: web.Request, handler: Any) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if resource is not None and is_gated(resource.canonical):
            refusal = check()
            if refusal is not None:
                raise refusal  # error_middleware renders it (503 + Retry-After)
        return await handler(request)

    return gate
