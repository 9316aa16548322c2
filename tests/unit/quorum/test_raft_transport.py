"""Node identity separate from dial addresses: the transport's handshake and
dial direction, then a real in-process cluster whose every link runs through
its own per-pair TCP forwarder (a stand-in for a toxiproxy proxy)."""

from __future__ import annotations

import asyncio
import time
from itertools import permutations
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pysyncobj.poller import createPoller
from pysyncobj.transport import TCPTransport

from lograft.errors import NotControllerError
from lograft.quorum.raft.early_election import PREVOTE_OK_TYPE, PREVOTE_TYPE, EarlyElection
from lograft.quorum.raft.handshake import HandshakeLimits
from lograft.quorum.raft.peer_contact import PeerContact
from lograft.quorum.raft.status import RaftStatus
from lograft.quorum.raft.transport import KEEPALIVE, ObserverNode, PeerNode, PeerTCPTransport
from tests.raft_support import FAST_TIMINGS, eventually_async, free_port
from tests.unit.quorum.raft_inproc import InProcessCluster
from tests.unit.quorum.tcp_forwarder import TcpForwarder

pytestmark = pytest.mark.timeout(120)

HANDSHAKE = HandshakeLimits(timeout_s=1.0, max_bytes=1024, max_connections=4)


class FakeSyncObj:
    """Just enough of SyncObj for TCPTransport's constructor; never ticked."""

    def __init__(self) -> None:
        self.conf = SimpleNamespace(
            bindAddress="127.0.0.1:1",
            sendBufferSize=4096,
            recvBufferSize=4096,
            connectionTimeout=1.0,
            connectionRetryTime=1.0,
            tcp_keepalive=None,
            bindRetryTime=1.0,
            maxBindRetries=1,
        )
        self._poller = createPoller("auto")
        self.encryptor = None

    def addOnTickCallback(self, callback: Any) -> None:
        pass


class FakeConn:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.disconnected = False
        self.sendRandKey = None
        self.on_message: Any = None

    def send(self, message: Any) -> None:
        self.sent.append(message)

    def disconnect(self) -> None:
        self.disconnected = True

    def setOnMessageReceivedCallback(self, callback: Any) -> None:
        self.on_message = callback

    def setOnDisconnectedCallback(self, callback: Any) -> None:
        pass


def make_transport(self_id: str | None, others: list[str]) -> PeerTCPTransport:
    self_node = None if self_id is None else PeerNode(self_id, "127.0.0.1:1")
    nodes = [PeerNode(o, f"127.0.0.1:{1000 + i}") for i, o in enumerate(others)]
    observer_id = "obs" if self_id is None else None
    return PeerTCPTransport(
        FakeSyncObj(), self_node, nodes, observer_id=observer_id, handshake=HANDSHAKE
    )


def test_peer_identity_is_the_id_not_the_address() -> None:
    a = PeerNode("2", "127.0.0.1:7001")
    b = PeerNode("2", "10.0.0.9:9999")
    assert a == b and hash(a) == hash(b)
    assert a != PeerNode("3", "127.0.0.1:7001")
    assert (a.host, a.port, a.address) == ("127.0.0.1", 7001, "127.0.0.1:7001")
    assert str(a) == "2"


def test_only_the_greater_id_dials_and_observers_dial_everyone() -> None:
    transport = make_transport("b", ["a", "c"])
    try:
        dialed = {n.id for n in transport._connections}
        assert dialed == {"a"}, "b dials a (b > a) and waits for c to dial it"
    finally:
        transport.destroy()
    observer = make_transport(None, ["a", "b", "c"])
    try:
        assert {n.id for n in observer._connections} == {"a", "b", "c"}
    finally:
        observer.destroy()


def test_handshake_announces_ids() -> None:
    voter = make_transport("b", ["a"])
    observer = make_transport(None, ["a"])
    try:
        conn = FakeConn()
        voter._sendSelfAddress(conn)
        observer._sendSelfAddress(conn)
        assert conn.sent == ["b", "observer:obs"]
    finally:
        voter.destroy()
        observer.destroy()


def test_acceptor_maps_ids_and_names_observers_without_collisions() -> None:
    # Numeric voter ids: stock pysyncobj would name read-only peers "0", "1", ...
    transport = make_transport("1", ["0", "2"])
    connected: list[Any] = []
    transport.setOnNodeConnectedCallback(connected.append)
    transport.setOnReadonlyNodeConnectedCallback(connected.append)
    try:
        from_voter, from_observer, from_stock, from_stranger = (FakeConn() for _ in range(4))
        for conn in (from_voter, from_observer, from_stock, from_stranger):
            # Stock registration: the handshake bounds need a real socket
            # (tests/unit/quorum/test_raft_handshake.py).
            TCPTransport._onNewIncomingConnection(transport, conn)
        transport._onIncomingMessageReceived(from_voter, "2")
        transport._onIncomingMessageReceived(from_observer, "observer:broker-7")
        transport._onIncomingMessageReceived(from_stock, "readonly")
        transport._onIncomingMessageReceived(from_stranger, "127.0.0.1:1000")
        voter, observer, stock = connected
        assert isinstance(voter, PeerNode) and voter.id == "2"
        assert isinstance(observer, ObserverNode) and observer.observer_id == "broker-7"
        assert isinstance(stock, ObserverNode) and stock.observer_id == "anonymous"
        assert observer.id != stock.id and ":" in observer.id
        assert all(n.id not in {"0", "1", "2"} for n in (observer, stock))
        assert from_stranger.disconnected, "an address is not an identity"
        assert not from_voter.disconnected
    finally:
        transport.destroy()


