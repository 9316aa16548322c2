"""Bearer-token verification (lograft.security.tokens), with no network but a
loopback aiohttp server for the URL fetcher."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import ssl
import time
from pathlib import Path

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given
from hypothesis import settings as settings_hypothesis
from hypothesis import strategies as st
from jwt.warnings import InsecureKeyLengthWarning

from lograft import typed
from lograft.errors import InvalidConfigError
from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.local_ca import make_local_certificates
from lograft.security.tokens import (
    JWKS_KEYS_MAX,
    BearerSettings,
    BearerVerifier,
    JwksCache,
    fetcher_for,
    file_fetcher,
    http_fetcher,
    parse_bearer_authorization,
    parse_jwks,
)
from tests.raft_support import eventually_async, free_port

ISSUER = "https://idp.example"
AUDIENCE = "lograft"

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
OTHER_EC_KEY = ec.generate_private_key(ec.SECP256R1())

KEYS = {"rsa-1": (RSA_KEY, "RS256"), "ec-1": (EC_KEY, "ES256"), "ed-1": (ED_KEY, "EdDSA")}


def public_jwk(key, kid: str | None, **extra) -> dict:
    public = key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = jwt.algorithms.ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = jwt.algorithms.OKPAlgorithm.to_jwk(public, as_dict=True)
    if kid is not None:
        jwk["kid"] = kid
    jwk.update(extra)
    return jwk


def jwks(*entries) -> bytes:
    return json.dumps({"keys": list(entries)}).encode()


DEFAULT_JWKS = jwks(*(public_jwk(key, kid) for kid, (key, _alg) in KEYS.items()))


def claims(**changes) -> dict:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 300, "iat": now}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def token(kid: str | None = "ec-1", key=None, alg: str | None = None, **changes) -> str:
    own_key, own_alg = KEYS.get(kid, (EC_KEY, "ES256"))
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims(**changes), key or own_key, algorithm=alg or own_alg, headers=headers)


def unsigned(header: dict, body: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(body)}."


def settings(**changes) -> BearerSettings:
    base = {
        "issuer": ISSUER,
        "audience": AUDIENCE,
        "jwks_url": "https://idp.example/jwks",
        "algorithms": ["RS256", "ES256", "EdDSA"],
    }
    base.update(changes)
    return typed.build(base, BearerSettings, error=InvalidConfigError)


class FakeIdp:
    """An injectable fetcher: serves `documents` in turn (the last one stays)."""

    def __init__(self, *documents: bytes | Exception) -> None:
        self.documents = list(documents)
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, max_bytes: int, timeout_s: float) -> bytes:
        self.calls += 1
        assert max_bytes == 1024 * 1024 and timeout_s == 5.0
        if self.gate is not None:
            await self.gate.wait()
        document = self.documents[0] if len(self.documents) == 1 else self.documents.pop(0)
        if isinstance(document, Exception):
            raise document
        return document


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def verifier(idp: FakeIdp | None = None, clock: Clock | None = None, **changes):
    config = settings(**changes)
    cache = JwksCache(config, idp or FakeIdp(DEFAULT_JWKS), clock or Clock())
    return BearerVerifier(config, cache), cache


@pytest.mark.parametrize("kid", sorted(KEYS))
async def test_a_valid_token_gives_the_sub_as_user_principal(kid) -> None:
    check, _ = verifier()
    assert await check.principal(token(kid)) == "User:alice"


async def test_the_principal_claim_is_configurable_and_aud_may_be_a_list() -> None:
    check, _ = verifier(principal_claim="email")
    found = await check.principal(token(email="a@example.com", aud=["other", AUDIENCE]))
    assert found == "User:a@example.com"


async def test_clock_skew_is_tolerated_up_to_its_bound() -> None:
    check, _ = verifier(clock_skew_ms=30_000)
    now = int(time.time())
    assert await check.principal(token(exp=now - 10)) == "User:alice"
    assert await check.principal(token(nbf=now + 10)) == "User:alice"


async def reason_of(check: BearerVerifier, text: str) -> AuthFailure:
    with pytest.raises(AuthenticationFailed) as info:
        await check.principal(text)
    # A refusal never repeats the token, which may be valid elsewhere.
    assert text not in info.value.message and text[:20] not in str(info.value)
    return info.value.reason


def now() -> int:
    return int(time.time())


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: token(exp=now() - 120), AuthFailure.EXPIRED),
        (lambda: token(nbf=now() + 120), AuthFailure.NOT_YET_VALID),
        (lambda: token(aud="someone-else"), AuthFailure.WRONG_AUDIENCE),
        (lambda: token(aud=["a", "b"]), AuthFailure.WRONG_AUDIENCE),
        (lambda: token(iss="https://evil.example"), AuthFailure.WRONG_ISSUER),
        (lambda: token(exp=None), AuthFailure.MISSING_CLAIM),
        (lambda: token(aud=None), AuthFailure.MISSING_CLAIM),
        (lambda: token(iss=None), AuthFailure.MISSING_CLAIM),
        (lambda: token(sub=None), AuthFailure.MISSING_CLAIM),
        (lambda: token(sub=42), AuthFailure.MALFORMED),  # PyJWT: sub must be a string
        (lambda: token(sub=""), AuthFailure.MALFORMED),
        (lambda: token(sub="a\nb"), AuthFailure.MALFORMED),
        (lambda: token(exp="tomorrow"), AuthFailure.MALFORMED),
        # signed by another key under a known kid
        (lambda: token("ec-1", key=OTHER_EC_KEY), AuthFailure.BAD_SIGNATURE),
        (lambda: token("ec-1")[:-4] + "AAAA", AuthFailure.BAD_SIGNATURE),
        (lambda: token("nobody", key=OTHER_EC_KEY, alg="ES256"), AuthFailure.UNKNOWN_KEY),
        # alg: none, and HS256 with the public key as the HMAC secret
        (
            lambda: unsigned({"alg": "none", "kid": "ec-1"}, claims()),
            AuthFailure.UNSUPPORTED_ALGORITHM,
        ),
        (
            lambda: unsigned({"alg": "None", "kid": "ec-1"}, claims()),
            AuthFailure.UNSUPPORTED_ALGORITHM,
        ),
        (lambda: unsigned({"kid": "ec-1"}, claims()), AuthFailure.UNSUPPORTED_ALGORITHM),
        (lambda: hs256_with_public_key(), AuthFailure.UNSUPPORTED_ALGORITHM),
        (lambda: token("rsa-1", alg="PS256"), AuthFailure.UNSUPPORTED_ALGORITHM),
        # malformed: not three parts, bad base64, bad JSON, JWE-shaped, non-ASCII
        (lambda: "not-a-jwt", AuthFailure.MALFORMED),
        (lambda: "a.b.c", AuthFailure.MALFORMED),
        (lambda: "!!!.e30.", AuthFailure.MALFORMED),
        (lambda: "e30.e30", AuthFailure.MALFORMED),
        (lambda: "eyJhbGciOiJSUzI1NiJ9.a.b.c.d", AuthFailure.MALFORMED),
        (lambda: "\udcff\udcfe.e30.e30", AuthFailure.MALFORMED),
        (lambda: unsigned({"alg": "ES256", "kid": 7}, claims()), AuthFailure.MALFORMED),
        (lambda: "x" * 8193, AuthFailure.TOO_LARGE),
    ],
)
async def test_every_bad_token_is_refused_with_its_stable_reason(make, reason) -> None:
    check, _ = verifier()
    assert await reason_of(check, make()) is reason


def hs256_with_public_key() -> str:
    pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}
    signing = unsigned(header, claims())[:-1]
    mac = hmac.digest(pem, signing.encode(), hashlib.sha256)
    return signing + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


async def test_a_key_pinned_to_one_algorithm_is_not_used_for_another() -> None:
    idp = FakeIdp(jwks(public_jwk(RSA_KEY, "rsa-1", alg="RS256")))
    check, _ = verifier(idp, algorithms=["RS256", "RS384"])
    assert await check.principal(token("rsa-1")) == "User:alice"
    assert await reason_of(check, token("rsa-1", alg="RS384")) is AuthFailure.UNKNOWN_KEY


async def test_a_key_of_another_type_cannot_verify() -> None:
    """An EC key under a kid the token claims is RSA-signed."""
    idp = FakeIdp(jwks(public_jwk(EC_KEY, "k")))
    check, _ = verifier(idp)
    assert await reason_of(check, token("k", key=RSA_KEY, alg="RS256")) is AuthFailure.UNKNOWN_KEY


async def test_a_token_without_kid_needs_a_single_key_set() -> None:
    single, _ = verifier(FakeIdp(jwks(public_jwk(EC_KEY, None))))
    assert await single.principal(token(None)) == "User:alice"
    several, _ = verifier()
    assert await reason_of(several, token(None)) is AuthFailure.UNKNOWN_KEY


@pytest.mark.parametrize("alg", ["none", "HS256", "HS512", "RS1", ""])
def test_settings_refuse_symmetric_and_unsigned_algorithms(alg) -> None:
    with pytest.raises(InvalidConfigError, match="algorithms"):
        settings(algorithms=["RS256", alg])


@pytest.mark.parametrize(
    "change",
    [
        {"jwks_url": None},
        {"jwks_file": "/etc/jwks.json"},
        {"jwks_url": "http://idp.example/jwks"},
        {"jwks_url": "ftp://idp.example/jwks"},
        {"clock_skew_ms": 300_001},
        {"token_bytes_max": 10**6},
        {"algorithms": []},
        {"audiences": ["x"]},
    ],
)
def test_settings_refuse_bad_values(change) -> None:
    with pytest.raises(InvalidConfigError):
        settings(**change)


def test_settings_defaults() -> None:
    config = settings(jwks_url="http://127.0.0.1:8080/jwks")
    assert config.principal_claim == "sub"
    assert config.clock_skew_ms == 30_000
    assert config.jwks_refresh_ms == 3_600_000


async def test_an_unknown_kid_refetches_once_then_waits_out_the_rate_limit() -> None:
    """Key rotation: a token signed by a key published after the last fetch is
    accepted after one refetch; a flood of unknown kids causes at most one
    fetch per jwks_refetch_min_interval_ms."""
    rotated = jwks(public_jwk(EC_KEY, "ec-1"), public_jwk(OTHER_EC_KEY, "ec-2"))
    idp = FakeIdp(jwks(public_jwk(EC_KEY, "ec-1")), rotated)
    clock = Clock()
    check, cache = verifier(idp, clock)
    assert await check.principal(token("ec-1")) == "User:alice"
    assert idp.calls == 1
    clock.now += 10.0
    new = token("ec-2", key=OTHER_EC_KEY, alg="ES256")
    assert await check.principal(new) == "User:alice"
    assert idp.calls == 2
    for _ in range(5):
        assert await reason_of(check, token("forged", key=OTHER_EC_KEY, alg="ES256")) is (
            AuthFailure.UNKNOWN_KEY
        )
    assert idp.calls == 2
    clock.now += 10.0
    assert await reason_of(check, token("forged", key=OTHER_EC_KEY, alg="ES256")) is (
        AuthFailure.UNKNOWN_KEY
    )
    assert idp.calls == 3 == cache.fetches


async def test_keys_are_refetched_every_refresh_interval() -> None:
    idp = FakeIdp(jwks(public_jwk(EC_KEY, "ec-1")), jwks(public_jwk(OTHER_EC_KEY, "ec-2")))
    clock = Clock()
    check, cache = verifier(idp, clock, jwks_refresh_ms=60_000)
    assert await check.principal(token("ec-1")) == "User:alice"
    clock.now += 59.0
    assert await check.principal(token("ec-1")) == "User:alice"
    assert idp.calls == 1
    clock.now += 1.0
    # due: the caller goes on with the keys it has while the refresh runs
    assert await check.principal(token("ec-1")) == "User:alice"
    assert cache.refreshing is not None
    await cache.refreshing
    assert idp.calls == 2 and cache.refreshing is None
    # the old key is gone from the new set: the rotation took effect
    assert await reason_of(check, token("ec-1")) is AuthFailure.UNKNOWN_KEY
    assert idp.calls == 2


async def test_a_slow_refresh_stalls_no_caller_with_a_known_key() -> None:
    idp = FakeIdp(DEFAULT_JWKS)
    clock = Clock()
    check, cache = verifier(idp, clock, jwks_refresh_ms=60_000)
    assert await check.principal(token()) == "User:alice"
    idp.gate = asyncio.Event()
    clock.now += 60.0
    for _ in range(3):
        assert await check.principal(token()) == "User:alice"
    refresh = cache.refreshing
    assert refresh is not None and not refresh.done()  # one refresh, not yet done
    # a token naming a key the refresh may bring waits for that refresh
    rotated = asyncio.create_task(check.principal(token("ec-9", key=OTHER_EC_KEY, alg="ES256")))
    idp.documents = [jwks(public_jwk(OTHER_EC_KEY, "ec-9"))]
    idp.gate.set()
    assert await rotated == "User:alice"
    assert idp.calls == 2 and refresh.done()
    await cache.close()


async def test_close_cancels_a_refresh_under_way() -> None:
    idp = FakeIdp(DEFAULT_JWKS)
    clock = Clock()
    check, cache = verifier(idp, clock, jwks_refresh_ms=60_000)
    assert await check.principal(token()) == "User:alice"
    idp.gate = asyncio.Event()
    clock.now += 60.0
    assert await check.principal(token()) == "User:alice"
    task = cache.refreshing
    assert task is not None
    await cache.close()
    assert task.cancelled() and cache.refreshing is None


async def test_close_cancels_a_refresh_whose_fetch_is_just_returning() -> None:
    # Python 3.11's asyncio.wait_for dropped a cancel landing in the step the
    # fetch returned: the refresh then went on and installed the keys.
    idp = FakeIdp(DEFAULT_JWKS)
    clock = Clock()
    check, cache = verifier(idp, clock, jwks_refresh_ms=60_000)
    assert await check.principal(token()) == "User:alice"
    known = cache._keys
    gate = idp.gate = asyncio.Event()
    clock.now += 60.0
    assert await check.principal(token()) == "User:alice"
    task = cache.refreshing
    assert task is not None
    await eventually_async(lambda: gate._waiters, 10, "the refresh to fetch")  # type: ignore[attr-defined]
    gate.set()
    await cache.close()  # cancels in the same step
    assert task.cancelled() and cache.refreshing is None
    assert cache._keys is known  # the cancelled refresh installed nothing


async def test_a_failing_identity_provider_keeps_the_known_keys() -> None:
    idp = FakeIdp(DEFAULT_JWKS, OSError("connection refused"), b"not json", DEFAULT_JWKS)
    clock = Clock()
    check, cache = verifier(idp, clock, jwks_refresh_ms=1000)
    assert await check.principal(token()) == "User:alice"
    for _ in range(2):
        clock.now += 20.0
        assert await check.principal(token()) == "User:alice"
        assert cache.refreshing is not None
        await cache.refreshing  # it fails
        assert await check.principal(token()) == "User:alice"
    assert idp.calls == 3


async def test_no_keys_at_all_is_keys_unavailable_and_rate_limited() -> None:
    idp = FakeIdp(TimeoutError(), DEFAULT_JWKS)
    clock = Clock()
    check, _ = verifier(idp, clock)
    assert await reason_of(check, token()) is AuthFailure.KEYS_UNAVAILABLE
    assert await reason_of(check, token()) is AuthFailure.KEYS_UNAVAILABLE
    assert idp.calls == 1
    clock.now += 10.0
    assert await check.principal(token()) == "User:alice"


async def test_an_oversized_answer_from_the_fetcher_is_refused() -> None:
    idp = FakeIdp(DEFAULT_JWKS + b" " * (1024 * 1024))
    check, _ = verifier(idp)
    assert await reason_of(check, token()) is AuthFailure.KEYS_UNAVAILABLE


async def test_concurrent_callers_share_one_fetch() -> None:
    idp = FakeIdp(DEFAULT_JWKS)
    idp.gate = asyncio.Event()
    check, _ = verifier(idp)
    waiting = [asyncio.create_task(check.principal(token())) for _ in range(20)]
    await asyncio.sleep(0)
    idp.gate.set()
    assert await asyncio.gather(*waiting) == ["User:alice"] * 20
    assert idp.calls == 1


def test_parse_jwks_keeps_only_public_signing_keys() -> None:
    document = jwks(
        public_jwk(EC_KEY, "sig"),
        public_jwk(RSA_KEY, "enc", use="enc"),
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {**public_jwk(EC_KEY, "private"), "d": "AAAA"},
        public_jwk(EC_KEY, "hs", alg="HS256"),
        {"kty": "EC", "kid": "broken", "crv": "P-256", "x": "AA", "y": "AA"},
        {"kty": "RSA", "kid": "broken-rsa"},
        public_jwk(EC_KEY, 5),
        "not an object",
    )
    assert list(parse_jwks(document)) == ["sig"]


@pytest.mark.parametrize(
    "document",
    [
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'{"keys": {}}',
        b'{"keys": []}',
        jwks(*[public_jwk(EC_KEY, f"k{i}") for i in range(JWKS_KEYS_MAX + 1)]),
        jwks({"kty": "oct", "k": "c2VjcmV0"}),
    ],
)
def test_parse_jwks_refuses_unusable_documents(document) -> None:
    with pytest.raises(ValueError):
        parse_jwks(document)


@pytest.mark.parametrize(
    ("header", "expected"),
    [("Bearer abc.def.ghi", "abc.def.ghi"), ("bearer   abc.def.ghi ", "abc.def.ghi")],
)
def test_bearer_header_is_parsed(header, expected) -> None:
    assert parse_bearer_authorization(header, 8192) == expected


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("Basic abc", AuthFailure.MISSING),
        ("", AuthFailure.MISSING),
        ("Bearer", AuthFailure.MALFORMED),
        ("Bearer a b", AuthFailure.MALFORMED),
        ("Bearer é.a.b", AuthFailure.MALFORMED),
        ("Bearer " + "a" * 9000, AuthFailure.TOO_LARGE),
    ],
)
def test_bad_bearer_headers_are_refused(header, reason) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        parse_bearer_authorization(header, 8192)
    assert info.value.reason is reason


async def test_file_fetcher_reads_a_bounded_file(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(DEFAULT_JWKS)
    fetch = file_fetcher(path)
    assert await fetch(len(DEFAULT_JWKS), 5.0) == DEFAULT_JWKS
    with pytest.raises(ValueError, match="over"):
        await fetch(len(DEFAULT_JWKS) - 1, 5.0)
    config = settings(jwks_url=None, jwks_file=str(path))
    check = BearerVerifier(config, JwksCache(config, fetch))
    assert await check.principal(token("ed-1")) == "User:alice"


async def test_http_fetcher_bounds_status_size_and_time() -> None:
    stall = asyncio.Event()

    async def serve(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name == "jwks":
            return web.Response(body=DEFAULT_JWKS, content_type="application/json")
        if name == "big":  # no Content-Length: the reader must stop on its own
            response = web.StreamResponse()
            await response.prepare(request)
            for _ in range(64):
                await response.write(b" " * 65_536)
            return response
        if name == "slow":
            await stall.wait()
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/{name}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}"
    try:
        assert await http_fetcher(f"{base}/jwks")(1024 * 1024, 5.0) == DEFAULT_JWKS
        with pytest.raises(ValueError, match="404"):
            await http_fetcher(f"{base}/missing")(1024 * 1024, 5.0)
        with pytest.raises(ValueError, match="over"):
            await http_fetcher(f"{base}/big")(1024 * 1024, 5.0)
        with pytest.raises(ValueError, match="over"):
            await http_fetcher(f"{base}/jwks")(100, 5.0)
        with pytest.raises(TimeoutError):
            await http_fetcher(f"{base}/slow")(1024 * 1024, 0.2)
    finally:
        stall.set()
        await runner.cleanup()


async def test_a_short_rsa_key_is_refused() -> None:
    """PyJWT's enforce_minimum_key_length: a 1024-bit RSA key signs nothing we accept."""
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    check, _ = verifier(FakeIdp(jwks(public_jwk(weak, "weak"))))
    with pytest.warns(InsecureKeyLengthWarning):
        text = jwt.encode(claims(), weak, algorithm="RS256", headers={"kid": "weak"})
    assert await reason_of(check, text) is AuthFailure.UNKNOWN_KEY


