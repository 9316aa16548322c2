"""A plain, immutable view of one node's Raft state, for the cluster view.

`build_status` turns pysyncobj's `getStatus()` dict (keys such as
`partner_node_status_server_<id>`, `match_idx_server_<id>`) into `RaftStatus`.
It is pure: it reads only its arguments, so it is tested without sockets.

Invariants: `voters` is sorted by node id and lists every voter exactly once,
this node included when it votes; `last_applied` is the adapter's applied
offset (monotonic), not pysyncobj's (which may step back after it installs a
snapshot older than what was already applied).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# pysyncobj's _RAFT_STATE values.
_PYSYNCOBJ_ROLES = {0: "FOLLOWER", 1: "CANDIDATE", 2: "LEADER"}
_CONNECTED = 2


class RaftRole(enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"
    OBSERVER = "observer"
    STOPPED = "stopped"


@dataclass(frozen=True)
class VoterStatus:
    node_id: str
    is_self: bool
    connected: bool
    # Only the leader knows these; None elsewhere.
    match_index: int | None = None
    next_index: int | None = None


@dataclass(frozen=True)
class RaftStatus:
    node_id: str
    role: RaftRole
    leader_id: str | None
    term: int
    commit_index: int
    last_applied: int
    log_length: int
    has_quorum: bool
    voters: tuple[VoterStatus, ...]
    observers: tuple[str, ...]
    snapshot_offset: int | None
    ready: bool
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "role": self.role.value,
            "leader_id": self.leader_id,
            "term": self.term,
            "commit_index": self.commit_index,
            "last_applied": self.last_applied,
            "log_length": self.log_length,
            "has_quorum": self.has_quorum,
            "voters": [
                {
                    "node_id": v.node_id,
                    "is_self": v.is_self,
                    "connected": v.connected,
                    "match_index": v.match_index,
                    "next_index": v.next_index,
                }
                for v in self.voters
            ],
            "observers": list(self.observers),
            "snapshot_offset": self.snapshot_offset,
            "ready": self.ready,
            "failure": self.failure,
        }


def _node_id(node: object) -> str | None:
    return None if node is None else str(getattr(node, "id", node))


def build_status(
    raw: Mapping[str, Any],
    *,
    node_id: str,
    voter: bool,
    voter_ids: Iterable[str],
    observer_ids: Iterable[str],
    last_applied: int,
    snapshot_offset: int | None,
    ready: bool,
) -> RaftStatus:
    """Translate pysyncobj's status dict; `raw` is getStatus() taken on the Raft thread."""
    role = RaftRole[_PYSYNCOBJ_ROLES[int(raw["state"])]] if voter else RaftRole.OBSERVER
    is_leader = role is RaftRole.LEADER
    voters = tuple(
        VoterStatus(
            node_id=vid,
            is_self=voter and vid == node_id,
            connected=(voter and vid == node_id)
            or raw.get(f"partner_node_status_server_{vid}") == _CONNECTED,
            match_index=raw.get(f"match_idx_server_{vid}") if is_leader else None,
            next_index=raw.get(f"next_node_idx_server_{vid}") if is_leader else None,
        )
        for vid in sorted(set(voter_ids))
    )
    return RaftStatus(
        node_id=node_id,
        role=role,
        leader_id=_node_id(raw.get("leader")),
        term=int(raw["raft_term"]),
        commit_index=int(raw["commit_idx"]),
        last_applied=last_applied,
        log_length=int(raw["log_len"]),
        has_quorum=bool(raw["has_quorum"]),
        voters=voters,
        observers=tuple(sorted(observer_ids)),
        snapshot_offset=snapshot_offset,
        ready=ready,
    )


def stopped_status(
    *, node_id: str, voter_ids: Iterable[str], last_applied: int, failure: str | None
) -> RaftStatus:
    """The status of an adapter whose Raft thread is not running."""
    return RaftStatus(
        node_id=node_id,
        role=RaftRole.STOPPED,
        leader_id=None,
        term=0,
        commit_index=0,
        last_applied=last_applied,
        log_length=0,
        has_quorum=False,
        voters=tuple(
            VoterStatus(node_id=v, is_self=v == node_id, connected=False)
            for v in sorted(set(voter_ids))
        ),
        observers=(),
        snapshot_offset=None,
        ready=False,
        failure=failure,
    )
