"""Passwords: salted, iterated hashes like Kafka's SCRAM credentials, and HTTP Basic.

A password is never stored. What the metadata quorum will keep for a user is a
`ScramCredential` (Kafka's `UserScramCredentialRecord`: name, mechanism, salt,
iterations, StoredKey, ServerKey), computed as RFC 5802 defines SCRAM:

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")

so the same record could later serve a real SCRAM exchange. Checking an HTTP
Basic password recomputes StoredKey and compares it in constant time
(`hmac.compare_digest`). The password's bytes are its UTF-8 encoding, as
Kafka's `ScramFormatter.normalize` does (no SASLprep), so the same password
typed on two machines gives the same bytes only when both send the same
Unicode form.

Costs: one check is one PBKDF2 of `iterations` rounds (3 ms for 4096 rounds
of SHA-512 on one core, `scripts/bench_auth.py`), so a node must run it off the event loop
(`asyncio.to_thread`) and bound how many run at once. Iterations are bounded
as Kafka bounds them (4096 to 16384), and password and header sizes are
bounded before any work is done.

Failures raise `AuthenticationFailed` with a stable reason; an unknown user
and a wrong password are the same reason and cost the same work.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
from typing import Annotated, NamedTuple

import msgspec

from lograft import typed
from lograft.security.failures import AuthenticationFailed, AuthFailure

__all__ = [
    "AUTHORIZATION_HEADER_BYTES_MAX",
    "ITERATIONS_DEFAULT",
    "ITERATIONS_MAX",
    "ITERATIONS_MIN",
    "PASSWORD_BYTES_MAX",
    "SALT_BYTES",
    "USER_NAME_CHARS_MAX",
    "BasicCredentials",
    "ScramCredential",
    "ScramMechanism",
    "check_password",
    "make_credential",
    "parse_basic_authorization",
]

# Kafka's ScramMechanism bounds (minIterations, maxIterations): below 4096 a
# stolen record is cheap to brute-force; above 16384 one login is a DoS lever.
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384
ITERATIONS_DEFAULT = 4096
# Random salt length, in bytes (RFC 5802 leaves it open; 32 is > 128 bits).
SALT_BYTES = 32
# Bounds on what a caller may send, checked before any hashing.
PASSWORD_BYTES_MAX = 1024
USER_NAME_CHARS_MAX = 255
# An `Authorization: Basic ...` header value, in bytes: base64 of the longest
# user name (4 bytes a character) and password, plus the scheme.
AUTHORIZATION_HEADER_BYTES_MAX = 4096


class ScramMechanism(enum.StrEnum):
    """The SCRAM mechanisms Kafka supports, by their SASL names."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @property
    def digest_bytes(self) -> int:
        return 32 if self is ScramMechanism.SCRAM_SHA_256 else 64


UserName = Annotated[str, msgspec.Meta(min_length=1, max_length=USER_NAME_CHARS_MAX)]


class ScramCredential(typed.Record):
    """What the metadata quorum stores for one user and mechanism: never the password.

    JSON carries the byte fields as base64 (msgspec's encoding of bytes).
    """

    name: UserName
    salt: Annotated[bytes, msgspec.Meta(min_length=16, max_length=64)]
    iterations: Annotated[int, msgspec.Meta(ge=ITERATIONS_MIN, le=ITERATIONS_MAX)]
    stored_key: Annotated[bytes, msgspec.Meta(min_length=32, max_length=64)]
    server_key: Annotated[bytes, msgspec.Meta(min_length=32, max_length=64)]
    mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_512

    def __post_init__(self) -> None:
        _check_user_name(self.name, typed.FieldError)
        size = self.mechanism.digest_bytes
        for field in ("stored_key", "server_key"):
            if len(getattr(self, field)) != size:
                raise typed.FieldError(field, f"must be {size} bytes for {self.mechanism}")

    def __repr__(self) -> str:
        # Keys stay out of logs and tracebacks: they are as good as a hash to crack.
        return (
            f"ScramCredential(name={self.name!r}, mechanism={self.mechanism.value}, "
            f"iterations={self.iterations})"
        )


class BasicCredentials(NamedTuple):
    """A user name and password read from an HTTP Basic header."""

    user: str
    password: str

    def __repr__(self) -> str:
        return f"BasicCredentials(user={self.user!r}, password=<hidden>)"


def make_credential(
    name: str,
    password: str,
    *,
    mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_512,
    iterations: int = ITERATIONS_DEFAULT,
    salt: bytes | None = None,
) -> ScramCredential:
    """The credential record for `name` with `password` (a fresh random salt
    unless one is given, for tests). Raises ValueError on a bad name, password
    or iteration count: this is called by an administrator's command, whose
    caller turns the message into its own error."""
    _check_user_name(name, _value_error)
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ValueError(
            f"iterations must be {ITERATIONS_MIN} to {ITERATIONS_MAX}, got {iterations}"
        )
    secret = _password_bytes(password)
    if not secret:
        raise ValueError("the password must not be empty")
    if salt is None:
        salt = os.urandom(SALT_BYTES)
    stored_key, server_key = _keys(mechanism, secret, salt, iterations)
    return ScramCredential(
        name=name,
        mechanism=mechanism,
        salt=salt,
        iterations=iterations,
        stored_key=stored_key,
        server_key=server_key,
    )


