"""The checker over hand-built histories: a clean one passes, each anomaly is found
and named with its values and offsets."""

from __future__ import annotations

from tests.chaos.checker import (
    FAIL,
    FAILOVER_BUDGET_MS,
    INCONCLUSIVE,
    MIN_ACKNOWLEDGED,
    PASS,
    check,
    divergence,
    duplicates,
    failover_ms,
    gaps,
    inconclusive,
    inconsistent,
    lost,
    minority_acks,
    minority_probes,
    misplaced,
    non_monotonic,
    phantoms,
    skipped,
    stale_acks,
    stale_probes,
    unavailability,
    unavailability_per_partition,
)
from tests.chaos.history import (
    History,
    Isolation,
    LeaderKill,
    Outcome,
    Read,
    Send,
    StaleWindow,
    Stall,
)


def ok(
    value: str,
    partition: int,
    offset: int,
    at: float,
    *,
    writer: str = "w0",
    idempotent: bool = True,
    node: int | None = None,
    done: float | None = None,
) -> Send:
    return Send(
        writer,
        idempotent,
        value,
        partition,
        at,
        at + 0.01 if done is None else done,
        Outcome.OK,
        offset,
        node,
    )


def clean() -> History:
    """Two writers on two partitions, everything acknowledged, read back and replicated."""
    h = History(topic="t", partitions=[0, 1], start_s=0.0, end_s=10.0)
    h.sends = [
        ok("w0-0", 0, 0, 1.0),
        ok("w0-1", 1, 0, 2.0),
        ok("w1-0", 0, 1, 3.0, writer="w1", idempotent=False),
        Send("w1", False, "w1-1", 1, 4.0, 9.0, Outcome.UNKNOWN, error="DELIVERY_TIMEOUT"),
        Send("w0", True, "w0-2", 0, 5.0, 5.1, Outcome.FAIL, error="NOT_ENOUGH_REPLICAS"),
    ]
    h.final = {0: {0: "w0-0", 1: "w1-0"}, 1: {0: "w0-1"}}
    h.high_watermarks = {0: 2, 1: 1}
    h.replicas = {n: {0: {0: "w0-0", 1: "w1-0"}, 1: {0: "w0-1"}} for n in (1, 2, 3)}
    h.reads = [
        Read("c0", 0, 0, "w0-0", 1.5),
        Read("c0", 0, 1, "w1-0", 3.5),
        Read("c0", 1, 0, "w0-1", 2.5),
    ]
    return h


def test_a_clean_history_passes_and_counts_outcomes() -> None:
    result = check(clean(), min_acknowledged=3)
    assert result.ok, result.violations()
    assert result.verdict == PASS
    assert (result.acknowledged, result.unknown, result.failed) == (3, 1, 1)
    assert result.duplicates == []


def test_an_unknown_send_may_appear_or_not() -> None:
    h = clean()
    h.final[1][1] = "w1-1"
    h.high_watermarks[1] = 2
    for logs in h.replicas.values():
        logs[1][1] = "w1-1"
    assert check(h).violations() == []


def test_lost_names_the_acknowledged_value_and_its_offset() -> None:
    h = clean()
    del h.final[0][1]
    found = lost(h)
    assert [(a.partition, a.offsets, a.values) for a in found] == [(0, (1,), ("w1-0",))]
    assert not check(h).ok


def test_duplicates_are_counted_for_every_writer_but_violate_only_with_idempotence() -> None:
    h = clean()
    h.final[0][2] = "w1-0"  # the non-idempotent writer's value twice
    result = check(h)
    assert [(a.offsets, a.values) for a in duplicates(h)] == [((1, 2), ("w1-0",))]
    assert result.idempotent_duplicates == []
    assert result.duplicates and not result.lost

    h.final[0][3] = "w0-0"  # the idempotent writer's value twice
    result = check(h)
    assert [(a.offsets, a.values) for a in result.idempotent_duplicates] == [((0, 3), ("w0-0",))]
    assert not result.ok


def test_inconsistent_offset_between_final_read_and_a_consumer() -> None:
    h = clean()
    h.reads.append(Read("c1", 0, 1, "w0-9", 3.6))
    found = inconsistent(h)
    assert len(found) == 1
    assert found[0].partition == 0 and found[0].offsets == (1,)
    assert set(found[0].values) == {"w1-0", "w0-9"}
    assert "consumer c1: w0-9" in found[0].detail


