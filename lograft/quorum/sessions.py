"""Broker sessions: the active controller's only soft state.

Heartbeat times are not in the metadata log (writing one record per heartbeat
would flood it) and so exist only in the active controller's memory, as an
immutable `BrokerSessions` value that handlers take and return. Nothing else
depends on it: a new active controller starts from `sessions_after_failover`,
which gives every registered broker a full session from the moment it took
over, except the broker whose node was the Raft leader before it: that one's
session is dated from the last Raft message this node received from that
leader (never later than now). A broker that died with the former controller
is so fenced as soon as its real session has lapsed, not one session after
the election (which came at least `election_timeout_min_ms` after the last
message, itself longer than a session). Every other broker may have heartbeated the old
controller a moment before it died, so it keeps a full session to find the
new one; a failover never fences them.

Sooner still, one rule for every voter: a broker whose node's Raft port
refused a connection after its last Raft message (raft/peer_loss.py probes
a voter's port when its link drops; `RaftAdapter.refused_peers`) is *proven
gone* while no heartbeat of it arrived after that refusal and its last one
is more than one and a half heartbeat intervals old
(`ControllerConfig.refused_overdue_ms`, 750 ms at the defaults): its
session is over then and the next duty tick fences it, not
`broker_session_timeout_ms` after its last heartbeat. Both signals must
agree: a refusal alone can come from a proxy or a REJECT rule in front of a
live process, and heartbeats that still arrive say it lives. The active controller
copies the refusals into `refused_ms` every duty tick and runs the fence
check at the tick that finds such a broker unfenced; a new controller starts
from them (`sessions_after_failover` dates a refused broker's session no
later than its refusal, so the first fence check after the barrier fences
it). A heartbeat after the refusal ends the proof: a restarted broker
(which also speaks Raft again, dropping the refusal) or a live one whose
Raft port only looked closed (a proxy that refuses while the process
lives) keeps its session. Brokers whose node is not a voter
(never probed) keep the session timeout alone.

Why dating that one broker is safe: fencing only moves partition leadership
to other in-sync replicas (an acks=all write is on every ISR member, so none
is lost) and a live broker is unfenced by its next heartbeat. And the node it
runs on sent this node nothing for an election timeout, 2 s by default, more
than a session (1.5 s): the broker is fenced only for a silence or pause of
its node's Raft thread longer than its own session would allow (its broker
and its Raft share one process; only a cut of the Raft link alone while its
HTTP heartbeats still get through would fence a live broker, once).

It also holds the log ends brokers report for partitions that await an
election by log end (unclean recovery, election.recover_by_log_end, or an
unclean election, election.elect_unclean_by_log_end), and since when each
partition has awaited its unclean election: soft state too, since a broker
reports again every heartbeat interval for as long as such a partition stays
offline, so a new active controller has them again within one interval (and
starts the wait for reports afresh).

Times are milliseconds from a monotonic clock read by the caller; the
refusals' times come from the Raft thread's reading of the same clock
(`time.monotonic_ns() // 1_000_000`, raft/peer_contact.py), so they compare
with heartbeat times only when the caller reads that clock (the runtime's
default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from lograft.quorum.election import LogEnd, LogEnds
from lograft.quorum.image import MetadataImage


def _no_sessions() -> Mapping[int, int]:
    return MappingProxyType({})


def _no_log_ends() -> LogEnds:
    return MappingProxyType({})


def _no_waits() -> Mapping[tuple[str, int], int]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BrokerSessions:
    last_heartbeat_ms: Mapping[int, int] = field(default_factory=_no_sessions)
    log_ends: LogEnds = field(default_factory=_no_log_ends)
    # (topic id, partition) -> when (now_ms) this controller first saw it
    # awaiting an unclean election: the wait for reports is counted from it.
    unclean_since: Mapping[tuple[str, int], int] = field(default_factory=_no_waits)
    # Broker id -> when its node's Raft port refused a connection after its
    # last Raft message (monotonic ms, the clock heartbeats are read with).
    refused_ms: Mapping[int, int] = field(default_factory=_no_sessions)

    @classmethod
    def starting(cls, broker_ids: Iterable[int], now_ms: int) -> BrokerSessions:
        return cls(MappingProxyType(dict.fromkeys(broker_ids, now_ms)))

    def heartbeat(self, broker_id: int, now_ms: int) -> BrokerSessions:
        times = dict(self.last_heartbeat_ms)
        # max(): a late-delivered heartbeat must not shorten a session.
        times[broker_id] = max(now_ms, times.get(broker_id, now_ms))
        return replace(self, last_heartbeat_ms=MappingProxyType(times))

    def without(self, broker_id: int) -> BrokerSessions:
        times = dict(self.last_heartbeat_ms)
        times.pop(broker_id, None)
        ends = {
            key: MappingProxyType({b: e for b, e in per.items() if b != broker_id})
            for key, per in self.log_ends.items()
        }
        return replace(
            self,
            last_heartbeat_ms=MappingProxyType(times),
            log_ends=MappingProxyType(ends),
            refused_ms=MappingProxyType(
                {b: t for b, t in self.refused_ms.items() if b != broker_id}
            ),
        )

    def with_refusals(self, refused_ms: Mapping[int, int]) -> BrokerSessions:
        """The refusals now known (broker id -> when its Raft port refused);
        those no longer known (the voter spoke again) forgotten."""
        if dict(refused_ms) == dict(self.refused_ms):
            return self
        return replace(self, refused_ms=MappingProxyType(dict(refused_ms)))

    def proven_gone(self, broker_id: int, now_ms: int, overdue_ms: int) -> bool:
        """Its node's Raft port refused, no heartbeat arrived since, and its
        last heartbeat is more than `overdue_ms` old
        (`ControllerConfig.refused_overdue_ms`)."""
        refused = self.refused_ms.get(broker_id)
        if refused is None:
            return False
        last = self.last_heartbeat_ms.get(broker_id)
        if last is None:
            return True
        return last <= refused and now_ms - last > overdue_ms

    def with_log_ends(
        self, broker_id: int, ends: Mapping[tuple[str, int], LogEnd], keep: set[tuple[str, int]]
    ) -> BrokerSessions:
        """`broker_id`'s reports added; only partitions in `keep` (those that
        still need recovery) are remembered, so the map cannot grow past them."""
        merged: dict[tuple[str, int], dict[int, LogEnd]] = {
            key: dict(per) for key, per in self.log_ends.items() if key in keep
        }
        for key, end in ends.items():
            if key in keep:
                merged.setdefault(key, {})[broker_id] = end
        frozen = {key: MappingProxyType(per) for key, per in merged.items()}
        return replace(self, log_ends=MappingProxyType(frozen))

    def with_unclean_waits(
        self, awaiting: Iterable[tuple[str, int]], now_ms: int
    ) -> BrokerSessions:
        """The partitions `awaiting` an unclean election, each with the time
        it was first seen so (now, for those new); the others forgotten."""
        since = {key: self.unclean_since.get(key, now_ms) for key in awaiting}
        if since == dict(self.unclean_since):
            return self
        return replace(self, unclean_since=MappingProxyType(since))

    def alive(self, broker_id: int, now_ms: int, session_timeout_ms: int, overdue_ms: int) -> bool:
        """True while the last heartbeat is at most `session_timeout_ms` old
        and the broker is not `proven_gone` (with `overdue_ms`)."""
        if self.proven_gone(broker_id, now_ms, overdue_ms):
            return False
        last = self.last_heartbeat_ms.get(broker_id)
        return last is not None and now_ms <= last + session_timeout_ms


def sessions_after_failover(
    image: MetadataImage,
    now_ms: int,
    last_contact_ms: Mapping[int, int] | None = None,
    refused_ms: Mapping[int, int] | None = None,
) -> BrokerSessions:
    """Soft state for a newly active controller: every broker's session starts
    now, except those in `last_contact_ms` (broker id -> the last time it was
    proven alive), which start then, and those in `refused_ms` (broker id ->
    when its node's Raft port refused), which start no later than the
    refusal, so they are `proven_gone` once that start is overdue (nothing of
    theirs is heard after it).
    Never later than now; ids not registered are ignored."""
    contact = last_contact_ms or {}
    refused = {b: t for b, t in (refused_ms or {}).items() if b in image.brokers}
    times = {
        broker_id: min(now_ms, contact.get(broker_id, now_ms), refused.get(broker_id, now_ms))
        for broker_id in image.brokers
    }
    return BrokerSessions(MappingProxyType(times), refused_ms=MappingProxyType(refused))
