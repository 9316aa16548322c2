"""The `User:<name>` principal every authentication method ends with.

A bearer token's claim, a password's user name and a certificate's mapped
subject all become `User:<name>` (Kafka's `KafkaPrincipal.USER_TYPE`), so one
set of ACLs covers callers however they prove who they are. The name comes
from a credential, so it is checked as an ACL's principal is: not empty, no
control characters, and short enough that `User:<name>` fits
`acls.PRINCIPAL_CHARS_MAX`.
"""

from __future__ import annotations

from lograft import typed
from lograft.security.acls import PRINCIPAL_CHARS_MAX, check_printable
from lograft.security.failures import AuthenticationFailed, AuthFailure

__all__ = ["USER_TYPE", "user_principal"]

USER_TYPE = "User"
_PREFIX = USER_TYPE + ":"


def user_principal(name: str, source: str) -> str:
    """`User:<name>`, or `AuthenticationFailed(MALFORMED)` naming `source`
    (e.g. "the token's sub claim") when the name cannot be a principal."""
    if not name:
        raise AuthenticationFailed(AuthFailure.MALFORMED, f"{source} is empty")
    if len(name) + len(_PREFIX) > PRINCIPAL_CHARS_MAX:
        raise AuthenticationFailed(
            AuthFailure.MALFORMED,
            f"{source} is longer than {PRINCIPAL_CHARS_MAX - len(_PREFIX)} characters",
        )
    try:
        check_printable("name", name)
    except typed.FieldError:
        raise AuthenticationFailed(
            AuthFailure.MALFORMED, f"{source} holds a control character"
        ) from None
    return _PREFIX + name
