"""Who the client says it is, and how it checks the nodes: credentials and TLS.

A node with `[security]` authentication on wants one of (docs/api.md,
"Authentication"):

- a bearer token (an OAuth 2.0 / OIDC JWT): `bearer_token`, a string, or
  `bearer_token_file`, a file the client reads again whenever it changes
  (checked before every request: one `stat`), so a sidecar that rotates an
  expiring token keeps the client working without a restart;
- a user name and password (HTTP Basic, RFC 7617; only over https);
- a client certificate (`ssl_certfile` + `ssl_keyfile`), shown in the TLS
  handshake to a node that asks for one.

`Credentials` builds the `Authorization` header of each request. A token or
password never appears in a repr, a log line or an exception message: the
repr names only the kind, and errors about a token file name the file.

`tls_context` is the `ssl.SSLContext` https requests use: the standard
library's defaults (certificate and host name verified, TLS 1.2 at least)
with `ssl_cafile` as the trust store (else the system's), and the client
certificate when one is set.
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from lograft.errors import InvalidConfigError

__all__ = ["TOKEN_FILE_BYTES_MAX", "Credentials", "tls_context"]

# Largest bearer token file read, bytes: a JWT is a few KiB; anything this
# large is not a token (and is not sent in every request).
TOKEN_FILE_BYTES_MAX = 64 * 1024
# What a bearer token may hold (RFC 6750 b64token): no spaces, no CR/LF that
# would split a header.
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")


def check_token(token: str, setting: str) -> str:
    """`token` as sent, or InvalidConfigError naming the setting (never the token)."""
    token = token.strip()
    if not token:
        raise InvalidConfigError(f"{setting} is empty", setting=setting)
    if not set(token) <= _TOKEN_CHARS:
        raise InvalidConfigError(
            f"{setting} holds characters a bearer token cannot (letters, digits and -._~+/= only)",
            setting=setting,
        )
    return token


@dataclass(eq=False)
class _TokenFile:
    path: Path
    # (device, inode, size, mtime) of the file last read, and its token.
    _seen: tuple[int, int, int, int] | None = None
    _token: str = field(default="", repr=False)

    def token(self) -> str:
        """The file's token, read again when the file changed since the last read."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if self._token:
                return self._token  # replaced (rename) this moment: keep the last one
            raise self._error(f"cannot be read ({exc.strerror})") from None
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == self._seen:
            return self._token
        if st.st_size > TOKEN_FILE_BYTES_MAX:
            raise self._error(f"is {st.st_size} bytes, more than {TOKEN_FILE_BYTES_MAX}")
        try:
            text = self.path.read_bytes()[:TOKEN_FILE_BYTES_MAX].decode("ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise self._error(f"cannot be read as an ASCII token ({type(exc).__name__})") from None
        if not text and self._token:
            return self._token  # being rewritten: the next request reads it again
        self._token = check_token(text, f"bearer_token_file {str(self.path)!r}")
        self._seen = seen
        return self._token

    def _error(self, what: str) -> InvalidConfigError:
        return InvalidConfigError(
            f"bearer_token_file {str(self.path)!r} {what}", setting="bearer_token_file"
        )


class Credentials:
    """One way in (or none): the `Authorization` header each request carries."""

    __slots__ = ("_basic", "_file", "_token", "kind")

    def __init__(
        self,
        *,
        bearer_token: str | None = None,
        bearer_token_file: str | os.PathLike[str] | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        """At most one way: a token, a token file, or a user name with its password."""
        ways = [
            name
            for name, given in (
                ("bearer_token", bearer_token is not None),
                ("bearer_token_file", bearer_token_file is not None),
                ("username", username is not None or password is not None),
            )
            if given
        ]
        if len(ways) > 1:
            raise InvalidConfigError(
                f"{' and '.join(ways)} are two ways in: give one", setting=ways[1]
            )
        self._token = (
            check_token(bearer_token, "bearer_token") if bearer_token is not None else None
        )
        self._file = _TokenFile(Path(bearer_token_file)) if bearer_token_file is not None else None
        self._basic: str | None = None
        if username is not None or password is not None:
            self._basic = _basic(username, password)
        self.kind = "bearer" if ways and ways[0] != "username" else ("basic" if ways else "none")

    def authorization(self) -> str | None:
        """The `Authorization` header's value now (None: send none)."""
        if self._token is not None:
            return f"Bearer {self._token}"
        if self._file is not None:
            return f"Bearer {self._file.token()}"
        return self._basic

    def __bool__(self) -> bool:
        return self.kind != "none"

    def __repr__(self) -> str:
        return f"Credentials({self.kind})"


def _basic(username: str | None, password: str | None) -> str:
    if not isinstance(username, str) or not username:
        raise InvalidConfigError("a password needs a username", setting="username")
    if not isinstance(password, str):
        raise InvalidConfigError("username needs a password (a string)", setting="password")
    if ":" in username or any(ch < " " or ch == "\x7f" for ch in username):
        raise InvalidConfigError(
            "username may not hold ':' or control characters (RFC 7617)", setting="username"
        )
    if any(ch < " " or ch == "\x7f" for ch in password):
        raise InvalidConfigError("password may not hold control characters", setting="password")
    pair = f"{username}:{password}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def tls_context(
    cafile: str | os.PathLike[str] | None = None,
    certfile: str | os.PathLike[str] | None = None,
    keyfile: str | os.PathLike[str] | None = None,
) -> ssl.SSLContext:
    """The context of https requests: nodes verified against `cafile` (None:
    the system's trust store), the client certificate shown when given."""
    if keyfile is not None and certfile is None:
        raise InvalidConfigError("ssl_keyfile needs ssl_certfile", setting="ssl_keyfile")
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(
            f"ssl_cafile {str(cafile)!r} is not a readable PEM bundle: {exc}", setting="ssl_cafile"
        ) from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigError(
                f"ssl_certfile {str(certfile)!r} / ssl_keyfile {str(keyfile)!r}: cannot load "
                f"(not PEM, an encrypted key, or a key that does not match): {exc}",
                setting="ssl_certfile",
            ) from None
    return context
