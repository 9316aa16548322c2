"""A local token issuer for development clusters: an EC signing key, its JWKS,
and bearer tokens (JWTs) signed with it, made with PyJWT and `cryptography`.

`scripts/cluster.sh start --secure` uses it to stand in for an OAuth 2.0 /
OIDC identity provider: the nodes' `[security.bearer]` reads `jwks.json`
(`jwks_file`), and `scripts/cluster.sh token <user>` mints a token for
`User:<user>` that those nodes accept (lograft/security/tokens.py verifies).

    issuer = DevIssuer.create_or_load(Path("data/cluster-secure/issuer"))
    token = issuer.mint("alice", lifetime_s=3600)

The key is ECDSA P-256, the tokens ES256 with the key's RFC 7638 thumbprint as
`kid`, claims `iss`, `aud`, `sub`, `iat`, `nbf`, `exp`. The key sits
unencrypted on disk (mode 0600): whoever reads it can mint any identity, the
admin's included. Production clusters use their identity provider's JWKS
(`jwks_url`), never this.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

__all__ = [
    "DEV_AUDIENCE",
    "DEV_ISSUER",
    "TOKEN_LIFETIME_S",
    "DevIssuer",
]

# The issuer and audience the local cluster's [security.bearer] expects.
DEV_ISSUER = "https://lograft.local/dev-issuer"
DEV_AUDIENCE = "lograft"
# Default lifetime of a minted token, seconds (24 h).
TOKEN_LIFETIME_S = 24 * 3600
KEY_FILE = "issuer-key.pem"
JWKS_FILE = "jwks.json"
ALGORITHM = "ES256"


@dataclass(frozen=True)
class DevIssuer:
    key: ec.EllipticCurvePrivateKey
    kid: str
    jwks_file: Path
    issuer: str = DEV_ISSUER
    audience: str = DEV_AUDIENCE

    @classmethod
    def create_or_load(
        cls, directory: Path, *, issuer: str = DEV_ISSUER, audience: str = DEV_AUDIENCE
    ) -> DevIssuer:
        """The issuer whose key is `directory/issuer-key.pem` (made, with
        `jwks.json`, when absent: tokens minted before stay valid)."""
        directory.mkdir(parents=True, exist_ok=True)
        key_file, jwks_file = directory / KEY_FILE, directory / JWKS_FILE
        if key_file.exists():
            loaded = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
            if not isinstance(loaded, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_file} is not an EC private key")
            key = loaded
        else:
            key = ec.generate_private_key(ec.SECP256R1())
            _write_private(key_file, key)
        jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
        kid = _thumbprint(jwk)
        jwk.update(kid=kid, use="sig", alg=ALGORITHM)
        # Written every time: always the key's own, even if someone edited it.
        jwks_file.write_text(json.dumps({"keys": [jwk]}, indent=2) + "\n")
        return cls(key, kid, jwks_file, issuer, audience)

    def mint(self, user: str, *, lifetime_s: int = TOKEN_LIFETIME_S) -> str:
        """A token for `User:<user>` (its `sub`), valid from now for `lifetime_s`."""
        if not user or lifetime_s <= 0:
            raise ValueError("a token needs a user and a positive lifetime")
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": user,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime_s,
        }
        return jwt.encode(claims, self.key, algorithm=ALGORITHM, headers={"kid": self.kid})


def _thumbprint(jwk: dict[str, str]) -> str:
    """RFC 7638: the SHA-256 of the key's required members, base64url."""
    canonical = json.dumps(
        {name: jwk[name] for name in ("crv", "kty", "x", "y")}, separators=(",", ":")
    )
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # 0600 from the start: never readable by others, even briefly.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)
