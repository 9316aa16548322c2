"""The group member core on its own (sans-IO: no sockets, no loop, no clock):
table-driven transitions of join, assignment, revocation, fencing, unknown
member and leave, plus the pure decisions and wire shapes both drivers use
(the client's membership and the SSE group stream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from lograft.errors import (
    CoordinatorLoadInProgressError,
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    LograftError,
    OutOfOrderHeartbeatError,
    UnknownMemberIdError,
)
from lograft.protocol.group_member import (
    ErrorAction,
    GroupMemberCore,
    MemberRequest,
    RequestKind,
    reconcile,
    session_deadline,
)
from lograft.protocol.group_wire import (
    HeartbeatAnswer,
    commit_body,
    member_path,
    parse_heartbeat,
    partitions_json,
)
from lograft.protocol.topic_partition import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


class BadAnswer(LograftError):
    code = "TEST_BAD_ANSWER"


# -- the steps a scenario is made of ---------------------------------------------------------


@dataclass(frozen=True)
class Send:
    """next_request(): its kind (None: none may be sent now) and body fields."""

    kind: RequestKind | None
    body: dict[str, Any] = field(default_factory=dict)
    absent: tuple[str, ...] = ()  # body keys that must not be there


@dataclass(frozen=True)
class Answer:
    """The coordinator's answer to the last request sent."""

    epoch: int
    assignment: frozenset[TopicPartition]
    added: frozenset[TopicPartition] = frozenset()
    revoked: frozenset[TopicPartition] = frozenset()
    stale: bool = False  # to a request of an ended generation: changes nothing


@dataclass(frozen=True)
class Fail:
    """The last request was refused with `error`."""

    error: LograftError
    action: ErrorAction


@dataclass(frozen=True)
class Revoked:
    """The driver finished giving these up (in the generation of the last request)."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class Dropped:
    """The driver no longer holds these lost partitions."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class Leave:
    sent: bool = True


@dataclass(frozen=True)
class State:
    epoch: int
    owned: frozenset[TopicPartition] = frozenset()
    revoking: frozenset[TopicPartition] = frozenset()
    dropping: frozenset[TopicPartition] = frozenset()


Step = Send | Answer | Fail | Revoked | Dropped | Leave | State

JOIN = RequestKind.JOIN
HEARTBEAT = RequestKind.HEARTBEAT
BOTH = frozenset({T0, T1})

SCENARIOS: dict[str, list[Step]] = {
    "join, then heartbeats listing what is held": [
        Send(JOIN, {"subscribed_topics": ["t"], "client_id": "c", "sequence": 1}, ("member_id",)),
        Answer(1, BOTH, added=BOTH),
        State(1, owned=BOTH),
        Send(HEARTBEAT, {"member_epoch": 1, "owned_partitions": {"t": [0, 1]}, "sequence": 2}),
        Answer(1, BOTH),
        Send(HEARTBEAT, {"sequence": 3}, ("subscribed_topics",)),
    ],
    "an assignment grows: only the new partition is added": [
        Send(JOIN),
        Answer(1, frozenset({T0}), added=frozenset({T0})),
        Send(HEARTBEAT),
        Answer(2, BOTH, added=frozenset({T1})),
        State(2, owned=BOTH),
    ],
    "revoke, then assign: listed until given up, then handed back as new": [
        Send(JOIN),
        Answer(1, BOTH, added=BOTH),
        Send(HEARTBEAT),
        Answer(1, frozenset({T0}), revoked=frozenset({T1})),
        State(1, owned=BOTH, revoking=frozenset({T1})),
        # Still listed: the coordinator must not hand t-1 on before the commit.
        Send(HEARTBEAT, {"owned_partitions": {"t": [0, 1]}}),
        # Listed again while being given up: not revoked twice, not re-added.
        Answer(1, BOTH),
        State(1, owned=BOTH, revoking=frozenset({T1})),
        Revoked(frozenset({T1})),
        State(1, owned=frozenset({T0})),
        Send(HEARTBEAT, {"owned_partitions": {"t": [0]}}),
        Answer(2, BOTH, added=frozenset({T1})),
        State(2, owned=BOTH),
    ],
    "fenced epoch: everything lost, rejoin with the same id once dropped": [
        Send(JOIN),
        Answer(3, BOTH, added=BOTH),
        Send(HEARTBEAT),
        Fail(FencedMemberEpochError("fenced"), ErrorAction.REJOIN),
        State(0, dropping=BOTH),
        Send(None),  # a joining member owns nothing: the driver drops them first
        Dropped(frozenset({T0})),
        Send(None),
        Dropped(frozenset({T1})),
        Send(JOIN, {"member_id": "m1", "subscribed_topics": ["t"]}, ("owned_partitions",)),
        Answer(5, BOTH, added=BOTH),
        State(5, owned=BOTH),
    ],
    "unknown member: the same as fenced": [
        Send(JOIN),
        Answer(1, frozenset({T0}), added=frozenset({T0})),
        Send(HEARTBEAT),
        Fail(UnknownMemberIdError("gone"), ErrorAction.REJOIN),
        State(0, dropping=frozenset({T0})),
        Dropped(frozenset({T0})),
        Send(JOIN, {"member_id": "m1"}),
    ],
    "an answer to a request sent before a loss changes nothing": [
        Send(JOIN),
        Answer(1, BOTH, added=BOTH),
        Send(HEARTBEAT),
        Fail(FencedMemberEpochError("fenced"), ErrorAction.REJOIN),
        Answer(1, BOTH, stale=True),
        State(0, dropping=BOTH),
    ],
    "a revocation finished after a loss only counts as dropped": [
        Send(JOIN),
        Answer(1, BOTH, added=BOTH),
        Send(HEARTBEAT),
        Answer(1, frozenset({T0}), revoked=frozenset({T1})),
        Send(HEARTBEAT),
        Fail(UnknownMemberIdError("gone"), ErrorAction.REJOIN),
        Revoked(frozenset({T1})),
        State(0, dropping=frozenset({T0})),
    ],
    "refusals that are not fencing keep the state": [
        Send(JOIN),
        Answer(1, frozenset({T0}), added=frozenset({T0})),
        Send(HEARTBEAT),
        Fail(OutOfOrderHeartbeatError("duplicate"), ErrorAction.SKIP),
        Send(HEARTBEAT),
        Fail(CoordinatorLoadInProgressError("loading"), ErrorAction.RETRY),
        Send(HEARTBEAT),
        Fail(GroupMaxSizeReachedError("full"), ErrorAction.FATAL),
        State(1, owned=frozenset({T0})),
    ],
    "leave: everything released, the leave carries the next sequence": [
        Send(JOIN, {"sequence": 1}),
        Answer(1, BOTH, added=BOTH),
        Leave(),
        State(0, dropping=BOTH),
    ],
    "leave before any answer: nothing to send without a member id": [
        Leave(sent=False),
        State(0),
    ],
}


