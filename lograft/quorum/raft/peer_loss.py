"""A voter whose Raft link dropped: is its process gone?

When pysyncobj stops counting a voter as connected that it counted as
connected at an earlier tick, `PeerLossWatch.tick` (run at the start of
every Raft tick on a voter) probes that voter's Raft port once per loss
(`port_probe.PortProbe`: one non-blocking connect, polled on later ticks,
abandoned after `peer_probe_timeout_ms`). A link that comes back ends the
loss. A link never up (a peer not started yet) is no
loss: nothing is probed. A refusal means nothing listens there any more: the
voter's process is gone (SIGKILL or exit; its kernel answers a connect with
RST at once, on loopback and on a real network). It is recorded in
`PeerContact.refused`, and acted on by:

- `early_election.EarlyElection`: a follower whose leader is gone elects
  soon instead of at its election timeout;
- the active controller: that voter's broker, gone with its process, is
  fenced once its last heartbeat is one and a half heartbeat intervals old unless it
  heartbeated after the refusal, on a new controller (the former leader's)
  as on one that stays (`RaftAdapter.refused_peers`, sessions.py).

A probe that connects while the link stays down is tried again, every
`peer_probe_retry_interval_ms`, up to `peer_probe_retries` more times per
loss: a SIGKILLed process's sockets are not all closed at one instant, and
a peer that notices the dropped connection within a millisecond can reach
the listening socket before it goes (seen on a local cluster: one kill in
three of a restarted node was fenced at the session timeout, 1.6 s, for
want of a refusal). A peer that lives (a proxy, a stopped process) keeps
accepting and costs those few connects per loss.

Every other outcome (the probe still connects after its retries, times
out, fails otherwise) and a link that goes silent without closing are
ambiguous: nothing is recorded, and pysyncobj's timeouts decide as before.
"""

from __future__ import annotations

import logging
from typing import Any

from lograft.quorum.raft.peer_contact import PeerContact
from lograft.quorum.raft.port_probe import PortProbe, ProbeOutcome

log = logging.getLogger(__name__)


class PeerLossWatch:
    """Probes per lost voter link; refusals go to `PeerContact`. Raft thread only."""

    def __init__(
        self,
        contact: PeerContact,
        *,
        probe_timeout_s: float,
        retries: int = 0,
        retry_interval_s: float = 0.0,
    ) -> None:
        self._contact = contact
        self._probe_timeout_s = probe_timeout_s
        self._retries = retries
        self._retry_interval_s = retry_interval_s
        # Voter id -> its probe in flight, and the retries left after it.
        self._probes: dict[str, tuple[PortProbe, int]] = {}
        # Voter id -> (when to probe again, retries left after that one),
        # for a lost link whose last probe connected.
        self._again: dict[str, tuple[float, int]] = {}
        # Voters whose link was up at the last tick: a loss is up -> down.
        self._up: set[str] = set()

    @property
    def probing(self) -> frozenset[str]:
        """Voters with a probe in flight or one more due."""
        return frozenset(self._probes) | frozenset(self._again)

    def tick(self, so: Any, now_s: float) -> None:
        """Start a probe for each newly lost link; settle the probes in flight."""
        nodes = {str(node.id): node for node in getattr(so, "_SyncObj__otherNodes", ())}
        for node in nodes.values():
            self._follow_link(so, node, now_s)
        for peer_id, (at_s, left) in list(self._again.items()):
            if at_s <= now_s and peer_id in nodes:
                del self._again[peer_id]
                self._probe(peer_id, nodes[peer_id], now_s, left)
        for peer_id, (probe, left) in list(self._probes.items()):
            outcome = probe.poll(now_s)
            if outcome is ProbeOutcome.PENDING:
                continue
            del self._probes[peer_id]
            if outcome is ProbeOutcome.REFUSED:
                self._contact.refused(peer_id)
                log.info("Raft port of voter %s refused a connection: its process is gone", peer_id)
            elif outcome is ProbeOutcome.LISTENING and left > 0:
                self._again[peer_id] = (now_s + self._retry_interval_s, left - 1)
                log.info(
                    "Raft port of voter %s accepted a probe while its link is down; "
                    "probing again (%d left)",
                    peer_id,
                    left,
                )

    def close(self) -> None:
        for probe, _left in self._probes.values():
            probe.close()
        self._probes.clear()
        self._again.clear()

    def _follow_link(self, so: Any, node: Any, now_s: float) -> None:
        peer_id = str(node.id)
        if so.isNodeConnected(node):
            self._up.add(peer_id)
            self._again.pop(peer_id, None)
            in_flight = self._probes.pop(peer_id, None)
            if in_flight is not None:
                in_flight[0].close()
            return
        if peer_id not in self._up:
            return  # never up, or lost and probed already
        self._up.discard(peer_id)
        self._probe(peer_id, node, now_s, self._retries)

    def _probe(self, peer_id: str, node: Any, now_s: float, retries_left: int) -> None:
        port = getattr(node, "port", None)
        if isinstance(port, int):
            probe = PortProbe(node.ip, port, now_s, self._probe_timeout_s)
            self._probes[peer_id] = (probe, retries_left)
