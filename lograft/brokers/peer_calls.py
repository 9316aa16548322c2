"""What code below the node needs to call another node: the `PeerCalls` protocol.

The node's `PeerClient` (lograft/node/peer_client.py) satisfies it; the
produce router, the routes and the stream sources depend on this protocol
only, so they neither import the node nor hold a session of their own, and a
test may hand them a fake.

Two kinds of call:

- typed operations on a broker (`forward_produce`, `partition_offsets`,
  `list_groups`): the caller names the broker and passes typed values; when
  the broker is this node's own (`serve_locally`), the operation runs in
  process, with the same typed values and no JSON or HTTP in between; else it
  goes over HTTP. `LocalFirst` makes that choice, for every implementation, in
  one place; callers never compare broker ids themselves. An operation with no
  in-process handler registered goes over HTTP even to this node.
- raw HTTP calls (`post`, `get`, `call`) for what is not (yet) an operation.

The contract every implementation keeps for a call that goes over HTTP:

- the cluster secret, timeouts and a bound on the answer's size are the
  client's business, not the caller's;
- a call that gets no answer (connection refused or reset, timeout, no address
  for the peer, an answer past the bound) raises `PeerUnreachableError`
  (`PeerAddressUnknownError` when the peer has no address): BROKER_NOT_AVAILABLE
  on the wire, retriable;
- an answer with a status other than 2xx raises the error its JSON error body
  names (`LograftError.from_dict`), else `PeerAnswerUnreadableError`
  (BROKER_NOT_AVAILABLE) with the status in its details;
- a 2xx answer's body is returned as bytes (raw calls), or decoded (typed
  operations; a 2xx answer that does not decode raises `UnreadableAnswer`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lograft.brokers.metadata_sync import TopicView
from lograft.errors import LograftError, PeerAddressUnknownError
from lograft.protocol.produce_wire import PartitionOutcome, ProduceRequest
from lograft.protocol.topic_partition import TopicPartition

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class LeaderOffsets:
    """One partition's offsets as its leader has them."""

    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    # The first offset whose timestamp is >= the asked timestamp and below
    # the high watermark; None when not asked or no record is that recent.
    offset_for_timestamp: int | None = None
    # The bytes of the leader's log (every segment); None from a node that
    # does not say (older than the field).
    size_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark,
            "log_end_offset": self.log_end_offset,
            "offset_for_timestamp": self.offset_for_timestamp,
        }
        if self.size_bytes is not None:
            doc["size_bytes"] = self.size_bytes
        return doc


# A broker's group listing: {"broker_id", "groups": [{"group_id", "state",
# "members"}], "loading_partitions"} (GET /internal/v1/groups's answer).
GroupListing = dict[str, Any]

# The in-process handlers of the typed operations, for this node's own broker.
ProduceHere = Callable[[TopicView, ProduceRequest], Awaitable[list[PartitionOutcome]]]
OffsetsHere = Callable[
    [Sequence[TopicPartition], "int | None"], Awaitable[list["LeaderOffsets | LograftError"]]
]
GroupsHere = Callable[[], GroupListing]


class UnreadableAnswer(ValueError):
    """A peer answered a typed operation 2xx with a body that does not decode."""


class PeerCalls(Protocol):
    """Calls to other nodes of the cluster (and to this one, in process)."""

    def broker_url(self, broker_id: int) -> str | None:
        """The base URL to call broker `broker_id` at (None: it has none yet)."""
        ...

    def serve_locally(
        self,
        broker_id: int,
        *,
        forward_produce: ProduceHere | None = None,
        partition_offsets: OffsetsHere | None = None,
        list_groups: GroupsHere | None = None,
    ) -> None:
        """Run the named operations in process when they target `broker_id`
        (this node's own); the ones not named keep their handler."""
        ...

    # -- typed operations ---------------------------------------------------------------

    async def forward_produce(
        self, broker_id: int, view: TopicView, req: ProduceRequest
    ) -> list[PartitionOutcome]:
        """`req`'s partitions appended by their leader `broker_id`, as its raw
        produce of each would append them; per partition, in request order,
        its outcome. `view`: the topic as the caller saw it (the in-process
        handler's view; a remote leader uses its own)."""
        ...

    async def partition_offsets(
        self,
        broker_id: int,
        tps: Sequence[TopicPartition],
        timestamp_ms: int | None,
        *,
        timeout_ms: int,
    ) -> list[LeaderOffsets | LograftError]:
        """The offsets of partitions `broker_id` leads, in `tps`' order (each
        its offsets or the error its leader gave for it)."""
        ...

    async def list_groups(self, broker_id: int, *, timeout_ms: int) -> GroupListing:
        """The groups broker `broker_id` coordinates."""
        ...

    # -- raw HTTP calls -----------------------------------------------------------------

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
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """`method` `path` at `base_url` (a URL found by the caller, e.g. a
        coordinator's); `peer_id`, when known, names the peer in errors.
        `headers`: more request headers (a client's credentials, on a public
        route called on its behalf); they never replace the cluster secret."""
        ...