def run(core: GroupMemberCore, steps: list[Step]) -> None:
    last: MemberRequest | None = None
    sequence = 0
    for i, step in enumerate(steps):
        where = f"step {i}: {step}"
        if isinstance(step, Send):
            request = core.next_request()
            if step.kind is None:
                assert request is None, where
                continue
            assert request is not None and request.kind is step.kind, where
            assert request.body is not None
            for key, value in step.body.items():
                assert request.body[key] == value, (where, key, request.body)
            for key in step.absent:
                assert key not in request.body, (where, key)
            assert request.body["sequence"] > sequence, where  # strictly increasing
            sequence = request.body["sequence"]
            last = request
        elif isinstance(step, Answer):
            assert last is not None, where
            answer = HeartbeatAnswer("m1", step.epoch, 50, 3_000, step.assignment)
            plan = core.on_answer(last, answer, sent_at=10.0)
            if step.stale:
                assert plan is None, where
                continue
            assert plan is not None, where
            assert (plan.added, plan.revoked) == (step.added, step.revoked), where
            assert core.member_id == "m1" and core.heartbeat_interval_ms == 50
            assert core.session_deadline == 13.0
        elif isinstance(step, Fail):
            assert core.on_error(step.error) is step.action, where
        elif isinstance(step, Revoked):
            assert last is not None, where
            core.revoked(step.partitions, last.generation)
        elif isinstance(step, Dropped):
            core.dropped(step.partitions)
        elif isinstance(step, Leave):
            leave = core.leave()
            if not step.sent:
                assert leave is None, where
                continue
            assert leave is not None and leave.kind is RequestKind.LEAVE, where
            assert (leave.method, leave.path) == ("DELETE", "/v1/groups/g/members/m1")
            assert leave.params == {"sequence": str(sequence + 1)}
            sequence += 1
        else:
            assert (core.member_epoch, core.owned, core.revoking, core.dropping) == (
                step.epoch,
                step.owned,
                step.revoking,
                step.dropping,
            ), where


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_transitions(name):
    run(GroupMemberCore("g", ["t"], client_id="c"), SCENARIOS[name])


def test_a_member_that_chose_its_id_joins_and_leaves_with_it():
    core = GroupMemberCore("g", ["t"], member_id="mine")
    join = core.next_request()
    assert join is not None and join.body is not None and join.body["member_id"] == "mine"
    leave = core.leave()  # the join's answer never came: leave anyway (idempotent)
    assert leave is not None and leave.path == "/v1/groups/g/members/mine"
    assert core.generation == 0  # it never was a member: no generation ended


def test_a_member_without_an_id_has_nothing_to_leave():
    core = GroupMemberCore("g", ["t"])
    assert core.leave() is None


