"""Who is calling: the one place a request's credentials are checked.

The authentication middleware runs for every request but the public ones
(`/healthz`, `/readyz`, `/openapi.json`, which need no identity) and the
internal ones (`/internal/*`, which accept only the cluster secret: app.py's
`secret_middleware`). It sets `request[CALLER_KEY]` to a `Caller`
(api/caller.py) before authorization, quotas and the handlers run:

- `[security] authentication` empty (the default): `User:ANONYMOUS`, and no
  credential is looked at;
- else the credential the request carries, of a kind the node accepts:
  `Authorization: Bearer <JWT>` (bearer; `lograft.security.tokens`),
  `Authorization: Basic <base64 user:password>` (password, against the SCRAM
  credentials of the metadata; api/password_checks.py), or, without an
  Authorization header, the TLS client certificate (certificate; its subject
  mapped by `[tls] principal_mapping_rules`). An Authorization header is the
  credential whenever it is present: a certificate does not rescue a bad one.

No credential, one of a kind the node does not accept, more than one
Authorization header, or a credential that is refused: `401
SASL_AUTHENTICATION_FAILED` with `details.reason` (the stable
`AuthFailure` value) and `details.accepted` (the ways in), and a
`WWW-Authenticate` challenge per accepted way. An uncached password from a
peer address that has failed too often lately is refused before it is hashed
(reason `too_many_failures`, with `Retry-After`: api/password_failures.py).
The refusal is logged at a bounded rate (api/auth_failure_log.py). No answer or log line holds a
credential: messages come from `lograft.security`, which never repeats one,
and the Authorization scheme a caller sent is not echoed either (it may be
a bare password).

The cluster secret header (`X-Lograft-Cluster-Secret`) is no credential
here: a public route ignores it, so a leaked cluster secret does not make a
client a super user; and client credentials open no internal route.

The client id (`X-Lograft-Client-Id`, Kafka's client.id) is checked for
every authenticated route: at most `CLIENT_ID_CHARS_MAX` characters, valid
Unicode, no control characters; else `400 INVALID_REQUEST`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from lograft.api.auth_failure_log import AuthFailureLog, auth_logger
from lograft.api.caller import CALLER_KEY, CLIENT_ID_HEADER, Caller, How
from lograft.api.http_errors import error_response, retry_after_s
from lograft.api.password_checks import CredentialSource, PasswordChecks
from lograft.api.password_failures import PasswordFailureBudget
from lograft.errors import InvalidRequestError, SaslAuthenticationFailedError
from lograft.security.certificates import PrincipalMapper, certificate_principal
from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.passwords import parse_basic_authorization
from lograft.security.settings import ANONYMOUS, Authentication, SecuritySettings
from lograft.security.tls import TlsSettings
from lograft.security.tokens import (
    BearerVerifier,
    Fetcher,
    JwksCache,
    fetcher_for,
    parse_bearer_authorization,
)

__all__ = [
    "CLIENT_ID_CHARS_MAX",
    "INTERNAL_PREFIX",
    "PUBLIC_ROUTES",
    "Authenticator",
    "client_id_of",
    "is_internal",
    "is_public",
    "peer_host",
    "reauthenticate",
    "refusal",
]

log = logging.getLogger(__name__)

# Routes anyone may call without credentials: the orchestrator's probes, the
# API's description and the web console's static files (which hold no data).
PUBLIC_ROUTES = frozenset({"/healthz", "/readyz", "/openapi.json", "/ui", "/ui/", "/ui/{asset}"})
INTERNAL_PREFIX = "/internal/"
# Longest X-Lograft-Client-Id, characters (Kafka bounds client.id by its
# request header's string; 255 keeps log lines and quota keys small).
CLIENT_ID_CHARS_MAX = 255
# Distinct client certificates whose mapped principal is remembered.
CERTIFICATE_PRINCIPALS_CACHED_MAX = 256
REALM = "lograft"

_CHALLENGES = {
    Authentication.BEARER: f'Bearer realm="{REALM}"',
    Authentication.PASSWORD: f'Basic realm="{REALM}", charset="UTF-8"',
    # No HTTP scheme names a TLS client certificate: a lograft one, so a 401
    # still says what would be accepted.
    Authentication.CERTIFICATE: f'Certificate realm="{REALM}"',
}
# Whether the request's credential still counts (a password: its user's
# record unchanged), for `reauthenticate`.
_STILL_VALID_KEY: web.RequestKey[Callable[[], bool]] = web.RequestKey(
    "lograft.credential_still_valid"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def route_template(request: web.Request) -> str | None:
    """The matched route's pattern (`/v1/topics/{topic}`), None when no route matched."""
    resource = request.match_info.route.resource
    return None if resource is None else resource.canonical