def test_inconsistent_when_an_ack_names_an_offset_holding_another_value() -> None:
    h = clean()
    h.sends.append(ok("w0-3", 1, 0, 6.0))  # acknowledged at 1:0, which holds w0-1
    h.final[1][1] = "w0-3"
    found = inconsistent(h)
    assert [(a.partition, a.offsets, set(a.values)) for a in found] == [(1, (0,), {"w0-1", "w0-3"})]


def test_inconsistent_when_a_value_lands_in_another_partition() -> None:
    h = clean()
    h.sends.append(Send("w0", True, "w0-4", 0, 6.0, 6.5, Outcome.UNKNOWN))
    h.final[1][1] = "w0-4"
    found = inconsistent(h)
    assert [(a.partition, a.offsets, a.values) for a in found] == [(1, (1,), ("w0-4",))]


def test_a_consumer_moving_backwards_is_non_monotonic() -> None:
    h = clean()
    h.reads.append(Read("c0", 0, 0, "w0-0", 4.0))
    found = non_monotonic(h)
    assert [(a.partition, a.offsets) for a in found] == [(0, (1, 0))]
    assert "consumer c0" in found[0].detail


def test_a_later_acknowledged_send_at_an_earlier_offset_is_non_monotonic() -> None:
    h = History(topic="t", partitions=[0], start_s=0.0, end_s=5.0)
    h.sends = [ok("w0-0", 0, 1, 1.0), ok("w0-1", 0, 0, 2.0)]
    h.final = {0: {0: "w0-1", 1: "w0-0"}}
    h.high_watermarks = {0: 2}
    found = non_monotonic(h)
    assert [(a.offsets, a.values) for a in found] == [((1, 0), ("w0-0", "w0-1"))]
    # Another writer's interleaving is not a reordering.
    h.sends = [ok("w0-0", 0, 1, 1.0), ok("w1-0", 0, 0, 2.0, writer="w1")]
    h.final = {0: {0: "w1-0", 1: "w0-0"}}
    assert non_monotonic(h) == []


def test_a_replica_that_disagrees_or_lags_below_the_high_watermark_diverges() -> None:
    h = clean()
    h.replicas[2][0][1] = "w9-9"
    del h.replicas[3][1][0]
    found = divergence(h)
    assert [(a.partition, a.offsets) for a in found] == [(0, (1,)), (1, (0, 0))]
    assert "node 2" in found[0].detail and "node 3" in found[1].detail
    # The disagreeing replica also makes the offset inconsistent.
    assert [(a.partition, a.offsets) for a in inconsistent(h)] == [(0, (1,))]


def test_records_above_the_high_watermark_are_not_divergence() -> None:
    h = clean()
    assert divergence(h) == []
    h.high_watermarks[0] = 1  # the replicas' offset 1 is above it now: not compared
    h.replicas[2][0][1] = "w9-9"
    h.final[0] = {0: "w0-0"}
    h.sends = [s for s in h.sends if s.value != "w1-0"]
    h.reads = [r for r in h.reads if r.value != "w1-0"]
    assert divergence(h) == []


def test_a_definitely_failed_or_unknown_value_in_the_log_is_a_phantom() -> None:
    h = clean()
    h.final[0][2] = "w0-2"  # its send failed with NOT_ENOUGH_REPLICAS
    h.final[0][3] = "x-1"  # nobody sent it
    found = phantoms(h)
    assert sorted((a.offsets, a.values) for a in found) == [((2,), ("w0-2",)), ((3,), ("x-1",))]