async def test_an_https_jwks_url_is_verified_against_jwks_ca_file(tmp_path: Path) -> None:
    """fetcher_for: the URL's server certificate must chain to jwks_ca_file."""
    make_local_certificates(tmp_path, nodes=["idp"])
    make_local_certificates(tmp_path / "other", nodes=[])
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(tmp_path / "idp.pem", tmp_path / "idp-key.pem")

    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=DEFAULT_JWKS, content_type="application/json")

    app = web.Application()
    app.router.add_get("/jwks", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_ssl).start()
    url = f"https://localhost:{port}/jwks"
    try:
        config = settings(jwks_url=url, jwks_ca_file=str(tmp_path / "ca.pem"))
        check = BearerVerifier(config, JwksCache(config, fetcher_for(config)))
        assert await check.principal(token()) == "User:alice"
        # another CA: the fetch fails, so there are no keys at all
        other = settings(jwks_url=url, jwks_ca_file=str(tmp_path / "other" / "ca.pem"))
        refused = BearerVerifier(other, JwksCache(other, fetcher_for(other)))
        assert await reason_of(refused, token()) is AuthFailure.KEYS_UNAVAILABLE
    finally:
        await runner.cleanup()


def test_fetcher_for_picks_the_source_and_checks_the_ca_file(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("junk")
    with pytest.raises(InvalidConfigError, match="jwks_ca_file"):
        fetcher_for(settings(jwks_ca_file=str(tmp_path / "junk.pem")))
    assert fetcher_for(settings(jwks_url=None, jwks_file=str(tmp_path / "jwks.json")))


# Hostile input: whatever arrives in a header, the answer is AuthenticationFailed
# (a 401 later), never another exception (a 500).
@settings_hypothesis(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.binary(max_size=300).map(lambda b: b.decode("utf-8", "surrogateescape")),
    )
)
def test_any_authorization_header_is_parsed_or_refused(header: str) -> None:
    for parse in (
        lambda: parse_bearer_authorization(header, 8192),
        lambda: parse_bearer_authorization("Bearer " + header, 8192),
    ):
        with contextlib.suppress(AuthenticationFailed):
            parse()