def is_internal(request: web.Request) -> bool:
    """An internal endpoint: by its path, or by the route it matched."""
    template = route_template(request) or ""
    return request.path.startswith(INTERNAL_PREFIX) or template.startswith(INTERNAL_PREFIX)


def is_public(request: web.Request) -> bool:
    """A route that needs no identity (decided by the route matched, not the path)."""
    return route_template(request) in PUBLIC_ROUTES and not is_internal(request)


def peer_host(request: web.Request) -> str:
    """The peer's IP address in canonical text ("" when it has none: a test transport)."""
    return _canonical_host(request.remote or "")


# Parsing an address costs ~5 us, on every request (twice on node-to-node
# ones); a node talks to few distinct peers at a time, and the cache is bounded.
@functools.lru_cache(maxsize=1024)
def _canonical_host(remote: str) -> str:
    try:
        return str(ipaddress.ip_address(remote))
    except ValueError:
        return remote


def client_id_of(request: web.Request) -> str:
    """The checked X-Lograft-Client-Id ("" when absent), or InvalidRequestError."""
    values = request.headers.getall(CLIENT_ID_HEADER, [])
    if not values:
        return ""
    if len(values) > 1:
        raise InvalidRequestError(f"send one {CLIENT_ID_HEADER} header, not {len(values)}")
    value = values[0]
    if len(value) > CLIENT_ID_CHARS_MAX:
        raise InvalidRequestError(
            f"{CLIENT_ID_HEADER} is {len(value)} characters, at most {CLIENT_ID_CHARS_MAX}",
            limit=CLIENT_ID_CHARS_MAX,
            limit_name="CLIENT_ID_CHARS_MAX",
        )
    try:
        value.encode("utf-8")  # aiohttp keeps invalid UTF-8 as lone surrogates
    except UnicodeEncodeError:
        raise InvalidRequestError(f"{CLIENT_ID_HEADER} is not valid UTF-8") from None
    if _CONTROL.search(value):
        raise InvalidRequestError(f"{CLIENT_ID_HEADER} holds a control character")
    return value


def refusal(
    failure: AuthenticationFailed, challenges: tuple[str, ...], **details: Any
) -> web.Response:
    """The 401 answer for `failure`; with `Retry-After` (and
    `details.retry_after_ms`) when trying again later can succeed."""
    if failure.retry_after_ms is not None:
        details["retry_after_ms"] = failure.retry_after_ms
    error = SaslAuthenticationFailedError(
        f"authentication failed: {failure.message}", reason=failure.reason.value, **details
    )
    response = error_response(error)
    for challenge in challenges:
        response.headers.add("WWW-Authenticate", challenge)
    if failure.retry_after_ms is not None:
        response.headers["Retry-After"] = str(retry_after_s(failure.retry_after_ms))
    return response


