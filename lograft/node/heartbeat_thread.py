"""The thread that registers a broker and sends its heartbeats.

Heartbeats used to go out from the node's main asyncio loop, which also serves
produce, fetch and replication. On a saturated broker a heartbeat waited
behind that backlog past `broker_session_timeout_ms` and the controller fenced
a live broker. As Kafka's BrokerLifecycleManager has its own thread, this one
runs its own small event loop and its own HTTP client session, so a busy (or
stalled) main loop cannot delay a heartbeat.

Ownership, so no lock is needed:

- this thread owns the wire state of the broker's session with the
  controller (registered or not, the broker epoch it was given), because the
  next request depends on the previous answer and must not wait for a busy
  main loop to apply it;
- it reads only atomic snapshots from the main loop (the applied metadata
  offset, an int read by a callable);
- it hands every outcome to the main loop with `loop.call_soon_threadsafe`:
  the broker's state transitions (FENCED, ACTIVE, UNREGISTERED) and the
  `broker_epoch` the data path uses happen there only.

When this node is itself the active controller the call is local: its
`ControllerRuntime` lives on the controller's own thread and loop
(controller_thread.py), so the client's `LocalController` runs the call
there, and a busy main loop delays it no more than a remote one. A remote
heartbeat gives up after one interval (broker_agent's rule); a local one has
no timeout, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lograft.errors import BrokerIdNotRegisteredError, LograftError, StaleBrokerEpochError
from lograft.node.controller_client import ControllerClient
from lograft.protocol import controller_wire as w

log = logging.getLogger(__name__)

# Builds the thread's controller client, on the thread: its PeerClient opens
# its pool on the thread's loop, and its LocalController (when this node is a
# controller) runs calls on the controller's own loop. The node passes one using its
# PeerUrls, so [http.dial] proxies still apply.
ClientFactory = Callable[[], ControllerClient]


@dataclass(frozen=True)
class Registered:
    broker_epoch: int
    # The quorum's metadata offset that includes the registration: what the
    # broker's metadata must reach before it serves (metadata_catch_up.py).
    metadata_offset: int


@dataclass(frozen=True)
class HeartbeatAnswer:
    broker_epoch: int
    fenced: bool


@dataclass(frozen=True)
class MustRegister:
    reason: str


Outcome = Registered | HeartbeatAnswer | MustRegister


@dataclass(frozen=True)
class HeartbeatSpec:
    broker_id: int
    incarnation_id: str
    endpoints: dict[str, str]
    rack: str | None
    heartbeat_interval_ms: int
    # What the first registration says of the last shutdown (clean_shutdown.py).
    previous_broker_epoch: int = -1


class HeartbeatThread:
    def __init__(
        self,
        spec: HeartbeatSpec,
        client_factory: ClientFactory,
        metadata_offset: Callable[[], int],
        deliver: Callable[[Outcome], None],
    ) -> None:
        self.spec = spec
        self._previous_broker_epoch = spec.previous_broker_epoch
        self._client_factory = client_factory
        self._metadata_offset = metadata_offset
        self._deliver = deliver  # runs on the main loop
        self._main_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        # Wire state, owned by this thread while it runs.
        self.broker_epoch = -1
        self.session_closed = False

    # -- main-loop side ------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; call on the main loop (its responses go there)."""
        self._main_loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._main, name=f"broker-{self.spec.broker_id}-heartbeat", daemon=True
        )
        self._thread.start()

    async def stop(self, timeout_s: float) -> bool:
        """Cancel the heartbeat loop and join the thread; True if it ended in time."""
        thread = self._thread
        if thread is None:
            return True
        # Wait for the loop to exist: a stop right after start must still reach it.
        await asyncio.to_thread(self._started.wait, timeout_s)
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            # RuntimeError: its loop already closed, the thread is ending.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        await asyncio.to_thread(thread.join, timeout_s)
        return not thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- heartbeat-thread side -------------------------------------------------------------

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._task = loop.create_task(self._run(), name="broker-heartbeat")
            self._started.set()
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            self._started.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _run(self) -> None:
        client = self._client_factory()
        try:
            interval = self.spec.heartbeat_interval_ms / 1000
            while True:
                self._post(await self._beat(client))
                await asyncio.sleep(interval)  # the heartbeat period
        finally:
            await client.calls.close()
            self.session_closed = True

    async def _beat(self, client: ControllerClient) -> Outcome | None:
        try:
            if self.broker_epoch < 0:
                return await self._register(client)
            return await self._heartbeat(client)
        except (StaleBrokerEpochError, BrokerIdNotRegisteredError) as exc:
            if self.broker_epoch >= 0:
                # This process holds its logs intact: registering again is a
                # clean restart of the session, not of the broker.
                self._previous_broker_epoch = self.broker_epoch
            self.broker_epoch = -1
            return MustRegister(exc.message)
        except LograftError as exc:
            log.debug("broker %d: controller call failed: %s", self.spec.broker_id, exc.message)
        except Exception:
            log.exception("broker %d: heartbeat failed", self.spec.broker_id)
        return None

    async def _register(self, client: ControllerClient) -> Outcome:
        request = w.RegisterBrokerRequest(
            broker_id=self.spec.broker_id,
            incarnation_id=self.spec.incarnation_id,
            endpoints=self.spec.endpoints,
            rack=self.spec.rack,
            previous_broker_epoch=self._previous_broker_epoch,
        )
        result = await client.send("register", request, w.RegisterBrokerResponse)
        self.broker_epoch = result.broker_epoch
        return Registered(self.broker_epoch, result.metadata_offset)

    async def _heartbeat(self, client: ControllerClient) -> Outcome:
        request = w.heartbeat_request(
            self.spec.broker_id, self.broker_epoch, self._metadata_offset()
        )
        # Gives up after one interval (see broker_agent): a stuck heartbeat
        # must not hold the next one past the session. A local one (this
        # node's own runtime, on the controller's loop) has no timeout.
        result = await client.send(
            "heartbeat", request, w.HeartbeatResponse, timeout_ms=self.spec.heartbeat_interval_ms
        )
        return HeartbeatAnswer(self.broker_epoch, result.fenced)

    def _post(self, outcome: Outcome | None) -> None:
        main = self._main_loop
        if outcome is None or main is None:
            return
        # RuntimeError: the main loop closed, the node is gone.
        with contextlib.suppress(RuntimeError):
            main.call_soon_threadsafe(self._deliver, outcome)
