"""scripts/profile_flame.py's reading of py-spy's collapsed stacks: busy and idle
samples, own time per leaf, and totals over lograft's own (non-entry) frames.

Nothing here starts a server or runs py-spy; the script itself is run by hand
(docs/benchmarks.md, "Where the time goes: flame graphs").
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import profile_flame

STACKS = [
    "run_on (lograft/node/event_loop.py:29);handle (lograft/api/app.py:10);"
    "append (lograft/storage/log.py:5);_pwrite_all (lograft/storage/segment.py:659) 30",
    "run_on (lograft/node/event_loop.py:29);handle (lograft/api/app.py:10);"
    "dumps (json/__init__.py:231) 10",
    "run_on (lograft/node/event_loop.py:29);EpollSelector.select (selectors.py:468) 50",
    "Thread.run (threading.py:982);_worker (concurrent/futures/thread.py) 7",
    "recurse (lograft/x.py:1);recurse (lograft/x.py:1) 5",
    "",
    "garbage-without-count",
]


def test_waits_are_idle_and_the_rest_is_busy() -> None:
    busy, idle, own, _total = profile_flame.shares(STACKS)
    assert (busy, idle) == (45, 57)
    assert own["_pwrite_all (lograft/storage/segment.py:659)"] == 30
    assert own["dumps (json/__init__.py:231)"] == 10
    assert "EpollSelector.select (selectors.py:468)" not in own


def test_totals_count_lograft_frames_once_per_sample_without_entry_frames() -> None:
    _busy, _idle, _own, total = profile_flame.shares(STACKS)
    assert total["handle (lograft/api/app.py:10)"] == 40
    assert total["append (lograft/storage/log.py:5)"] == 30
    assert total["recurse (lograft/x.py:1)"] == 5  # a recursion counts once
    assert "run_on (lograft/node/event_loop.py:29)" not in total
    assert "dumps (json/__init__.py:231)" not in total  # not lograft's


def test_request_middlewares_are_left_out_of_the_totals() -> None:
    stacks = [
        "quota_middleware.<locals>.quotas (lograft/api/quota_gate.py:277);"
        "DataRoutes.produce_json (lograft/api/routes_data.py:186) 4"
    ]
    _busy, _idle, _own, total = profile_flame.shares(stacks)
    assert dict(total) == {"DataRoutes.produce_json (lograft/api/routes_data.py:186)": 4}
