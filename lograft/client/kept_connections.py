"""Kept HTTP/1.1 connections for the client's raw-batch exchanges.

Produce batches and fetches are most of a client's requests, hundreds a
second. Through aiohttp's client each costs about 0.55 ms of CPU on a loaded
2-core VM (the session's request machinery, tracing hooks, timer handles, the
response object and its stream); the same exchange written in one buffer and
read with a bounded stream reader costs about 0.15-0.2 ms
(docs/benchmarks.md, "Client CPU per exchange"). `KeptConnections` does
that for `HttpTransport` (transport.py), which sends these two kinds of
request through it and everything else through aiohttp.

What it keeps of the transport's contract:

- every answer (any status) is returned: status, headers (case-insensitive),
  body; nothing is followed (no redirects, no cookies);
- bounded: a status line and headers of at most `HEAD_BYTES_MAX` bytes, a
  body of at most the caller's `limit` (a declared Content-Length over it is
  refused before anything is read; chunked or read-to-close bodies as they
  arrive), else `UnexpectedResponseError` and the connection closed;
- `NetworkError` with `sent=False` when the connection could not be made
  (refused, connect timeout), `sent=True` once the request may have been
  written (reset, closed, timed out, not HTTP);
- the call's timeout covers waiting for a connection, connecting, sending
  and reading; connecting alone is bounded by `connect_timeout_s` too;
- at most `connections_max` connections are open (busy and idle together,
  all nodes); an idle one is reused for at most `IDLE_S` seconds (well under
  a node's `keepalive_timeout_ms`, 75 s by default, so a node rarely closes
  one under a request);
- any failure, timeout or cancel mid-exchange closes that connection (its
  state is unknown); a GET that met a kept connection closed before any
  answer byte is sent once more on a new one (a GET changes nothing), a
  POST is not (its outcome is unknown: `sent=True`, the producer's retry
  and idempotence decide).

Loop-bound: created and used on one event loop.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

from multidict import CIMultiDict, CIMultiDictProxy

from lograft.client.errors import NetworkError, UnexpectedResponseError
from lograft.http1_answers import (
    HEAD_BYTES_MAX,
    BodyTooLong,
    content_length,
    parse_head,
    read_chunked,
    read_to_end,
)

# How long an idle connection is reused, seconds.
IDLE_S = 15.0
# What yarl leaves unquoted in a path (RFC 3986 pchar and "/", "%" kept as given).
_PATH_SAFE = "/%:@!$&'()*+,;=~"


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            and now - self.idle_since < IDLE_S
        )

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


class _Stale(Exception):
    """A kept connection was closed before any answer byte."""


class KeptConnections:
    """Keep-alive connections per node (scheme, host, port), bounded in all."""

    def __init__(
        self,
        *,
        connections_max: int,
        connect_timeout_s: float,
        tls: ssl.SSLContext | None,
        fixed_headers: str,
    ) -> None:
        """`fixed_headers`: header lines ("Name: value\\r\\n" each) every
        request carries (User-Agent, the client id)."""
        self._connect_timeout_s = connect_timeout_s
        self._tls = tls
        self._fixed = fixed_headers
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._idle_count = 0
        self._busy = 0
        self._max = connections_max
        self._slots = asyncio.Semaphore(connections_max)
        self._targets: dict[str, tuple[tuple[str, str, int], str, str]] = {}
        self.connections_opened = 0  # for tests: kept connections are reused

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None,
        headers: str,
        data: bytes | None,
        timeout_s: float,
        limit: int,
    ) -> Answer:
        """One exchange. `headers`: the request's own header lines."""
        node, host_header, path = self._target(url)
        target = f"{path}?{urlencode(params)}" if params else path
        head = f"{method} {target} HTTP/1.1\r\nHost: {host_header}\r\n{self._fixed}{headers}"
        if data is not None:
            head += f"Content-Length: {len(data)}\r\n"
        request = (head + "\r\n").encode("latin-1")
        if data:
            request += data
        sent = False
        try:
            async with asyncio.timeout(timeout_s):
                async with self._slots:
                    self._busy += 1
                    try:
                        for attempt in (1, 2):
                            conn = self._take(node)
                            reused = conn is not None
                            if conn is None:
                                conn = await self._connect(node, url, timeout_s)
                            sent = True
                            try:
                                answer, keep = await _exchange(conn, request, limit, url)
                            except _Stale:
                                conn.close()
                                if reused and method == "GET" and attempt == 1:
                                    continue
                                raise NetworkError(
                                    f"{method} {url} failed: the connection was closed "
                                    "before an answer",
                                    url=url,
                                    sent=True,
                                ) from None
                            except BaseException:
                                conn.close()  # what is left on it is unknown
                                raise
                            self._put(node, conn, keep)
                            return answer
                        raise AssertionError("unreachable")
                    finally:
                        self._busy -= 1
        except TimeoutError:
            raise NetworkError(f"{method} {url} timed out", url=url, sent=sent) from None
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise NetworkError(
                f"{method} {url} failed: {type(exc).__name__}: {exc}", url=url, sent=True
            ) from None
        except ValueError as exc:
            raise NetworkError(
                f"{method} {url} failed: the answer is not HTTP/1.x: {exc}", url=url, sent=True
            ) from None

    def _target(self, url: str) -> tuple[tuple[str, str, int], str, str]:
        """(node, Host header, quoted path) of `url`, cached per URL."""
        found = self._targets.get(url)
        if found is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise NetworkError(f"not an http(s) URL: {url!r}", url=url, sent=False)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            host = parts.hostname
            host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            path = quote(parts.path or "/", safe=_PATH_SAFE)
            if parts.query:
                path += "?" + parts.query
            found = ((parts.scheme, host, port), host_header, path)
            if len(self._targets) >= 4096:  # bounded: URLs are per partition
                self._targets.clear()
            self._targets[url] = found
        return found

    def _take(self, node: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(node)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            self._idle_count -= 1
            if conn.usable(now):
                return conn
            conn.close()
        return None

    def _put(self, node: tuple[str, str, int], conn: _Connection, keep: bool) -> None:
        # Busy ones hold slots; idle ones are kept while all open stay in bound.
        if not keep or self._busy + self._idle_count > self._max:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(node, []).append(conn)
        self._idle_count += 1
        if self._busy + self._idle_count > self._max:
            self._close_one_idle()

    def _close_one_idle(self) -> None:
        for idle in self._idle.values():
            if idle:
                idle.pop(0).close()
                self._idle_count -= 1
                return

    async def _connect(self, node: tuple[str, str, int], url: str, timeout_s: float) -> _Connection:
        scheme, host, port = node
        tls = None
        if scheme == "https":
            tls = self._tls if self._tls is not None else ssl.create_default_context()
        # Room for the new one: the oldest idle connection to another node goes.
        if self._busy + self._idle_count > self._max:
            self._close_one_idle()
        try:
            async with asyncio.timeout(min(self._connect_timeout_s, timeout_s)):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                    limit=HEAD_BYTES_MAX,
                )
        except (OSError, TimeoutError) as exc:
            what = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            raise NetworkError(f"could not connect to {url}: {what}", url=url, sent=False) from None
        self.connections_opened += 1
        return _Connection(reader, writer)

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        self._idle_count = 0


