"""Topic and cluster configs: key rules, lookups with fallback, and the alter handler.

A topic's effective value for a key is its own entry, else the cluster entry
(resource name ""), else the built-in default. Keys are free-form names from
[a-zA-Z0-9._-] (other packages define what they mean); the keys this package
interprets have their values checked here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from lograft.echo import clip, shown
from lograft.errors import InvalidConfigError, UnknownTopicOrPartitionError
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.election import (
    MinIsr,
    elect_offline_leaders,
    min_isr_of,
    partition_change,
)
from lograft.quorum.image import MetadataImage, PartitionState
from lograft.quorum.internal_topics import check_topic_config_changes
from lograft.quorum.records import Config, ConfigResourceType, Record
from lograft.quorum.result import ControllerResult

UNCLEAN_LEADER_ELECTION = "unclean_leader_election"
# Checked by lograft/api/topic_configs.py (an integer from 1 to the replication
# factor); read here because the ELR depends on it (election.py).
MIN_INSYNC_REPLICAS = "min_insync_replicas"

CONFIG_KEY_LENGTH_MAX = 255
_KEY = re.compile(r"[a-zA-Z0-9._-]+")
_BOOLEAN_KEYS = frozenset({UNCLEAN_LEADER_ELECTION})


def validate_config_entry(key: str, value: str | None, config: ControllerConfig) -> None:
    """Raise InvalidConfigError (naming the key) unless `key` = `value` may be stored."""
    if len(key) > CONFIG_KEY_LENGTH_MAX or not _KEY.fullmatch(key):
        raise InvalidConfigError(f"invalid config key {shown(key)}", key=clip(key))
    if value is None:
        return
    if len(value.encode()) > config.config_value_bytes_max:
        raise InvalidConfigError(f"config {key} is longer than the limit", key=key)
    if key in _BOOLEAN_KEYS and value not in ("true", "false"):
        raise InvalidConfigError(
            f"config {key} must be 'true' or 'false'", key=key, value=clip(value)
        )


def validate_config_entries(entries: Mapping[str, str], config: ControllerConfig) -> None:
    if len(entries) > config.configs_per_request_max:
        raise InvalidConfigError(f"more than {config.configs_per_request_max} configs")
    for key, value in entries.items():
        validate_config_entry(key, value, config)


def effective_topic_config(image: MetadataImage, topic_name: str, key: str) -> str | None:
    own = image.config(ConfigResourceType.TOPIC, topic_name).get(key)
    return own if own is not None else image.config(ConfigResourceType.CLUSTER, "").get(key)


def unclean_leader_election(image: MetadataImage, topic_name: str) -> bool:
    value = effective_topic_config(image, topic_name, UNCLEAN_LEADER_ELECTION)
    return value == "true"


def unclean_topic_ids(image: MetadataImage) -> frozenset[str]:
    """Ids of the topics whose offline partitions may elect an out-of-sync leader."""
    return frozenset(
        topic_id
        for name, topic_id in image.topic_ids.items()
        if unclean_leader_election(image, name)
    )


def fsynced_topic_ids(image: MetadataImage, registered_epoch: int) -> frozenset[str]:
    """Ids of the topics whose records a broker incarnation registered with
    `registered_epoch` held fsynced: their flush policy fsyncs (group_commit,
    every_batch) and already did before that registration, so the
    incarnation wrote nothing under a policy that did not fsync, and what it
    found on disk was flushed by a clean shutdown or was judged at its own
    registration by this same rule (election.changes_after_unclean_shutdown).
    A topic switched to fsyncing (e.g. from `none`) while the incarnation ran
    is not one: records written before the switch may never have been
    flushed. A broker epoch exceeds the metadata offset it was registered
    at (broker_lifecycle.py)."""
    return frozenset(t for t, since in image.fsynced_since.items() if since < registered_epoch)


def topic_min_isr(image: MetadataImage) -> MinIsr:
    """Topic id -> effective min_insync_replicas, for the topics (or cluster)
    that set one; election.min_isr_of gives the default for the others."""
    out: dict[str, int] = {}
    for name, topic_id in image.topic_ids.items():
        value = effective_topic_config(image, name, MIN_INSYNC_REPLICAS)
        if value is not None and value.isdigit():
            out[topic_id] = int(value)
    return out


def partition_min_isr(image: MetadataImage, p: PartitionState) -> int:
    """`p`'s effective min_insync_replicas (one topic's lookup)."""
    topic = image.topics.get(p.topic_id)
    value = (
        None if topic is None else effective_topic_config(image, topic.name, MIN_INSYNC_REPLICAS)
    )
    configured = {p.topic_id: int(value)} if value is not None and value.isdigit() else {}
    return min_isr_of(p, configured)


@dataclass(frozen=True, slots=True)
class AlterConfigRequest:
    resource_type: ConfigResourceType
    resource_name: str  # topic name, or "" for the cluster
    key: str
    value: str | None  # None deletes the key


def alter_config(
    image: MetadataImage, request: AlterConfigRequest, config: ControllerConfig
) -> ControllerResult[None]:
    """Set or delete one config; enabling unclean election elects offline leaders."""
    _check_resource(image, request.resource_type, request.resource_name)
    validate_config_entry(request.key, request.value, config)
    if request.resource_type is ConfigResourceType.TOPIC:
        check_topic_config_changes(request.resource_name, {request.key: request.value})
    record = Config(request.resource_type, request.resource_name, request.key, request.value)
    records: list[Record] = [record]
    if request.key == UNCLEAN_LEADER_ELECTION:
        records.extend(_elections_after(image, record))
    if request.key == MIN_INSYNC_REPLICAS:
        records.extend(_elr_cleared(image, record))
    return ControllerResult(tuple(records), None)


def _elr_cleared(image: MetadataImage, record: Config) -> list[Record]:
    """A changed min_insync_replicas empties the ELRs it concerns, as in Kafka:
    lowered, a leader's HW may move again with an ISR that was too short, so
    replicas outside it no longer hold every committed record."""
    if record.resource_type is ConfigResourceType.TOPIC:
        topic = image.topic(record.resource_name)
        partitions = topic.partitions if topic is not None else ()
    else:
        partitions = tuple(image.all_partitions())
    changes = (partition_change(p, p.isr, p.leader, elr=()) for p in partitions if p.elr)
    return [c for c in changes if c is not None]


def _check_resource(image: MetadataImage, kind: ConfigResourceType, name: str) -> None:
    if kind is ConfigResourceType.TOPIC and name not in image.topic_ids:
        raise UnknownTopicOrPartitionError(f"unknown topic {name!r}", topic=name)
    if kind is ConfigResourceType.CLUSTER and name != "":
        raise InvalidConfigError("cluster configs have the resource name ''", name=name)


def _elections_after(image: MetadataImage, record: Config) -> list[Record]:
    # Judge the offline partitions by the configs as they will be once `record`
    # applies: replay onto a scratch image (the offset is only a placeholder).
    after = image.replay(record, image.offset + 1)
    usable = set(after.usable_broker_ids())
    offline = (p for p in after.all_partitions() if p.offline)
    return list(
        elect_offline_leaders(offline, usable, unclean_topic_ids(after), topic_min_isr(after))
    )
