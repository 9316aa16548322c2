"""Stand-ins for a ControllerRuntime's Raft adapter and clock, shared by the
controller failover and refused-broker fence tests."""

from __future__ import annotations

from lograft.quorum.image import MetadataImage
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.raft.peer_contact import PeerContact

from .metadata_cluster import Cluster


class InstantRaft:
    """Node "1" (following `leader_id` until `elected`); every append commits
    and applies at once; peer contact and refusals as the test sets them."""

    node_id = "1"

    def __init__(self, store: MetadataStore, leader_id: str | None = "1") -> None:
        self.store = store
        self.leader_id = leader_id
        self.is_leader = leader_id == self.node_id
        self.contact = PeerContact()

    def last_heard_ms(self, peer_id: str) -> int | None:
        return self.contact.last_heard_ms(peer_id)

    def refused_peers(self) -> dict[str, int]:
        return self.contact.refusals()

    async def append(self, batch: bytes, *, timeout_ms: int | None = None) -> int:
        offset = self.store.image.offset + 1
        self.store.apply(offset, batch)
        return offset

    def elected(self) -> None:
        self.is_leader, self.leader_id = True, self.node_id


class Clock:
    """Monotonic ms the test moves by hand."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def store_of(cluster: Cluster) -> MetadataStore:
    """A metadata store holding `cluster`'s image."""
    store = MetadataStore()
    store._image = MetadataImage.empty().apply_batch(
        cluster.image.offset, cluster.image.to_records()
    )
    return store