class Authenticator:
    """The `[security]` ways in, checked per request; see the module's doc."""

    def __init__(
        self,
        settings: SecuritySettings | None = None,
        tls: TlsSettings | None = None,
        credentials: CredentialSource | None = None,
        *,
        jwks_fetcher: Fetcher | None = None,
        failures: AuthFailureLog | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`credentials`: the current SCRAM credentials (needed with
        "password"); `jwks_fetcher`: where the bearer keys come from
        (default: `[security.bearer]`'s file or URL); `clock`: the
        password failure budget's (seconds, monotonic)."""
        self.settings = settings = settings if settings is not None else SecuritySettings()
        self.failures = failures or AuthFailureLog(settings.auth_failure_log_interval_ms)
        ways = settings.authentication
        self.accepted = tuple(way.value for way in ways)
        self.challenges = tuple(_CHALLENGES[way] for way in ways)
        self.keys: JwksCache | None = None
        self._bearer: BearerVerifier | None = None
        self._token_bytes_max = 0
        if Authentication.BEARER in ways:
            bearer = settings.bearer
            assert bearer is not None  # SecuritySettings requires it with "bearer"
            self.keys = JwksCache(bearer, jwks_fetcher or fetcher_for(bearer))
            self._bearer = BearerVerifier(bearer, self.keys)
            self._token_bytes_max = bearer.token_bytes_max
        self.passwords: PasswordChecks | None = None
        self.password_failures: PasswordFailureBudget | None = None
        if Authentication.PASSWORD in ways:
            self.password_failures = PasswordFailureBudget(
                settings.password_failures_per_address_max,
                settings.password_failure_window_ms,
                settings.password_failure_addresses_max,
                clock=clock,
            )
            self.passwords = PasswordChecks(
                credentials if credentials is not None else dict,
                inflight_max=settings.password_checks_inflight_max,
                cache_entries_max=settings.password_cache_entries_max,
                budget=self.password_failures,
            )
        self._mapper: PrincipalMapper | None = None
        if Authentication.CERTIFICATE in ways:
            self._mapper = tls.principal_mapper() if tls is not None else PrincipalMapper()
        self._certificates: OrderedDict[bytes, str] = OrderedDict()
        self._refresher: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the bearer keys in the background now and every
        `jwks_refresh_ms` (requests before the first fetch ends wait for it)."""
        if self.keys is not None and self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_keys(), name="jwks-refresh")

    async def close(self) -> None:
        task, self._refresher = self._refresher, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.keys is not None:
            await self.keys.close()

    async def _refresh_keys(self) -> None:
        assert self.keys is not None and self.settings.bearer is not None
        interval_s = self.settings.bearer.jwks_refresh_ms / 1000
        while True:
            # A failed fetch is logged by the cache, which keeps its keys.
            await self.keys.refresh()
            await asyncio.sleep(interval_s)

    # -- requests -------------------------------------------------------------------

    def set_anonymous(self, request: web.Request) -> None:
        """With authentication off: the caller is User:ANONYMOUS (the client id
        is still checked: it names quotas and log lines)."""
        client_id = client_id_of(request)
        request[CALLER_KEY] = Caller(ANONYMOUS, peer_host(request), client_id, How.ANONYMOUS)

    async def authenticated(self, request: web.Request) -> web.Response | None:
        """Check the request's credentials and set its caller; the 401 when
        they do not prove who it is."""
        client_id = client_id_of(request)
        host = peer_host(request)
        try:
            principal, how, expires_at = await self._authenticate(request, host)
        except AuthenticationFailed as failure:
            self.failures.failure(
                failure.reason.value,
                host,
                failure.message,
                principal=failure.principal or _claimed(request),
                client_id=client_id,
                where=f"{request.method} {request.path}",
            )
            return refusal(failure, self.challenges, accepted=list(self.accepted))
        request[CALLER_KEY] = Caller(principal, host, client_id, how, expires_at)
        return None

    async def _authenticate(self, request: web.Request, host: str) -> tuple[str, How, float | None]:
        headers = request.headers.getall("Authorization", [])
        if len(headers) > 1:
            raise AuthenticationFailed(
                AuthFailure.MALFORMED, f"send one Authorization header, not {len(headers)}"
            )
        try:
            if headers:
                return await self._header(request, headers[0], host)
            der = _peer_certificate(request) if self._mapper is not None else None
            if self._mapper is not None and der is not None:
                return self._certificate_principal(der, self._mapper), How.CERTIFICATE, None
        except AuthenticationFailed:
            raise
        except Exception:
            # A credential the checks did not foresee: refused, never a 500.
            # The traceback names no secret (the libraries' messages about a
            # token do not repeat it); logged at a bounded rate as a failure.
            auth_logger.debug("a credential check failed unexpectedly", exc_info=True)
            raise AuthenticationFailed(
                AuthFailure.MALFORMED, "the credentials could not be read"
            ) from None
        raise AuthenticationFailed(AuthFailure.MISSING, f"no credentials: {self._how_to()}")

    async def _header(
        self, request: web.Request, value: str, host: str
    ) -> tuple[str, How, float | None]:
        scheme = value.lstrip(" ").partition(" ")[0].lower()
        if scheme == "bearer" and self._bearer is not None:
            token = parse_bearer_authorization(value, self._token_bytes_max)
            principal, until = await self._bearer.verified(token)
            return principal, How.BEARER, until
        if scheme == "basic" and self.passwords is not None:
            basic = parse_basic_authorization(value)
            checked = self.passwords.checked_against(basic.user)
            principal = await self.passwords.principal(basic, host)
            passwords = self.passwords
            request[_STILL_VALID_KEY] = lambda: passwords.still_current(basic.user, checked)
            return principal, How.PASSWORD, None
        # The scheme is not repeated: a client that sent a bare secret as
        # the header would find it in the answer and in the log.
        raise AuthenticationFailed(
            AuthFailure.MISSING, f"the Authorization scheme is not accepted: {self._how_to()}"
        )

    def _how_to(self) -> str:
        ways = {
            Authentication.BEARER: "Authorization: Bearer <token>",
            Authentication.PASSWORD: "Authorization: Basic <user:password>",
            Authentication.CERTIFICATE: "a TLS client certificate",
        }
        return "send " + " or ".join(ways[way] for way in self.settings.authentication)

    def _certificate_principal(self, der: bytes | None, mapper: PrincipalMapper) -> str:
        if der is not None:
            known = self._certificates.get(der)
            if known is not None:
                self._certificates.move_to_end(der)
                return known
        principal = certificate_principal(der, mapper)
        assert der is not None  # certificate_principal refuses a missing one
        self._certificates[der] = principal
        if len(self._certificates) > CERTIFICATE_PRINCIPALS_CACHED_MAX:
            self._certificates.popitem(last=False)
        return principal


def reauthenticate(request: web.Request) -> None:
    """Refuse to go on answering a request whose credential has stopped
    counting since it came (401 SASL_AUTHENTICATION_FAILED): a token past
    its exp (reason `expired`), a password whose user's credential was
    changed or removed (`bad_credentials`). A long-lived answer (a stream)
    asks before each push, as Kafka re-authenticates a connection once its
    token expires (KIP-368) and SCRAM sessions at re-authentication."""
    caller = request.get(CALLER_KEY)
    if caller is not None and caller.expires_at is not None and time.time() >= caller.expires_at:
        raise SaslAuthenticationFailedError(
            "authentication failed: the token has expired since the request came; "
            "send the request again with a new token",
            reason=AuthFailure.EXPIRED.value,
        )
    still_valid = request.get(_STILL_VALID_KEY)
    if still_valid is not None and not still_valid():
        raise SaslAuthenticationFailedError(
            "authentication failed: the user's password was changed or the user removed "
            "since the request came",
            reason=AuthFailure.BAD_CREDENTIALS.value,
        )


def _peer_certificate(request: web.Request) -> bytes | None:
    """The DER certificate the TLS peer showed (verified by the ssl module), or None."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


def _claimed(request: web.Request) -> str | None:
    """The user name a refused Basic header claims, for the log (never a
    token's claims: unverified, they are the caller's say-so in any form)."""
    values = request.headers.getall("Authorization", [])
    if len(values) != 1 or not values[0].lstrip(" ")[:6].lower().startswith("basic"):
        return None
    try:
        return "User:" + parse_basic_authorization(values[0]).user
    except AuthenticationFailed:
        return None
