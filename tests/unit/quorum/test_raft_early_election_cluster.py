"""The early election in a real three-voter pysyncobj cluster in one process,
every link through its own forwarder (a stand-in for a toxiproxy proxy).

The election timeout is 4-4.5 s, so a survivor standing for election
within `EARLY_BOUND_S` after the leader's links refuse and it stops can only
come from the early election; and a link cut between the leader and one follower (the forwarder
refuses, as a dead process's port would) must bring no election forward:
the other follower still hears the leader and refuses the pre-vote."""

from __future__ import annotations

import time
from itertools import permutations
from pathlib import Path

import pytest

from lograft.quorum.raft.early_election import EarlyElection
from tests.raft_support import eventually_async, free_port
from tests.unit.quorum.raft_inproc import InProcessCluster, Member
from tests.unit.quorum.tcp_forwarder import TcpForwarder, cut_together

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

IDS = ["1", "2", "3"]
ELECTION_TIMEOUT_MIN_MS = 4000
LONG_ELECTION = {
    "election_timeout_min_ms": ELECTION_TIMEOUT_MIN_MS,
    "election_timeout_max_ms": 4500,
    "connection_timeout_ms": 4500,
}
# Half the election timeout's minimum: the early election takes a few
# hundred ms; the rest is margin for a loaded machine.
EARLY_BOUND_S = ELECTION_TIMEOUT_MIN_MS / 1000 / 2


def early(member: Member) -> EarlyElection:
    return member.adapter._core._early


async def agreed_term(cluster: InProcessCluster) -> int:
    """The term every running member counts. Counters are as of each Raft
    thread's last tick, so right after an election one may still show the
    term before it."""

    def agreed() -> int | None:
        terms = {m.adapter.counters().term for m in cluster.members.values()}
        return terms.pop() if len(terms) == 1 else None

    return await eventually_async(agreed, 10, "every member to count the same term")


async def test_a_stopped_leader_is_replaced_early_and_a_cut_link_elects_nobody_early(
    tmp_path: Path,
) -> None:
    cluster = InProcessCluster(tmp_path, IDS, **LONG_ELECTION)
    forwarders = {
        (a, b): TcpForwarder(target_port=cluster.ports[b], listen_port=free_port())
        for a, b in permutations(IDS, 2)
    }
    try:
        for fwd in forwarders.values():
            await fwd.start()
        cluster.dial = {pair: fwd.address for pair, fwd in forwarders.items()}
        await cluster.start()
        leader = await cluster.leader(timeout_s=30)
        cut_off, other = cluster.followers(leader)
        term = await agreed_term(cluster)

        # Cut the leader <-> cut_off link both ways: its forwarders refuse.
        link = ((leader.node_id, cut_off.node_id), (cut_off.node_id, leader.node_id))
        await cut_together(forwarders[pair] for pair in link)
        await eventually_async(
            lambda: early(other).prevotes_refused >= 1,
            10,
            "the follower that still hears the leader to refuse the cut-off one's pre-vote",
        )
        assert early(cut_off).elections_brought_forward == 0
        assert leader.adapter.is_leader and other.adapter.leader_id == leader.node_id
        assert leader.adapter.counters().term == term == other.adapter.counters().term
        offset = await leader.adapter.append(b"with one link cut")
        await other.adapter.wait_for_offset(offset, 10_000)

        for pair in ((leader.node_id, cut_off.node_id), (cut_off.node_id, leader.node_id)):
            await forwarders[pair].heal()
        await cut_off.adapter.wait_for_offset(offset, 20_000)
        leader = await cluster.leader(timeout_s=30)  # the same one, unless the machine stalled

        # The leader's every link refuses (as a killed process's port with no
        # proxy in front; a forwarder still listening would look alive), and it
        # stops: both survivors agree it is gone, one elects early.
        survivors = cluster.followers(leader)
        term = await agreed_term(cluster)
        stopped_at = time.monotonic()
        await cut_together(fwd for (a, b), fwd in forwarders.items() if leader.node_id in (a, b))
        await cluster.stop_member(leader.node_id)
        # A survivor stands for election within the bound: only the early
        # election can do that. Winning may take a second round if the two
        # stood at once (a loaded machine can delay the first one's vote
        # request past the second's early deadline); that round runs at the
        # normal timeouts, so the leader itself is awaited without the bound.
        await eventually_async(
            lambda: any(m.adapter.counters().term > term for m in survivors),
            EARLY_BOUND_S,
            "a survivor to stand for election before any election timeout ran out",
        )
        assert sum(early(m).elections_brought_forward for m in survivors) >= 1
        new = await cluster.leader(timeout_s=30)
        took_s = time.monotonic() - stopped_at
        assert new in survivors
        offset = await new.adapter.append(b"after the early election")
        for m in survivors:
            await m.adapter.wait_for_offset(offset, 10_000)
        print(f"[early election] new leader {took_s:.2f} s after the stop")
    finally:
        await cluster.stop()
        for fwd in forwarders.values():
            await fwd.close()