def check_password(credential: ScramCredential | None, password: str) -> None:
    """Return when `password` is the one `credential` was made from; else raise
    `AuthenticationFailed(BAD_CREDENTIALS)`.

    `credential` is None for a user that does not exist: the same hashing is
    done against a fixed dummy record, so the answer's timing does not tell
    which user names exist. CPU-heavy (one PBKDF2): call it off the event loop.
    """
    try:
        secret = password.encode("utf-8")
    except UnicodeEncodeError:
        raise _malformed("the password is not valid Unicode text") from None
    if len(secret) > PASSWORD_BYTES_MAX:
        raise AuthenticationFailed(
            AuthFailure.TOO_LARGE, f"the password is longer than {PASSWORD_BYTES_MAX} bytes"
        )
    against = credential if credential is not None else _DUMMY
    stored_key, _ = _keys(against.mechanism, secret, against.salt, against.iterations)
    matches = hmac.compare_digest(stored_key, against.stored_key)
    if credential is None or not matches:
        raise AuthenticationFailed(AuthFailure.BAD_CREDENTIALS, "wrong user name or password")


def parse_basic_authorization(header: str | bytes) -> BasicCredentials:
    """The user and password of an `Authorization` header value `Basic <base64>`.

    RFC 7617: the scheme is case-insensitive; the decoded text is UTF-8; the
    user name ends at the first colon (so it cannot hold one, while the
    password may); neither part may hold control characters. lograft adds:
    the header is at most AUTHORIZATION_HEADER_BYTES_MAX bytes, the base64 is
    strict (no stray characters), the user name is not empty and at most
    USER_NAME_CHARS_MAX characters, the password at most PASSWORD_BYTES_MAX
    bytes. Every refusal is `AuthenticationFailed` (MISSING for another scheme,
    TOO_LARGE, MALFORMED) whose message never repeats the header.
    """
    size = len(header)
    if size > AUTHORIZATION_HEADER_BYTES_MAX:
        raise AuthenticationFailed(
            AuthFailure.TOO_LARGE,
            f"the Authorization header is {size} bytes, at most "
            f"{AUTHORIZATION_HEADER_BYTES_MAX} are read",
        )
    if isinstance(header, bytes):
        try:
            header = header.decode("ascii")
        except UnicodeDecodeError:
            raise _malformed("the Authorization header is not ASCII") from None
    scheme, _, token = header.strip(" ").partition(" ")
    if scheme.lower() != "basic":
        raise AuthenticationFailed(AuthFailure.MISSING, "no Basic credentials in the header")
    token = token.strip(" ")
    try:
        decoded = base64.b64decode(token.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _malformed("the Basic credentials are not valid base64") from None
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("the Basic credentials are not valid UTF-8") from None
    user, colon, password = text.partition(":")
    if not colon:
        raise _malformed("the Basic credentials have no ':' between user name and password")
    _check_user_name(user, _malformed_name)
    if _has_control(password):
        raise _malformed("the password holds a control character")
    if len(password.encode("utf-8")) > PASSWORD_BYTES_MAX:
        raise AuthenticationFailed(
            AuthFailure.TOO_LARGE, f"the password is longer than {PASSWORD_BYTES_MAX} bytes"
        )
    return BasicCredentials(user, password)


def _keys(
    mechanism: ScramMechanism, secret: bytes, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802 for a password's bytes."""
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, secret, salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", mechanism.hash_name)
    return stored_key, server_key


def _password_bytes(password: str) -> bytes:
    if _has_control(password):
        raise ValueError("the password must not hold control characters")
    secret = password.encode("utf-8")
    if len(secret) > PASSWORD_BYTES_MAX:
        raise ValueError(f"the password must be at most {PASSWORD_BYTES_MAX} bytes")
    return secret


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def _check_user_name(name: str, error: type[Exception] | object) -> None:
    """A user name: 1..USER_NAME_CHARS_MAX characters, no colon (HTTP Basic
    could not carry it), no control characters (it is logged)."""
    problem = None
    if not name:
        problem = "must not be empty"
    elif len(name) > USER_NAME_CHARS_MAX:
        problem = f"must be at most {USER_NAME_CHARS_MAX} characters"
    elif ":" in name:
        problem = "must not hold ':'"
    elif _has_control(name):
        problem = "must not hold control characters"
    if problem is not None:
        raise error("name", problem)  # type: ignore[operator]


def _value_error(field: str, problem: str) -> ValueError:
    return ValueError(f"the user {field} {problem}")


def _malformed_name(field: str, problem: str) -> AuthenticationFailed:
    return _malformed(f"the Basic user {field} {problem}")


def _malformed(message: str) -> AuthenticationFailed:
    return AuthenticationFailed(AuthFailure.MALFORMED, message)


# Checked against when the user does not exist, so both cost the same. Its
# StoredKey matches no password (it is not derived from one).
_DUMMY = ScramCredential(
    name="unknown",
    salt=bytes(SALT_BYTES),
    iterations=ITERATIONS_DEFAULT,
    stored_key=bytes(64),
    server_key=bytes(64),
)
