"""Paths of internal routes that modules on both sides of an import cycle name.

`route_access` decides every route and the route modules import `access`, so
a path both need lives here, in a leaf, rather than in its route module.
"""

from __future__ import annotations

# Where a broker lists the groups it coordinates, for other nodes.
GROUPS_PATH = "/internal/v1/groups"
# Where a follower POSTs a replica fetch (routes_internal.py).
REPLICA_FETCH_PATH = "/internal/v1/replica-fetch"
# Where a follower opens its WebSocket of replica fetches (replica_stream.py).
REPLICA_STREAM_PATH = "/internal/v1/replica-fetch/stream"
