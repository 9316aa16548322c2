"""Pure checks over a recorded chaos history (tests/chaos/history.py).

Each check returns the anomalies it found, naming the offending values and
offsets; `check` runs them all and `CheckResult.violations` says which
must-hold properties failed (issue 6):

- lost: an acknowledged value absent from the final read;
- misplaced: an acknowledged value present in the final read but not at the
  (partition, offset) its acknowledgement named;
- duplicate: a value at more than one offset (a violation only for an
  idempotent writer; counted for every writer);
- inconsistent: one (partition, offset) seen holding different values by the
  acknowledgements, the consumers, the final read or the replicas on disk, or
  a value seen in a partition other than the one it was sent to;
- non-monotonic: a consumer returning an offset at or below one it returned
  before in the same partition, or a writer's later acknowledged send
  (by invocation time) at an offset at or below an earlier one's;
- skipped: a consumer that returned an offset but never returned an earlier
  one of the same partition that holds a committed record (acknowledged, or
  in the final read): Jepsen's "unseen". Every offset a consumer returns was
  below the high watermark it saw, so every earlier offset was committed
  then and must have been returned;
- divergence: a replica that, after healing, misses or disagrees on an offset
  below the final high watermark, or holds one below it that the final read
  (the leader) lacks;
- gap: an offset between the log start and the final high watermark of a
  non-compacted topic that the final read lacks;
- phantom: a value in the log that no writer sent, or whose send failed
  definitely (the broker said nothing was written);
- minority ack: an acknowledgement answered by a node while it was cut off
  from every other node, for a send invoked in that window;
- stale ack: an acknowledgement answered by a restarted node while its Raft
  links were held (a `StaleWindow`: its metadata was its journal's stale
  image, which may still name it leader), for a send invoked in that window;
- slow failover: after a leader was killed, no send to its partitions
  invoked after the kill was acknowledged within the failover budget; or,
  after a node was stopped (SIGSTOP), none to the partitions it did not lead;
- unavailability: the longest window with no acknowledged send at all, and
  per partition (a measure, not a violation by itself).

A run without violations passes only if it had evidence (`inconclusive`):
its consumers returned something, its writers got at least
`MIN_ACKNOWLEDGED` acknowledgements, and every isolation had at least one
send invoked into it (a minority probe), and so every stale window (a stale
probe). Otherwise its verdict is
INCONCLUSIVE, not PASS.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from tests.chaos.history import History, Outcome, Send, StaleWindow

# How long produce may take to succeed again after a partition leader is
# SIGKILLed, in ms: docs/quorum.md's failover (fencing after the 1.5 s broker
# session, up to 3.5 s when the controller dies too) plus the client's
# retry backoff (retry_backoff_max_ms 1000) and metadata refresh, with room
# for a loaded two-core CI machine. docs/reliability.md explains the figure.
FAILOVER_BUDGET_MS = 10_000
# Acknowledged sends a run needs before its checks count as evidence, in
# sends (a count): a run that acknowledged fewer is INCONCLUSIVE. The fast
# 12 s runs acknowledge about 1,500-3,000 (docs/reliability.md); 100 is far
# below that and far above "the writers barely ran".
MIN_ACKNOWLEDGED = 100


@dataclass(frozen=True)
class Anomaly:
    kind: str
    partition: int | None
    offsets: tuple[int, ...]
    values: tuple[str, ...]
    detail: str

    def __str__(self) -> str:
        where = f"p{self.partition}" if self.partition is not None else "-"
        return (
            f"{self.kind} {where} offsets={list(self.offsets)} "
            f"values={list(self.values)}: {self.detail}"
        )


@dataclass(frozen=True)
class Window:
    """The longest stretch without an acknowledgement, in monotonic seconds."""

    from_s: float
    until_s: float

    @property
    def ms(self) -> int:
        return round((self.until_s - self.from_s) * 1000)


def _sends_by_value(history: History) -> dict[str, Send]:
    return {s.value: s for s in history.sends}


def _final_positions(history: History) -> dict[str, list[tuple[int, int]]]:
    """value -> every (partition, offset) where the final read holds it."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, log in sorted(history.final.items()):
        for offset, value in sorted(log.items()):
            where[value].append((p, offset))
    return where


def lost(history: History) -> list[Anomaly]:
    where = _final_positions(history)
    out = []
    for s in history.sends:
        if s.outcome is Outcome.OK and s.value not in where:
            out.append(
                Anomaly(
                    "lost",
                    s.partition,
                    (s.offset,) if s.offset is not None else (),
                    (s.value,),
                    f"acknowledged to {s.writer} at offset {s.offset}, absent from the final "
                    f"read (high watermark {history.high_watermarks.get(s.partition)})",
                )
            )
    return out


