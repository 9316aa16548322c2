"""What code below the node needs to call another node: the `PeerCalls` protocol.

The node's `PeerClient` (lograft/node/peer_client.py) satisfies it; the
produce router, the routes and the stream sources depend on this protocol
only, so they neither import the node nor hold a session of their own, and a
test may hand them a fake.

The contract every implementation keeps:

- the cluster secret, timeouts and a bound on the answer's size are the
  client's business, not the caller's;
- a call that gets no answer (connection refused or reset, timeout, no address
  for the peer, an answer past the bound) raises `PeerUnreachableError`
  (`PeerAddressUnknownError` when the peer has no address): BROKER_NOT_AVAILABLE
  on the wire, retriable;
- an answer with a status other than 2xx raises the error its JSON error body
  names (`LograftError.from_dict`), else `PeerAnswerUnreadableError`
  (BROKER_NOT_AVAILABLE) with the status in its details;
- a 2xx answer's body is returned as bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from lograft.errors import PeerAddressUnknownError

JSON = "application/json"


class PeerCalls(Protocol):
    """HTTP calls to other nodes of the cluster."""

    def broker_url(self, broker_id: int) -> str | None:
        """The base URL to call broker `broker_id` at (None: it has none yet)."""
        ...

    async def post(
        self,
        peer_id: int,
        path: str,
        body: bytes,
        *,
        content_type: str = JSON,
        timeout_ms: int | None = None,
    ) -> bytes:
        """POST `body` to broker `peer_id`'s `path`; the answer's body."""
        ...

    async def get(
        self,
        peer_id: int,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> bytes:
        """GET broker `peer_id`'s `path`; the answer's body."""
        ...

    async def call(
        self,
        base_url: str,
        method: str,
        path: str,
        *,
        peer_id: int | None = None,
        body: bytes | None = None,
        content_type: str = JSON,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> bytes:
        """`method` `path` at `base_url` (a URL found by the caller, e.g. a
        coordinator's); `peer_id`, when known, names the peer in errors."""
        ...


class NoPeers:
    """`PeerCalls` for a node alone (and tests of one): it knows no other node,
    so every call is PeerAddressUnknownError."""

    def broker_url(self, broker_id: int) -> str | None:
        return None

    async def post(
        self,
        peer_id: int,
        path: str,
        body: bytes,
        *,
        content_type: str = JSON,
        timeout_ms: int | None = None,
    ) -> bytes:
        raise PeerAddressUnknownError(f"broker {peer_id} has no address known here")

    async def get(
        self,
        peer_id: int,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> bytes:
        raise PeerAddressUnknownError(f"broker {peer_id} has no address known here")

    async def call(
        self,
        base_url: str,
        method: str,
        path: str,
        *,
        peer_id: int | None = None,
        body: bytes | None = None,
        content_type: str = JSON,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> bytes:
        raise PeerAddressUnknownError(f"{base_url} is not a peer known here")


__all__ = ["JSON", "NoPeers", "PeerCalls"]
