"""The immutable metadata image and the only code that changes it: replay.

A `MetadataImage` is the cluster metadata as of one metadata-log `offset`
(the offset of the last batch applied; -1 for the empty image). It is never
mutated: `MetadataDelta` replays records on top of a base image and builds a
*new* image, copying on write only what the records touch (the top-level dict
once per batch, a topic's partition tuple once per batch that touches it), so a
batch that moves 2,000 leaders costs one pass, not 2,000 copies of everything.

Invariants kept by replay (a record that would break one raises
`MetadataRecordError`: such a record is a controller bug, and applying it would
silently fork the nodes' views):

- topic names and ids are unique and map one to one; partitions of a topic are
  dense, numbered 0..n-1;
- replicas are distinct; the ISR is distinct, a subset of the replicas, and
  empty only while the partition is offline; the leader is -1 (offline) or a
  member of the ISR; the ELR is distinct, a subset of the replicas and
  disjoint from the ISR; the last known leader is -1 or a replica;
- leader epoch +1 exactly when the leader changes, partition epoch +1 on every
  change; epochs never go backwards;
- a broker's epoch only grows across registrations; broker state changes
  follow `BROKER_TRANSITIONS`;
- the next producer id only grows;
- an ACL binding is added only when absent and removed only when present; a
  SCRAM credential is removed only when present (security records are checked
  by the lograft.security types they become, lograft/quorum/security_records.py).

Security parts of the image (`acls`, `scram_credentials`, `client_quotas`) are
copied on write like the rest: an image whose batch had no record of a kind
holds the base image's object for it (`is`), so a reader (the authorizer, the
password check, quota enforcement) rebuilds its index only on change.

Replay is deterministic: the same records in the same order on equal images
give equal images, on every node.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from lograft.errors import MetadataRecordError
from lograft.quorum.records import (
    AccessControlEntry,
    BrokerAction,
    BrokerRegistrationChange,
    ClientQuota,
    Config,
    ConfigResourceType,
    Endpoints,
    Partition,
    PartitionChange,
    ProducerIds,
    Record,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveTopic,
    RemoveUserScramCredential,
    Topic,
    UnregisterBroker,
    UserScramCredential,
)
from lograft.quorum.security_records import (
    acl_of,
    acl_record,
    acl_sort_key,
    check_quota_value,
    credential_of,
    credential_record,
    entity_of,
    entity_sort_key,
    quota_record,
)
from lograft.security.acls import AclBinding
from lograft.security.passwords import ScramCredential, ScramMechanism
from lograft.security.quotas import QuotaEntity, QuotaKey

NO_LEADER = -1

ConfigResource = tuple[ConfigResourceType, str]

# A topic whose replicas fsync what they hold before it is acknowledged
# (lograft/storage/config.py FlushPolicy); read here for `fsynced_since`.
FLUSH_POLICY = "flush_policy"
FSYNCED_FLUSH_POLICIES = frozenset({"group_commit", "every_batch"})
# `fsynced_since` of a topic fsynced since it was created.
FSYNCED_SINCE_CREATION = -1


class BrokerState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


# Every legal broker state change, in one place. A broker in controlled shutdown
# can only be fenced (its session ends when it exits); a fenced broker can only
# be unfenced (by catching up) or replaced by a new registration.
BROKER_TRANSITIONS: Mapping[tuple[BrokerState, BrokerAction], BrokerState] = MappingProxyType(
    {
        (BrokerState.UNFENCED, BrokerAction.FENCE): BrokerState.FENCED,
        (BrokerState.CONTROLLED_SHUTDOWN, BrokerAction.FENCE): BrokerState.FENCED,
        (BrokerState.FENCED, BrokerAction.UNFENCE): BrokerState.UNFENCED,
        (BrokerState.UNFENCED, BrokerAction.CONTROLLED_SHUTDOWN): BrokerState.CONTROLLED_SHUTDOWN,
    }
)


def next_broker_state(state: BrokerState, action: BrokerAction) -> BrokerState:
    try:
        return BROKER_TRANSITIONS[(state, action)]
    except KeyError:
        raise MetadataRecordError(
            f"illegal broker transition: {action.value} from {state.value}",
            state=state.value,
            action=action.value,
        ) from None


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: Endpoints
    rack: str | None
    state: BrokerState
    # A fenced broker is unfenced only once it reports a metadata offset at or
    # past this: the batch that registered or last fenced it. Having applied
    # that batch, it has seen its own fencing and every leader change made with
    # it. (A node restored from a snapshot sets it to the snapshot's offset:
    # later, so only more cautious.)
    catch_up_offset: int

    @property
    def fenced(self) -> bool:
        return self.state is BrokerState.FENCED

    @property
    def usable(self) -> bool:
        """May lead partitions, join ISRs and receive new replicas."""
        return self.state is BrokerState.UNFENCED


def _distinct(values: tuple[int, ...]) -> bool:
    return len(set(values)) == len(values)


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic_id: str
    partition: int
    replicas: tuple[int, ...]  # preferred order
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # Eligible leader replicas (KIP-966, election.py): outside the ISR, yet
    # holding every committed record; electable when no ISR member is.
    elr: tuple[int, ...] = ()
    # The leader when the partition last went offline (-1: none, or it has a
    # leader): the first choice of an unclean election.
    last_known_leader: int = NO_LEADER

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER

    def check(self) -> None:
        """Raise MetadataRecordError unless the module's partition invariants hold."""
        problem = _partition_problem(self)
        if problem:
            raise MetadataRecordError(
                f"partition {self.topic_id}/{self.partition}: {problem}",
                topic_id=self.topic_id,
                partition=self.partition,
            )

    def changed(self, change: PartitionChange) -> PartitionState:
        """The state after `change`: what replay does, for controllers to predict it."""
        leader = self.leader if change.leader is None else change.leader
        new = replace(
            self,
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=leader,
            elr=self.elr if change.elr is None else change.elr,
            last_known_leader=(
                self.last_known_leader
                if change.last_known_leader is None
                else change.last_known_leader
            ),
            leader_epoch=self.leader_epoch + (1 if leader != self.leader else 0),
            partition_epoch=self.partition_epoch + 1,
        )
        new.check()
        return new

    def to_record(self) -> Partition:
        return Partition(
            topic_id=self.topic_id,
            partition=self.partition,
            replicas=self.replicas,
            isr=self.isr,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            elr=self.elr,
            last_known_leader=self.last_known_leader,
        )


