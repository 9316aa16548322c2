"""Broker registration, heartbeats, fencing and controlled shutdown.

Broker states and how they change (transitions themselves: image.BROKER_TRANSITIONS):

    register (new incarnation) -> FENCED
    FENCED --heartbeat with metadata offset >= catch_up_offset--> UNFENCED
    UNFENCED --session expired (fence_expired_brokers)--> FENCED
    UNFENCED --heartbeat wanting shutdown--> CONTROLLED_SHUTDOWN --session ends--> FENCED

Whenever a broker stops being usable (fenced, shutting down, replaced by a new
incarnation, unregistered) the same batch takes it out of every ISR and moves
the leadership of its partitions (election.changes_without_brokers). Whenever
one becomes usable, the same batch elects leaders for the offline partitions it
can lead. A registration after an unclean shutdown (`previous_broker_epoch`
not the replaced incarnation's epoch) also takes the broker out of every ELR
and every offline partition's kept ISR (election.changes_after_unclean_shutdown).

Broker epochs: a new incarnation gets `max(image.offset, old epoch) + 1`. The
image offset only grows, so epochs grow per broker id even across
unregistration, and no two incarnations ever share one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from lograft.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InvalidRequestError,
    StaleBrokerEpochError,
)
from lograft.quorum.configs import fsynced_topic_ids, topic_min_isr, unclean_topic_ids
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.election import (
    changes_after_unclean_shutdown,
    changes_without_brokers,
    elect_offline_leaders,
)
from lograft.quorum.image import BrokerRegistration, BrokerState, MetadataImage
from lograft.quorum.records import (
    BrokerAction,
    BrokerRegistrationChange,
    Endpoints,
    PartitionChange,
    Record,
    RegisterBroker,
    UnregisterBroker,
)
from lograft.quorum.result import ControllerResult
from lograft.quorum.sessions import BrokerSessions


def _leave(image: MetadataImage, gone: set[int]) -> list[PartitionChange]:
    """ISR and leadership changes for `gone` brokers no longer being usable."""
    usable = set(image.usable_broker_ids()) - gone
    return changes_without_brokers(
        image, gone, usable, unclean_topic_ids(image), topic_min_isr(image)
    )


def _join(image: MetadataImage, broker_id: int) -> list[PartitionChange]:
    """Leaders for offline partitions, now that `broker_id` is usable too."""
    usable = {*image.usable_broker_ids(), broker_id}
    offline = (p for p in image.all_partitions() if p.offline)
    return elect_offline_leaders(offline, usable, unclean_topic_ids(image), topic_min_isr(image))


def registered_broker(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> BrokerRegistration:
    """The registration of `broker_id`, if `broker_epoch` is its current epoch."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise BrokerIdNotRegisteredError(
            f"broker {broker_id} is not registered", broker_id=broker_id
        )
    if broker.broker_epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"broker {broker_id} epoch {broker_epoch} is not the current {broker.broker_epoch}",
            broker_id=broker_id,
            broker_epoch=broker_epoch,
        )
    return broker


# --- registration ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest:
    broker_id: int
    incarnation_id: str  # a UUID the broker process mints at start
    endpoints: Endpoints
    rack: str | None = None
    # The broker epoch this broker held when it last shut down cleanly (its
    # logs closed and flushed), -1 when its last shutdown was not clean (or it
    # never had one: a new broker holds no records to lose). None: not
    # reported, by a broker from before this field, taken as clean (what every
    # registration meant then).
    previous_broker_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponse:
    broker_epoch: int


def _check_registration(request: RegisterBrokerRequest) -> None:
    if request.broker_id < 0 or not request.incarnation_id or not request.endpoints:
        raise InvalidRequestError(
            "registration needs broker_id >= 0, an incarnation id and endpoints",
            broker_id=request.broker_id,
        )
    if request.rack == "":
        raise InvalidRequestError("rack must be None or a non-empty name")


