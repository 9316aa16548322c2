"""The password that guards a node's Raft links, taken from its config.

pysyncobj unpickles every frame that reaches a Raft connection. With a
password, each frame must first pass Fernet authentication (HMAC-SHA256), so a
stranger's frame is dropped before anything is unpickled; without one, anyone
who reaches the port runs code on the node. A node therefore never runs Raft
without a password:

- `[raft] password`, when set, is used as is;
- otherwise the password is derived from `cluster_secret` with HKDF-SHA256
  (salt: the cluster id; info: `RAFT_PASSWORD_INFO`). The secret itself also
  authenticates the internal HTTP endpoints; deriving keeps the two keys
  separate, so one never reveals the other;
- with neither, or with one shorter than `SECRET_CHARS_MIN`, the node refuses
  to start (an `InvalidConfigError` naming the setting to set).
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from lograft.errors import InvalidConfigError
from lograft.node.config import NodeConfig

# Versioned: a change of derivation must change this label.
RAFT_PASSWORD_INFO = b"lograft raft password v1"
# Shortest cluster_secret or [raft] password accepted, characters. The
# recommended `openssl rand -hex 16` gives 32.
SECRET_CHARS_MIN = 16
_DERIVED_KEY_BYTES = 32
_HOW_TO_SET = (
    f"set cluster_secret (or LOGRAFT_CFG_CLUSTER_SECRET) to the same random string of at "
    f"least {SECRET_CHARS_MIN} characters on every node, e.g. `openssl rand -hex 16`"
)


def derive_raft_password(cluster_secret: str, cluster_id: str) -> str:
    """The Raft password of a cluster: HKDF-SHA256 of its secret, URL-safe base64."""
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=_DERIVED_KEY_BYTES,
        salt=cluster_id.encode(),
        info=RAFT_PASSWORD_INFO,
    )
    return base64.urlsafe_b64encode(hkdf.derive(cluster_secret.encode())).decode("ascii")


def raft_password_for(config: NodeConfig) -> str:
    """`[raft] password`, else one derived from `cluster_secret`; raise if neither is usable."""
    if config.raft.password:
        if len(config.raft.password) < SECRET_CHARS_MIN:
            raise InvalidConfigError(
                f"raft.password is shorter than {SECRET_CHARS_MIN} characters: use a random "
                "string (e.g. `openssl rand -hex 16`), or remove it to derive the Raft "
                "password from cluster_secret",
                key="raft.password",
            )
        return config.raft.password
    if not config.cluster_secret:
        raise InvalidConfigError(
            "cluster_secret is not set, and without it or a [raft] password the Raft port "
            f"would run code sent by anyone who reaches it: {_HOW_TO_SET}",
            key="cluster_secret",
        )
    if len(config.cluster_secret) < SECRET_CHARS_MIN:
        raise InvalidConfigError(
            f"cluster_secret is shorter than {SECRET_CHARS_MIN} characters: {_HOW_TO_SET}",
            key="cluster_secret",
        )
    return derive_raft_password(config.cluster_secret, config.cluster_id)