jwt_like = st.lists(
    st.one_of(
        st.text(
            alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=",
            max_size=60,
        ),
        st.sampled_from(["e30", "eyJhbGciOiJFUzI1NiJ9", "eyJhbGciOiJub25lIn0", "bnVsbA", "W10"]),
    ),
    min_size=1,
    max_size=6,
).map(".".join)


@settings_hypothesis(max_examples=300, deadline=None)
@given(st.one_of(jwt_like, st.text(max_size=200)))
async def test_any_token_is_refused_with_a_stable_reason(text: str) -> None:
    check, _ = verifier()
    with pytest.raises(AuthenticationFailed) as info:
        await check.principal(text)
    assert info.value.reason in set(AuthFailure)


async def test_a_fetcher_that_ignores_its_timeout_is_held_to_it() -> None:
    never = asyncio.Event()

    async def hang(max_bytes: int, timeout_s: float) -> bytes:
        await never.wait()
        return DEFAULT_JWKS

    config = settings(jwks_fetch_timeout_ms=100)
    check = BearerVerifier(config, JwksCache(config, hang))
    assert await reason_of(check, token()) is AuthFailure.KEYS_UNAVAILABLE


# -- the verified-token cache ---------------------------------------------------------


class WallClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def cached_verifier(idp: FakeIdp, wall: WallClock, clock: Clock | None = None, **changes):
    config = settings(**changes)
    cache = JwksCache(config, idp, clock or Clock())
    return BearerVerifier(config, cache, wall), cache


