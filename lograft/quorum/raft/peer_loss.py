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
  fenced at the next duty tick unless it heartbeated after the refusal, and
  a new controller fences the former leader's right after the takeover
  (`RaftAdapter.refused_peers`, sessions.py).

Every other outcome (the probe connects, times out, fails otherwise) and a
link that goes silent without closing are ambiguous: nothing is recorded,
and pysyncobj's timeouts decide as before.
"""

from __future__ import annotations

import logging
from typing import Any

from lograft.quorum.raft.peer_contact import PeerContact
from lograft.quorum.raft.port_probe import PortProbe, ProbeOutcome

log = logging.getLogger(__name__)


class PeerLossWatch:
    """One probe per lost voter link; refusals go to `PeerContact`. Raft thread only."""

    def __init__(self, contact: PeerContact, *, probe_timeout_s: float) -> None:
        self._contact = contact
        self._probe_timeout_s = probe_timeout_s
        # Voter id -> its probe in flight.
        self._probes: dict[str, PortProbe] = {}
        # Voters whose link was up at the last tick: a loss is up -> down.
        self._up: set[str] = set()

    @property
    def probing(self) -> frozenset[str]:
        return frozenset(self._probes)

    def tick(self, so: Any, now_s: float) -> None:
        """Start a probe for each newly lost link; settle the probes in flight."""
        for node in getattr(so, "_SyncObj__otherNodes", ()):
            self._follow_link(so, node, now_s)
        for peer_id, probe in list(self._probes.items()):
            outcome = probe.poll(now_s)
            if outcome is ProbeOutcome.PENDING:
                continue
            del self._probes[peer_id]
            if outcome is ProbeOutcome.REFUSED:
                self._contact.refused(peer_id)
                log.info("Raft port of voter %s refused a connection: its process is gone", peer_id)

    def close(self) -> None:
        for probe in self._probes.values():
            probe.close()
        self._probes.clear()

    def _follow_link(self, so: Any, node: Any, now_s: float) -> None:
        peer_id = str(node.id)
        if so.isNodeConnected(node):
            self._up.add(peer_id)
            probe = self._probes.pop(peer_id, None)
            if probe is not None:
                probe.close()
            return
        if peer_id not in self._up:
            return  # never up, or lost and probed already
        self._up.discard(peer_id)
        port = getattr(node, "port", None)
        if isinstance(port, int):
            self._probes[peer_id] = PortProbe(node.ip, port, now_s, self._probe_timeout_s)
