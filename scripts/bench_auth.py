"""What authentication costs a request: bearer-token checks and password checks.

    python scripts/bench_auth.py

prints the time per token of `BearerVerifier.principal` (RS256, ES256,
EdDSA; keys cached, as in steady state; each token checked in full, and
the same token again from the verified-token cache), per `check_password` call
(SCRAM-SHA-512, 4096 iterations), and per HTTP Basic check of the node
(`PasswordChecks.principal`, lograft/api/password_checks.py) with its
verified cache (a Basic client's steady state) and without it. No network:
the JWKS comes from memory.
"""

from __future__ import annotations

import asyncio
import json
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from lograft.api.password_checks import PasswordChecks
from lograft.security.passwords import BasicCredentials, check_password, make_credential
from lograft.security.tokens import BearerSettings, BearerVerifier, JwksCache

TOKENS = 2000
PASSWORDS = 50


async def bench_tokens() -> None:
    keys = {
        "rsa": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
        "ec": (ec.generate_private_key(ec.SECP256R1()), "ES256"),
        "ed": (ed25519.Ed25519PrivateKey.generate(), "EdDSA"),
    }
    jwks = []
    for kid, (key, alg) in keys.items():
        algorithm = jwt.get_algorithm_by_name(alg)
        jwks.append({**algorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid})
    document = json.dumps({"keys": jwks}).encode()

    async def fetch(max_bytes: int, timeout_s: float) -> bytes:
        return document

    for cached in (0, 4096):
        settings = BearerSettings(
            issuer="https://idp",
            audience="lograft",
            jwks_url="https://idp/j",
            verified_tokens_cached_max=cached,
        )
        verifier = BearerVerifier(settings, JwksCache(settings, fetch))
        for kid, (key, alg) in keys.items():
            claims = {"iss": "https://idp", "aud": "lograft", "sub": "alice"}
            claims["exp"] = int(time.time()) + 600
            token = jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})
            await verifier.principal(token)
            start = time.perf_counter()
            for _ in range(TOKENS):
                await verifier.principal(token)
            spent = (time.perf_counter() - start) / TOKENS * 1e6
            print(f"{alg}, verified_tokens_cached_max={cached}: {spent:.0f} us per token")


def bench_passwords() -> None:
    credential = make_credential("alice", "correct horse")
    start = time.perf_counter()
    for _ in range(PASSWORDS):
        check_password(credential, "correct horse")
    spent = (time.perf_counter() - start) / PASSWORDS * 1e3
    print(
        f"check_password {credential.mechanism} {credential.iterations} iterations: {spent:.1f} ms"
    )


async def bench_password_cache() -> None:
    credential = make_credential("alice", "correct horse")
    users = {"alice": {credential.mechanism: credential}}
    basic = BasicCredentials("alice", "correct horse")
    for entries, rounds in ((4096, TOKENS), (0, PASSWORDS)):
        checks = PasswordChecks(lambda: users, inflight_max=4, cache_entries_max=entries)
        await checks.principal(basic)
        start = time.perf_counter()
        for _ in range(rounds):
            await checks.principal(basic)
        spent = (time.perf_counter() - start) / rounds * 1e6
        print(f"Basic check, cache_entries_max={entries}: {spent:.0f} us per request")


if __name__ == "__main__":
    asyncio.run(bench_tokens())
    bench_passwords()
    asyncio.run(bench_password_cache())
