"""peer_loss and early_election: a follower whose link to the leader dropped
and whose probe of the leader's Raft port is refused asks the others
(pre-vote) and, with a majority, elects early; anything ambiguous (the port
accepts, the link is only silent, the other voter still hears the leader)
keeps the election timeout; a follower that still hears its leader refuses
a pre-vote.

The rules run against a stand-in for SyncObj's private attributes (the ones
pysyncobj's own timer check reads) and real sockets on 127.0.0.1: a port
closed a moment ago refuses, a listening socket that never accepts stands in
for a SIGSTOPped process or a proxy."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lograft.quorum.raft.core import absorb_own_pause
from lograft.quorum.raft.early_election import (
    PREVOTE_OK_TYPE,
    PREVOTE_TYPE,
    EarlyElection,
    hears_leader,
)
from lograft.quorum.raft.peer_contact import PeerContact, monotonic_ms
from lograft.quorum.raft.peer_loss import PeerLossWatch
from lograft.quorum.raft.port_probe import PortProbe, ProbeOutcome
from lograft.quorum.raft.transport import PeerNode

FOLLOWER, CANDIDATE, LEADER = 0, 1, 2
DELAY_MIN_S, DELAY_MAX_S = 0.05, 0.3
TIMEOUT_S = 2.0  # the long election timeout a follower would otherwise wait
PROBE_TIMEOUT_S = 0.5
# Long enough for a refused or accepted loopback connect to be seen; the
# probes settle in microseconds, this bounds the wait, it is not a sleep.
SETTLE_S = 5.0


class FakeSyncObj:
    """The SyncObj state PeerLossWatch and EarlyElection read and write."""

    def __init__(self, others: list[PeerNode], leader: PeerNode | None, now: float) -> None:
        self._SyncObj__otherNodes = list(others)
        self._SyncObj__raftState = FOLLOWER
        self._SyncObj__raftElectionDeadline = now + TIMEOUT_S
        self._SyncObj__raftLog = [(b"", 1, 1), (b"", 7, 2)]  # (command, index, term)
        self.leader = leader
        self.connected = set(others)

    def isNodeConnected(self, node: Any) -> bool:
        return node in self.connected

    def _getLeader(self) -> PeerNode | None:
        return self.leader


@pytest.fixture
def closed_port() -> int:
    """A port that listened a moment ago and now refuses (a killed process's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        return int(s.getsockname()[1])


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A port whose kernel completes handshakes nobody accepts (a stopped process)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


HEARD_WINDOW_MS = 2000


class Voter:
    """A follower "2" of leader "1" (at `port`), with voter "3": both watches."""

    def __init__(self, port: int) -> None:
        self.leader = PeerNode("1", f"127.0.0.1:{port}")
        self.other = PeerNode("3", "127.0.0.1:1")
        self.contact = PeerContact()
        self.contact.heard("1")
        self.contact.appended("1")
        self.so = FakeSyncObj([self.leader, self.other], self.leader, time.monotonic())
        self.watch = PeerLossWatch(self.contact, probe_timeout_s=PROBE_TIMEOUT_S)
        self.early = EarlyElection(
            self.contact,
            delay_min_s=DELAY_MIN_S,
            delay_max_s=DELAY_MAX_S,
            heard_window_ms=HEARD_WINDOW_MS,
            rng=random.Random(7),
        )
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.early.attach_sender(lambda node, message: self.sent.append((node.id, message)))
        self.tick(time.monotonic())  # every link up once: what can be lost

    @property
    def deadline(self) -> float:
        return float(self.so._SyncObj__raftElectionDeadline)

    def tick(self, now: float) -> None:
        self.watch.tick(self.so, now)
        self.early.tick(self.so, now)

    def settle(self) -> float:
        """Tick until no probe is in flight; the time of the last tick."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            now = time.monotonic()
            self.tick(now)
            if not self.watch.probing:
                return now
            assert now < deadline, "a loopback probe did not settle"
            time.sleep(0.001)  # polling a socket's outcome with a deadline

    def lose_leader(self) -> float:
        self.so.connected.discard(self.leader)  # its connection closed
        return self.settle()


def wait_outcome(probe: PortProbe) -> ProbeOutcome:
    deadline = time.monotonic() + SETTLE_S
    while probe.poll(time.monotonic()) is ProbeOutcome.PENDING:
        assert time.monotonic() < deadline, "a loopback probe did not settle"
        time.sleep(0.001)  # polling a socket's outcome with a deadline
    return probe.outcome


def test_a_closed_port_refuses_and_a_listening_one_listens(
    closed_port: int, listening_port: int
) -> None:
    refused = PortProbe("127.0.0.1", closed_port, time.monotonic(), PROBE_TIMEOUT_S)
    assert wait_outcome(refused) is ProbeOutcome.REFUSED
    listening = PortProbe("127.0.0.1", listening_port, time.monotonic(), PROBE_TIMEOUT_S)
    assert wait_outcome(listening) is ProbeOutcome.LISTENING
    assert PortProbe(None, 1, 0.0, PROBE_TIMEOUT_S).outcome is ProbeOutcome.UNKNOWN


def test_a_probe_nobody_answers_gives_up_at_its_timeout() -> None:
    """A listener whose accept queue is full drops SYNs, as a partition drops
    packets: the connect stays pending, and only the probe's timeout ends it."""
    with socket.socket() as server, socket.socket() as filler:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = int(server.getsockname()[1])
        filler.connect(("127.0.0.1", port))  # fills the queue; never accepted
        start = time.monotonic()
        probe = PortProbe("127.0.0.1", port, start, PROBE_TIMEOUT_S)
        try:
            assert probe.poll(start) is ProbeOutcome.PENDING
            assert probe.poll(start + PROBE_TIMEOUT_S) is ProbeOutcome.UNKNOWN
            assert probe._sock is None, "the socket is closed at the timeout"
        finally:
            probe.close()


def test_refused_leader_prevote_granted_brings_the_election_forward_once(
    closed_port: int,
) -> None:
    v = Voter(closed_port)
    before = v.deadline
    now = v.lose_leader()
    assert v.contact.refused_since_heard("1")
    # It asks the other voter (not the dead leader) before anything moves.
    assert [(to, m["type"], m["leader"]) for to, m in v.sent] == [("3", PREVOTE_TYPE, "1")]
    assert (v.sent[0][1]["last_log_term"], v.sent[0][1]["last_log_index"]) == (2, 7)
    assert v.deadline == before, "no early election before a majority agrees"
    v.tick(now)
    assert len(v.sent) == 1, "one pre-vote per loss"
    v.early.on_prevote_ok(v.so, v.other, {"type": PREVOTE_OK_TYPE, "leader": "1"}, now)
    deadline = v.deadline
    assert now + DELAY_MIN_S <= deadline <= now + DELAY_MAX_S < before
    assert v.early.pending(v.so)
    # absorb_own_pause (a late tick) leaves the early election alone.
    v.so._SyncObj__transferInProgress = False
    v.so._SyncObj__generateRaftTimeout = lambda: TIMEOUT_S
    absorb_own_pause(v.so, now + 0.05, 2.0, keep_deadline=v.early.pending(v.so))  # type: ignore[arg-type]
    assert v.deadline == deadline
    # The election came and failed (pysyncobj set a fresh timeout): once per loss.
    v.so._SyncObj__raftElectionDeadline = now + 1 + TIMEOUT_S
    assert not v.early.pending(v.so)
    v.early.on_prevote_ok(v.so, v.other, {"type": PREVOTE_OK_TYPE, "leader": "1"}, now + 1)
    v.tick(now + 1)
    assert v.deadline == now + 1 + TIMEOUT_S


def test_a_split_early_election_is_retried_early_up_to_its_bound(closed_port: int) -> None:
    """Both survivors stood (the first one's vote request came late) and each
    voted for itself: the candidate stands again after a short random delay,
    not after the election timeout, each time a retry splits too, up to
    `retries_max` times per loss."""
    v = Voter(closed_port)
    now = v.lose_leader()
    v.early.on_prevote_ok(v.so, v.other, {"type": PREVOTE_OK_TYPE, "leader": "1"}, now)
    assert v.early.elections_brought_forward == 1
    assert v.early.retries_max == 3
    # The early deadline fired: pysyncobj made it a candidate with a fresh timeout.
    v.so._SyncObj__raftState = CANDIDATE
    v.so._SyncObj__raftElectionDeadline = now + TIMEOUT_S
    for retry in (1, 2, 3):
        at = now + retry
        v.tick(at)
        deadline = v.deadline
        assert at + DELAY_MIN_S <= deadline <= at + DELAY_MAX_S
        assert v.early.pending(v.so) and v.early.retries_set == retry
        v.tick(at + 0.01)
        assert v.deadline == deadline, "set once, not pushed on at every tick"
        # This retry split too: pysyncobj set its own timeout as it stood again.
        v.so._SyncObj__raftElectionDeadline = at + 0.5 + TIMEOUT_S
    # The bound is reached: pysyncobj's own timeout applies from here.
    v.tick(now + 4)
    assert v.deadline == now + 3.5 + TIMEOUT_S and v.early.retries_set == 3


def test_a_candidate_without_an_early_election_keeps_its_timeout(closed_port: int) -> None:
    """A candidate at pysyncobj's own timeout (no majority lost the leader) gets no retry."""
    v = Voter(closed_port)
    v.lose_leader()  # asked, nobody granted
    v.so._SyncObj__raftState = CANDIDATE
    before = v.deadline
    v.tick(time.monotonic())
    assert v.deadline == before and v.early.retries_set == 0


def test_refused_leader_without_a_majority_keeps_the_timeout(closed_port: int) -> None:
    """The other voter still hears the leader (only this link was cut, a
    closed proxy refuses too): no answer, no early election."""
    v = Voter(closed_port)
    before = v.deadline
    v.lose_leader()
    assert v.sent and v.deadline == before
    # An answer about another leader, or one after the loss ended, is no grant.
    v.early.on_prevote_ok(v.so, v.other, {"type": PREVOTE_OK_TYPE, "leader": "9"}, 0.0)
    assert v.deadline == before
    v.so.connected.add(v.leader)  # the link came back
    v.tick(time.monotonic())
    v.early.on_prevote_ok(v.so, v.other, {"type": PREVOTE_OK_TYPE, "leader": "1"}, 0.0)
    assert v.deadline == before


def test_leader_port_that_still_listens_keeps_the_timeout(listening_port: int) -> None:
    """A connection closed while something still listens (a proxy, a stopped
    or restarted process): ambiguous, nothing asked, no early election."""
    v = Voter(listening_port)
    before = v.deadline
    v.lose_leader()
    assert not v.contact.refused_since_heard("1")
    assert v.sent == [] and v.deadline == before and not v.early.pending(v.so)


def test_a_port_that_accepts_and_then_closes_is_found_refused_by_a_retry() -> None:
    """A killed process's listening socket may outlive its connections by a
    moment: a probe that connects is tried again while the link stays down,
    and the retry's refusal counts. A port that keeps listening uses up the
    retries and records nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = int(server.getsockname()[1])
    contact = PeerContact()
    node = PeerNode("1", f"127.0.0.1:{port}")
    so = FakeSyncObj([node], node, time.monotonic())
    watch = PeerLossWatch(
        contact, probe_timeout_s=PROBE_TIMEOUT_S, retries=2, retry_interval_s=0.001
    )
    watch.tick(so, time.monotonic())  # the link up once
    so.connected.clear()  # its connection closed
    deadline = time.monotonic() + SETTLE_S
    while "1" not in watch._again:  # the first probe connected
        assert time.monotonic() < deadline, "the first probe did not settle"
        watch.tick(so, time.monotonic())
        time.sleep(0.001)  # polling a socket's outcome with a deadline
    assert not contact.refused_since_heard("1")
    server.close()  # the dying process's listener goes
    while watch.probing:
        assert time.monotonic() < deadline, "the retry did not settle"
        watch.tick(so, time.monotonic())
        time.sleep(0.001)  # polling a socket's outcome with a deadline
    assert contact.refused_since_heard("1")


def test_a_port_that_keeps_listening_uses_up_the_retries(
    listening_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []

    class CountedProbe(PortProbe):
        def __init__(self, host: str | None, port: int, now_s: float, timeout_s: float) -> None:
            started.append(port)
            super().__init__(host, port, now_s, timeout_s)

    monkeypatch.setattr("lograft.quorum.raft.peer_loss.PortProbe", CountedProbe)
    contact = PeerContact()
    node = PeerNode("1", f"127.0.0.1:{listening_port}")
    so = FakeSyncObj([node], node, time.monotonic())
    watch = PeerLossWatch(
        contact, probe_timeout_s=PROBE_TIMEOUT_S, retries=2, retry_interval_s=0.001
    )
    watch.tick(so, time.monotonic())
    so.connected.clear()
    deadline = time.monotonic() + SETTLE_S
    watch.tick(so, time.monotonic())
    while watch.probing:
        assert time.monotonic() < deadline, "the probes did not settle"
        time.sleep(0.001)  # polling a socket's outcome with a deadline
        watch.tick(so, time.monotonic())
    assert not contact.refused_since_heard("1")
    assert started == [listening_port] * 3, "the first probe and two retries"


def test_a_silent_leader_is_not_probed_and_keeps_the_timeout(closed_port: int) -> None:
    """Silence without a closed connection (a partition, a paused process):
    pysyncobj's own timeout decides, even if the port would refuse."""
    v = Voter(closed_port)
    before = v.deadline
    for _ in range(3):
        v.tick(time.monotonic())
    assert not v.watch.probing and not v.contact.refused_since_heard("1")
    assert v.sent == [] and v.deadline == before


def test_a_link_never_up_is_not_probed(closed_port: int) -> None:
    """At start no peer is connected yet, and one not started refuses: no loss."""
    contact = PeerContact()
    node = PeerNode("1", f"127.0.0.1:{closed_port}")
    so = FakeSyncObj([node], None, time.monotonic())
    so.connected = set()
    watch = PeerLossWatch(contact, probe_timeout_s=PROBE_TIMEOUT_S)
    for _ in range(3):
        watch.tick(so, time.monotonic())
    assert not watch.probing and not contact.refused_since_heard("1")


def test_a_refused_follower_is_recorded_but_elects_nobody(closed_port: int) -> None:
    v = Voter(1)
    gone = PeerNode("3", f"127.0.0.1:{closed_port}")
    v.so._SyncObj__otherNodes[1] = gone
    v.so.connected = {v.leader}
    before = v.deadline
    v.settle()
    assert v.contact.refused_since_heard("3")
    assert v.sent == [] and v.deadline == before
    v.contact.heard("3", monotonic_ms() + 1)  # it came back and spoke
    assert not v.contact.refused_since_heard("3")


def test_a_candidate_or_leader_asks_nothing(closed_port: int) -> None:
    for state in (CANDIDATE, LEADER):
        v = Voter(closed_port)
        v.so._SyncObj__raftState = state
        before = v.deadline
        v.lose_leader()
        assert v.sent == [] and v.deadline == before


def test_a_prevote_is_granted_only_without_a_leader_and_to_an_up_to_date_log() -> None:
    v = Voter(1)
    ask = {"type": PREVOTE_TYPE, "leader": "1", "last_log_term": 2, "last_log_index": 7}
    asker = v.other
    assert not v.early.grants_prevote(v.so, asker, ask), "its leader is still heard"
    v.so.connected.discard(v.leader)
    assert v.early.grants_prevote(v.so, asker, ask), "lost its leader too"
    v.early.on_prevote(v.so, asker, ask)
    assert v.sent == [("3", {"type": PREVOTE_OK_TYPE, "leader": "1"})]
    assert not v.early.grants_prevote(v.so, asker, {**ask, "last_log_index": 6}), "log behind"
    assert not v.early.grants_prevote(v.so, asker, {**ask, "last_log_term": 1}), "older term"
    assert v.early.grants_prevote(v.so, asker, {**ask, "last_log_term": 3, "last_log_index": 1})
    assert not v.early.grants_prevote(v.so, asker, {**ask, "last_log_term": "2"})
    v.so._SyncObj__raftState = LEADER
    assert not v.early.grants_prevote(v.so, asker, ask), "a leader is alive: no"


def test_a_follower_hears_its_leader_by_its_recent_appends_only() -> None:
    leader = PeerNode("1", "127.0.0.1:1")
    candidate = PeerNode("3", "127.0.0.1:2")
    so = FakeSyncObj([leader, candidate], leader, time.monotonic())
    contact = PeerContact()
    contact.heard("1")  # a keepalive: every voter sends those, leaders or not
    assert not hears_leader(so, contact, candidate, HEARD_WINDOW_MS), "no append seen yet"
    contact.appended("1")
    assert hears_leader(so, contact, candidate, HEARD_WINDOW_MS)
    assert not hears_leader(so, contact, leader, HEARD_WINDOW_MS), "the leader's own request"
    so.connected.discard(leader)
    assert not hears_leader(so, contact, candidate, HEARD_WINDOW_MS), "its link is gone"
    so.connected.add(leader)
    contact.appended("1", monotonic_ms() - HEARD_WINDOW_MS - 1)
    assert not hears_leader(so, contact, candidate, HEARD_WINDOW_MS), "not heard for a timeout"
    contact.appended("1")
    so._SyncObj__raftState = LEADER
    assert not hears_leader(so, contact, candidate, HEARD_WINDOW_MS), "a leader hears none"
