"""Leader election, eligible leader replicas and the ISR consequences of
brokers going away: pure rules.

Rules (Kafka's KIP-966, with lograft's "kept ISR"):

- A leader is the first replica, in preferred order, that is in the ISR and
  usable (registered, unfenced, not shutting down).
- Else the first usable replica of the ELR (eligible leader replicas, below)
  leads, with itself as the whole ISR: it holds every committed record, so
  this election is clean.
- Only if the topic allows unclean election, and no ISR or ELR member is
  usable, a usable replica outside both leads, with itself as the whole ISR
  (it may lack committed records: that is what "unclean" means). When only
  one replica is usable it leads at once; when several are, the one with the
  longest log (`elect_unclean_by_log_end`, KIP-966's unclean recovery among
  the replicas present), once each has reported its log end or the wait for
  reports is over; the partition is offline meanwhile.
- Otherwise the partition goes offline (leader -1), and its last leader is
  kept as `last_known_leader`.
- Brokers that go away leave every ISR, except that an ISR is never emptied
  by their going: when all its members go, it is kept as it was. Those
  members held every committed record, so when any of them comes back it can
  lead again without loss. The members still away leave the ISR as that
  leader is elected (into the ELR, below).

The ELR (`elr_after`, Kafka's maybePopulateTargetElr): whenever the ISR
changes to fewer than the topic's `min_insync_replicas` members, every
replica that was in the ISR or ELR and is not in the new ISR is in the ELR;
once the ISR has `min_insync_replicas` members again the ELR is empty. It is
sound because a leader's high watermark does not move while its ISR is
smaller than `min_insync_replicas` (lograft/brokers/high_watermark.py): a
replica that left the ISR then already held everything below the HW, and the
HW has not moved since. A broker that registers after an unclean shutdown
(`changes_after_unclean_shutdown`) may have lost records it held (unflushed
writes under `flush_policy = none`), so it leaves every ELR, and the kept
ISR of every offline partition (which may then be empty): it is electable
cleanly again only after it has rejoined an ISR by catching up with a leader.
Topics that fsync before acknowledging (flush_policy group_commit or
every_batch) are exempt: an unclean shutdown took nothing acknowledged.

A partition left with an empty ISR and ELR that way recovers by log end
(`elect_by_log_end`, KIP-966's balanced unclean recovery): once every replica
has reported where its log ends, the longest leads. A topic that allows
unclean election does not wait for every replica: the longest log among the
usable ones leads (`elect_unclean_by_log_end`).

So outside these functions, every partition is either led by a usable broker
with only usable brokers in its ISR, or offline with no usable ISR or ELR
member.

Functions return `PartitionChange` records carrying only what changed, and
nothing at all for a partition that does not change.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from lograft.quorum.image import NO_LEADER, PartitionState
from lograft.quorum.records import PartitionChange

# The broker's default `min_insync_replicas` (lograft/brokers/high_watermark.py),
# capped by the replication factor as the broker caps it (replica_manager.py).
DEFAULT_MIN_INSYNC_REPLICAS = 2

# topic id -> the topic's effective min_insync_replicas, where it is set.
MinIsr = Mapping[str, int]
_NO_MIN_ISR: MinIsr = MappingProxyType({})


class _Partitions(Protocol):
    def all_partitions(self) -> Iterable[PartitionState]: ...


def min_isr_of(p: PartitionState, min_isr: MinIsr) -> int:
    """`p`'s min_insync_replicas: its topic's setting, else the broker default,
    never more than the replication factor."""
    configured = min_isr.get(p.topic_id)
    if configured is not None:
        return configured
    return min(DEFAULT_MIN_INSYNC_REPLICAS, len(p.replicas))


@dataclass(frozen=True, slots=True)
class Election:
    leader: int  # NO_LEADER when none is eligible
    isr: tuple[int, ...]
    from_elr: bool = False
    unclean: bool = False


def elect_leader(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    usable: Collection[int],
    unclean: bool,
    *,
    elr: tuple[int, ...] = (),
    last_known_leader: int = NO_LEADER,
) -> Election:
    for replica in replicas:
        if replica in isr and replica in usable:
            return Election(replica, isr)
    for replica in replicas:
        if replica in elr and replica in usable:
            return Election(replica, (replica,), from_elr=True)
    if unclean:
        present = [r for r in replicas if r in usable]
        # Alone, it is the longest log present; several wait for their log
        # ends (elect_unclean_by_log_end) so the longest one leads.
        if len(present) == 1:
            return Election(present[0], (present[0],), unclean=True)
    return Election(NO_LEADER, isr)


def isr_without(isr: tuple[int, ...], gone: Collection[int]) -> tuple[int, ...]:
    """The ISR minus `gone`, or the ISR unchanged if nobody would be left."""
    kept = tuple(b for b in isr if b not in gone)
    return kept or isr


def elr_after(
    p: PartitionState,
    isr: tuple[int, ...],
    min_isr: int,
    lossy: Collection[int] = (),
) -> tuple[int, ...]:
    """The ELR once `p`'s ISR is `isr`; `lossy` brokers may have lost records."""
    if len(isr) >= min_isr:
        return ()
    held = {*p.elr, *p.isr}
    return tuple(r for r in p.replicas if r in held and r not in isr and r not in lossy)


