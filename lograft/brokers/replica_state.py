"""What a partition leader knows of each follower, updated on every fetch.

Kafka's `Replica.updateFetchStateOrThrow` semantics for `last_caught_up_ms`:
a follower is caught up at the time of a fetch whose offset reaches the
leader's LEO *at that fetch*; and a fetch whose offset reaches the leader's
LEO at the *previous* fetch proves it was caught up at the previous fetch's
time. The second rule keeps a follower under steady load in the ISR although
its fetch offset never equals the leader's moving LEO.

Invariants: `last_caught_up_ms` and `last_fetch_ms` never decrease; a
follower's fetch offset never exceeds the leader's LEO at that fetch (the
fetch decision refuses such offsets first). Time is passed in, never read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from lograft.errors import NotLeaderOrFollowerError

# Kafka's replica.lag.time.max.ms. A local lograft cluster may configure less
# (seconds) so that tests see ISR changes quickly.
REPLICA_LAG_TIME_MAX_MS = 30_000

UNKNOWN_OFFSET = -1


@dataclass(frozen=True, slots=True)
class FollowerState:
    """`leo` is the follower's last fetch offset (its LEO), -1 until its first
    fetch from this leader; `durable` is what its last fetch said it has
    fsynced (at most `leo`), -1 when unknown."""

    leo: int
    last_caught_up_ms: int
    last_fetch_ms: int
    last_fetch_leader_leo: int
    durable: int = UNKNOWN_OFFSET


class FollowerStateTracker:
    """The leader's view of its followers for one partition and one leader
    epoch. Create it (or call `become_leader`) on every leadership change."""

    def __init__(self, leader_id: int) -> None:
        self.leader_id = leader_id
        self._states: dict[int, FollowerState] = {}

    def become_leader(self, replicas: Iterable[int], isr: Collection[int], now_ms: int) -> None:
        """Kafka's resetReplicaState for a new leader: LEOs unknown until each
        follower fetches; ISR followers count as caught up now (a grace period
        of one lag time to make their first fetch), the others at time 0 so
        they are not taken for in sync."""
        self._states = {
            r: FollowerState(UNKNOWN_OFFSET, now_ms if r in isr else 0, 0, UNKNOWN_OFFSET)
            for r in replicas
            if r != self.leader_id
        }

    def set_replicas(self, replicas: Iterable[int]) -> None:
        """A reassignment changed the replica set: drop removed followers, add
        new ones as never caught up."""
        wanted = {r for r in replicas if r != self.leader_id}
        self._states = {
            r: self._states.get(r, FollowerState(UNKNOWN_OFFSET, 0, 0, UNKNOWN_OFFSET))
            for r in sorted(wanted)
        }

    def on_fetch(
        self,
        broker_id: int,
        fetch_offset: int,
        leader_leo_at_fetch: int,
        now_ms: int,
        durable_offset: int = UNKNOWN_OFFSET,
    ) -> FollowerState:
        """Record a follower's fetch that the fetch decision accepted (not
        one answered with a diverging epoch or an error). `durable_offset`
        (from the network) is held to [-1, fetch_offset]: a follower cannot
        have fsynced what it does not hold."""
        state = self._states.get(broker_id)
        if state is None:
            raise NotLeaderOrFollowerError(
                f"broker {broker_id} is not a follower of this partition", broker_id=broker_id
            )
        if not 0 <= fetch_offset <= leader_leo_at_fetch:
            raise ValueError(
                f"follower {broker_id} fetch offset {fetch_offset} outside [0, leader LEO "
                f"{leader_leo_at_fetch}]"
            )
        caught_up = state.last_caught_up_ms
        if fetch_offset >= leader_leo_at_fetch:
            caught_up = max(caught_up, now_ms)
        elif fetch_offset >= state.last_fetch_leader_leo >= 0:
            caught_up = max(caught_up, state.last_fetch_ms)
        new = FollowerState(
            leo=fetch_offset,
            last_caught_up_ms=caught_up,
            last_fetch_ms=max(state.last_fetch_ms, now_ms),
            # The leader's LEO never drops while it leads; max() keeps a
            # reordered report from moving it back.
            last_fetch_leader_leo=max(state.last_fetch_leader_leo, leader_leo_at_fetch),
            durable=min(durable_offset, fetch_offset) if durable_offset >= 0 else UNKNOWN_OFFSET,
        )
        self._states[broker_id] = new
        return new

    def state(self, broker_id: int) -> FollowerState:
        return self._states[broker_id]

    def states(self) -> Mapping[int, FollowerState]:
        return MappingProxyType(self._states)

    def follower_leos(self, members: Iterable[int]) -> dict[int, int]:
        """LEOs of the given followers (e.g. the ISR) for the HW computation;
        the leader, if listed, is skipped."""
        return {r: self._states[r].leo for r in members if r != self.leader_id}

    def follower_durables(self, members: Iterable[int]) -> dict[int, int]:
        """Durable offsets of the given followers (-1: unknown), for the HW
        under `flush_policy = group_commit`; the leader, if listed, is skipped."""
        return {r: self._states[r].durable for r in members if r != self.leader_id}
