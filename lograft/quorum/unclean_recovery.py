"""Unclean recovery by log end (KIP-966), the controller's command.

A partition whose kept ISR and ELR were emptied by unclean shutdowns
(election.needs_log_end_recovery) has nobody known to hold every committed
record. Each broker hosting a replica of one reports, every heartbeat
interval while it stays that way, its replica's (last epoch, log end offset)
(`report_log_ends`); once every replica is usable and has reported under its
current broker epoch, the longest log leads (election.elect_by_log_end).

The reports are soft state in `BrokerSessions` (sessions.py), kept only for
partitions that still need recovery, so they are bounded by those partitions
times their replication factor and vanish once each is led again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lograft.errors import InvalidRequestError
from lograft.quorum.broker_lifecycle import registered_broker
from lograft.quorum.election import LogEnd, needs_log_end_recovery, recover_by_log_end
from lograft.quorum.image import MetadataImage
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


def report_log_ends(
    image: MetadataImage, sessions: BrokerSessions, request: ReportLogEndsRequest
) -> ControllerResult[int]:
    """Remember the broker's log ends; elect every partition now electable.
    The response is the number of partitions this batch gave a leader."""
    _check(request)
    broker = registered_broker(image, request.broker_id, request.broker_epoch)
    waiting_partitions = [p for p in image.all_partitions() if needs_log_end_recovery(p)]
    waiting = {(p.topic_id, p.partition) for p in waiting_partitions}
    ends = {
        (e.topic_id, e.partition): LogEnd(broker.broker_epoch, e.last_epoch, e.end_offset)
        for e in request.log_ends
    }
    sessions = sessions.with_log_ends(broker.broker_id, ends, waiting)
    epochs = {b.broker_id: b.broker_epoch for b in image.brokers.values()}
    changes = recover_by_log_end(
        waiting_partitions,
        set(image.usable_broker_ids()),
        epochs,
        sessions.log_ends,
    )
    return ControllerResult(tuple(changes), len(changes), sessions)
