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

Sooner still: when this node found the former leader's Raft port refusing
connections after its last message (`RaftAdapter.peer_gone`, raft/peer_loss.py),
that process is gone, and its broker with it. The new controller then starts
that broker as `gone`: its session is over at once and the first fence check,
right after the barrier, fences it (not `broker_session_timeout_ms` after its
last message, which an early election, a few hundred ms after the kill, would
still have to wait for). A broker in `gone` that heartbeats after all (it
cannot, with its process gone; a restarted one registers a new incarnation)
leaves `gone` at that heartbeat.

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

Times are milliseconds from a monotonic clock read by the caller.
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
    # Brokers proven dead (their node's Raft port refused): no session at all.
    gone: frozenset[int] = frozenset()

    @classmethod
    def starting(cls, broker_ids: Iterable[int], now_ms: int) -> BrokerSessions:
        return cls(MappingProxyType(dict.fromkeys(broker_ids, now_ms)))

    def heartbeat(self, broker_id: int, now_ms: int) -> BrokerSessions:
        times = dict(self.last_heartbeat_ms)
        # max(): a late-delivered heartbeat must not shorten a session.
        times[broker_id] = max(now_ms, times.get(broker_id, now_ms))
        return replace(
            self, last_heartbeat_ms=MappingProxyType(times), gone=self.gone - {broker_id}
        )

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
            gone=self.gone - {broker_id},
        )

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

    def alive(self, broker_id: int, now_ms: int, session_timeout_ms: int) -> bool:
        """True while the last heartbeat is at most `session_timeout_ms` old
        and the broker is not known `gone`."""
        if broker_id in self.gone:
            return False
        last = self.last_heartbeat_ms.get(broker_id)
        return last is not None and now_ms <= last + session_timeout_ms


def sessions_after_failover(
    image: MetadataImage,
    now_ms: int,
    last_contact_ms: Mapping[int, int] | None = None,
    gone: Iterable[int] = (),
) -> BrokerSessions:
    """Soft state for a newly active controller: every broker's session starts
    now, except those in `last_contact_ms` (broker id -> the last time it was
    proven alive), which start then (never later than now), and those `gone`
    (proven dead), whose session is over."""
    contact = last_contact_ms or {}
    times = {broker_id: min(now_ms, contact.get(broker_id, now_ms)) for broker_id in image.brokers}
    dead = frozenset(b for b in gone if b in image.brokers)
    return BrokerSessions(MappingProxyType(times), gone=dead)
