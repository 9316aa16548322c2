"""HTTP transport of the client: one aiohttp session, typed failures.

`Transport` is the seam between the client and the network: producers and
consumers only call `request`, so tests wrap it to count requests or inject
faults, and another transport (HTTP/2, a proxy) can replace it.

Invariants:
- `request` returns every answer the server gives (any status) as an
  `HttpResponse`; it raises `NetworkError`, whose `details["sent"]` says
  whether the request may have reached the server (False: the connection was
  never made; True: it broke or timed out after sending, so the outcome of a
  write is unknown), and `UnexpectedResponseError` for a body longer than
  the caller's `body_max_bytes` (default: the transport's
  `response_max_bytes`). A body is read as it arrives and refused as soon
  as it passes the bound (a declared Content-Length over it before reading
  anything), so a node cannot make the client hold more than the bound.
- Every request carries `X-Lograft-Client-Id` (the client's `client_id`) and,
  with credentials, the `Authorization` of that moment (a token file is read
  again when it changed); https requests use the TLS context given.
- The aiohttp session is created lazily inside the running event loop on the
  first request, so a transport may be constructed in any thread.
- Raw-batch exchanges (a request whose Content-Type or Accept is
  `application/vnd.lograft.batch`: produce batches and fetches, most of a
  client's requests) go over kept connections (kept_connections.py), which
  hold the same invariants for about a third of aiohttp's CPU per exchange;
  every other request goes through aiohttp.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson

from lograft.client.credentials import Credentials
from lograft.client.errors import NetworkError, UnexpectedResponseError, error_from_response
from lograft.client.kept_connections import KeptConnections
from lograft.errors import LograftError

BATCH_CONTENT_TYPE = "application/vnd.lograft.batch"
NEXT_OFFSET_HEADER = "X-Lograft-Next-Offset"
HIGH_WATERMARK_HEADER = "X-Lograft-High-Watermark"
LOG_START_OFFSET_HEADER = "X-Lograft-Log-Start-Offset"
# Kafka's client.id in HTTP form (lograft/api/caller.py CLIENT_ID_HEADER):
# names the client in the node's quotas and logs.
CLIENT_ID_HEADER = "X-Lograft-Client-Id"

# Default bound of an answer's body, bytes (CommonConfig.response_max_bytes).
RESPONSE_MAX_BYTES = 16 * 1024 * 1024

# Connection failures that prove the request was never sent.
_NOT_SENT: tuple[type[BaseException], ...] = (aiohttp.ClientConnectorError,)
if hasattr(aiohttp, "ConnectionTimeoutError"):  # aiohttp >= 3.10
    _NOT_SENT = (*_NOT_SENT, aiohttp.ConnectionTimeoutError)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    headers: Mapping[str, str]
    url: str

    @property
    def ok(self) -> bool:
        return self.status < 400

    def error(self) -> LograftError:
        """The typed error of a failed answer (status >= 400)."""
        return error_from_response(self.status, self.body, self.url)

    def json(self) -> Any:
        """The body as JSON; a non-JSON body is UnexpectedResponseError."""
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            raise UnexpectedResponseError(
                f"{self.url} answered HTTP {self.status} with a body that is not JSON: "
                f"{self.body[:200]!r}",
                url=self.url,
                http_status=self.status,
            ) from None

    def ok_json(self) -> Any:
        """The JSON body of a successful answer, else the typed error raised."""
        if not self.ok:
            raise self.error()
        return self.json()


class Transport(Protocol):
    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_ms: int,
        body_max_bytes: int | None = None,
    ) -> HttpResponse: ...

    async def close(self) -> None: ...


class HttpTransport:
    """The aiohttp transport. One instance per client; bound to the loop of its
    first request."""

    def __init__(
        self,
        *,
        connect_timeout_ms: int = 10_000,
        connections_max: int = 100,
        client_id: str = "lograft-python",
        response_max_bytes: int = RESPONSE_MAX_BYTES,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`credentials`: the Authorization of every request (None: none);
        `tls`: the context of https requests (None: the system's defaults)."""
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._credentials = credentials if credentials else None
        self._tls = tls
        self._client_id = client_id
        self._response_max_bytes = response_max_bytes
        self._connections_max = connections_max
        self._user_agent = f"{client_id} (lograft.client)"
        self._session: aiohttp.ClientSession | None = None
        self._kept: KeptConnections | None = None
        self._closed = False

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise NetworkError("the transport is closed", sent=False)
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._connections_max, ssl=self._tls if self._tls is not None else True
                ),
                headers={"User-Agent": self._user_agent, CLIENT_ID_HEADER: self._client_id},
                # Bodies are bytes we build or parse ourselves.
                auto_decompress=False,
            )
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_ms: int,
        body_max_bytes: int | None = None,
    ) -> HttpResponse:
        """One exchange; the answer's body may be at most `body_max_bytes`
        (None: `response_max_bytes`)."""
        limit = self._response_max_bytes if body_max_bytes is None else body_max_bytes
        if headers is not None and (
            headers.get("Content-Type") == BATCH_CONTENT_TYPE
            or headers.get("Accept") == BATCH_CONTENT_TYPE
        ):
            return await self._kept_request(method, url, params, data, headers, timeout_ms, limit)
        session = self._get_session()
        if self._credentials is not None:
            authorization = self._credentials.authorization()
            if authorization is not None:
                headers = {**(headers or {}), "Authorization": authorization}
        timeout = aiohttp.ClientTimeout(
            total=timeout_ms / 1000, sock_connect=min(self._connect_timeout_s, timeout_ms / 1000)
        )
        try:
            async with session.request(
                method,
                url,
                params=params,
                data=data,
                headers=headers,
                timeout=timeout,
                # Nodes never redirect; following one would take the
                # Authorization header somewhere else.
                allow_redirects=False,
            ) as resp:
                body = await _read_body(resp, limit, url)
                return HttpResponse(resp.status, body, resp.headers, url)
        except _NOT_SENT as exc:
            raise NetworkError(f"could not connect to {url}: {exc}", url=url, sent=False) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            # str, never repr: an aiohttp error's repr holds the request's
            # headers (RequestInfo), the Authorization among them.
            what = "timed out" if isinstance(exc, TimeoutError) else f"failed: {_describe(exc)}"
            raise NetworkError(f"{method} {url} {what}", url=url, sent=True) from exc

    async def _kept_request(
        self,
        method: str,
        url: str,
        params: Mapping[str, str] | None,
        data: bytes | None,
        headers: Mapping[str, str],
        timeout_ms: int,
        limit: int,
    ) -> HttpResponse:
        """A raw-batch exchange over a kept connection."""
        if self._closed:
            raise NetworkError("the transport is closed", sent=False)
        kept = self._kept
        if kept is None:
            fixed = _header_lines(
                {"User-Agent": self._user_agent, CLIENT_ID_HEADER: self._client_id}
            )
            kept = self._kept = KeptConnections(
                connections_max=self._connections_max,
                connect_timeout_s=self._connect_timeout_s,
                tls=self._tls,
                fixed_headers=fixed,
            )
        if self._credentials is not None:
            authorization = self._credentials.authorization()
            if authorization is not None:
                headers = {**headers, "Authorization": authorization}
        answer = await kept.request(
            method,
            url,
            params=dict(params) if params else None,
            headers=_header_lines(headers),
            data=data,
            timeout_s=timeout_ms / 1000,
            limit=limit,
        )
        return HttpResponse(answer.status, answer.body, answer.headers, url)

    async def close(self) -> None:
        self._closed = True
        if self._kept is not None:
            self._kept.close()
            self._kept = None
        if self._session is not None:
            await self._session.close()
            self._session = None