def _partition_problem(p: PartitionState) -> str | None:
    checks = (
        (p.partition >= 0, "negative partition index"),
        (bool(p.replicas) and _distinct(p.replicas), "replicas must be non-empty and distinct"),
        (all(r >= 0 for r in p.replicas), "replica ids must be >= 0"),
        (_distinct(p.isr), "isr must be distinct"),
        (bool(p.isr) or p.leader == NO_LEADER, "isr may be empty only while offline"),
        (set(p.isr) <= set(p.replicas), "isr must be a subset of replicas"),
        (p.leader == NO_LEADER or p.leader in p.isr, "leader must be -1 or in the isr"),
        (_distinct(p.elr) and set(p.elr) <= set(p.replicas), "elr: distinct replicas"),
        (not set(p.elr) & set(p.isr), "elr and isr must be disjoint"),
        (
            p.last_known_leader == NO_LEADER or p.last_known_leader in p.replicas,
            "last known leader must be -1 or a replica",
        ),
        (p.leader_epoch >= 0 and p.partition_epoch >= 0, "epochs must be >= 0"),
    )
    return next((message for ok, message in checks if not ok), None)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: str
    partitions: tuple[PartitionState, ...]  # index i holds partition i


def _frozen(mapping: dict[Any, Any] | None = None) -> Mapping[Any, Any]:
    return MappingProxyType({} if mapping is None else mapping)


