"""The node configs shipped in deploy/ load, and the compose cluster's voters
each have a controller listener (docs/quorum.md), on ports distinct from
every other listener (the chroot check in the README maps all three service
names to loopback, so the ports must not collide)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.node.config import load_config

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
ENV = {"LOGRAFT_CFG_CLUSTER_SECRET": "a-test-secret-of-32-characters!!"}
COMPOSE_NODES = sorted(DEPLOY.glob("node-*.toml"))


@pytest.mark.parametrize("path", sorted(DEPLOY.glob("*.toml")), ids=lambda p: p.name)
def test_every_deploy_config_loads(path: Path) -> None:
    cfg = load_config(path, ENV)
    assert cfg.voters, f"{path.name} names no voters"


def test_there_are_three_compose_nodes() -> None:
    assert [p.name for p in COMPOSE_NODES] == ["node-1.toml", "node-2.toml", "node-3.toml"]


@pytest.mark.parametrize("path", COMPOSE_NODES, ids=lambda p: p.name)
def test_compose_voters_have_controller_listeners_on_their_own_ports(path: Path) -> None:
    cfg = load_config(path, ENV)
    ports: list[int] = []
    for voter in cfg.voters:
        assert voter.controller is not None, f"voter {voter.node_id} has no controller address"
        host = voter.controller.rpartition(":")[0]
        assert host == f"node-{voter.node_id}"
        for address in (voter.raft, voter.http, voter.controller):
            ports.append(int(address.rpartition(":")[2]))
    assert len(ports) == len(set(ports)), f"{path.name}: a port is used twice: {ports}"


def test_compose_nodes_agree_on_the_voters() -> None:
    voters = [load_config(p, ENV).voters for p in COMPOSE_NODES]
    assert all(v == voters[0] for v in voters)
