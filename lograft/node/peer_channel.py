"""One keep-alive HTTP/1.1 connection to one peer, for calls made one at a time.

A follower's replica fetches go to each leader one after the other (one
long-poll in flight per leader), hundreds of times a second under load. Sent
through aiohttp's client each cost ~0.5-0.7 ms of CPU on the calling node
(the pool, tracing hooks, timeouts, the response object and its streams; a
raw exchange on the same VM cost ~0.17 ms, docs/benchmarks.md): more than the
fetch's own work. A `PeerChannel` writes the request in one buffer and reads
the answer with a bounded stream reader over a connection it keeps open.

What it keeps of `PeerClient`'s contract (node/peer_client.py, which owns
the channels and is the only caller):

- the cluster secret header on every call, TLS with the client context when
  the peer's URL is https (the peer's certificate and host name verified);
- the call's timeout covers connecting, sending and reading;
- the answer is bounded: a status line and headers of at most
  `HEAD_BYTES_MAX` bytes, a body of at most the client's `answer_bytes_max`
  (with a Content-Length, chunked, or read to the connection's end); a peer
  answering more, or anything not HTTP/1.x, is unreachable;
- it returns the status and the body; `PeerClient.exchange` returns a 2xx
  answer's body and raises the error of any other (`answer_error`), and
  turns a `ChannelError` into PeerUnreachableError (BROKER_NOT_AVAILABLE);
- any failure (refused, reset, timed out, unreadable, cancelled mid-call)
  closes the connection, whose state is then unknown; the next call opens a
  new one. A kept connection the peer closed while idle (its
  `keepalive_timeout`, a restart) fails the call before any answer byte:
  that call is sent once more on a new connection. A replica fetch sent
  twice is safe: the leader's session then sees an old epoch and the
  follower starts its session over (fetch sessions' error path).

Calls on one channel are serialised by a lock; a caller wanting calls in
parallel to one peer uses the pool (`PeerClient.post`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import TypeVar

import yarl

from lograft.api.app import SECRET_HEADER
from lograft.http1_answers import (
    HEAD_BYTES_MAX,
    BodyTooLong,
    content_length,
    parse_head,
    read_chunked,
    read_to_end,
)

T = TypeVar("T")


class ChannelError(Exception):
    """No usable answer: refused, reset, timed out, too large, not HTTP."""


class _Closed(Exception):
    """The peer closed a kept connection before answering (safe to resend)."""


class PeerChannel:
    """A kept connection to one base URL (`http://host:port`, or https)."""

    def __init__(
        self,
        base_url: str,
        *,
        cluster_secret: str,
        answer_bytes_max: int,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.base_url = base_url
        url = yarl.URL(base_url)
        if url.scheme not in ("http", "https") or url.host is None:
            raise ValueError(f"not an http(s) base URL: {base_url!r}")
        self._host = url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            self._ssl = tls if tls is not None else ssl.create_default_context()
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._fixed = f"Host: {host}:{self._port}\r\n{SECRET_HEADER}: {cluster_secret}\r\n".encode()
        self._path = url.raw_path.rstrip("/")
        self._answer_bytes_max = answer_bytes_max
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self.connections_opened = 0  # for tests: a kept connection is reused

    async def post(
        self, path: str, body: bytes, *, content_type: str, timeout_s: float
    ) -> tuple[int, bytes]:
        """POST `body` to `path`: the answer's status and body. Raises
        ChannelError when there is no usable answer."""
        head = (
            (
                f"POST {self._path}{path} HTTP/1.1\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            ).encode()
            + self._fixed
            + b"\r\n"
        )
        async with self._lock:
            status, data, keep = await one_call(
                self._exchange(head + body), timeout_s, self.base_url, self.close
            )
            if not keep:
                self.close()
        return status, data

    async def _exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        reused = self._writer is not None
        try:
            return await self._send(request)
        except _Closed:
            self.close()
            if not reused:
                raise ChannelError(
                    f"{self.base_url} closed the connection without answering"
                ) from None
        # The kept connection had gone stale: once more on a new one.
        try:
            return await self._send(request)
        except _Closed:
            self.close()
            raise ChannelError(f"{self.base_url} closed the connection without answering") from None

    async def _send(self, request: bytes) -> tuple[int, bytes, bool]:
        try:
            reader, writer = await self._connection()
            writer.write(request)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise _Closed from None  # closed before any answer byte
                raise
            except (ConnectionResetError, BrokenPipeError):
                raise _Closed from None
            status, length, chunked, keep = _framing(head)
            try:
                if chunked:
                    data = await read_chunked(reader, self._answer_bytes_max)
                elif length is not None:
                    if length > self._answer_bytes_max:
                        raise BodyTooLong
                    data = await reader.readexactly(length)
                else:
                    data = await read_to_end(reader, self._answer_bytes_max)
                    keep = False
            except BodyTooLong:
                raise _too_large(self.base_url, self._answer_bytes_max) from None
            return status, data, keep
        except (_Closed, ChannelError):
            raise
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise ChannelError(
                f"could not reach {self.base_url}: {type(exc).__name__}: {exc}"
            ) from None
        except ValueError as exc:
            raise ChannelError(f"{self.base_url} answered no HTTP: {exc}") from None

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None or self._writer.is_closing():
            self.close()
            self._reader, self._writer = await asyncio.open_connection(
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl is not None else None,
                limit=HEAD_BYTES_MAX,
            )
            self.connections_opened += 1
        return self._reader, self._writer

    def close(self) -> None:
        writer = self._writer
        self._reader = self._writer = None
        if writer is not None:
            writer.close()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()


async def one_call(
    exchange: Awaitable[T], timeout_s: float, who: str, close: Callable[[], None]
) -> T:
    """Await `exchange` on a kept connection within `timeout_s`; on a timeout
    (ChannelError), a failure or a cancel, `close` the connection: what is
    left on it is unknown. The caller holds the connection's lock."""
    try:
        async with asyncio.timeout(timeout_s):
            return await exchange
    except TimeoutError:
        close()
        raise ChannelError(f"{who} did not answer within {timeout_s} s") from None
    except BaseException:
        close()
        raise


def _framing(head: bytes) -> tuple[int, int | None, bool, bool]:
    """(status, Content-Length or None, chunked, keep the connection) of an
    answer's status line and headers (ValueError: not HTTP/1.x)."""
    status, headers, keep = parse_head(head)
    length: int | None = None
    chunked = False
    for name, value in headers:
        lower = name.lower()
        if lower == "content-length":
            length = content_length(value)
        elif lower == "transfer-encoding":
            chunked = value.lower().endswith("chunked")
    return status, (None if chunked else length), chunked, keep


def _too_large(who: str, limit: int) -> ChannelError:
    return ChannelError(
        f"{who} answered more than {limit} bytes, the bound on a node-to-node answer"
    )


__all__ = ["HEAD_BYTES_MAX", "ChannelError", "PeerChannel", "one_call"]
