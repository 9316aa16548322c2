"""A driver for the pure controller in tests: applies results as the runtime would.

Every batch goes through encode_batch/decode_batch before replay, so every
test that drives the controller also exercises the codec.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from lograft.quorum.broker_lifecycle import (
    HeartbeatRequest,
    RegisterBrokerRequest,
    broker_heartbeat,
    fence_expired_brokers,
    register_broker,
)
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.image import MetadataImage, PartitionState
from lograft.quorum.records import Record, decode_batch, encode_batch, endpoints_from
from lograft.quorum.result import ControllerResult
from lograft.quorum.sessions import BrokerSessions
from lograft.quorum.topics import CreateTopicRequest, create_topic


@dataclass
class Cluster:
    config: ControllerConfig = field(default_factory=ControllerConfig)
    image: MetadataImage = field(default_factory=MetadataImage.empty)
    sessions: BrokerSessions = field(default_factory=BrokerSessions)
    now_ms: int = 0
    epochs: dict[int, int] = field(default_factory=dict)
    incarnations: dict[int, str] = field(default_factory=dict)
    # Every batch applied, with its offset: what a metadata log would hold.
    batch_log: list[tuple[int, list[Record]]] = field(default_factory=list)

    def apply(self, result: ControllerResult[Any]) -> Any:
        if result.sessions is not None:
            self.sessions = result.sessions
        if result.records:
            batch = decode_batch(encode_batch(result.records))
            self.image = self.image.apply_batch(self.image.offset + 1, batch)
            self.batch_log.append((self.image.offset, batch))
        return result.response

    def register(
        self, broker_id: int, rack: str | None = None, previous_broker_epoch: int | None = None
    ) -> int:
        incarnation = str(uuid.uuid4())
        request = RegisterBrokerRequest(
            broker_id,
            incarnation,
            endpoints_from({"http": f"127.0.0.1:{9000 + broker_id}"}),
            rack,
            previous_broker_epoch,
        )
        epoch = self.apply(
            register_broker(self.image, self.sessions, request, self.now_ms, self.config)
        ).broker_epoch
        self.epochs[broker_id] = epoch
        self.incarnations[broker_id] = incarnation
        return epoch

    def heartbeat(self, broker_id: int, offset: int | None = None, shutdown: bool = False) -> Any:
        request = HeartbeatRequest(
            broker_id,
            self.epochs[broker_id],
            self.image.offset if offset is None else offset,
            want_shutdown=shutdown,
        )
        return self.apply(
            broker_heartbeat(self.image, self.sessions, request, self.now_ms, self.config)
        )

    def fence_tick(self) -> tuple[int, ...]:
        return self.apply(
            fence_expired_brokers(self.image, self.sessions, self.now_ms, self.config)
        )

    def create(self, name: str, partitions: int, rf: int, **configs: str) -> str:
        request = CreateTopicRequest(name, partitions, rf, configs)
        topic_id = str(uuid.uuid4())
        self.apply(create_topic(self.image, request, topic_id, self.config))
        return topic_id

    def partition(self, topic_id: str, index: int) -> PartitionState:
        p = self.image.partition(topic_id, index)
        assert p is not None
        return p


def cluster_of(
    broker_ids: range | list[int], racks: dict[int, str] | None = None, **config: Any
) -> Cluster:
    """A cluster whose brokers are registered and unfenced, at now_ms = 0."""
    cluster = Cluster(config=ControllerConfig(**config))
    for b in broker_ids:
        cluster.register(b, (racks or {}).get(b))
    for b in broker_ids:
        assert not cluster.heartbeat(b).fenced
    return cluster


def dump(image: MetadataImage) -> Any:
    """A plain deep copy of everything in an image, to detect any mutation."""
    return (
        image.offset,
        {b: repr(reg) for b, reg in image.brokers.items()},
        {
            t: (ti.name, ti.topic_id, tuple(repr(p) for p in ti.partitions))
            for t, ti in image.topics.items()
        },
        dict(image.topic_ids),
        {k: dict(v) for k, v in image.configs.items()},
        image.next_producer_id,
    )
