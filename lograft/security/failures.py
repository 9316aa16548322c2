"""Why an authentication failed: one stable reason per kind of failure.

Every check in `tokens`, `passwords` and `certificates` that refuses a
caller raises `AuthenticationFailed` with an `AuthFailure` reason. The reason
is a stable lower-case string meant to become the `reason` detail of a 401
answer (the HTTP mapping lives in `lograft.api`, not here); the message says
what a person can fix and never contains the secret itself (no token, no
password, no header value), so it is safe to log and to return.

Not a `lograft.errors.LograftError` on purpose: this package is a pure core
that knows nothing of the wire. `lograft/api/authentication.py` maps this
exception to the registered `SaslAuthenticationFailedError`
(SASL_AUTHENTICATION_FAILED, Kafka's code 58, HTTP 401) carrying the reason.
"""

from __future__ import annotations

import enum

__all__ = ["AuthFailure", "AuthenticationFailed"]


class AuthFailure(enum.StrEnum):
    """The stable reasons. Values are part of the API: never rename one."""

    # The credential is absent, or the header has the wrong shape or scheme.
    MISSING = "missing_credentials"
    MALFORMED = "malformed"
    TOO_LARGE = "too_large"
    # Bearer tokens.
    UNSUPPORTED_ALGORITHM = "unsupported_algorithm"
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    WRONG_ISSUER = "wrong_issuer"
    WRONG_AUDIENCE = "wrong_audience"
    MISSING_CLAIM = "missing_claim"
    KEYS_UNAVAILABLE = "keys_unavailable"
    # Passwords: an unknown user and a wrong password are one reason, so an
    # answer never tells which user names exist.
    BAD_CREDENTIALS = "bad_credentials"
    # Too many failed password checks from the caller's address lately: its
    # uncached password checks are refused without hashing until the budget
    # frees (lograft/api/password_failures.py); the answer says when.
    TOO_MANY_FAILURES = "too_many_failures"
    # Client certificates.
    NO_CERTIFICATE = "no_certificate"
    NO_MATCHING_RULE = "no_matching_rule"


class AuthenticationFailed(Exception):
    """A caller's credential was refused for `reason`; `message` is safe to show.
    `principal`: whom the credential names, when that is known for sure (a
    correctly signed but expired token), for the log only. `retry_after_ms`:
    when trying again can succeed (TOO_MANY_FAILURES), else None."""

    def __init__(
        self,
        reason: AuthFailure,
        message: str,
        *,
        principal: str | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message
        self.principal = principal
        self.retry_after_ms = retry_after_ms
