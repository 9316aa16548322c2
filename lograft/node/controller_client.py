"""How a node reaches the active controller.

If this node's own `ControllerRuntime` is active, calls go straight to it, in
process (`LocalController`: the same `ControllerRpc` methods the HTTP route
serves, so both paths give the same answers), run on the controller's own
loop (node/controller_thread.py) whatever loop the caller is on. Otherwise
they are POSTed to the active controller's internal endpoint through the
node's `PeerClient`: at the Raft leader's controller listener when its
`[[voters]]` entry names one (`controller`, or its
`[controller_listener.dial]` entry), else at its HTTP address (or its
`[http.dial]` entry), with the cluster secret. When the leader is unknown or unreachable the other
voters are tried in turn; a voter that is not the controller answers
NOT_CONTROLLER naming the one that is, and the call follows that hint once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from lograft.api.routes_internal import CONTROLLER_PREFIX, ControllerRpc
from lograft.errors import BrokerNotAvailableError, LograftError, NotControllerError
from lograft.node.config import NodeConfig
from lograft.node.controller_thread import ControllerThread
from lograft.node.peer_client import PeerClient
from lograft.protocol.controller_wire import body_of, response_of
from lograft.typed import Record

R = TypeVar("R", bound=Record)

# One controller RPC over HTTP may take this long, ms.
CONTROLLER_REQUEST_TIMEOUT_MS = 10_000


class LocalController:
    """This node's own controller runtime, called in process on its own loop.

    Any caller (the main loop: admin changes, AlterPartition, producer ids,
    the main listener's controller route; the heartbeat thread) has the call
    run on the controller thread's loop and awaits it from its own, without a
    timeout (cancelling a request inside the runtime, mid-commit, made this
    node's followers fall out of ISRs; only stopping the caller cancels it).
    `active` reads the runtime's immutable status, never its sessions."""

    def __init__(self, thread: ControllerThread) -> None:
        assert thread.runtime is not None, "start the controller thread first"
        self.thread = thread
        self.rpc = ControllerRpc(thread.runtime)

    @property
    def active(self) -> bool:
        return self.thread.active

    def knows(self, name: str) -> bool:
        return self.rpc.knows(name)

    async def call(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.thread.call(lambda _runtime: self.rpc.call(name, body))


class ControllerClient:
    def __init__(
        self,
        config: NodeConfig,
        calls: PeerClient,
        local: LocalController | None,
        leader_id: Callable[[], int | None],
    ) -> None:
        self.config = config
        self.calls = calls
        self.local = local
        # A callable returning the Raft leader's node id as this node sees it.
        self._leader_id = leader_id

    def active_controller_id(self) -> int | None:
        leader = self._leader_id()
        return None if leader is None else int(leader)

    def _candidates(self, hint: int | None) -> list[str]:
        order: list[int] = []
        for nid in (hint, self._leader_id()):
            if nid is not None and nid not in order:
                order.append(int(nid))
        order.extend(v.node_id for v in self.config.voters if v.node_id not in order)
        urls = []
        for nid in order:
            voter = self.config.voter(nid)
            if voter is not None and nid != self.config.node_id:
                urls.append(self.calls.controller_url(voter))
        return urls

    async def call(
        self,
        name: str,
        body: dict[str, Any],
        *,
        timeout_ms: int = CONTROLLER_REQUEST_TIMEOUT_MS,
    ) -> Any:
        """`name` on this node's active runtime, or POSTed to the active
        controller, giving each voter tried `timeout_ms`."""
        if self.local is not None and self.local.active:
            return await self.local.call(name, body)
        hint: int | None = None
        last: LograftError | None = None
        for attempt in range(2):
            for url in self._candidates(hint):
                try:
                    return await self._post(url, name, body, timeout_ms)
                except NotControllerError as exc:
                    last = exc
                    leader = exc.details.get("leader_id")
                    if leader is not None and leader != hint and attempt == 0:
                        hint = int(leader)
                        break
                except BrokerNotAvailableError as exc:
                    last = exc
            else:
                break
        raise last or NotControllerError("no active controller is reachable; retry shortly")

    async def send(
        self,
        name: str,
        request: Record,
        into: type[R],
        *,
        timeout_ms: int = CONTROLLER_REQUEST_TIMEOUT_MS,
    ) -> R:
        """A broker's call (lograft/protocol/controller_wire.py): `request` out,
        its answer read as `into`."""
        doc = await self.call(name, body_of(request), timeout_ms=timeout_ms)
        return response_of(doc, into, BrokerNotAvailableError)

    async def _post(self, base: str, name: str, body: dict[str, Any], timeout_ms: int) -> Any:
        answer = await self.calls.call(
            base,
            "POST",
            f"{CONTROLLER_PREFIX}/{name}",
            body=orjson.dumps(body),
            timeout_ms=timeout_ms,
        )
        try:
            return orjson.loads(answer) if answer else {}
        except orjson.JSONDecodeError as exc:
            raise BrokerNotAvailableError(
                f"the controller at {base} answered {name} with invalid JSON: {exc}"
            ) from None
