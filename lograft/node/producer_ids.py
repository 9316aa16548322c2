"""Producer ids for idempotent producers (Kafka's InitProducerId).

A broker takes blocks of ids from the active controller (`producer-ids`, one
metadata record per block, so ids are never handed out twice even across
controller failovers) and gives them out one at a time at
`POST /v1/producers`: `{"producer_id": 4000, "producer_epoch": 0}`. A client
stamps its batches with the id, epoch 0 and sequences from 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from lograft.api import access
from lograft.api.caller import caller_of
from lograft.api.routes_data import json_response
from lograft.errors import BrokerNotAvailableError, ClusterAuthorizationFailedError
from lograft.security.acls import CLUSTER_RESOURCE_NAME, AclOperation, ResourceType

BlockFetcher = Callable[[], Awaitable[dict[str, Any]]]


class ProducerIdManager:
    def __init__(self, fetch_block: BlockFetcher) -> None:
        self._fetch_block = fetch_block
        self._next = 0
        self._end = 0  # exclusive
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                block = await self._fetch_block()
                first = int(block["first_producer_id"])
                self._next, self._end = first, first + int(block["size"])
            pid = self._next
            self._next += 1
            return pid


def add_producer_routes(
    app: web.Application, ids: ProducerIdManager, registered: Callable[[], bool]
) -> None:
    async def init_producer(request: web.Request) -> web.Response:
        # Kafka's InitProducerId without a transactional id: IDEMPOTENT_WRITE
        # on the cluster, or WRITE on any topic (KIP-679). lograft has no
        # IDEMPOTENT_WRITE operation: ALL on the cluster stands for it.
        if not access.may_any(request, ResourceType.TOPIC, AclOperation.WRITE) and not access.may(
            request, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, AclOperation.ALL
        ):
            principal = caller_of(request).principal
            raise ClusterAuthorizationFailedError(
                f"{principal} may not take a producer id: that needs WRITE on at least "
                "one topic, or ALL on the cluster",
                principal=principal,
                resource_type=ResourceType.CLUSTER.value,
                operation=AclOperation.WRITE.value,
            )
        if not registered():
            raise BrokerNotAvailableError("this broker is not registered yet; retry shortly")
        pid = await ids.next_id()
        return json_response({"producer_id": pid, "producer_epoch": 0}, 201)

    app.router.add_post("/v1/producers", init_producer)
