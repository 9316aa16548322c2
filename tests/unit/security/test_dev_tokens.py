"""The local dev token issuer: its JWKS and tokens are what the bearer verifier accepts."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from lograft import typed
from lograft.errors import InvalidConfigError
from lograft.security.dev_tokens import DEV_AUDIENCE, DEV_ISSUER, DevIssuer
from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.tokens import BearerSettings, BearerVerifier, JwksCache, fetcher_for


def verifier(jwks_file: Path) -> BearerVerifier:
    config = typed.build(
        {"issuer": DEV_ISSUER, "audience": DEV_AUDIENCE, "jwks_file": str(jwks_file)},
        BearerSettings,
        error=InvalidConfigError,
    )
    return BearerVerifier(config, JwksCache(config, fetcher_for(config)))


async def test_minted_tokens_verify_and_the_key_is_kept(tmp_path: Path) -> None:
    issuer = DevIssuer.create_or_load(tmp_path)
    assert stat.S_IMODE((tmp_path / "issuer-key.pem").stat().st_mode) == 0o600
    token = issuer.mint("alice", lifetime_s=60)
    check = verifier(issuer.jwks_file)
    assert await check.principal(token) == "User:alice"
    # Loaded again: the same key and kid, so earlier tokens stay valid.
    again = DevIssuer.create_or_load(tmp_path)
    assert again.kid == issuer.kid
    assert json.loads(again.jwks_file.read_text())["keys"][0]["kid"] == issuer.kid
    assert await verifier(again.jwks_file).principal(again.mint("admin")) == "User:admin"
    assert await verifier(again.jwks_file).principal(token) == "User:alice"


async def test_another_issuers_tokens_are_refused(tmp_path: Path) -> None:
    mine = DevIssuer.create_or_load(tmp_path / "a")
    other = DevIssuer.create_or_load(tmp_path / "b")
    with pytest.raises(AuthenticationFailed) as refused:
        await verifier(mine.jwks_file).principal(other.mint("admin"))
    assert refused.value.reason in (AuthFailure.UNKNOWN_KEY, AuthFailure.BAD_SIGNATURE)
    with pytest.raises(ValueError):
        mine.mint("", lifetime_s=60)