def misplaced(history: History) -> list[Anomaly]:
    """Acknowledged values that the final read holds, but not at the partition and
    offset of their acknowledgement (absent ones are `lost`)."""
    where = _final_positions(history)
    out = []
    for s in history.sends:
        if s.outcome is not Outcome.OK or s.value not in where:
            continue
        if (s.partition, s.offset) in where[s.value]:
            continue
        out.append(
            Anomaly(
                "misplaced",
                s.partition,
                tuple(o for _p, o in where[s.value]),
                (s.value,),
                f"acknowledged to {s.writer} at partition {s.partition} offset {s.offset}, "
                f"found only at {where[s.value]} (partition, offset)",
            )
        )
    return out


def duplicates(history: History) -> list[Anomaly]:
    sends = _sends_by_value(history)
    out = []
    for value, places in _final_positions(history).items():
        if len(places) < 2:
            continue
        send = sends.get(value)
        writer = (
            f"{send.writer} ({'idempotent' if send.idempotent else 'not idempotent'})"
            if (send)
            else "no known writer"
        )
        out.append(
            Anomaly(
                "duplicate",
                places[0][0],
                tuple(o for _p, o in places),
                (value,),
                f"at {len(places)} places {places}; sent by {writer}",
            )
        )
    return out


def idempotent_duplicates(history: History, found: list[Anomaly]) -> list[Anomaly]:
    sends = _sends_by_value(history)
    return [a for a in found if (s := sends.get(a.values[0])) is not None and s.idempotent]


def _observations(history: History) -> dict[tuple[int, int], dict[str, str]]:
    """(partition, offset) -> {source: value} for every place that saw the offset."""
    seen: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)
    for p, log in history.final.items():
        for offset, value in log.items():
            seen[(p, offset)]["final read"] = value
    for node, logs in history.replicas.items():
        for p, log in logs.items():
            for offset, value in log.items():
                seen[(p, offset)][f"replica on node {node}"] = value
    for s in history.sends:
        if s.outcome is Outcome.OK and s.offset is not None:
            key = (s.partition, s.offset)
            seen[key][f"ack of {s.value}"] = s.value
    for r in history.reads:
        key = (r.partition, r.offset)
        label = f"consumer {r.reader}"
        if label in seen[key] and seen[key][label] != r.value:
            seen[key][f"{label} (again)"] = r.value
        else:
            seen[key][label] = r.value
    return seen


def inconsistent(history: History) -> list[Anomaly]:
    out = []
    for (p, offset), by_source in sorted(_observations(history).items()):
        if len(set(by_source.values())) > 1:
            out.append(
                Anomaly(
                    "inconsistent",
                    p,
                    (offset,),
                    tuple(sorted(set(by_source.values()))),
                    ", ".join(f"{src}: {v}" for src, v in sorted(by_source.items())),
                )
            )
    sends = _sends_by_value(history)
    for value, places in _final_positions(history).items():
        send = sends.get(value)
        if send is None:
            continue
        for p, offset in places:
            if p != send.partition:
                out.append(
                    Anomaly(
                        "inconsistent",
                        p,
                        (offset,),
                        (value,),
                        f"sent by {send.writer} to partition {send.partition}, found in {p}",
                    )
                )
    return out


def non_monotonic(history: History) -> list[Anomaly]:
    out = []
    last_read: dict[tuple[str, int], tuple[int, str]] = {}
    for r in history.reads:
        key = (r.reader, r.partition)
        prev = last_read.get(key)
        if prev is not None and r.offset <= prev[0]:
            out.append(
                Anomaly(
                    "non-monotonic",
                    r.partition,
                    (prev[0], r.offset),
                    (prev[1], r.value),
                    f"consumer {r.reader} returned offset {r.offset} after {prev[0]}",
                )
            )
        last_read[key] = (r.offset, r.value)
    acked: dict[tuple[str, int], list[Send]] = defaultdict(list)
    for s in history.sends:
        if s.outcome is Outcome.OK and s.offset is not None:
            acked[(s.writer, s.partition)].append(s)
    for (writer, p), sends in sorted(acked.items()):
        sends.sort(key=lambda s: s.invoked_s)
        highest: Send | None = None
        for s in sends:
            assert s.offset is not None
            if highest is not None and highest.offset is not None and s.offset <= highest.offset:
                out.append(
                    Anomaly(
                        "non-monotonic",
                        p,
                        (highest.offset, s.offset),
                        (highest.value, s.value),
                        f"{writer} sent {s.value} after {highest.value} but it was acknowledged "
                        f"at offset {s.offset}, not after {highest.offset}",
                    )
                )
            if highest is None or (highest.offset is not None and s.offset > highest.offset):
                highest = s
    return out


