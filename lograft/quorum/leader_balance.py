"""Preferred-leader balance: move leadership back to preferred replicas.

After failures, leadership piles up on the brokers that stayed up. A broker's
imbalance ratio is the share of the partitions it is the preferred leader of
(replicas[0]) that someone else leads. When that ratio exceeds
`leader_imbalance_ratio_max` (Kafka's leader.imbalance.per.broker.percentage),
each of those partitions whose preferred replica is in the ISR and usable gets
it back as leader. Moves happen only to in-sync replicas, so they are clean.
"""

from __future__ import annotations

from collections import defaultdict

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


def _partitions_of(image: MetadataImage, preferred_leaders: set[int]) -> list[PartitionState]:
    return [p for p in image.all_partitions() if p.preferred_leader in preferred_leaders]
