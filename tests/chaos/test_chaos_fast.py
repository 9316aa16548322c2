"""The fast subset of the fault-injection matrix, in the normal suite.

Every scenario marked `fast=True` runs once, with a fixed seed, on a fresh
cluster, and must keep every must-hold property (tests/chaos/checker.py).
The whole matrix runs with scripts/chaos.py (docs/reliability.md).

And the checker must fail when it should: `isolate-leader` with `acks=1`
writers, under which lograft may lose acknowledged writes (the isolated
leader acknowledges alone and is truncated when it rejoins), must be
reported as loss. So must a power cut of all three nodes under
`flush_policy = none` (the fast subset runs it under group_commit, where it
must lose nothing): proof that the power-loss test mode drops what it should.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.storage.config import FlushPolicy
from tests.chaos.runner import report_details, report_table, run_scenario, select
from tests.chaos.workload import WorkloadSettings

SEED = 20261122
# Seconds each run's workload lasts, faults included: enough for a failover
# and a rejoin, short enough to keep the suite fast.
DURATION_S = 12.0

FAST = select("all", fast_only=True)
# The scenario that loses acks=1 writes in every run: the isolated leader keeps
# acknowledging acks=1 writes (its own node's HTTP writer and the client
# producers) for as long as it is cut off, and truncates them on rejoining.
LOSSY_WITH_ACKS_1 = "isolate-leader"


def test_there_is_a_fast_subset() -> None:
    assert len(FAST) >= 2, [s.name for s in FAST]


@pytest.mark.parametrize("scenario", FAST, ids=lambda s: s.name)
def test_fast_scenario_keeps_every_promise(scenario, tmp_path: Path) -> None:
    outcome = run_scenario(scenario, SEED, tmp_path / scenario.name, duration_s=DURATION_S)
    assert outcome.verdict == "PASS", (
        f"{report_table([outcome])}\n\n{report_details([outcome])}\n"
        f"replay: scripts/chaos.py --scenarios {scenario.name} --seed {SEED} --seeds 1"
    )
    assert outcome.result is not None and outcome.result.acknowledged > 0


def test_the_checker_reports_loss_of_acks_1_writes(tmp_path: Path) -> None:
    (scenario,) = select(LOSSY_WITH_ACKS_1)
    outcome = run_scenario(
        scenario,
        SEED,
        tmp_path / "acks-1",
        duration_s=DURATION_S,
        settings=WorkloadSettings(acks="1"),
    )
    detail = f"{report_table([outcome])}\n\n{report_details([outcome])}"
    assert outcome.verdict == "FAIL", detail
    assert outcome.result is not None and outcome.result.lost, detail


def test_the_checker_reports_loss_after_a_power_cut_under_none(tmp_path: Path) -> None:
    (scenario,) = select("power-cut-all-nodes")
    outcome = run_scenario(
        scenario,
        SEED,
        tmp_path / "power-cut-none",
        duration_s=DURATION_S,
        flush_policy=FlushPolicy.NONE.value,
    )
    detail = f"{report_table([outcome])}\n\n{report_details([outcome])}"
    assert outcome.verdict == "FAIL", detail
    assert outcome.result is not None and outcome.result.lost, detail
