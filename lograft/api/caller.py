"""Who is calling: the identity every request carries through the routes.

The authentication middleware (docs/security.md) sets a `Caller` on each
request under `CALLER_KEY`; authorization, quotas and logs read it with
`caller_of`. With authentication off, every caller is `User:ANONYMOUS`.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from aiohttp import web

from lograft.security.settings import ANONYMOUS

__all__ = ["CALLER_KEY", "CLIENT_ID_HEADER", "Caller", "How", "caller_of"]

# Kafka's client.id, in HTTP form: names the client for quotas and logs.
CLIENT_ID_HEADER = "X-Lograft-Client-Id"


class How(enum.StrEnum):
    """How the caller proved who it is."""

    ANONYMOUS = "anonymous"  # authentication off
    BEARER = "bearer"
    PASSWORD = "password"
    CERTIFICATE = "certificate"
    CLUSTER = "cluster"  # another node, with the cluster secret (internal routes only)


class Caller(NamedTuple):
    principal: str  # "User:alice"
    host: str  # the peer's IP address, canonical text (acls.canonical_host)
    client_id: str  # the X-Lograft-Client-Id header, checked; "" when absent
    how: How
    # When the credential stops counting, wall-clock seconds (a bearer
    # token's exp plus the clock skew allowed); None: it does not expire. A
    # long-lived answer (a stream) ends then (authentication.reauthenticate).
    expires_at: float | None = None

    @property
    def user(self) -> str:
        """The principal's name without its type (Kafka's quota user)."""
        return self.principal.partition(":")[2]


# Where the authentication middleware puts the request's Caller.
CALLER_KEY = web.RequestKey("lograft.caller", Caller)


def caller_of(request: web.Request) -> Caller:
    """The request's caller; anonymous from its peer address when no
    authentication middleware ran (a node without [security])."""
    caller = request.get(CALLER_KEY)
    if isinstance(caller, Caller):
        return caller
    return Caller(ANONYMOUS, request.remote or "", "", How.ANONYMOUS)
