"""The `[security]` section: who may call (authentication) and what they may do
(authorization), and the limits on checking credentials.

`[tls]` (lograft/security/tls.py) encrypts; this section decides identities.
With `authentication` empty (the default, the local quick start) every caller
is `User:ANONYMOUS` and nothing is checked; with it set, a request without
valid credentials of one of the listed kinds is refused 401. `authorization`
turns ACLs on (Kafka's StandardAuthorizer rules, lograft/security/authorizer.py).
Unit suffixes are in the names.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec

from lograft import typed
from lograft.security.acls import parse_principal
from lograft.security.tokens import BearerSettings

__all__ = ["ANONYMOUS", "Authentication", "SecuritySettings"]

# Kafka's KafkaPrincipal.ANONYMOUS: the caller when authentication is off.
ANONYMOUS = "User:ANONYMOUS"


class Authentication(enum.StrEnum):
    """A way in. Values are config values: never rename one."""

    BEARER = "bearer"  # Authorization: Bearer <JWT> checked against [security.bearer]
    PASSWORD = "password"  # HTTP Basic against the SCRAM credentials in the metadata
    CERTIFICATE = "certificate"  # the TLS client certificate's subject ([tls])


class SecuritySettings(typed.Record):
    """The `[security]` section."""

    # The ways in a caller may use; empty: no authentication (User:ANONYMOUS).
    authentication: tuple[Authentication, ...] = ()
    # ACLs enforced on every route (docs/security.md).
    authorization: bool = False
    # Principals allowed everything, before any ACL (Kafka's super.users).
    super_users: tuple[str, ...] = ()
    # A resource no ACL names is open to all (Kafka's
    # allow.everyone.if.no.acl.found); false: denied.
    allow_everyone_if_no_acl_found: bool = False
    # How bearer tokens are checked; required when authentication has "bearer".
    bearer: BearerSettings | None = None
    # Password checks (PBKDF2, ~3 ms each) running at once, off the event loop.
    password_checks_inflight_max: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4
    # Verified (user, password) pairs remembered, so a Basic client does not
    # pay a PBKDF2 per request; keyed by a keyed hash, never the password.
    password_cache_entries_max: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 4096
    # Failed password checks a peer address may run up before its further
    # uncached password checks are refused without hashing (401
    # too_many_failures, Retry-After); 0: no budget. A person guessing hits
    # it within seconds; a user mistyping a few times does not.
    password_failures_per_address_max: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 10
    # An address's failures are forgotten at password_failures_per_address_max
    # per this long (a token bucket: after the budget, one more try every
    # window / max), ms.
    password_failure_window_ms: Annotated[int, msgspec.Meta(ge=1, le=86_400_000)] = 60_000
    # Peer addresses whose failures are tracked at once; beyond, the one
    # that failed least recently is forgotten (a bounded table).
    password_failure_addresses_max: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 4096
    # Failed authentications are logged at most once per this interval per
    # (reason, peer address); the rest are counted into the next line, ms.
    auth_failure_log_interval_ms: Annotated[int, msgspec.Meta(ge=0)] = 10_000

    def __post_init__(self) -> None:
        if len(set(self.authentication)) != len(self.authentication):
            raise typed.FieldError("authentication", "lists a way in twice")
        if Authentication.BEARER in self.authentication and self.bearer is None:
            raise typed.FieldError(
                "bearer",
                'authentication has "bearer": set [security.bearer] (issuer, audience, jwks)',
            )
        for i, principal in enumerate(self.super_users):
            try:
                parse_principal(principal)
            except typed.FieldError as exc:
                raise typed.FieldError(f"super_users[{i}]", exc.rule) from None

    @property
    def authenticating(self) -> bool:
        return bool(self.authentication)
