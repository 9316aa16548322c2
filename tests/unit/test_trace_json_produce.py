"""scripts/trace_json_produce.py's join of the nodes' trace events to each
serial JSON produce request: every step of its critical path, the handler
found around its produce, the slower follower the one whose reporting fetch
came last.

Nothing here starts a cluster; the script itself is run by hand
(docs/benchmarks.md, "Where a JSON produce request's time goes").
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import trace_json_produce as tj
import trace_latency as tl

LEADER, F2, F3 = 101, 102, 103  # pids of brokers 1, 2, 3
PIDS = {LEADER: 1, F2: 2, F3: 3}
MS = 1_000_000


def ev(kind: str, pid: int, *fields: int) -> tl.Event:
    return tl.Event(kind, pid, list(fields))


def one_request() -> list[tl.Event]:
    """Partition 0, offsets 0..499; follower 3 reports last. Times in ms."""
    return [
        ev("J", LEADER, -1, 1 * MS, 12 * MS),
        ev("P", LEADER, 0, 0, 499, 2 * MS, 11 * MS),
        ev("A", LEADER, 0, 0, 499, 3 * MS),
        ev("R", LEADER, 0, 2, 0, 499, 4 * MS),
        ev("R", LEADER, 0, 3, 0, 499, 5 * MS),
        ev("Y", F2, 0, 0, 499, 5 * MS, 6 * MS),
        ev("Y", F3, 0, 0, 499, 6 * MS, 7 * MS),
        ev("F", LEADER, 0, 2, 500, 7 * MS),
        ev("F", LEADER, 0, 3, 500, 8 * MS),
        ev("H", LEADER, 0, 500, int(8.5 * MS)),
        # An earlier handler and fetch that must not be picked.
        ev("J", LEADER, -1, 0, int(0.5 * MS)),
        ev("F", LEADER, 0, 3, 0, int(0.2 * MS)),
    ]


def test_each_step_of_a_request_from_its_events() -> None:
    rows = tj.join([(0, 499, 0, 13 * MS)], one_request(), PIDS)
    got = {name: rows[name] for name, _a, _b in tj.STEPS}
    assert got == {
        "client sends -> the handler starts (HTTP in, the request pipeline)": [1.0],
        "handler starts -> produce starts (body read, JSON decode, batch built)": [1.0],
        "produce starts -> appended": [1.0],
        "appended -> slower follower's fetch answered with it": [2.0],
        "answer -> slower follower starts applying": [1.0],
        "follower applies": [1.0],
        "applied -> its next fetch served by the leader": [1.0],
        "that fetch served -> HW passes the request": [0.5],
        "HW moves -> produce returns": [2.5],
        "produce returns -> handler returns (the answer rendered)": [1.0],
        "handler returns -> client has the answer (sent, read)": [1.0],
        "client sends -> client has the answer": [13.0],
    }


def test_a_request_without_node_events_has_only_its_own_time() -> None:
    rows = tj.join([(0, 999, 0, 5 * MS)], one_request(), PIDS)
    assert dict(rows) == {"client sends -> client has the answer": [5.0]}
