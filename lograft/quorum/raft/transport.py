"""pysyncobj nodes and TCP transport with stable ids separate from dial addresses.

Stock pysyncobj names a node by its `host:port`, sends that address as the
first message of a connection so the acceptor knows who dialed, and lets only
the node with the greater address dial. That ties identity to one address, so
node A cannot reach node B through a per-pair proxy (issue 6: a toxiproxy
proxy on every node pair).

Here:

- `PeerNode` is a voter: `id` is its stable node id; `dial_address` is where
  *this process* dials it. Each process builds its own PeerNodes from its own
  `peers` map, so every directed pair (self -> peer) has its own address.
- The dialer sends its node id (not an address) after the password key
  exchange; the acceptor maps that id to its PeerNode. Unknown ids are
  disconnected.
- Of each voter pair exactly one side dials: the one with the greater node id
  (deterministic, independent of addresses). The other side's address for
  that peer is only used if ids were reversed; document the direction when
  wiring proxies. One TCP connection carries both directions, so a proxy
  between them can still cut or slow each direction separately.
- Observers (read-only, broker-only nodes) dial every voter and announce
  themselves as `observer:<node id>`. The acceptor names them
  `observer:<id>#<n>`. Stock pysyncobj names read-only nodes "0", "1", ...,
  which collides with numeric voter ids (Node equality is by id), so the
  stock `readonly` handshake is accepted but named the same safe way.

Invariant: every Node this transport keys a connection by has a unique id;
voter ids never contain ':' (see raft_config), observer ids always do.

Strangers: an accepted connection is bounded until its peer has proven the
password (size, age, how many at once); see raft_handshake.

Every message of a voter is recorded in `PeerContact` (when it was heard;
for `append_entries`, that it led), and the pre-vote of an early election is
answered here, never reaching pysyncobj (early_election.py).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable
from typing import Any

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import Node
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from lograft.quorum.raft.append_guard import journal_entry_at, keep_matching_tail
from lograft.quorum.raft.config import parse_address
from lograft.quorum.raft.durability import DurabilityGate
from lograft.quorum.raft.early_election import PREVOTE_OK_TYPE, PREVOTE_TYPE, EarlyElection
from lograft.quorum.raft.handshake import (
    HandshakeLimits,
    authenticated,
    guard_accepted,
    handshake_started,
)
from lograft.quorum.raft.peer_contact import PeerContact

log = logging.getLogger(__name__)

OBSERVER_PREFIX = "observer:"
# Sent between voters so that idle links do not time out (`_keep_alive`);
# four per connection timeout, so one or two late still keep it open.
KEEPALIVE = {"type": "lograft_keepalive"}
KEEPALIVES_PER_TIMEOUT = 4
_STOCK_READONLY_HELLO = "readonly"


class PeerNode(Node):
    """A voter: stable `id`, plus the address this process dials it at."""

    def __init__(self, node_id: str, dial_address: str) -> None:
        host, port = parse_address(dial_address, f"peers.{node_id}")
        super().__init__(node_id, dial_address=dial_address, host=host, port=port)

    @property
    def address(self) -> str:
        # TCPTransport.addNode/dropNode key a lookup table by `address`; our
        # transport re-keys it by id, see PeerTCPTransport.addNode.
        return str(self.dial_address)

    @property
    def ip(self) -> str | None:
        resolved: str | None = globalDnsResolver().resolve(self.host)  # pysyncobj is untyped
        return resolved

    def __repr__(self) -> str:
        return f"PeerNode({self.id!r}, dial_address={self.dial_address!r})"


class ObserverNode(Node):
    """A read-only node that dialed in; `observer_id` is the id it announced."""

    def __init__(self, connection_name: str, observer_id: str) -> None:
        super().__init__(connection_name, observer_id=observer_id)


class PeerTCPTransport(TCPTransport):
    """TCPTransport keyed by node id; see the module docstring for the protocol."""

    def __init__(
        self,
        syncObj: Any,
        selfNode: PeerNode | None,
        otherNodes: Iterable[PeerNode],
        *,
        handshake: HandshakeLimits,
        observer_id: str | None = None,
        gate: DurabilityGate | None = None,
        contact: PeerContact | None = None,
        early: EarlyElection | None = None,
    ) -> None:
        if selfNode is None and observer_id is None:
            raise ValueError("an observer transport needs observer_id")
        self._observer_id = observer_id
        self._contact = contact
        self._early = early
        self._handshake = handshake
        self._gate = gate
        super().__init__(syncObj, selfNode, otherNodes)
        syncObj.addOnTickCallback(self._expire_handshakes)
        self._keepalive_s = float(syncObj.conf.connectionTimeout) / KEEPALIVES_PER_TIMEOUT
        self._next_keepalive = 0.0
        if selfNode is not None:
            syncObj.addOnTickCallback(self._keep_alive)
        if gate is not None:
            gate.attach_sender(super().send)
            # Runs after the tick's own work, before it polls: the group commit.
            syncObj.addOnTickCallback(gate.release)
        if early is not None:
            early.attach_sender(self.send)

    def send(self, node: Node, message: Any) -> bool:
        # Every Raft message pysyncobj sends passes here: one that reflects
        # journal writes not yet durable waits for the next release().
        if self._gate is not None and self._gate.hold(node, message):
            return True
        return bool(super().send(node, message))

    # -- keeping idle voter links open ------------------------------------------

    def _keep_alive(self) -> None:
        """Tick callback: every `_keepalive_s`, a tiny message to each connected voter.

        pysyncobj's TcpConnection closes a connection on which it has read
        nothing for `connection_timeout_ms` (its check for a peer gone
        silent), checked as it sends and as data arrives, before reading.
        Two followers send each other nothing while a leader lives, so when
        the leader died the link between them was past that timeout: the
        first candidate's request_vote closed it on sending (or the other end
        closed it on arrival) and was lost, the other follower timed out on
        its own in the same term, and the vote split, costing every failover
        of the Raft leader a second election timeout (2-3.5 s; ten of ten
        SIGKILLs of the active controller's node, docs/benchmarks.md). A
        keepalive, swallowed by the receiving transport (`_onMessageReceived`),
        keeps every voter link read; a peer that is really gone sends none
        and times out as before."""
        now = monotonic_time()
        if now < self._next_keepalive:
            return
        self._next_keepalive = now + self._keepalive_s
        for node, conn in list(self._connections.items()):
            if isinstance(node, PeerNode) and conn.state == CONNECTION_STATE.CONNECTED:
                super().send(node, KEEPALIVE)

    # -- strangers: connections that have not proven the password -------------

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:
        guarded = guard_accepted(conn, self._handshake)
        pending = [c for c in self._unknownConnections if not authenticated(c)]
        if len(pending) >= self._handshake.max_connections:
            oldest = min(pending, key=handshake_started)
            log.debug("dropping the oldest of %d unauthenticated Raft connections", len(pending))
            oldest.disconnect()
        super()._onNewIncomingConnection(guarded)

    def _expire_handshakes(self) -> None:
        deadline = time.monotonic() - self._handshake.timeout_s
        for conn in list(self._unknownConnections):
            # An authenticated peer that has not named itself yet gets the same
            # deadline: it needs one more message.
            if handshake_started(conn) < deadline:
                log.debug("dropping a Raft connection that did not finish its handshake")
                conn.disconnect()

    # -- who dials whom --------------------------------------------------------

    def _shouldConnect(self, node: Node) -> bool:
        if not isinstance(node, PeerNode) or node in self._preventConnectNodes:
            return False
        return bool(self._selfIsReadonlyNode or self._selfNode.id > node.id)

    def _sendSelfAddress(self, conn: TcpConnection) -> None:
        # Named "address" by pysyncobj; we announce identity instead.
        if self._selfIsReadonlyNode:
            conn.send(OBSERVER_PREFIX + str(self._observer_id))
        else:
            conn.send(self._selfNode.id)

    # -- the id -> node table used to recognise who dialed in ------------------

    def addNode(self, node: Node) -> None:
        super().addNode(node)
        if isinstance(node, PeerNode):
            self._nodeAddrToNode.pop(node.address, None)
            self._nodeAddrToNode[node.id] = node

    def dropNode(self, node: Node) -> None:
        super().dropNode(node)
        if isinstance(node, PeerNode):
            self._nodeAddrToNode.pop(node.id, None)

    def _onMessageReceived(self, node: Node, message: Any) -> None:
        # Every message of a known peer reaches SyncObj through here.
        if self._contact is not None and isinstance(node, PeerNode):
            self._contact.heard(node.id)
        if message == KEEPALIVE:
            return  # its arrival refreshed the connection's read time: all it is for
        kind = message.get("type") if isinstance(message, dict) else None
        if kind in (PREVOTE_TYPE, PREVOTE_OK_TYPE):
            self._on_prevote(node, kind, message)
            return  # ours alone: pysyncobj never sees a pre-vote
        if kind == "append_entries":
            if self._contact is not None and isinstance(node, PeerNode):
                self._contact.appended(node.id)
            message = self._guard_append(message)
        super()._onMessageReceived(node, message)

    def _on_prevote(self, node: Node, kind: str, message: dict[str, Any]) -> None:
        if self._early is None or not isinstance(node, PeerNode):
            return
        if kind == PREVOTE_TYPE:
            self._early.on_prevote(self._syncObj, node, message)
        else:
            self._early.on_prevote_ok(self._syncObj, node, message, monotonic_time())

    def _guard_append(self, message: dict[str, Any]) -> dict[str, Any]:
        """See append_guard: no truncation of entries matching the leader's."""
        so = self._syncObj
        journal = getattr(so, "_SyncObj__raftLog", None)
        term = getattr(so, "_SyncObj__raftCurrentTerm", None)
        if journal is None or not isinstance(term, int) or len(journal) == 0:
            return message
        guarded = keep_matching_tail(message, journal_entry_at(journal), journal[-1][1], term)
        if guarded is not message:
            log.info(
                "append_entries after index %d re-sends entries this follower holds; "
                "applied after index %d instead (append_guard)",
                message["prevLogIdx"],
                guarded["prevLogIdx"],
            )
        return guarded

    def _onIncomingMessageReceived(self, conn: TcpConnection, message: Any) -> None:
        key_exchange_pending = self._syncObj.encryptor and not conn.sendRandKey
        if not key_exchange_pending and self._is_observer_hello(message):
            self._accept_observer(conn, self._observer_name(message))
            return
        super()._onIncomingMessageReceived(conn, message)

    @staticmethod
    def _is_observer_hello(message: Any) -> bool:
        return isinstance(message, str) and (
            message == _STOCK_READONLY_HELLO or message.startswith(OBSERVER_PREFIX)
        )

    @staticmethod
    def _observer_name(message: str) -> str:
        if message == _STOCK_READONLY_HELLO:
            return "anonymous"
        return message[len(OBSERVER_PREFIX) :] or "anonymous"

    def _accept_observer(self, conn: TcpConnection, observer_id: str) -> None:
        # Mirrors TCPTransport's read-only branch, with a collision-free name.
        name = f"{OBSERVER_PREFIX}{observer_id}#{self._readonlyNodesCounter}"
        self._readonlyNodesCounter += 1
        node = ObserverNode(name, observer_id)
        self._readonlyNodes.add(node)
        self._unknownConnections.discard(conn)
        self._connections[node] = conn
        conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
        self._onReadonlyNodeConnected(node)


def transport_factory(
    observer_id: str | None,
    handshake: HandshakeLimits,
    gate: DurabilityGate | None = None,
    contact: PeerContact | None = None,
    early: EarlyElection | None = None,
) -> Any:
    """The `transportClass` callable SyncObj expects, bound to our observer id,
    limits, gate, the record of when each voter was last heard, and the
    early election's pre-vote."""
    return functools.partial(
        PeerTCPTransport,
        observer_id=observer_id,
        handshake=handshake,
        gate=gate,
        contact=contact,
        early=early,
    )
