"""AlterPartition: a partition leader asks the controller to change its ISR.

The request is a compare-and-set on the partition: the leader names the
leader epoch and partition epoch it last saw, and the controller applies the
new ISR only if both still hold. Checks, in order, each with its own error:

1. the broker's registration epoch is current     -> STALE_BROKER_EPOCH
   (BROKER_ID_NOT_REGISTERED for an unknown broker)
2. the partition exists                            -> UNKNOWN_TOPIC_OR_PARTITION
3. the leader epoch is current                     -> FENCED_LEADER_EPOCH (older)
                                                      UNKNOWN_LEADER_EPOCH (newer)
4. the sender is the leader                        -> NOT_LEADER_OR_FOLLOWER
5. the partition epoch is current                  -> INVALID_UPDATE_VERSION
6. the new ISR is well formed and holds the leader -> INVALID_REQUEST / ISR_WITHOUT_LEADER
7. every member is a replica, registered, usable   -> INELIGIBLE_REPLICA

The ELR follows the new ISR (election.elr_after): a follower the leader
drops for lagging, leaving fewer than `min_insync_replicas`, holds every
committed record (the HW stops there) and joins the ELR; an ISR back at
`min_insync_replicas` empties it.

The leader epoch is checked before leadership so that a deposed leader learns
it is stale (and refreshes its metadata) rather than merely "not leader".
The stored ISR keeps the replicas' preferred order, so one set has one form.

`alter_partitions` is Kafka's multi-partition AlterPartition: one request
from one leader carries the ISR changes of many partitions (a broker that
returns after a restart needs one for every partition it leads), checks 1
once for the request and 2-7 per partition, and commits every accepted
change in one record batch. One partition's refusal is that partition's
answer; the others still apply. Per partition changes were one request and
one metadata commit each, and every commit is work on every broker (hundreds
of them after one broker came back, at 2,000 partitions).
"""

from __future__ import annotations

from dataclasses import dataclass

from lograft.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    IsrWithoutLeaderError,
    LograftError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from lograft.quorum.broker_lifecycle import registered_broker
from lograft.quorum.configs import partition_min_isr
from lograft.quorum.election import elr_after, partition_change
from lograft.quorum.image import MetadataImage, PartitionState
from lograft.quorum.records import Record
from lograft.quorum.result import ControllerResult

# Partitions one AlterPartition request may carry. Bounds the request body and
# the record batch it commits (~200 B per change, far below Raft's
# max_batch_bytes of 1 MiB at this count).
ALTER_PARTITION_ITEMS_MAX = 1000


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The partition as it is once the result's records are applied."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest
) -> ControllerResult[AlterPartitionResponse]:
    registered_broker(image, request.broker_id, request.broker_epoch)
    return _decide(image, request)


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """One partition's ISR change inside a batched request."""

    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionsRequest:
    broker_id: int
    broker_epoch: int
    items: tuple[AlterPartitionItem, ...]


# Per item, in request order: the partition after the batch, or why it was refused.
AlterPartitionsResponse = tuple[AlterPartitionResponse | LograftError, ...]