_EMPTY_CONFIG: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Cluster metadata as of metadata-log `offset`. Build new ones with replay."""

    offset: int = -1
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=_frozen)
    topics: Mapping[str, TopicImage] = field(default_factory=_frozen)  # by topic id
    topic_ids: Mapping[str, str] = field(default_factory=_frozen)  # name -> topic id
    configs: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=_frozen)
    next_producer_id: int = 0
    acls: frozenset[AclBinding] = frozenset()
    # user name -> mechanism -> credential
    scram_credentials: Mapping[str, Mapping[ScramMechanism, ScramCredential]] = field(
        default_factory=_frozen
    )
    client_quotas: Mapping[QuotaEntity, Mapping[QuotaKey, float]] = field(default_factory=_frozen)
    # topic id -> the offset of the batch from which its effective
    # flush_policy has fsynced (FSYNCED_SINCE_CREATION: always), for the
    # topics whose policy fsyncs now. Derived by replay from the configs; a
    # snapshot carries it (metadata_store.py), since rebuilding from the
    # snapshot's records would date every topic from its creation.
    fsynced_since: Mapping[str, int] = field(default_factory=_frozen)

    @classmethod
    def empty(cls) -> MetadataImage:
        return cls()

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def partition(self, topic_id: str, index: int) -> PartitionState | None:
        topic = self.topics.get(topic_id)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def all_partitions(self) -> Iterator[PartitionState]:
        """Every partition, topics in name order, so callers' output is deterministic."""
        for name in sorted(self.topic_ids):
            yield from self.topics[self.topic_ids[name]].partitions

    def config(self, resource_type: ConfigResourceType, name: str) -> Mapping[str, str]:
        return self.configs.get((resource_type, name), _EMPTY)

    def usable_broker_ids(self) -> list[int]:
        return sorted(b.broker_id for b in self.brokers.values() if b.usable)

    def replay(self, record: Record, offset: int) -> MetadataImage:
        """The image after one record, committed in the batch at `offset`."""
        return self.apply_batch(offset, (record,))

    def apply_batch(self, offset: int, records: Iterable[Record]) -> MetadataImage:
        """The image after an atomic batch committed at `offset` (> self.offset)."""
        delta = MetadataDelta(self, offset)
        for record in records:
            delta.replay(record)
        return delta.image()

    def to_records(self) -> list[Record]:
        """Records that rebuild this image from empty: the content of a snapshot."""
        out: list[Record] = []
        for broker_id in sorted(self.brokers):
            out.extend(_broker_records(self.brokers[broker_id]))
        for name in sorted(self.topic_ids):
            topic = self.topics[self.topic_ids[name]]
            out.append(Topic(name=name, topic_id=topic.topic_id))
            out.extend(p.to_record() for p in topic.partitions)
        for (resource_type, resource_name), entries in sorted(self.configs.items()):
            out.extend(
                Config(resource_type, resource_name, key, value)
                for key, value in sorted(entries.items())
            )
        if self.next_producer_id > 0:
            out.append(
                ProducerIds(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id)
            )
        out.extend(acl_record(acl) for acl in sorted(self.acls, key=acl_sort_key))
        for name in sorted(self.scram_credentials):
            by_mechanism = self.scram_credentials[name]
            out.extend(credential_record(by_mechanism[m]) for m in sorted(by_mechanism))
        for entity in sorted(self.client_quotas, key=entity_sort_key):
            values = self.client_quotas[entity]
            out.extend(quota_record(entity, key, values[key]) for key in sorted(values))
        return out


_EMPTY: Mapping[str, str] = MappingProxyType({})


def _broker_records(b: BrokerRegistration) -> list[Record]:
    register = RegisterBroker(
        broker_id=b.broker_id,
        incarnation_id=b.incarnation_id,
        broker_epoch=b.broker_epoch,
        endpoints=b.endpoints,
        rack=b.rack,
        fenced=b.fenced,
    )
    if b.state is not BrokerState.CONTROLLED_SHUTDOWN:
        return [register]
    shutdown = BrokerRegistrationChange(
        b.broker_id, b.broker_epoch, BrokerAction.CONTROLLED_SHUTDOWN
    )
    return [register, shutdown]


def _bad(message: str, **details: Any) -> MetadataRecordError:
    return MetadataRecordError(message, **details)