def skipped(history: History) -> list[Anomaly]:
    """Committed offsets a consumer read past without returning them."""
    committed: dict[int, dict[int, str]] = defaultdict(dict)
    for s in history.sends:
        if s.outcome is Outcome.OK and s.offset is not None:
            committed[s.partition][s.offset] = s.value
    for p, log in history.final.items():
        for offset, value in log.items():
            committed[p].setdefault(offset, value)
    returned: dict[tuple[str, int], set[int]] = defaultdict(set)
    for r in history.reads:
        returned[(r.reader, r.partition)].add(r.offset)
    out = []
    for (reader, p), offsets in sorted(returned.items()):
        furthest = max(offsets)
        # The consumers start at the log start ("earliest").
        start = history.log_start_offsets.get(p, 0)
        unseen = sorted(o for o in committed[p] if start <= o < furthest and o not in offsets)
        if unseen:
            out.append(
                Anomaly(
                    "skipped",
                    p,
                    tuple(unseen),
                    tuple(committed[p][o] for o in unseen),
                    f"consumer {reader} returned offset {furthest} but never {len(unseen)} "
                    f"committed offsets before it (first {unseen[0]}, last {unseen[-1]})",
                )
            )
    return out


def gaps(history: History) -> list[Anomaly]:
    """Offsets below the final high watermark that the final read lacks (a
    non-compacted topic has a record at every offset from its log start)."""
    if history.compacted:
        return []
    out = []
    for p in history.partitions:
        log = history.final.get(p, {})
        start = history.log_start_offsets.get(p, 0)
        hw = history.high_watermarks.get(p, 0)
        missing = [o for o in range(start, hw) if o not in log]
        if missing:
            out.append(
                Anomaly(
                    "gap",
                    p,
                    tuple(missing),
                    (),
                    f"the final read lacks {len(missing)} offsets between the log start "
                    f"{start} and the high watermark {hw} (first {missing[0]}, "
                    f"last {missing[-1]})",
                )
            )
    return out


def divergence(history: History) -> list[Anomaly]:
    """Replicas that miss, disagree on, or alone hold offsets below the final high
    watermark, compared with the final read (what the leader served)."""
    out = []
    for p in history.partitions:
        hw = history.high_watermarks.get(p, 0)
        reference = history.final.get(p, {})
        for node, logs in sorted(history.replicas.items()):
            log = logs.get(p, {})
            extra = [o for o in range(hw) if o in log and o not in reference]
            if extra:
                out.append(
                    Anomaly(
                        "divergence",
                        p,
                        tuple(extra),
                        tuple(log[o] for o in extra),
                        f"replica on node {node} holds {len(extra)} offsets below the high "
                        f"watermark {hw} that the final read lacks (first {extra[0]}, "
                        f"last {extra[-1]})",
                    )
                )
            missing = [o for o in range(hw) if o in reference and o not in log]
            differing = [
                o for o in range(hw) if o in log and o in reference and log[o] != reference[o]
            ]
            if missing:
                out.append(
                    Anomaly(
                        "divergence",
                        p,
                        (missing[0], missing[-1]),
                        (),
                        f"replica on node {node} lacks {len(missing)} offsets below the high "
                        f"watermark {hw} (first {missing[0]}, last {missing[-1]})",
                    )
                )
            for o in differing:
                out.append(
                    Anomaly(
                        "divergence",
                        p,
                        (o,),
                        (reference[o], log[o]),
                        f"replica on node {node} holds {log[o]!r} at {o}, "
                        f"the leader {reference[o]!r}",
                    )
                )
    return out


def phantoms(history: History) -> list[Anomaly]:
    sends = _sends_by_value(history)
    out = []
    for value, places in _final_positions(history).items():
        send = sends.get(value)
        if send is None:
            why = "no writer sent it"
        elif send.outcome is Outcome.FAIL:
            why = f"{send.writer}'s send failed definitely ({send.error})"
        else:
            continue
        out.append(Anomaly("phantom", places[0][0], tuple(o for _p, o in places), (value,), why))
    return out


