#!/usr/bin/env python3
"""Run the fault-injection matrix: every chosen scenario with every seed, each on a
fresh three-node cluster, and print and write the report table (issue 6).

    .venv/bin/python scripts/chaos.py --scenarios all --seeds 3
    .venv/bin/python scripts/chaos.py --scenarios kill-leader,pause-leader --seed 42 --seeds 1
    .venv/bin/python scripts/chaos.py --scenarios power-cut-all-nodes --flush-policy none

`--flush-policy` sets the workload topic's flush_policy over the scenario's
(the power-cut scenarios run group_commit; under none, the all-nodes cut
loses acknowledged writes and the run FAILs: docs/reliability.md).

Seeds are SEED, SEED+1, ... (SEED random and printed when not given); one run
is replayed with `--scenarios NAME --seed S --seeds 1`. Exits 0 only if every
run passed; 1 if any run violates a must-hold property or cannot finish (see
tests/chaos/checker.py); 3 if none did but some run was INCONCLUSIVE (too
little evidence: no record consumed, fewer acknowledgements than
--min-acks, or no send into an isolated node); 2 on bad arguments. A run
that did not pass keeps its work dir (node logs, history.json).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lograft.storage.config import FlushPolicy  # noqa: E402
from tests.chaos.checker import MIN_ACKNOWLEDGED  # noqa: E402
from tests.chaos.runner import (  # noqa: E402
    DEFAULT_DURATION_S,
    report_details,
    report_table,
    run_matrix,
    select,
)
from tests.chaos.workload import WorkloadSettings  # noqa: E402

# Largest seed drawn when none is given.
SEED_MAX = 2**31 - 1
# Exit codes.
EXIT_PASS = 0
EXIT_FAIL = 1  # a violation or an ERROR run
EXIT_INCONCLUSIVE = 3  # no violation, but some run had too little evidence


def exit_code(verdicts: list[str]) -> int:
    """FAIL and ERROR outrank INCONCLUSIVE, which outranks PASS."""
    if any(v in ("FAIL", "ERROR") for v in verdicts):
        return EXIT_FAIL
    if any(v == "INCONCLUSIVE" for v in verdicts):
        return EXIT_INCONCLUSIVE
    return EXIT_PASS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="all", help="all, or names separated by commas")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per scenario (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument(
        "--duration",
        type=float,
        default=DEFAULT_DURATION_S,
        help=f"seconds the workload runs at least, faults included (default {DEFAULT_DURATION_S})",
    )
    parser.add_argument("--fast", action="store_true", help="only the scenarios marked fast")
    parser.add_argument("--report", type=Path, default=Path("chaos-report.md"))
    parser.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    parser.add_argument("--keep", action="store_true", help="keep the work dirs of passing runs")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--acks",
        choices=("all", "1"),
        default="all",
        help="the writers' acks (default all; 1 checks the checker: acks=1 writes can be lost)",
    )
    parser.add_argument(
        "--flush-policy",
        choices=[p.value for p in FlushPolicy],
        default=None,
        help="the workload topic's flush_policy (default: the scenario's, else none)",
    )
    parser.add_argument(
        "--min-acks",
        type=int,
        default=MIN_ACKNOWLEDGED,
        help="acknowledged sends a run needs to pass rather than be INCONCLUSIVE "
        f"(default {MIN_ACKNOWLEDGED})",
    )
    args = parser.parse_args(argv)
    try:
        scenarios = select(args.scenarios, fast_only=args.fast)
    except ValueError as exc:
        parser.error(str(exc))
    if args.list:
        for s in scenarios:
            flags = ", ".join(f for f, on in (("fast", s.fast), ("network", s.needs_network)) if on)
            print(f"{s.name:24} {s.description}" + (f" [{flags}]" if flags else ""))
        return 0
    if args.min_acks < 0:
        parser.error("--min-acks must be >= 0")
    if args.seeds < 1 or not scenarios:
        parser.error("nothing to run: give --seeds >= 1 and at least one scenario")
    first = args.seed if args.seed is not None else random.SystemRandom().randint(0, SEED_MAX)
    seeds = list(range(first, first + args.seeds))
    root = args.workdir or Path(tempfile.mkdtemp(prefix="lograft-chaos-"))
    command = " ".join(["scripts/chaos.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"seeds {seeds} (replay one: --scenarios NAME --seed S --seeds 1); work dir {root}")
    started = time.monotonic()
    outcomes = run_matrix(
        scenarios,
        seeds,
        root,
        duration_s=args.duration,
        keep_workdirs=args.keep,
        min_acknowledged=args.min_acks,
        settings=WorkloadSettings(acks=args.acks),
        flush_policy=args.flush_policy,
        log=lambda line: print(line, flush=True),
    )
    table = report_table(outcomes)
    details = report_details(outcomes)
    failed = [o for o in outcomes if o.verdict in ("FAIL", "ERROR")]
    unproven = [o for o in outcomes if o.verdict == "INCONCLUSIVE"]
    footer = (
        f"{len(outcomes)} runs, {len(failed)} failed, {len(unproven)} inconclusive, "
        f"{time.monotonic() - started:.0f}s; "
        f"first seed {first}; `{command}`"
    )
    text = "\n\n".join(p for p in (table, footer, details) if p) + "\n"
    print("\n" + text)
    args.report.write_text(f"# Chaos report\n\n{text}")
    print(f"report written to {args.report}")
    return exit_code([o.verdict for o in outcomes])


if __name__ == "__main__":
    sys.exit(main())
