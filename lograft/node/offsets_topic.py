"""Creating the internal `__consumer_offsets` topic on first use.

The first coordinator lookup that finds no such topic asks the active
controller to create it, compacted (only the latest value of each key is
needed to rebuild a coordinator), with `offsets_topic_num_partitions`
partitions and `offsets_topic_replication_factor` replicas capped at the live
brokers. Two brokers racing to create it is harmless: the loser gets
TOPIC_ALREADY_EXISTS and uses the winner's. The call returns once this node's
metadata, and its replicas, include the topic (bounded by
`OFFSETS_TOPIC_CATCH_UP_TIMEOUT_MS`), so the lookup can answer at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.errors import RequestTimedOutError, TopicAlreadyExistsError
from lograft.node.controller_client import ControllerClient
from lograft.protocol.controller_wire import CreateTopicRequest, CreateTopicResponse
from lograft.quorum.raft.adapter import RaftAdapter

# How long creation waits for this node's metadata and replicas to include the topic, ms.
OFFSETS_TOPIC_CATCH_UP_TIMEOUT_MS = 5_000


def offsets_topic_request(settings: GroupRuntimeSettings, live_brokers: int) -> CreateTopicRequest:
    return CreateTopicRequest(
        name=CONSUMER_OFFSETS_TOPIC,
        partitions=settings.offsets_topic_num_partitions,
        replication_factor=min(settings.offsets_topic_replication_factor, max(1, live_brokers)),
        configs={"cleanup_policy": "compact"},
    )


async def create_offsets_topic(
    request: CreateTopicRequest,
    controller: ControllerClient,
    raft: RaftAdapter,
    replicas_caught_up: Callable[[int, int], Awaitable[None]],
) -> None:
    try:
        result = await controller.send("create-topic", request, CreateTopicResponse)
    except TopicAlreadyExistsError:
        return  # created by another broker's lookup meanwhile
    offset = result.metadata_offset
    await raft.wait_for_offset(offset, OFFSETS_TOPIC_CATCH_UP_TIMEOUT_MS)
    # The lookup answers from metadata; the replicas only need to follow for
    # the coordinator to start loading, which clients retry through.
    with contextlib.suppress(RequestTimedOutError):
        await replicas_caught_up(offset, OFFSETS_TOPIC_CATCH_UP_TIMEOUT_MS)
