"""Run fault scenarios against fresh clusters and judge each history (issue 6).

One run = one scenario with one seed on a fresh three-node cluster:

1. start the cluster (behind a toxiproxy `Network` when the scenario
   `needs_network`), create the workload topic (RF 3, min_insync_replicas 2,
   `PARTITIONS` partitions) and wait until it is whole;
2. start the workload (tests/chaos/workload.py) and wait until every
   partition acknowledged something;
3. `scenario.inject(ctx)`: faults, then healing;
4. wait until every partition acknowledges a send made after the healing,
   keep the workload running until `duration_s` after it started, stop it;
5. wait for convergence, read every partition from its start, stop the
   cluster and read every replica from disk (tests/chaos/final_state.py);
6. `check` the history (tests/chaos/checker.py).

The scenario's rng is `random.Random("<scenario>:<seed>")`, so
`scripts/chaos.py --scenarios NAME --seed SEED --seeds 1` replays one run's
fault choices. A run that cannot finish (the cluster never converges, a
worker crashed) is an ERROR, which fails like a violated property; one that
finished without evidence (checker.inconclusive) is INCONCLUSIVE, which
fails too, with its own exit code in scripts/chaos.py.

Scenarios report kills and isolations through `ctx.facts`:
`ctx.facts["leader_kills"]` (list of history.LeaderKill) and
`ctx.facts["stalls"]` (list of history.Stall), `ctx.facts["isolations"]`
(list of history.Isolation) and `ctx.facts["stale_windows"]` (list of
history.StaleWindow); times are `time.monotonic()`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import random
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.checker import FAILOVER_BUDGET_MS, MIN_ACKNOWLEDGED, CheckResult, check
from tests.chaos.final_state import (
    final_read,
    log_start_offsets,
    replica_contents,
    wait_converged,
)
from tests.chaos.history import History
from tests.chaos.scenario import REGISTRY, ChaosContext, Scenario
from tests.chaos.workload import Workload, WorkloadSettings
from tests.integration.cluster_harness import LograftCluster

TOPIC = "chaos"
PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
# Broker settings of the chaos clusters. produce_timeout_ms (ms) is below the
# default 30000 so an acks=all request to a leader that lost its followers
# answers REQUEST_TIMED_OUT within a writer's request_timeout_ms instead of
# stalling the writer for half a minute.
CHAOS_BROKER: dict[str, Any] = {"produce_timeout_ms": 5_000}
# The workload runs at least this long, in seconds (faults included).
DEFAULT_DURATION_S = 20.0
# Waits of a run, in seconds: the cluster and topic ready, first acks,
# acks again after healing, workers stopped, convergence.
CLUSTER_READY_S = 60.0
WARMUP_S = 60.0
RECOVERY_S = 60.0
STOP_S = 60.0
CONVERGE_S = 90.0

SCENARIO_MODULES = (
    "tests.chaos.scenarios_process",
    "tests.chaos.scenarios_network",
    "tests.chaos.scenarios_power",
)


def load_scenarios() -> dict[str, Scenario]:
    """Import every scenario module that exists (registering its scenarios)."""
    for name in SCENARIO_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    return REGISTRY


def select(spec: str, *, fast_only: bool = False) -> list[Scenario]:
    """`all` or a comma-separated list of names, in registry order."""
    registry = load_scenarios()
    if spec == "all":
        chosen = list(registry.values())
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
        unknown = [n for n in names if n not in registry]
        if unknown:
            raise ValueError(f"unknown scenarios {unknown}; known: {sorted(registry)}")
        chosen = [registry[n] for n in names]
    return [s for s in chosen if s.fast or not fast_only]


@dataclass
class RunOutcome:
    scenario: str
    seed: int
    workdir: Path
    result: CheckResult | None = None
    error: str | None = None
    elapsed_s: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """ERROR, or the checker's FAIL, INCONCLUSIVE or PASS."""
        if self.error is not None or self.result is None:
            return "ERROR"
        return self.result.verdict


