"""`AsyncAdmin` against scripted answers: where each call goes, what is retried,
and that a change is never sent twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lograft.client import AsyncAdmin, ClusterUnreachableError, OutcomeUnknownError
from lograft.client.errors import NetworkError
from lograft.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from tests.unit.client.fakes import Call, ScriptedTransport, error_response, json_response

A, B = "http://a:1", "http://b:2"
FAST = {"retry_backoff_ms": 1, "retry_backoff_max_ms": 2}


def group_handler(group_path: str, answers: list[Any]):
    """The coordinator is A; calls to the group are answered from `answers`
    (an (status, code) error, a dict, or an exception to raise)."""

    def handler(call: Call):
        if call.path == f"{group_path}/coordinator":
            return json_response(call, {"coordinator_id": 1, "coordinator_url": A + "/"})
        assert call.path.startswith(group_path), call
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, tuple):
            status, code, details = answer
            return error_response(call, status, code, True, **details)
        return json_response(call, answer)

    return handler


def to_group(t: ScriptedTransport) -> list[tuple[str, str]]:
    return [(c.method, c.base) for c in t.calls if not c.path.endswith("/coordinator")]


async def test_group_calls_follow_not_coordinator_and_retry_while_loading():
    t = ScriptedTransport(
        group_handler(
            "/v1/groups/g%2F1",
            [
                (421, "NOT_COORDINATOR", {"coordinator_url": B + "/"}),
                (503, "COORDINATOR_LOAD_IN_PROGRESS", {}),
                {"state": "empty"},
            ],
        )
    )
    async with AsyncAdmin(A, transport=t, **FAST) as admin:
        assert await admin.describe_group("g/1") == {"state": "empty"}
        assert admin.coordinator_url("g/1") == A
    assert to_group(t) == [("GET", A), ("GET", B), ("GET", A)]  # looked up again after loading
    assert len(t.to("/coordinator")) == 2


async def test_group_calls_give_up_at_the_deadline_and_on_other_errors():
    loading = [(503, "COORDINATOR_LOAD_IN_PROGRESS", {})] * 10_000
    t = ScriptedTransport(group_handler("/v1/groups/g", loading))
    async with AsyncAdmin(A, transport=t, default_api_timeout_ms=200, **FAST) as admin:
        started = asyncio.get_running_loop().time()
        with pytest.raises(CoordinatorLoadInProgressError):
            await admin.describe_group("g")
        assert asyncio.get_running_loop().time() - started < 5
    t = ScriptedTransport(group_handler("/v1/groups/g", [(404, "GROUP_ID_NOT_FOUND", {})]))
    async with AsyncAdmin(A, transport=t, **FAST) as admin:
        with pytest.raises(GroupIdNotFoundError):
            await admin.delete_group("g")
    assert len(to_group(t)) == 1


async def test_a_timed_out_change_is_not_repeated_but_a_timed_out_read_is():
    timed_out = (504, "REQUEST_TIMED_OUT", {})
    t = ScriptedTransport(group_handler("/v1/groups/g", [timed_out]))
    async with AsyncAdmin(A, transport=t, **FAST) as admin:
        with pytest.raises(RequestTimedOutError):
            await admin.reset_offsets("g", {"strategy": "earliest", "topics": ["t"]})
    assert to_group(t) == [("POST", A)]
    t = ScriptedTransport(group_handler("/v1/groups/g", [timed_out, {"state": "empty"}]))
    async with AsyncAdmin(A, transport=t, **FAST) as admin:
        assert await admin.describe_group("g") == {"state": "empty"}
    assert len(to_group(t)) == 2


async def test_a_change_whose_answer_was_lost_is_outcome_unknown_not_resent():
    lost = NetworkError("connection reset (scripted)", sent=True)
    t = ScriptedTransport(group_handler("/v1/groups/g", [lost]))
    async with AsyncAdmin(A, transport=t, **FAST) as admin:
        with pytest.raises(OutcomeUnknownError):
            await admin.delete_group("g")
    assert len(to_group(t)) == 1

    def topics(call: Call):
        if call.base == A:
            raise NetworkError("connection reset (scripted)", sent=True)
        return json_response(call, {"topics": []})

    t = ScriptedTransport(topics)
    async with AsyncAdmin([A, B], transport=t, **FAST) as admin:
        with pytest.raises(OutcomeUnknownError):
            await admin.create_topic("t", partitions=1)  # it may have happened on A
        assert await admin.list_topics() == {"topics": []}  # a read moves on to B
    assert [(c.method, c.base) for c in t.calls] == [("POST", A), ("GET", A), ("GET", B)]


async def test_an_unreachable_cluster_fails_a_group_call_at_once():
    def down(call: Call):
        raise NetworkError(f"could not connect to {call.url} (scripted)", url=call.url, sent=False)

    t = ScriptedTransport(down)
    async with AsyncAdmin([A, B], transport=t, default_api_timeout_ms=60_000, **FAST) as admin:
        with pytest.raises(ClusterUnreachableError) as info:
            await admin.describe_group("g")
    assert info.value.details["urls"] == [A, B]
    assert len(t.calls) == 2


async def test_an_error_that_is_the_answer_is_raised_at_once():
    """UNKNOWN_TOPIC_OR_PARTITION is retriable for a consumer, but for an admin
    call it is the answer: no retries until the deadline."""
    unknown = (404, "UNKNOWN_TOPIC_OR_PARTITION", {})
    t = ScriptedTransport(group_handler("/v1/groups/g", [unknown]))
    async with AsyncAdmin(A, transport=t, default_api_timeout_ms=60_000, **FAST) as admin:
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.reset_offsets("g", {"strategy": "earliest", "topics": ["nope"]})
    assert len(to_group(t)) == 1
