"""What the HTTP handlers need from a node, as protocols.

Handlers depend on these small views rather than on the node's wiring, so
they can be tested with plain fakes and the node can evolve underneath.
"""

from __future__ import annotations

from typing import Protocol

from lograft.brokers.metadata_sync import TopicView

__all__ = ["MetadataView", "TopicView"]


class MetadataView(Protocol):
    """The broker's current view of the cluster metadata."""

    def topic(self, name: str) -> TopicView | None: ...

    def topics(self) -> list[TopicView]: ...

    def broker_url(self, broker_id: int) -> str | None: ...

    def live_brokers(self) -> list[int]: ...
