"""lograft's Python client: producers and consumers over the HTTP API.

- `Producer` / `AsyncProducer`: batching per partition (`batch_bytes`,
  `linger_ms`) into Kafka RecordBatch v2, sent raw to partition leaders;
  acks 0/1/all; retries with exponential backoff within
  `delivery_timeout_ms`; idempotence on by default (producer id + sequence
  numbers: a retried batch is never written twice); bounded memory.
- `Consumer` / `AsyncConsumer`: `assign`, `seek*`, `position`, `poll` and
  iteration over raw fetched batches; with a `group_id`, `subscribe` (the
  coordinator assigns partitions; rebalance callbacks), `commit` (manual and
  auto) and `committed`.
- `Admin` / `AsyncAdmin`: the admin API (topics, cluster, consumer groups),
  each call answered with the API's JSON.
- `ClusterMetadata`: the topic/leader/broker cache all of them use.

This package imports only `lograft.protocol.batch` / `.compression`,
`lograft.protocol.partitioner` and `lograft.errors` of lograft: no server code.
See docs/client.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names are imported on first use (PEP 562): a process that needs one piece
# (a Spark executor reading a range needs the fetcher and the transport, not
# the producer or the group coordinator) does not pay for all of them.
_EXPORTS: dict[str, str] = {
    "Admin": "lograft.client.admin",
    "AdminConfig": "lograft.client.admin",
    "AsyncAdmin": "lograft.client.admin",
    "AsyncConsumer": "lograft.client.consumer",
    "AsyncProducer": "lograft.client.producer",
    "BufferFullError": "lograft.client.errors",
    "ClientClosedError": "lograft.client.errors",
    "ClientTimeoutError": "lograft.client.errors",
    "ClusterMetadata": "lograft.client.metadata",
    "ClusterUnreachableError": "lograft.client.errors",
    "CommitFailedError": "lograft.client.errors",
    "Consumer": "lograft.client.sync_consumer",
    "ConsumerConfig": "lograft.client.config",
    "ConsumerRecord": "lograft.client.types",
    "DeliveryTimeoutError": "lograft.client.errors",
    "FutureRecordMetadata": "lograft.client.record_future",
    "HttpResponse": "lograft.client.transport",
    "HttpTransport": "lograft.client.transport",
    "NetworkError": "lograft.client.errors",
    "NoOffsetForPartitionError": "lograft.client.errors",
    "OutcomeUnknownError": "lograft.client.errors",
    "PartitionMetadata": "lograft.client.metadata",
    "Producer": "lograft.client.sync_producer",
    "ProducerConfig": "lograft.client.config",
    "ProducerStats": "lograft.client.sender",
    "RecordMetadata": "lograft.client.types",
    "SerializationError": "lograft.client.errors",
    "ThrottleStats": "lograft.client.throttle",
    "ThrottledTransport": "lograft.client.throttle",
    "TimestampType": "lograft.client.types",
    "TopicMetadata": "lograft.client.metadata",
    "TopicPartition": "lograft.client.types",
    "Transport": "lograft.client.transport",
    "UnexpectedResponseError": "lograft.client.errors",
    "deserializers": "lograft.client.serde",
    "serializers": "lograft.client.serde",
}

if TYPE_CHECKING:
    from lograft.client.admin import Admin, AdminConfig, AsyncAdmin
    from lograft.client.config import ConsumerConfig, ProducerConfig
    from lograft.client.consumer import AsyncConsumer
    from lograft.client.errors import (
        BufferFullError,
        ClientClosedError,
        ClientTimeoutError,
        ClusterUnreachableError,
        CommitFailedError,
        DeliveryTimeoutError,
        NetworkError,
        NoOffsetForPartitionError,
        OutcomeUnknownError,
        SerializationError,
        UnexpectedResponseError,
    )
    from lograft.client.metadata import ClusterMetadata, PartitionMetadata, TopicMetadata
    from lograft.client.producer import AsyncProducer
    from lograft.client.record_future import FutureRecordMetadata
    from lograft.client.sender import ProducerStats
    from lograft.client.serde import deserializers, serializers
    from lograft.client.sync_consumer import Consumer
    from lograft.client.sync_producer import Producer
    from lograft.client.throttle import ThrottledTransport, ThrottleStats
    from lograft.client.transport import HttpResponse, HttpTransport, Transport
    from lograft.client.types import ConsumerRecord, RecordMetadata, TimestampType
    from lograft.protocol.topic_partition import TopicPartition


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "Admin",
    "AdminConfig",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "BufferFullError",
    "ClientClosedError",
    "ClientTimeoutError",
    "ClusterMetadata",
    "ClusterUnreachableError",
    "CommitFailedError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "DeliveryTimeoutError",
    "FutureRecordMetadata",
    "HttpResponse",
    "HttpTransport",
    "NetworkError",
    "NoOffsetForPartitionError",
    "OutcomeUnknownError",
    "PartitionMetadata",
    "Producer",
    "ProducerConfig",
    "ProducerStats",
    "RecordMetadata",
    "SerializationError",
    "ThrottleStats",
    "ThrottledTransport",
    "TimestampType",
    "TopicMetadata",
    "TopicPartition",
    "Transport",
    "UnexpectedResponseError",
    "deserializers",
    "serializers",
]
