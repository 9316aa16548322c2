"""Server-side partition assignors: who should consume what (the target).

An assignor maps (member -> subscribed topics, topic -> partition count, the
previous target) to a new target: member -> partitions. Every assignor here
keeps these invariants, checked by `check_assignment`:

- every member of the input is in the output (possibly with nothing);
- a member gets only partitions of topics it subscribes to, that exist;
- each partition of a subscribed topic goes to exactly one member.

`range`: Kafka's RangeAssignor. Per topic, the members subscribed to it,
sorted by member id, get contiguous ranges: with n partitions and c members,
the first n % c members get n // c + 1 partitions, the rest n // c. Not sticky:
the result depends only on member ids and counts.

`uniform`: sticky and balanced. Balanced: no member could take one of another
member's partitions (of a topic it subscribes to) while that member holds two
or more partitions more than it; with identical subscriptions, every member
holds floor(P/N) or ceil(P/N) partitions. Sticky: with identical subscriptions
it moves the fewest partitions any balanced assignment could (previous owners
keep min(what they had, their share) partitions, and the larger shares go to
the members that held most). Steps: keep every still-valid previous
partition; give each unowned partition to the least loaded member subscribed
to its topic; then, while some member holds >= 2 more than the least loaded
member it can give to, move one partition from the most loaded such member to
the least loaded one. A member only ever gains while it is least loaded and
only loses while most loaded, so no partition moves twice.

Cost: O(P log N) for identical subscriptions (P partitions, N members); with
mixed subscriptions the search for a move is O(N^2) in the worst case, bounded
by `group_max_size` and `group_assigned_partitions_max`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping

from sortedcontainers import SortedList

from lograft.brokers.groups.records import Partitions
from lograft.errors import UnsupportedAssignorError
from lograft.protocol.topic_partition import TopicPartition

Subscriptions = Mapping[str, frozenset[str]]
PartitionCounts = Mapping[str, int]
Target = dict[str, Partitions]
AssignFn = Callable[[Subscriptions, PartitionCounts, Mapping[str, Partitions]], Target]


def _subscribers_by_topic(
    subscriptions: Subscriptions, counts: PartitionCounts
) -> dict[str, list[str]]:
    """topic -> sorted member ids subscribed to it, for topics that exist."""
    out: dict[str, list[str]] = {}
    for member_id in sorted(subscriptions):
        for topic in subscriptions[member_id]:
            if counts.get(topic, 0) > 0:
                out.setdefault(topic, []).append(member_id)
    return out


def range_assign(
    subscriptions: Subscriptions,
    counts: PartitionCounts,
    previous: Mapping[str, Partitions] | None = None,
) -> Target:
    """Kafka's RangeAssignor (`previous` is ignored: range is not sticky)."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic, members in sorted(_subscribers_by_topic(subscriptions, counts).items()):
        n = counts[topic]
        per_member, extra = divmod(n, len(members))
        for i, member_id in enumerate(members):
            start = i * per_member + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            out[member_id].update(TopicPartition(topic, p) for p in range(start, start + length))
    return {m: frozenset(parts) for m, parts in out.items()}


class _Holdings:
    """Partitions per member as {topic: [partition, ...]}, plain ints: hashing
    TopicPartition objects dominates the cost at 10^4 partitions.

    A member's list for a topic is a stack: balancing only ever takes the
    last one pushed, so no search and no set is needed. `gained` and `lost`
    are each member's net changes against its previous target, so the new
    target is built from the previous frozenset (a copy that reuses its stored
    hashes) plus the changes, not from scratch.
    """

    def __init__(self, members: list[str]) -> None:
        self.by_topic: dict[str, dict[str, list[int]]] = {m: {} for m in members}
        self.count: dict[str, int] = dict.fromkeys(members, 0)
        self.gained: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
        self.lost: dict[str, set[tuple[str, int]]] = {m: set() for m in members}

    def keep(self, member_id: str, topic: str, partition: int) -> None:
        """A partition of the member's previous target that it keeps."""
        self.by_topic[member_id].setdefault(topic, []).append(partition)
        self.count[member_id] += 1

    def push(self, member_id: str, topic: str, partition: int) -> None:
        self.keep(member_id, topic, partition)
        key = (topic, partition)
        if key in self.lost[member_id]:
            self.lost[member_id].discard(key)
        else:
            self.gained[member_id].add(key)

    def pop(self, member_id: str, topic: str) -> int:
        stack = self.by_topic[member_id][topic]
        partition = stack.pop()
        if not stack:
            del self.by_topic[member_id][topic]
        self.count[member_id] -= 1
        key = (topic, partition)
        if key in self.gained[member_id]:
            self.gained[member_id].discard(key)
        else:
            self.lost[member_id].add(key)
        return partition

    def target(self, member_id: str, previous: Partitions) -> Partitions:
        gained, lost = self.gained[member_id], self.lost[member_id]
        if not gained and not lost:
            # The previous value itself: callers comparing targets pay an
            # identity check, not a set comparison.
            return previous
        parts = set(previous)
        parts.difference_update(TopicPartition(t, p) for t, p in lost)
        parts.update(TopicPartition(t, p) for t, p in gained)
        return frozenset(parts)


