"""A Raft thread held up by its own process keeps the leader it had (issue 13).

The node's event loop shares the GIL with the Raft thread. A handler that
holds the GIL longer than the election timeout (here: a deterministic stall,
a busy loop with the interpreter's switch interval raised so no other thread
gets the GIL) used to make every follower start an election on its first
tick after the stall, before reading the heartbeats waiting in its socket:
the term moved and the controller changed for no fault of the leader.
`core.absorb_own_pause` gives the leader one election timeout after such a
pause. Production timings (RaftTuning's defaults), not the tests' fast ones.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgspec.structs
import pytest

from lograft.quorum.raft.config import RaftTuning
from tests.raft_support import FAST_TIMINGS, eventually_async
from tests.unit.quorum.raft_inproc import InProcessCluster

DEFAULT_TIMINGS = {
    f.name: f.default for f in msgspec.structs.fields(RaftTuning) if f.name in FAST_TIMINGS
}


def hold_the_gil(seconds: float) -> None:
    """Block this thread and, unlike a sleep, every other thread of the process."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds * 10)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass  # the stall itself: no other thread runs meanwhile
    finally:
        sys.setswitchinterval(previous)


@pytest.mark.slow
async def test_a_stall_longer_than_the_election_timeout_keeps_term_and_leader(
    tmp_path: Path,
) -> None:
    async with InProcessCluster(tmp_path, ["1", "2", "3"], **DEFAULT_TIMINGS) as cluster:
        await cluster.start()
        leader = await cluster.leader()
        await leader.adapter.append(b"before")

        def terms_and_elections() -> dict[str, tuple[int, int]]:
            counted = {m.node_id: m.adapter.counters() for m in cluster.members.values()}
            return {node: (c.term, c.elections) for node, c in counted.items()}

        before = terms_and_elections()

        # Past every follower's election timeout and the leader's fallback.
        stall_s = (
            1.2
            * max(
                DEFAULT_TIMINGS["election_timeout_max_ms"],
                DEFAULT_TIMINGS["leader_fallback_timeout_ms"],
            )
            / 1000
        )
        hold_the_gil(stall_s)

        # The stall reached the Raft threads: each sees a tick that late.
        def all_saw_it() -> bool:
            lags = [m.adapter.health()["raft_tick_lag_ms"] for m in cluster.members.values()]
            return all(lag["max_since_start"] >= stall_s * 1000 * 0.9 for lag in lags)

        await eventually_async(all_saw_it, 5.0, "every Raft thread's late tick")
        # An append commits through the same leader, in the same term.
        offset = await leader.adapter.append(b"after")
        for m in cluster.members.values():
            await m.adapter.wait_for_offset(offset, timeout_ms=5000)
        assert (await cluster.leader()) is leader
        assert terms_and_elections() == before
