"""The contract between fault scenarios, the workload and the checker.

A scenario injects faults into a running three-node cluster while the
workload (tests/chaos/workload.py) produces and consumes; it must heal every
fault before it returns, so the runner can check that the cluster converges
and the history holds every acknowledged write. Scenarios that need links
cut or slowed between particular nodes ask for the toxiproxy topology
(`needs_network`); the others only kill, stop or restart processes.

Every random choice a scenario makes comes from `ctx.rng`, seeded by the
runner and printed, so a run can be replayed with the same seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.cluster_harness import LograftCluster


@dataclass
class ChaosContext:
    cluster: LograftCluster
    rng: random.Random
    # The topics the workload writes to (scenarios pick leaders among them).
    topics: list[str]
    # The toxiproxy topology (tests/chaos/network.py) when the scenario
    # declared `needs_network`; None otherwise.
    network: Any = None
    # Plain, timestamped progress lines (the runner prints and keeps them).
    log: Callable[[str], None] = print
    # Free-form facts the scenario wants in the report (e.g. "victim": 2).
    facts: dict[str, Any] = field(default_factory=dict)
    # The workload (tests/chaos/workload.py), for scenarios that run probes of
    # their own into its recorder (so the checker judges them with the rest).
    workload: Any = None


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    inject: Callable[[ChaosContext], None]
    needs_network: bool = False
    # In the fast subset that the normal test suite runs.
    fast: bool = False
    # `[raft]` settings of every node of the scenario's cluster (e.g. frequent
    # metadata snapshots), over the defaults.
    raft: Mapping[str, Any] = field(default_factory=dict)
    # Configs of the workload topic, over the runner's (e.g. a flush_policy).
    topic_configs: Mapping[str, str] = field(default_factory=dict)
    # Run every node in the power-loss test mode (lograft/power_loss.py),
    # recording into `<workdir>/node-<id>.power-loss` (`power_loss_dir`).
    power_loss: bool = False


def power_loss_dir(cluster: LograftCluster, node_id: int) -> Path:
    """Where node `node_id` of a `power_loss` scenario records its fsyncs."""
    return cluster.workdir / f"node-{node_id}.power-loss"


REGISTRY: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    if scenario.name in REGISTRY:
        raise ValueError(f"scenario {scenario.name!r} registered twice")
    REGISTRY[scenario.name] = scenario
    return scenario