def register_broker(
    image: MetadataImage,
    sessions: BrokerSessions,
    request: RegisterBrokerRequest,
    now_ms: int,
    config: ControllerConfig,
) -> ControllerResult[RegisterBrokerResponse]:
    """Register a broker incarnation (fenced); a retry of the same one is a no-op."""
    _check_registration(request)
    old = image.brokers.get(request.broker_id)
    if old is not None and old.incarnation_id == request.incarnation_id:
        if (old.endpoints, old.rack) != (request.endpoints, request.rack):
            raise InvalidRequestError(
                f"incarnation {request.incarnation_id} of broker {request.broker_id} is "
                "already registered with other endpoints or rack",
                broker_id=request.broker_id,
            )
        response = RegisterBrokerResponse(old.broker_epoch)
        return ControllerResult((), response, sessions.heartbeat(old.broker_id, now_ms))
    # Two live processes must not share an id: while the old incarnation is
    # unfenced with a live session, refuse (the new one retries, and succeeds
    # once that session expires). One in controlled shutdown has handed off its
    # leaderships and is on its way out, so a restart need not wait for it.
    if (
        old is not None
        and old.state is BrokerState.UNFENCED
        and sessions.alive(
            old.broker_id, now_ms, config.broker_session_timeout_ms, config.refused_overdue_ms
        )
    ):
        raise DuplicateBrokerRegistrationError(
            f"broker {old.broker_id} is registered by another live incarnation",
            broker_id=old.broker_id,
        )
    epoch = max(image.offset, old.broker_epoch if old is not None else -1) + 1
    register = RegisterBroker(
        request.broker_id, request.incarnation_id, epoch, request.endpoints, request.rack
    )
    records: list[Record] = [register]
    if old is not None and not old.fenced:
        records.extend(_leave(image, {old.broker_id}))
    if old is not None and not _clean_shutdown(old, request):
        records.extend(_forget_unclean(image, old, records))
    sessions = sessions.heartbeat(request.broker_id, now_ms)
    return ControllerResult(tuple(records), RegisterBrokerResponse(epoch), sessions)


def _clean_shutdown(old: BrokerRegistration, request: RegisterBrokerRequest) -> bool:
    """Kafka's unclean shutdown detection (KIP-966): the broker names the epoch
    it shut down cleanly in; any other value means its last incarnation ended
    some other way (SIGKILL, power loss) and its logs may lack records."""
    if request.previous_broker_epoch is None:
        return True
    return request.previous_broker_epoch == old.broker_epoch


def _forget_unclean(
    image: MetadataImage, old: BrokerRegistration, earlier: list[Record]
) -> list[PartitionChange]:
    """The broker of the `old` incarnation out of every ELR and offline kept
    ISR, judged on the partitions as `earlier` (this batch's records so far)
    leaves them; topics that fsynced for that whole incarnation are exempt."""
    after = image.apply_batch(image.offset + 1, earlier)
    return changes_after_unclean_shutdown(
        after.all_partitions(), old.broker_id, fsynced_topic_ids(after, old.broker_epoch)
    )