def connected_voters(status: RaftStatus) -> set[str]:
    return {v.node_id for v in status.voters if v.connected and not v.is_self}


async def test_every_link_goes_through_its_own_forwarder(tmp_path: Path) -> None:
    ids = ["1", "2", "3"]
    cluster = InProcessCluster(tmp_path, ids)
    forwarders = {
        # Listen ports from the run's allocator, as the members' are: a port
        # the kernel picked here could be one a member has not bound yet.
        (a, b): TcpForwarder(target_port=cluster.ports[b], listen_port=free_port())
        for a, b in permutations(ids, 2)
    }
    try:
        for fwd in forwarders.values():
            await fwd.start()
        cluster.dial = {pair: fwd.address for pair, fwd in forwarders.items()}
        await cluster.start()
        leader = await cluster.leader()
        offset = await leader.adapter.append(b"through the proxies")
        for m in cluster.members.values():
            await m.adapter.wait_for_offset(offset, 10_000)
            assert m.sm.batches == [b"through the proxies"]

        # The dialer of each pair is the greater id, through its own address.
        for (a, b), fwd in forwarders.items():
            if a > b:
                assert fwd.connections_accepted >= 1, f"{a}->{b} unused"
                assert fwd.bytes_to_target > 0, f"{a} sent nothing to {b}"
                if leader.node_id in (a, b):  # heartbeats and acks flow both ways
                    assert fwd.bytes_from_target > 0, f"{b} answered nothing to {a}"
            else:
                assert fwd.connections_accepted == 0, f"{a}->{b} should not dial"

        # Cut the 2<->1 link: exactly that pair loses each other.
        await forwarders[("2", "1")].cut()

        async def pair_isolated() -> bool:
            s1, s2, s3 = [await cluster.members[i].adapter.status() for i in ids]
            return (
                connected_voters(s1) == {"3"}
                and connected_voters(s2) == {"3"}
                and connected_voters(s3) == {"1", "2"}
            )

        await eventually_async(pair_isolated, 10, "nodes 1 and 2 to lose only each other")
        leader = await cluster.leader(timeout_s=15)
        offset = await leader.adapter.append(b"with one link cut")
        for m in cluster.members.values():
            await m.adapter.wait_for_offset(offset, 10_000)

        await forwarders[("2", "1")].heal()

        async def all_connected() -> bool:
            statuses = [await m.adapter.status() for m in cluster.members.values()]
            return all(len(connected_voters(s)) == 2 for s in statuses)

        await eventually_async(all_connected, 15, "the 2->1 link to reconnect")
    finally:
        await cluster.stop()
        for fwd in forwarders.values():
            await fwd.close()


async def test_observer_follows_with_numeric_voter_ids(tmp_path: Path) -> None:
    async with InProcessCluster(tmp_path, ["0", "1", "2"]) as cluster:
        await cluster.start()
        observer = await cluster.start_observer("7")
        leader = await cluster.leader()
        offsets = [await leader.adapter.append(b"o%d" % i) for i in range(5)]
        await observer.adapter.wait_for_offset(offsets[-1], 10_000)
        assert observer.sm.items == leader.sm.items

        with pytest.raises(NotControllerError) as info:
            await observer.adapter.append(b"observers never lead")
        assert info.value.details["leader_id"] == leader.node_id

        status = await leader.adapter.status()
        assert status.observers == ("7",)
        assert [v.node_id for v in status.voters] == ["0", "1", "2"]
        obs_status = await observer.adapter.status()
        assert obs_status.role.value == "observer"
        assert obs_status.leader_id == leader.node_id
        assert connected_voters(obs_status) == {"0", "1", "2"}


async def test_password_protects_links(tmp_path: Path) -> None:
    async with InProcessCluster(tmp_path, ["a", "b", "c"], password="s3cret") as cluster:
        await cluster.start()
        good = await cluster.start_observer("good")
        bad = await cluster.start_observer("bad", password="wrong")
        leader = await cluster.leader()
        offset = await leader.adapter.append(b"secret batch")
        await good.adapter.wait_for_offset(offset, 10_000)
        assert good.sm.batches == [b"secret batch"]
        # The good observer has caught up, so the wrong one had every chance.
        status = await bad.adapter.status()
        assert status.leader_id is None and bad.sm.items == []
        assert connected_voters(status) == set()
        assert (await leader.adapter.status()).observers == ("good",)


