"""One consumer-group member, sans-IO: what to send next and what an answer means.

KIP-848's member side over the HTTP contract of docs/api.md ("Consumer
groups"), as a state machine with no sockets, no asyncio and no clock of its
own. Two drivers do the I/O and keep the time around it: the Python client's
`lograft/client/membership.py` (a background heartbeat loop, rebalance events
for `poll`) and the SSE group stream's `lograft/api/stream/group.py` (one
member per stream). Both follow the same rules because the rules are here:

- `next_request()` is the join (epoch 0, with the subscription; a rejoin
  keeps the member id) or the heartbeat (the epoch and the partitions held,
  the subscription only when it changed). Every request, the leave included,
  carries a `sequence` above all earlier ones, so the coordinator refuses a
  delayed duplicate (OUT_OF_ORDER_HEARTBEAT) instead of acting on it.
- `on_answer()` takes the answer: the member's id, epoch, heartbeat interval
  and session, and `reconcile` of its `assignment`: partitions newly
  assigned are held (listed as owned) at once; partitions no longer assigned
  start being given up (`revoking`) but stay listed as owned until the
  driver has committed them and says so (`revoked`). That acknowledgement is
  what lets the coordinator hand them to another member, so no partition has
  two owners.
- `on_error()` says what a refused request means: FENCED_MEMBER_EPOCH and
  UNKNOWN_MEMBER_ID lose every partition (`lose`), OUT_OF_ORDER_HEARTBEAT is
  a delayed duplicate to skip, other retriable errors are retried, the rest
  are the driver's to report.
- `lose()`: the coordinator may already have handed the partitions on, so
  they are dropped at once (nothing is committed: the commit would be
  refused), the generation ends, and the member joins again at epoch 0 with
  its id, but only once the driver no longer holds any of them (`dropped`):
  a joining member owns nothing.
- `leave()` is the leave request; the member then holds nothing.

A generation ends at each loss and leave; an answer to a request sent in an
earlier generation, and a revocation begun in one, change nothing.

Invariants, asserted: `revoking <= owned`; `dropping` and `owned` are
disjoint; a join is made only while `dropping` is empty.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lograft.errors import LograftError, OutOfOrderHeartbeatError
from lograft.protocol.group_wire import (
    JOIN_EPOCH,
    NO_PARTITIONS,
    REJOIN_ERRORS,
    HeartbeatAnswer,
    Partitions,
    group_path,
    member_path,
    partitions_json,
)

# Until the first answer tells the coordinator's interval, ms.
INITIAL_HEARTBEAT_INTERVAL_MS = 1_000


class ErrorAction(enum.Enum):
    REJOIN = "rejoin"  # fenced or unknown: every partition was lost (`lose` done)
    SKIP = "skip"  # a delayed duplicate was refused; the next heartbeat carries on
    RETRY = "retry"  # retriable (the coordinator moves or loads): try again
    FATAL = "fatal"  # not retriable: the driver reports it


class RequestKind(enum.Enum):
    JOIN = "join"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"


@dataclass(frozen=True, slots=True)
class MemberRequest:
    """One request to the coordinator: `path` is below its base URL."""

    kind: RequestKind
    method: str
    path: str
    body: dict[str, Any] | None
    params: dict[str, str] | None
    generation: int  # the member's generation when it was made


@dataclass(frozen=True, slots=True)
class Reconciliation:
    added: Partitions  # newly assigned: the member holds them from now on
    revoked: Partitions  # to give up (not already being given up)

    def __bool__(self) -> bool:
        return bool(self.added or self.revoked)


def reconcile(owned: Partitions, revoking: Partitions, assignment: Partitions) -> Reconciliation:
    """What to do with an answer's `assignment` while holding `owned`, of which
    `revoking` are already being given up.

    A partition being given up stays so even if the answer lists it again: its
    revocation (commit, callbacks) may be running. Once it is released the
    coordinator hands it back in a later answer, as a new partition.
    """
    assert revoking <= owned, "only held partitions can be given up"
    return Reconciliation(
        added=assignment - owned,
        revoked=owned - assignment - revoking,
    )


def session_deadline(
    sent_at_s: float, server_session_ms: int, client_session_ms: int | None
) -> float:
    """When a member that sent its last answered heartbeat at `sent_at_s` must
    consider itself removed. The coordinator renewed the session no earlier
    than that send, so its own deadline is no earlier than this one; the
    client's setting can only shorten it (a longer one would let the member
    consume partitions the coordinator already handed on)."""
    session_ms = server_session_ms
    if client_session_ms is not None:
        session_ms = min(session_ms, client_session_ms)
    return sent_at_s + session_ms / 1000


class GroupMemberCore:
    """A member's state and decisions; its driver sends what it asks and
    reports what came back. Not thread-safe; no I/O."""

    def __init__(
        self,
        group_id: str,
        topics: Iterable[str],
        *,
        member_id: str = "",
        client_id: str = "",
        assignor: str | None = None,
        rebalance_timeout_ms: int | None = None,
        session_timeout_ms: int | None = None,
    ) -> None:
        self.group_id = group_id
        self.topics = frozenset(topics)
        # "": the coordinator chooses one at the first join (a driver that
        # chooses its own, KIP-1082, is the same member when a join is retried).
        self.member_id = member_id
        self.client_id = client_id
        self.assignor = assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        # The client's own session bound, ms (None: the coordinator's alone).
        self.client_session_timeout_ms = session_timeout_ms
        self.member_epoch = JOIN_EPOCH
        self.sequence = 0
        self.heartbeat_interval_ms = INITIAL_HEARTBEAT_INTERVAL_MS
        self.session_timeout_ms: int | None = None  # the coordinator's, once known
        # When the member must consider itself removed (driver's clock), once known.
        self.session_deadline: float | None = None
        self.owned: Partitions = NO_PARTITIONS  # listed in heartbeats
        self.revoking: Partitions = NO_PARTITIONS  # being given up; still owned
        self.dropping: Partitions = NO_PARTITIONS  # lost, still held by the driver
        self.generation = 0
        self.heartbeats = 0  # answered joins and heartbeats
        self._subscription_changed = False

    # -- what the member is -------------------------------------------------------------

    @property
    def joined(self) -> bool:
        return self.member_epoch != JOIN_EPOCH

    @property
    def consuming(self) -> Partitions:
        """The partitions to consume now: held and not being given up."""
        return self.owned - self.revoking

    def _check(self) -> None:
        assert self.revoking <= self.owned, "only held partitions can be given up"
        assert not (self.dropping & self.owned), "a lost partition is not owned"

    # -- requests -----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Change the subscription (the next join or heartbeat carries it);
        whether it changed."""
        wanted = frozenset(topics)
        if wanted == self.topics:
            return False
        self.topics = wanted
        self._subscription_changed = True
        return True

    def next_request(self) -> MemberRequest | None:
        """The join or heartbeat to send now; None while a lost member still
        holds partitions (it must drop them before joining again)."""
        if self.member_epoch == JOIN_EPOCH:
            return self._join()
        body: dict[str, Any] = {
            "member_epoch": self.member_epoch,
            "owned_partitions": partitions_json(self.owned),
        }
        if self._subscription_changed:
            body["subscribed_topics"] = sorted(self.topics)
            self._subscription_changed = False
        body["sequence"] = self._next_sequence()
        path = member_path(self.group_id, self.member_id, "/heartbeat")
        return MemberRequest(RequestKind.HEARTBEAT, "POST", path, body, None, self.generation)

    def _join(self) -> MemberRequest | None:
        if self.dropping:
            return None
        body: dict[str, Any] = {"subscribed_topics": sorted(self.topics)}
        if self.member_id:
            body["member_id"] = self.member_id  # rejoining after a fence keeps its id
        if self.client_id:
            body["client_id"] = self.client_id
        if self.assignor is not None:
            body["assignor"] = self.assignor
        if self.rebalance_timeout_ms is not None:
            body["rebalance_timeout_ms"] = self.rebalance_timeout_ms
        body["sequence"] = self._next_sequence()
        self._subscription_changed = False
        path = group_path(self.group_id, "/members")
        return MemberRequest(RequestKind.JOIN, "POST", path, body, None, self.generation)

    def leave(self) -> MemberRequest | None:
        """Leave the group: every partition is released at once (the driver
        stops using them), the generation ends, and this is the request to
        send (None when the member never had an id). The leave is idempotent
        on the coordinator, so it is made also when a join's answer was lost."""
        # A member that lost everything already has no generation left to end.
        was_member = self.joined or bool(self.owned)
        self.dropping |= self.owned
        self._reset(new_generation=was_member)
        if not self.member_id:
            return None
        params = {"sequence": str(self._next_sequence())}
        path = member_path(self.group_id, self.member_id)
        return MemberRequest(RequestKind.LEAVE, "DELETE", path, None, params, self.generation)

    def _next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    # -- answers ------------------------------------------------------------------------

    def on_answer(
        self, request: MemberRequest, answer: HeartbeatAnswer, sent_at: float | None = None
    ) -> Reconciliation | None:
        """Apply the answer to `request` (sent at `sent_at` on the driver's
        clock, to time the session): the partitions to take and to give up, or
        None when the request belongs to an ended generation and changes nothing."""
        if request.generation != self.generation:
            return None
        self.heartbeats += 1
        self.member_id = answer.member_id
        self.member_epoch = answer.member_epoch
        self.heartbeat_interval_ms = answer.heartbeat_interval_ms
        self.session_timeout_ms = answer.session_timeout_ms
        if sent_at is not None:
            self.session_deadline = session_deadline(
                sent_at, answer.session_timeout_ms, self.client_session_timeout_ms
            )
        plan = reconcile(self.owned, self.revoking, answer.assignment)
        self.revoking |= plan.revoked
        self.owned |= plan.added
        self._check()
        return plan

    def on_error(self, exc: LograftError) -> ErrorAction:
        """What a refused join, heartbeat or commit means; for REJOIN every
        partition is lost already (see `lose`)."""
        if isinstance(exc, REJOIN_ERRORS):
            self.lose()
            return ErrorAction.REJOIN
        if isinstance(exc, OutOfOrderHeartbeatError):
            return ErrorAction.SKIP
        return ErrorAction.RETRY if exc.retriable else ErrorAction.FATAL

    # -- partitions ---------------------------------------------------------------------

    def revoked(self, partitions: Partitions, generation: int) -> None:
        """The driver gave `partitions` up (committed, callbacks run): stop
        listing them. A revocation begun in an ended generation only counts
        as dropped: the partitions were lost meanwhile."""
        if generation == self.generation:
            self.owned -= partitions
            self.revoking -= partitions
        self.dropping -= partitions
        self._check()

    def lose(self) -> Partitions:
        """Every partition is gone (fenced, unknown, the session expired, or
        the application stopped polling): the generation ends and the member
        joins again at epoch 0 with its id, once the driver says it has
        `dropped` them. Returns them."""
        lost = self.owned
        self.dropping |= lost
        self._reset()
        return lost

    def dropped(self, partitions: Partitions | None = None) -> None:
        """The driver no longer holds these lost partitions (None: any)."""
        self.dropping = NO_PARTITIONS if partitions is None else self.dropping - partitions

    def _reset(self, new_generation: bool = True) -> None:
        if new_generation:
            self.generation += 1
        self.member_epoch = JOIN_EPOCH
        self.owned = self.revoking = NO_PARTITIONS
        self.session_deadline = None
        self._check()


__all__ = [
    "INITIAL_HEARTBEAT_INTERVAL_MS",
    "ErrorAction",
    "GroupMemberCore",
    "MemberRequest",
    "Reconciliation",
    "RequestKind",
    "reconcile",
    "session_deadline",
]
