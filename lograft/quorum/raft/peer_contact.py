"""When this node last received a Raft message from each voter.

A follower hears from a live leader every `heartbeat_interval_ms` (100 ms),
so the time of the last message from the former leader bounds when that
node was last seen alive. A newly active controller uses it to date the
broker session of the node that was the Raft leader before it
(`controller_runtime`, `sessions.sessions_after_failover`): a broker that died
with the former controller is then fenced as soon as its real session has
lapsed, instead of one whole session after the election.

Times are milliseconds of `time.monotonic_ns() // 1_000_000`, the clock the
controller runtime reads. A message counts when the Raft thread reads it, not
when it was sent, so a late read only makes a node look alive later (never
fences sooner). Written on the Raft thread only; read from any thread (one
dict item assignment of an int is atomic; readers copy nothing else).
"""

from __future__ import annotations

import time


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class PeerContact:
    """Voter id -> monotonic ms of the last Raft message received from it."""

    def __init__(self) -> None:
        self._last_ms: dict[str, int] = {}

    def heard(self, peer_id: str, now_ms: int | None = None) -> None:
        self._last_ms[peer_id] = monotonic_ms() if now_ms is None else now_ms

    def last_heard_ms(self, peer_id: str) -> int | None:
        """None if nothing was received from `peer_id` since this process started."""
        return self._last_ms.get(peer_id)
