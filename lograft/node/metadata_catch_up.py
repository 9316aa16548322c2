"""A restarted broker acts only on current metadata (Kafka's initial catch-up).

At start, a node's Raft layer replays the metadata in its local journal before
it has heard from the quorum. That image can be stale: a partition this broker
led before it stopped may have a new leader since, and a broker acting on the
old image would accept writes (acks=1) as leader and truncate them later.

So, as Kafka's brokers do (KRaft's `BrokerLifecycleManager.initialCatchUpFuture`),
a broker does not lead, follow or serve anything until its metadata has caught
up to the offset the quorum had committed when it registered: the
`metadata_offset` of its registration answer, which includes its own
registration record. Until then the replica manager is given no metadata (it
hosts no replica in any role), the data routes answer a retriable 503
BROKER_NOT_AVAILABLE with Retry-After, and /readyz says not ready.

The gate closes once per process: a later re-registration (a controller that
forgot this broker) does not close it again, since the broker has been
following the quorum's metadata all along.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from lograft.errors import BrokerNotAvailableError


class AppliedOffsets(Protocol):
    """What the gate waits on: the next applied metadata offset (a
    `RaftAdapter.subscribe()` subscription)."""

    async def get(self) -> Any: ...


class MetadataCatchUp:
    """The offset a starting broker must reach, and whether it has."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        # The registration answer's metadata offset; None until registered.
        self.offset_to_reach: int | None = None
        self.caught_up = False
        self._registered = asyncio.Event()

    def registered(self, metadata_offset: int) -> None:
        """The controller answered our registration (the first answer counts)."""
        if self.offset_to_reach is None:
            self.offset_to_reach = metadata_offset
            self._registered.set()

    async def wait(self, image_offset: Callable[[], int], applied: AppliedOffsets) -> int:
        """Wait for the registration, then until the local metadata image has
        applied its offset; return that offset. `applied` wakes every round."""
        await self._registered.wait()
        assert self.offset_to_reach is not None
        while image_offset() < self.offset_to_reach:
            await applied.get()
        return self.offset_to_reach

    def done(self) -> None:
        """The replica manager follows the caught-up metadata: serve."""
        self.caught_up = True

    def refusal(self) -> BrokerNotAvailableError | None:
        """The error a data request gets while not caught up (None: serve)."""
        if self.caught_up:
            return None
        if self.offset_to_reach is None:
            why = "has not registered with the controller yet"
        else:
            why = f"is catching up with the metadata quorum (to offset {self.offset_to_reach})"
        return BrokerNotAvailableError(
            f"broker {self.node_id} {why}; it serves no partition until then, retry shortly",
            broker_id=self.node_id,
            reason="metadata_catching_up",
        )

    def ready_detail(self) -> dict[str, Any]:
        """What /readyz says about the catch-up."""
        return {
            "metadata_caught_up": self.caught_up,
            "metadata_offset_to_reach": self.offset_to_reach,
        }