def alter_partitions(
    image: MetadataImage, request: AlterPartitionsRequest
) -> ControllerResult[AlterPartitionsResponse]:
    """Every item decided against `image`; the accepted changes in one batch.

    Items name distinct partitions, so deciding each against the same image is
    what applying them one after another would decide; a partition named twice
    is refused the second time (its first answer would be stale)."""
    if len(request.items) > ALTER_PARTITION_ITEMS_MAX:
        raise InvalidRequestError(
            f"{len(request.items)} partitions in one AlterPartition; at most "
            f"{ALTER_PARTITION_ITEMS_MAX} (ALTER_PARTITION_ITEMS_MAX)",
            items_max=ALTER_PARTITION_ITEMS_MAX,
        )
    registered_broker(image, request.broker_id, request.broker_epoch)
    seen: set[tuple[str, int]] = set()
    records: list[Record] = []
    answers: list[AlterPartitionResponse | LograftError] = []
    for item in request.items:
        key = (item.topic_id, item.partition)
        if key in seen:
            answers.append(
                InvalidRequestError(
                    f"partition {item.topic_id}/{item.partition} appears twice in one request",
                    topic_id=item.topic_id,
                    partition=item.partition,
                )
            )
            continue
        seen.add(key)
        single = AlterPartitionRequest(
            request.broker_id,
            request.broker_epoch,
            item.topic_id,
            item.partition,
            item.leader_epoch,
            item.partition_epoch,
            item.new_isr,
        )
        try:
            result = _decide(image, single)
        except LograftError as exc:
            answers.append(exc)
            continue
        records.extend(result.records)
        answers.append(result.response)
    return ControllerResult(tuple(records), tuple(answers))


def _decide(
    image: MetadataImage, request: AlterPartitionRequest
) -> ControllerResult[AlterPartitionResponse]:
    """Checks 2-7 and the change, for a sender already known to be registered."""
    current = _partition(image, request)
    _check_epochs_and_leader(current, request)
    isr = _checked_isr(image, current, request.new_isr)
    if isr == current.isr:
        # A retry of an applied change (or a no-op): nothing to append.
        return ControllerResult((), _response(current))
    elr = elr_after(current, isr, partition_min_isr(image, current))
    change = partition_change(current, isr, current.leader, elr=elr)
    assert change is not None
    return ControllerResult((change,), _response(current.changed(change)))


def _response(p: PartitionState) -> AlterPartitionResponse:
    return AlterPartitionResponse(p.leader, p.leader_epoch, p.partition_epoch, p.isr)


def _partition(image: MetadataImage, request: AlterPartitionRequest) -> PartitionState:
    current = image.partition(request.topic_id, request.partition)
    if current is None:
        raise UnknownTopicOrPartitionError(
            f"unknown partition {request.topic_id}/{request.partition}",
            topic_id=request.topic_id,
            partition=request.partition,
        )
    return current


def _check_epochs_and_leader(current: PartitionState, request: AlterPartitionRequest) -> None:
    where = {"topic_id": current.topic_id, "partition": current.partition}
    if request.leader_epoch < current.leader_epoch:
        raise FencedLeaderEpochError(
            f"leader epoch {request.leader_epoch} is older than {current.leader_epoch}", **where
        )
    if request.leader_epoch > current.leader_epoch:
        raise UnknownLeaderEpochError(
            f"leader epoch {request.leader_epoch} is newer than {current.leader_epoch}", **where
        )
    if request.broker_id != current.leader:
        raise NotLeaderOrFollowerError(
            f"broker {request.broker_id} is not the leader ({current.leader})", **where
        )
    if request.partition_epoch != current.partition_epoch:
        raise InvalidUpdateVersionError(
            f"partition epoch {request.partition_epoch} is not the current "
            f"{current.partition_epoch}",
            **where,
        )


def _checked_isr(
    image: MetadataImage, current: PartitionState, new_isr: tuple[int, ...]
) -> tuple[int, ...]:
    if len(set(new_isr)) != len(new_isr):
        raise InvalidRequestError(f"ISR {list(new_isr)} has duplicates")
    if current.leader not in new_isr:
        raise IsrWithoutLeaderError(
            f"ISR {list(new_isr)} does not contain the leader {current.leader}"
        )
    ineligible = [b for b in new_isr if not _eligible(image, current, b)]
    if ineligible:
        raise IneligibleReplicaError(
            f"brokers {ineligible} are not usable replicas of this partition",
            ineligible=ineligible,
        )
    members = set(new_isr)
    return tuple(b for b in current.replicas if b in members)


def _eligible(image: MetadataImage, current: PartitionState, broker_id: int) -> bool:
    broker = image.brokers.get(broker_id)
    return broker_id in current.replicas and broker is not None and broker.usable
