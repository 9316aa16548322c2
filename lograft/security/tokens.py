"""Bearer tokens: OAuth 2.0 / OIDC JWTs checked against a JSON Web Key Set.

Kafka's SASL/OAUTHBEARER in HTTP form (`Authorization: Bearer <jwt>`). A
token is accepted only when all of these hold, checked in this order so the
cheap refusals come first:

1. it is at most `token_bytes_max` bytes and is a compact JWS (PyJWT parses
   it: no hand-written JWT parsing here);
2. its header's `alg` is one of `algorithms`, which may name only asymmetric
   algorithms (RS*, PS*, ES*, EdDSA): `none` and HS* are refused before any
   key is looked at, so a public key can never be used as an HMAC secret;
3. its `kid` names a signing key of the JWKS (a token without `kid` is taken
   only when the set has exactly one key), whose `alg`, when the key states
   one, is the token's;
4. the signature verifies with that key, `iss` is `issuer`, `aud` is or
   contains `audience`, `exp` is present and not past, `nbf` (when present)
   is past, both with `clock_skew_ms` of leeway;
5. `principal_claim` (`sub` by default) is a non-empty string: the caller is
   `User:<value>`.

Every refusal is `AuthenticationFailed` with a stable `AuthFailure` reason
(malformed, too_large, unsupported_algorithm, unknown_key, bad_signature,
expired, not_yet_valid, wrong_issuer, wrong_audience, missing_claim,
keys_unavailable) and a message that never repeats the token.

The JWKS comes from a file or an https URL (verified against the system's
trust store or `jwks_ca_file`) through an injectable async fetcher
(`Fetcher`, made by `fetcher_for`), so tests need no network. `JwksCache`
holds it: fetched on first use (callers wait), refetched every
`jwks_refresh_ms` in the background (callers go on with the keys they have),
and refetched early when a token names an unknown `kid` (a key rotation; the
caller waits), at most once every `jwks_refetch_min_interval_ms` so forged
`kid`s cannot make the node hammer the identity provider. A failed refetch
keeps the keys it had. One fetch runs at a time; concurrent callers wait for
it. A fetch reads at most `jwks_bytes_max` bytes and gives up after
`jwks_fetch_timeout_ms`.

Costs on the event loop: parsing a bounded token and one signature check,
0.1 to 0.5 ms a token end to end for RS256, ES256 and EdDSA
(`scripts/bench_auth.py` on a quiet to a loaded 2-core machine), so it runs inline.
A client sends the same token with every request until it expires, so a
token that verified is remembered (`verified_tokens_cached_max`, keyed by an
HMAC of the token under a per-process random key) until its `exp` plus
`clock_skew_ms`, or until the key set changes: 8 to 25 us a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import aiohttp
import jwt
import msgspec

from lograft import typed
from lograft.errors import InvalidConfigError
from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.principals import user_principal

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "JWKS_KEYS_MAX",
    "BearerSettings",
    "BearerVerifier",
    "Fetcher",
    "JwksCache",
    "fetcher_for",
    "file_fetcher",
    "http_fetcher",
    "parse_bearer_authorization",
    "parse_jwks",
]

log = logging.getLogger(__name__)

# The algorithms a token may be signed with: public-key ones only.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
# The most keys one JWKS may hold (providers publish a handful).
JWKS_KEYS_MAX = 64

# `fetch(max_bytes, timeout_s)`: the JWKS document's bytes, at most max_bytes,
# or an exception (any: the cache logs it and keeps its keys).
Fetcher = Callable[[int, float], Awaitable[bytes]]


class BearerSettings(typed.Record):
    """How bearer tokens are checked: the `[security.bearer]` section.

    Exactly one of `jwks_file` and `jwks_url` is set. Units are in the names.
    """

    issuer: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
    audience: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
    jwks_file: Path | None = None
    jwks_url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None
    # The CA bundle the JWKS URL's certificate must chain to (default: the system's).
    jwks_ca_file: Path | None = None
    algorithms: Annotated[list[str], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["RS256", "ES256", "EdDSA"]
    )
    principal_claim: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] = "sub"
    # Leeway on exp and nbf for clocks that disagree; at most 5 minutes.
    clock_skew_ms: Annotated[int, msgspec.Meta(ge=0, le=300_000)] = 30_000
    # The longest token read, in bytes (an Authorization header's value).
    token_bytes_max: Annotated[int, msgspec.Meta(ge=256, le=65_536)] = 8192
    # Tokens that verified, remembered until they expire (or the keys
    # change), so a client sending the same token does not pay a signature
    # check per request; keyed by a keyed hash of the token. 0: off.
    verified_tokens_cached_max: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 4096
    # The largest JWKS document fetched, in bytes.
    jwks_bytes_max: Annotated[int, msgspec.Meta(ge=1024, le=16 * 1024 * 1024)] = 1024 * 1024
    jwks_fetch_timeout_ms: Annotated[int, msgspec.Meta(ge=100, le=60_000)] = 5000
    # How often the keys are refetched (Kafka's jwks.endpoint.refresh.ms default: 1 h).
    jwks_refresh_ms: Annotated[int, msgspec.Meta(ge=1000)] = 3_600_000
    # The shortest time between two fetches caused by an unknown kid or a failure.
    jwks_refetch_min_interval_ms: Annotated[int, msgspec.Meta(ge=0)] = 10_000

    def __post_init__(self) -> None:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise typed.FieldError("jwks_url", "set exactly one of jwks_file and jwks_url")
        if self.jwks_url is not None:
            _check_url(self.jwks_url)
        for alg in self.algorithms:
            if alg not in ASYMMETRIC_ALGORITHMS:
                raise typed.FieldError(
                    "algorithms",
                    f"{alg!r} is not allowed; use public-key algorithms only: "
                    + ", ".join(sorted(ASYMMETRIC_ALGORITHMS)),
                )


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    loopback = parts.hostname in {"127.0.0.1", "::1", "localhost"}
    if not parts.hostname or not (parts.scheme == "https" or (parts.scheme == "http" and loopback)):
        raise typed.FieldError(
            "jwks_url", "must be an https:// URL (http:// only to a loopback address)"
        )


def parse_bearer_authorization(header: str, token_bytes_max: int) -> str:
    """The token of an `Authorization` header value `Bearer <token>` (the
    scheme case-insensitive, RFC 6750), or AuthenticationFailed: MISSING for
    another scheme, TOO_LARGE, MALFORMED for an empty or non-ASCII token."""
    if len(header) > token_bytes_max + 16:
        raise _too_large(token_bytes_max)
    scheme, _, token = header.strip(" ").partition(" ")
    if scheme.lower() != "bearer":
        raise AuthenticationFailed(AuthFailure.MISSING, "no Bearer token in the header")
    token = token.strip(" ")
    if not token or not token.isascii() or " " in token:
        raise AuthenticationFailed(AuthFailure.MALFORMED, "the Bearer token is not a JWT")
    return token


def parse_jwks(data: bytes) -> dict[str | None, dict[str, Any]]:
    """The signing keys of a JWKS document by `kid`, or ValueError.

    Kept: public keys for signatures (no `use`, or `use: sig`) that PyJWT can
    load. Skipped: encryption keys, symmetric (`oct`) keys, keys PyJWT cannot
    load, and keys holding private parts (a provider that publishes them is
    broken; using them would not be wrong, publishing them is). A key without
    `kid` is kept under None only when it is the only key.
    """
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the JWKS is not JSON ({exc})") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise ValueError("the JWKS has no 'keys' list")
    if len(keys) > JWKS_KEYS_MAX:
        raise ValueError(f"the JWKS holds {len(keys)} keys, at most {JWKS_KEYS_MAX} are read")
    found: dict[str | None, dict[str, Any]] = {}
    for key in keys:
        if not _usable(key):
            continue
        kid = key.get("kid")
        if kid is not None and not isinstance(kid, str):
            continue
        found.setdefault(kid, key)
    if None in found and len(found) > 1:
        del found[None]
    if not found:
        raise ValueError("the JWKS holds no usable signing key")
    return found


def _usable(key: Any) -> bool:
    if not isinstance(key, dict) or key.get("use", "sig") != "sig":
        return False
    if key.get("kty") not in {"RSA", "EC", "OKP"} or "d" in key:
        return False
    alg = key.get("alg")
    if alg is not None and alg not in ASYMMETRIC_ALGORITHMS:
        return False
    try:
        jwt.PyJWK(key)
    except jwt.PyJWTError:
        return False
    return True


class JwksCache:
    """The current signing keys, fetched, refreshed and refetched on unknown kids."""

    def __init__(
        self,
        settings: BearerSettings,
        fetch: Fetcher,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._fetch = fetch
        self._clock = clock
        self._keys: dict[str | None, dict[str, Any]] = {}
        self._loaded = False
        self._fetched_at = 0.0
        self._attempted_at: float | None = None
        self._fetches = 0
        self._lock = asyncio.Lock()
        self._background: asyncio.Task[None] | None = None
        # PyJWK objects by (kid, alg): loading a key costs more than using it.
        self._loaded_keys: dict[tuple[str | None, str], jwt.PyJWK] = {}
        # Bumped whenever the key set is replaced: a verified token stays
        # verified only under the keys that verified it.
        self.generation = 0

    @property
    def fetches(self) -> int:
        """How many fetches were attempted (for tests and metrics)."""
        return self._fetches

    async def key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The key `kid` loaded for `alg`, or AuthenticationFailed
        (UNKNOWN_KEY, KEYS_UNAVAILABLE)."""
        if not self._loaded:
            await self._refresh()
        elif self._age() >= self._settings.jwks_refresh_ms / 1000:
            # Due for a refresh: callers go on with the keys they have while
            # one fetch runs in the background (a slow identity provider must
            # not stall every request for up to jwks_fetch_timeout_ms).
            self._refresh_in_background()
        if not self._loaded:
            raise AuthenticationFailed(
                AuthFailure.KEYS_UNAVAILABLE, "the token signing keys could not be fetched"
            )
        jwk = self._find(kid)
        if jwk is None and self._background is not None:
            # The refresh under way may bring it; shielded, so a caller that
            # gives up does not cancel the fetch others wait for.
            await asyncio.shield(self._background)
            jwk = self._find(kid)
        if jwk is None and self._may_refetch():
            await self._refresh()
            jwk = self._find(kid)
        if jwk is None:
            raise AuthenticationFailed(
                AuthFailure.UNKNOWN_KEY,
                "the token names no known signing key"
                if kid is not None
                else "the token names no key (kid) and the key set has several",
            )
        if jwk.get("alg", alg) != alg:
            raise AuthenticationFailed(
                AuthFailure.UNKNOWN_KEY, f"the token's key is not for {alg} tokens"
            )
        return self._load(kid, alg, jwk)

    def _find(self, kid: str | None) -> dict[str, Any] | None:
        if kid is None:
            return self._keys.get(None) or (
                next(iter(self._keys.values())) if len(self._keys) == 1 else None
            )
        return self._keys.get(kid)

    def _load(self, kid: str | None, alg: str, jwk: dict[str, Any]) -> jwt.PyJWK:
        cached = self._loaded_keys.get((kid, alg))
        if cached is None:
            try:
                cached = jwt.PyJWK(jwk, algorithm=alg)
            except jwt.PyJWTError:
                raise AuthenticationFailed(
                    AuthFailure.UNKNOWN_KEY, f"the token's key cannot verify {alg} tokens"
                ) from None
            self._loaded_keys[(kid, alg)] = cached
        return cached

    def _age(self) -> float:
        return self._clock() - self._fetched_at

    def _may_refetch(self) -> bool:
        if self._attempted_at is None:
            return True
        waited = self._clock() - self._attempted_at
        return waited >= self._settings.jwks_refetch_min_interval_ms / 1000

    async def refresh(self) -> None:
        """Fetch the keys now (at most once per `jwks_refetch_min_interval_ms`):
        the node's background refresh; a failure keeps the keys known."""
        await self._refresh()

    @property
    def refreshing(self) -> asyncio.Task[None] | None:
        """The background refresh under way, if any (tests await it)."""
        return self._background

    async def close(self) -> None:
        """Stop a background refresh (when the node stops)."""
        task, self._background = self._background, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _refresh_in_background(self) -> None:
        if self._background is None and self._may_refetch():
            self._background = asyncio.get_running_loop().create_task(self._refresh())
            self._background.add_done_callback(self._refreshed)

    def _refreshed(self, task: asyncio.Task[None]) -> None:
        if self._background is task:
            self._background = None

    async def _refresh(self) -> None:
        attempts = self._fetches
        async with self._lock:
            if self._fetches != attempts:
                return  # another caller fetched while this one waited
            if not self._may_refetch():
                return  # fetched (or failed) moments ago: the rate limit
            self._fetches += 1
            self._attempted_at = self._clock()
            settings = self._settings
            try:
                timeout_s = settings.jwks_fetch_timeout_ms / 1000
                # The fetcher is told the bound and held to it: an injected
                # one that ignores its timeout still cannot stall the callers.
                # asyncio.timeout, not wait_for, which on Python 3.11 swallows
                # a cancel (close()) that lands as the fetch returns.
                async with asyncio.timeout(timeout_s):
                    data = await self._fetch(settings.jwks_bytes_max, timeout_s)
                if len(data) > settings.jwks_bytes_max:
                    raise ValueError(f"the JWKS is over {settings.jwks_bytes_max} bytes")
                keys = parse_jwks(data)
            except Exception as exc:
                # The identity provider is outside: any failure of it is logged
                # and survived with the keys already known.
                log.warning(
                    "fetching the token signing keys failed, keeping %d known keys: %s",
                    len(self._keys),
                    exc,
                )
                return
            if keys != self._keys:
                self.generation += 1
            self._keys = keys
            self._loaded_keys.clear()
            self._loaded = True
            self._fetched_at = self._attempted_at