def test_an_ack_from_an_isolated_node_inside_its_window_is_a_minority_ack() -> None:
    h = clean()
    h.isolations = [Isolation(node=2, from_s=5.0, until_s=8.0)]
    h.sends += [
        ok("w2-0", 0, 2, 5.5, writer="w2", idempotent=False, node=2),  # violation
        ok("w2-1", 0, 3, 4.0, writer="w2", idempotent=False, node=2),  # invoked before the cut
        ok("w2-2", 0, 4, 6.0, writer="w2", idempotent=False, node=1),  # another node
        ok("w2-3", 0, 5, 7.0, writer="w2", idempotent=False, node=2, done=8.5),  # after heal
    ]
    assert [a.values for a in minority_acks(h)] == [("w2-0",)]
    h.sends.append(
        Send("w2", False, "w2-4", 1, 6.5, 7.5, Outcome.UNKNOWN, node=2, error="REQUEST_TIMED_OUT")
    )
    assert minority_probes(h) == 3  # w2-0, w2-3 and the timed-out w2-4


def test_an_ack_from_a_restarted_node_in_its_stale_window_is_a_stale_ack() -> None:
    h = clean()
    h.stale_windows = [StaleWindow(node=2, partition=0, from_s=5.0, until_s=8.0)]
    h.sends += [
        ok("s2-0", 0, 2, 5.5, writer="s2", idempotent=False, node=2),  # violation
        ok("s2-1", 0, 3, 4.0, writer="s2", idempotent=False, node=2),  # before the window
        ok("s2-2", 0, 4, 6.0, writer="s2", idempotent=False, node=1),  # another node
        ok("s2-3", 1, 5, 6.0, writer="s2", idempotent=False, node=2),  # another partition
        ok("s2-4", 0, 6, 7.0, writer="s2", idempotent=False, node=2, done=8.5),  # after heal
    ]
    found = stale_acks(h)
    assert [(a.values, a.offsets) for a in found] == [(("s2-0",), (2,))]
    h.sends.append(
        Send(
            "s2", False, "s2-5", 0, 6.5, 6.6, Outcome.UNKNOWN, node=2, error="BROKER_NOT_AVAILABLE"
        )
    )
    assert stale_probes(h) == 3  # s2-0, s2-4 and the refused s2-5
    result = check(h)
    assert result.stale_probes == 3 and result.stale_refused == 1
    assert "stale ack" in {a.kind for a in result.violations()}


def test_failover_time_is_measured_from_the_kill_to_the_first_later_ack() -> None:
    h = History(topic="t", partitions=[0, 1], start_s=0.0, end_s=20.0)
    h.sends = [
        ok("w0-0", 0, 0, 1.0),
        # invoked before the kill: does not count even though acknowledged after it
        ok("w0-1", 0, 1, 1.9, done=2.5),
        ok("w0-2", 0, 2, 2.2, done=4.2),
        ok("w0-3", 1, 0, 2.2, done=2.3),
    ]
    h.final = {0: {0: "w0-0", 1: "w0-1", 2: "w0-2"}, 1: {0: "w0-3"}}
    h.high_watermarks = {0: 3, 1: 1}
    h.leader_kills = [LeaderKill(node=1, partitions=(0,), at_s=2.0)]
    assert failover_ms(h) == [(1, 0, 2200)]
    assert check(h).violations() == []
    assert check(h, failover_budget_ms=2000).verdict == FAIL
    h.leader_kills = [LeaderKill(node=1, partitions=(0,), at_s=5.0)]  # nothing after it
    assert failover_ms(h) == [(1, 0, None)]
    assert [a.kind for a in check(h).violations()] == ["slow failover"]
    assert FAILOVER_BUDGET_MS >= 2000


def test_a_stall_holds_the_partitions_the_stopped_node_did_not_lead_to_the_budget() -> None:
    h = History(topic="t", partitions=[0, 1], start_s=0.0, end_s=30.0)
    h.sends = [ok("w0-0", 0, 0, 1.0), ok("w0-1", 1, 0, 2.5, done=14.0)]
    h.final = {0: {0: "w0-0"}, 1: {0: "w0-1"}}
    h.high_watermarks = {0: 1, 1: 1}
    h.stalls = [Stall(node=2, partitions=(1,), at_s=2.0)]
    assert failover_ms(h) == [(2, 1, 12000)]
    assert [a.partition for a in check(h).slow_failovers] == [1]