def partition_change(
    p: PartitionState,
    isr: tuple[int, ...],
    leader: int,
    *,
    elr: tuple[int, ...] | None = None,
    last_known_leader: int | None = None,
) -> PartitionChange | None:
    """A record setting `isr`, `leader` (and `elr`, `last_known_leader` when
    given), with only the fields that differ."""
    new_isr = None if isr == p.isr else isr
    new_leader = None if leader == p.leader else leader
    new_elr = None if elr is None or elr == p.elr else elr
    new_last = (
        None
        if last_known_leader is None or last_known_leader == p.last_known_leader
        else last_known_leader
    )
    if new_isr is None and new_leader is None and new_elr is None and new_last is None:
        return None
    return PartitionChange(
        p.topic_id,
        p.partition,
        isr=new_isr,
        leader=new_leader,
        elr=new_elr,
        last_known_leader=new_last,
    )


def decide(
    p: PartitionState,
    isr: tuple[int, ...],
    usable: Collection[int],
    unclean: bool,
    min_isr: int,
) -> PartitionChange | None:
    """`p` with ISR `isr`: its leader kept if still in it, else elected; the
    ELR and last known leader that go with the outcome."""
    if p.leader in isr and p.leader in usable:
        elr = elr_after(p, isr, min_isr)
        return partition_change(p, isr, p.leader, elr=elr, last_known_leader=NO_LEADER)
    election = elect_leader(
        p.replicas, isr, usable, unclean, elr=p.elr, last_known_leader=p.last_known_leader
    )
    if election.leader == NO_LEADER:
        last = p.leader if p.leader != NO_LEADER else p.last_known_leader
        elr = elr_after(p, election.isr, min_isr)
        return partition_change(p, election.isr, NO_LEADER, elr=elr, last_known_leader=last)
    if election.unclean:
        return partition_change(
            p, election.isr, election.leader, elr=(), last_known_leader=NO_LEADER
        )
    # A kept ISR may name members still away; a leader must not wait for them
    # (acks=all), so only the usable ones stay in sync. Those left out held
    # every committed record: the ELR keeps them while the ISR is short.
    new_isr = tuple(b for b in election.isr if b in usable)
    elr = elr_after(p, new_isr, min_isr)
    return partition_change(p, new_isr, election.leader, elr=elr, last_known_leader=NO_LEADER)


def changes_without_brokers(
    image: _Partitions,
    gone: Collection[int],
    usable: Collection[int],
    unclean_topic_ids: Collection[str],
    min_isr: MinIsr = _NO_MIN_ISR,
) -> list[PartitionChange]:
    """Changes taking `gone` out of every ISR and leadership (fencing, shutdown).

    `usable` are the brokers that may lead afterwards (it must exclude `gone`).
    """
    assert not set(gone) & set(usable), "a broker going away cannot be usable"
    changes = []
    for p in image.all_partitions():
        if p.leader in gone or any(b in gone for b in p.isr):
            isr = isr_without(p.isr, gone)
            change = decide(p, isr, usable, p.topic_id in unclean_topic_ids, min_isr_of(p, min_isr))
            if change is not None:
                changes.append(change)
    return changes


def elect_offline_leaders(
    partitions: Iterable[PartitionState],
    usable: Collection[int],
    unclean_topic_ids: Collection[str],
    min_isr: MinIsr = _NO_MIN_ISR,
) -> list[PartitionChange]:
    """Leaders for offline partitions that have an eligible replica now."""
    changes = []
    for p in partitions:
        if not p.offline:
            continue
        unclean = p.topic_id in unclean_topic_ids
        change = decide(p, p.isr, usable, unclean, min_isr_of(p, min_isr))
        if change is not None and change.leader is not None:
            changes.append(change)
    return changes


def changes_after_unclean_shutdown(
    partitions: Iterable[PartitionState],
    broker_id: int,
    fsynced_topic_ids: Collection[str] = frozenset(),
) -> list[PartitionChange]:
    """`broker_id` registered after an unclean shutdown: its logs may lack
    records it had acknowledged, so it leaves every ELR and the kept ISR of
    every offline partition. (It is in no other ISR: it was fenced, or left
    them as it re-registered.) The last known leader stays: only an unclean
    election uses it.

    Topics in `fsynced_topic_ids` (flush_policy group_commit or every_batch)
    are left alone: a member of their ISR had fsynced every record below the
    high watermark before the leader acknowledged it, so no shutdown, clean or
    not, can have taken an acknowledged record from it."""
    changes = []
    for p in partitions:
        if p.topic_id in fsynced_topic_ids:
            continue
        in_kept_isr = p.offline and broker_id in p.isr
        if broker_id not in p.elr and not in_kept_isr:
            continue
        isr = tuple(b for b in p.isr if b != broker_id)
        elr = tuple(b for b in p.elr if b != broker_id)
        change = partition_change(p, isr, p.leader, elr=elr)
        assert change is not None
        changes.append(change)
    return changes


