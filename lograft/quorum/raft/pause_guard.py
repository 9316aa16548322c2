"""pysyncobj's two timer checks, made blind to a pause that began inside the tick.

`core.absorb_own_pause` runs at the start of each tick: when the tick began
late (this thread was held up), it pushes the follower's election deadline
and the leader's view of its followers' answers past now. That misses a
pause that begins *after* that check and before pysyncobj's own timer
checks, a few dozen bytecodes later in `SyncObj._onTick`:

    if self.__raftElectionDeadline < monotonicTime() ...       # follower: elect
    if self.__lastResponseTime[node] > deadline ...             # leader: step down

A thread holding the GIL (the node's event loop, a collection) can take it
from the Raft thread at any bytecode, so a pause can land there; the check
then reads a clock that moved while this thread could not read its sockets,
and the follower elects (or the leader steps down) for its own pause. This
was seen as a rare failure of tests/unit/quorum/test_raft_own_pause.py on a
loaded machine (the term moved from 1 to 4).

The guard puts the check itself in charge: at the start of each tick the
deadline and every follower's last-answer time are replaced by floats of the
same value that also know when this tick started (`looked_at`). Their
comparison, made with the clock pysyncobj has just read, first asks whether
more than `limit_s` passed since `looked_at`: the code in between is cheap,
so such a gap is a pause of this thread, and the check answers "not
expired" (the deadline) or "heard recently" (an answer). The next tick
starts late, and `absorb_own_pause` then gives the others their fresh
timeout, as for a pause before the tick. A value pysyncobj writes (a new
deadline, an answer received) is a plain float again until the next tick.
"""

from __future__ import annotations

from typing import Any

from pysyncobj import SyncObj


class PauseAwareDeadline(float):
    """A follower's election deadline; `deadline < now` is False after a pause."""

    looked_at: float
    limit_s: float

    def __new__(cls, value: float, looked_at: float, limit_s: float) -> PauseAwareDeadline:
        obj = super().__new__(cls, value)
        obj.looked_at = looked_at
        obj.limit_s = limit_s
        return obj

    def __lt__(self, now: Any) -> bool:
        if isinstance(now, float | int) and now - self.looked_at > self.limit_s:
            return False  # paused since the tick began: the sockets were not read
        return bool(float(self) < now)


class PauseAwareAnswer(float):
    """A follower's last answer time on the leader; `answered > now - fallback` is True
    after a pause (the answers waiting in the socket were not read)."""

    looked_at: float
    limit_s: float
    fallback_s: float

    def __new__(
        cls, value: float, looked_at: float, limit_s: float, fallback_s: float
    ) -> PauseAwareAnswer:
        obj = super().__new__(cls, value)
        obj.looked_at = looked_at
        obj.limit_s = limit_s
        obj.fallback_s = fallback_s
        return obj

    def __gt__(self, deadline: Any) -> bool:
        if (
            isinstance(deadline, float | int)
            and deadline + self.fallback_s - self.looked_at > self.limit_s
        ):
            return True
        return bool(float(self) > deadline)


def arm(so: SyncObj, looked_at: float, limit_s: float, fallback_s: float) -> None:
    """Make this tick's timer checks blind to a pause that begins after `looked_at`."""
    deadline = getattr(so, "_SyncObj__raftElectionDeadline", None)
    if isinstance(deadline, float | int) and deadline != 0:
        so._SyncObj__raftElectionDeadline = PauseAwareDeadline(float(deadline), looked_at, limit_s)
    answered = getattr(so, "_SyncObj__lastResponseTime", None)
    if isinstance(answered, dict):
        for node, at in list(answered.items()):
            answered[node] = PauseAwareAnswer(float(at), looked_at, limit_s, fallback_s)
