"""Where this node dials another node's HTTP API for a node-to-node call.

Every node-to-node HTTP call asks `PeerUrls` for the peer's base URL:
replica fetches to a partition leader, produce requests forwarded to a
leader, a leader's offsets for describe, and the controller RPCs
(registration, heartbeats, AlterPartition, producer-id blocks, forwarded admin
changes). By default that is the peer's own address: the URL the broker
registered (its advertised URL) for a broker, the voters list's `http` for a
controller. `[http.dial]` replaces the host:port per peer, so a test can put a
proxy on each directed link (as `[raft.dial]` does for Raft); the scheme stays
the peer's. Voters' URLs take the cluster's scheme (https with `[tls]`).
Clients never see these addresses: NOT_LEADER answers and `/v1/brokers` keep
the advertised ones. A voter with a controller listener (`controller` in its
`[[voters]]` entry) gets its controller calls there, or at its
`[controller_listener.dial]` entry; `[http.dial]` then does not apply to them.
"""

from __future__ import annotations

from collections.abc import Mapping

from lograft.api.services import MetadataView
from lograft.node.config import Voter


class PeerUrls:
    def __init__(
        self,
        dial: Mapping[int, str] | None = None,
        scheme: str = "http",
        controller_dial: Mapping[int, str] | None = None,
    ) -> None:
        # Peer node id -> host:port ([http.dial]).
        self.dial: Mapping[int, str] = dict(dial or {})
        # Of every node's HTTP API (NodeConfig.http_scheme).
        self.scheme = scheme
        # Voter id -> host:port of its controller listener ([controller_listener.dial]).
        self.controller_dial: Mapping[int, str] = dict(controller_dial or {})

    def resolve(self, peer_id: int, advertised_url: str | None) -> str | None:
        """The base URL to dial for `peer_id`, whose own URL is `advertised_url`
        (None: the peer has no address, and a dial entry does not give it one)."""
        if advertised_url is None:
            return None
        address = self.dial.get(peer_id)
        if address is None:
            return advertised_url
        scheme, sep, _rest = advertised_url.partition("://")
        return f"{scheme if sep else self.scheme}://{address}"

    def broker(self, metadata: MetadataView, broker_id: int) -> str | None:
        """The base URL of a registered broker (None if it has not registered)."""
        return self.resolve(broker_id, metadata.broker_url(broker_id))

    def voter(self, voter: Voter) -> str:
        """The base URL of a controller voter."""
        url = self.resolve(voter.node_id, voter.http_url(self.scheme))
        assert url is not None  # a voter always has an address
        return url

    def controller(self, voter: Voter) -> str:
        """The base URL of a voter's controller RPCs: its controller listener
        when it has one, else its HTTP API (`voter`)."""
        if voter.controller is None:
            return self.voter(voter)
        address = self.controller_dial.get(voter.node_id, voter.controller)
        return f"{self.scheme}://{address}"
