"""Leader election and the ISR consequences of brokers going away: pure rules.

Rules (Kafka's, with its "last ISR" kept as an ELR-lite):

- A leader is the first replica, in preferred order, that is in the ISR and
  usable (registered, unfenced, not shutting down).
- Only if the topic allows unclean election, and no ISR member is usable, the
  first usable replica outside the ISR leads, with itself as the whole ISR (it
  may lack committed records: that is what "unclean" means).
- Otherwise the partition goes offline (leader -1).
- Brokers that go away leave every ISR, except that an ISR is never emptied:
  when all its members go, it is kept as it was. Those members held every
  committed record, so when any of them comes back it can lead again without
  loss, and it is the only kind of broker a clean election will pick. The
  members still away leave the ISR as that leader is elected.

So outside these functions, every partition is either led by a usable broker
with only usable brokers in its ISR, or offline with no usable ISR member.

Functions return `PartitionChange` records carrying only what changed, and
nothing at all for a partition that does not change.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from lograft.quorum.image import NO_LEADER, MetadataImage, PartitionState
from lograft.quorum.records import PartitionChange


@dataclass(frozen=True, slots=True)
class Election:
    leader: int  # NO_LEADER when none is eligible
    isr: tuple[int, ...]


def elect_leader(
    replicas: tuple[int, ...], isr: tuple[int, ...], usable: Collection[int], unclean: bool
) -> Election:
    for replica in replicas:
        if replica in isr and replica in usable:
            return Election(replica, isr)
    if unclean:
        for replica in replicas:
            if replica in usable:
                return Election(replica, (replica,))
    return Election(NO_LEADER, isr)


def isr_without(isr: tuple[int, ...], gone: Collection[int]) -> tuple[int, ...]:
    """The ISR minus `gone`, or the ISR unchanged if nobody would be left."""
    kept = tuple(b for b in isr if b not in gone)
    return kept or isr


def partition_change(
    p: PartitionState, isr: tuple[int, ...], leader: int
) -> PartitionChange | None:
    """A record setting `isr` and `leader`, with only the fields that differ."""
    new_isr = None if isr == p.isr else isr
    new_leader = None if leader == p.leader else leader
    if new_isr is None and new_leader is None:
        return None
    return PartitionChange(p.topic_id, p.partition, isr=new_isr, leader=new_leader)


def _without_brokers(
    p: PartitionState, gone: Collection[int], usable: Collection[int], unclean: bool
) -> PartitionChange | None:
    isr = isr_without(p.isr, gone)
    if p.leader != NO_LEADER and p.leader not in gone:
        return partition_change(p, isr, p.leader)
    election = elect_leader(p.replicas, isr, usable, unclean)
    return partition_change(p, election.isr, election.leader)


def changes_without_brokers(
    image: MetadataImage,
    gone: Collection[int],
    usable: Collection[int],
    unclean_topic_ids: Collection[str],
) -> list[PartitionChange]:
    """Changes taking `gone` out of every ISR and leadership (fencing, shutdown).

    `usable` are the brokers that may lead afterwards (it must exclude `gone`).
    """
    assert not set(gone) & set(usable), "a broker going away cannot be usable"
    changes = []
    for p in image.all_partitions():
        if p.leader in gone or any(b in gone for b in p.isr):
            change = _without_brokers(p, gone, usable, p.topic_id in unclean_topic_ids)
            if change is not None:
                changes.append(change)
    return changes


def elect_offline_leaders(
    partitions: Iterable[PartitionState],
    usable: Collection[int],
    unclean_topic_ids: Collection[str],
) -> list[PartitionChange]:
    """Leaders for offline partitions that have an eligible replica now."""
    changes = []
    for p in partitions:
        if not p.offline:
            continue
        election = elect_leader(p.replicas, p.isr, usable, p.topic_id in unclean_topic_ids)
        if election.leader != NO_LEADER:
            # The kept ISR may name members still away; a leader must not wait
            # for them (acks=all), so only the usable ones stay in sync.
            isr = tuple(b for b in election.isr if b in usable)
            change = partition_change(p, isr, election.leader)
            assert change is not None
            changes.append(change)
    return changes


def preferred_leader_change(p: PartitionState, usable: Collection[int]) -> PartitionChange | None:
    """Move leadership back to the preferred replica if it may lead and is in sync."""
    preferred = p.preferred_leader
    if p.leader == preferred or preferred not in p.isr or preferred not in usable:
        return None
    return partition_change(p, p.isr, preferred)