def minority_acks(history: History) -> list[Anomaly]:
    out = []
    for iso in history.isolations:
        for s in history.sends:
            if (
                s.outcome is Outcome.OK
                and s.node == iso.node
                and iso.from_s <= s.invoked_s < iso.until_s
                and s.completed_s <= iso.until_s
            ):
                out.append(
                    Anomaly(
                        "minority ack",
                        s.partition,
                        (s.offset,) if s.offset is not None else (),
                        (s.value,),
                        f"node {iso.node} acknowledged {s.value} "
                        f"{s.invoked_s - iso.from_s:.2f}s into its isolation",
                    )
                )
    return out


def minority_probes(history: History) -> int:
    """Sends made to an isolated node inside its window, whatever their outcome: how
    much evidence the minority-ack check had (zero means it proved nothing)."""
    return sum(
        1
        for iso in history.isolations
        for s in history.sends
        if s.node == iso.node and iso.from_s <= s.invoked_s < iso.until_s
    )


def _stale_window(s: Send, history: History) -> StaleWindow | None:
    """The stale window `s` was invoked into (to that node, for that partition), if any."""
    for w in history.stale_windows:
        if s.node == w.node and s.partition == w.partition and w.from_s <= s.invoked_s < w.until_s:
            return w
    return None


def stale_acks(history: History) -> list[Anomaly]:
    """Sends to a restarted node invoked while its metadata was stale, acknowledged
    before the window closed: the node acted on metadata it had not caught up."""
    out = []
    for s in history.sends:
        w = _stale_window(s, history)
        if s.outcome is Outcome.OK and w is not None and s.completed_s <= w.until_s:
            out.append(
                Anomaly(
                    "stale ack",
                    s.partition,
                    (s.offset,) if s.offset is not None else (),
                    (s.value,),
                    f"node {w.node} acknowledged {s.value} at offset {s.offset} "
                    f"{s.invoked_s - w.from_s:.2f}s into its stale window (Raft links held)",
                )
            )
    return out


def stale_probes(history: History) -> int:
    """Sends to a restarted node's stale-window partition invoked inside its window,
    whatever their outcome: the stale-ack check's evidence (zero proves nothing)."""
    return sum(1 for s in history.sends if _stale_window(s, history) is not None)


def failover_ms(history: History) -> list[tuple[int, int, int | None]]:
    """(killed or stopped node, partition, ms from the fault to the first
    acknowledgement of a send invoked after it; None if none came), for each
    partition a leader kill or a stall names."""
    out: list[tuple[int, int, int | None]] = []
    for fault in [*history.leader_kills, *history.stalls]:
        for p in fault.partitions:
            done = [
                s.completed_s
                for s in history.sends
                if s.partition == p and s.outcome is Outcome.OK and s.invoked_s >= fault.at_s
            ]
            ms = round((min(done) - fault.at_s) * 1000) if done else None
            out.append((fault.node, p, ms))
    return out


def slow_failovers(history: History, budget_ms: int = FAILOVER_BUDGET_MS) -> list[Anomaly]:
    return [
        Anomaly(
            "slow failover",
            p,
            (),
            (),
            f"after node {node} was killed or stopped, partition {p} "
            + ("never acknowledged a later send" if ms is None else f"took {ms} ms")
            + f" (budget {budget_ms} ms)",
        )
        for node, p, ms in failover_ms(history)
        if ms is None or ms > budget_ms
    ]


def _longest_gap(times: list[float], start_s: float, end_s: float) -> Window:
    points = [start_s, *sorted(t for t in times if start_s <= t <= end_s), end_s]
    best = Window(start_s, start_s)
    for a, b in itertools.pairwise(points):
        if b - a > best.until_s - best.from_s:
            best = Window(a, b)
    return best


def unavailability(history: History) -> Window:
    acks = [s.completed_s for s in history.sends if s.outcome is Outcome.OK]
    return _longest_gap(acks, history.start_s, history.end_s)


def unavailability_per_partition(history: History) -> dict[int, Window]:
    return {
        p: _longest_gap(
            [s.completed_s for s in history.sends if s.partition == p and s.outcome is Outcome.OK],
            history.start_s,
            history.end_s,
        )
        for p in history.partitions
    }