@dataclass(frozen=True)
class _Refusal:
    error: type[Exception]
    reason: AuthFailure
    message: str


# PyJWT's errors, most specific first (InvalidSignatureError is a DecodeError).
_REFUSALS = (
    _Refusal(jwt.ExpiredSignatureError, AuthFailure.EXPIRED, "the token has expired"),
    _Refusal(jwt.ImmatureSignatureError, AuthFailure.NOT_YET_VALID, "the token is not valid yet"),
    _Refusal(
        jwt.InvalidAudienceError, AuthFailure.WRONG_AUDIENCE, "the token is for another audience"
    ),
    _Refusal(jwt.InvalidIssuerError, AuthFailure.WRONG_ISSUER, "the token is from another issuer"),
    _Refusal(jwt.MissingRequiredClaimError, AuthFailure.MISSING_CLAIM, "the token lacks a claim"),
    _Refusal(
        jwt.InvalidSignatureError, AuthFailure.BAD_SIGNATURE, "the token's signature is wrong"
    ),
    _Refusal(
        jwt.InvalidAlgorithmError,
        AuthFailure.UNSUPPORTED_ALGORITHM,
        "the token's algorithm is refused",
    ),
    _Refusal(jwt.InvalidKeyError, AuthFailure.UNKNOWN_KEY, "the token's key cannot be used"),
    _Refusal(jwt.PyJWTError, AuthFailure.MALFORMED, "the token is not a valid JWT"),
)