async def test_a_verified_token_is_not_checked_again_until_it_expires() -> None:
    wall = WallClock()
    check, _ = cached_verifier(FakeIdp(DEFAULT_JWKS), wall)
    text = token(exp=int(wall.now) + 60)
    for _ in range(5):
        assert await check.principal(text) == "User:alice"
    assert check.checks == 1
    # Within the clock skew past exp the token still counts (as the check
    # itself would allow); past it the cache lets go and the token is
    # checked in full again (PyJWT reads the real clock: here it passes).
    wall.now += 60 + 29
    assert await check.principal(text) == "User:alice"
    assert check.checks == 1
    wall.now += 2
    assert await check.principal(text) == "User:alice"
    assert check.checks == 2


async def test_a_changed_key_set_forgets_the_verified_tokens() -> None:
    rotated = jwks(public_jwk(OTHER_EC_KEY, "ec-2"))
    idp = FakeIdp(DEFAULT_JWKS, rotated)
    clock = Clock()
    wall = WallClock()
    check, cache = cached_verifier(idp, wall, clock)
    text = token()
    assert await check.principal(text) == "User:alice"
    assert await check.principal(text) == "User:alice"
    assert check.checks == 1
    # The provider drops ec-1: a token it signed is no longer taken.
    clock.now += 10
    await cache.refresh()
    with pytest.raises(AuthenticationFailed) as refused:
        await check.principal(text)
    assert refused.value.reason is AuthFailure.UNKNOWN_KEY
    # The same keys fetched again change nothing.
    other = token("ec-2", key=OTHER_EC_KEY, alg="ES256")
    assert await check.principal(other) == "User:alice"
    clock.now += 10
    await cache.refresh()
    assert await check.principal(other) == "User:alice"
    assert check.checks == 3


