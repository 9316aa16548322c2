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
- `ClusterMetadata`: the topic/leader/broker cache both use.

This package imports only `lograft.storage.batch` / `.compression`,
`lograft.brokers.partitioner` and `lograft.errors` of lograft: no server code.
See docs/client.md.
"""

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
from lograft.client.transport import HttpResponse, HttpTransport, Transport
from lograft.client.types import ConsumerRecord, RecordMetadata, TimestampType, TopicPartition

__all__ = [
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
    "PartitionMetadata",
    "Producer",
    "ProducerConfig",
    "ProducerStats",
    "RecordMetadata",
    "SerializationError",
    "TimestampType",
    "TopicMetadata",
    "TopicPartition",
    "Transport",
    "UnexpectedResponseError",
    "deserializers",
    "serializers",
]
