"""In-process Raft clusters for unit tests: several adapters in one event loop.

Each node runs its own pysyncobj thread, so this is real Raft over real
loopback sockets; only the processes are shared. `stop()` always runs (use
`async with`), so ports, threads and files are released even when a test fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lograft.quorum.raft.adapter import RaftAdapter, RaftConfig
from tests.raft_support import (
    FAST_TIMINGS,
    RAFT_TEST_PASSWORD,
    ListStateMachine,
    eventually_async,
    free_port,
)


@dataclass
class Member:
    adapter: RaftAdapter
    sm: ListStateMachine

    @property
    def node_id(self) -> str:
        return self.adapter.node_id


class InProcessCluster:
    """Voters `ids`, each dialing the others directly unless `dial` overrides a pair.

    `dial[(a, b)]` is the address node a uses to reach node b.
    """

    def __init__(
        self,
        tmp_path: Path,
        ids: list[str],
        *,
        dial: Mapping[tuple[str, str], str] | None = None,
        **overrides: Any,
    ) -> None:
        self.tmp_path = tmp_path
        self.ids = list(ids)
        self.ports = {i: free_port() for i in ids}
        self.dial = dict(dial or {})
        self.overrides = {**FAST_TIMINGS, "password": RAFT_TEST_PASSWORD, **overrides}
        self.members: dict[str, Member] = {}
        self.observers: dict[str, Member] = {}

    def listen_address(self, node_id: str) -> str:
        return f"127.0.0.1:{self.ports[node_id]}"

    def peers_of(self, node_id: str) -> dict[str, str]:
        return {
            other: self.dial.get((node_id, other), self.listen_address(other))
            for other in self.ids
            if other != node_id
        }

    def config(self, node_id: str, **extra: Any) -> RaftConfig:
        return RaftConfig(
            node_id=node_id,
            data_dir=self.tmp_path / node_id,
            peers=self.peers_of(node_id),
            listen_address=self.listen_address(node_id),
            **{**self.overrides, **extra},
        )

    async def start(self, **extra: Any) -> InProcessCluster:
        for node_id in self.ids:
            await self.start_member(node_id, **extra)
        return self

    async def start_member(self, node_id: str, **extra: Any) -> Member:
        sm = ListStateMachine()
        member = Member(RaftAdapter(self.config(node_id, **extra), sm), sm)
        await member.adapter.start()
        self.members[node_id] = member
        return member

    async def start_observer(self, node_id: str, **extra: Any) -> Member:
        cfg = RaftConfig(
            node_id=node_id,
            data_dir=self.tmp_path / node_id,
            peers={v: self.listen_address(v) for v in self.ids},
            voter=False,
            **{**self.overrides, **extra},
        )
        sm = ListStateMachine()
        member = Member(RaftAdapter(cfg, sm), sm)
        await member.adapter.start()
        self.observers[node_id] = member
        return member

    async def stop_member(self, node_id: str) -> None:
        member = self.members.pop(node_id, None) or self.observers.pop(node_id, None)
        if member is not None:
            await member.adapter.stop()

    async def stop(self) -> None:
        for node_id in list(self.members) + list(self.observers):
            await self.stop_member(node_id)

    async def __aenter__(self) -> InProcessCluster:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def leader(self, timeout_s: float = 10.0) -> Member:
        """The one member that leads and that every running member agrees on."""

        def agreed() -> Member | None:
            leaders = [m for m in self.members.values() if m.adapter.is_leader]
            if len(leaders) != 1:
                return None
            lid = leaders[0].node_id
            if all(m.adapter.leader_id == lid for m in self.members.values()):
                return leaders[0]
            return None

        return await eventually_async(agreed, timeout_s, "one agreed Raft leader")

    def followers(self, leader: Member) -> list[Member]:
        return [m for m in self.members.values() if m is not leader]
