"""A tiny synchronous HTTP client for the lograft API (the CLI's transport).

Standard library only (`urllib.request`), JSON in and out (orjson).

Failover: requests go to the bootstrap URLs in order, starting with the last
one that answered. A node that cannot be reached is skipped; when none can be,
`ClusterUnreachableError` names every URL tried and why. What counts as
"unreachable" depends on whether repeating the request is safe:

- the connection failed (refused, DNS, no route): the request never reached
  the node, so any request moves on to the next URL;
- the connection broke or timed out *after* the request was sent: a `GET` moves
  on, anything else raises `OutcomeUnknownError` (a produce may have been
  appended; sending it again could write it twice).

Error bodies (`{"error": {"code", "message", "retriable", "details"}}`) are
decoded into the `lograft.errors` class for the code (`LograftError.from_dict`),
with `details` and the HTTP status kept; a code this version does not know
still keeps its text (a subclass is made for it). The client-side errors
(`ClusterUnreachableError`, `OutcomeUnknownError`, `UnexpectedResponseError`)
are `lograft.client.errors`', the same classes the Python client raises.
"""

from __future__ import annotations

import http.client
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from lograft.client.errors import (
    ClusterUnreachableError,
    OutcomeUnknownError,
    UnexpectedResponseError,
)
from lograft.errors import LograftError

BOOTSTRAP_ENV = "LOGRAFT_BOOTSTRAP"
BOOTSTRAP_DEFAULT = "http://127.0.0.1:9091"
# One request (connect + answer) may take this long, ms; long-polls add their wait.
REQUEST_TIMEOUT_MS_DEFAULT = 30_000
# Largest response body read, bytes (a fetch is bounded by the server's limits).
RESPONSE_BYTES_MAX = 64 * 1024 * 1024
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any  # decoded JSON, or bytes when the answer is not JSON (None if empty)
    url: str  # the base URL that answered
    headers: Mapping[str, str]


def parse_bootstrap(text: str) -> list[str]:
    """`host:port,http://host:port/` -> ['http://host:port', ...]; ValueError if bad."""
    urls: list[str] = []
    for part in text.split(","):
        item = part.strip().rstrip("/")
        if not item:
            continue
        if "://" not in item:
            item = f"http://{item}"
        parsed = urllib.parse.urlsplit(item)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"{part.strip()!r} is not an http(s)://host:port URL")
        try:
            parsed.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            raise ValueError(f"{part.strip()!r} has a bad port") from None
        if item not in urls:
            urls.append(item)
    if not urls:
        raise ValueError("no URL given")
    return urls


def default_bootstrap() -> str:
    return os.environ.get(BOOTSTRAP_ENV) or BOOTSTRAP_DEFAULT


def decode_error(status: int, body: Any, url: str) -> LograftError:
    """The typed error for an error answer, with `status` and `url` attached."""
    try:
        exc = LograftError.from_dict(body.get("error") if isinstance(body, dict) else None)
    except ValueError:
        text = body.decode(errors="replace")[:200] if isinstance(body, bytes) else repr(body)[:200]
        exc = UnexpectedResponseError(f"{url} answered HTTP {status}: {text}")
    exc.status = status  # type: ignore[attr-defined]
    exc.url = url  # type: ignore[attr-defined]
    return exc


class _Unreachable(Exception):
    """Internal: this URL could not be used; try the next one."""


class HttpClient:
    def __init__(
        self, bootstrap: Sequence[str], *, timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    ) -> None:
        if not bootstrap:
            raise ValueError("at least one bootstrap URL is needed")
        self.bootstrap = list(bootstrap)
        self.timeout_ms = timeout_ms
        self._preferred = 0

    # -- high level: JSON calls that raise on error answers ---------------------------

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json: Any = None,
        base: str | None = None,
        extra_timeout_ms: int = 0,
    ) -> Any:
        """The decoded JSON answer; a typed LograftError for any error answer."""
        reply = self.send(
            method, path, query=query, json=json, base=base, extra_timeout_ms=extra_timeout_ms
        )
        if reply.status >= 400:
            raise decode_error(reply.status, reply.body, reply.url)
        return reply.body

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.call("GET", path, **kwargs)

    # -- low level: one request with failover, any status returned ---------------------

    def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json: Any = None,
        base: str | None = None,
        extra_timeout_ms: int = 0,
        accept: str = JSON,
    ) -> Reply:
        """Send to `base`, or to the bootstrap URLs in turn; raise only if none answers."""
        data = None if json is None else orjson.dumps(json)
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        timeout_s = (self.timeout_ms + extra_timeout_ms) / 1000
        tried: list[str] = []
        for url in [base] if base is not None else self._order():
            try:
                reply = self._once(method, url, target, data, timeout_s, accept)
            except _Unreachable as exc:
                tried.append(f"{url} ({exc})")
                continue
            if base is None:
                self._preferred = self.bootstrap.index(url)
            return reply
        raise ClusterUnreachableError(
            "could not reach "
            + ("the node at " if base is not None else "any lograft node; tried ")
            + ", ".join(tried),
            tried=[t.split(" ", 1)[0] for t in tried],
        )

    def _order(self) -> list[str]:
        i = self._preferred
        return self.bootstrap[i:] + self.bootstrap[:i]

    def _once(
        self,
        method: str,
        base: str,
        target: str,
        data: bytes | None,
        timeout_s: float,
        accept: str,
    ) -> Reply:
        req = urllib.request.Request(base + target, data=data, method=method)
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", JSON)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return _reply(resp.status, resp, base)
        except urllib.error.HTTPError as exc:
            with exc:
                return _reply(exc.code, exc, base)
        except urllib.error.URLError as exc:
            # Raised while connecting or sending: the node never took the request.
            raise _Unreachable(_reason(exc.reason)) from None
        except (OSError, http.client.HTTPException) as exc:
            # The request went out; the answer did not come back.
            if method == "GET":
                raise _Unreachable(_reason(exc)) from None
            raise OutcomeUnknownError(
                f"{method} {base}{target.split('?')[0]} was sent but no answer came back "
                f"({_reason(exc)}); it may or may not have taken effect"
            ) from None


def _reply(status: int, resp: Any, base: str) -> Reply:
    raw = resp.read(RESPONSE_BYTES_MAX + 1)
    if len(raw) > RESPONSE_BYTES_MAX:
        raise UnexpectedResponseError(f"{base} answered more than {RESPONSE_BYTES_MAX} bytes")
    headers = {k.lower(): v for k, v in resp.headers.items()}
    body: Any = None
    if raw:
        body = raw
        if headers.get("content-type", "").startswith(JSON):
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise UnexpectedResponseError(
                    f"{base} answered HTTP {status} with bad JSON"
                ) from None
    return Reply(status, body, base, headers)


def _reason(exc: BaseException | str) -> str:
    if isinstance(exc, str):
        return exc
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror}"
    return str(exc) or type(exc).__name__


__all__ = [
    "BOOTSTRAP_DEFAULT",
    "BOOTSTRAP_ENV",
    "HttpClient",
    "Reply",
    "decode_error",
    "default_bootstrap",
    "parse_bootstrap",
]
