"""Who is calling (lograft/api/authentication.py): the Caller every
authenticated route sees, the 401 answers, the internal routes' cluster
secret, and the header fuzz (every bad credential a 401 with a stable code,
never a 5xx, the handler never reached)."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from lograft import typed
from lograft.api import password_checks
from lograft.api.app import CLUSTER_PRINCIPAL, SECRET_HEADER, create_app
from lograft.api.auth_failure_log import OTHER_PEERS, AuthFailureLog
from lograft.api.authentication import CLIENT_ID_CHARS_MAX, Authenticator
from lograft.api.caller import CALLER_KEY, CLIENT_ID_HEADER, Caller
from lograft.api.http_config import HttpConfig
from lograft.api.http_server import HttpServer
from lograft.errors import InvalidConfigError
from lograft.security.local_ca import make_local_certificates
from lograft.security.passwords import ScramCredential, ScramMechanism, make_credential
from lograft.security.settings import SecuritySettings
from lograft.security.tls import TlsSettings, server_context
from tests.raft_support import free_port
from tests.unit.security.test_tokens import (
    DEFAULT_JWKS,
    OTHER_EC_KEY,
    FakeIdp,
    hs256_with_public_key,
    now,
    token,
    unsigned,
)
from tests.unit.security.test_tokens import claims as token_claims

SECRET = "unit-test-cluster-secret"
ISSUER = "https://idp.example"
AUDIENCE = "lograft"
BOB_PASSWORD = "correct horse battery staple"
TOKEN_BYTES_MAX = 4096

Credentials = dict[str, Mapping[ScramMechanism, ScramCredential]]


def security(*ways: str, **changes: Any) -> SecuritySettings:
    body: dict[str, Any] = {"authentication": list(ways)}
    if "bearer" in ways:
        body["bearer"] = {
            "issuer": ISSUER,
            "audience": AUDIENCE,
            "jwks_url": "https://idp.example/jwks",
            "token_bytes_max": TOKEN_BYTES_MAX,
        }
    body.update(changes)
    return typed.build(body, SecuritySettings, error=InvalidConfigError)


def credentials() -> Credentials:
    bob = make_credential("bob", BOB_PASSWORD)
    return {"bob": {bob.mechanism: bob}}


class Served:
    """An app whose every route answers the caller it saw; `reached` counts
    the requests that got past the middleware."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator
        self.reached = 0
        self.app = create_app(
            cluster_secret=SECRET,
            request_bytes_max=1 << 20,
            ready=lambda: (True, {}),
            authenticator=authenticator,
        )
        for method, path in (
            ("GET", "/v1/cluster"),
            ("POST", "/v1/topics/{topic}/records"),
            ("POST", "/internal/v1/produce"),
        ):
            self.app.router.add_route(method, path, self.answer)

    async def answer(self, request: web.Request) -> web.Response:
        self.reached += 1
        caller = request.get(CALLER_KEY)
        assert isinstance(caller, Caller)
        return web.json_response(caller._asdict())