class LocalFirst:
    """The typed operations, with the one decision every caller used to make
    itself: a call to this node's own broker runs its in-process handler
    (the same function that serves the operation to other nodes, without
    the JSON); any other goes to the `_remote_*` method of the subclass."""

    def __init__(self) -> None:
        self.local_broker_id: int | None = None
        self._produce_here: ProduceHere | None = None
        self._offsets_here: OffsetsHere | None = None
        self._groups_here: GroupsHere | None = None

    def serve_locally(
        self,
        broker_id: int,
        *,
        forward_produce: ProduceHere | None = None,
        partition_offsets: OffsetsHere | None = None,
        list_groups: GroupsHere | None = None,
    ) -> None:
        if self.local_broker_id not in (None, broker_id):
            raise ValueError(
                f"these peer calls serve broker {self.local_broker_id} locally, "
                f"not broker {broker_id}"
            )
        self.local_broker_id = broker_id
        self._produce_here = forward_produce or self._produce_here
        self._offsets_here = partition_offsets or self._offsets_here
        self._groups_here = list_groups or self._groups_here

    async def forward_produce(
        self, broker_id: int, view: TopicView, req: ProduceRequest
    ) -> list[PartitionOutcome]:
        if broker_id == self.local_broker_id and self._produce_here is not None:
            return await self._produce_here(view, req)
        return await self._remote_forward_produce(broker_id, req)

    async def partition_offsets(
        self,
        broker_id: int,
        tps: Sequence[TopicPartition],
        timestamp_ms: int | None,
        *,
        timeout_ms: int,
    ) -> list[LeaderOffsets | LograftError]:
        if broker_id == self.local_broker_id and self._offsets_here is not None:
            return await self._offsets_here(tps, timestamp_ms)
        return await self._remote_partition_offsets(
            broker_id, tps, timestamp_ms, timeout_ms=timeout_ms
        )

    async def list_groups(self, broker_id: int, *, timeout_ms: int) -> GroupListing:
        if broker_id == self.local_broker_id and self._groups_here is not None:
            return self._groups_here()
        return await self._remote_list_groups(broker_id, timeout_ms=timeout_ms)

    # -- over HTTP (the subclass's) ------------------------------------------------------

    async def _remote_forward_produce(
        self, broker_id: int, req: ProduceRequest
    ) -> list[PartitionOutcome]:
        raise NotImplementedError

    async def _remote_partition_offsets(
        self,
        broker_id: int,
        tps: Sequence[TopicPartition],
        timestamp_ms: int | None,
        *,
        timeout_ms: int,
    ) -> list[LeaderOffsets | LograftError]:
        raise NotImplementedError

    async def _remote_list_groups(self, broker_id: int, *, timeout_ms: int) -> GroupListing:
        raise NotImplementedError


class NoPeers(LocalFirst):
    """`PeerCalls` for a node alone (and tests of one): it knows no other node,
    so every call that is not served in process is PeerAddressUnknownError."""

    def broker_url(self, broker_id: int) -> str | None:
        return None

    async def _remote_forward_produce(
        self, broker_id: int, req: ProduceRequest
    ) -> list[PartitionOutcome]:
        raise _unknown(broker_id)

    async def _remote_partition_offsets(
        self,
        broker_id: int,
        tps: Sequence[TopicPartition],
        timestamp_ms: int | None,
        *,
        timeout_ms: int,
    ) -> list[LeaderOffsets | LograftError]:
        raise _unknown(broker_id)

    async def _remote_list_groups(self, broker_id: int, *, timeout_ms: int) -> GroupListing:
        raise _unknown(broker_id)

    async def post(
        self,
        peer_id: int,
        path: str,
        body: bytes,
        *,
        content_type: str = JSON,
        timeout_ms: int | None = None,
    ) -> bytes:
        raise _unknown(peer_id)

    async def get(
        self,
        peer_id: int,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> bytes:
        raise _unknown(peer_id)

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
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        raise PeerAddressUnknownError(f"{base_url} is not a peer known here")


def _unknown(broker_id: int) -> PeerAddressUnknownError:
    return PeerAddressUnknownError(f"broker {broker_id} has no address known here")


__all__ = [
    "JSON",
    "GroupListing",
    "GroupsHere",
    "LeaderOffsets",
    "LocalFirst",
    "NoPeers",
    "OffsetsHere",
    "PeerCalls",
    "ProduceHere",
    "UnreadableAnswer",
]