# Refusals of a token whose signature verified: its principal may be logged.
_CLAIM_REFUSALS = frozenset(
    {
        AuthFailure.EXPIRED,
        AuthFailure.NOT_YET_VALID,
        AuthFailure.WRONG_AUDIENCE,
        AuthFailure.WRONG_ISSUER,
    }
)


class BearerVerifier:
    """Checks bearer tokens against `settings` with keys from a `JwksCache`."""

    def __init__(
        self,
        settings: BearerSettings,
        keys: JwksCache,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: wall-clock seconds, as `exp` counts them (tests inject one)."""
        self._settings = settings
        self._keys = keys
        self._jwt = jwt.PyJWT(options={"enforce_minimum_key_length": True})
        self._clock = clock
        # Verified tokens: keyed hash -> (principal, usable until, key generation).
        self._verified: OrderedDict[bytes, tuple[str, float, int]] = OrderedDict()
        self._cache_key = os.urandom(32)
        # Signature checks done (tests and metrics).
        self.checks = 0

    async def principal(self, token: str) -> str:
        """`User:<principal claim>` of a valid token, or AuthenticationFailed."""
        return (await self.verified(token))[0]

    async def verified(self, token: str) -> tuple[str, float]:
        """`User:<principal claim>` of a valid token and until when it counts
        (its `exp` plus `clock_skew_ms`, wall-clock seconds), or
        AuthenticationFailed.

        A token that verified is remembered (`verified_tokens_cached_max`)
        until then or until the key set changes, whichever is first; a
        refused one never is."""
        settings = self._settings
        if len(token) > settings.token_bytes_max:
            raise _too_large(settings.token_bytes_max)
        # A JWT is base64url and dots; a header aiohttp decoded with
        # surrogateescape may hold anything else.
        if not token.isascii():
            raise AuthenticationFailed(AuthFailure.MALFORMED, "the token is not a valid JWT")
        remembered = hmac.digest(self._cache_key, token.encode("ascii"), hashlib.sha256)
        hit = self._verified.get(remembered)
        if hit is not None:
            principal, until, generation = hit
            if generation == self._keys.generation and self._clock() < until:
                self._verified.move_to_end(remembered)
                return principal, until
            del self._verified[remembered]
        principal, expires = await self._verify(token)
        until = expires + settings.clock_skew_ms / 1000
        self._remember(remembered, principal, until)
        return principal, until

    def _remember(self, key: bytes, principal: str, until: float) -> None:
        limit = self._settings.verified_tokens_cached_max
        if limit == 0:
            return
        self._verified[key] = (principal, until, self._keys.generation)
        while len(self._verified) > limit:
            self._verified.popitem(last=False)

    async def _verify(self, token: str) -> tuple[str, float]:
        """The principal of a token and its `exp`, checked in full."""
        settings = self._settings
        self.checks += 1
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthenticationFailed(
                AuthFailure.MALFORMED, "the token is not a valid JWT"
            ) from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in settings.algorithms:
            raise AuthenticationFailed(
                AuthFailure.UNSUPPORTED_ALGORITHM,
                f"the token's algorithm is not one of {', '.join(settings.algorithms)}",
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthenticationFailed(AuthFailure.MALFORMED, "the token's kid is not a string")
        key = await self._keys.key(kid, alg)
        claims = self._decode(token, key, alg)
        value = claims.get(settings.principal_claim)
        if not isinstance(value, str):
            raise AuthenticationFailed(
                AuthFailure.MISSING_CLAIM,
                f"the token has no string {settings.principal_claim!r} claim",
            )
        principal = user_principal(value, f"the token's {settings.principal_claim!r} claim")
        # Required and checked numeric by PyJWT.
        return principal, float(claims["exp"])

    def _decode(self, token: str, key: jwt.PyJWK, alg: str) -> dict[str, Any]:
        settings = self._settings
        try:
            return self._jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.clock_skew_ms / 1000,
                options={"require": ["exp", "iss", "aud"]},
            )
        except Exception as exc:
            for refusal in _REFUSALS:
                if isinstance(exc, refusal.error):
                    raise AuthenticationFailed(
                        refusal.reason,
                        refusal.message,
                        principal=self._signed_principal(token, key, alg, refusal.reason),
                    ) from None
            raise

    def _signed_principal(
        self, token: str, key: jwt.PyJWK, alg: str, reason: AuthFailure
    ) -> str | None:
        """Whose token was refused for a claim (expired, another audience or
        issuer, not yet valid), for the log: only when its signature holds,
        so the name is the identity provider's word, not the caller's."""
        if reason not in _CLAIM_REFUSALS:
            return None
        try:
            claims = self._jwt.decode(
                token,
                key,
                algorithms=[alg],
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_aud": False,
                    "verify_iss": False,
                },
            )
            return user_principal(claims[self._settings.principal_claim], "the claim")
        except Exception:
            return None


def fetcher_for(settings: BearerSettings) -> Fetcher:
    """The fetcher `settings` name: the file, or the URL (with `jwks_ca_file`
    as its trust store when set; an unreadable bundle is InvalidConfigError)."""
    if settings.jwks_file is not None:
        return file_fetcher(settings.jwks_file)
    assert settings.jwks_url is not None  # __post_init__: exactly one is set
    context = None
    if settings.jwks_ca_file is not None:
        try:
            context = ssl.create_default_context(cafile=settings.jwks_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidConfigError(
                f"jwks_ca_file {str(settings.jwks_ca_file)!r} cannot be loaded: {exc}",
                key="jwks_ca_file",
            ) from None
    return http_fetcher(settings.jwks_url, context)


def file_fetcher(path: Path) -> Fetcher:
    """A fetcher reading the JWKS from `path` (off the event loop), so a
    rotated file is picked up on the next refresh."""

    def read(max_bytes: int) -> bytes:
        with path.open("rb") as file:
            data = file.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise ValueError(f"{path} is over {max_bytes} bytes")
        return data

    async def fetch(max_bytes: int, timeout_s: float) -> bytes:
        # asyncio.timeout, not wait_for (which can swallow a cancel). Either
        # way a read stuck in its thread is left behind, not waited for.
        async with asyncio.timeout(timeout_s):
            return await asyncio.to_thread(read, max_bytes)

    return fetch


def http_fetcher(url: str, context: ssl.SSLContext | None = None) -> Fetcher:
    """A fetcher GETting the JWKS from `url` with aiohttp: a 200 answer (no
    redirects followed), at most `max_bytes` read, the whole exchange within
    `timeout_s`; an https server verified with `context` (default: the
    system's trust store)."""

    async def fetch(max_bytes: int, timeout_s: float) -> bytes:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, allow_redirects=False, ssl=context or True) as response,
        ):
            if response.status != 200:
                raise ValueError(f"GET {url} answered {response.status}")
            if (response.content_length or 0) > max_bytes:
                raise ValueError(f"GET {url}: the JWKS is over {max_bytes} bytes")
            body = bytearray()
            async for chunk in response.content.iter_chunked(65_536):
                body += chunk
                if len(body) > max_bytes:
                    raise ValueError(f"GET {url}: the JWKS is over {max_bytes} bytes")
            return bytes(body)

    return fetch


def _too_large(limit: int) -> AuthenticationFailed:
    return AuthenticationFailed(AuthFailure.TOO_LARGE, f"the token is longer than {limit} bytes")
