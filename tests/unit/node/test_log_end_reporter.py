"""The log end reporter (node/log_end_reporter.py): it names the partitions
awaiting an election by log end, and walks each metadata image's partitions
once, not every interval."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lograft.node.log_end_reporter import LogEndReporter
from lograft.protocol import controller_wire as w
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.quorum.test_eligible_leader_replicas import three_replicas
from tests.unit.quorum.test_unclean_recovery import lagging_followers_then_leader_dies


class Controller:
    def __init__(self) -> None:
        self.sent: list[w.ReportLogEndsRequest] = []

    async def send(self, name: str, request: Any, answer: type) -> Any:
        assert name == "report-log-ends"
        self.sent.append(request)
        return SimpleNamespace(elected=0)


def reporter(image: Any, broker: int, partitions: dict) -> tuple[LogEndReporter, Controller]:
    controller = Controller()
    agent = SimpleNamespace(unfenced=True, broker_epoch=7)
    replicas = SimpleNamespace(partitions=partitions)
    return (
        LogEndReporter(broker, lambda: image[0], agent, replicas, controller, 100),  # type: ignore[arg-type]
        controller,
    )


def replica(last_epoch: int, end: int) -> Any:
    return SimpleNamespace(
        log=SimpleNamespace(epochs=SimpleNamespace(latest_epoch=last_epoch), log_end_offset=end)
    )


async def test_a_healthy_image_is_walked_once_and_sends_nothing() -> None:
    cluster, _topic_id, (a, _b, _c) = three_replicas()
    r, controller = reporter([cluster.image], a, {TopicPartition("t", 0): replica(0, 10)})
    for _ in range(5):
        assert await r.report_once() == 0
    assert r.walks == 1 and controller.sent == []


async def test_an_awaiting_partition_is_reported_every_interval_until_the_image_changes() -> None:
    cluster, topic_id, (_a, b, _c) = lagging_followers_then_leader_dies()
    image = [cluster.image]
    r, controller = reporter(image, b, {TopicPartition("t", 0): replica(3, 140)})
    await r.report_once()
    await r.report_once()
    assert r.walks == 1
    assert len(controller.sent) == 2  # sent again each interval (a new controller forgets)
    (item,) = controller.sent[-1].log_ends
    assert (item.topic_id, item.partition, item.last_epoch, item.end_offset) == (
        topic_id,
        0,
        3,
        140,
    )
    image[0] = three_replicas()[0].image  # a new image where nothing awaits
    await r.report_once()
    assert r.walks == 2 and len(controller.sent) == 2
