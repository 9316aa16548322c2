"""Preferred-leader balance: move leadership back to preferred replicas.

After failures, leadership piles up on the brokers that stayed up. A broker's
imbalance ratio is the share of the partitions it is the preferred leader of
(replicas[0]) that someone else leads. When that ratio exceeds
`leader_imbalance_ratio_max` (Kafka's leader.imbalance.per.broker.percentage),
each of those partitions whose preferred replica is in the ISR and usable gets
it back as leader. Moves happen only to in-sync replicas, so they are clean.

When the check runs (`BalanceSchedule`): every
`leader_imbalance_check_interval_ms`, and sooner once the metadata changed
since the last check (a broker back in the ISR of partitions it prefers is
such a change), but never twice within `leader_balance_min_interval_ms`. An
unchanged image gives the same answer, so an idle cluster checks only
periodically; the check's own moves change the image, and the check after
them finds nothing left to move, so each change costs at most two passes
over the image.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.election import preferred_leader_change
from lograft.quorum.image import MetadataImage, PartitionState
from lograft.quorum.records import PartitionChange
from lograft.quorum.result import ControllerResult


def imbalance_ratios(image: MetadataImage) -> dict[int, float]:
    """Per preferred leader: share of its preferred partitions led by another broker."""
    preferred: dict[int, int] = defaultdict(int)
    elsewhere: dict[int, int] = defaultdict(int)
    for p in image.all_partitions():
        preferred[p.preferred_leader] += 1
        if p.leader != p.preferred_leader:
            elsewhere[p.preferred_leader] += 1
    return {b: elsewhere[b] / preferred[b] for b in sorted(preferred)}


def balance_preferred_leaders(
    image: MetadataImage, config: ControllerConfig
) -> ControllerResult[tuple[tuple[str, int], ...]]:
    """Preferred elections for imbalanced brokers. Response: (topic id, partition) moved."""
    ratios = imbalance_ratios(image)
    over = {b for b, ratio in ratios.items() if ratio > config.leader_imbalance_ratio_max}
    usable = set(image.usable_broker_ids())
    changes: list[PartitionChange] = []
    for p in _partitions_of(image, over):
        change = preferred_leader_change(p, usable)
        if change is not None:
            changes.append(change)
        if len(changes) >= config.preferred_elections_per_round_max:
            break
    moved = tuple((c.topic_id, c.partition) for c in changes)
    return ControllerResult(tuple(changes), moved)


@dataclass(slots=True)
class BalanceSchedule:
    """When the next preferred-leader check is due (module doc); times in ms
    of the caller's clock, passed in."""

    # The periodic check: due at or after this.
    periodic_due_ms: int = 0
    # The last check, and the image offset it looked at (None: none yet).
    last_ms: int | None = None
    checked_offset: int | None = None

    def due(self, now_ms: int, image_offset: int, config: ControllerConfig) -> bool:
        if now_ms >= self.periodic_due_ms:
            return True
        if image_offset == self.checked_offset:
            return False
        return (
            self.last_ms is None or now_ms - self.last_ms >= config.leader_balance_min_interval_ms
        )

    def checked(self, now_ms: int, image_offset: int, config: ControllerConfig) -> None:
        """A check ran at `now_ms` on the image at `image_offset`."""
        self.periodic_due_ms = now_ms + config.leader_imbalance_check_interval_ms
        self.last_ms = now_ms
        self.checked_offset = image_offset


def _partitions_of(image: MetadataImage, preferred_leaders: set[int]) -> list[PartitionState]:
    return [p for p in image.all_partitions() if p.preferred_leader in preferred_leaders]