def test_every_message_of_a_voter_is_recorded_as_contact() -> None:
    contact = PeerContact()
    transport = PeerTCPTransport(
        FakeSyncObj(),
        PeerNode("b", "127.0.0.1:1"),
        [PeerNode("a", "127.0.0.1:1000")],
        handshake=HANDSHAKE,
        contact=contact,
    )
    transport.setOnMessageReceivedCallback(lambda node, message: None)
    try:
        assert contact.last_heard_ms("a") is None
        before = time.monotonic_ns() // 1_000_000
        transport._onMessageReceived(PeerNode("a", "127.0.0.1:1000"), {"type": "x"})
        heard = contact.last_heard_ms("a")
        assert heard is not None and before <= heard <= time.monotonic_ns() // 1_000_000
        transport._onMessageReceived(ObserverNode("observer:o#0", "o"), {"type": "x"})
        assert contact.last_heard_ms("observer:o#0") is None, "only voters count"
    finally:
        transport.destroy()


async def test_the_link_between_two_followers_survives_idling_past_the_timeout(
    tmp_path: Path,
) -> None:
    """Followers send each other nothing while a leader lives; without the
    keepalives pysyncobj closed their link at its next message (a candidate's
    request_vote, lost, so every election after a leader's death split)."""
    async with InProcessCluster(tmp_path, ["1", "2", "3"]) as cluster:
        await cluster.start()
        leader = await cluster.leader()
        a, b = cluster.followers(leader)
        idle_s = FAST_TIMINGS["connection_timeout_ms"] / 1000 * 1.5
        await asyncio.sleep(idle_s)  # the idling under test, longer than the timeout

        def send_to_b(so: Any) -> bool:
            transport = so._SyncObj__transport
            node = next(n for n in transport._connections if n.id == b.node_id)
            return bool(transport.send(node, {"type": "lograft_test_probe"}))

        sent = await asyncio.wrap_future(a.adapter._core.call(send_to_b))
        assert sent, "the follower-to-follower link was closed as idle"


def test_keepalives_go_to_connected_voters_and_are_swallowed() -> None:
    transport = make_transport("b", ["a"])
    delivered: list[Any] = []
    transport.setOnMessageReceivedCallback(lambda node, message: delivered.append(message))
    try:
        node = PeerNode("a", "127.0.0.1:1000")
        transport._onMessageReceived(node, KEEPALIVE)
        assert delivered == [], "a keepalive is not a Raft message"
        transport._onMessageReceived(node, {"type": "x"})
        assert delivered == [{"type": "x"}]
    finally:
        transport.destroy()


def test_prevotes_are_answered_by_the_transport_and_votes_left_to_pysyncobj() -> None:
    """The pre-vote lives in the transport: pysyncobj never sees one; a real
    request_vote always reaches pysyncobj, leader heard or not."""
    contact = PeerContact()
    early = EarlyElection(contact, delay_min_s=0.05, delay_max_s=0.3, heard_window_ms=2000)
    leader, candidate = PeerNode("1", "127.0.0.1:1000"), PeerNode("3", "127.0.0.1:1001")
    so = FakeSyncObj()
    transport = PeerTCPTransport(
        so,
        PeerNode("2", "127.0.0.1:1"),
        [leader, candidate],
        handshake=HANDSHAKE,
        contact=contact,
        early=early,
    )
    delivered: list[Any] = []
    transport.setOnMessageReceivedCallback(lambda node, message: delivered.append(message))
    sent: list[tuple[str, Any]] = []
    early.attach_sender(lambda node, message: sent.append((node.id, message)))
    connected = {leader, candidate}
    so._SyncObj__raftState = 0  # a follower
    so._SyncObj__raftLog = [(b"", 5, 2)]
    so._getLeader = lambda: leader
    so.isNodeConnected = lambda node: node in connected
    vote = {"type": "request_vote", "term": 3, "last_log_index": 5, "last_log_term": 2}
    prevote = {"type": PREVOTE_TYPE, "leader": "1", "last_log_index": 5, "last_log_term": 2}
    try:
        transport._onMessageReceived(leader, {"type": "append_entries", "term": 2})
        assert contact.last_appended_ms("1") is not None
        delivered.clear()
        transport._onMessageReceived(candidate, prevote)
        transport._onMessageReceived(candidate, vote)
        assert delivered == [vote], "the vote is pysyncobj's, the pre-vote is not"
        assert sent == [] and early.prevotes_refused == 1, "the leader is heard: refused"
        connected.discard(leader)  # its link closed
        transport._onMessageReceived(candidate, prevote)
        assert sent == [("3", {"type": PREVOTE_OK_TYPE, "leader": "1"})]
        assert delivered == [vote]
    finally:
        transport.destroy()
