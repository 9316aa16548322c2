"""Producer-id blocks for idempotent producers.

Brokers hand out producer ids from blocks the controller allocates, so ids are
unique cluster-wide without a controller round trip per producer. Blocks are
contiguous, never reused, and allocated in log order: block k covers
[next_producer_id, next_producer_id + producer_id_block_size).
"""

from __future__ import annotations

from dataclasses import dataclass

from lograft.errors import LograftError
from lograft.quorum.broker_lifecycle import registered_broker
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.image import MetadataImage
from lograft.quorum.records import ProducerIds
from lograft.quorum.result import ControllerResult

# Kafka's producer ids are int64; the last block must end at or below this.
PRODUCER_ID_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


def allocate_producer_ids(
    image: MetadataImage, broker_id: int, broker_epoch: int, config: ControllerConfig
) -> ControllerResult[ProducerIdBlock]:
    registered_broker(image, broker_id, broker_epoch)
    first = image.next_producer_id
    size = config.producer_id_block_size
    if first + size - 1 > PRODUCER_ID_MAX:
        raise LograftError("producer id space is exhausted", next_producer_id=first)
    record = ProducerIds(broker_id, broker_epoch, first + size)
    return ControllerResult((record,), ProducerIdBlock(broker_id, first, size))