def _stamp(log: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    def stamped(message: str) -> None:
        log(f"{time.strftime('%H:%M:%S')} {prefix} {message}")

    return stamped


def _save_history(history: History, path: Path) -> None:
    doc = dataclasses.asdict(history)
    path.write_text(json.dumps(doc, default=lambda o: getattr(o, "value", str(o))))


def run_scenario(
    scenario: Scenario,
    seed: int,
    workdir: Path,
    *,
    duration_s: float = DEFAULT_DURATION_S,
    failover_budget_ms: int = FAILOVER_BUDGET_MS,
    min_acknowledged: int = MIN_ACKNOWLEDGED,
    settings: WorkloadSettings | None = None,
    flush_policy: str | None = None,
    log: Callable[[str], None] = print,
) -> RunOutcome:
    """`flush_policy`: the workload topic's, over the scenario's and the default."""
    say = _stamp(log, f"[{scenario.name} seed={seed}]")
    outcome = RunOutcome(scenario.name, seed, workdir)
    began = time.monotonic()
    overrides: dict[int, dict[str, Any]] = {}
    if scenario.power_loss:
        from lograft.power_loss import ENV_VAR

        overrides = {
            n: {"env": {ENV_VAR: str(workdir / f"node-{n}.power-loss")}} for n in (1, 2, 3)
        }
    cluster = LograftCluster(
        workdir, 3, broker=CHAOS_BROKER, raft=scenario.raft, overrides=overrides
    )
    topic_configs = {"min_insync_replicas": str(MIN_INSYNC_REPLICAS), **scenario.topic_configs}
    if flush_policy is not None:
        topic_configs["flush_policy"] = flush_policy
    outcome.facts["topic_configs"] = topic_configs
    workload: Workload | None = None
    try:
        with contextlib.ExitStack() as stack:
            network = None
            if scenario.needs_network:
                from tests.chaos.network import Network

                network = stack.enter_context(Network(cluster))
            stack.callback(cluster.close)  # before the network goes (LIFO)
            cluster.start(timeout_s=CLUSTER_READY_S)
            cluster.create_topic(
                TOPIC,
                PARTITIONS,
                REPLICATION_FACTOR,
                configs=topic_configs,
            )
            wait_converged(cluster, TOPIC, CLUSTER_READY_S)
            partitions = list(range(PARTITIONS))
            workload = Workload(cluster, TOPIC, partitions, seed, settings)
            workload.start()
            workload.wait_acked_everywhere(workload.started_s, WARMUP_S, "first acks")
            say("workload running; injecting")
            ctx = ChaosContext(
                cluster,
                random.Random(f"{scenario.name}:{seed}"),
                [TOPIC],
                network,
                say,
                outcome.facts,
                workload,
            )
            scenario.inject(ctx)
            healed = time.monotonic()
            say("healed; waiting for acks on every partition")
            workload.wait_acked_everywhere(healed, RECOVERY_S, "acks after healing")
            workload.run_until(workload.started_s + duration_s)
            workload.stop(STOP_S)
            if workload.errors:
                raise AssertionError(f"workload workers failed: {workload.errors}")
            layout = wait_converged(cluster, TOPIC, CONVERGE_S)
            final, hws = final_read(cluster, TOPIC, layout)
            cluster.kill_all()
            replicas = replica_contents(cluster, TOPIC, hws)
            sends, reads = workload.recorder.snapshot()
            history = History(
                topic=TOPIC,
                partitions=partitions,
                start_s=workload.started_s,
                end_s=workload.stopped_s,
                sends=sends,
                reads=reads,
                final=final,
                high_watermarks=hws,
                log_start_offsets=log_start_offsets(layout),
                replicas=replicas,
                isolations=list(outcome.facts.get("isolations", [])),
                stale_windows=list(outcome.facts.get("stale_windows", [])),
                leader_kills=list(outcome.facts.get("leader_kills", [])),
                stalls=list(outcome.facts.get("stalls", [])),
                notes={"poll_errors": workload.poll_errors()},
            )
            _save_history(history, workdir / "history.json")
            outcome.result = check(
                history,
                failover_budget_ms=failover_budget_ms,
                min_acknowledged=min_acknowledged,
            )
    except Exception:
        outcome.error = traceback.format_exc()
        say(f"ERROR\n{outcome.error}")
    finally:
        if workload is not None and not workload.stopped_s:
            with contextlib.suppress(Exception):
                workload.stop(STOP_S)
    outcome.elapsed_s = time.monotonic() - began
    say(f"{outcome.verdict} in {outcome.elapsed_s:.0f}s ({summary(outcome)})")
    return outcome


def summary(o: RunOutcome) -> str:
    r = o.result
    if r is None:
        return "no result"
    return (
        f"acknowledged={r.acknowledged} unknown={r.unknown} lost={len(r.lost)} "
        f"misplaced={len(r.misplaced)} "
        f"duplicates={len(r.duplicates)} (idempotent {len(r.idempotent_duplicates)}) "
        f"inconsistent={len(r.inconsistent)} non-monotonic={len(r.non_monotonic)} "
        f"skipped={len(r.skipped)} divergent={len(r.divergence)} gaps={len(r.gaps)} "
        f"reads={r.reads} max-unavailable={r.unavailable.ms}ms"
        + (f" minority-probes={r.minority_probes}" if o.facts.get("isolations") else "")
        + (
            f" stale-probes={r.stale_probes} stale-refused={r.stale_refused} "
            f"stale-acks={len(r.stale_acks)}"
            if o.facts.get("stale_windows")
            else ""
        )
    )


def run_matrix(
    scenarios: list[Scenario],
    seeds: list[int],
    root: Path,
    *,
    duration_s: float = DEFAULT_DURATION_S,
    keep_workdirs: bool = False,
    min_acknowledged: int = MIN_ACKNOWLEDGED,
    settings: WorkloadSettings | None = None,
    flush_policy: str | None = None,
    log: Callable[[str], None] = print,
) -> list[RunOutcome]:
    """Every scenario with every seed; a passing run's work dir is removed unless kept."""
    outcomes = []
    for seed in seeds:
        for scenario in scenarios:
            workdir = root / f"{scenario.name}-{seed}"
            o = run_scenario(
                scenario,
                seed,
                workdir,
                duration_s=duration_s,
                min_acknowledged=min_acknowledged,
                settings=settings,
                flush_policy=flush_policy,
                log=log,
            )
            outcomes.append(o)
            if o.verdict == "PASS" and not keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                log(f"   kept {workdir} (node logs, history.json)")
    return outcomes


COLUMNS = (
    "scenario",
    "seed",
    "acknowledged",
    "unknown",
    "lost",
    "misplaced",
    "duplicates (idempotent)",
    "inconsistent",
    "non-monotonic",
    "skipped",
    "divergent",
    "gaps",
    "reads",
    "max unavailability ms",
    "failover ms",
    "verdict",
)


def _row(o: RunOutcome) -> list[str]:
    r = o.result
    if r is None:
        return [o.scenario, str(o.seed), *["-"] * (len(COLUMNS) - 3), o.verdict]
    measured = [ms for _n, _p, ms in r.failover_ms if ms is not None]
    if len(measured) < len(r.failover_ms):
        failover = "never"
    else:
        failover = str(max(measured)) if measured else "-"
    return [
        o.scenario,
        str(o.seed),
        str(r.acknowledged),
        str(r.unknown),
        str(len(r.lost)),
        str(len(r.misplaced)),
        f"{len(r.duplicates)} ({len(r.idempotent_duplicates)})",
        str(len(r.inconsistent)),
        str(len(r.non_monotonic)),
        str(len(r.skipped)),
        str(len(r.divergence)),
        str(len(r.gaps)),
        str(r.reads),
        str(r.unavailable.ms),
        failover,
        o.verdict,
    ]


def report_table(outcomes: list[RunOutcome]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_row(o)) + " |" for o in outcomes]
    return "\n".join(lines)


# Anomalies listed per failing run in the report (the rest are counted).
DETAILS_PER_RUN_MAX = 20


def report_details(outcomes: list[RunOutcome]) -> str:
    parts = []
    for o in outcomes:
        if o.verdict == "PASS":
            continue
        parts.append(f"### {o.scenario} seed {o.seed}: {o.verdict} (work dir {o.workdir})")
        if o.facts:
            parts.append(f"facts: {o.facts}")
        if o.result is not None:
            parts += [f"- inconclusive: {why}" for why in o.result.inconclusive]
            found = o.result.violations()
            parts += [f"- {a}" for a in found[:DETAILS_PER_RUN_MAX]]
            if len(found) > DETAILS_PER_RUN_MAX:
                parts.append(f"- ... and {len(found) - DETAILS_PER_RUN_MAX} more")
        if o.error is not None:
            parts.append("```\n" + o.error.strip() + "\n```")
    return "\n".join(parts)