def unregister_broker(
    image: MetadataImage, sessions: BrokerSessions, broker_id: int
) -> ControllerResult[None]:
    """Forget a broker: it leaves ISRs and leaderships first, in the same batch."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise BrokerIdNotRegisteredError(
            f"broker {broker_id} is not registered", broker_id=broker_id
        )
    records: list[Record] = [
        *_leave(image, {broker_id}),
        UnregisterBroker(broker_id, broker.broker_epoch),
    ]
    return ControllerResult(tuple(records), None, sessions.without(broker_id))


# --- heartbeats --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    broker_id: int
    broker_epoch: int
    # Offset of the last metadata batch the broker has applied.
    metadata_offset: int
    want_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """The broker's state once the result's records are applied."""

    fenced: bool
    in_controlled_shutdown: bool
    # Leaderships are handed off (or the broker is fenced): it may exit now.
    should_shut_down: bool


def broker_heartbeat(
    image: MetadataImage,
    sessions: BrokerSessions,
    request: HeartbeatRequest,
    now_ms: int,
    config: ControllerConfig,
) -> ControllerResult[HeartbeatResponse]:
    """Extend the session; unfence a caught-up broker; start a controlled shutdown."""
    broker = registered_broker(image, request.broker_id, request.broker_epoch)
    sessions = sessions.heartbeat(broker.broker_id, now_ms)
    if request.want_shutdown:
        records, state = _shutdown(image, broker)
    else:
        records, state = _maybe_unfence(image, broker, request.metadata_offset)
    response = HeartbeatResponse(
        fenced=state is BrokerState.FENCED,
        in_controlled_shutdown=state is BrokerState.CONTROLLED_SHUTDOWN,
        should_shut_down=request.want_shutdown or state is BrokerState.CONTROLLED_SHUTDOWN,
    )
    return ControllerResult(records, response, sessions)


def _shutdown(
    image: MetadataImage, broker: BrokerRegistration
) -> tuple[tuple[Record, ...], BrokerState]:
    # Only a usable broker has anything to hand off; a fenced one leads nothing
    # and may stop at once, one already shutting down has handed off already.
    if broker.state is not BrokerState.UNFENCED:
        return (), broker.state
    change = BrokerRegistrationChange(
        broker.broker_id, broker.broker_epoch, BrokerAction.CONTROLLED_SHUTDOWN
    )
    return (change, *_leave(image, {broker.broker_id})), BrokerState.CONTROLLED_SHUTDOWN


def _maybe_unfence(
    image: MetadataImage, broker: BrokerRegistration, metadata_offset: int
) -> tuple[tuple[Record, ...], BrokerState]:
    if broker.state is not BrokerState.FENCED or metadata_offset < broker.catch_up_offset:
        return (), broker.state
    change = BrokerRegistrationChange(broker.broker_id, broker.broker_epoch, BrokerAction.UNFENCE)
    return (change, *_join(image, broker.broker_id)), BrokerState.UNFENCED


# --- fencing -----------------------------------------------------------------------


def fence_expired_brokers(
    image: MetadataImage, sessions: BrokerSessions, now_ms: int, config: ControllerConfig
) -> ControllerResult[tuple[int, ...]]:
    """Fence every non-fenced broker whose session expired. Response: their ids.

    Called every `fence_check_interval_ms`. A non-fenced broker with no session
    at all (registered by a record this controller never saw a heartbeat for)
    gets one from now: the absence of evidence is not evidence of death.
    """
    sessions = _with_sessions_for_all(image, sessions, now_ms)
    timeout_ms = config.broker_session_timeout_ms
    expired = sorted(
        b.broker_id
        for b in image.brokers.values()
        if not b.fenced
        and not sessions.alive(b.broker_id, now_ms, timeout_ms, config.refused_overdue_ms)
    )
    fences = [
        BrokerRegistrationChange(b, image.brokers[b].broker_epoch, BrokerAction.FENCE)
        for b in expired
    ]
    records: tuple[Record, ...] = (*fences, *_leave(image, set(expired))) if expired else ()
    return ControllerResult(records, tuple(expired), sessions)


def _with_sessions_for_all(
    image: MetadataImage, sessions: BrokerSessions, now_ms: int
) -> BrokerSessions:
    registered = set(image.brokers)
    known = set(sessions.last_heartbeat_ms)
    times = {b: t for b, t in sessions.last_heartbeat_ms.items() if b in registered}
    times.update(dict.fromkeys(registered - known, now_ms))
    if times == dict(sessions.last_heartbeat_ms):
        return sessions
    # replace(): the log ends and unclean waits are kept.
    return replace(sessions, last_heartbeat_ms=MappingProxyType(times))
