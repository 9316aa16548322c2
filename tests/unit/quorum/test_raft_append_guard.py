"""A follower keeps the log entries that match its leader's
(lograft/quorum/raft/append_guard.py).

The first test is the evidence for the bug: a stock pysyncobj 0.3.17
follower, sent again (as after a stale `reset`) a batch of entries it already
holds, acknowledged and applied, deletes the ones after that batch and logs
"truncating already-applied log entries". The others run the same follower
with every message passing through our transport's guard."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pysyncobj import SyncObj, SyncObjConf

from lograft.quorum.raft.append_guard import journal_entry_at, keep_matching_tail
from lograft.quorum.raft.handshake import HandshakeLimits
from lograft.quorum.raft.transport import PeerNode, transport_factory

NOOP = b"\x01"  # pysyncobj's no-op command: applying it changes nothing but the index


def append(prev: int, prev_term: int, indexes: range, commit: int, term: int = 1) -> dict[str, Any]:
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": commit,
        "prevLogIdx": prev,
        "prevLogTerm": prev_term,
        "entries": [(NOOP, i, term) for i in indexes],
    }


class Follower:
    """A SyncObj that never ticks its network: messages are handed to it, and
    what it sends is recorded. `guarded` delivers through PeerTCPTransport."""

    def __init__(self, guarded: bool) -> None:
        # Addresses are never bound or dialed: the SyncObj is never ticked
        # (autoTick off); committed entries are applied by a direct call.
        self.leader = PeerNode("2", "127.0.0.1:9")
        kwargs: dict[str, Any] = {}
        if guarded:
            kwargs["transportClass"] = transport_factory(None, HandshakeLimits(5.0, 65536, 64))
        self.so = SyncObj(
            PeerNode("1", "127.0.0.1:9") if guarded else "127.0.0.1:9",
            [self.leader, PeerNode("3", "127.0.0.1:9")] if guarded else ["127.0.0.1:9"],
            conf=SyncObjConf(autoTick=False, bindAddress="127.0.0.1:9"),
            **kwargs,
        )
        self.guarded = guarded
        self.sent: list[dict[str, Any]] = []
        transport = self.so._SyncObj__transport
        transport.send = lambda _node, message: self.sent.append(message) or True

    def receive(self, message: dict[str, Any]) -> None:
        if self.guarded:
            self.so._SyncObj__transport._onMessageReceived(self.leader, message)
        else:
            self.so._SyncObj__onMessageReceived(self.leader, message)

    def apply_committed(self) -> None:
        self.so._SyncObj__applyLogEntries()  # what a tick does, without the network

    @property
    def last_index(self) -> int:
        return int(self.so._SyncObj__raftLog[-1][1])

    @property
    def last_applied(self) -> int:
        return int(self.so._SyncObj__raftLastApplied)

    def acks(self) -> list[int]:
        return [m["next_node_idx"] for m in self.sent if m.get("type") == "next_node_idx"]

    def close(self) -> None:
        self.so.destroy()


@pytest.fixture(params=[False, True], ids=["stock", "guarded"])
def follower(request: pytest.FixtureRequest) -> Any:
    f = Follower(guarded=request.param)
    yield f
    f.close()


def test_a_resent_batch_truncates_acknowledged_applied_entries_unless_guarded(
    follower: Follower, caplog: pytest.LogCaptureFixture
) -> None:
    follower.receive(append(1, 0, range(2, 11), commit=10))
    follower.apply_committed()
    assert (follower.last_index, follower.last_applied, follower.acks()) == (10, 10, [11])
    caplog.set_level(logging.CRITICAL, logger="pysyncobj")
    # The leader, its next index moved back by a stale reset, sends entries
    # 6-7 again (a batch is bounded by appendEntriesBatchSizeBytes).
    follower.receive(append(5, 1, range(6, 8), commit=10))
    truncated = "truncating already-applied" in caplog.text
    if follower.guarded:
        # Nothing lost; the answer names the follower's whole log, all of it
        # of the leader's term and so the leader's own entries.
        assert (follower.last_index, truncated, follower.acks()[-1]) == (10, False, 11)
    else:
        # Stock pysyncobj: entries 8-10, acknowledged (next index 11) and
        # applied, are gone from the log; a leader that counted this
        # acknowledgement toward their commit now has one copy fewer.
        assert (follower.last_index, truncated, follower.acks()[-1]) == (7, True, 8)
        assert follower.last_applied == 10


def test_a_conflict_still_truncates_from_the_first_conflicting_entry() -> None:
    follower = Follower(guarded=True)
    try:
        follower.receive(append(1, 0, range(2, 8), commit=4))  # 5-7 uncommitted, term 1
        # A leader of term 2 holds 2-5 of term 1, then its own entries from 6.
        message = append(1, 0, range(2, 6), commit=4, term=2)
        message["entries"] = [(NOOP, i, 1) for i in range(2, 6)] + [(NOOP, 6, 2)]
        follower.receive(message)
        log = list(follower.so._SyncObj__raftLog)
        assert [(e[1], e[2]) for e in log[-3:]] == [(4, 1), (5, 1), (6, 2)]
        assert follower.acks()[-1] == 7
    finally:
        follower.close()


def entries_of(*terms: int) -> list[tuple[bytes, int, int]]:
    """A log whose entry i+1 has term terms[i]."""
    return [(NOOP, i + 1, t) for i, t in enumerate(terms)]


def with_entries(message: dict[str, Any], *index_terms: tuple[int, int]) -> dict[str, Any]:
    return {**message, "entries": [(NOOP, i, t) for i, t in index_terms]}


@pytest.mark.parametrize(
    ("log", "message", "expected"),
    [
        # all re-sent, our tail is the leader's term: a heartbeat at our end
        (entries_of(0, 1, 1, 1, 1), append(2, 1, range(3, 4), 5), (5, [])),
        # the re-sent prefix dropped, the new entries kept
        (entries_of(0, 1, 1), append(1, 0, range(2, 6), 5), (3, [4, 5])),
        # all re-sent, then a tail of an earlier term than the leader's: it
        # may conflict, so pysyncobj truncates it after the batch
        (
            entries_of(0, 1, 1, 1),
            with_entries(append(2, 1, range(0), 3, term=2), (3, 1)),
            (3, []),
        ),
        # nothing re-sent: unchanged
        (entries_of(0, 1), append(2, 1, range(3, 5), 3), None),
        # a stale term: unchanged (pysyncobj ignores it)
        (entries_of(0, 2, 2, 2), append(1, 0, range(2, 3), 3, term=1), None),
        # prevLogTerm does not match: unchanged (pysyncobj resets)
        (entries_of(0, 1, 1), append(2, 2, range(3, 4), 3, term=2), None),
    ],
)
def test_keep_matching_tail(
    log: list[tuple[bytes, int, int]],
    message: dict[str, Any],
    expected: tuple[int, list[int]] | None,
) -> None:
    current_term = max(e[2] for e in log)
    out = keep_matching_tail(message, journal_entry_at(log), log[-1][1], current_term)
    if expected is None:
        assert out is message
    else:
        assert (out["prevLogIdx"], [e[1] for e in out["entries"]]) == expected