def _find_move(
    holdings: _Holdings, order: SortedList, subscriptions: Subscriptions
) -> tuple[str, str, str] | None:
    """(giver, taker, topic): a taker as lightly loaded as possible, and for it
    the most loaded giver holding >= 2 more, with a partition of a topic the
    taker subscribes to."""
    for taker_count, taker in order:
        if order[-1][0] < taker_count + 2:
            # Even the most loaded member is within one of this taker and of
            # every heavier taker: balanced.
            return None
        for i in range(len(order) - 1, -1, -1):
            giver_count, giver = order[i]
            if giver_count < taker_count + 2:
                break
            shared = [t for t in holdings.by_topic[giver] if t in subscriptions[taker]]
            if shared:
                return giver, taker, max(shared)
    return None


def uniform_assign(
    subscriptions: Subscriptions,
    counts: PartitionCounts,
    previous: Mapping[str, Partitions] | None = None,
) -> Target:
    """Sticky, balanced assignment (see the module docstring)."""
    previous = previous or {}
    members = sorted(subscriptions)
    holdings = _Holdings(members)
    taken: dict[str, set[int]] = {}

    # 1. Stickiness: keep what is still valid (topic subscribed, partition
    #    exists, not kept by an earlier member of an inconsistent previous).
    for member_id in members:
        topics = subscriptions[member_id]
        kept: dict[str, list[int]] = {}
        for tp in previous.get(member_id, ()):
            topic, partition = tp.topic, tp.partition
            if topic in topics and partition < counts.get(topic, 0):
                seen = taken.setdefault(topic, set())
                if partition not in seen:
                    seen.add(partition)
                    kept.setdefault(topic, []).append(partition)
                    continue
            holdings.lost[member_id].add((topic, partition))
        # Sorted so that the result does not depend on set iteration order.
        for topic in sorted(kept):
            for partition in sorted(kept[topic]):
                holdings.keep(member_id, topic, partition)

    # 2. Every unowned partition to the least loaded member subscribed to its topic.
    for topic, subscribers in sorted(_subscribers_by_topic(subscriptions, counts).items()):
        seen = taken.get(topic, set())
        # Lazy heap: an entry whose count is out of date is refreshed on pop.
        heap = [(holdings.count[m], m) for m in subscribers]
        heapq.heapify(heap)
        for partition in range(counts[topic]):
            if partition in seen:
                continue
            while True:
                load, member_id = heapq.heappop(heap)
                if load == holdings.count[member_id]:
                    break
                heapq.heappush(heap, (holdings.count[member_id], member_id))
            holdings.push(member_id, topic, partition)
            heapq.heappush(heap, (holdings.count[member_id], member_id))

    # 3. Balance, one partition at a time from the most to the least loaded.
    # (count, member id): ties broken by id so the result is deterministic.
    order = SortedList((holdings.count[m], m) for m in members)
    while (move := _find_move(holdings, order, subscriptions)) is not None:
        giver, taker, topic = move
        order.remove((holdings.count[giver], giver))
        order.remove((holdings.count[taker], taker))
        holdings.push(taker, topic, holdings.pop(giver, topic))
        order.add((holdings.count[giver], giver))
        order.add((holdings.count[taker], taker))

    return {m: holdings.target(m, previous.get(m, frozenset())) for m in members}


ASSIGNORS: Mapping[str, AssignFn] = {"range": range_assign, "uniform": uniform_assign}


def assignor_for(name: str) -> AssignFn:
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise UnsupportedAssignorError(
            f"unknown assignor {name!r}; use one of {sorted(ASSIGNORS)}", assignor=name
        ) from None


def check_assignment(subscriptions: Subscriptions, counts: PartitionCounts, target: Target) -> None:
    """Raise AssertionError unless `target` is a valid assignment for the input."""
    assert set(target) == set(subscriptions), "members in and out differ"
    seen: dict[TopicPartition, str] = {}
    for member_id, parts in target.items():
        for tp in parts:
            assert tp.topic in subscriptions[member_id], f"{member_id} got unsubscribed {tp}"
            assert 0 <= tp.partition < counts.get(tp.topic, 0), f"{tp} does not exist"
            assert tp not in seen, f"{tp} given to {seen[tp]} and {member_id}"
            seen[tp] = member_id
    for topic, members in _subscribers_by_topic(subscriptions, counts).items():
        for p in range(counts[topic]):
            assert TopicPartition(topic, p) in seen, f"{topic}-{p} unassigned ({members})"
