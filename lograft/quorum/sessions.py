"""Broker sessions: the active controller's only soft state.

Heartbeat times are not in the metadata log (writing one record per heartbeat
would flood it) and so exist only in the active controller's memory, as an
immutable `BrokerSessions` value that handlers take and return. Nothing else
depends on it: a new active controller starts from `sessions_after_failover`,
which gives every registered broker a full session from the moment it took
over, so a failover never fences a live broker, and a dead one is fenced one
session timeout after the failover at the latest.

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
            self, last_heartbeat_ms=MappingProxyType(times), log_ends=MappingProxyType(ends)
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
        """True while the last heartbeat is at most `session_timeout_ms` old."""
        last = self.last_heartbeat_ms.get(broker_id)
        return last is not None and now_ms <= last + session_timeout_ms


def sessions_after_failover(image: MetadataImage, now_ms: int) -> BrokerSessions:
    """Soft state for a newly active controller: a fresh session for every broker."""
    return BrokerSessions.starting(image.brokers, now_ms)
