"""The consumer's group side against a scripted coordinator (no sockets):
re-discovery of a moved coordinator, fencing (everything dropped, on_lost,
rejoin with the same member id), the order of a revocation (commit, then
on_revoke, then the heartbeat that gives the partition up). The member's pure
decisions are tested on their own in tests/unit/protocol/test_group_member.py."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from lograft.client import AsyncConsumer, NoOffsetForPartitionError, TopicPartition
from lograft.client.errors import NetworkError
from lograft.client.transport import HttpResponse
from lograft.protocol.group_wire import partitions_json
from tests.raft_support import eventually_async
from tests.unit.client.fakes import (
    Call,
    ScriptedTransport,
    brokers_doc,
    error_response,
    json_response,
    topic_doc,
)

A, B = "http://a:1", "http://b:2"
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
FAST = {"retry_backoff_ms": 5, "retry_backoff_max_ms": 10, "auto_offset_reset": "earliest"}
WAIT_S = 10.0


class FakeCoordinator:
    """Any node says `coordinator`; the coordinator answers joins and
    heartbeats with `assignment` and records every group request in order."""

    def __init__(self, assignment: set[TopicPartition]) -> None:
        self.coordinator = A
        self.assignment = assignment
        self.epoch = 0
        self.log: list[tuple[str, Any]] = []  # (kind, body), in arrival order
        # (kind, error code, status): the next request of that kind gets this error.
        self.script: list[tuple[str, str, int]] = []
        self.committed: dict[TopicPartition, int] = {}

    def forced(self, kind: str, call: Call) -> HttpResponse | None:
        for i, (k, code, status) in enumerate(self.script):
            if k == kind:
                del self.script[i]
                return error_response(call, status, code, status >= 500)
        return None

    def answer(self, call: Call) -> HttpResponse:
        self.epoch += 1
        return json_response(
            call,
            {
                "group_id": "g",
                "member_id": "m1",
                "member_epoch": self.epoch,
                "heartbeat_interval_ms": 10,
                "session_timeout_ms": 10_000,
                "assignment": partitions_json(self.assignment),
            },
        )

    def __call__(self, call: Call) -> HttpResponse:
        path = call.path
        if path == "/v1/brokers":
            return json_response(call, brokers_doc({1: A, 2: B}))
        if path == "/v1/topics/t":
            return json_response(call, topic_doc("t", [1, 1]))
        if path.endswith("/offsets") and path.startswith("/v1/topics/"):
            return json_response(call, {"earliest": 0, "latest": 0})
        if path.endswith("/records"):
            # No records: a retriable answer makes the fetcher back off.
            return error_response(call, 503, "LEADER_NOT_AVAILABLE", True)
        if path == "/v1/groups/g/coordinator":
            self.log.append(("lookup", call.base))
            return json_response(call, {"coordinator_url": self.coordinator})
        kind = {
            ("POST", "/v1/groups/g/members"): "join",
            ("POST", "/v1/groups/g/members/m1/heartbeat"): "heartbeat",
            ("DELETE", "/v1/groups/g/members/m1"): "leave",
            ("POST", "/v1/groups/g/offsets"): "commit",
            ("GET", "/v1/groups/g/offsets"): "fetch",
        }[(call.method, path)]
        body = orjson.loads(call.data) if call.data else None
        self.log.append((kind, body))
        forced = self.forced(kind, call)
        if forced is not None:
            return forced
        assert call.base == self.coordinator, f"{kind} sent to {call.base}"
        if kind == "commit":
            assert body is not None
            for o in body["offsets"]:
                self.committed[TopicPartition(o["topic"], o["partition"])] = o["offset"]
            return json_response(call, {"group_id": "g", "offsets": body["offsets"]})
        if kind == "fetch":
            offsets = [
                {"topic": tp.topic, "partition": tp.partition, "offset": off}
                for tp, off in self.committed.items()
            ]
            return json_response(call, {"group_id": "g", "offsets": offsets})
        return self.answer(call)

    def kinds(self) -> list[str]:
        return [k for k, _b in self.log]


async def poll_until(consumer: AsyncConsumer, condition: Any, what: str) -> None:
    async def step() -> bool:
        await consumer.poll(timeout_ms=10)
        return bool(condition())

    await eventually_async(step, WAIT_S, what)


async def test_moved_coordinator_is_followed_and_looked_up_again():
    fake = FakeCoordinator({T0})
    fake.coordinator = B
    hint = {"coordinator_url": B, "coordinator_id": 2, "group_id": "g", "partition": 0}
    stale_lookups = iter([A])  # the first lookup names A, which no longer coordinates

    def handler(call: Call) -> HttpResponse:
        if call.path == "/v1/groups/g/coordinator":
            fake.log.append(("lookup", call.base))
            return json_response(call, {"coordinator_url": next(stale_lookups, B)})
        if call.base == A and call.path.startswith("/v1/groups/g/members"):
            fake.log.append(("join@A", None))
            return error_response(call, 421, "NOT_COORDINATOR", True, **hint)
        return fake(call)

    # B's first heartbeat answer: still loading after a failover.
    fake.script.append(("heartbeat", "COORDINATOR_LOAD_IN_PROGRESS", 503))
    consumer = AsyncConsumer(A, group_id="g", transport=ScriptedTransport(handler), **FAST)
    await consumer.start()
    consumer.subscribe(["t"])
    await poll_until(consumer, lambda: consumer.assignment() == {T0}, "T0 assigned")
    await eventually_async(lambda: fake.kinds().count("heartbeat") >= 2, WAIT_S, "heartbeats")
    kinds = fake.kinds()
    assert kinds[:3] == ["lookup", "join@A", "join"]  # the hint is used without a lookup
    first_hb = kinds.index("heartbeat")
    # Load in progress: the member asked again who coordinates before retrying.
    assert "lookup" in kinds[first_hb : kinds.index("heartbeat", first_hb + 1)]
    await consumer.close()
    assert fake.kinds()[-1] == "leave"


async def test_fenced_member_drops_everything_calls_on_lost_and_rejoins_with_its_id():
    fake = FakeCoordinator({T0, T1})
    transport = ScriptedTransport(fake)
    lost: list[list[TopicPartition]] = []
    revoked: list[list[TopicPartition]] = []
    consumer = AsyncConsumer(A, group_id="g", transport=transport, **FAST)
    await consumer.start()
    consumer.subscribe(["t"], on_lost=lost.append, on_revoke=revoked.append)
    await poll_until(consumer, lambda: consumer.assignment() == {T0, T1}, "both assigned")
    joins = fake.kinds().count("join")
    fake.script.append(("heartbeat", "FENCED_MEMBER_EPOCH", 409))
    await poll_until(consumer, lambda: lost, "on_lost")
    assert lost == [[T0, T1]] and not revoked  # lost, not revoked: nothing was committed
    await eventually_async(lambda: fake.kinds().count("join") > joins, WAIT_S, "rejoin")
    rejoin = [b for k, b in fake.log if k == "join"][-1]
    assert rejoin["member_id"] == "m1"
    await poll_until(consumer, lambda: consumer.assignment() == {T0, T1}, "assigned again")
    await consumer.close()


async def test_revocation_commits_then_calls_on_revoke_then_gives_the_partition_up():
    fake = FakeCoordinator({T0, T1})
    transport = ScriptedTransport(fake)
    seen_in_callback: list[tuple[list[TopicPartition], list[str]]] = []
    consumer = AsyncConsumer(A, group_id="g", transport=transport, **FAST)

    def on_revoke(tps: list[TopicPartition]) -> None:
        # What the coordinator had received when the callback ran.
        if seen_in_callback:
            return  # close revokes the rest; this test is about the rebalance
        owned_lists = [b["owned_partitions"] for k, b in fake.log if k == "heartbeat"]
        seen_in_callback.append((tps, fake.kinds()))
        # Not given up yet: every heartbeat so far still lists t-1.
        assert owned_lists and owned_lists[-1] == {"t": [0, 1]}

    await consumer.start()
    consumer.subscribe(["t"], on_revoke=on_revoke)
    await poll_until(consumer, lambda: consumer.assignment() == {T0, T1}, "both assigned")
    consumer.seek(T1, 7)  # a consumed position to commit
    consumer.seek(T0, 3)
    fake.assignment = {T0}
    await poll_until(consumer, lambda: seen_in_callback, "on_revoke")
    tps, kinds_then = seen_in_callback[0]
    assert tps == [T1]
    assert "commit" in kinds_then
    assert fake.committed == {T1: 7}  # only the partition given up, before the callback
    assert consumer.assignment() == {T0}

    def released() -> bool:
        beats = [b for k, b in fake.log if k == "heartbeat"]
        return beats[-1]["owned_partitions"] == {"t": [0]}

    await eventually_async(released, WAIT_S, "a heartbeat without t-1")
    await consumer.close()
    assert fake.committed == {T1: 7, T0: 3}  # close commits the rest


@pytest.mark.parametrize("reset", ["earliest", "none"])
async def test_a_new_partition_starts_at_its_committed_offset(reset):
    fake = FakeCoordinator({T0, T1})
    fake.committed = {T0: 42}
    transport = ScriptedTransport(fake)
    settings = {**FAST, "auto_offset_reset": reset}
    consumer = AsyncConsumer(A, group_id="g", transport=transport, **settings)
    await consumer.start()
    consumer.subscribe(["t"])
    if reset == "earliest":
        await poll_until(consumer, lambda: consumer.assignment() == {T0, T1}, "assigned")
        assert await consumer.position(T1) == 0
    else:

        async def refused() -> bool:
            try:
                await consumer.poll(timeout_ms=10)
            except NoOffsetForPartitionError as exc:
                return "t-1" in str(exc)
            return False

        await eventually_async(refused, WAIT_S, "t-1 has no offset")
    assert await consumer.position(T0) == 42
    await consumer.close()


async def test_no_answered_heartbeat_for_the_session_drops_the_partitions():
    fake = FakeCoordinator({T0})
    cut = [False]

    def handler(call: Call) -> HttpResponse:
        if cut[0] and call.path.startswith("/v1/groups/"):
            raise NetworkError(f"could not connect to {call.url} (scripted)", sent=False)
        resp = fake(call)
        if call.path.endswith("/members") or call.path.endswith("/heartbeat"):
            doc = orjson.loads(resp.body)
            doc["session_timeout_ms"] = 300  # the coordinator's session, short for the test
            return json_response(call, doc)
        return resp

    lost: list[list[TopicPartition]] = []
    consumer = AsyncConsumer(A, group_id="g", transport=ScriptedTransport(handler), **FAST)
    await consumer.start()
    consumer.subscribe(["t"], on_lost=lost.append)
    await poll_until(consumer, lambda: consumer.assignment() == {T0}, "assigned")
    cut[0] = True
    started = asyncio.get_running_loop().time()
    await poll_until(consumer, lambda: lost, "on_lost")
    waited = asyncio.get_running_loop().time() - started
    assert lost == [[T0]] and not consumer.assignment()
    # Not at the first failed heartbeat: when the session (from the last
    # answered one, at most one 10 ms interval before the cut) ran out.
    assert 0.2 <= waited < 0.3 + 5.0, waited
    await consumer.close(timeout_ms=100)


async def test_a_loss_during_a_revocations_commit_abandons_it_and_calls_on_lost():
    fake = FakeCoordinator({T0, T1})

    def handler(call: Call) -> HttpResponse:
        if call.method == "POST" and call.path == "/v1/groups/g/offsets":
            # The coordinator cannot take commits; meanwhile it fences the member.
            if not fake.script:
                fake.script.append(("heartbeat", "FENCED_MEMBER_EPOCH", 409))
            fake.log.append(("commit-refused", None))
            return error_response(call, 503, "COORDINATOR_LOAD_IN_PROGRESS", True)
        return fake(call)

    lost: list[list[TopicPartition]] = []
    revoked: list[list[TopicPartition]] = []
    # A minute of retries would be allowed for the commit on its own.
    consumer = AsyncConsumer(
        A, group_id="g", transport=ScriptedTransport(handler), default_api_timeout_ms=60_000, **FAST
    )
    await consumer.start()
    consumer.subscribe(["t"], on_revoke=revoked.append, on_lost=lost.append)
    await poll_until(consumer, lambda: consumer.assignment() == {T0, T1}, "both assigned")
    consumer.seek(T1, 7)  # a position the revocation will try to commit
    fake.assignment = {T0}
    started = asyncio.get_running_loop().time()
    await poll_until(consumer, lambda: lost, "on_lost")
    assert asyncio.get_running_loop().time() - started < 10.0  # not the commit's minute
    assert "commit-refused" in fake.kinds()
    assert lost == [[T0, T1]] and revoked == []  # the revocation was abandoned, not completed
    await consumer.close(timeout_ms=100)
