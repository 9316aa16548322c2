"""Committing and reading a group's offsets through its coordinator.

A committed offset is the next offset to consume. A member commits with its
member id and epoch (the coordinator refuses an old or unknown one, so a
member that was fenced cannot overwrite the commits of the partitions' new
owner); a consumer that is not a member commits with an empty id, which the
coordinator allows only while the group has no members.

Commits run one at a time, in the order they were asked for, so a slower
older commit can never land after a newer one and move an offset back.

Loop-bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from lograft.client.coordinator import CoordinatorClient
from lograft.client.errors import ClientTimeoutError, CommitFailedError, UnexpectedResponseError
from lograft.client.membership import GroupMembership
from lograft.errors import StaleMemberEpochError
from lograft.protocol.group_wire import (
    JOIN_EPOCH,
    REJOIN_ERRORS,
    commit_body,
    group_path,
    parse_committed,
)
from lograft.protocol.topic_partition import TopicPartition


class OffsetCommitter:
    def __init__(
        self,
        coordinator: CoordinatorClient,
        membership: Callable[[], GroupMembership | None],
    ) -> None:
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self._membership = membership
        self._lock = asyncio.Lock()
        # What this consumer last committed or read per partition: unchanged
        # positions are not committed again.
        self.last: dict[TopicPartition, int] = {}
        self.commits = 0  # commit requests answered (for tests and stats)

    def changed(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {tp: off for tp, off in positions.items() if self.last.get(tp) != off}

    async def commit(self, offsets: Mapping[TopicPartition, int], deadline: float) -> None:
        """Commit `offsets`, acknowledged once written with acks=all. Retries
        retriable errors until `deadline` (loop time); after STALE_MEMBER_EPOCH
        waits for the next heartbeat and commits with its epoch. Raises
        CommitFailedError when this consumer is no longer a member."""
        if not offsets:
            return
        async with self._lock:
            while True:
                member = self._membership()
                member_id, epoch = "", JOIN_EPOCH
                if member is not None and member.core.joined:
                    member_id, epoch = member.core.member_id, member.core.member_epoch
                try:
                    await self.coordinator.call(
                        "POST",
                        group_path(self.group_id, "/offsets"),
                        body=commit_body(member_id, epoch, offsets),
                        deadline=deadline,
                    )
                except StaleMemberEpochError:
                    if member is None or not await member.wait_answer(deadline):
                        raise
                    continue
                except REJOIN_ERRORS as exc:
                    raise CommitFailedError(
                        f"commit refused ({exc.code}): this consumer is no longer the member "
                        "that owns the partitions; they may have been consumed and committed "
                        "by another member",
                        group_id=self.group_id,
                    ) from exc
                self.commits += 1
                self.last.update(offsets)
                return

    async def fetch(
        self, partitions: Iterable[TopicPartition], deadline: float
    ) -> dict[TopicPartition, int]:
        """The committed offsets of `partitions` (absent: nothing committed)."""
        tps = set(partitions)
        if not tps:
            return {}
        topics = ",".join(sorted({tp.topic for tp in tps}))
        try:
            doc = await self.coordinator.call(
                "GET",
                group_path(self.group_id, "/offsets"),
                params={"topics": topics},
                deadline=deadline,
            )
        except ClientTimeoutError:
            raise ClientTimeoutError(
                f"committed offsets of group {self.group_id} not read in time"
            ) from None
        committed = parse_committed(doc, UnexpectedResponseError)
        found = {tp: off for tp, off in committed.items() if tp in tps}
        self.last.update(found)
        return found