def _header_lines(headers: Mapping[str, str]) -> str:
    """ "Name: value\r\n" lines; a line break in a name or value is refused
    (ValueError, as aiohttp does): it would smuggle a header in."""
    lines = []
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n"):
            raise ValueError(f"a line break in the header {name!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _read_body(resp: aiohttp.ClientResponse, limit: int, url: str) -> bytes:
    """The whole body, or UnexpectedResponseError once it is past `limit`
    bytes (the connection is closed then: the rest is never read)."""
    if resp.content_length is not None and resp.content_length > limit:
        resp.close()
        raise _too_long(resp, limit, url, f"declares {resp.content_length} bytes")
    body = bytearray()
    # Pieces are as large as aiohttp's read buffer (64 KiB); it stops reading
    # the socket while its buffer is full, so memory is the bound plus that.
    async for piece in resp.content.iter_any():
        if len(body) + len(piece) > limit:
            resp.close()
            raise _too_long(resp, limit, url, "goes on")
        body += piece
    return bytes(body)


def _too_long(
    resp: aiohttp.ClientResponse, limit: int, url: str, how: str
) -> UnexpectedResponseError:
    return UnexpectedResponseError(
        f"{url} answered HTTP {resp.status} with a body that {how} past the {limit} bytes this "
        "client accepts for it (response_max_bytes; for a fetch max_partition_fetch_bytes + "
        "max_fetch_batch_bytes); refused, the connection closed",
        url=url,
        http_status=resp.status,
        limit=limit,
    )
