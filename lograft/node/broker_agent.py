"""A broker's standing with the controller: registration and heartbeats.

States (one place for transitions)::

    UNREGISTERED -> REGISTERED (fenced) -> ACTIVE (unfenced) <-> FENCED
    any -> SHUTTING_DOWN -> STOPPED

The agent registers with a fresh incarnation id per process, then heartbeats
every `broker_heartbeat_interval_ms`, reporting the metadata offset it has
applied; the controller unfences it once it has caught up. A heartbeat
answered STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED (the controller
forgot or replaced us) leads to registering again. On shutdown it asks for a
controlled shutdown, so its leaderships move before it stops.

A heartbeat gives up after one heartbeat interval (not the 10 s of other
controller calls): heartbeats go one at a time, so a heartbeat stuck on a
controller that stopped answering without closing its connections (SIGSTOP,
a partition that drops packets) would otherwise hold every later one while
the next controller, which starts each broker on a fresh
`broker_session_timeout_ms` session, fences this live broker. With the
defaults, timeout + interval (1 s) stays inside the 1.5 s session. A
controller that is merely slow still receives the heartbeat (its session is
refreshed); only the answer is dropped, and the next heartbeat follows.

Registration and heartbeats run on their own thread and event loop
(`heartbeat_thread.py`), so a saturated main loop cannot make them late; the
answers come back to this object on the main loop, where every state
transition happens. The controlled-shutdown heartbeats run on the main loop
after that thread has stopped.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable

from lograft.errors import LograftError
from lograft.node.controller_client import ControllerClient
from lograft.node.heartbeat_thread import (
    ClientFactory,
    HeartbeatAnswer,
    HeartbeatSpec,
    HeartbeatThread,
    Outcome,
    Registered,
)
from lograft.protocol import controller_wire as w

log = logging.getLogger(__name__)

# Stopping the heartbeat thread cancels its call in flight, so it ends at
# once; this only bounds a thread stuck in a blocking call.
THREAD_JOIN_TIMEOUT_S = 2.0


class AgentState(enum.Enum):
    UNREGISTERED = "unregistered"
    FENCED = "fenced"
    ACTIVE = "active"
    SHUTTING_DOWN = "shutting_down"
    STOPPED = "stopped"


_ALLOWED = {
    AgentState.UNREGISTERED: {AgentState.FENCED, AgentState.SHUTTING_DOWN, AgentState.STOPPED},
    AgentState.FENCED: {
        AgentState.ACTIVE,
        AgentState.UNREGISTERED,
        AgentState.SHUTTING_DOWN,
        AgentState.STOPPED,
    },
    AgentState.ACTIVE: {
        AgentState.FENCED,
        AgentState.UNREGISTERED,
        AgentState.SHUTTING_DOWN,
        AgentState.STOPPED,
    },
    AgentState.SHUTTING_DOWN: {AgentState.STOPPED},
    AgentState.STOPPED: set(),
}


class BrokerAgent:
    def __init__(
        self,
        broker_id: int,
        endpoints: dict[str, str],
        rack: str | None,
        controller: ControllerClient,
        metadata_offset: Callable[[], int],
        *,
        heartbeat_interval_ms: int,
        client_factory: ClientFactory,
        on_registered: Callable[[int], None] | None = None,
        previous_broker_epoch: int = -1,
    ) -> None:
        self.broker_id = broker_id
        self.endpoints = endpoints
        self.rack = rack
        self.controller = controller
        self.metadata_offset = metadata_offset
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.incarnation_id = str(uuid.uuid4())
        self.broker_epoch = -1
        self.state = AgentState.UNREGISTERED
        # Builds the heartbeat thread's own client, on that thread (`controller`'s
        # pool belongs to the main loop).
        self.client_factory = client_factory
        # Hears each registration's metadata offset (the initial catch-up target).
        self.on_registered = on_registered
        self.previous_broker_epoch = previous_broker_epoch
        self._thread: HeartbeatThread | None = None

    def _to(self, new: AgentState) -> None:
        if new is self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise AssertionError(f"broker agent: illegal {self.state.value} -> {new.value}")
        log.info("broker %d: %s -> %s", self.broker_id, self.state.value, new.value)
        self.state = new

    @property
    def unfenced(self) -> bool:
        return self.state is AgentState.ACTIVE

    async def start(self) -> None:
        """Start the heartbeat thread (registration and heartbeats run there)."""
        spec = HeartbeatSpec(
            self.broker_id,
            self.incarnation_id,
            self.endpoints,
            self.rack,
            self.heartbeat_interval_ms,
            self.previous_broker_epoch,
        )
        self._thread = HeartbeatThread(spec, self.client_factory, self.metadata_offset, self._apply)
        self._thread.start()

    def _apply(self, outcome: Outcome) -> None:
        """One answer from the heartbeat thread; runs on the main loop, the only
        place the state and `broker_epoch` change."""
        if self.state in (AgentState.SHUTTING_DOWN, AgentState.STOPPED):
            return  # a late answer after shutdown began changes nothing
        if isinstance(outcome, Registered):
            self.broker_epoch = outcome.broker_epoch
            self._to(AgentState.FENCED)
            if self.on_registered is not None:
                self.on_registered(outcome.metadata_offset)
        elif isinstance(outcome, HeartbeatAnswer):
            self.broker_epoch = outcome.broker_epoch
            if self.state is not AgentState.UNREGISTERED:
                self._to(AgentState.FENCED if outcome.fenced else AgentState.ACTIVE)
        else:
            log.warning("broker %d must register again: %s", self.broker_id, outcome.reason)
            self._to(AgentState.UNREGISTERED)

    async def _shutdown_heartbeat(self) -> w.HeartbeatResponse:
        """A want_shutdown heartbeat, from the main loop once the thread stopped."""
        request = w.heartbeat_request(
            self.broker_id, self.broker_epoch, self.metadata_offset(), want_shutdown=True
        )
        # It may wait for leaderships to move: the ordinary controller-call timeout.
        return await self.controller.send("heartbeat", request, w.HeartbeatResponse)

    async def shutdown(self, timeout_ms: int) -> bool:
        """Controlled shutdown: hand leaderships off; True if the controller agreed in time."""
        if self._thread is not None:
            # Bounded: a heartbeat in flight is cancelled, not awaited.
            if not await self._thread.stop(THREAD_JOIN_TIMEOUT_S):
                log.warning("broker %d: heartbeat thread did not stop", self.broker_id)
            # The thread's last word, not answers still queued for _apply.
            self.broker_epoch = self._thread.broker_epoch
        registered = self.broker_epoch >= 0
        self._to(AgentState.SHUTTING_DOWN)
        done = False
        if registered:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_ms / 1000
            while loop.time() < deadline:
                try:
                    result = await self._shutdown_heartbeat()
                    if result.should_shut_down:
                        done = True
                        break
                except LograftError as exc:
                    log.debug("controlled shutdown heartbeat failed: %s", exc.message)
                await asyncio.sleep(self.heartbeat_interval_ms / 1000)  # heartbeat period
        self._to(AgentState.STOPPED)
        return done