def test_a_loss_and_a_leave_end_one_generation_each_only_when_there_is_one():
    core = GroupMemberCore("g", ["t"])
    join = core.next_request()
    assert join is not None
    core.on_answer(join, HeartbeatAnswer("m1", 1, 50, 3_000, BOTH))
    assert core.generation == 0
    assert core.lose() == BOTH and core.generation == 1
    core.dropped()
    core.leave()  # right after the loss (the client's poll timeout): nothing more ends
    assert core.generation == 1


def test_a_changed_subscription_rides_on_the_next_heartbeat_once():
    core = GroupMemberCore("g", ["t"])
    join = core.next_request()
    assert join is not None
    core.on_answer(join, HeartbeatAnswer("m1", 1, 50, 3_000, frozenset()))
    assert not core.subscribe(["t"])
    assert core.subscribe(["u", "t"])
    first, second = core.next_request(), core.next_request()
    assert first is not None and first.body is not None and second is not None
    assert first.body["subscribed_topics"] == ["t", "u"]
    assert "subscribed_topics" not in (second.body or {})


def test_join_options_are_sent_only_when_set():
    core = GroupMemberCore("g", ["t"], client_id="c", assignor="range", rebalance_timeout_ms=9_000)
    join = core.next_request()
    assert join is not None and join.body is not None
    assert join.body["assignor"] == "range" and join.body["rebalance_timeout_ms"] == 9_000
    bare = GroupMemberCore("g", ["t"]).next_request()
    assert bare is not None and set(bare.body or {}) == {"subscribed_topics", "sequence"}


def test_the_clients_session_bound_only_shortens_the_coordinators():
    core = GroupMemberCore("g", ["t"], session_timeout_ms=500)
    join = core.next_request()
    assert join is not None
    core.on_answer(join, HeartbeatAnswer("m1", 1, 50, 2_000, frozenset()), sent_at=100.0)
    assert core.session_deadline == 100.5
    assert core.session_timeout_ms == 2_000
    core.lose()
    assert core.session_deadline is None


def test_reconcile_takes_new_partitions_and_gives_up_missing_ones():
    owned = BOTH
    plan = reconcile(owned, frozenset(), frozenset({T1, T2}))
    assert plan.added == {T2} and plan.revoked == {T0}
    # A partition already being given up is not revoked twice, nor re-added.
    again = reconcile(owned, frozenset({T0}), BOTH)
    assert again.added == frozenset() and again.revoked == frozenset() and not again


def test_session_deadline_never_outlives_the_coordinators_session():
    assert session_deadline(100.0, 2_000, None) == 102.0
    assert session_deadline(100.0, 2_000, 500) == 100.5
    assert session_deadline(100.0, 2_000, 9_000) == 102.0


def test_wire_shapes():
    tps = {T1, T0, TopicPartition("u", 3)}
    assert partitions_json(tps) == {"t": [0, 1], "u": [3]}
    assert commit_body("", 0, {T0: 5}) == {
        "member_id": "",
        "offsets": [{"topic": "t", "partition": 0, "offset": 5}],
    }
    assert commit_body("m", 3, {T0: 5})["member_epoch"] == 3
    assert member_path("a/b", "{m}", "/heartbeat") == "/v1/groups/a%2Fb/members/%7Bm%7D/heartbeat"


def test_a_heartbeat_answer_is_parsed_and_extra_fields_are_ignored():
    doc = {
        "group_id": "g",
        "member_id": "m1",
        "member_epoch": 4,
        "heartbeat_interval_ms": 100,
        "session_timeout_ms": 3_000,
        "assignment": partitions_json({T0, TopicPartition("u", 3)}),
    }
    answer = parse_heartbeat(doc, BadAnswer)
    assert answer == HeartbeatAnswer("m1", 4, 100, 3_000, frozenset({T0, TopicPartition("u", 3)}))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"member_epoch": "4"}, "member_epoch"),
        ({"heartbeat_interval_ms": 0}, "heartbeat_interval_ms"),
        ({"assignment": {"t": [-1]}}, "assignment"),
        ({"assignment": ["t"]}, "assignment"),
        ({"member_id": None}, "member_id"),
        ({"session_timeout_ms": None}, "session_timeout_ms"),
    ],
)
def test_a_malformed_heartbeat_answer_is_the_callers_error(change, named):
    doc = {
        "member_id": "m1",
        "member_epoch": 4,
        "heartbeat_interval_ms": 100,
        "session_timeout_ms": 3_000,
        "assignment": {},
        **change,
    }
    with pytest.raises(BadAnswer, match=named):
        parse_heartbeat(doc, BadAnswer)
    missing = {k: v for k, v in doc.items() if k != named}
    with pytest.raises(BadAnswer, match=named):
        parse_heartbeat(missing, BadAnswer)
