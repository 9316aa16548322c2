"""scripts/chaos.py: the exit code tells a failure from a run without evidence."""

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chaos.py"


@pytest.fixture(scope="module")
def chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chaos_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_failures_outrank_inconclusive_runs_which_outrank_passes(chaos: ModuleType) -> None:
    assert chaos.exit_code(["PASS", "PASS"]) == chaos.EXIT_PASS == 0
    assert chaos.exit_code(["PASS", "INCONCLUSIVE"]) == chaos.EXIT_INCONCLUSIVE == 3
    assert chaos.exit_code(["INCONCLUSIVE", "FAIL"]) == chaos.EXIT_FAIL == 1
    assert chaos.exit_code(["PASS", "ERROR", "INCONCLUSIVE"]) == chaos.EXIT_FAIL


def test_a_negative_evidence_threshold_is_refused(chaos: ModuleType) -> None:
    with pytest.raises(SystemExit) as exc:
        chaos.main(["--scenarios", "kill-leader", "--min-acks", "-1"])
    assert exc.value.code == 2
