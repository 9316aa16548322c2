"""build_status: pysyncobj's flat status dict to our RaftStatus, without sockets."""

from __future__ import annotations

from typing import Any

from pysyncobj.node import Node

from lograft.quorum.raft.status import RaftRole, build_status, stopped_status


def raw_status(state: int, leader: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "state": state,
        "leader": None if leader is None else Node(leader),
        "raft_term": 4,
        "commit_idx": 17,
        "log_len": 9,
        "has_quorum": True,
        "partner_node_status_server_b": 2,
        "partner_node_status_server_c": 0,
        "match_idx_server_b": 17,
        "next_node_idx_server_b": 18,
        "match_idx_server_c": 3,
        "next_node_idx_server_c": 4,
        **extra,
    }


def build(raw: dict[str, Any], *, voter: bool = True, node_id: str = "a") -> Any:
    return build_status(
        raw,
        node_id=node_id,
        voter=voter,
        voter_ids=["c", "a", "b"],
        observer_ids=["z", "y"],
        last_applied=16,
        snapshot_offset=None,
        ready=True,
    )


def test_leader_status_lists_voters_with_progress() -> None:
    status = build(raw_status(2, "a"))
    assert status.role is RaftRole.LEADER and status.leader_id == "a"
    assert (status.term, status.commit_index, status.last_applied) == (4, 17, 16)
    assert [v.node_id for v in status.voters] == ["a", "b", "c"]
    a, b, c = status.voters
    assert a.is_self and a.connected and a.match_index is None
    assert b.connected and (b.match_index, b.next_index) == (17, 18)
    assert not c.connected and c.match_index == 3
    assert status.observers == ("y", "z")
    assert status.to_dict()["voters"][1]["match_index"] == 17


def test_follower_hides_leader_only_progress() -> None:
    status = build(raw_status(0, "b"))
    assert status.role is RaftRole.FOLLOWER and status.leader_id == "b"
    assert all(v.match_index is None for v in status.voters)
    assert build(raw_status(1, None)).role is RaftRole.CANDIDATE


def test_observer_is_never_a_voter() -> None:
    raw = raw_status(0, "b", partner_node_status_server_a=2)
    status = build(raw, voter=False, node_id="obs")
    assert status.role is RaftRole.OBSERVER
    assert not any(v.is_self for v in status.voters)
    assert {v.node_id for v in status.voters if v.connected} == {"a", "b"}


def test_stopped_status() -> None:
    status = stopped_status(node_id="a", voter_ids=["b", "a"], last_applied=5, failure="boom")
    assert status.role is RaftRole.STOPPED and status.failure == "boom"
    assert [v.node_id for v in status.voters] == ["a", "b"]
    assert not any(v.connected for v in status.voters)
