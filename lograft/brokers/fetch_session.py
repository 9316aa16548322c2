"""Replica fetch decisions, leader side and follower side (pure functions).

Leader side, `decide_fetch`, per partition of a follower's fetch, in Kafka's
order (Partition.fetchRecords / readRecords):

1. leader epoch fencing: the request's `current_leader_epoch` below the
   leader's epoch is FENCED_LEADER_EPOCH (the follower missed a leader
   change), above it UNKNOWN_LEADER_EPOCH (this broker has not yet heard of
   the change). -1 skips the check (a consumer that does not send it).
2. divergence (KIP-320, KIP-595 style, in the fetch itself): when
   `last_fetched_epoch` is given, the leader's epoch cache answers
   `end_offset_for(last_fetched_epoch) -> (epoch, end_offset)`, the largest
   epoch <= the asked one and where it ended on the leader's log. If that
   epoch is lower than the asked one (the leader never had it) or its end is
   below `fetch_offset` (the follower has records the leader does not), the
   answer is DIVERGING_EPOCH with `(epoch, end_offset)` and no data. An
   undefined answer is OFFSET_OUT_OF_RANGE, as in Kafka.
3. OFFSET_OUT_OF_RANGE when `fetch_offset` is outside `[log_start, LEO]`
   (fetching at the LEO is valid: an empty answer or a long poll).
4. else OK.

The leader's cache must hold its own epoch from the moment it becomes leader
(Kafka assigns `(leader_epoch, LEO)` then): otherwise a follower's epoch the
leader never had, above everything the leader wrote, has no end offset.

Follower side, `truncation_offset` (KIP-101/279, Kafka's
AbstractFetcherThread.getOffsetTruncationState): given the leader's
`(epoch, end_offset)`, look up the follower's own end for that epoch. If the
follower has the same epoch, truncate to the smaller of the two ends; if its
largest epoch <= the leader's is another one, truncate to that epoch's end and
let the next fetch (carrying the new last fetched epoch) finish the job. Never
above the follower's LEO.

Invariant the model test checks: repeated fetches, truncating on every
diverging answer and appending on every OK one, leave the follower's log
identical to the leader's, never truncating below the longest common prefix.
The follower should send as `last_fetched_epoch` its epoch cache's latest
epoch (Kafka's choice), see `last_fetched_epoch`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from lograft.errors import (
    FencedLeaderEpochError,
    LograftError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from lograft.protocol.fetch_wire import UNDEFINED_EPOCH, EpochEndOffset, PartitionFetch

UNDEFINED_EPOCH_OFFSET = -1

# (epoch) -> (largest known epoch <= it, end offset of that epoch), as
# lograft.storage.epoch_cache.LeaderEpochCache.end_offset_for with the log end
# offset bound in.
EndOffsetFor = Callable[[int], tuple[int, int]]


class FetchOutcome(enum.Enum):
    OK = "OK"
    FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
    UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"
    DIVERGING_EPOCH = "DIVERGING_EPOCH"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"


@dataclass(frozen=True, slots=True)
class FetchDecision:
    outcome: FetchOutcome
    diverging: EpochEndOffset | None = None
    # Context for the error the API returns.
    leader_epoch: int = UNDEFINED_EPOCH
    log_start_offset: int = 0
    log_end_offset: int = 0

    def error(self) -> LograftError | None:
        """The typed error to answer with; None for OK and DIVERGING_EPOCH,
        which are answers, not errors."""
        o = self.outcome
        if o is FetchOutcome.FENCED_LEADER_EPOCH:
            return FencedLeaderEpochError(
                "the fetch carries an older leader epoch", leader_epoch=self.leader_epoch
            )
        if o is FetchOutcome.UNKNOWN_LEADER_EPOCH:
            return UnknownLeaderEpochError(
                "the fetch carries a leader epoch this broker does not know yet",
                leader_epoch=self.leader_epoch,
            )
        if o is FetchOutcome.OFFSET_OUT_OF_RANGE:
            return OffsetOutOfRangeError(
                "fetch offset outside the log",
                log_start_offset=self.log_start_offset,
                log_end_offset=self.log_end_offset,
            )
        return None


def decide_fetch(
    request: PartitionFetch,
    *,
    leader_epoch: int,
    log_start_offset: int,
    log_end_offset: int,
    end_offset_for: EndOffsetFor,
) -> FetchDecision:
    """The leader's answer to one partition of a fetch (see module doc)."""
    assert 0 <= log_start_offset <= log_end_offset, (log_start_offset, log_end_offset)

    def decision(outcome: FetchOutcome, diverging: EpochEndOffset | None = None) -> FetchDecision:
        return FetchDecision(outcome, diverging, leader_epoch, log_start_offset, log_end_offset)

    current = request.current_leader_epoch
    if current != UNDEFINED_EPOCH:
        if current < leader_epoch:
            return decision(FetchOutcome.FENCED_LEADER_EPOCH)
        if current > leader_epoch:
            return decision(FetchOutcome.UNKNOWN_LEADER_EPOCH)
    asked = request.last_fetched_epoch
    if asked != UNDEFINED_EPOCH:
        epoch, end = end_offset_for(asked)
        if epoch == UNDEFINED_EPOCH or end == UNDEFINED_EPOCH_OFFSET:
            return decision(FetchOutcome.OFFSET_OUT_OF_RANGE)
        assert epoch <= asked, ("end_offset_for answered a later epoch", asked, epoch)
        if epoch < asked or end < request.fetch_offset:
            return decision(FetchOutcome.DIVERGING_EPOCH, EpochEndOffset(epoch, end))
    if not log_start_offset <= request.fetch_offset <= log_end_offset:
        return decision(FetchOutcome.OFFSET_OUT_OF_RANGE)
    return decision(FetchOutcome.OK)


def truncation_offset(
    local_leo: int, diverging: EpochEndOffset, local_end_offset_for: EndOffsetFor
) -> int:
    """Where a follower truncates its log after a DIVERGING_EPOCH answer.

    The result may be an intermediate point (when the follower does not know
    the leader's epoch); the next fetch then diverges again or proceeds.
    """
    if diverging.end_offset < 0:
        raise ValueError(f"diverging epoch without an end offset: {diverging}")
    if diverging.epoch == UNDEFINED_EPOCH:
        return min(diverging.end_offset, local_leo)
    epoch, end = local_end_offset_for(diverging.epoch)
    if epoch == UNDEFINED_EPOCH or end == UNDEFINED_EPOCH_OFFSET:
        # The follower has no epochs at or below the leader's (an empty or
        # untracked log): the leader's end is the only bound, as in Kafka.
        return min(diverging.end_offset, local_leo)
    if epoch != diverging.epoch:
        # The follower never had the leader's epoch. Its epochs up to `epoch`
        # may still match the leader's: keep them, drop what follows.
        return min(end, local_leo)
    return min(end, diverging.end_offset, local_leo)


def last_fetched_epoch(latest_cached_epoch: int) -> int:
    """The `last_fetched_epoch` a follower sends: its epoch cache's latest
    epoch, not the epoch of its last record. They differ when the follower led
    an epoch in which it wrote nothing; sending the cache's epoch makes the
    leader report divergence and the follower drop that empty entry before it
    copies records of older epochs behind it (the model test shows the other
    choice leaving the entry in place over older-epoch records)."""
    return latest_cached_epoch
