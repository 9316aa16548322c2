"""When this node last received a Raft message from each voter, and which
voters' Raft ports were found closed since.

A follower hears from a live leader every `heartbeat_interval_ms` (100 ms),
so the time of the last message from the former leader bounds when that
node was last seen alive. A newly active controller uses it to date the
broker session of the node that was the Raft leader before it
(`controller_runtime`, `sessions.sessions_after_failover`): a broker that died
with the former controller is then fenced as soon as its real session has
lapsed, instead of one whole session after the election.

A refusal (`refused`, set by `peer_loss.PeerLossWatch` when a probe of a
voter's Raft port after its link dropped met ECONNREFUSED) is stronger: that
node's process is gone, so its broker, in the same process, is gone too. It
counts only while nothing has been received from the voter since
(`refused_since_heard`, `refusals`): a restarted node is alive again at its
first message. The active controller reads `refusals` every duty tick and
fences such a voter's broker unless it heartbeated after the refusal
(sessions.py); a new controller reads it at the takeover.

The time of the last `append_entries` from each voter is kept apart
(`last_appended_ms`): only a leader sends those, so it says whether this
follower still hears from its leader (early_election.py, the pre-vote), which
the keepalives every voter sends cannot say.

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
        self._appended_ms: dict[str, int] = {}
        self._refused_ms: dict[str, int] = {}

    def heard(self, peer_id: str, now_ms: int | None = None) -> None:
        self._last_ms[peer_id] = monotonic_ms() if now_ms is None else now_ms

    def appended(self, peer_id: str, now_ms: int | None = None) -> None:
        """`peer_id` sent an append_entries (it believes it leads)."""
        self._appended_ms[peer_id] = monotonic_ms() if now_ms is None else now_ms

    def refused(self, peer_id: str, now_ms: int | None = None) -> None:
        """A connect to `peer_id`'s Raft port was refused: nothing listens there."""
        self._refused_ms[peer_id] = monotonic_ms() if now_ms is None else now_ms

    def last_heard_ms(self, peer_id: str) -> int | None:
        """None if nothing was received from `peer_id` since this process started."""
        return self._last_ms.get(peer_id)

    def last_appended_ms(self, peer_id: str) -> int | None:
        """None if `peer_id` sent no append_entries since this process started."""
        return self._appended_ms.get(peer_id)

    def refused_since_heard(self, peer_id: str) -> bool:
        """`peer_id`'s Raft port refused a connect after its last message here."""
        refused = self._refused_ms.get(peer_id)
        if refused is None:
            return False
        heard = self._last_ms.get(peer_id)
        return heard is None or refused >= heard

    def refusals(self) -> dict[str, int]:
        """{voter id: when its port refused} for every voter refused after its
        last message here. Read from other threads: dict() copies each map in
        one step under the GIL (str keys, int values: no Python code runs)."""
        refused, heard = dict(self._refused_ms), dict(self._last_ms)
        return {peer: at for peer, at in refused.items() if peer not in heard or at >= heard[peer]}
