"""Power loss, not only SIGKILL (issue 13): the nodes run in the power-loss
test mode (lograft/power_loss.py), which records every fsync of the
partition logs and of the metadata quorum's files; a "power cut" SIGKILLs a
node and then puts every file of its `logs` and `metadata` directories back as
the disk would hold it: unsynced bytes gone, files whose names were never
fsynced with their directory gone.

The workload topic runs `flush_policy = group_commit` here: acks=all is
answered only once every ISR member has fsynced the batch, so the checker must
find nothing acknowledged lost even when all three nodes lose power at once.
Under `none` (scripts/chaos.py --flush-policy none, or
tests/chaos/test_power_loss.py) the all-nodes cut loses what was acknowledged
since the last flush, and the checker reports it (docs/reliability.md).
"""

from __future__ import annotations

import time

from lograft.power_loss import cut_power
from tests.chaos.history import LeaderKill
from tests.chaos.scenario import ChaosContext, Scenario, power_loss_dir, register
from tests.chaos.scenarios_process import _hold, _led_by, _restart, _wait_new_leaders

GROUP_COMMIT = {"flush_policy": "group_commit"}


def _cut(ctx: ChaosContext, victims: list[int]) -> None:
    """After a while of workload (acknowledged writes to lose), SIGKILL
    `victims`, then drop from each one's logs what it had not fsynced."""
    _hold(ctx, "the workload before the power cut")
    for n in victims:
        ctx.cluster[n].kill()
    for n in victims:
        node = ctx.cluster[n]
        record = power_loss_dir(ctx.cluster, n)
        report = cut_power(record, node.spec.data_dir / "logs")
        # The metadata quorum's files too (Raft journal, its meta, snapshot):
        # what the journal had not fsynced is gone, as on a real disk.
        raft = cut_power(record, node.spec.data_dir / "metadata")
        ctx.facts.setdefault("power_cut", {})[n] = {
            "log_bytes_dropped": report.log_bytes_dropped,
            "files_removed": len(report.removed),
            "files_emptied": len(report.emptied),
            "metadata_bytes_dropped": raft.bytes_dropped,
        }
        ctx.log(
            f"power cut node {n}: {report.log_bytes_dropped} unsynced segment bytes dropped, "
            f"{len(report.removed)} files removed, {len(report.emptied)} emptied; "
            f"metadata: {raft.bytes_dropped} unsynced bytes dropped, "
            f"{len(raft.removed)} files removed, {len(raft.emptied)} emptied"
        )


def power_cut_one_node(ctx: ChaosContext) -> None:
    victim = ctx.rng.choice(sorted(n.node_id for n in ctx.cluster))
    survivor = next(n for n in ctx.cluster.running() if n.node_id != victim)
    led = _led_by(ctx, victim, survivor)
    ctx.facts.update(victim=victim)
    at = time.monotonic()
    _cut(ctx, [victim])
    if led:
        ctx.facts.setdefault("leader_kills", []).append(LeaderKill(victim, led, at))
        _wait_new_leaders(ctx, {victim})
    _hold(ctx, f"node {victim} without power")
    _restart(ctx, {victim})


def power_cut_all_nodes(ctx: ChaosContext) -> None:
    victims = sorted(n.node_id for n in ctx.cluster)
    _cut(ctx, victims)
    ctx.log("power cut all nodes at once")
    _restart(ctx, set(victims))


register(
    Scenario(
        "power-cut-one-node",
        "SIGKILL a node and drop what it had not fsynced (power loss), restart it",
        power_cut_one_node,
        topic_configs=GROUP_COMMIT,
        power_loss=True,
    )
)
register(
    Scenario(
        "power-cut-all-nodes",
        "SIGKILL all three nodes and drop what each had not fsynced (power loss), restart them",
        power_cut_all_nodes,
        topic_configs=GROUP_COMMIT,
        power_loss=True,
        fast=True,
    )
)