@dataclass(frozen=True, slots=True)
class LogEnd:
    """Where a replica's log ends, as its broker reported it: the epoch of its
    last batch (-1: an empty log) and its log end offset. `broker_epoch` is the
    incarnation that reported it; a report of an older incarnation is void."""

    broker_epoch: int
    last_epoch: int
    end_offset: int

    def length_key(self) -> tuple[int, int]:
        # Kafka's unclean recovery compares (last epoch, end offset): a later
        # epoch wins even over a longer log of an earlier one, whose tail the
        # later leader never had.
        return (self.last_epoch, self.end_offset)


# (topic id, partition) -> broker id -> its replica's reported log end.
LogEnds = Mapping[tuple[str, int], Mapping[int, LogEnd]]


def needs_log_end_recovery(p: PartitionState) -> bool:
    """Offline with nobody left who is known to hold every committed record:
    unclean shutdowns emptied both its kept ISR and its ELR."""
    return p.offline and not p.isr and not p.elr


def elect_by_log_end(
    p: PartitionState, usable: Collection[int], epochs: Mapping[int, int], reports: LogEnds
) -> PartitionChange | None:
    """KIP-966's unclean recovery, lograft's only ("balanced") strategy, for a
    partition that `needs_log_end_recovery`: once EVERY replica is usable and
    has reported its log end under its current broker epoch (`epochs`), the
    one with the longest log, (last epoch, end offset), leads, with itself as
    the whole ISR; ties go to preferred order. Every replica may have lost
    unflushed records, so no choice is safe; the longest log loses the least
    (none at all when only processes died and page caches survived). Until
    every replica has reported, the partition stays offline: electing before
    a longer log returns would truncate that log's records away."""
    if not needs_log_end_recovery(p):
        return None
    got = reports.get((p.topic_id, p.partition), {})
    candidates: list[tuple[tuple[int, int], int, int]] = []
    for rank, replica in enumerate(p.replicas):
        end = got.get(replica)
        if replica not in usable or end is None or end.broker_epoch != epochs.get(replica):
            return None
        candidates.append((end.length_key(), -rank, replica))
    if not candidates:
        return None
    leader = max(candidates)[2]
    return partition_change(p, (leader,), leader, elr=(), last_known_leader=NO_LEADER)


def awaits_unclean_election(p: PartitionState, usable: Collection[int], unclean: bool) -> bool:
    """Offline, its topic allows unclean election, no ISR or ELR member is
    usable and several replicas are (one alone is elected at once)."""
    if not unclean or not p.offline:
        return False
    if any(r in usable for r in (*p.isr, *p.elr)):
        return False
    return sum(1 for r in p.replicas if r in usable) > 1


def elect_unclean_by_log_end(
    p: PartitionState,
    usable: Collection[int],
    epochs: Mapping[int, int],
    reports: LogEnds,
    waited_out: bool,
) -> PartitionChange | None:
    """The unclean election of a partition that `awaits_unclean_election`:
    among the usable replicas, the longest log, (last epoch, end offset), as
    reported under each broker's current epoch, leads alone in the ISR (ties:
    the last known leader, then preferred order). It waits until every usable
    replica has reported, or until `waited_out` (the wait for reports is
    over): then the longest among those that reported, and with no report at
    all the last known leader, then preferred order (the rule before log ends
    were known). Whatever the leader's log lacks is lost: it may be less than
    a replica still away holds, which is what an unclean election risks."""
    got = reports.get((p.topic_id, p.partition), {})
    present = [r for r in p.replicas if r in usable]
    reported = {
        r: got[r].length_key() for r in present if r in got and got[r].broker_epoch == epochs.get(r)
    }
    if len(reported) < len(present) and not waited_out:
        return None
    order = [p.last_known_leader, *(r for r in p.replicas if r != p.last_known_leader)]
    rank = {r: i for i, r in enumerate(order)}
    if reported:
        leader = max(reported, key=lambda r: (reported[r], -rank[r]))
    else:
        leader = min(present, key=lambda r: rank[r])
    return partition_change(p, (leader,), leader, elr=(), last_known_leader=NO_LEADER)


def recover_by_log_end(
    partitions: Iterable[PartitionState],
    usable: Collection[int],
    epochs: Mapping[int, int],
    reports: LogEnds,
) -> list[PartitionChange]:
    """`elect_by_log_end` for every partition it can elect now."""
    changes = []
    for p in partitions:
        change = elect_by_log_end(p, usable, epochs, reports)
        if change is not None:
            changes.append(change)
    return changes


def preferred_leader_change(p: PartitionState, usable: Collection[int]) -> PartitionChange | None:
    """Move leadership back to the preferred replica if it may lead and is in sync."""
    preferred = p.preferred_leader
    if p.leader == preferred or preferred not in p.isr or preferred not in usable:
        return None
    return partition_change(p, p.isr, preferred)
