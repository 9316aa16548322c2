"""How a node reaches the active controller.

If this node's own `ControllerRuntime` is active, calls go straight to it.
Otherwise they are POSTed to the active controller's internal endpoint (the
Raft leader's HTTP address from the voters list, or its `[http.dial]` entry:
`PeerUrls`), with the cluster secret.
When the leader is unknown or unreachable the other voters are tried in turn;
a voter that is not the controller answers NOT_CONTROLLER naming the one that
is, and the call follows that hint once.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from lograft.api.app import SECRET_HEADER
from lograft.errors import (
    BrokerNotAvailableError,
    LograftError,
    NotControllerError,
)
from lograft.node.config import NodeConfig
from lograft.node.peer_urls import PeerUrls
from lograft.quorum.controller_runtime import ControllerRuntime

CONTROLLER_PREFIX = "/internal/v1/controller"
# One controller RPC over HTTP may take this long, ms.
CONTROLLER_REQUEST_TIMEOUT_MS = 10_000


class ControllerClient:
    def __init__(
        self,
        config: NodeConfig,
        session: aiohttp.ClientSession,
        runtime: ControllerRuntime | None,
        leader_id: Any,
        peers: PeerUrls | None = None,
    ) -> None:
        self.config = config
        self.peers = peers or PeerUrls(config.http.dial)
        self.session = session
        self.runtime = runtime
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
                urls.append(self.peers.voter(voter))
        return urls

    async def call(
        self,
        name: str,
        body: dict[str, Any],
        local: Any = None,
        *,
        timeout_ms: int = CONTROLLER_REQUEST_TIMEOUT_MS,
    ) -> Any:
        """Run `local()` on this node's active runtime, or POST `body` to `name`,
        giving each voter tried `timeout_ms`."""
        if self.runtime is not None and self.runtime.active and local is not None:
            return await local()
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

    async def _post(self, base: str, name: str, body: dict[str, Any], timeout_ms: int) -> Any:
        try:
            async with self.session.post(
                f"{base}{CONTROLLER_PREFIX}/{name}",
                data=orjson.dumps(body),
                headers={
                    "Content-Type": "application/json",
                    SECRET_HEADER: self.config.cluster_secret,
                },
                timeout=aiohttp.ClientTimeout(total=timeout_ms / 1000),
            ) as resp:
                payload = await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise BrokerNotAvailableError(f"controller at {base} is unreachable: {exc}") from None
        doc = orjson.loads(payload) if payload else {}
        if status >= 400:
            try:
                error = LograftError.from_dict(doc.get("error") if isinstance(doc, dict) else None)
            except ValueError as exc:
                error = LograftError(f"controller at {base} answered {status}: {exc}")
            raise error
        return doc