def test_unavailability_is_the_longest_gap_between_acks_including_the_edges() -> None:
    h = History(topic="t", partitions=[0, 1], start_s=0.0, end_s=10.0)
    h.sends = [
        ok("w0-0", 0, 0, 0.5, done=1.0),
        ok("w0-1", 1, 0, 1.0, done=2.0),
        ok("w0-2", 0, 1, 2.0, done=6.5),
        Send("w0", True, "w0-3", 1, 6.0, 9.0, Outcome.UNKNOWN),
        ok("w0-4", 1, 1, 7.0, done=9.5),
    ]
    window = unavailability(h)
    assert (window.from_s, window.until_s, window.ms) == (2.0, 6.5, 4500)
    per = unavailability_per_partition(h)
    assert (per[0].from_s, per[0].until_s) == (1.0, 6.5)
    assert (per[1].from_s, per[1].until_s) == (2.0, 9.5)
    empty = History(topic="t", partitions=[0], start_s=1.0, end_s=4.0)
    assert unavailability(empty).ms == 3000


def kinds(h: History) -> list[str]:
    return sorted({a.kind for a in check(h).violations()})


# Issue 13's checks. Each crafted history below passed every check that existed
# before (its only violations are of the new kind: without that check the
# checker would have said PASS), and fails with it; the fixed history passes.


def test_an_ack_found_only_at_another_offset_is_misplaced() -> None:
    h = clean()
    h.sends.append(ok("w0-5", 1, 5, 6.0))  # acknowledged at 1:5 ...
    h.final[1][1] = "w0-5"  # ... found only at 1:1 (nothing at 5: the HW is 2)
    h.high_watermarks[1] = 2
    for logs in h.replicas.values():
        logs[1][1] = "w0-5"
    found = misplaced(h)
    assert [(a.partition, a.offsets, a.values) for a in found] == [(1, (1,), ("w0-5",))]
    assert "offset 5" in found[0].detail
    assert kinds(h) == ["misplaced"]  # no older check saw it
    h.sends[-1] = ok("w0-5", 1, 1, 6.0)  # acknowledged where it is
    assert misplaced(h) == [] and kinds(h) == []


def test_a_value_in_another_partition_than_its_ack_is_misplaced() -> None:
    h = clean()
    h.sends.append(ok("w0-6", 1, 1, 6.0))
    h.final[0][2] = "w0-6"
    h.high_watermarks[0] = 3
    for logs in h.replicas.values():
        logs[0][2] = "w0-6"
    assert [(a.partition, a.values) for a in misplaced(h)] == [(1, ("w0-6",))]


def test_a_consumer_skipping_a_committed_offset_is_skipped() -> None:
    h = clean()
    # The consumer returns 1:0, then 1:2, never 1:1, which holds an acknowledged write.
    h.sends += [ok("w0-7", 1, 1, 6.0), ok("w0-8", 1, 2, 6.5)]
    h.final[1].update({1: "w0-7", 2: "w0-8"})
    h.high_watermarks[1] = 3
    for logs in h.replicas.values():
        logs[1].update({1: "w0-7", 2: "w0-8"})
    h.reads.append(Read("c0", 1, 2, "w0-8", 7.0))
    found = skipped(h)
    assert [(a.partition, a.offsets, a.values) for a in found] == [(1, (1,), ("w0-7",))]
    assert "consumer c0" in found[0].detail
    assert kinds(h) == ["skipped"]  # monotonic, consistent: no older check saw it
    h.reads.insert(-1, Read("c0", 1, 1, "w0-7", 6.9))
    assert skipped(h) == [] and kinds(h) == []


def test_a_consumer_lagging_behind_is_not_skipping() -> None:
    h = clean()
    h.sends.append(ok("w0-7", 1, 1, 6.0))  # never consumed, but nothing after it was either
    h.final[1][1] = "w0-7"
    h.high_watermarks[1] = 2
    for logs in h.replicas.values():
        logs[1][1] = "w0-7"
    assert skipped(h) == []


def test_an_offset_only_a_replica_holds_below_the_hw_is_divergence() -> None:
    h = clean()
    del h.final[0][1]  # the leader's read lacks 0:1, replicas hold it
    h.sends = [s for s in h.sends if s.value != "w1-0"]
    h.reads = [r for r in h.reads if r.value != "w1-0"]
    found = divergence(h)
    assert [(a.partition, a.offsets) for a in found] == [(0, (1,))] * 3
    assert "final read lacks" in found[0].detail
    # Before issue 13 only the gap and this divergence are new: nothing else saw it.
    assert kinds(h) == ["divergence", "gap"]
    h.high_watermarks[0] = 1  # above the HW, a replica's extra offset is not compared
    assert divergence(h) == [] and kinds(h) == []