class Client:
    """Requests to a served app: through aiohttp, or as raw bytes."""

    def __init__(self, session: aiohttp.ClientSession, port: int, scheme: str = "http") -> None:
        self.session = session
        self.host = "127.0.0.1"
        self.port = port
        self.base = f"{scheme}://{self.host}:{port}"

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.session.get(self.base + path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.session.post(self.base + path, **kwargs)


async def _client(served: Served) -> AsyncIterator[Client]:
    """The app behind the node's own listener (HttpServer: its header limits
    and its JSON answers to HTTP that does not parse)."""
    server = HttpServer(served.app, HttpConfig(port=free_port()))
    await server.start()
    await served.authenticator.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(session, server.config.port)
    finally:
        await server.stop()
        await served.authenticator.close()


@pytest.fixture
async def anonymous() -> AsyncIterator[tuple[Served, Client]]:
    served = Served(Authenticator())
    async for client in _client(served):
        yield served, client


@pytest.fixture
async def bearer_and_password() -> AsyncIterator[tuple[Served, Client]]:
    served = Served(
        Authenticator(
            security("bearer", "password"),
            credentials=lambda: CREDENTIALS,
            jwks_fetcher=FakeIdp(DEFAULT_JWKS),
        )
    )
    async for client in _client(served):
        yield served, client


CREDENTIALS: Credentials = credentials()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def _refused(resp: Any, reason: str, status: int = 401) -> dict[str, Any]:
    body = await resp.json()
    assert resp.status == status, body
    error = body["error"]
    if status == 401:
        assert error["code"] == "SASL_AUTHENTICATION_FAILED"
        assert error["details"]["reason"] == reason
    return error


# -- anonymous ---------------------------------------------------------------------


async def test_without_authentication_every_caller_is_anonymous(anonymous) -> None:
    _served, client = anonymous
    resp = await client.get("/v1/cluster", headers={CLIENT_ID_HEADER: "billing-7"})
    assert resp.status == 200
    assert await resp.json() == {
        "principal": "User:ANONYMOUS",
        "host": "127.0.0.1",
        "client_id": "billing-7",
        "how": "anonymous",
        "expires_at": None,
    }
    # Credentials are not looked at when nothing is checked.
    resp = await client.get("/v1/cluster", headers={"Authorization": "Bearer junk"})
    assert (await resp.json())["principal"] == "User:ANONYMOUS"


@pytest.mark.parametrize(
    "value",
    ["x" * (CLIENT_ID_CHARS_MAX + 1), "a\tb", "a\x7fb", "a\u2028b"],
    ids=["too-long", "tab", "del", "line-separator"],
)
async def test_a_bad_client_id_is_400(anonymous, value) -> None:
    served, client = anonymous
    head = b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n"
    status, body = await raw_request(client, head + f"{CLIENT_ID_HEADER}: {value}\r\n".encode())
    assert status == 400, body
    assert orjson.loads(body)["error"]["code"] == "INVALID_REQUEST"
    assert served.reached == 0


async def test_a_client_id_of_the_longest_length_is_taken(anonymous) -> None:
    _served, client = anonymous
    value = "é" * CLIENT_ID_CHARS_MAX
    resp = await client.get("/v1/cluster", headers={CLIENT_ID_HEADER: value})
    assert (await resp.json())["client_id"] == value


async def test_two_client_ids_are_400(anonymous) -> None:
    served, client = anonymous
    headers = [(CLIENT_ID_HEADER, "a"), (CLIENT_ID_HEADER, "b")]
    resp = await client.get("/v1/cluster", headers=headers)
    await _refused(resp, "", status=400)
    assert served.reached == 0


async def raw_request(client: Client, head: bytes) -> tuple[int, bytes]:
    """Send `head` (a request's line and headers) as bytes; the status and body."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    try:
        writer.write(head + b"Connection: close\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def test_a_client_id_that_is_not_utf8_is_400(anonymous) -> None:
    served, client = anonymous
    head = (
        b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n" + CLIENT_ID_HEADER.encode() + b": \xff\xfe\r\n"
    )
    status, body = await raw_request(client, head)
    assert status == 400, body
    assert orjson.loads(body)["error"]["code"] == "INVALID_REQUEST"
    assert served.reached == 0


# -- bearer --------------------------------------------------------------------------


async def test_a_valid_bearer_token_is_its_subject(bearer_and_password) -> None:
    _served, client = bearer_and_password
    resp = await client.get(
        "/v1/cluster",
        headers={"Authorization": f"Bearer {token()}", CLIENT_ID_HEADER: "app"},
    )
    assert resp.status == 200
    body = await resp.json()
    # The token counts until its exp plus the clock skew allowed (30 s).
    expires_at = body.pop("expires_at")
    assert body == {
        "principal": "User:alice",
        "host": "127.0.0.1",
        "client_id": "app",
        "how": "bearer",
    }
    assert abs(expires_at - (now() + 300 + 30)) < 5


async def test_the_keys_are_fetched_when_the_authenticator_starts() -> None:
    idp = FakeIdp(DEFAULT_JWKS)
    authenticator = Authenticator(security("bearer"), jwks_fetcher=idp)
    await authenticator.start()
    try:
        assert authenticator.keys is not None
        for _ in range(200):
            if idp.calls:
                break
            await asyncio.sleep(0.01)
        assert idp.calls == 1
    finally:
        await authenticator.close()
    assert authenticator._refresher is None


async def test_no_credentials_is_401_with_the_challenges(bearer_and_password) -> None:
    served, client = bearer_and_password
    resp = await client.get("/v1/cluster")
    error = await _refused(resp, "missing_credentials")
    assert error["details"]["accepted"] == ["bearer", "password"]
    assert resp.headers.getall("WWW-Authenticate") == [
        'Bearer realm="lograft"',
        'Basic realm="lograft", charset="UTF-8"',
    ]
    assert served.reached == 0


async def test_public_routes_need_no_credentials(bearer_and_password) -> None:
    _served, client = bearer_and_password
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200


async def test_the_cluster_secret_is_no_credential_on_a_public_route(bearer_and_password) -> None:
    served, client = bearer_and_password
    resp = await client.get("/v1/cluster", headers={SECRET_HEADER: SECRET})
    error = await _refused(resp, "missing_credentials")
    assert SECRET not in orjson.dumps(error).decode()
    assert served.reached == 0


async def test_internal_routes_take_only_the_cluster_secret(bearer_and_password) -> None:
    served, client = bearer_and_password
    good = {"Authorization": f"Bearer {token()}"}
    for headers, reason in (
        (good, "missing_credentials"),
        ({**good, SECRET_HEADER: "wrong"}, "bad_credentials"),
        ({"Authorization": basic("bob", BOB_PASSWORD)}, "missing_credentials"),
    ):
        resp = await client.post("/internal/v1/produce", headers=headers)
        await _refused(resp, reason)
        assert resp.headers["WWW-Authenticate"] == 'Cluster-Secret realm="lograft-internal"'
    assert served.reached == 0
    resp = await client.post("/internal/v1/produce", headers={SECRET_HEADER: SECRET})
    assert resp.status == 200
    assert await resp.json() == {
        "principal": CLUSTER_PRINCIPAL,
        "host": "127.0.0.1",
        "client_id": "",
        "how": "cluster",
        "expires_at": None,
    }


async def test_a_secret_header_that_is_not_utf8_is_401_not_500(anonymous) -> None:
    """The secret check encoded the header as UTF-8: aiohttp's lone
    surrogates for invalid bytes made that a 500."""
    _served, client = anonymous
    head = b"POST /internal/v1/produce HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
    status, body = await raw_request(client, head + SECRET_HEADER.encode() + b": \xff\r\n")
    assert status == 401, body
    assert orjson.loads(body)["error"]["details"]["reason"] == "bad_credentials"


def _tokens() -> list[tuple[str, str, str]]:
    """(name, Authorization value, reason) of bad bearer credentials."""
    t = now()
    return [
        ("expired", f"Bearer {token(exp=t - 120)}", "expired"),
        ("not-yet-valid", f"Bearer {token(nbf=t + 120)}", "not_yet_valid"),
        ("wrong-aud", f"Bearer {token(aud='other')}", "wrong_audience"),
        ("wrong-iss", f"Bearer {token(iss='https://evil.example')}", "wrong_issuer"),
        ("no-exp", f"Bearer {token(exp=None)}", "missing_claim"),
        ("wrong-key", f"Bearer {token('ec-1', key=OTHER_EC_KEY)}", "bad_signature"),
        ("unknown-kid", f"Bearer {token('zz', key=OTHER_EC_KEY, alg='ES256')}", "unknown_key"),
        (
            "alg-none",
            f"Bearer {unsigned({'alg': 'none', 'kid': 'ec-1'}, token_claims())}",
            "unsupported_algorithm",
        ),
        ("hs256-public-key", f"Bearer {hs256_with_public_key()}", "unsupported_algorithm"),
        ("not-a-jwt", "Bearer not-a-jwt", "malformed"),
        ("three-dots", "Bearer a.b.c", "malformed"),
        ("scheme-only", "Bearer", "malformed"),
        ("two-tokens", f"Bearer {token()} {token()}", "malformed"),
        ("too-large", "Bearer " + "A" * (TOKEN_BYTES_MAX + 100), "too_large"),
        ("other-scheme", "Digest username=x", "missing_credentials"),
        ("bare-secret", "hunter2", "missing_credentials"),
        ("basic-bad-base64", "Basic !!!notbase64", "malformed"),
        ("basic-no-colon", "Basic " + base64.b64encode(b"bob").decode(), "malformed"),
        ("basic-empty-user", basic("", "x"), "malformed"),
        ("basic-wrong-password", basic("bob", "wrong"), "bad_credentials"),
        ("basic-unknown-user", basic("mallory", BOB_PASSWORD), "bad_credentials"),
        ("basic-not-utf8", "Basic " + base64.b64encode(b"bob:\xff").decode(), "malformed"),
        ("basic-control", basic("bob", "a\x00b"), "malformed"),
    ]


# Built when each test runs, not at collection: a token's exp and nbf are
# relative to now, and a full suite runs some tests many minutes after it
# collected them (a default-lifetime token had expired by then).
_TOKEN_NAMES = [c[0] for c in _tokens()]


@pytest.mark.parametrize("name", _TOKEN_NAMES, ids=_TOKEN_NAMES)
async def test_every_bad_credential_is_401_and_reaches_nothing(
    bearer_and_password, caplog, name
) -> None:
    value, reason = next((v, r) for n, v, r in _tokens() if n == name)
    served, client = bearer_and_password
    caplog.set_level(logging.DEBUG)
    resp = await client.post(
        "/v1/topics/t/records",
        data=b'{"records": [{"value": 1}]}',
        headers={"Authorization": value},
    )
    error = await _refused(resp, reason)
    assert served.reached == 0
    # The credential after the scheme (or a bare one) is never repeated.
    secret = value.partition(" ")[2] if " " in value else value
    text = orjson.dumps(error).decode()
    logged = caplog.text
    if secret.strip() and secret != "Bearer":
        assert secret not in text and secret not in logged
    assert BOB_PASSWORD not in text and BOB_PASSWORD not in logged
    assert f"reason={reason}" in logged
    if name in ("expired", "not-yet-valid", "wrong-aud", "wrong-iss"):
        assert "principal=User:alice" in logged  # its signature holds: the IdP's word
    elif name.startswith("basic-") and reason == "bad_credentials":
        assert "principal=User:" in logged
    else:
        assert "principal=-" in logged


async def test_many_authorization_headers_are_refused(bearer_and_password) -> None:
    served, client = bearer_and_password
    good = f"Bearer {token()}"
    resp = await client.get("/v1/cluster", headers=[("Authorization", good)] * 2)
    await _refused(resp, "malformed")
    resp = await client.get("/v1/cluster", headers=[("Authorization", good)] * 100)
    await _refused(resp, "malformed")
    assert served.reached == 0


@pytest.mark.parametrize(
    "raw",
    [b"Bearer \xff\xfe\xfd", b"Bearer eyJ\xe9.e30.e30", b"Basic \xe9t\xe9", b"\xc3\x28", b"\x80"],
    ids=["bearer-invalid-utf8", "bearer-latin1", "basic-latin1", "bad-utf8", "lone-byte"],
)
async def test_authorization_bytes_that_are_not_utf8_are_401(bearer_and_password, raw) -> None:
    served, client = bearer_and_password
    head = b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\nAuthorization: " + raw + b"\r\n"
    status, body = await raw_request(client, head)
    assert status == 401, body
    assert orjson.loads(body)["error"]["code"] == "SASL_AUTHENTICATION_FAILED"
    assert served.reached == 0


@pytest.mark.parametrize(
    "line",
    [
        b"Authorization: Bearer " + b"S3CR3T" * 2000,
        b"Authorization: Basic " + base64.b64encode(b"bob:" + b"S3CR3T" * 10) + b"\x01",
        b"Authorization: Bearer S3CR3T\x00",
        SECRET_HEADER.encode() + b": S3CR3T" + b"\x7f",
    ],
    ids=["over-the-field-limit", "basic-control-char", "bearer-nul", "secret-del"],
)
async def test_a_header_http_refuses_is_400_without_the_secret(
    bearer_and_password, caplog, line
) -> None:
    """aiohttp refuses a header line over the field limit or with a control
    character before any middleware; its answer and the client-fault log
    quoted the line, credential and all."""
    served, client = bearer_and_password
    caplog.set_level(logging.DEBUG)
    status, body = await raw_request(
        client, b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n" + line + b"\r\n"
    )
    assert status == 400, body
    assert orjson.loads(body)["error"]["code"] == "INVALID_REQUEST"
    assert b"S3CR3T" not in body and "S3CR3T" not in caplog.text
    assert served.reached == 0


# JSON values of any shape, for a token's header and claims.
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_JOSE_HEADER = st.fixed_dictionaries(
    {},
    optional={
        "alg": st.sampled_from(["none", "HS256", "ES256", "RS256", "EdDSA", "PS256"]) | _JSON,
        "kid": st.sampled_from(["ec-1", "rsa-1", "ed-1"]) | _JSON,
        "typ": _JSON,
        "crit": _JSON,
        "jku": _JSON,
        "b64": _JSON,
    },
)


def _jws_shaped(header: Any, claims: Any, signature: bytes) -> str:
    """A token whose three parts decode: a JOSE header and claims of any shape."""

    def part(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    header = header if isinstance(header, dict) else {"alg": "ES256", "x": header}
    return "Bearer " + ".".join(
        (part(orjson.dumps(header)), part(orjson.dumps(claims)), part(signature))
    )


@hypothesis_settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.one_of(
        st.text(max_size=300),
        st.builds(lambda s: "Bearer " + s, st.text(max_size=300)),
        st.builds(lambda s: "Basic " + s, st.text(max_size=300)),
        st.builds(lambda b: "Basic " + base64.b64encode(b).decode(), st.binary(max_size=200)),
        st.builds(
            lambda parts: "Bearer " + ".".join(parts),
            st.lists(st.text("ABCDEFabcdef0123456789-_=", max_size=60), max_size=5),
        ),
        st.builds(_jws_shaped, _JOSE_HEADER | _JSON, _JSON, st.binary(max_size=80)),
    )
)
def test_fuzzed_authorization_values_are_401(bearer_and_password_sync, value: str) -> None:
    served, call = bearer_and_password_sync
    reached = served.reached
    status, body = call(value)
    error = orjson.loads(body)["error"]
    assert served.reached == reached
    if len(value) >= 8:
        assert value.encode("utf-8", "surrogateescape") not in body
    if status == 400:
        # A control character: the HTTP parser refuses the header line.
        assert error["code"] == "INVALID_REQUEST", (value, body)
        assert any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value), value
        return
    assert status == 401, (value, body)
    assert error["code"] == "SASL_AUTHENTICATION_FAILED"
    assert error["details"]["reason"] in {
        "missing_credentials",
        "malformed",
        "too_large",
        "unsupported_algorithm",
        "unknown_key",
        "bad_signature",
        "bad_credentials",
        # Random user:password pairs from one address spend its failure budget.
        "too_many_failures",
        "missing_claim",
    }
    assert served.reached == reached


@pytest.fixture
def bearer_and_password_sync():
    """The bearer-and-password app on a loop of its own thread, so a
    hypothesis test (which is not async) can call it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)

    served = Served(
        Authenticator(
            security("bearer", "password"),
            credentials=lambda: CREDENTIALS,
            jwks_fetcher=FakeIdp(DEFAULT_JWKS),
        )
    )

    async def start() -> HttpServer:
        server = HttpServer(served.app, HttpConfig(port=free_port()))
        await server.start()
        return server

    server = run(start())

    async def send(value: str) -> tuple[int, bytes]:
        head = b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\nAuthorization: "
        # Header values go out as UTF-8 bytes; line breaks would end the header.
        encoded = value.encode("utf-8", "surrogateescape").replace(b"\r", b"").replace(b"\n", b"")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.config.port)
        try:
            writer.write(head + encoded + b"\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
        finally:
            writer.close()
        status_line, _, rest = answer.partition(b"\r\n")
        return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]

    try:
        yield served, lambda value: run(send(value))
    finally:
        run(server.stop())
        run(served.authenticator.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


# -- passwords -----------------------------------------------------------------------


async def test_a_right_password_is_its_user_and_is_checked_once(bearer_and_password) -> None:
    served, client = bearer_and_password
    passwords = served.authenticator.passwords
    assert passwords is not None
    checks = passwords.checks
    for _ in range(5):
        resp = await client.get(
            "/v1/cluster", headers={"Authorization": basic("bob", BOB_PASSWORD)}
        )
        assert (await resp.json())["principal"] == "User:bob"
        assert (await resp.json())["how"] == "password"
    assert passwords.checks == checks + 1
    assert passwords.hits == 4


async def test_a_changed_password_invalidates_the_cached_one() -> None:
    current = credentials()
    checks = password_checks.PasswordChecks(lambda: current, inflight_max=2, cache_entries_max=8)
    from lograft.security.passwords import BasicCredentials

    old = BasicCredentials("bob", BOB_PASSWORD)
    assert await checks.principal(old) == "User:bob"
    assert await checks.principal(old) == "User:bob"
    assert (checks.checks, checks.hits) == (1, 1)
    new = make_credential("bob", "a new password")
    current["bob"] = {new.mechanism: new}
    from lograft.security.failures import AuthenticationFailed, AuthFailure

    with pytest.raises(AuthenticationFailed) as refused:
        await checks.principal(old)
    assert refused.value.reason is AuthFailure.BAD_CREDENTIALS
    del current["bob"]
    with pytest.raises(AuthenticationFailed):
        await checks.principal(BasicCredentials("bob", "a new password"))
    # Failures are never remembered.
    assert checks.cached == 1 and checks.hits == 1


async def test_the_cache_is_bounded_and_holds_no_password() -> None:
    users = {}
    for i in range(10):
        record = make_credential(f"u{i}", f"password-{i}")
        users[f"u{i}"] = {record.mechanism: record}
    from lograft.security.passwords import BasicCredentials

    checks = password_checks.PasswordChecks(lambda: users, inflight_max=4, cache_entries_max=3)
    for i in range(10):
        await checks.principal(BasicCredentials(f"u{i}", f"password-{i}"))
    assert checks.cached == 3
    for key in checks._cache:
        assert b"password" not in key and len(key) == 32


async def test_password_checks_run_off_the_loop_at_most_inflight_max_at_once(
    monkeypatch,
) -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()
    real = password_checks.check_password

    def slow_check(credential, password):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(10)
        try:
            real(credential, password)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(password_checks, "check_password", slow_check)
    from lograft.security.passwords import BasicCredentials

    checks = password_checks.PasswordChecks(credentials, inflight_max=2, cache_entries_max=0)
    tasks = [
        asyncio.create_task(checks.principal(BasicCredentials("bob", BOB_PASSWORD)))
        for _ in range(6)
    ]
    # The loop is free meanwhile: it runs this coroutine while checks block.
    for _ in range(500):
        if running == 2:
            break
        await asyncio.sleep(0.01)
    assert running == 2
    # A request that gives up keeps its slot until its hashing ends.
    tasks[0].cancel()
    await asyncio.sleep(0.05)
    assert running == 2
    release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert most == 2
    assert all(r == "User:bob" for r in results[1:])


# -- certificates --------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    make_local_certificates(directory, nodes=["node-1"], clients=["admin"])
    return directory


async def test_a_client_certificate_is_its_mapped_subject(certs) -> None:
    tls = typed.build(
        {
            "certificate_file": str(certs / "node-1.pem"),
            "key_file": str(certs / "node-1-key.pem"),
            "ca_file": str(certs / "ca.pem"),
            "client_certificate": "optional",
            "principal_mapping_rules": "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",
        },
        TlsSettings,
        error=InvalidConfigError,
    )
    served = Served(Authenticator(security("certificate"), tls))
    server = TestServer(served.app)
    await server.start_server(ssl=server_context(tls))
    async with aiohttp.ClientSession() as session:
        client = Client(session, server.port, "https")
        url = f"https://localhost:{client.port}/v1/cluster"
        context = ssl.create_default_context(cafile=certs / "ca.pem")
        plain = await client.session.get(url, ssl=context)
        error = await _refused(plain, "missing_credentials")  # no header, no certificate
        assert "a TLS client certificate" in error["message"]
        assert plain.headers["WWW-Authenticate"] == 'Certificate realm="lograft"'
        # A new context: the session's pool would reuse the connection without one.
        context = ssl.create_default_context(cafile=certs / "ca.pem")
        context.load_cert_chain(certs / "admin.pem", certs / "admin-key.pem")
        for _ in range(2):  # the second from the principal cache
            resp = await client.session.get(url, ssl=context)
            assert resp.status == 200, await resp.text()
            body = await resp.json()
            assert (body["principal"], body["how"]) == ("User:admin", "certificate")
        # A certificate does not rescue a bad Authorization header.
        resp = await client.session.get(url, ssl=context, headers={"Authorization": "Bearer x"})
        await _refused(resp, "missing_credentials")
    await server.close()


# -- the failure log -----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failures_are_logged_once_per_reason_and_peer_per_interval(caplog) -> None:
    clock = Clock()
    failures = AuthFailureLog(10_000, clock=clock)
    caplog.set_level(logging.WARNING, "lograft.api.authentication")
    for _ in range(5):
        failures.failure("expired", "10.0.0.1", "the token has expired")
    failures.failure("bad_credentials", "10.0.0.1", "wrong", principal="User:bob")
    failures.failure("expired", "10.0.0.2", "the token has expired")
    assert len(caplog.records) == 3
    assert "principal=User:bob" in caplog.records[1].getMessage()
    clock.now += 10
    failures.failure("expired", "10.0.0.1", "the token has expired")
    assert "(and 4 more since the last such line)" in caplog.records[-1].getMessage()
    assert failures.counts == {"expired": 7, "bad_credentials": 1}


def test_a_caller_rotating_addresses_cannot_grow_the_table(caplog) -> None:
    clock = Clock()
    failures = AuthFailureLog(10_000, peers_max=4, clock=clock)
    caplog.set_level(logging.WARNING, "lograft.api.authentication")
    for i in range(100):
        failures.failure("bad_signature", f"10.0.0.{i}", "the token's signature is wrong")
    assert len(failures._pairs) == 5  # four peers and the overflow entry
    assert len(caplog.records) == 5
    assert OTHER_PEERS in caplog.records[-1].getMessage()
    clock.now += 10
    failures.failure("bad_signature", "10.9.9.9", "the token's signature is wrong")
    assert any("95 more" in r.getMessage() for r in caplog.records)


def test_the_openapi_document_names_the_ways_in_and_the_public_routes() -> None:
    from lograft.api.authentication import PUBLIC_ROUTES
    from lograft.api.openapi import document

    doc = document()
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "password", "certificate"}
    assert {} in doc["security"] and {"bearer": []} in doc["security"]
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            if path in PUBLIC_ROUTES:
                assert operation["security"] == [{}], path
            else:
                assert "security" not in operation, path  # the document's: any way in