async def test_refusals_are_never_cached_and_the_cache_is_bounded() -> None:
    wall = WallClock()
    check, _ = cached_verifier(FakeIdp(DEFAULT_JWKS), wall, verified_tokens_cached_max=3)
    bad = token(aud="someone-else")
    for _ in range(3):
        with pytest.raises(AuthenticationFailed):
            await check.principal(bad)
    assert check.checks == 3 and not check._verified
    for n in range(10):
        await check.principal(token(sub=f"user-{n}"))
    assert len(check._verified) == 3
    assert all(len(key) == 32 for key in check._verified)  # keyed hashes, not tokens


async def test_a_cache_of_zero_checks_every_time() -> None:
    check, _ = cached_verifier(FakeIdp(DEFAULT_JWKS), WallClock(), verified_tokens_cached_max=0)
    text = token()
    for _ in range(3):
        await check.principal(text)
    assert check.checks == 3


@pytest.mark.parametrize(
    ("make", "principal"),
    [
        (lambda: token(exp=now() - 120), "User:alice"),
        (lambda: token(aud="someone-else"), "User:alice"),
        (lambda: token(iss="https://evil.example", sub="bob"), "User:bob"),
        (lambda: token(nbf=now() + 120), "User:alice"),
        # The signature does not hold: whom it names is the caller's say-so.
        (lambda: token("ec-1", key=OTHER_EC_KEY), None),
        (lambda: token("ec-1", key=OTHER_EC_KEY, exp=now() - 120), None),
        (lambda: unsigned({"alg": "none", "kid": "ec-1"}, claims()), None),
    ],
)
async def test_a_refusal_names_the_principal_only_of_a_correctly_signed_token(
    make, principal
) -> None:
    check, _ = verifier()
    with pytest.raises(AuthenticationFailed) as refused:
        await check.principal(make())
    assert refused.value.principal == principal
