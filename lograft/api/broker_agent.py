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
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Callable
from typing import Any

from lograft.api.controller_client import CONTROLLER_REQUEST_TIMEOUT_MS, ControllerClient
from lograft.errors import BrokerIdNotRegisteredError, LograftError, StaleBrokerEpochError

log = logging.getLogger(__name__)


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
        self._task: asyncio.Task[None] | None = None

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
        self._task = asyncio.create_task(self._run(), name="broker-agent")

    async def _run(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while self.state not in (AgentState.SHUTTING_DOWN, AgentState.STOPPED):
            try:
                if self.state is AgentState.UNREGISTERED:
                    await self._register()
                else:
                    await self._heartbeat(want_shutdown=False)
            except asyncio.CancelledError:
                raise
            except (StaleBrokerEpochError, BrokerIdNotRegisteredError) as exc:
                log.warning("broker %d must register again: %s", self.broker_id, exc.message)
                self._to(AgentState.UNREGISTERED)
            except LograftError as exc:
                log.debug("broker %d: controller call failed: %s", self.broker_id, exc.message)
            except Exception:
                log.exception("broker %d: heartbeat failed", self.broker_id)
            await asyncio.sleep(interval)  # the heartbeat period

    async def _register(self) -> None:
        body: dict[str, Any] = {
            "broker_id": self.broker_id,
            "incarnation_id": self.incarnation_id,
            "endpoints": self.endpoints,
            "rack": self.rack,
        }
        result = await self.controller.call("register", body, local=self._local("register", body))
        self.broker_epoch = int(result["broker_epoch"])
        self._to(AgentState.FENCED)

    async def _heartbeat(self, *, want_shutdown: bool) -> dict[str, Any]:
        body = {
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "metadata_offset": self.metadata_offset(),
            "want_shutdown": want_shutdown,
        }
        # A controlled-shutdown heartbeat may wait for leaderships to move:
        # it keeps the ordinary controller-call timeout.
        timeout_ms = CONTROLLER_REQUEST_TIMEOUT_MS if want_shutdown else self.heartbeat_interval_ms
        result: dict[str, Any] = await self.controller.call(
            "heartbeat", body, local=self._local("heartbeat", body), timeout_ms=timeout_ms
        )
        if not want_shutdown:
            self._to(AgentState.FENCED if result["fenced"] else AgentState.ACTIVE)
        return result

    def _local(self, name: str, body: dict[str, Any]) -> Any:
        runtime = self.controller.runtime
        if runtime is None:
            return None
        from lograft.api.routes_internal import ControllerRpc

        async def call() -> dict[str, Any]:
            return await ControllerRpc(runtime).methods[name](body)

        return call

    async def shutdown(self, timeout_ms: int) -> bool:
        """Controlled shutdown: hand leaderships off; True if the controller agreed in time."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        registered = self.state in (AgentState.FENCED, AgentState.ACTIVE)
        self._to(AgentState.SHUTTING_DOWN)
        done = False
        if registered:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_ms / 1000
            while loop.time() < deadline:
                try:
                    result = await self._heartbeat(want_shutdown=True)
                    if result.get("should_shut_down"):
                        done = True
                        break
                except LograftError as exc:
                    log.debug("controlled shutdown heartbeat failed: %s", exc.message)
                await asyncio.sleep(self.heartbeat_interval_ms / 1000)  # heartbeat period
        self._to(AgentState.STOPPED)
        return done