def inconclusive(
    history: History,
    *,
    probes: int,
    min_acknowledged: int = MIN_ACKNOWLEDGED,
    stale: int = 0,
) -> list[str]:
    """Why the run's checks had too little evidence to pass (empty if they had enough)."""
    why = []
    if not history.reads:
        why.append("the consumers returned no record: nothing checked what a consumer sees")
    acknowledged = sum(1 for s in history.sends if s.outcome is Outcome.OK)
    if acknowledged < min_acknowledged:
        why.append(
            f"{acknowledged} acknowledged sends, fewer than the {min_acknowledged} "
            "a run needs (MIN_ACKNOWLEDGED)"
        )
    if history.isolations and probes == 0:
        why.append(
            f"no send was invoked into any of the {len(history.isolations)} isolation "
            "windows: the minority-ack check had no evidence"
        )
    if history.stale_windows and stale == 0:
        why.append(
            f"no send was invoked into any of the {len(history.stale_windows)} stale-metadata "
            "windows: the stale-ack check had no evidence"
        )
    return why


# Verdicts of a checked run.
PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"


@dataclass
class CheckResult:
    acknowledged: int
    unknown: int
    failed: int
    # Records the consumers returned during the run.
    reads: int = 0
    lost: list[Anomaly] = field(default_factory=list)
    misplaced: list[Anomaly] = field(default_factory=list)
    duplicates: list[Anomaly] = field(default_factory=list)
    idempotent_duplicates: list[Anomaly] = field(default_factory=list)
    inconsistent: list[Anomaly] = field(default_factory=list)
    non_monotonic: list[Anomaly] = field(default_factory=list)
    skipped: list[Anomaly] = field(default_factory=list)
    divergence: list[Anomaly] = field(default_factory=list)
    gaps: list[Anomaly] = field(default_factory=list)
    phantoms: list[Anomaly] = field(default_factory=list)
    minority_acks: list[Anomaly] = field(default_factory=list)
    minority_probes: int = 0
    stale_acks: list[Anomaly] = field(default_factory=list)
    # Sends invoked into a stale window, and how many of them were not acknowledged.
    stale_probes: int = 0
    stale_refused: int = 0
    slow_failovers: list[Anomaly] = field(default_factory=list)
    failover_ms: list[tuple[int, int, int | None]] = field(default_factory=list)
    unavailable: Window = field(default_factory=lambda: Window(0.0, 0.0))
    unavailable_per_partition: dict[int, Window] = field(default_factory=dict)
    # Why the run had too little evidence to pass (see `inconclusive`).
    inconclusive: list[str] = field(default_factory=list)

    def violations(self) -> list[Anomaly]:
        """Every anomaly that breaks a must-hold property (duplicates of writers
        without idempotence are allowed, as in Kafka)."""
        return [
            *self.lost,
            *self.misplaced,
            *self.inconsistent,
            *self.idempotent_duplicates,
            *self.non_monotonic,
            *self.skipped,
            *self.divergence,
            *self.gaps,
            *self.phantoms,
            *self.minority_acks,
            *self.stale_acks,
            *self.slow_failovers,
        ]

    @property
    def ok(self) -> bool:
        """No violation and enough evidence: the run passed."""
        return self.verdict == PASS

    @property
    def verdict(self) -> str:
        """FAIL on any violation, else INCONCLUSIVE without evidence, else PASS."""
        if self.violations():
            return FAIL
        return INCONCLUSIVE if self.inconclusive else PASS


def check(
    history: History,
    *,
    failover_budget_ms: int = FAILOVER_BUDGET_MS,
    min_acknowledged: int = MIN_ACKNOWLEDGED,
) -> CheckResult:
    dups = duplicates(history)
    probes = minority_probes(history)
    stale = stale_probes(history)
    return CheckResult(
        acknowledged=sum(1 for s in history.sends if s.outcome is Outcome.OK),
        unknown=sum(1 for s in history.sends if s.outcome is Outcome.UNKNOWN),
        failed=sum(1 for s in history.sends if s.outcome is Outcome.FAIL),
        reads=len(history.reads),
        lost=lost(history),
        misplaced=misplaced(history),
        duplicates=dups,
        idempotent_duplicates=idempotent_duplicates(history, dups),
        inconsistent=inconsistent(history),
        non_monotonic=non_monotonic(history),
        skipped=skipped(history),
        divergence=divergence(history),
        gaps=gaps(history),
        phantoms=phantoms(history),
        minority_acks=minority_acks(history),
        minority_probes=probes,
        stale_acks=stale_acks(history),
        stale_probes=stale,
        stale_refused=sum(
            1
            for s in history.sends
            if s.outcome is not Outcome.OK and _stale_window(s, history) is not None
        ),
        slow_failovers=slow_failovers(history, failover_budget_ms),
        failover_ms=failover_ms(history),
        unavailable=unavailability(history),
        unavailable_per_partition=unavailability_per_partition(history),
        inconclusive=inconclusive(
            history, probes=probes, min_acknowledged=min_acknowledged, stale=stale
        ),
    )
