"""Reports where this broker's replicas end, for partitions whose election
waits for log ends: unclean recovery, and unclean elections among several
replicas (lograft/quorum/unclean_recovery.py, KIP-966).

Every `interval` while the broker is unfenced, it names each partition it
hosts that the metadata shows awaiting such an election
(`unclean_recovery.awaiting_log_ends`, the controller's own rule), with its
replica's (last epoch, log end offset), to the active controller. Offline
partitions take no writes, so the figures hold still; sending them again each
interval is what lets a newly active controller (whose soft state starts
empty) recover them, and is cheap: only such partitions are named, and there
are none in a healthy cluster, when no request is sent at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import LograftError
from lograft.node.broker_agent import BrokerAgent
from lograft.node.controller_client import ControllerClient
from lograft.protocol import controller_wire as w
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.image import MetadataImage, PartitionState
from lograft.quorum.unclean_recovery import LOG_ENDS_PER_REQUEST_MAX, awaiting_log_ends

log = logging.getLogger(__name__)


def awaiting_here(broker_id: int, image: MetadataImage) -> list[PartitionState]:
    """The partitions with a replica on this broker whose election waits for
    log ends."""
    return [p for p in awaiting_log_ends(image) if broker_id in p.replicas]


def pending_log_ends(
    broker_id: int,
    image: MetadataImage,
    replicas: ReplicaManager,
    awaiting: list[PartitionState] | None = None,
) -> list[w.ReplicaLogEndItem]:
    """This broker's replicas of partitions that need recovery by log end
    (`awaiting`: `awaiting_here(broker_id, image)`, when already known)."""
    items = []
    if awaiting is None:
        awaiting = awaiting_here(broker_id, image)
    for p in awaiting:
        topic = image.topics.get(p.topic_id)
        if topic is not None:
            part = replicas.partitions.get(TopicPartition(topic.name, p.partition))
            if part is None:
                continue  # its log is not open (yet, or it failed): nothing to vouch for
            items.append(
                w.ReplicaLogEndItem(
                    topic_id=p.topic_id,
                    partition=p.partition,
                    last_epoch=part.log.epochs.latest_epoch,
                    end_offset=part.log.log_end_offset,
                )
            )
    return items


class LogEndReporter:
    def __init__(
        self,
        broker_id: int,
        image: Callable[[], MetadataImage],
        agent: BrokerAgent,
        replicas: ReplicaManager,
        client: ControllerClient,
        interval_ms: int,
    ) -> None:
        self.broker_id = broker_id
        self.image = image
        self.agent = agent
        self.replicas = replicas
        self.client = client
        self.interval_ms = interval_ms
        # The image last walked and what awaits in it (see module doc).
        self._walked: tuple[MetadataImage, list[PartitionState]] | None = None
        self.walks = 0  # images walked, for tests

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)  # the report period
            try:
                await self.report_once()
            except LograftError as exc:
                log.debug("log end report failed: %s", exc.message)

    async def report_once(self) -> int:
        """Send this broker's pending log ends; the partitions the controller
        elected a leader for in answer."""
        if not self.agent.unfenced:
            return 0
        image = self.image()
        if self._walked is None or self._walked[0] is not image:
            self._walked = (image, awaiting_here(self.broker_id, image))
            self.walks += 1
        awaiting = self._walked[1]
        if not awaiting:
            return 0
        items = pending_log_ends(self.broker_id, image, self.replicas, awaiting)
        elected = 0
        for start in range(0, len(items), LOG_ENDS_PER_REQUEST_MAX):
            request = w.ReportLogEndsRequest(
                broker_id=self.broker_id,
                broker_epoch=self.agent.broker_epoch,
                log_ends=items[start : start + LOG_ENDS_PER_REQUEST_MAX],
            )
            answer = await self.client.send("report-log-ends", request, w.ReportLogEndsResponse)
            elected += answer.elected
        if elected:
            log.info(
                "broker %d: its log end report let %d partitions elect", self.broker_id, elected
            )
        return elected
