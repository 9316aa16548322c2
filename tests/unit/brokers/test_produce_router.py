"""The produce router on its own, with a fake forward transport: which
partitions go to which leader in how many requests, and what each way a
forward can fail becomes for the partitions it carried."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from lograft.brokers.metadata_sync import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.peer_calls import UnreadableAnswer
from lograft.brokers.produce_router import KeylessPartitions, ProduceRouter
from lograft.errors import (
    PeerAddressUnknownError,
    PeerAnswerUnreadableError,
    PeerUnreachableError,
    RequestBytesInflightLimitReachedError,
)
from lograft.protocol.produce_wire import (
    Acks,
    AppendResult,
    PartitionOutcome,
    ProduceRequest,
)
from lograft.protocol.topic_partition import TopicPartition

T = TypeVar("T")


class Transport:
    """Records each forwarded request; answers as told."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.sent: list[tuple[int, list[int]]] = []

    async def forward_produce(
        self, broker_id: int, view: TopicView, req: ProduceRequest
    ) -> list[PartitionOutcome]:
        self.sent.append((broker_id, [b.partition for b in req.partitions]))
        if self.fail is not None:
            raise self.fail
        return [AppendResult(10, 10 + b.partition, -1) for b in req.partitions]


class Inline:
    async def run(self, fn: Callable[[], T], *, inline: bool = False) -> T:
        return fn()

    def worth_a_thread(self, data: bytes) -> bool:
        return False


class Broker:
    """Broker 1, hosting replicas of `hosted` (partitions of topic t)."""

    broker_id = 1

    def __init__(self, hosted: tuple[int, ...] = ()) -> None:
        self.partitions = {TopicPartition("t", p): object() for p in hosted}


def router(
    transport: Transport,
    forward_request_bytes_max: int = 1 << 20,
    *,
    hosted: tuple[int, ...] = (),
    keyless_partitions: KeylessPartitions = "local",
) -> ProduceRouter:
    return ProduceRouter(
        Broker(hosted),  # type: ignore[arg-type]
        transport,
        Inline(),
        lambda b: f"http://broker-{b}",
        produce_decompressed_bytes_max=1 << 20,
        forward_request_bytes_max=forward_request_bytes_max,
        keyless_partitions=keyless_partitions,
    )


def topic(leaders: list[int]) -> TopicView:
    return TopicView(
        "t",
        "id-t",
        {p: Assignment((2, 3), (2, 3), leader, 0, 0) for p, leader in enumerate(leaders)},
    )


async def test_one_request_per_leader_carries_all_its_partitions() -> None:
    transport = Transport()
    batches = {0: b"a", 1: b"b", 2: b"c"}
    out = await router(transport).produce(topic([2, 3, 2]), batches, Acks.ALL)
    assert sorted(transport.sent) == [(2, [0, 2]), (3, [1])]
    assert {p: o.first_offset for p, o in out.items()} == {0: 10, 1: 10, 2: 10}  # type: ignore[union-attr]


async def test_a_request_past_the_leaders_body_limit_is_cut() -> None:
    transport = Transport()
    batches = {p: b"x" * 600 for p in range(4)}
    await router(transport, forward_request_bytes_max=2_400).produce(
        topic([2, 2, 2, 2]), batches, Acks.ALL
    )
    # 2,400 bytes less the request's overhead hold two batches and their headers.
    assert transport.sent == [(2, [0, 1]), (2, [2, 3])]


@pytest.mark.parametrize(
    ("fail", "code", "retriable"),
    [
        (PeerAddressUnknownError("no address"), "NOT_LEADER_OR_FOLLOWER", True),
        (PeerUnreachableError("refused"), "LEADER_NOT_AVAILABLE", True),
        (PeerAnswerUnreadableError("a proxy", status=502), "UNKNOWN_SERVER_ERROR", False),
        (UnreadableAnswer("not a partitions list"), "UNKNOWN_SERVER_ERROR", False),
        (
            RequestBytesInflightLimitReachedError("busy"),
            "REQUEST_BYTES_INFLIGHT_LIMIT_REACHED",
            True,
        ),
    ],
)
async def test_a_failed_forward_fails_each_of_its_partitions(
    fail: Exception, code: str, retriable: bool
) -> None:
    out: dict[int, Any] = await router(Transport(fail)).produce(
        topic([2, 2]), {0: b"a", 1: b"b"}, Acks.ALL
    )
    assert [(o.code, o.retriable) for o in out.values()] == [(code, retriable)] * 2
    # A fresh error each: the produce answer may extend one's details.
    assert out[0] is not out[1]


async def test_a_partition_without_a_leader_is_not_sent() -> None:
    transport = Transport()
    out: dict[int, Any] = await router(transport).produce(topic([-1]), {0: b"a"}, Acks.ALL)
    assert transport.sent == []
    assert out[0].code == "LEADER_NOT_AVAILABLE"


# -- keyless records ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("leaders", "hosted", "choices"),
    [
        # Broker 1 leads and hosts 1 and 3: only those.
        ([2, 1, 3, 1], (0, 1, 3), (1, 3)),
        # It leads 1 but hosts no replica of it (not applied yet): as if it led none.
        ([2, 1, 3], (0,), (0, 1, 2)),
        # It leads none: every partition with a leader (2 has none).
        ([2, 3, -1, 3], (0, 1), (0, 1, 3)),
        # No partition has a leader: any (the leaderless answer is the leader's).
        ([-1, -1], (0, 1), None),
    ],
)
def test_keyless_records_go_to_partitions_led_here_when_there_are_any(
    leaders: list[int], hosted: tuple[int, ...], choices: tuple[int, ...] | None
) -> None:
    assert router(Transport(), hosted=hosted).keyless_choices(topic(leaders)) == choices


def test_rule_all_spreads_keyless_records_over_every_partition() -> None:
    r = router(Transport(), hosted=(0, 1), keyless_partitions="all")
    assert r.keyless_choices(topic([1, 1, 2])) is None


def test_keyless_choices_follow_a_new_view_of_the_topic() -> None:
    r = router(Transport(), hosted=(0, 1, 2))
    before = topic([1, 2, 3])
    assert r.keyless_choices(before) == (0,)
    assert r.keyless_choices(before) == (0,)  # the same view: remembered
    assert r.keyless_choices(topic([2, 1, 1])) == (1, 2)  # leadership moved


def test_an_unknown_keyless_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="keyless_partitions"):
        router(Transport(), keyless_partitions="sticky")  # type: ignore[arg-type]
