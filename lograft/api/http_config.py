"""`[http]` in the node config: the HTTP listener and its limits.

A typed Record (`lograft.typed`), composed into the node config by
`lograft.node.config`; the api package uses it without importing the node.
Every limit has its unit last; bounds are in the field types, rules between
fields in `__post_init__`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta
from msgspec.structs import force_setattr

from lograft.typed import FieldError, NonNegative, Positive, Record

Port = Annotated[int, Meta(ge=0, le=65535)]
# Byte limits below 1 KiB would refuse ordinary requests.
AtLeast1KiB = Annotated[int, Meta(ge=1024)]


class HttpConfig(Record):
    """`[http]` in the node config: the listener, and what a client or peer may
    cost this node (docs/api.md)."""

    host: str = "127.0.0.1"
    port: Port = 9091
    # The URL this broker registers for others to dial (Kafka's
    # advertised.listeners); None: http://{host}:{port}.
    advertised_url: str | None = None
    # Largest request body accepted, bytes.
    request_bytes_max: AtLeast1KiB = 16 * 1024 * 1024
    # Largest body of a request that is not a produce (at most request_bytes_max) (group join, sync,
    # heartbeat and commit, admin and config changes), bytes: none needs
    # more, and parsing 16 MiB of JSON holds the event loop 0.1-0.3 s.
    admin_request_bytes_max: AtLeast1KiB = 1024 * 1024
    # Request bodies held at once (being received or handled), bytes: one
    # budget for clients' requests and one of the same size for other nodes'
    # (/internal/); at least request_bytes_max (request_bodies.py).
    request_bytes_inflight_max: Positive = 256 * 1024 * 1024
    # How long a body waits, unread, for room in that budget before it is
    # answered 503 REQUEST_BYTES_INFLIGHT_LIMIT_REACHED, ms.
    request_bytes_inflight_wait_ms: Positive = 5_000
    # A body must arrive whole within this long of the node starting to read
    # it; otherwise 408 REQUEST_BODY_TIMEOUT and the connection is closed, ms.
    body_read_timeout_ms: Positive = 30_000
    # Peer id -> host:port this node dials for that peer's HTTP API in
    # node-to-node calls, instead of the peer's advertised address (a proxy per
    # link in fault-injection tests). Clients are never told these addresses.
    dial: dict[NonNegative, str] = {}
    # Most connections open at once, over all peers, for calls made on a
    # client's behalf (a produce forwarded to the partition's leader, a group
    # call forwarded to its coordinator, an admin fan-out); more wait for one.
    # Replica fetches and controller calls have pools of their own, so they
    # never wait behind these.
    forward_connections_max: Positive = 100
    # Largest answer this node reads from another node in one node-to-node
    # call, bytes; a larger one is BROKER_NOT_AVAILABLE and is not read. The
    # largest legitimate answers are replica and stream fetches: whole batches
    # up to the request's byte budget, one of which may pass it by up to the
    # topic's max_message_bytes.
    peer_answer_bytes_max: AtLeast1KiB = 1024 * 1024 * 1024
    # Client connections this node holds at once, over all addresses; more are
    # answered 503 CONNECTIONS_LIMIT_REACHED and closed (connection_guard.py).
    connections_max: Positive = 4096
    # Client connections from one remote address at once (at most
    # connections_max); the rest of connections_max stays for other hosts,
    # the other nodes among them.
    connections_per_ip_max: Positive = 1024
    # A connection that has not sent a whole request's headers this long after
    # it opened (or after that request's first byte) is closed, ms.
    header_read_timeout_ms: Positive = 10_000
    # With [tls]: a connection must finish its TLS handshake this long after it
    # is accepted, or it is closed (it counts against the connection caps
    # meanwhile), ms.
    tls_handshake_timeout_ms: Positive = 10_000
    # An idle keep-alive connection is closed after this long, ms. Above the
    # 15 s aiohttp clients (the nodes among them) keep an idle connection, so
    # that the client, not the node, closes it first.
    keepalive_timeout_ms: Positive = 75_000
    # At most one INFO line per kind of client fault (malformed HTTP, a client
    # gone mid-request, a header timeout, a refused connection) this long, ms.
    client_fault_log_interval_ms: Positive = 10_000
    # Bytes the compressed batches of one produce request may inflate to, in
    # all (refused with 413 as soon as inflation passes it).
    produce_decompressed_bytes_max: AtLeast1KiB = 64 * 1024 * 1024
    # Bytes the compressed batches one JSON fetch (or one stream read) renders
    # may inflate to, in all; the first batch always inflates.
    fetch_decompressed_bytes_max: AtLeast1KiB = 64 * 1024 * 1024
    # Largest JSON one record renders to in a fetch or a stream, bytes.
    record_render_bytes_max: AtLeast1KiB = 8 * 1024 * 1024
    # Threads that decompress, validate and render records for requests, off
    # the event loop; more such work waits for one.
    record_threads_max: Positive = 2
    # Where a JSON produce's keyless records (no key, no partition) go:
    # "local", a partition this node leads when it leads any, round-robin
    # across requests (nothing forwarded); "all", every partition of the
    # topic in turn, wherever its leader is (one more hop for most).
    keyless_partitions: Literal["local", "all"] = "local"
    # Passwords hashed at once (PBKDF2 in threads) for PUT /v1/users/{user};
    # more such requests wait for one.
    password_hashes_inflight_max: Positive = 2

    def __post_init__(self) -> None:
        if self.request_bytes_inflight_max < self.request_bytes_max:
            # Such a budget would refuse the largest bodies forever.
            raise FieldError(
                "request_bytes_inflight_max",
                f"{self.request_bytes_inflight_max} is below "
                f"http.request_bytes_max={self.request_bytes_max}: the budget must hold at "
                "least one body of the largest size",
            )
        if self.admin_request_bytes_max > self.request_bytes_max:
            force_setattr(self, "admin_request_bytes_max", self.request_bytes_max)
        if self.advertised_url is not None:
            url = self.advertised_url.rstrip("/")
            if not _is_http_url(url):
                raise FieldError("advertised_url", f"{url!r}: write it as http://host:port")
            force_setattr(self, "advertised_url", url)
        for peer, address in self.dial.items():
            if not is_host_port(address):
                raise FieldError(f"dial.{peer}", f"{address!r}: write it as host:port")


def is_host_port(text: str) -> bool:
    """Whether `text` is `host:port` (port 0-65535, ASCII digits)."""
    host, sep, port = text.rpartition(":")
    return bool(sep and host) and _is_port(port)


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5 and int(text) <= 65535


def _is_http_url(text: str) -> bool:
    scheme, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    return (
        scheme in ("http", "https")
        and bool(sep and colon and host)
        and "/" not in rest
        and _is_port(port)
    )
