"""Reading an HTTP/1.1 answer from a kept connection, bounded.

Shared by the client's kept connections (client/kept_connections.py) and
the nodes' peer channels (node/peer_channel.py): both write a request in one
buffer and read the answer with an asyncio StreamReader whose buffer limit
(`HEAD_BYTES_MAX`) bounds the status line and headers. Each caller turns
`BodyTooLong` into its own error. ValueError: the answer is not HTTP/1.x.
Imports nothing of ours: the client may use it (no server code).
"""

from __future__ import annotations

import asyncio

# Largest status line plus headers of an answer, bytes (the stream reader's
# buffer limit: a longer head fails the exchange).
HEAD_BYTES_MAX = 64 * 1024
# Largest chunk-size line of a chunked answer, bytes.
CHUNK_LINE_BYTES_MAX = 1024


class BodyTooLong(Exception):
    """A chunked or read-to-close body went on past the caller's limit."""


def parse_head(head: bytes) -> tuple[int, list[tuple[str, str]], bool]:
    """(status, header (name, value) pairs, keep the connection) of a status
    line and headers. A 1xx status is refused: nothing here sends
    `Expect: 100-continue` or asks to switch protocols."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise ValueError(f"status line {lines[0][:80]!r}")
    status = int(rest[:3])
    if not 200 <= status <= 599:
        raise ValueError(f"status {status}")
    headers: list[tuple[str, str]] = []
    keep = version == "HTTP/1.1"
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError(f"header line {line[:80]!r}")
        value = value.strip()
        headers.append((name, value))
        if name.lower() == "connection":
            tokens = {t.strip().lower() for t in value.split(",")}
            keep = "close" not in tokens and (keep or "keep-alive" in tokens)
    return status, headers, keep


def content_length(text: str) -> int:
    """A Content-Length value: ASCII digits only (int() would also take
    '+1', ' 1' and '1_0')."""
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"Content-Length {text[:40]!r}")
    return int(text)


async def read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    """A chunked body of at most `limit` bytes (BodyTooLong as soon as it
    goes past)."""
    data = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        if len(line) > CHUNK_LINE_BYTES_MAX:
            raise ValueError("chunk size line too long")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size < 0:
            raise ValueError("negative chunk size")
        if size == 0:
            # Trailers (none expected) end with an empty line.
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return bytes(data)
        if len(data) + size > limit:
            raise BodyTooLong
        data += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("chunk not followed by CRLF")


async def read_to_end(reader: asyncio.StreamReader, limit: int) -> bytes:
    """A body that ends with the connection, of at most `limit` bytes."""
    data = bytearray()
    while piece := await reader.read(HEAD_BYTES_MAX):
        if len(data) + len(piece) > limit:
            raise BodyTooLong
        data += piece
    return bytes(data)


__all__ = [
    "CHUNK_LINE_BYTES_MAX",
    "HEAD_BYTES_MAX",
    "BodyTooLong",
    "content_length",
    "parse_head",
    "read_chunked",
    "read_to_end",
]
