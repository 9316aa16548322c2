"""Elect soon when the leader is gone for the quorum; never while it is heard.

pysyncobj replaces a dead leader only when a follower's election timeout runs
out (`election_timeout_min_ms` .. `_max_ms`, 2-3.5 s): long on purpose, so
that a pause of this interpreter (the GIL held by the node's event loop) or a
silent link does not depose a healthy leader (docs/quorum.md, "A busy event
loop"). A leader killed by SIGKILL is not silent, though: its connections
close and its Raft port refuses (peer_loss.py). Practical Raft
implementations act on that at once; `EarlyElection.tick`, at the start of
every Raft tick on a voter, does:

- a follower whose leader's link is down and whose leader's port refused
  after its last message asks the other connected voters first, once per
  loss: a pre-vote (`PREVOTE_TYPE`; the transport swallows it like a keepalive,
  pysyncobj never sees it, no term moves). A voter answers `PREVOTE_OK_TYPE` only
  if it is no leader, does not hear a leader itself (`hears_leader`) and the
  asker's log is at least as up to date as its own, as for a real vote;
- with a majority (itself included), the election deadline is brought
  forward to a random point `early_election_delay_min_ms` .. `_max_ms` from
  now (never later than it was). The survivors of a three-voter quorum draw
  different delays, so one asks first and the other, not yet a candidate,
  votes for it;
- a candidate whose early election has not won by its first tick as a
  candidate gets another short deadline, a new random point in the same
  range, instead of pysyncobj's election timeout, and again each time that
  one comes round without a win, at most `retries_max` times per lost
  leader. Two survivors can both stand when the first one's vote request is
  late by more than the gap between their delays (a loaded machine: 2 of 25
  runs of the three-voter test with two busy loops on two cores split
  once; one CI run in a few dozen split twice): each votes for itself and
  refuses the other, a split vote that would otherwise wait a whole
  election timeout. Each retry draws a new gap, so they rarely split every
  time. After the last retry, the normal timeouts apply.

Why the pre-vote: a closed proxy in front of a live leader refuses too (a
flapping link in the chaos suite). Without it a voter cut off from its
leader alone would start an election at every cut, even one far shorter than
the election timeout (which passes unnoticed today), and its higher term
would depose the leader (pysyncobj has no pre-vote of its own). With it, an
early election needs a majority that has lost the leader, so it never
deposes a leader that a majority still hears.

No leader stickiness for real votes (Raft thesis 4.2.3: a follower that
hears its leader ignores vote requests): with pysyncobj's votes as they are,
a voter cut off from the leader alone, while the third voter hears both,
can still win an election at its timeout, and leadership moves until it
rests on a voter everybody reaches. With stickiness that voter stays
leaderless for as long as the cut lasts (its broker following no metadata),
the partial-partition trap of pre-vote plus check-quorum in etcd. The
pre-vote here gates only the early election, which is an addition: the
timeout path is pysyncobj's, unchanged.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from lograft.quorum.raft.peer_contact import PeerContact, monotonic_ms

log = logging.getLogger(__name__)

PREVOTE_TYPE = "lograft_prevote"
PREVOTE_OK_TYPE = "lograft_prevote_ok"

# pysyncobj's _RAFT_STATE values.
_FOLLOWER, _CANDIDATE, _LEADER = 0, 1, 2

Sender = Callable[[Any, Any], Any]


def hears_leader(so: Any, contact: PeerContact, sender: Any, heard_window_ms: float) -> bool:
    """True if this follower heard its connected leader's append_entries
    within `heard_window_ms`, and `sender` is another voter. Keepalives do not
    count: every voter sends them, only a leader sends append_entries."""
    if getattr(so, "_SyncObj__raftState", None) != _FOLLOWER:
        return False
    leader = so._getLeader()
    if leader is None or leader == sender or not so.isNodeConnected(leader):
        return False
    appended = contact.last_appended_ms(str(leader.id))
    return appended is not None and monotonic_ms() - appended < heard_window_ms


def _last_entry(so: Any) -> tuple[int, int]:
    """(term, index) of this node's last log entry; pysyncobj's entries are
    (command, index, term)."""
    journal = so._SyncObj__raftLog
    return int(journal[-1][2]), int(journal[-1][1])


class EarlyElection:
    """The pre-vote and the early deadline of one voter. Raft thread only."""

    def __init__(
        self,
        contact: PeerContact,
        *,
        delay_min_s: float,
        delay_max_s: float,
        heard_window_ms: float,
        retries_max: int = 3,
        rng: random.Random | None = None,
    ) -> None:
        self._contact = contact
        self._delay_min_s = delay_min_s
        self._delay_max_s = delay_max_s
        self.heard_window_ms = heard_window_ms
        self.retries_max = retries_max
        self._rng = rng or random.Random()
        self._send: Sender | None = None
        # The lost leader whose loss was put to the others, and who agreed.
        self._asked_for: str | None = None
        self._grants: set[str] = set()
        self._armed_for: str | None = None
        # The lost leader whose early election was retried, and how often.
        self._retried_for: str | None = None
        self._retries = 0
        # The deadline set here, while pysyncobj still holds it (see `pending`).
        self._early_deadline_s: float | None = None
        # Counters for tests and logs: pre-votes asked for, refused here,
        # elections brought forward, and early retries set for a candidate.
        self.prevotes_asked = 0
        self.prevotes_refused = 0
        self.elections_brought_forward = 0
        self.retries_set = 0

    def attach_sender(self, send: Sender) -> None:
        self._send = send

    def tick(self, so: Any, now_s: float) -> None:
        """Put a newly lost leader's loss to the other voters; retry a split
        early election once."""
        if getattr(so, "_SyncObj__raftState", None) == _CANDIDATE:
            self._retry(so, now_s)
            return
        leader = self._lost_leader(so)
        if leader is None:
            # The loss is over (a leader is known, or none was lost).
            self._asked_for, self._armed_for, self._retried_for = None, None, None
            return
        leader_id = str(leader.id)
        if self._asked_for == leader_id:
            return  # once per loss
        self._asked_for, self._grants = leader_id, set()
        self.prevotes_asked += 1
        term, index = _last_entry(so)
        ask = {
            "type": PREVOTE_TYPE,
            "leader": leader_id,
            "last_log_term": term,
            "last_log_index": index,
        }
        asked = 0
        for node in getattr(so, "_SyncObj__otherNodes", ()):
            if node != leader and so.isNodeConnected(node) and self._send is not None:
                self._send(node, ask)
                asked += 1
        log.info(
            "Raft leader %s is gone (its port refused): pre-vote to %d voters", leader_id, asked
        )
        self._maybe_arm(so, now_s)

    def on_prevote(self, so: Any, sender: Any, message: dict[str, Any]) -> None:
        """Answer a pre-vote if this node would vote for `sender` now."""
        if not self.grants_prevote(so, sender, message):
            self.prevotes_refused += 1
            log.info("refused a pre-vote from %s: a leader is heard or its log is old", sender.id)
        elif self._send is not None:
            self._send(sender, {"type": PREVOTE_OK_TYPE, "leader": message.get("leader")})

    def grants_prevote(self, so: Any, sender: Any, message: dict[str, Any]) -> bool:
        if getattr(so, "_SyncObj__raftState", None) == _LEADER:
            return False  # alive and leading: the asker lost only its link to it
        if hears_leader(so, self._contact, sender, self.heard_window_ms):
            return False
        term, index = message.get("last_log_term"), message.get("last_log_index")
        if not isinstance(term, int) or not isinstance(index, int):
            return False
        return (term, index) >= _last_entry(so)

    def on_prevote_ok(self, so: Any, sender: Any, message: dict[str, Any], now_s: float) -> None:
        leader = self._lost_leader(so)
        asked = self._asked_for
        if leader is None or str(leader.id) != asked or message.get("leader") != asked:
            return  # an answer about an earlier loss, or the loss is over
        self._grants.add(str(sender.id))
        self._maybe_arm(so, now_s)

    def pending(self, so: Any) -> bool:
        """An early election set here is still due: pysyncobj's deadline is
        the one set (not yet fired or replaced by a vote, a leader's message)."""
        early = self._early_deadline_s
        if early is None:
            return False
        deadline = getattr(so, "_SyncObj__raftElectionDeadline", None)
        if isinstance(deadline, float | int) and float(deadline) == early:
            return True
        self._early_deadline_s = None
        return False

    def _lost_leader(self, so: Any) -> Any:
        """This follower's leader, if its link is down and its port refused since its last word."""
        if getattr(so, "_SyncObj__raftState", None) != _FOLLOWER:
            return None
        leader = so._getLeader()
        if leader is None or so.isNodeConnected(leader):
            return None
        return leader if self._contact.refused_since_heard(str(leader.id)) else None

    def _retry(self, so: Any, now_s: float) -> None:
        """This candidate stands in an early election (armed for the current
        loss): when the deadline set here has come round without a win (the
        vote split), stand again after a short random delay rather than
        after pysyncobj's election timeout, at most `retries_max` times per loss."""
        armed = self._armed_for
        if armed is None or self.pending(so):
            return  # no early election, or the one set here is still due
        if self._retried_for != armed:
            self._retried_for, self._retries = armed, 0
        if self._retries >= self.retries_max:
            return
        self._retries += 1
        if self._bring_forward(so, now_s):
            self.retries_set += 1
            log.debug(
                "early Raft election (lost leader %s): early retry %d of %d",
                armed,
                self._retries,
                self.retries_max,
            )

    def _bring_forward(self, so: Any, now_s: float) -> bool:
        """Set the election deadline to a random point in the early range
        from now, unless it is due sooner anyway."""
        deadline = getattr(so, "_SyncObj__raftElectionDeadline", None)
        early = now_s + self._rng.uniform(self._delay_min_s, self._delay_max_s)
        if isinstance(deadline, float | int) and float(deadline) <= early:
            return False
        so._SyncObj__raftElectionDeadline = early
        self._early_deadline_s = early
        return True

    def _maybe_arm(self, so: Any, now_s: float) -> None:
        voters = len(getattr(so, "_SyncObj__otherNodes", ())) + 1
        if (len(self._grants) + 1) * 2 <= voters or self._armed_for == self._asked_for:
            return
        self._armed_for = self._asked_for
        if not self._bring_forward(so, now_s):
            return  # due sooner anyway
        self.elections_brought_forward += 1
        log.info(
            "Raft leader %s is gone for a majority: election in %d ms, not at the timeout",
            self._asked_for,
            (float(so._SyncObj__raftElectionDeadline) - now_s) * 1000,
        )
