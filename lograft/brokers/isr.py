"""Which followers leave or join the in-sync replica set (pure functions).

The leader proposes the change to the controller (AlterPartition); these
functions only decide who. Kafka's rules:

- shrink: an ISR follower is out of sync when its LEO differs from the
  leader's LEO and it has not been caught up (see `replica_state`) within
  `replica_lag_time_max_ms`. Kafka's `isCaughtUp` is
  `leo == leader_leo or now - last_caught_up <= lag`, so exactly `lag` ms is
  still in sync. The leader never leaves its own ISR.
- expand: an assigned, eligible replica outside the ISR joins once its LEO is
  at least the HW (so the HW computed over the larger ISR does not go back)
  and at least the start offset of the leader's current epoch (so it has
  truncated to this leader's log and copied from it), and it is caught up by
  the shrink rule's own test. Kafka checks a join only when that follower
  fetches; the leader here checks every follower's last known state whenever
  the partition is checked, so without the last condition a follower that
  stopped fetching would be proposed back from its stale state as soon as it
  left: the HW does not move while the ISR is below min_insync_replicas, so
  its old LEO stays "at least the HW", and the ISR would flap out and in
  every AlterPartition round trip while it is gone. Joining only what the
  shrink rule would keep makes the two rules agree: no join is undone by the
  next check.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from lograft.brokers.replica_state import REPLICA_LAG_TIME_MAX_MS, FollowerState


def is_caught_up(
    state: FollowerState, leader_leo: int, now_ms: int, replica_lag_time_max_ms: int
) -> bool:
    return state.leo == leader_leo or now_ms - state.last_caught_up_ms <= replica_lag_time_max_ms


def isr_shrink_candidates(
    isr: Iterable[int],
    follower_states: Mapping[int, FollowerState],
    leader_leo: int,
    now_ms: int,
    leader_id: int,
    replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
) -> frozenset[int]:
    """ISR followers to remove. A member without a state is a bug in the
    caller (the tracker holds every assigned follower) and raises."""
    out = set()
    for r in isr:
        if r == leader_id:
            continue
        state = follower_states.get(r)
        if state is None:
            raise ValueError(f"ISR member {r} has no follower state")
        if not is_caught_up(state, leader_leo, now_ms, replica_lag_time_max_ms):
            out.add(r)
    return frozenset(out)


def isr_expand_candidates(
    isr: Collection[int],
    replicas: Iterable[int],
    follower_states: Mapping[int, FollowerState],
    high_watermark: int,
    leader_epoch_start_offset: int,
    leader_id: int,
    ineligible: Collection[int] = (),
    *,
    leader_leo: int,
    now_ms: int,
    replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
) -> frozenset[int]:
    """Assigned replicas outside the ISR that may join. `ineligible` holds
    brokers the metadata says are fenced or shutting down (Kafka's
    isReplicaIsrEligible); the controller checks again, this only avoids
    proposals it would refuse."""
    joining = set()
    for r in replicas:
        if r == leader_id or r in isr or r in ineligible:
            continue
        state = follower_states.get(r)
        if state is None:
            continue
        if (
            state.leo >= high_watermark
            and state.leo >= leader_epoch_start_offset
            and is_caught_up(state, leader_leo, now_ms, replica_lag_time_max_ms)
        ):
            joining.add(r)
    return frozenset(joining)
