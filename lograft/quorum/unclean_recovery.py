"""Elections by log end (KIP-966), the controller's commands.

Two kinds of offline partition are elected by where their replicas' logs end:

- unclean recovery (election.needs_log_end_recovery): a partition whose kept
  ISR and ELR were emptied by unclean shutdowns has nobody known to hold
  every committed record; once every replica is usable and has reported under
  its current broker epoch, the longest log leads (election.elect_by_log_end);
- an unclean election (election.awaits_unclean_election): a topic that allows
  unclean election, no usable ISR or ELR member, several usable replicas; the
  longest log among those leads once each has reported, or once the
  partition has waited `unclean_election_report_wait_ms` for their reports
  (election.elect_unclean_by_log_end).

Each broker hosting a replica of such a partition reports, every heartbeat
interval while it stays that way, its replica's (last epoch, log end offset)
(`report_log_ends`); the reports and the start of each wait are soft state in
`BrokerSessions` (sessions.py), kept only for partitions that still await
such an election, so they are bounded by those partitions times their
replication factor and vanish once each is led again. `elect_after_report_wait`
is the periodic duty that ends the waits nobody's report ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lograft.errors import InvalidRequestError
from lograft.quorum.broker_lifecycle import registered_broker
from lograft.quorum.configs import unclean_topic_ids
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.election import (
    LogEnd,
    awaits_unclean_election,
    elect_unclean_by_log_end,
    needs_log_end_recovery,
    recover_by_log_end,
)
from lograft.quorum.image import MetadataImage, PartitionState
from lograft.quorum.records import PartitionChange
from lograft.quorum.result import ControllerResult
from lograft.quorum.sessions import BrokerSessions

# One report names at most this many partitions (a broker sends its list in
# slices of it); what a single request can make the controller hold.
LOG_ENDS_PER_REQUEST_MAX = 10_000


@dataclass(frozen=True, slots=True)
class ReplicaLogEnd:
    topic_id: str
    partition: int
    last_epoch: int  # the epoch of the last batch, -1 for an empty log
    end_offset: int


@dataclass(frozen=True, slots=True)
class ReportLogEndsRequest:
    broker_id: int
    broker_epoch: int
    log_ends: Sequence[ReplicaLogEnd]


def _check(request: ReportLogEndsRequest) -> None:
    if len(request.log_ends) > LOG_ENDS_PER_REQUEST_MAX:
        raise InvalidRequestError(
            f"a log end report names at most {LOG_ENDS_PER_REQUEST_MAX} partitions",
            broker_id=request.broker_id,
        )
    for end in request.log_ends:
        if end.partition < 0 or end.end_offset < 0 or end.last_epoch < -1:
            raise InvalidRequestError(
                "a log end needs partition >= 0, end_offset >= 0 and last_epoch >= -1",
                broker_id=request.broker_id,
            )


def awaiting_log_ends(image: MetadataImage) -> list[PartitionState]:
    """The partitions whose election waits for their replicas' log ends:
    those awaiting unclean recovery, and those of topics that allow unclean
    election awaiting it."""
    usable = set(image.usable_broker_ids())
    unclean = unclean_topic_ids(image)
    return [
        p
        for p in image.all_partitions()
        if needs_log_end_recovery(p) or awaits_unclean_election(p, usable, p.topic_id in unclean)
    ]


def _elect_awaiting(
    image: MetadataImage, sessions: BrokerSessions, now_ms: int, config: ControllerConfig
) -> ControllerResult[int]:
    """Elect every awaiting partition that can be elected now; the response is
    how many were."""
    usable = set(image.usable_broker_ids())
    unclean = unclean_topic_ids(image)
    epochs = {b.broker_id: b.broker_epoch for b in image.brokers.values()}
    waiting = [
        p
        for p in image.all_partitions()
        if awaits_unclean_election(p, usable, p.topic_id in unclean)
    ]
    sessions = sessions.with_unclean_waits(((p.topic_id, p.partition) for p in waiting), now_ms)
    wait_ms = config.unclean_election_report_wait_ms
    changes: list[PartitionChange] = []
    for p in waiting:
        waited_out = now_ms - sessions.unclean_since[(p.topic_id, p.partition)] >= wait_ms
        change = elect_unclean_by_log_end(p, usable, epochs, sessions.log_ends, waited_out)
        if change is not None:
            changes.append(change)
    recovering = (p for p in image.all_partitions() if p.topic_id not in unclean)
    changes.extend(recover_by_log_end(recovering, usable, epochs, sessions.log_ends))
    return ControllerResult(tuple(changes), len(changes), sessions)


def report_log_ends(
    image: MetadataImage,
    sessions: BrokerSessions,
    request: ReportLogEndsRequest,
    now_ms: int,
    config: ControllerConfig,
) -> ControllerResult[int]:
    """Remember the broker's log ends; elect every partition now electable.
    The response is the number of partitions this batch gave a leader."""
    _check(request)
    broker = registered_broker(image, request.broker_id, request.broker_epoch)
    waiting = {(p.topic_id, p.partition) for p in awaiting_log_ends(image)}
    ends = {
        (e.topic_id, e.partition): LogEnd(broker.broker_epoch, e.last_epoch, e.end_offset)
        for e in request.log_ends
    }
    sessions = sessions.with_log_ends(broker.broker_id, ends, waiting)
    return _elect_awaiting(image, sessions, now_ms, config)


def elect_after_report_wait(
    image: MetadataImage, sessions: BrokerSessions, now_ms: int, config: ControllerConfig
) -> ControllerResult[int]:
    """The periodic duty (every `fence_check_interval_ms`): start the wait of
    partitions newly awaiting an unclean election, and elect those whose wait
    for reports is over even when no report ends it (no usable replica
    reported: the last known leader, then preferred order)."""
    return _elect_awaiting(image, sessions, now_ms, config)
