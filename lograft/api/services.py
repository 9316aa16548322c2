"""What the HTTP handlers need from a node, as protocols.

Handlers depend on these small views rather than on the node's wiring, so
they can be tested with plain fakes and the node can evolve underneath.
"""

from __future__ import annotations

from typing import Any, Protocol

from lograft.brokers.metadata_sync import TopicView
from lograft.brokers.peer_calls import PeerCalls

__all__ = ["ControllerCalls", "MetadataView", "PeerCalls", "TopicView"]


class MetadataView(Protocol):
    """The broker's current view of the cluster metadata."""

    def topic(self, name: str) -> TopicView | None: ...

    def topics(self) -> list[TopicView]: ...

    def broker_url(self, broker_id: int) -> str | None: ...

    def live_brokers(self) -> list[int]: ...


class ControllerCalls(Protocol):
    """The active controller, wherever it is (the node's ControllerClient:
    in process when this node's own runtime is active, else over HTTP)."""

    def active_controller_id(self) -> int | None: ...

    async def call(self, name: str, body: dict[str, Any], *, timeout_ms: int = ...) -> Any:
        """Controller RPC `name` with `body`; its JSON answer."""
        ...
