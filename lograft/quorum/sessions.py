"""Broker sessions: the active controller's only soft state.

Heartbeat times are not in the metadata log (writing one record per heartbeat
would flood it) and so exist only in the active controller's memory, as an
immutable `BrokerSessions` value that handlers take and return. Nothing else
depends on it: a new active controller starts from `sessions_after_failover`,
which gives every registered broker a full session from the moment it took
over, so a failover never fences a live broker, and a dead one is fenced one
session timeout after the failover at the latest.

Times are milliseconds from a monotonic clock read by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lograft.quorum.image import MetadataImage


def _no_sessions() -> Mapping[int, int]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BrokerSessions:
    last_heartbeat_ms: Mapping[int, int] = field(default_factory=_no_sessions)

    @classmethod
    def starting(cls, broker_ids: Iterable[int], now_ms: int) -> BrokerSessions:
        return cls(MappingProxyType(dict.fromkeys(broker_ids, now_ms)))

    def heartbeat(self, broker_id: int, now_ms: int) -> BrokerSessions:
        times = dict(self.last_heartbeat_ms)
        # max(): a late-delivered heartbeat must not shorten a session.
        times[broker_id] = max(now_ms, times.get(broker_id, now_ms))
        return BrokerSessions(MappingProxyType(times))

    def without(self, broker_id: int) -> BrokerSessions:
        times = dict(self.last_heartbeat_ms)
        times.pop(broker_id, None)
        return BrokerSessions(MappingProxyType(times))

    def alive(self, broker_id: int, now_ms: int, session_timeout_ms: int) -> bool:
        """True while the last heartbeat is at most `session_timeout_ms` old."""
        last = self.last_heartbeat_ms.get(broker_id)
        return last is not None and now_ms <= last + session_timeout_ms


def sessions_after_failover(image: MetadataImage, now_ms: int) -> BrokerSessions:
    """Soft state for a newly active controller: a fresh session for every broker."""
    return BrokerSessions.starting(image.brokers, now_ms)