async def _exchange(conn: _Connection, request: bytes, limit: int, url: str) -> tuple[Answer, bool]:
    reader, writer = conn.reader, conn.writer
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _Stale from None
        raise
    except (ConnectionResetError, BrokenPipeError):
        raise _Stale from None
    status, pairs, keep = parse_head(head)
    headers: CIMultiDict[str] = CIMultiDict(pairs)
    length_text = headers.get("Content-Length")
    chunked = headers.get("Transfer-Encoding", "").lower().endswith("chunked")
    try:
        if status in (204, 304):
            body = b""
        elif chunked:
            body = await read_chunked(reader, limit)
        elif length_text is not None:
            length = content_length(length_text)
            if length > limit:
                raise _too_long(url, status, limit, f"declares {length} bytes")
            body = await reader.readexactly(length)
        else:
            body = await read_to_end(reader, limit)
            keep = False
    except BodyTooLong:
        raise _too_long(url, status, limit, "goes on") from None
    return Answer(status, CIMultiDictProxy(headers), body), keep


def _too_long(url: str, status: int, limit: int, how: str) -> UnexpectedResponseError:
    return UnexpectedResponseError(
        f"{url} answered HTTP {status} with a body that {how} past the {limit} bytes this "
        "client accepts for it (response_max_bytes; for a fetch max_partition_fetch_bytes + "
        "max_fetch_batch_bytes); refused, the connection closed",
        url=url,
        http_status=status,
        limit=limit,
    )


__all__ = ["HEAD_BYTES_MAX", "IDLE_S", "Answer", "KeptConnections"]