class MetadataDelta:
    """Records replayed on top of `base`, to become the image at `offset`.

    The delta is the one mutable object here, private to one batch: it copies a
    base dict the first time a record writes to it and never writes to anything
    the base image holds.
    """

    def __init__(self, base: MetadataImage, offset: int) -> None:
        if offset <= base.offset:
            raise _bad(f"batch offset {offset} does not follow image offset {base.offset}")
        self._base = base
        self._offset = offset
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._topics: dict[str, TopicImage] | None = None
        self._topic_ids: dict[str, str] | None = None
        self._partitions: dict[str, list[PartitionState]] = {}  # topics touched
        self._configs: dict[ConfigResource, Mapping[str, str]] | None = None
        self._next_producer_id = base.next_producer_id
        self._acls: set[AclBinding] | None = None
        self._credentials: dict[str, Mapping[ScramMechanism, ScramCredential]] | None = None
        self._quotas: dict[QuotaEntity, Mapping[QuotaKey, float]] | None = None
        self._built = False

    # -- copy on write ----------------------------------------------------------

    def _w_brokers(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self._base.brokers)
        return self._brokers

    def _w_topics(self) -> tuple[dict[str, TopicImage], dict[str, str]]:
        if self._topics is None or self._topic_ids is None:
            self._topics = dict(self._base.topics)
            self._topic_ids = dict(self._base.topic_ids)
        return self._topics, self._topic_ids

    def _w_partitions(self, topic_id: str) -> list[PartitionState]:
        parts = self._partitions.get(topic_id)
        if parts is None:
            topic = self._topics_view().get(topic_id)
            if topic is None:
                raise _bad(f"unknown topic id {topic_id}", topic_id=topic_id)
            parts = self._partitions[topic_id] = list(topic.partitions)
        return parts

    def _w_configs(self) -> dict[ConfigResource, Mapping[str, str]]:
        if self._configs is None:
            self._configs = dict(self._base.configs)
        return self._configs

    def _w_acls(self) -> set[AclBinding]:
        if self._acls is None:
            self._acls = set(self._base.acls)
        return self._acls

    def _w_credentials(self) -> dict[str, Mapping[ScramMechanism, ScramCredential]]:
        if self._credentials is None:
            self._credentials = dict(self._base.scram_credentials)
        return self._credentials

    def _w_quotas(self) -> dict[QuotaEntity, Mapping[QuotaKey, float]]:
        if self._quotas is None:
            self._quotas = dict(self._base.client_quotas)
        return self._quotas

    def _brokers_view(self) -> Mapping[int, BrokerRegistration]:
        return self._base.brokers if self._brokers is None else self._brokers

    def _topics_view(self) -> Mapping[str, TopicImage]:
        return self._base.topics if self._topics is None else self._topics

    def _topic_ids_view(self) -> Mapping[str, str]:
        return self._base.topic_ids if self._topic_ids is None else self._topic_ids

    # -- replay -----------------------------------------------------------------

    def replay(self, record: Record) -> None:
        # After image() the dicts belong to an immutable image; writing on would
        # mutate it.
        assert not self._built, "a MetadataDelta builds one image; start a new delta"
        handler = _REPLAY.get(type(record))
        if handler is None:
            raise _bad(f"cannot replay {type(record).__name__}")
        handler(self, record)

    def _register_broker(self, r: RegisterBroker) -> None:
        old = self._brokers_view().get(r.broker_id)
        if old is not None and r.broker_epoch <= old.broker_epoch:
            raise _bad(
                f"broker {r.broker_id}: epoch {r.broker_epoch} does not follow {old.broker_epoch}",
                broker_id=r.broker_id,
            )
        state = BrokerState.FENCED if r.fenced else BrokerState.UNFENCED
        self._w_brokers()[r.broker_id] = BrokerRegistration(
            r.broker_id, r.incarnation_id, r.broker_epoch, r.endpoints, r.rack, state, self._offset
        )

    def _registered(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        broker = self._brokers_view().get(broker_id)
        if broker is None or broker.broker_epoch != broker_epoch:
            raise _bad(
                f"broker {broker_id} epoch {broker_epoch} is not registered", broker_id=broker_id
            )
        return broker

    def _broker_change(self, r: BrokerRegistrationChange) -> None:
        broker = self._registered(r.broker_id, r.broker_epoch)
        state = next_broker_state(broker.state, r.action)
        catch_up = self._offset if r.action is BrokerAction.FENCE else broker.catch_up_offset
        self._w_brokers()[r.broker_id] = replace(broker, state=state, catch_up_offset=catch_up)

    def _unregister_broker(self, r: UnregisterBroker) -> None:
        self._registered(r.broker_id, r.broker_epoch)
        del self._w_brokers()[r.broker_id]

    def _topic(self, r: Topic) -> None:
        topics, ids = self._w_topics()
        if not r.name or r.name in ids or r.topic_id in topics:
            raise _bad(f"topic {r.name!r} ({r.topic_id}) is empty or exists", topic=r.name)
        topics[r.topic_id] = TopicImage(r.name, r.topic_id, ())
        ids[r.name] = r.topic_id
        self._partitions[r.topic_id] = []

    def _partition(self, r: Partition) -> None:
        parts = self._w_partitions(r.topic_id)
        if r.partition != len(parts):
            raise _bad(f"partition {r.partition} of {r.topic_id} is not the next index")
        state = PartitionState(
            r.topic_id,
            r.partition,
            r.replicas,
            r.isr,
            r.leader,
            r.leader_epoch,
            r.partition_epoch,
            r.elr,
            r.last_known_leader,
        )
        state.check()
        parts.append(state)

    def _partition_change(self, r: PartitionChange) -> None:
        parts = self._w_partitions(r.topic_id)
        if not 0 <= r.partition < len(parts):
            raise _bad(f"unknown partition {r.topic_id}/{r.partition}")
        parts[r.partition] = parts[r.partition].changed(r)

    def _remove_topic(self, r: RemoveTopic) -> None:
        topics, ids = self._w_topics()
        topic = topics.pop(r.topic_id, None)
        if topic is None:
            raise _bad(f"unknown topic id {r.topic_id}", topic_id=r.topic_id)
        del ids[topic.name]
        self._partitions.pop(r.topic_id, None)
        # A topic's configs die with it: a new topic of the same name starts clean.
        self._w_configs().pop((ConfigResourceType.TOPIC, topic.name), None)

    def _config(self, r: Config) -> None:
        if r.resource_type is ConfigResourceType.TOPIC:
            if r.resource_name not in self._topic_ids_view():
                raise _bad(f"config for unknown topic {r.resource_name!r}")
        elif r.resource_name != "":
            raise _bad("cluster configs have the resource name ''")
        if not r.key:
            raise _bad("empty config key")
        configs = self._w_configs()
        resource = (r.resource_type, r.resource_name)
        entries = dict(configs.get(resource, {}))
        if r.value is None:
            entries.pop(r.key, None)
        else:
            entries[r.key] = r.value
        if entries:
            configs[resource] = MappingProxyType(entries)
        else:
            configs.pop(resource, None)

    def _producer_ids(self, r: ProducerIds) -> None:
        if r.next_producer_id <= self._next_producer_id:
            raise _bad(
                f"next producer id {r.next_producer_id} does not follow {self._next_producer_id}"
            )
        self._next_producer_id = r.next_producer_id

    def _acl(self, r: AccessControlEntry) -> None:
        acl = acl_of(r)
        acls = self._w_acls()
        if acl in acls:
            raise _bad(f"ACL {acl_sort_key(acl)} already exists")
        acls.add(acl)

    def _remove_acl(self, r: RemoveAccessControlEntry) -> None:
        acl = acl_of(r)
        acls = self._w_acls()
        if acl not in acls:
            raise _bad(f"ACL {acl_sort_key(acl)} does not exist")
        acls.remove(acl)

    def _scram_credential(self, r: UserScramCredential) -> None:
        credential = credential_of(r)
        credentials = self._w_credentials()
        mechanisms = dict(credentials.get(credential.name, {}))
        mechanisms[credential.mechanism] = credential
        credentials[credential.name] = MappingProxyType(mechanisms)

    def _remove_scram_credential(self, r: RemoveUserScramCredential) -> None:
        credentials = self._w_credentials()
        mechanisms = dict(credentials.get(r.name, {}))
        if mechanisms.pop(r.mechanism, None) is None:
            raise _bad(f"user {r.name!r} has no {r.mechanism} credential", user=r.name)
        if mechanisms:
            credentials[r.name] = MappingProxyType(mechanisms)
        else:
            del credentials[r.name]

    def _client_quota(self, r: ClientQuota) -> None:
        entity = entity_of(r.entity)
        quotas = self._w_quotas()
        values = dict(quotas.get(entity, {}))
        if r.remove:
            values.pop(r.key, None)
        else:
            check_quota_value(entity, r.key, r.value)
            values[r.key] = r.value
        if values:
            quotas[entity] = MappingProxyType(values)
        else:
            quotas.pop(entity, None)

    # -- build --------------------------------------------------------------------

    def image(self) -> MetadataImage:
        self._built = True
        base = self._base
        topics = self._topics
        if self._partitions:
            topics = dict(self._topics_view()) if topics is None else topics
            for topic_id, parts in self._partitions.items():
                old = topics[topic_id]
                topics[topic_id] = TopicImage(old.name, old.topic_id, tuple(parts))
        return MetadataImage(
            offset=self._offset,
            brokers=base.brokers if self._brokers is None else _frozen(self._brokers),
            topics=base.topics if topics is None else _frozen(topics),
            topic_ids=base.topic_ids if self._topic_ids is None else _frozen(self._topic_ids),
            configs=base.configs if self._configs is None else _frozen(self._configs),
            next_producer_id=self._next_producer_id,
            acls=base.acls if self._acls is None else frozenset(self._acls),
            scram_credentials=(
                base.scram_credentials if self._credentials is None else _frozen(self._credentials)
            ),
            client_quotas=base.client_quotas if self._quotas is None else _frozen(self._quotas),
            fsynced_since=self._fsynced_since(),
        )

    def _fsynced_since(self) -> Mapping[str, int]:
        """`fsynced_since` after this batch: a topic whose policy starts to
        fsync here dates from this offset, one created fsynced from its
        creation; those that stopped are dropped."""
        base = self._base
        if self._configs is None and self._topic_ids is None:
            return base.fsynced_since
        configs = self._configs if self._configs is not None else base.configs
        cluster = configs.get((ConfigResourceType.CLUSTER, ""), _EMPTY_CONFIG)
        since: dict[str, int] = {}
        for name, topic_id in self._topic_ids_view().items():
            own = configs.get((ConfigResourceType.TOPIC, name), _EMPTY_CONFIG).get(FLUSH_POLICY)
            policy = own if own is not None else cluster.get(FLUSH_POLICY)
            if policy not in FSYNCED_FLUSH_POLICIES:
                continue
            if topic_id not in base.topics:
                since[topic_id] = FSYNCED_SINCE_CREATION
            else:
                since[topic_id] = base.fsynced_since.get(topic_id, self._offset)
        return base.fsynced_since if since == dict(base.fsynced_since) else _frozen(since)


_REPLAY: Mapping[type, Any] = MappingProxyType(
    {
        RegisterBroker: MetadataDelta._register_broker,
        BrokerRegistrationChange: MetadataDelta._broker_change,
        UnregisterBroker: MetadataDelta._unregister_broker,
        Topic: MetadataDelta._topic,
        Partition: MetadataDelta._partition,
        PartitionChange: MetadataDelta._partition_change,
        RemoveTopic: MetadataDelta._remove_topic,
        Config: MetadataDelta._config,
        ProducerIds: MetadataDelta._producer_ids,
        AccessControlEntry: MetadataDelta._acl,
        RemoveAccessControlEntry: MetadataDelta._remove_acl,
        UserScramCredential: MetadataDelta._scram_credential,
        RemoveUserScramCredential: MetadataDelta._remove_scram_credential,
        ClientQuota: MetadataDelta._client_quota,
    }
)