def test_a_hole_below_the_hw_of_a_non_compacted_topic_is_a_gap() -> None:
    h = clean()
    h.final[0][3] = "w0-9"  # offset 2 missing below the HW 4
    h.high_watermarks[0] = 4
    h.sends.append(ok("w0-9", 0, 3, 6.0))
    for logs in h.replicas.values():
        logs[0][3] = "w0-9"
    found = gaps(h)
    assert [(a.partition, a.offsets) for a in found] == [(0, (2,))]
    assert kinds(h) == ["gap"]
    h.compacted = True  # a compacted topic may have holes
    assert gaps(h) == [] and kinds(h) == []
    h.compacted = False
    h.log_start_offsets[0] = 3  # offsets below the log start are not holes
    h.final[0] = {3: "w0-9"}
    h.sends = [s for s in h.sends if s.partition != 0 or s.value == "w0-9"]
    h.reads = [r for r in h.reads if r.partition != 0]
    for logs in h.replicas.values():
        logs[0] = {3: "w0-9"}
    assert gaps(h) == []


def many_acks(n: int) -> History:
    """A clean history with n acknowledged sends on one partition, all consumed."""
    h = History(topic="t", partitions=[0], start_s=0.0, end_s=float(n + 1))
    h.sends = [ok(f"w0-{i}", 0, i, float(i)) for i in range(n)]
    h.final = {0: {i: f"w0-{i}" for i in range(n)}}
    h.high_watermarks = {0: n}
    h.replicas = {node: {0: dict(h.final[0])} for node in (1, 2, 3)}
    h.reads = [Read("c0", 0, i, f"w0-{i}", i + 0.5) for i in range(n)]
    return h


def test_a_run_without_evidence_is_inconclusive_not_passed() -> None:
    h = many_acks(MIN_ACKNOWLEDGED)
    assert check(h).verdict == PASS and inconclusive(h, probes=0) == []

    no_reads = many_acks(MIN_ACKNOWLEDGED)
    no_reads.reads = []
    result = check(no_reads)
    assert result.violations() == []  # what passed before issue 13
    assert result.verdict == INCONCLUSIVE and not result.ok
    assert "consumers returned no record" in result.inconclusive[0]

    few = many_acks(MIN_ACKNOWLEDGED - 1)
    result = check(few)
    assert result.violations() == [] and result.verdict == INCONCLUSIVE
    assert f"fewer than the {MIN_ACKNOWLEDGED}" in result.inconclusive[0]
    assert check(few, min_acknowledged=MIN_ACKNOWLEDGED - 1).verdict == PASS

    unprobed = many_acks(MIN_ACKNOWLEDGED)
    unprobed.isolations = [Isolation(node=2, from_s=5.0, until_s=8.0)]  # nothing sent to 2
    result = check(unprobed)
    assert result.violations() == [] and result.verdict == INCONCLUSIVE
    assert "minority-ack check had no evidence" in result.inconclusive[0]
    unprobed.sends.append(
        Send("h2", False, "h2-0", 0, 6.0, 7.0, Outcome.UNKNOWN, node=2, error="TIMEOUT")
    )
    assert check(unprobed).verdict == PASS

    stale = many_acks(MIN_ACKNOWLEDGED)
    stale.stale_windows = [StaleWindow(node=2, partition=0, from_s=5.0, until_s=8.0)]
    result = check(stale)
    assert result.violations() == [] and result.verdict == INCONCLUSIVE
    assert "stale-ack check had no evidence" in result.inconclusive[0]
    stale.sends.append(
        Send(
            "s2", False, "s2-0", 0, 6.0, 6.1, Outcome.UNKNOWN, node=2, error="BROKER_NOT_AVAILABLE"
        )
    )
    assert check(stale).verdict == PASS


def test_a_violation_outranks_missing_evidence() -> None:
    h = many_acks(5)
    h.reads = []
    del h.final[0][4]
    result = check(h)
    assert result.inconclusive and result.verdict == FAIL
