"""The fast subset of the fault-injection matrix, in the normal suite.

Every scenario marked `fast=True` runs once, with a fixed seed, on a fresh
cluster, and must keep every must-hold property (tests/chaos/checker.py).
The whole matrix runs with scripts/chaos.py (docs/reliability.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.runner import report_details, report_table, run_scenario, select

SEED = 20261122
# Seconds each run's workload lasts, faults included: enough for a failover
# and a rejoin, short enough to keep the suite fast.
DURATION_S = 12.0

FAST = select("all", fast_only=True)


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
